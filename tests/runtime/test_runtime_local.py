"""The local executor, specified by hand-made plans (no front end or mapper involved)."""

from __future__ import annotations

import gc
import json
import re
import sys

import numpy as np
import pytest

from streammap.errors import KernelError, PlanError, StreamMapError
from streammap.plan import write_plan
from streammap.runtime import run_plan
from streammap.runtime.context import array_module
from streammap.runtime.devices import check_devices, gpu_ordinals
from tests.helpers.cli import refused
from tests.helpers.fake_cupy import cuda_device_count
from tests.helpers.plans import FAN, cpu_devices, gpu_devices, make_plan, ref, task


def fan_plan(tmp_path, width=8, devices=None, n_dev=4):
    devs = [d["id"] for d in (devices or gpu_devices(n_dev))]
    tasks = [task("src", "source", devs[0])]
    tasks += [task(f"scale{k}", "scale", devs[k % len(devs)], ref("src"), k) for k in range(width)]
    tasks.append(task("sum", "total", devs[-1], *[ref(f"scale{k}") for k in range(width)]))
    return make_plan(tmp_path, FAN, tasks, devices=devices, outputs=ref("sum"))


def fan_expected(width=8, n=64):
    x = np.arange(n, dtype=np.float64)
    return sum(x * (k + 1) for k in range(width))


# -- results -------------------------------------------------------------------------------

def test_fan_out_fan_in_on_four_emulated_gpus(tmp_path):
    plan = fan_plan(tmp_path)
    out = run_plan(plan, emulate=True, outputs_path=tmp_path / "out.npz", progress=False)
    assert list(out) == ["result"]
    np.testing.assert_allclose(out["result"], fan_expected())
    with np.load(tmp_path / "out.npz") as npz:
        np.testing.assert_allclose(npz["result"], fan_expected())

    record = json.loads((tmp_path / "out.run.json").read_text())
    assert record["status"] == "ok" and record["emulate"] is True
    executors = {d["id"]: d["executor"] for d in record["devices"]}
    assert executors == {f"node0/gpu{i}": f"numpy (emulating node0/gpu{i})" for i in range(4)}
    by_id = {t["id"]: t for t in record["tasks"]}
    assert by_id["scale5"]["device"] == "node0/gpu1"
    assert all(t["attempts"] == 1 and t["start"] is not None and t["finish"] >= t["start"]
               for t in record["tasks"])
    assert by_id["sum"]["start"] >= max(by_id[f"scale{k}"]["finish"] for k in range(8))
    assert by_id["scale1"]["estimated_finish"] > by_id["scale1"]["estimated_start"]
    for d in record["devices"]:
        assert 0.0 <= d["utilisation"] <= 1.0 and d["peak_memory"] is None


def test_cpu_plan_runs_without_emulate(tmp_path):
    plan = fan_plan(tmp_path, width=4, devices=cpu_devices(2))
    out = run_plan(plan, progress=False, record_path=tmp_path / "r.json")
    np.testing.assert_allclose(out["result"], fan_expected(4))
    record = json.loads((tmp_path / "r.json").read_text())
    assert {d["executor"] for d in record["devices"]} == {"numpy"}


def test_progress_bar_does_not_change_results(tmp_path):
    out = run_plan(fan_plan(tmp_path), emulate=True, progress=True)
    np.testing.assert_allclose(out["result"], fan_expected())


ORDER = """
LOG = []

def note(tag, *deps):
    LOG.append(tag)
    return tag

def collect(*tags):
    return list(LOG)
"""


def test_each_device_runs_its_tasks_in_plan_order(tmp_path):
    # Device gpu0 gets tasks whose plan order differs from any natural order (names, creation).
    tasks = [task("z", "note", "node0/gpu0", "z"), task("a", "note", "node0/gpu0", "a"),
             task("m", "note", "node0/gpu0", "m"), task("b", "note", "node0/gpu1", "b", ref("z")),
             task("y", "note", "node0/gpu0", "y", ref("b")), task("c", "note", "node0/gpu1", "c"),
             task("end", "collect", "node0/gpu1", ref("y"), ref("c"), ref("a"), ref("m"))]
    plan = make_plan(tmp_path, ORDER, tasks, devices=gpu_devices(2), outputs=ref("end"))
    log = list(run_plan(plan, emulate=True, progress=False).values())
    log = [str(v) for v in log]
    gpu0 = [t for t in log if t in "zamy"]
    gpu1 = [t for t in log if t in "bc"]
    assert gpu0 == ["z", "a", "m", "y"]
    assert gpu1 == ["b", "c"]
    assert log.index("b") > log.index("z") and log.index("y") > log.index("b")


TUPLES = """
import numpy as np

def split(n):
    x = np.arange(n)
    return x[: n // 2], x[n // 2:]

def add(a, b):
    return a + b

def both(a, b):
    return {"low": a, "high": b}

def pair(a, b):
    return a, b * 10
"""


def test_tuple_results_and_index_refs(tmp_path):
    tasks = [task("s", "split", "node0/gpu0", 8),
             task("lo", "add", "node0/gpu1", ref("s", 0), 1),
             task("hi", "add", "node0/gpu2", ref("s", 1), ref("s", 0)),
             task("p", "pair", "node0/gpu3", ref("lo"), ref("hi"))]
    plan = make_plan(tmp_path, TUPLES, tasks, outputs=ref("p"))
    out = run_plan(plan, emulate=True, outputs_path=tmp_path / "t.npz", progress=False)
    assert list(out) == ["result_0", "result_1"]
    np.testing.assert_array_equal(out["result_0"], [1, 2, 3, 4])
    np.testing.assert_array_equal(out["result_1"], [40, 60, 80, 100])
    with np.load(tmp_path / "t.npz") as npz:
        assert sorted(npz.files) == ["result_0", "result_1"]


def test_outputs_spec_tuple_and_dict_keep_their_names(tmp_path):
    tasks = [task("s", "split", "node0/gpu0", 6), task("lo", "add", "node0/gpu1", ref("s", 0), 0),
             task("hi", "add", "node0/gpu2", ref("s", 1), 0)]
    plan = make_plan(tmp_path, TUPLES, tasks, outputs={"dict": {"low": ref("lo"), "high": ref("hi")}})
    out = run_plan(plan, emulate=True, outputs_path=tmp_path / "d.npz", progress=False)
    assert sorted(out) == ["high", "low"]
    with np.load(tmp_path / "d.npz") as npz:
        assert sorted(npz.files) == ["high", "low"]
        np.testing.assert_array_equal(npz["high"], [3, 4, 5])

    plan = make_plan(tmp_path, TUPLES, tasks, outputs={"tuple": [ref("hi"), ref("lo")]})
    out = run_plan(plan, emulate=True, progress=False)
    np.testing.assert_array_equal(out["result_0"], [3, 4, 5])
    np.testing.assert_array_equal(out["result_1"], [0, 1, 2])


def test_a_kernel_returning_a_dict_keeps_its_keys(tmp_path):
    tasks = [task("s", "split", "node0/gpu0", 4), task("d", "both", "node0/gpu1", ref("s", 0), ref("s", 1))]
    plan = make_plan(tmp_path, TUPLES, tasks, outputs=ref("d"))
    out = run_plan(plan, emulate=True, outputs_path=tmp_path / "k.npz", progress=False)
    with np.load(tmp_path / "k.npz") as npz:
        assert sorted(npz.files) == ["high", "low"]
    np.testing.assert_array_equal(out["low"], [0, 1])


def test_keyword_arguments_and_nested_specs(tmp_path):
    src = """
def make(n):
    return list(range(n))

def combine(xs, *, scale=1, extra=None):
    import numpy as np
    return np.array([scale * x for x in xs] + list(extra.values()))
"""
    tasks = [task("m", "make", "node0/cpu", 3),
             task("c", "combine", "node0/cpu", {"list": [ref("m", 0), ref("m", 2), {"value": 5}]},
                  kwargs={"scale": 2, "extra": {"dict": {"k": ref("m", 1)}}})]
    plan = make_plan(tmp_path, src, tasks, devices=cpu_devices(), outputs=ref("c"))
    out = run_plan(plan, progress=False)
    np.testing.assert_array_equal(out["result"], [0, 4, 10, 1])


RANDOM = """
import numpy as np

def leaf(k):
    return np.full(3, float(k))

def mix(*xs):
    out = xs[0] * 0
    for j, x in enumerate(xs):
        out = out + (j + 1) * x
    return out * (1.0 / len(xs))
"""


def random_dag(tmp_path, seed, devices):
    rng = np.random.default_rng(seed)
    devs = [d["id"] for d in devices]
    n_dev = len(devs)
    tasks, values = [], {}
    for k in range(150):
        dev = devs[int(rng.integers(n_dev))]
        if k < 5 or rng.random() < 0.1:
            tasks.append(task(f"t{k}", "leaf", dev, k))
            values[f"t{k}"] = np.full(3, float(k))
            continue
        picks = sorted({int(p) for p in rng.integers(0, k, size=int(rng.integers(1, 4)))})
        extra = [f"t{int(p)}" for p in rng.integers(0, k, size=2)]          # ordering-only deps
        tasks.append(task(f"t{k}", "mix", dev, *[ref(f"t{p}") for p in picks], deps=extra))
        xs = [values[f"t{p}"] for p in picks]
        values[f"t{k}"] = sum((j + 1) * x for j, x in enumerate(xs)) / len(xs)
    outs = [f"t{k}" for k in (149, 100, 77)]
    plan = make_plan(tmp_path, RANDOM, tasks, devices=devices, outputs={"tuple": [ref(o) for o in outs]})
    return plan, [values[o] for o in outs]


@pytest.mark.parametrize("seed", range(6))
def test_random_dags_match_sequential_evaluation(tmp_path, seed):
    n_dev = 1 + seed % 4
    plan, expected = random_dag(tmp_path, seed, gpu_devices(n_dev))
    for _ in range(3):
        out = run_plan(plan, emulate=True, progress=False)
        for j, value in enumerate(expected):
            np.testing.assert_allclose(out[f"result_{j}"], value)


# -- failures ------------------------------------------------------------------------------

FAILING = """
import numpy as np

CALLS = {"flaky": 0}

def ok(n):
    return np.ones(n)

def broken(x):
    y = x.sum()
    raise ValueError(f"bad input sum {y}")   # the user's line

def flaky(x):
    CALLS["flaky"] += 1
    if CALLS["flaky"] <= 2:
        raise RuntimeError("transient failure")
    return x * 2

def slow(x):
    return x
"""


def test_kernel_error_carries_task_site_and_original_traceback(tmp_path):
    tasks = [task("a", "ok", "node0/gpu0", 4), task("b", "broken", "node0/gpu1", ref("a"), site="prog.py:42"),
             task("c", "slow", "node0/gpu0", ref("b")),
             *[task(f"w{k}", "slow", "node0/gpu2", ref("a")) for k in range(50)]]
    plan = make_plan(tmp_path, FAILING, tasks, outputs={"tuple": [ref("c"), ref("w49")]})
    out_path = tmp_path / "out.npz"
    with pytest.raises(KernelError) as info:
        run_plan(plan, emulate=True, outputs_path=out_path, progress=False)
    err = info.value
    assert err.task_id == "b" and err.site == "prog.py:42" and err.device == "node0/gpu1"
    assert 'raise ValueError(f"bad input sum {y}")   # the user\'s line' in err.traceback_text
    assert "ValueError: bad input sum 4.0" in err.traceback_text
    assert "local.py" not in err.traceback_text          # the executor's frames are cut off
    assert isinstance(err.cause, ValueError)
    assert not out_path.exists()
    assert not list(tmp_path.glob(".out.npz*"))
    record = json.loads((tmp_path / "out.run.json").read_text())
    assert record["status"] == "failed" and "bad input sum" in record["error"]
    assert record["outputs"] is None
    by_id = {t["id"]: t for t in record["tasks"]}
    assert by_id["b"]["attempts"] == 1 and by_id["b"]["finish"] is None
    assert by_id["c"]["start"] is None and by_id["c"]["attempts"] == 0


def test_retries_then_success(tmp_path):
    tasks = [task("a", "ok", "node0/gpu0", 3), task("f", "flaky", "node0/gpu1", ref("a"), retries=2)]
    plan = make_plan(tmp_path, FAILING, tasks, outputs=ref("f"))
    out = run_plan(plan, emulate=True, outputs_path=tmp_path / "o.npz", progress=False)
    np.testing.assert_array_equal(out["result"], [2, 2, 2])
    record = json.loads((tmp_path / "o.run.json").read_text())
    assert {t["id"]: t["attempts"] for t in record["tasks"]} == {"a": 1, "f": 3}


def test_retries_exhausted(tmp_path):
    tasks = [task("a", "ok", "node0/gpu0", 3), task("f", "flaky", "node0/gpu1", ref("a"), retries=1)]
    plan = make_plan(tmp_path, FAILING, tasks, outputs=ref("f"))
    with pytest.raises(KernelError, match="task f") as info:
        run_plan(plan, emulate=True, record_path=tmp_path / "r.json", progress=False)
    assert "transient failure" in info.value.traceback_text
    record = json.loads((tmp_path / "r.json").read_text())
    assert record["status"] == "failed"
    assert {t["id"]: t["attempts"] for t in record["tasks"]}["f"] == 2


def test_failure_stops_a_long_run_promptly(tmp_path):
    # gpu1 fails at once; gpu0 has a long chain whose tasks each wait on gpu1: it must not hang.
    tasks = [task("bad", "broken", "node0/gpu1", 1.0)]
    tasks += [task(f"c{k}", "slow", "node0/gpu0", ref(f"c{k - 1}") if k else ref("bad")) for k in range(200)]
    plan = make_plan(tmp_path, FAILING, tasks, devices=gpu_devices(2), outputs=ref("c199"))
    with pytest.raises(KernelError, match="task bad"):
        run_plan(plan, emulate=True, progress=False)


# -- refusals ------------------------------------------------------------------------------

def test_changed_source_is_refused(tmp_path):
    plan = fan_plan(tmp_path)
    (tmp_path / "prog.py").write_text(FAN + "\n# edited\n")
    with pytest.raises(PlanError, match="changed"):
        run_plan(plan, emulate=True, outputs_path=tmp_path / "o.npz", progress=False)
    assert not (tmp_path / "o.npz").exists() and not (tmp_path / "o.run.json").exists()


def test_gpu_plan_without_cupy_needs_emulate(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)           # `import cupy` fails
    plan = fan_plan(tmp_path)
    with pytest.raises(StreamMapError) as info:
        run_plan(plan, progress=False)
    text = info.value.format()
    assert "CuPy is not installed" in text and "pip install 'streammap[gpu]'" in text and "--emulate" in text


def test_unknown_device_kind_is_refused(tmp_path):
    devices = [{"id": "node0/mlu0", "kind": "mlu", "vendor": "cambricon"}]
    plan = fan_plan(tmp_path, width=2, devices=devices)
    with pytest.raises(StreamMapError) as info:
        run_plan(plan, outputs_path=tmp_path / "o.npz", progress=False)
    assert "StreamMAP cannot execute on mlu devices here" in info.value.format()
    assert "--emulate" in info.value.format()
    assert not (tmp_path / "o.npz").exists()
    # ... and runs emulated
    out = run_plan(plan, emulate=True, progress=False)
    np.testing.assert_allclose(out["result"], fan_expected(2))


def test_plan_spanning_nodes_needs_emulate(tmp_path):
    devices = cpu_devices(1, "node0") + cpu_devices(1, "node1")
    plan = fan_plan(tmp_path, width=4, devices=devices)
    with pytest.raises(StreamMapError) as info:
        run_plan(plan, progress=False)
    assert "2 nodes" in str(info.value) and "--emulate" in info.value.format() and "Ray" in info.value.format()
    np.testing.assert_allclose(run_plan(plan, emulate=True, progress=False)["result"], fan_expected(4))


def test_workflow_plan_is_refused(tmp_path):
    tasks = [task("t1", "stage", "node0/gpu0")]
    plan = make_plan(tmp_path, "{}", tasks, kind="workflow", filename="wf.json")
    with pytest.raises(StreamMapError, match="imported workflow"):
        run_plan(plan, emulate=True, progress=False)


def misfit_plans(tmp_path):
    """Plan files (on one CPU, ``node0/cpu``) edited to pass ``scale(x, k)`` a third argument, or
    none for ``k``: ``(path, needles)`` pairs, the needles being what the refusal must say (the
    plan file and the task's line, the kernel's signature, why the call does not fit). The plan
    they were edited from, which runs, is ``tmp_path / "plan.yaml"``."""
    write_plan(fan_plan(tmp_path, width=2, devices=cpu_devices(1)), tmp_path / "plan.yaml")
    text = (tmp_path / "plan.yaml").read_text()
    line = text.splitlines().index("- id: scale1") + 1
    out = []
    for k, ((old, new), why) in enumerate(zip([("  - {value: 1}\n", "  - {value: 1}\n  - {value: 7}\n"),
                                               ("  - {value: 1}\n", "")],
                                              ["too many positional arguments", "missing a required argument: 'k'"])):
        path = tmp_path / f"bad{k}.yaml"
        path.write_text(text.replace(old, new))
        out.append((path, (f"{path.name}:{line}: error: task 'scale1' calls kernel scale(x, k) with", why, "hint: ")))
    return out


def test_a_task_whose_arguments_do_not_fit_its_kernel_is_refused_before_anything_runs(tmp_path, capsys):
    """A plan edited to pass ``scale(x, k)`` a third argument (or none for ``k``) failed mid-run with
    exit 1; it is bad input: exit 2 naming the plan file, the task's line and the kernel's parameters,
    with nothing written."""
    for path, needles in misfit_plans(tmp_path):
        refused(["run", path, "--no-progress", "--no-history", "-o", tmp_path / "o.npz"], capsys, *needles)
        assert not (tmp_path / "o.npz").exists() and not (tmp_path / "o.run.json").exists()


def test_the_ray_drivers_check_refuses_misfit_arguments_and_leaves_an_unimportable_program_to_the_workers(tmp_path):
    """``check_program`` (what the Ray driver runs before any actor starts) refuses what loading
    refuses; a program whose own import fails in this process (a module only the workers have) is
    not refused there, and nothing of it stays loaded."""
    from streammap.plan import read_plan
    from streammap.runtime.loader import check_program
    for path, (where, why, _) in misfit_plans(tmp_path):
        with pytest.raises(PlanError, match=re.escape(why)) as info:
            check_program(read_plan(path))
        assert where in info.value.format()
    plan = make_plan(tmp_path, "import streammap_test_only_on_the_workers\n" + FAN,
                     [task("src", "source", "node0/cpu")], devices=cpu_devices(1), outputs=ref("src"))
    before = set(sys.modules)
    check_program(plan)
    assert not [m for m in set(sys.modules) - before if m.startswith("_streammap_program_")]
    assert str(tmp_path) not in sys.path


def test_a_plan_built_in_process_with_an_unknown_keyword_is_refused_naming_the_task(tmp_path):
    tasks = [task("src", "source", "node0/cpu"), task("s", "scale", "node0/cpu", ref("src"), kwargs={"q": 2})]
    plan = make_plan(tmp_path, FAN, tasks, devices=cpu_devices(1), outputs=ref("s"))
    with pytest.raises(PlanError, match=r"task 's' calls kernel scale\(x, k\) with 1 positional argument and "
                                        r"keyword q: missing a required argument: 'k'"):
        run_plan(plan, emulate=True, progress=False)


def test_missing_kernel_names_kernel_and_file(tmp_path):
    tasks = [task("a", "nowhere", "node0/gpu0")]
    plan = make_plan(tmp_path, FAN, tasks)
    with pytest.raises(StreamMapError) as info:
        run_plan(plan, emulate=True, progress=False)
    assert "'nowhere'" in str(info.value) and "prog.py" in str(info.value)


def test_gpu_ordinals_use_index_else_position_per_node(tmp_path):
    devices = [{"id": "n0/cpu", "kind": "cpu"}, {"id": "n0/a", "kind": "gpu"}, {"id": "n0/b", "kind": "gpu"},
               {"id": "n1/a", "kind": "gpu"}, {"id": "n1/b", "kind": "gpu", "index": 5}]
    plan = make_plan(tmp_path, FAN, [task("s", "source", "n0/cpu")], devices=devices)
    assert gpu_ordinals(plan) == {"n0/a": 0, "n0/b": 1, "n1/a": 0, "n1/b": 5}
    assert check_devices(plan)["n0/cpu"].executor == "numpy"


# -- the program's module ------------------------------------------------------------------

PARAMS = """
import numpy as np
from streammap.runtime.context import array_module

# @stream param
N = 3
# @stream param
LABEL = "file"

if __name__ == "__main__":
    raise SystemExit("must not run")

def read():
    xp = array_module()
    return xp.full(N, 7), LABEL, xp.__name__, __name__
"""


def test_params_are_module_globals_before_kernels_run(tmp_path):
    plan = make_plan(tmp_path, PARAMS, [task("r", "read", "node0/gpu2")], params={"N": 5, "LABEL": "plan"},
                     outputs=ref("r"))
    out = run_plan(plan, emulate=True, progress=False)
    np.testing.assert_array_equal(out["result_0"], [7] * 5)
    assert str(out["result_1"]) == "plan"
    assert str(out["result_2"]) == "numpy"                # array_module() under emulate
    assert str(out["result_3"]) != "__main__"
    assert array_module() is np                           # outside a run


DERIVED = """
import numpy as np

# @stream param
N = 3
# a comment between the directive and the code
# @stream param
# (and another)
SCALE: float = 1.5
M = 2 * N                          # computed from a param when the module is imported
TABLE = np.arange(N) * SCALE
N = N                              # not the param's assignment: left alone

def read():
    return M, TABLE

def boom():
    raise ValueError("line numbers stay the file's")
"""


def test_module_level_values_computed_from_params_use_the_plans_values(tmp_path):
    """The program runs as if its file had been written with the plan's params."""
    plan = make_plan(tmp_path, DERIVED, [task("r", "read", "node0/cpu")], devices=cpu_devices(),
                     params={"N": 5, "SCALE": 2.0}, outputs=ref("r"))
    out = run_plan(plan, progress=False)
    assert int(out["result_0"]) == 10
    np.testing.assert_array_equal(out["result_1"], np.arange(5) * 2.0)
    failing = make_plan(tmp_path, DERIVED, [task("b", "boom", "node0/cpu")], devices=cpu_devices(),
                        params={"N": 5, "SCALE": 2.0}, outputs=ref("b"))
    with pytest.raises(KernelError) as err:
        run_plan(failing, progress=False)
    line = DERIVED.splitlines().index('    raise ValueError("line numbers stay the file\'s")') + 1
    assert f"line {line}, in boom" in err.value.format()


def test_each_run_gets_a_fresh_module(tmp_path):
    plan = make_plan(tmp_path, ORDER, [task("a", "note", "node0/cpu", "a"), task("l", "collect", "node0/cpu", ref("a"))],
                     devices=cpu_devices(), outputs=ref("l"))
    assert [str(v) for v in run_plan(plan, progress=False).values()] == ["a"]
    assert [str(v) for v in run_plan(plan, progress=False).values()] == ["a"]


@pytest.mark.parametrize("telemetry", [False, True], ids=["unmonitored", "monitored"])
def test_a_run_leaves_nothing_for_the_garbage_collector(tmp_path, telemetry):
    """Everything a run allocates, its program's module included, is freed by reference counting
    when it ends: a long-lived process (a notebook, a benchmark) does not pile up
    reference cycles whose collection would then land inside later runs."""
    plan = fan_plan(tmp_path)
    record = tmp_path / "run.json"
    run_plan(plan, emulate=True, progress=False, telemetry=telemetry, record_path=record)   # imports, caches
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)                 # what a collection finds stays in gc.garbage
    try:
        out = run_plan(plan, emulate=True, progress=False, telemetry=telemetry, record_path=record)
        gc.collect()
        left = sorted({type(o).__name__ for o in gc.garbage})
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    np.testing.assert_allclose(out["result"], fan_expected())
    assert left == []


def test_array_module_of_arrays():
    assert array_module(np.zeros(2)) is np
    assert array_module(3, np.zeros(2)) is np
    assert array_module(3.0) is np


# -- GPU: on a real GPU when CuPy and CUDA are there, else skipped; the same tests also run on
# -- a fake CuPy (the fake_cupy fixture) that checks device placement and streams.

needs_gpu = pytest.mark.skipif(cuda_device_count() == 0, reason="needs CuPy and a CUDA device")


@pytest.fixture(params=["fake", pytest.param("real", marks=[pytest.mark.gpu, needs_gpu])])
def gpu(request, fake_cupy):
    """(cupy module, number of GPUs, is_fake)."""
    if request.param == "fake":
        return fake_cupy(2), 2, True
    import cupy
    return cupy, cuda_device_count(), False


def _gpu_devices(n):
    return [{"id": f"node0/gpu{i}", "kind": "gpu", "vendor": "nvidia", "index": i} for i in range(n)] + \
        [{"id": "node0/cpu", "kind": "cpu"}]


def test_gpu_fan_out_fan_in_matches_numpy(tmp_path, gpu):
    cupy, n, fake = gpu
    devices = _gpu_devices(n)
    ids = [d["id"] for d in devices]
    # source on the CPU (NumPy), scales over the GPUs and the CPU, sum on the last GPU, and a
    # host task reading GPU results
    tasks = [task("src", "source", "node0/cpu")]
    tasks += [task(f"scale{k}", "scale", ids[k % len(ids)], ref("src"), k) for k in range(8)]
    tasks.append(task("sum", "total", ids[n - 1], *[ref(f"scale{k}") for k in range(8)]))
    tasks.append(task("back", "total", "node0/cpu", ref("scale0"), ref(f"scale{n - 1}"), ref("sum")))
    plan = make_plan(tmp_path, FAN, tasks, devices=devices, outputs={"tuple": [ref("sum"), ref("back")]})
    out = run_plan(plan, outputs_path=tmp_path / "g.npz", progress=False)
    assert all(type(v) is np.ndarray for v in out.values())
    np.testing.assert_allclose(out["result_0"], fan_expected())
    x = np.arange(64.0)
    np.testing.assert_allclose(out["result_1"], x * 1 + x * n + fan_expected())
    emulated = run_plan(plan, emulate=True, progress=False)
    np.testing.assert_allclose(out["result_0"], emulated["result_0"])
    record = json.loads((tmp_path / "g.run.json").read_text())
    execs = {d["id"]: d for d in record["devices"]}
    assert execs["node0/gpu0"]["executor"] == "cupy:0" and execs["node0/cpu"]["executor"] == "numpy"
    assert execs["node0/gpu0"]["peak_memory"] is not None
    assert all(t["start"] is not None and t["finish"] >= t["start"] >= 0 for t in record["tasks"])
    if fake:
        stats = cupy.fake_stats
        assert stats["uploads"] > 0 and stats["peer_copies"] > 0 and stats["downloads"] > 0
        assert stats["null_stream_uploads"] == 0 and stats["waits"] > 0


GPU_KINDS = """
import numpy as np
from streammap.runtime.context import array_module

def host():
    return np.arange(8.0)              # NumPy, even on a GPU

def pair():
    return np.ones(2), np.zeros(2)

def kind(x):
    return x * 2, type(x).__module__.split(".")[0], array_module().__name__

def strided(x):
    return x[::2]

def add(a, b):
    return a + b

def fail(x):
    raise ZeroDivisionError("on the gpu")
"""


def test_gpu_kernel_returning_numpy_gets_its_result_moved(tmp_path, gpu):
    cupy, n, fake = gpu
    tasks = [task("h", "host", "node0/gpu0"), task("k", "kind", "node0/gpu0", ref("h")),
             task("p", "pair", "node0/gpu0"), task("s", "add", "node0/gpu0", ref("p", 0), ref("p", 1))]
    plan = make_plan(tmp_path, GPU_KINDS, tasks, devices=_gpu_devices(n),
                     outputs={"tuple": [ref("k", 0), ref("k", 1), ref("k", 2), ref("s")]})
    out = run_plan(plan, progress=False)
    np.testing.assert_array_equal(out["result_0"], np.arange(8.0) * 2)
    assert str(out["result_1"]) == "cupy"                  # the consumer got a CuPy array
    assert str(out["result_2"]) == "cupy"                  # array_module() on a GPU
    np.testing.assert_array_equal(out["result_3"], [1, 1])


def test_gpu_strided_result_copied_to_another_gpu(tmp_path, gpu):
    cupy, n, fake = gpu
    last = f"node0/gpu{n - 1}"
    tasks = [task("h", "host", "node0/gpu0"), task("s", "strided", "node0/gpu0", ref("h")),
             task("a", "add", last, ref("s"), ref("s"))]
    plan = make_plan(tmp_path, GPU_KINDS, tasks, devices=_gpu_devices(n), outputs=ref("a"))
    out = run_plan(plan, progress=False)
    np.testing.assert_array_equal(out["result"], np.arange(8.0)[::2] * 2)


def test_gpu_kernel_error(tmp_path, gpu):
    cupy, n, fake = gpu
    tasks = [task("h", "host", "node0/gpu0"), task("f", "fail", f"node0/gpu{n - 1}", ref("h"), retries=1),
             task("after", "add", "node0/cpu", ref("f"), ref("h"))]
    plan = make_plan(tmp_path, GPU_KINDS, tasks, devices=_gpu_devices(n), outputs=ref("after"))
    with pytest.raises(KernelError, match="task f") as info:
        run_plan(plan, record_path=tmp_path / "r.json", progress=False)
    assert 'raise ZeroDivisionError("on the gpu")' in info.value.traceback_text
    record = json.loads((tmp_path / "r.json").read_text())
    assert {t["id"]: t["attempts"] for t in record["tasks"]} == {"h": 1, "f": 2, "after": 0}


def test_gpu_plan_needing_more_devices_than_there_are(tmp_path, fake_cupy):
    fake_cupy(1)
    plan = fan_plan(tmp_path, n_dev=4)
    with pytest.raises(StreamMapError) as info:
        run_plan(plan, progress=False)
    assert "1 CUDA device" in str(info.value) and "node0/gpu3 (CUDA device 3)" in str(info.value)
    assert "--emulate" in info.value.format()


@pytest.mark.parametrize("seed", range(3))
def test_gpu_random_dags_match_sequential_evaluation(tmp_path, gpu, seed):
    cupy, n, fake = gpu
    plan, expected = random_dag(tmp_path, seed, _gpu_devices(n))
    out = run_plan(plan, progress=False)
    for j, value in enumerate(expected):
        np.testing.assert_allclose(out[f"result_{j}"], value)


def test_unwritable_outputs_path_is_a_clear_error(tmp_path):
    plan = fan_plan(tmp_path, width=2)
    with pytest.raises(StreamMapError, match="cannot write the outputs"):
        run_plan(plan, emulate=True, outputs_path=tmp_path / "missing" / "o.npz", progress=False)


def test_plan_file_path_is_accepted_and_named_in_the_record(tmp_path):
    from streammap.plan import write_plan
    plan = fan_plan(tmp_path, width=2)
    write_plan(plan, tmp_path / "plan.yaml")
    out = run_plan(tmp_path / "plan.yaml", emulate=True, outputs_path=tmp_path / "o.npz", progress=False)
    np.testing.assert_allclose(out["result"], fan_expected(2))
    record = json.loads((tmp_path / "o.run.json").read_text())
    assert record["plan"] == str(tmp_path / "plan.yaml") and len(record["plan_sha256"]) == 64
    assert record["outputs"] == str(tmp_path / "o.npz") and record["backend"] == "local"


def test_host_calls_get_each_argument_form_in_place(tmp_path):
    """Plain refs, indexed refs and constants in one positional list; fan-ins of plain refs and of
    indexed refs longer than a baked call shape holds: each kernel gets exactly its arguments."""
    src = """
def pair(k):
    return (k, 10 * k)

def args(*xs):
    return list(xs)
"""
    wide = 20                                   # more than runtime.local.MAX_SHAPE arguments
    tasks = [task(f"p{k}", "pair", "node0/cpu", k) for k in range(wide)]
    tasks += [task("mixed", "args", "node0/cpu", ref("p1", 1), 7, ref("p2"), ref("p3", 0), "s"),
              task("fan", "args", "node0/cpu", *[ref(f"p{k}") for k in range(wide)]),
              task("fan_items", "args", "node0/cpu", *[ref(f"p{k}", 1) for k in range(wide)]),
              task("all", "args", "node0/cpu", ref("mixed"), ref("fan"), ref("fan_items"))]
    plan = make_plan(tmp_path, src, tasks, devices=cpu_devices(), outputs=ref("all"))
    out = run_plan(plan, progress=False)
    mixed, fan, fan_items = out["result_0"], out["result_1"], out["result_2"]
    assert mixed.tolist() == [10, 7, (2, 20), 3, "s"]
    assert fan.tolist() == [[k, 10 * k] for k in range(wide)]
    assert fan_items.tolist() == [10 * k for k in range(wide)]
