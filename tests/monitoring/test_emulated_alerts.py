"""Slow-task alerts and ``--emulate``: an emulated run times the plan's devices on this CPU, so a
task "slower than its estimate" there says nothing about the plan; such a run raises no
slow-task alert unless the alert rules name ``slow_task`` themselves. A real run alerts as before."""

from __future__ import annotations

import pytest

import streammap
from streammap.runrecord import read_run_record
from tests.helpers.paths import SAMPLES

TINY = SAMPLES / "clusters" / "tiny-gpus.yaml"
CPU = {"name": "cpu", "nodes": [{"name": "n0", "devices": [{"name": "cpu", "kind": "cpu", "memory": "8GiB",
                                                              "flops": "10 GFLOP/s", "mem_bandwidth": "10 GB/s"}]}]}

# Six quick tasks give the run its median measured/estimated ratio; the seventh sleeps far past it.
PROGRAM = '''\
import time

import numpy as np


# @stream kernel(flops=1000, out=8)
def quick(i):
    return np.float64(i)


# @stream kernel(flops=1000, out=8)
def slow(*xs):
    time.sleep(0.3)
    return np.float64(sum(xs))


# @stream graph
def main():
    return slow(*[quick(i) for i in range(6)])
'''


def _slow_alerts(tmp_path, cluster, emulate: bool, alerts=None) -> list:
    (tmp_path / "prog.py").write_text(PROGRAM)
    plan = streammap.compile(tmp_path / "prog.py", cluster=cluster, history=False, strategy="none")
    record = tmp_path / "run.json"
    streammap.run(plan, emulate=emulate, progress=False, record=record, alerts=alerts)
    return [a for a in read_run_record(record).alerts if a.kind == "slow_task"]


def test_an_emulated_run_raises_no_slow_task_alert_by_default(tmp_path):
    assert _slow_alerts(tmp_path, str(TINY), emulate=True) == []


@pytest.mark.parametrize("rule", [{"slow_task": 10}, {"slow_task": {"factor": 10, "baseline": "run"}}])
def test_an_emulated_run_alerts_when_the_rules_ask_for_slow_tasks(tmp_path, rule):
    assert [a.kind for a in _slow_alerts(tmp_path, str(TINY), emulate=True, alerts=rule)][:1] == ["slow_task"]


def test_rules_without_slow_task_leave_it_off_under_emulate(tmp_path):
    assert _slow_alerts(tmp_path, str(TINY), emulate=True, alerts={"temperature": 80}) == []


def test_a_real_run_alerts_on_a_slow_task_by_default(tmp_path):
    assert [a.kind for a in _slow_alerts(tmp_path, CPU, emulate=False)][:1] == ["slow_task"]
