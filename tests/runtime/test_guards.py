"""What the runtime guarantees around a kernel call, on every executor: inputs are read-only (a
kernel writing into one fails, naming itself, the argument and the task), a task's ``timeout``
(retried, then a clear error), the opt-in input checksums (``check_inputs``), and a run record
that says so when the run's process ends in the middle of a run."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import textwrap
import threading
import types

import numpy as np
import pytest

import streammap
from streammap.cli import main
from streammap.cluster.model import cluster_from_dict
from streammap.errors import DirectiveError, KernelError, StreamMapError
from streammap.plan import read_plan, write_plan
from streammap.runrecord import read_run_record, write_run_record
from streammap.runtime import run_plan
from streammap.runtime.guard import (
    Deadline,
    InputWritten,
    KernelTimeout,
    checksum,
    declared_at,
    read_only,
    weighted_checksum,
    with_deadline,
    writable,
)
from tests.helpers.fake_cupy import cuda_device_count
from tests.helpers.plans import cpu_devices, gpu_devices, make_plan, ref, task

PROG = """
import time

import numpy as np

def source():
    return np.arange(8.0)

def bump(x):
    x += 1                      # writes into its input
    return x

def bump_item(x):
    x[0] = -1.0
    return x

def add_into(a, b):
    np.add(a, b, out=b)         # the write goes to the second argument
    return b

def bump_copy(x):
    x = x.copy()
    x += 1
    return x

def total(x):
    return float(x.sum())

def sneaky(x):
    x.setflags(write=True)      # gets round the read-only flag: only the checksums see it
    x[1] = 100.0
    return x.sum()

def both(a, b):
    return a + b

STATE = {"acc": None}

def accumulate(x):               # keeps, and returns, an array it updates in place on later calls
    if STATE["acc"] is None:
        STATE["acc"] = np.zeros_like(x)
    STATE["acc"] += x
    return STATE["acc"]

def same(x):
    return x

def own_bug(x):
    y = np.zeros(3)
    y.setflags(write=False)
    y[0] = x[0]                 # the kernel's own read-only array: not an input
    return y

# @stream kernel(flops=1,
#                timeout=0.2)
def hang(x):
    time.sleep(3)
    return x

CALLS = []

# @stream kernel(timeout=0.5, retries=1)
def hang_once(x):
    CALLS.append(1)
    if len(CALLS) == 1:
        time.sleep(3)
    return x * 2
"""


def plan_of(tmp_path, rows, outputs, devices=None, **kw):
    return make_plan(tmp_path, PROG, rows, devices=devices or gpu_devices(4), outputs=outputs, **kw)


def failure(plan, **kw) -> str:
    """The formatted error of a run of ``plan`` that must fail with a :class:`KernelError`."""
    kw.setdefault("progress", False)
    kw.setdefault("telemetry", False)
    with pytest.raises(KernelError) as info:
        run_plan(plan, **kw)
    return info.value.format()


def timed(row, seconds):
    """A task row of the plan with a ``timeout``."""
    return {**row, "timeout": seconds}


# -- inputs are read-only ------------------------------------------------------------------------

@pytest.mark.parametrize("kernel, argument", [("bump", "x"), ("bump_item", "x")])
def test_a_kernel_writing_its_input_fails_naming_the_kernel_the_argument_and_the_task(tmp_path, kernel, argument):
    plan = plan_of(tmp_path, [task("src", "source", "node0/gpu0"), task("w", kernel, "node0/gpu1", ref("src"))],
                   ref("w"))
    with pytest.raises(KernelError) as info:
        run_plan(plan, emulate=True, progress=False)
    err = info.value
    assert err.task_id == "w"
    text = err.format()
    assert f"kernel '{kernel}' wrote into its argument '{argument}' in place, in task w" in text
    assert f"hint: copy first: {argument} = {argument}.copy()" in text
    assert "InputWritten" in text and f"in {kernel}" in text          # the kernel's own frame


def test_the_argument_written_is_named_among_several(tmp_path):
    rows = [task("a", "source", "node0/gpu0"), task("b", "source", "node0/gpu1"),
            task("w", "add_into", "node0/gpu2", ref("a"), ref("b"))]
    assert "wrote into its argument 'b' in place" in failure(plan_of(tmp_path, rows, ref("w")), emulate=True)


def test_a_write_into_the_kernels_own_read_only_array_is_not_blamed_on_an_input(tmp_path):
    rows = [task("src", "source", "node0/gpu0"), task("o", "own_bug", "node0/gpu1", ref("src"))]
    text = failure(plan_of(tmp_path, rows, ref("o")), emulate=True)
    assert "ValueError: assignment destination is read-only" in text and "InputWritten" not in text


def test_the_flaky_in_place_write_is_now_an_error_every_time(tmp_path):
    """The reproduction of issue 15: one result, two consumers on other emulated devices, one of
    which wrote into it; the other saw the change or not, depending on who ran first."""
    rows = [task("src", "source", "node0/gpu0"),
            task("w", "bump", "node0/gpu1", ref("src")),
            task("r", "total", "node0/gpu2", ref("src")),
            task("out", "both", "node0/gpu3", ref("w"), ref("src"))]
    plan = plan_of(tmp_path, rows, {"tuple": [ref("out"), ref("r")]})
    for _ in range(8):
        assert "kernel 'bump' wrote into its argument 'x' in place, in task w" in failure(plan, emulate=True)


def test_the_sharing_executor_hands_out_read_only_inputs_too(tmp_path):
    rows = [task("src", "source", "node0/gpu0"), task("w", "bump", "node0/gpu0", ref("src")),
            task("r", "total", "node0/gpu0", ref("src"))]
    for row in rows:
        row["share"] = 0.5
    plan = plan_of(tmp_path, rows, {"tuple": [ref("w"), ref("r")]})
    from streammap.runtime.shared import needs_sharing_executor
    assert needs_sharing_executor(plan)
    assert "kernel 'bump' wrote into its argument 'x'" in failure(plan, emulate=True)


def test_a_pipeline_stage_writing_its_input_fails_the_same_way(tmp_path):
    source = textwrap.dedent("""
        import numpy as np

        # @stream kernel(flops=1e9, out=64)
        def produce(i):
            return np.full(8, float(i))

        # @stream kernel(flops=1e9, out=64)
        def scale(x):
            x *= 2
            return x

        # @stream pipeline(items=4)
        def stream(i):
            return scale(produce(i))
        """)
    path = tmp_path / "stream.py"
    path.write_text(source)
    cluster = cluster_from_dict({"name": "two", "nodes": [{"name": "n0", "link": {"bandwidth": "300 GB/s", "latency": "3us"},
                                                           "devices": [
        {"name": f"gpu{i}", "kind": "gpu", "memory": "80GiB", "flops": "10 TFLOP/s"} for i in range(2)]}]})
    plan = streammap.compile(path, cluster=cluster, strategy="pipeline")
    assert plan.pipeline is not None
    assert "kernel 'scale' wrote into its argument 'x' in place" in failure(plan, emulate=True)


def test_copying_first_and_updating_the_array_a_kernel_returned_are_fine(tmp_path):
    # bump_copy copies before writing; accumulate updates its own state array, which it returned
    # on the previous call (the consumers got a read-only view of it, the kernel keeps its array)
    rows = [task("src", "source", "node0/cpu"), task("c", "bump_copy", "node0/cpu", ref("src")),
            task("a1", "accumulate", "node0/cpu", ref("src")),
            task("a2", "accumulate", "node0/cpu", ref("c"), deps=["a1"])]
    plan = plan_of(tmp_path, rows, {"tuple": [ref("c"), ref("a2")]}, devices=cpu_devices())
    out = run_plan(plan, progress=False, telemetry=False)
    x = np.arange(8.0)
    np.testing.assert_array_equal(out["result_0"], x + 1)
    np.testing.assert_array_equal(out["result_1"], x + x + 1)


def test_outputs_handed_back_are_writable(tmp_path):
    rows = [task("src", "source", "node0/cpu"), task("s", "same", "node0/cpu", ref("src")),
            task("c", "bump_copy", "node0/cpu", ref("s"))]
    out = run_plan(plan_of(tmp_path, rows, {"tuple": [ref("s"), ref("c")]}, devices=cpu_devices()),
                   progress=False, telemetry=False)
    for value in out.values():
        value *= 2                           # the caller's to change
    np.testing.assert_array_equal(out["result_0"], 2 * np.arange(8.0))
    np.testing.assert_array_equal(out["result_1"], 2 * np.arange(8.0) + 2)


def test_read_only_views_never_copy_and_leave_the_original_writable():
    a = np.arange(4.0)
    pair = read_only((a, [a], {"k": a}, 3))
    for view in (pair[0], pair[1][0], pair[2]["k"]):
        assert not view.flags.writeable and np.shares_memory(view, a)
    assert pair[3] == 3 and a.flags.writeable
    frozen = read_only(pair[0])
    assert frozen is pair[0]                # already read-only: as it is
    assert writable(frozen).flags.writeable
    b = np.frombuffer(bytes(24))              # read-only memory (as Ray's object store hands out)
    c = writable(b)                          # cannot be made writable: a copy
    assert c is not b and c.flags.writeable and not b.flags.writeable


# -- check_inputs: checksums before and after each call ------------------------------------------

def test_check_inputs_names_a_kernel_that_changed_its_input_behind_the_flag(tmp_path):
    rows = [task("src", "source", "node0/gpu0"), task("s", "sneaky", "node0/gpu1", ref("src"))]
    plan = plan_of(tmp_path, rows, ref("s"))
    run_plan(plan, emulate=True, progress=False, telemetry=False)        # unchecked: unseen
    with pytest.raises(KernelError) as info:
        streammap.run(plan, emulate=True, check_inputs=True, telemetry=False)
    text = info.value.format()
    assert info.value.task_id == "s"
    assert "kernel 'sneaky' changed its argument 'x' in place" in text and "copy first: x = x.copy()" in text


def test_check_inputs_passes_kernels_that_leave_their_inputs_alone(tmp_path):
    rows = [task("src", "source", "node0/gpu0"), task("c", "bump_copy", "node0/gpu1", ref("src")),
            task("o", "both", "node0/gpu2", ref("c"), ref("src"))]
    out = run_plan(plan_of(tmp_path, rows, ref("o")), emulate=True, progress=False, telemetry=False,
                   check_inputs=True)
    np.testing.assert_array_equal(out["result"], 2 * np.arange(8.0) + 1)


def test_streammap_run_check_inputs_option(tmp_path, capsys):
    rows = [task("src", "source", "node0/gpu0"), task("s", "sneaky", "node0/gpu1", ref("src"))]
    write_plan(plan_of(tmp_path, rows, ref("s")), tmp_path / "p.yaml")
    assert main(["run", str(tmp_path / "p.yaml"), "--emulate", "--no-history"]) == 0
    assert main(["run", str(tmp_path / "p.yaml"), "--emulate", "--no-history", "--check-inputs"]) == 1
    assert "kernel 'sneaky' changed its argument 'x' in place" in capsys.readouterr().err
    assert read_run_record(tmp_path / "p.out.run.json").status == "failed"


@pytest.mark.parametrize("make", [lambda: np.arange(24.0).reshape(4, 6), lambda: np.arange(24.0).reshape(4, 6)[:, ::2],
                                  lambda: np.arange(7, dtype=np.int8)])
def test_checksums_see_any_change_of_one_element(make):
    a = make()
    for summed in (checksum, lambda x: weighted_checksum(x, np)):   # NumPy's, and CuPy's path run on NumPy
        before = summed(a)
        assert summed(a.copy()) == before
        b = a.copy()
        b.flat[len(b.flat) // 2] += 1
        assert summed(b) != before


# -- timeouts -------------------------------------------------------------------------------------

def test_a_task_past_its_timeout_is_retried_then_fails_naming_kernel_task_timeout_and_clause(tmp_path):
    rows = [task("src", "source", "node0/gpu0"), timed(task("h", "hang", "node0/gpu1", ref("src"), retries=1), 0.2)]
    plan = plan_of(tmp_path, rows, ref("h"))
    with pytest.raises(KernelError) as info:
        run_plan(plan, emulate=True, progress=False, telemetry=False, record_path=tmp_path / "r.run.json")
    text = info.value.format()
    assert info.value.task_id == "h"
    assert "kernel 'hang' ran past its timeout of 0.2 s (timeout= at prog.py:" in text
    line = next(k for k, s in enumerate(PROG.splitlines(), 1) if "timeout=0.2" in s)
    assert f"timeout= at prog.py:{line})" in text                     # the clause's own line
    assert "in task h on node0/gpu1" in text and "the call was abandoned" in text
    assert "time.sleep(3)" in text                                     # where the call was
    record = read_run_record(tmp_path / "r.run.json")
    assert record.status == "failed" and "ran past its timeout" in record.error
    assert {t.id: t.attempts for t in record.tasks}["h"] == 2


def test_a_retry_after_a_timeout_can_succeed(tmp_path):
    rows = [task("src", "source", "node0/cpu"), timed(task("h", "hang_once", "node0/cpu", ref("src"), retries=1), 0.5)]
    plan = plan_of(tmp_path, rows, ref("h"), devices=cpu_devices())
    out = run_plan(plan, progress=False, telemetry=False, record_path=tmp_path / "r.run.json")
    np.testing.assert_array_equal(out["result"], 2 * np.arange(8.0))
    assert {t.id: t.attempts for t in read_run_record(tmp_path / "r.run.json").tasks}["h"] == 2


@pytest.mark.parametrize("share", [1.0, 0.5])
def test_tasks_within_their_timeout_give_the_same_results(tmp_path, share):
    rows = [task("src", "source", "node0/gpu0"), timed(task("c", "bump_copy", "node0/gpu1", ref("src")), 30),
            timed(task("o", "both", "node0/gpu1", ref("c"), ref("src")), 30)]
    for row in rows:
        row["share"] = share
    out = run_plan(plan_of(tmp_path, rows, ref("o")), emulate=True, progress=False, telemetry=False)
    np.testing.assert_array_equal(out["result"], 2 * np.arange(8.0) + 1)


def test_the_sharing_executor_times_out_too(tmp_path):
    rows = [task("src", "source", "node0/gpu0"), timed(task("h", "hang", "node0/gpu0", ref("src")), 0.2)]
    for row in rows:
        row["share"] = 0.5
    assert "kernel 'hang' ran past its timeout of 0.2 s" in failure(plan_of(tmp_path, rows, ref("h")), emulate=True)


def test_a_pipeline_stage_times_out(tmp_path):
    source = textwrap.dedent("""
        import time

        import numpy as np

        # @stream kernel(flops=1e9, out=64)
        def produce(i):
            return np.full(8, float(i))

        # @stream kernel(flops=1e9, out=64, timeout=0.2)
        def slow(x):
            if x[0] == 2:
                time.sleep(3)
            return x + 1

        # @stream pipeline(items=4)
        def stream(i):
            return slow(produce(i))
        """)
    path = tmp_path / "stream.py"
    path.write_text(source)
    cluster = cluster_from_dict({"name": "one", "nodes": [{"name": "n0", "devices": [
        {"name": "cpu", "kind": "cpu", "memory": "8GiB", "flops": "100 GFLOP/s"}]}]})
    plan = streammap.compile(path, cluster=cluster, strategy="pipeline")
    assert plan.pipeline is not None and all(t.timeout == 0.2 for t in plan.tasks if t.kernel == "slow")
    assert "kernel 'slow' ran past its timeout of 0.2 s (timeout= at stream.py:10)" in failure(plan)


class FakeStream:
    def __init__(self):
        self.synchronized = 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def synchronize(self):
        self.synchronized += 1


def fake_gpu():
    stream = FakeStream()
    cupy = types.SimpleNamespace(cuda=types.SimpleNamespace(get_current_stream=lambda: stream))
    dev = types.SimpleNamespace(is_gpu=True, cupy=cupy, device=contextlib.nullcontext(), abandoned=False)
    return dev, stream


def test_on_a_gpu_the_deadline_covers_the_stream_and_a_late_call_abandons_the_device():
    dev, stream = fake_gpu()
    deadline = Deadline(0.2, "k", "t", "node0/gpu0", "prog.py:3")
    assert with_deadline(lambda x: x + 1, deadline, dev)(1) == 2
    assert stream.synchronized == 1 and not dev.abandoned          # the GPU work waited for
    release = threading.Event()
    with pytest.raises(KernelTimeout) as info:
        with_deadline(lambda: release.wait(5), deadline, dev)()
    release.set()
    assert info.value.retry is False and dev.abandoned
    assert "node0/gpu0 is not used again in this run" in str(info.value)


def test_a_kernels_timeout_clause_is_found_above_its_def(tmp_path):
    path = tmp_path / "prog.py"
    path.write_text(PROG)
    ns: dict = {}
    exec(compile(PROG, str(path), "exec"), ns)
    lines = PROG.splitlines()
    assert declared_at(ns["hang"]) == f"prog.py:{lines.index('#                timeout=0.2)') + 1}"
    assert declared_at(ns["hang_once"]) == f"prog.py:{lines.index('# @stream kernel(timeout=0.5, retries=1)') + 1}"
    assert declared_at(ns["same"]) == f"prog.py:{lines.index('def same(x):') + 1}"


# -- the timeout clause, from the directive to the plan -------------------------------------------

CLAUSED = """
import time

# @stream param
N = 4

# @stream kernel(flops=N, timeout=N / 2)
def work(x):
    return x + 1

# @stream kernel(flops=N)
def plain(x):
    return x * 2

# @stream graph
def main():
    return plain(work(N))
"""


def test_the_timeout_clause_flows_into_the_plan_and_is_left_out_when_absent(tmp_path):
    path = tmp_path / "claused.py"
    path.write_text(CLAUSED)
    plan = streammap.compile(path, cluster="local", params={"N": 8})
    timeouts = {t.kernel: t.timeout for t in plan.tasks}
    assert timeouts == {"work": 4.0, "plain": None}
    write_plan(plan, tmp_path / "p.yaml")
    text = (tmp_path / "p.yaml").read_text()
    assert text.count("timeout:") == 1
    assert [t.timeout for t in read_plan(tmp_path / "p.yaml").tasks] == [t.timeout for t in plan.tasks]


@pytest.mark.parametrize("value", ["0", "-1", "'soon'", "True"])
def test_a_bad_timeout_is_an_error_at_its_position(tmp_path, value):
    path = tmp_path / "claused.py"
    path.write_text(CLAUSED.replace("timeout=N / 2", f"timeout={value}"))
    with pytest.raises(DirectiveError) as info:
        streammap.compile(path, cluster="local")
    err = info.value
    assert err.line == 7 and "timeout must be a number of seconds > 0" in err.message
    assert "timeout is a number of seconds > 0" in err.hint


# -- the run record of a run whose process ended -------------------------------------------------

EXITS = """
import os

import numpy as np

def source():
    return np.arange(4.0)

def leave(x):
    os._exit(3)
"""


def run_a_plan_whose_kernel_ends_the_process(tmp_path):
    """``streammap run`` of a two-task plan whose second kernel calls ``os._exit(3)``, in a child
    process; the plan (written to ``tmp_path / "p.yaml"``)."""
    rows = [task("src", "source", "node0/cpu"), task("bye", "leave", "node0/cpu", ref("src"))]
    plan = make_plan(tmp_path, EXITS, rows, devices=cpu_devices(), outputs=ref("bye"))
    write_plan(plan, tmp_path / "p.yaml")
    done = subprocess.run([sys.executable, "-m", "streammap.cli", "run", str(tmp_path / "p.yaml"), "--no-history",
                           "--no-progress"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 3
    return plan


def test_a_kernel_ending_the_process_leaves_an_incomplete_record_that_says_so(tmp_path):
    plan = run_a_plan_whose_kernel_ends_the_process(tmp_path)
    record = read_run_record(tmp_path / "p.out.run.json")
    assert record.status == "incomplete" and not (tmp_path / "p.out.npz").exists()
    assert record.error.startswith("the run's process ended before the run finished: a kernel may have ended "
                                   "the process (os._exit, a crash) or it was killed")
    assert main(["show", str(tmp_path / "p.out.run.json")]) == 0
    # The record written at the start lists no task (the run writes its tasks once, at its end);
    # read back, it has the plan's tasks, none measured.
    raw = json.loads((tmp_path / "p.out.run.json").read_text())
    assert raw["tasks"] == [] and raw["planned_tasks"] == 2
    assert [(t.id, t.device, t.start, t.attempts) for t in record.tasks] == [("src", "node0/cpu", None, 0),
                                                                             ("bye", "node0/cpu", None, 0)]
    assert record.tasks[1].estimated_finish == plan.tasks[1].finish


def test_an_incomplete_record_whose_plan_changed_still_says_the_run_never_ended(tmp_path, capsys):
    run_a_plan_whose_kernel_ends_the_process(tmp_path)
    (tmp_path / "p.yaml").write_text((tmp_path / "p.yaml").read_text() + "\n")      # the plan changed since
    record = read_run_record(tmp_path / "p.out.run.json")
    assert record.status == "incomplete" and record.planned_tasks == 2 and record.tasks == []
    assert main(["show", str(tmp_path / "p.out.run.json")]) == 0
    out = capsys.readouterr().out
    assert "INCOMPLETE" in out and "the plan's 2 tasks are not listed" in out


def test_a_run_writes_its_tasks_into_the_record_once(tmp_path, monkeypatch):
    """The record written when the run starts is a header: the tasks are written at the end only."""
    import streammap.runtime.lifecycle as lifecycle

    written = []

    def counting(record, path, task_columns=None):
        written.append((record.status, len(record.tasks) + len((task_columns or {}).get("id", ()))))
        return write_run_record(record, path, task_columns)
    monkeypatch.setattr(lifecycle, "write_run_record", counting)
    rows = [task("src", "source", "node0/cpu")] + [task(f"t{k}", "source", "node0/cpu") for k in range(50)]
    plan = make_plan(tmp_path, EXITS, rows, devices=cpu_devices(), outputs=ref("src"))
    run_plan(plan, progress=False, telemetry=False, record_path=tmp_path / "r.run.json")
    assert written == [("incomplete", 0), ("ok", 51)]


def test_show_says_an_incomplete_record_never_ended(tmp_path, capsys):
    rows = [task("src", "source", "node0/cpu")]
    plan = make_plan(tmp_path, EXITS, rows, devices=cpu_devices(), outputs=ref("src"))
    from streammap.runtime.lifecycle import incomplete_record
    write_run_record(incomplete_record(plan, emulate=False, started="2025-01-01T00:00:00+00:00"),
                     tmp_path / "r.run.json")
    assert main(["show", str(tmp_path / "r.run.json")]) == 0
    out = capsys.readouterr().out
    assert "INCOMPLETE" in out and "the run's process ended before the run finished" in out
    assert "the run never ended" in out


PEEK = """
import json

def peek(path):
    with open(path) as f:
        return json.load(f)["status"]
"""


def test_the_record_says_incomplete_while_the_run_runs_and_is_replaced_at_its_end(tmp_path):
    record = tmp_path / "r.run.json"
    plan = make_plan(tmp_path, PEEK, [task("p", "peek", "node0/cpu", str(record))], devices=cpu_devices(),
                     outputs=ref("p"))
    out = run_plan(plan, progress=False, telemetry=False, record_path=record)
    assert str(out["result"]) == "incomplete"
    assert json.loads(record.read_text())["status"] == "ok"


def test_a_run_stopped_by_an_error_of_the_runtime_records_that_error(tmp_path, monkeypatch):
    import streammap.runtime.run as run_module

    def broken(placements):
        raise RuntimeError("no devices today")
    monkeypatch.setattr(run_module, "make_devices", broken)
    plan = make_plan(tmp_path, PEEK, [task("p", "peek", "node0/cpu", "x")], devices=cpu_devices(), outputs=ref("p"))
    with pytest.raises(RuntimeError, match="no devices today"):
        run_plan(plan, progress=False, telemetry=False, record_path=tmp_path / "r.run.json")
    record = read_run_record(tmp_path / "r.run.json")
    assert record.status == "failed" and record.error == "RuntimeError: no devices today"


def test_an_unwritable_record_is_reported_when_the_run_ends(tmp_path):
    marker = tmp_path / "ran"
    source = f"def touch():\n    open({str(marker)!r}, 'w').close()\n    return 1\n"
    plan = make_plan(tmp_path, source, [task("t", "touch", "node0/cpu")], devices=cpu_devices(), outputs=ref("t"))
    with pytest.raises(StreamMapError, match="cannot write the run record"):
        run_plan(plan, progress=False, telemetry=False, record_path=tmp_path / "missing" / "r.run.json")
    assert marker.exists()                    # as before: the run went on, its end names the path


def test_input_written_is_what_the_error_is(tmp_path):
    rows = [task("src", "source", "node0/gpu0"), task("w", "bump", "node0/gpu1", ref("src"))]
    with pytest.raises(KernelError) as info:
        run_plan(plan_of(tmp_path, rows, ref("w")), emulate=True, progress=False, telemetry=False)
    assert isinstance(info.value.cause, InputWritten)


# -- on real GPUs (skipped without CuPy and a CUDA device) ----------------------------------------

needs_gpu = pytest.mark.skipif(cuda_device_count() == 0, reason="needs CuPy and a CUDA device")

GPU_PROG = """
import time

import numpy as np

def source():
    return np.arange(8.0)

def poke(x):
    x[0] = -1.0                 # CuPy arrays have no read-only flag: only check_inputs sees this
    return x.sum()

# @stream kernel(timeout=0.3)
def hang(x):
    time.sleep(3)
    return x
"""


def one_gpu():
    return [{"id": "node0/gpu0", "kind": "gpu", "vendor": "nvidia", "index": 0}]


@pytest.mark.gpu
@needs_gpu
def test_check_inputs_finds_a_write_into_a_gpu_input(tmp_path):
    rows = [task("src", "source", "node0/gpu0"), task("p", "poke", "node0/gpu0", ref("src"))]
    plan = make_plan(tmp_path, GPU_PROG, rows, devices=one_gpu(), outputs=ref("p"))
    run_plan(plan, progress=False, telemetry=False)                   # unchecked: unseen
    assert "kernel 'poke' changed its argument 'x' in place" in failure(plan, check_inputs=True)


@pytest.mark.gpu
@needs_gpu
def test_a_gpu_task_past_its_timeout_is_not_retried(tmp_path):
    rows = [task("src", "source", "node0/gpu0"), timed(task("h", "hang", "node0/gpu0", ref("src"), retries=2), 0.3)]
    plan = make_plan(tmp_path, GPU_PROG, rows, devices=one_gpu(), outputs=ref("h"))
    text = failure(plan, record_path=tmp_path / "r.run.json")
    assert "kernel 'hang' ran past its timeout of 0.3 s" in text and "node0/gpu0 is not used again in this run" in text
    assert {t.id: t.attempts for t in read_run_record(tmp_path / "r.run.json").tasks}["h"] == 1
