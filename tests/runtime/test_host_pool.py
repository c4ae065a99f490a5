"""The local executor's host pool: host devices are run by whichever pool thread holds them.

What a user relies on, whatever thread runs a task: each device runs its tasks one at a time in
plan order, the kernel sees its own device as the current one, independent devices still run at
once, a failing or timed-out task stops its dependants and is named in the error. And what the
pool is for: a chain that alternates between devices is not handed from thread to thread.
"""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

from streammap.errors import KernelError
from streammap.runtime import run_plan
from streammap.runtime.guard import KernelTimeout
from tests.helpers.fake_cupy import make_fake_cupy
from tests.helpers.plans import cpu_devices, make_plan, ref, task

PROG = """
import json
import threading
import time

from streammap.runtime.context import current_device

SEEN = []                    # (tag, device id the kernel sees, thread id)
RUNNING = {}                 # device id -> tasks running on it now
OVERLAPS = []
BARRIER = threading.Barrier(2, timeout=5)
LOCK = threading.Lock()

def step(tag, *deps):
    dev = current_device().id
    with LOCK:
        RUNNING[dev] = RUNNING.get(dev, 0) + 1
        if RUNNING[dev] > 1:
            OVERLAPS.append((tag, dev))
    time.sleep(0.001)
    SEEN.append((tag, dev, threading.get_ident()))
    with LOCK:
        RUNNING[dev] -= 1
    return tag

def meet(tag):
    BARRIER.wait()           # returns only when a task on another device is running at once
    return tag

def broken(*deps):
    raise ValueError("broken on purpose")

def hang(*deps):
    time.sleep(5)

def report(*deps):
    return json.dumps({"seen": SEEN, "overlaps": OVERLAPS})
"""


def devices(n):
    return [d["id"] for d in cpu_devices(n)]


def alternating(n_tasks, devs, *, bad=None, kernel_of=None):
    """``c0 .. c{n-1}``: each uses the previous one, round-robin over ``devs``; then ``end``."""
    tasks = []
    for k in range(n_tasks):
        kernel = (kernel_of or {}).get(k, "broken" if k == bad else "step")
        args = (f"c{k}",) if kernel == "step" else ()
        tasks.append(task(f"c{k}", kernel, devs[k % len(devs)], *args, *([ref(f"c{k - 1}")] if k else [])))
    tasks.append(task("end", "report", devs[0], ref(f"c{n_tasks - 1}")))
    return tasks


def run(tmp_path, tasks, devs, **kw):
    plan = make_plan(tmp_path, PROG, tasks, devices=cpu_devices(len(devs)), outputs=ref("end"))
    return run_plan(plan, progress=False, telemetry=False, **kw)


def report_of(out):
    return json.loads(out["result"].item())


def test_an_alternating_chain_runs_on_one_thread_each_task_on_its_own_device(tmp_path):
    devs = devices(2)
    report = report_of(run(tmp_path, alternating(40, devs), devs))
    seen = report["seen"]
    assert [tag for tag, _, _ in seen] == [f"c{k}" for k in range(40)]
    assert all(dev == devs[int(tag[1:]) % 2] for tag, dev, _ in seen)     # the kernel sees its device
    assert len({thread for _, _, thread in seen}) == 1                     # no hand-off between threads


def test_devices_with_independent_work_run_at_once(tmp_path):
    # two tasks that each wait until the other is running: on one thread this would time out
    devs = devices(2)
    tasks = [task("a", "meet", devs[0], "a"), task("b", "meet", devs[1], "b"),
             task("end", "report", devs[0], ref("a"), ref("b"))]
    out = run(tmp_path, tasks, devs, outputs_path=tmp_path / "out.npz")
    assert report_of(out) == {"seen": [], "overlaps": []}


def test_a_device_runs_one_task_at_a_time_in_plan_order_whoever_runs_it(tmp_path):
    # a wide fan over 3 devices whose tasks also depend across devices: every thread may hold every device
    devs = devices(3)
    tasks = [task("src", "step", devs[0], "src")]
    for k in range(30):
        deps = [ref("src")] + ([ref(f"w{k - 2}")] if k >= 2 else [])
        tasks.append(task(f"w{k}", "step", devs[k % 3], f"w{k}", *deps))
    tasks.append(task("end", "report", devs[0], *[ref(f"w{k}") for k in range(30)]))
    report = report_of(run(tmp_path, tasks, devs))
    assert report["overlaps"] == []
    for d in devs:
        ran = [tag for tag, dev, _ in report["seen"] if dev == d]
        planned = [t["id"] for t in tasks if t["device"] == d and t["kernel"] == "step"]
        assert ran == planned


def test_a_failing_task_stops_its_dependants_and_is_named(tmp_path):
    devs = devices(2)
    record = tmp_path / "run.json"
    with pytest.raises(KernelError, match="task c5") as info:
        run(tmp_path, alternating(20, devs, bad=5), devs, record_path=record)
    assert info.value.task_id == "c5" and info.value.device == devs[1]
    assert "broken on purpose" in info.value.traceback_text
    tasks = {t["id"]: t for t in json.loads(record.read_text())["tasks"]}
    assert all(tasks[f"c{k}"]["finish"] is not None for k in range(5))
    assert all(tasks[f"c{k}"]["attempts"] == 0 for k in range(6, 20))     # nothing after it ran
    assert tasks["end"]["attempts"] == 0


def test_a_timeout_still_fires_inside_an_alternating_chain(tmp_path):
    devs = devices(2)
    tasks = alternating(6, devs, kernel_of={3: "hang"})
    tasks[3]["timeout"] = 0.2
    with pytest.raises(KernelError, match="task c3") as info:
        run(tmp_path, tasks, devs)
    assert isinstance(info.value.cause, KernelTimeout)


MIXED = """
import numpy as np

def start():
    return np.arange(4.0)

def inc(x):
    return x + 1
"""


def test_a_chain_between_a_gpu_and_host_devices_hands_off_both_ways(tmp_path, monkeypatch):
    # the GPU's thread waits on host tasks' signals; the host pool waits on the GPU's count-downs
    monkeypatch.setitem(sys.modules, "cupy", make_fake_cupy(1))
    devs = [*cpu_devices(2), {"id": "node0/gpu0", "kind": "gpu", "vendor": "nvidia", "index": 0}]
    ids = [d["id"] for d in devs]
    tasks = [task("c0", "start", ids[0])]
    tasks += [task(f"c{k}", "inc", ids[k % 3], ref(f"c{k - 1}")) for k in range(1, 30)]
    plan = make_plan(tmp_path, MIXED, tasks, devices=devs, outputs=ref("c29"))
    out = run_plan(plan, progress=False, telemetry=False)
    np.testing.assert_allclose(out["result"], np.arange(4.0) + 29)
