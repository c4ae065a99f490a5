"""Which threads run a local run's host tasks (issue 16: the alternating chain's per-task cost).

What a user relies on: without a progress bar, ``run_plan`` runs host tasks on the thread that
called it, and starts a pool thread only for a device that becomes ready while the others are
busy (never more than one per host device); independent devices still run at once (see
``test_host_pool.py``), and the calling thread's own current device is as it was after the run. A Ctrl-C that lands in a kernel on that thread stops the run with
``KeyboardInterrupt``, as it did when that thread only waited for the workers: it is not a kernel
error, and it is not retried.
"""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest

from streammap.errors import KernelError
from streammap.runtime import current_device, run_plan
from streammap.runtime.context import set_current_device
from tests.helpers.plans import cpu_devices, make_plan, ref, task

PROG = """
import json
import threading

CALLS = []

def where(*deps):
    CALLS.append(threading.get_ident())
    return len(CALLS)

def report(*deps):
    return json.dumps({"threads": sorted(set(CALLS)), "calls": len(CALLS), "alive": threading.active_count()})

def interrupted(*deps):
    CALLS.append(threading.get_ident())
    if threading.current_thread() is threading.main_thread():
        raise KeyboardInterrupt          # what a Ctrl-C raises in the code the main thread runs
    raise ValueError("not on the main thread")

def start():
    return 0.0

def inc(x):
    return x + 1
"""


def devices(n):
    return [d["id"] for d in cpu_devices(n)]


def chain(n, devs, kernel="where"):
    tasks = [task(f"c{k}", kernel, devs[k % len(devs)], *([ref(f"c{k - 1}")] if k else [])) for k in range(n)]
    tasks.append(task("end", "report", devs[0], ref(f"c{n - 1}")))
    return tasks


def run(tmp_path, tasks, devs, **kw):
    plan = make_plan(tmp_path, PROG, tasks, devices=cpu_devices(len(devs)), outputs=ref("end"))
    return run_plan(plan, progress=False, telemetry=False, **kw)


def test_an_alternating_chain_runs_on_the_calling_thread_and_starts_no_thread(tmp_path):
    devs = devices(3)
    before = threading.active_count()
    report = json.loads(run(tmp_path, chain(30, devs), devs)["result"].item())
    assert report["calls"] == 30
    assert report["threads"] == [threading.get_ident()]
    assert report["alive"] == before                  # no pool thread was started for it


def test_independent_devices_start_at_most_one_pool_thread_per_host_device(tmp_path):
    devs = devices(3)
    tasks = [task("src", "where", devs[0])]
    tasks += [task(f"w{k}", "where", devs[k % 3], ref("src")) for k in range(12)]
    tasks.append(task("end", "report", devs[0], *[ref(f"w{k}") for k in range(12)]))
    report = json.loads(run(tmp_path, tasks, devs)["result"].item())
    assert report["calls"] == 13
    assert threading.get_ident() in report["threads"]
    assert len(report["threads"]) <= len(devs)


def test_the_calling_thread_keeps_its_own_current_device(tmp_path):
    # a run started inside a kernel (a nested run) gives the kernel its device back
    devs = devices(2)
    outer = object()
    set_current_device(outer)
    try:
        run(tmp_path, chain(6, devs), devs)
        assert current_device() is outer
    finally:
        set_current_device(None)


def test_a_ctrl_c_in_a_kernel_on_the_calling_thread_stops_the_run_without_retries(tmp_path):
    devs = devices(2)
    tasks = chain(4, devs)
    tasks[2].update(kernel="interrupted", retries=3)
    record = tmp_path / "run.json"
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path, tasks, devs, record_path=record)
    rows = {t["id"]: t for t in json.loads(record.read_text())["tasks"]}
    assert rows["c2"]["attempts"] == 1                # not retried
    assert rows["c3"]["attempts"] == 0 and rows["end"]["attempts"] == 0
    assert json.loads(record.read_text())["status"] == "failed"


def test_a_kernel_error_on_the_calling_thread_is_still_retried_and_named(tmp_path):
    devs = devices(2)
    tasks = chain(4, devs)
    tasks[2].update(kernel="broken", retries=2)
    plan = make_plan(tmp_path, PROG + "\ndef broken(*deps):\n    raise ValueError('boom')\n",
                     tasks, devices=cpu_devices(2), outputs=ref("end"))
    record = tmp_path / "run.json"
    with pytest.raises(KernelError, match="task c2") as info:
        run_plan(plan, progress=False, telemetry=False, record_path=record)
    assert "boom" in info.value.traceback_text
    rows = {t["id"]: t for t in json.loads(record.read_text())["tasks"]}
    assert rows["c2"]["attempts"] == 3


def test_the_outputs_of_a_long_alternating_chain_are_the_plain_loops(tmp_path):
    devs = devices(2)
    tasks = [task("c0", "start", devs[0])]
    tasks += [task(f"c{k}", "inc", devs[k % 2], ref(f"c{k - 1}")) for k in range(1, 500)]
    plan = make_plan(tmp_path, PROG, tasks, devices=cpu_devices(2), outputs=ref("c499"))
    out = run_plan(plan, progress=False, telemetry=False, record_path=tmp_path / "run.json")
    np.testing.assert_equal(out["result"], 499.0)
    rows = json.loads((tmp_path / "run.json").read_text())["tasks"]
    assert all(r["attempts"] == 1 and r["finish"] >= r["start"] >= 0 for r in rows)
    assert [r["device"] for r in rows] == [devs[k % 2] for k in range(500)]
