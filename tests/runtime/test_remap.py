"""Re-mapping: the slow-device detector, remap_plan, and drain-and-re-plan in the local executor."""

from __future__ import annotations

import textwrap
from collections import Counter

import numpy as np
import pytest

import streammap
from streammap.plan import validate_plan
from streammap.remap import RemapError, SlowDeviceDetector, remap_plan
from streammap.runrecord import read_run_record
from streammap.runtime import LocalExecutor, run_plan
from streammap.runtime.devices import check_devices, make_devices
from streammap.runtime.loader import load_program
from tests.helpers.plans import cpu_devices, make_plan, ref, task

# -- detector --------------------------------------------------------------------------------


def test_uniformly_slow_run_is_not_a_slow_device():
    det = SlowDeviceDetector(factor=2, window=3, min_task_time=0)
    for k in range(30):
        for d in ("a", "b", "c"):
            assert det.observe(d, 0.001, 0.05, f"{d}{k}") is None     # 50x everywhere


def test_a_device_slower_than_the_others_is_found_after_window_tasks():
    det = SlowDeviceDetector(factor=2, window=3, min_task_time=0)
    for k in range(3):
        det.observe("a", 0.001, 0.010)
        det.observe("b", 0.001, 0.011)
    assert det.observe("c", 0.001, 0.06, "c0") is None
    assert det.observe("c", 0.001, 0.012, "c1") is None               # not slow: the streak restarts
    assert det.observe("c", 0.001, 0.06, "c2") is None
    assert det.observe("c", 0.001, 0.06, "c3") is None
    found = det.observe("c", 0.001, 0.066, "c4")
    assert found is not None and found.device == "c" and found.evidence == ["c2", "c3", "c4"]
    assert found.factor == pytest.approx(6.0 / 1.05, rel=0.05)


def test_short_tasks_are_no_evidence():
    det = SlowDeviceDetector(factor=2, window=2, min_task_time=0.001)
    for k in range(5):
        det.observe("a", 1e-5, 0.002)
    for k in range(5):
        assert det.observe("b", 1e-6, 0.0009) is None


# -- remap_plan --------------------------------------------------------------------------------

PROGRAM = """
import time
import numpy as np
from streammap.runtime import current_device

# @stream param
N = 24
SLOW = "node0/gpu1"


# @stream kernel(flops=1e6, out=32)
def source():
    return np.zeros(4)


# @stream kernel(flops=1e10, out=32)
def work(x, k):
    dev = current_device()
    time.sleep(0.03 if dev is not None and dev.id == SLOW else 0.004)
    return x + k


# @stream kernel(flops=1e6, out=32)
def total(*xs):
    out = xs[0].copy()
    for x in xs[1:]:
        out = out + x
    return out


# @stream graph
def main():
    x = source()
    ys = [work(x, k) for k in range(N)]
    return total(*ys)
"""

CLUSTER = {"name": "four", "nodes": [{"name": "node0", "link": {"bandwidth": "300 GB/s", "latency": "3us"},
           "devices": [{"name": f"gpu{i}", "kind": "gpu", "model": "A100", "flops": "19.5 TFLOP/s",
                        "mem_bandwidth": "2 TB/s", "memory": "80GiB"} for i in range(4)]}]}


@pytest.fixture
def program_plan(tmp_path):
    path = tmp_path / "prog.py"
    path.write_text(textwrap.dedent(PROGRAM))
    return streammap.compile(path, cluster=CLUSTER, params={"N": 24}, mapper="heft")


def test_finished_tasks_stay_and_the_slow_device_is_avoided(program_plan):
    plan = program_plan
    assert plan.cluster.spec is not None
    on_slow = [t.id for t in plan.tasks if t.device == "node0/gpu1"]
    assert on_slow
    finished = {t.id: t.device for t in plan.tasks[:6]}
    res = remap_plan(plan, finished, now=0.5, slowdown={"node0/gpu1": 50.0})
    validate_plan(res.plan)
    assert res.ir == "program"
    new = {t.id: t for t in res.plan.tasks}
    for tid, dev in finished.items():
        assert new[tid].device == dev
        assert new[tid].start == next(t.start for t in plan.tasks if t.id == tid)
    assert [t.id for t in res.plan.tasks[:6]] == list(finished)
    rest = [new[t] for t in res.unfinished]
    assert len(rest) == len(plan.tasks) - 6 and all(t.start >= 0.5 for t in rest)
    assert not any(t.device == "node0/gpu1" for t in rest)
    assert {t for t in on_slow if t not in finished} <= set(res.moved)
    assert res.plan.mapper.name == "heft+remap" and res.estimated_makespan == res.plan.mapper.estimated_makespan
    assert res.rerun == [] and res.mapping_time > 0


def test_lost_device_reruns_outputs_still_needed(program_plan):
    plan = program_plan
    src = plan.tasks[0]
    assert src.kernel == "source"
    finished = {src.id: src.device}
    res = remap_plan(plan, finished, now=0.1, lost=[src.device])
    assert res.rerun == [src.id]
    new = {t.id: t for t in res.plan.tasks}
    assert all(t.device != src.device for t in res.plan.tasks)
    assert new[src.id].start >= 0.1


def test_excluded_devices_keep_their_outputs(program_plan):
    plan = program_plan
    src = plan.tasks[0]
    res = remap_plan(plan, [src.id], now=0.0, exclude=["node0/gpu0", "node0/gpu1"])
    assert res.rerun == []
    assert {t.device for t in res.plan.tasks if t.id != src.id} <= {"node0/gpu2", "node0/gpu3"}


def test_no_device_left_is_a_remap_error(program_plan):
    with pytest.raises(RemapError, match="cannot re-map"):
        remap_plan(program_plan, {}, now=0.0, lost=[f"node0/gpu{i}" for i in range(4)])


HAND = """
import numpy as np

def source():
    return np.arange(4.0)

def scale(x, k):
    return x * (k + 1)

def total(*xs):
    return sum(xs)
"""


def test_hand_made_plan_without_cluster_spec_or_directives(tmp_path):
    devs = cpu_devices(3)
    ids = [d["id"] for d in devs]
    tasks = [task("src", "source", ids[0])] + [task(f"s{k}", "scale", ids[k % 3], ref("src"), k) for k in range(6)]
    tasks.append(task("sum", "total", ids[2], *[ref(f"s{k}") for k in range(6)]))
    plan = make_plan(tmp_path, HAND, tasks, devices=devs, outputs=ref("sum"))
    res = remap_plan(plan, {"src": ids[0]}, now=0.01, lost=[ids[1]])
    assert res.ir == "plan"
    assert all(t.device != ids[1] for t in res.plan.tasks)
    validate_plan(res.plan)


# -- the executor: carry over, drain -------------------------------------------------------------

def test_executor_continues_from_carried_results(tmp_path):
    devs = cpu_devices(2)
    ids = [d["id"] for d in devs]
    tasks = [task("src", "source", ids[0])] + [task(f"s{k}", "scale", ids[k % 2], ref("src"), k) for k in range(4)]
    tasks.append(task("sum", "total", ids[1], *[ref(f"s{k}") for k in range(4)]))
    plan = make_plan(tmp_path, HAND, tasks, devices=devs, outputs=ref("sum"))
    program = load_program(plan)
    devices = make_devices(check_devices(plan))
    carry = {"src": (np.arange(4.0), None), "s0": (np.arange(4.0) * 1, None), "s1": (np.arange(4.0) * 2, None)}
    ex = LocalExecutor(plan, program.kernels, devices, carry=carry)
    out = ex.run()
    assert out.error is None and not out.drained
    np.testing.assert_allclose(out.outputs["result"], np.arange(4.0) * 10)
    assert out.attempts[:3] == [0, 0, 0] and all(a == 1 for a in out.attempts[3:])


def test_drain_before_start_runs_nothing(tmp_path):
    devs = cpu_devices(1)
    plan = make_plan(tmp_path, HAND, [task("src", "source", devs[0]["id"])], devices=devs, outputs=ref("src"))
    program = load_program(plan)
    ex = LocalExecutor(plan, program.kernels, make_devices(check_devices(plan)))
    ex.request_drain()
    out = ex.run()
    assert out.drained and out.error is None and out.outputs == {} and ex.held_results() == {}


def test_slow_device_is_drained_and_the_rest_re_mapped(program_plan, tmp_path):
    plan = program_plan
    before = Counter(t.device for t in plan.tasks)
    assert before["node0/gpu1"] >= 5
    alerts = {"remap": {"enabled": True, "factor": 2.0, "window": 2, "min_task_time": 0.002}}
    out = run_plan(plan, emulate=True, progress=False, record_path=tmp_path / "r.json", interval=0.01,
                   alerts=alerts)
    np.testing.assert_allclose(out["result"], np.full(4, sum(range(24))))
    record = read_run_record(tmp_path / "r.json")
    assert record.status == "ok" and len(record.remaps) >= 1
    rm = record.remaps[0]
    assert rm.devices == ["node0/gpu1"] and rm.factors["node0/gpu1"] > 2 and rm.moved >= 1
    assert rm.mapping_time > 0 and rm.unfinished >= rm.moved
    after = Counter(t.device for t in record.tasks)
    assert after["node0/gpu1"] < before["node0/gpu1"]
    moved = [t for t in record.tasks if t.planned_device is not None]
    assert moved and all(t.planned_device != t.device for t in moved)
    assert any(t.planned_device == "node0/gpu1" for t in moved)
    assert all(t.measured is not None for t in record.tasks)
    assert any(a.kind == "slow_device" for a in record.alerts)
    # every task ran once, where the record says
    assert all(t.attempts == 1 for t in record.tasks)


def test_remap_is_off_under_emulate_by_default(program_plan, tmp_path):
    run_plan(program_plan, emulate=True, progress=False, record_path=tmp_path / "r.json", interval=0.01)
    record = read_run_record(tmp_path / "r.json")
    assert record.remaps == [] and all(t.planned_device is None for t in record.tasks)
