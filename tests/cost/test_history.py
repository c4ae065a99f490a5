"""Performance history: where it lives, its file format, concurrent writers, lookups, run records."""

from __future__ import annotations

import json
import multiprocessing
import os

import pytest

import streammap.cost.history as H
from streammap.cluster.model import cluster_from_dict
from streammap.cost.history import (
    History,
    append_records,
    estimate_sources_summary,
    history_dir,
    history_file,
    make_record,
    record_run,
    size_key,
    source_stem,
    task_sizes,
)
from streammap.cost.model import CostModel
from streammap.ir import add_task, new_graph
from streammap.runrecord import DeviceRun, RunRecord, TaskRun
from tests.helpers.plans import make_plan, task

CPU = "Test CPU 9000"
GPU = "H200"


def attrs(flops=1e6, bytes=None, out=8e3, args=(), site="prog.py:3", code=None, **kw):
    a = {"kernel": "k", "site": site, "code": code, "flops": flops, "bytes": bytes, "out": out, "mem": None,
         "args": list(args), "kwargs": kw}
    return a


def rec(kernel="k", model=CPU, seconds=1e-3, kind="cpu", stem="prog", **a):
    return make_record(kernel, stem, model, kind, attrs(**a), seconds, origin="test")


# ---------------------------------------------------------------------- location and format

def test_history_dir_env_then_xdg_then_home(monkeypatch, tmp_path):
    monkeypatch.setenv("STREAMMAP_HISTORY", str(tmp_path / "h"))
    assert history_dir() == tmp_path / "h"
    assert history_dir(tmp_path / "explicit") == tmp_path / "explicit"
    monkeypatch.delenv("STREAMMAP_HISTORY")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert history_dir() == tmp_path / "xdg" / "streammap" / "history"
    monkeypatch.delenv("XDG_DATA_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert history_dir() == tmp_path / "home" / ".local" / "share" / "streammap" / "history"


def test_env_var_is_where_records_go(monkeypatch, tmp_path):
    monkeypatch.setenv("STREAMMAP_HISTORY", str(tmp_path))
    append_records([rec()])
    assert (tmp_path / "prog" / "k.jsonl").exists()
    assert History.load().estimate("k", CPU, attrs()) == pytest.approx(1e-3)


def test_file_is_human_readable_json_lines(tmp_path):
    append_records([rec(args=[{"ref": "x"}, {"value": 3}], seconds=2.5e-4)], tmp_path)
    path = history_file(tmp_path, "prog", "k")
    assert path == tmp_path / "prog" / "k.jsonl"
    text = path.read_text()
    assert text.count("\n") == 1
    line = json.loads(text)
    assert list(line)[:7] == ["kernel", "source", "device_model", "device_kind", "size_key", "sizes", "seconds"]
    assert line["size_key"] == "arg1=3;flops=1000000;out=8000;refs=1"
    assert line["sizes"] == {"arg1": 3, "flops": 1e6, "out": 8e3, "refs": 1}
    assert line["seconds"] == 2.5e-4 and line["device_model"] == CPU and line["host"] and line["when"]


def test_sizes_and_keys():
    a = attrs(flops=10.0, bytes=20.5, args=[{"ref": "a"}, {"value": 2}, {"list": []}], site="dir/fm_radio.py:12",
              axis={"value": "x"})
    assert task_sizes(a) == {"arg1": 2, "kw:axis": "x", "refs": 1, "flops": 10.0, "bytes": 20.5, "out": 8e3}
    assert size_key(task_sizes(a)) == 'arg1=2;bytes=20.5;flops=10;kw:axis="x";out=8000;refs=1'
    assert source_stem("dir/fm_radio.py:12") == "fm_radio" and source_stem(None) == "_"


# ---------------------------------------------------------------------- concurrent writers

def _writer(folder, wid, n, batch):
    for i in range(0, n, batch):
        append_records([make_record("k", "prog", CPU, "cpu", attrs(flops=float(j)), 1e-3 + wid,
                                    origin="test", writer=wid, seq=j, pad="x" * 500)
                        for j in range(i, min(n, i + batch))], folder)


def test_concurrent_writers_lose_and_tear_nothing(tmp_path):
    ctx = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn")
    writers, n, batch = 6, 300, 7
    procs = [ctx.Process(target=_writer, args=(str(tmp_path), w, n, batch)) for w in range(writers)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    lines = history_file(tmp_path, "prog", "k").read_text().splitlines()
    assert len(lines) == writers * n
    seen = {}
    for ln in lines:
        r = json.loads(ln)                      # every line whole
        seen.setdefault(r["writer"], []).append(r["seq"])
    assert {w: sorted(s) for w, s in seen.items()} == {w: list(range(n)) for w in range(writers)}
    # Each writer's batches stay in order (appends are whole).
    assert all(s == sorted(s) for s in seen.values())


def test_compaction_keeps_latest_window(tmp_path, monkeypatch):
    monkeypatch.setattr(H, "COMPACT_BYTES", 2000)
    for i in range(60):
        append_records([rec(seconds=float(i + 1))], tmp_path)
    recs = H.read_records(history_file(tmp_path, "prog", "k"))
    assert len(recs) <= H.WINDOW + 10
    assert recs[-1]["seconds"] == 60.0
    m = History.load(tmp_path).kernel_models("prog", "k")[CPU]
    assert m.by_size[rec()["size_key"]].median == pytest.approx(statistics_median(range(41, 61)))


def statistics_median(xs):
    import statistics
    return statistics.median(float(x) for x in xs)


# ---------------------------------------------------------------------- lookups

def test_exact_size_gives_median_and_models_are_kept_apart(tmp_path):
    append_records([rec(seconds=s) for s in (1e-3, 3e-3, 2e-3, 50e-3)], tmp_path)
    append_records([rec(model=GPU, kind="gpu", seconds=1e-5)], tmp_path)
    h = History.load(tmp_path)
    assert h.estimate("k", CPU, attrs()) == pytest.approx(2.5e-3)
    assert h.estimate("k", GPU, attrs()) == pytest.approx(1e-5)
    assert h.lookup("k", CPU, attrs()) == (pytest.approx(2.5e-3), "exact")


def test_none_when_unknown(tmp_path):
    append_records([rec()], tmp_path)
    h = History.load(tmp_path)
    assert h.estimate("other", CPU, attrs()) is None            # unknown kernel
    assert h.estimate("k", "A100", attrs()) is None             # unknown model
    assert h.estimate("k", CPU, attrs(site="elsewhere.py:1")) is None   # another program
    assert h.estimate("k", CPU, attrs(flops=2e6)) is None       # unseen size, too few sizes to fit
    assert History.load(tmp_path / "missing").estimate("k", CPU, attrs()) is None


def test_measurements_of_other_code_are_not_used(tmp_path):
    """A kernel's estimates come from measurements of its current code: after an edit, the old
    times say nothing of it, and compile is told which kernels lost their history."""
    append_records([rec(code="c0de01d", seconds=1e-3), rec(model=GPU, kind="gpu", code="c0de01d", seconds=1e-5)],
                   tmp_path)
    append_records([rec(code="c0de2ew", seconds=4e-3)], tmp_path)
    line = json.loads(history_file(tmp_path, "prog", "k").read_text().splitlines()[-1])
    assert list(line)[:3] == ["kernel", "source", "code"] and line["code"] == "c0de2ew"

    h = History.load(tmp_path)
    assert h.estimate("k", CPU, attrs(code="c0de2ew")) == pytest.approx(4e-3)      # the new code's only
    assert h.estimate("k", GPU, attrs(code="c0de2ew")) is None                     # the GPU has the old only
    assert h.stale == {("prog", "k", GPU)}
    assert h.stale_line().startswith("history: not used for prog.k, whose code changed since it was measured")
    assert h.estimate("k", CPU, attrs(code="c0de01d")) == pytest.approx(1e-3)      # the old code checked out
    assert h.estimate("k", GPU, attrs(code="c0de01d")) == pytest.approx(1e-5)
    assert History.load(tmp_path).stale_line() is None


def test_measurements_without_a_fingerprint_are_used_until_fingerprinted_ones_exist(tmp_path):
    append_records([rec(seconds=2e-3)], tmp_path)                # written before fingerprints existed
    assert History.load(tmp_path).estimate("k", CPU, attrs(code="abc")) == pytest.approx(2e-3)
    append_records([rec(code="abc", seconds=5e-3)], tmp_path)
    h = History.load(tmp_path)
    assert h.estimate("k", CPU, attrs(code="abc")) == pytest.approx(5e-3)
    assert h.stale == set()
    # once fingerprinted lines exist, a new version's code cannot be the old lines' either
    assert h.estimate("k", CPU, attrs(code="def")) is None and h.stale == {("prog", "k", CPU)}


def test_compaction_keeps_each_version_of_the_code_apart(tmp_path, monkeypatch):
    monkeypatch.setattr(H, "COMPACT_BYTES", 0)                  # compact after every append
    append_records([rec(code="a", seconds=1e-3)] * 3, tmp_path)
    append_records([rec(code="b", seconds=2e-3)] * (H.WINDOW + 5), tmp_path)
    lines = [json.loads(x) for x in history_file(tmp_path, "prog", "k").read_text().splitlines()]
    assert sum(r["code"] == "a" for r in lines) == 3 and sum(r["code"] == "b" for r in lines) == H.WINDOW


def test_same_clauses_other_scalar_args(tmp_path):
    append_records([rec(args=[{"value": i}], seconds=1e-3 * (1 + i % 2)) for i in range(4)], tmp_path)
    h = History.load(tmp_path)
    assert h.lookup("k", CPU, attrs(args=[{"value": 0}])) == (pytest.approx(1e-3), "exact")
    t, how = h.lookup("k", CPU, attrs(args=[{"value": 99}]))
    assert how == "clauses" and t == pytest.approx(1.5e-3)


@pytest.mark.parametrize("law", ["power", "affine"])
def test_regression_between_and_near_measured_sizes(tmp_path, law):
    f = (lambda x: 2e-9 * x ** 1.5) if law == "power" else (lambda x: 5e-5 + 1e-9 * x)
    sizes = [1e4, 1e5, 1e6, 1e7]
    append_records([rec(flops=x, seconds=f(x)) for x in sizes], tmp_path)
    h = History.load(tmp_path)
    for x in (3e4, 3e5, 5e7):
        t, how = h.lookup("k", CPU, attrs(flops=x))
        assert how == "regression"
        assert t == pytest.approx(f(x), rel=0.05)
    assert h.kernel_models("prog", "k")[CPU].regression("flops").form == law
    assert h.estimate("k", CPU, attrs(flops=1e10)) is None       # too far outside the range
    assert h.estimate("k", CPU, attrs(flops=10.0)) is None


def test_regression_needs_three_sizes(tmp_path):
    append_records([rec(flops=x, seconds=x * 1e-9) for x in (1e4, 1e5)], tmp_path)
    assert History.load(tmp_path).estimate("k", CPU, attrs(flops=3e4)) is None
    append_records([rec(flops=1e6, seconds=1e-3)], tmp_path)
    assert History.load(tmp_path).estimate("k", CPU, attrs(flops=3e4)) == pytest.approx(3e-5, rel=0.05)


# ---------------------------------------------------------------------- cost model

def cluster(n_gpu=2):
    devs = [{"name": f"gpu{i}", "kind": "gpu", "vendor": "nvidia", "model": GPU, "flops": "50 TFLOP/s",
             "mem_bandwidth": "4 TB/s"} for i in range(n_gpu)]
    devs.append({"name": "cpu", "kind": "cpu", "model": CPU, "flops": "1 TFLOP/s", "mem_bandwidth": "100 GB/s"})
    return cluster_from_dict({"name": "t", "nodes": [{"name": "n", "link": {"bandwidth": "100 GB/s"},
                                                      "devices": devs}]})


def test_cost_model_prefers_history(tmp_path):
    g = new_graph("p", kind="program", source="prog.py")
    add_task(g, "a", "k", site="prog.py:3", flops=1e6, out=8e3)
    add_task(g, "b", "other", site="prog.py:4", flops=1e6, out=8e3)
    append_records([rec(seconds=0.25), rec(model=GPU, kind="gpu", seconds=0.125)], tmp_path)
    cost = CostModel(g, cluster(), history=History.load(tmp_path).as_hook())
    assert cost.source == ["history", "clauses"]
    assert list(cost.time[0]) == [0.125, 0.125, 0.25]
    assert estimate_sources_summary(cost) == "estimates: 1 task from history, 1 from clauses"


def test_the_hook_is_asked_once_per_task_and_device_model_and_reads_each_file_once(tmp_path, monkeypatch):
    # what keeps the hook cheap on large graphs; the time it adds to a 10,000-task cost model
    # (target: under 0.5 s) is measured by benchmarks/compile_time.py
    g = new_graph("p", kind="program", source="prog.py")
    for i in range(10_000):
        add_task(g, f"t{i}", f"k{i % 5}", site="prog.py:3", flops=1e6 * (1 + i % 50), out=8e3,
                 args=[{"value": i % 7}])
    append_records([make_record(f"k{j}", "prog", m, "x", attrs(flops=1e6 * (1 + i), args=[{"value": i % 7}]), 1e-3)
                    for j in range(5) for i in range(0, 50, 2) for m in (CPU, GPU)], tmp_path)
    clus = cluster(n_gpu=63)
    reads, fits = [], []
    read_records, fit_regression = H.read_records, H.fit_regression
    monkeypatch.setattr(H, "read_records", lambda *a, **k: reads.append(a) or read_records(*a, **k))
    monkeypatch.setattr(H, "fit_regression", lambda *a, **k: fits.append(a) or fit_regression(*a, **k))
    h = History.load(tmp_path)
    hook, asked = h.as_hook(), []
    cost = CostModel(g, clus, history=lambda kernel, model, a: asked.append(model) or hook(kernel, model, a))
    assert set(cost.source) == {"history"}
    assert h.lookups["exact"] > 0 and h.lookups["regression"] > 0
    assert len(asked) == 10_000 * 2             # 64 devices of 2 models: once per task and model
    assert len(reads) == 5                      # each kernel's file read once
    assert 0 < len(fits) <= 5 * 2               # at most one fit per kernel and device model


# ---------------------------------------------------------------------- recording runs

PROG = """
import numpy as np

def make(n):
    return np.zeros(n)

def inc(x):
    return x + 1
"""


def graph_for(plan):
    g = new_graph("main", kind="program", source="prog.py")
    add_task(g, "a", "make", site="prog.py:4", out=80.0, args=[{"value": 10}])
    add_task(g, "b", "inc", site="prog.py:7", flops=10.0, args=[{"ref": "a"}])
    g.add_edge("a", "b", bytes=80.0)
    return g


def run_record(plan, executors, status="ok", measured=((0.0, 0.5), (0.5, 0.75))):
    tasks = [TaskRun(id=t.id, kernel=t.kernel, device=t.device, site=t.site, estimated_start=t.start,
                     estimated_finish=t.finish, start=s, finish=f, attempts=1)
             for t, (s, f) in zip(plan.tasks, measured)]
    return RunRecord(plan="p.yaml", started="2025-01-01T00:00:00+00:00", wall_time=1.0, estimated_makespan=1.0,
                     status=status, devices=[DeviceRun(id=d, executor=e) for d, e in executors.items()],
                     tasks=tasks)


def two_task_plan(tmp_path, devices):
    ids = [d["id"] for d in devices]
    return make_plan(tmp_path, PROG, [task("a", "make", ids[0], 10, site="prog.py:4"),
                                      task("b", "inc", ids[-1], {"ref": "a"}, site="prog.py:7")],
                     devices=devices)


def test_record_run_real_devices(tmp_path, monkeypatch):
    monkeypatch.setattr(H, "local_cpu_model", lambda: CPU)
    monkeypatch.setattr(H, "local_gpu_models", lambda: {0: "H200 real"})
    devices = [{"id": "n/cpu", "kind": "cpu", "model": CPU}, {"id": "n/gpu0", "kind": "gpu", "model": GPU}]
    plan = two_task_plan(tmp_path, devices)
    hist = tmp_path / "hist"
    n = record_run(plan, run_record(plan, {"n/cpu": "numpy", "n/gpu0": "cupy:0"}), hist, graph=graph_for(plan))
    assert n == 2
    h = History.load(hist)
    g = graph_for(plan)
    assert h.estimate("make", CPU, g.nodes["a"]) == pytest.approx(0.5)
    assert h.estimate("inc", "H200 real", g.nodes["b"]) == pytest.approx(0.25)   # the GPU that ran it
    line = json.loads(history_file(hist, "prog", "make").read_text())
    assert line["origin"] == "run" and line["sizes"] == {"arg0": 10, "out": 80.0, "refs": 0}


def test_record_run_emulation_never_pollutes_gpu_history(tmp_path, monkeypatch):
    monkeypatch.setattr(H, "local_cpu_model", lambda: CPU)
    devices = [{"id": "n/gpu0", "kind": "gpu", "model": GPU}, {"id": "n/gpu1", "kind": "gpu", "model": GPU}]
    plan = two_task_plan(tmp_path, devices)
    hist = tmp_path / "hist"
    # Two emulated devices share the cores: skipped.
    emu = {d["id"]: f"numpy (emulating {d['id']})" for d in devices}
    assert record_run(plan, run_record(plan, emu), hist, graph=graph_for(plan)) == 0
    # One emulated device: plain CPU times, recorded against the CPU, never the GPU model.
    one = make_plan(tmp_path, PROG, [task("a", "make", "n/gpu0", 10, site="prog.py:4"),
                                     task("b", "inc", "n/gpu0", {"ref": "a"}, site="prog.py:7")],
                    devices=devices[:1])
    assert record_run(one, run_record(one, {"n/gpu0": "numpy (emulating n/gpu0)"}), hist, graph=graph_for(one)) == 2
    h = History.load(hist)
    assert h.estimate("make", GPU, graph_for(one).nodes["a"]) is None
    assert h.estimate("make", CPU, graph_for(one).nodes["a"]) == pytest.approx(0.5)


def test_record_run_skips_failed_runs_and_tasks_that_did_not_run(tmp_path, monkeypatch):
    monkeypatch.setattr(H, "local_cpu_model", lambda: CPU)
    devices = [{"id": "n/cpu", "kind": "cpu"}]
    plan = two_task_plan(tmp_path, devices)
    hist = tmp_path / "hist"
    assert record_run(plan, run_record(plan, {"n/cpu": "numpy"}, status="failed"), hist, graph=graph_for(plan)) == 0
    partial = run_record(plan, {"n/cpu": "numpy"}, measured=((0.0, 0.5), (None, None)))
    assert record_run(plan, partial, hist, graph=graph_for(plan)) == 1
    assert not history_file(hist, "prog", "inc").exists()


def test_record_run_reparses_the_source(tmp_path, monkeypatch):
    """Without ``graph=``, clause sizes come from parsing the plan's source with its params."""
    from streammap.compiler import compile as compile_plan
    from streammap.runrecord import read_run_record
    from streammap.runtime import run_plan
    monkeypatch.setattr(H, "local_cpu_model", lambda: CPU)
    src = tmp_path / "tiny.py"
    src.write_text(TINY)
    spec = {"name": "c", "nodes": [{"name": "n", "devices": [{"name": "cpu", "kind": "cpu", "model": CPU}]}]}
    plan = compile_plan(src, spec, params={"N": 32})
    run_plan(plan, progress=False, record_path=tmp_path / "r.json")
    hist = tmp_path / "hist"
    assert record_run(plan, read_run_record(tmp_path / "r.json"), hist) == 3
    from streammap.directives import parse_program
    g = parse_program(src, overrides={"N": 32})
    h = History.load(hist)
    assert all(h.lookup(a["kernel"], CPU, a)[1] == "exact" for _, a in g.nodes(data=True))


TINY = """
import numpy as np

# @stream param
N = 16

# @stream kernel(flops=N, out=8*N)
def make():
    return np.arange(N, dtype=np.float64)

# @stream kernel(flops=2*N, bytes=16*N, out=8*N)
def double(x):
    return 2 * x

# @stream graph
def main():
    x = make()
    return double(double(x))
"""


def test_sources_summary_of_a_plan(tmp_path):
    plan = make_plan(tmp_path, PROG, [task("a", "make", "n/cpu", 10), task("b", "inc", "n/cpu", {"ref": "a"})],
                     devices=[{"id": "n/cpu", "kind": "cpu"}])
    plan.tasks[0].estimate = "history"
    plan.tasks[1].estimate = "clauses"
    assert estimate_sources_summary(plan) == "estimates: 1 task from history, 1 from clauses"
    assert estimate_sources_summary(["clauses"] * 3 + ["history"] * 9) == \
        "estimates: 9 tasks from history, 3 from clauses"


def test_record_after_run_reports_and_never_raises(tmp_path, monkeypatch):
    monkeypatch.setattr(H, "local_cpu_model", lambda: CPU)
    src = tmp_path / "tiny.py"
    src.write_text(TINY)
    from streammap.compiler import compile as compile_plan
    from streammap.runtime import run_plan
    spec = {"name": "c", "nodes": [{"name": "n", "devices": [{"name": "cpu", "kind": "cpu", "model": CPU}]}]}
    plan = compile_plan(src, spec)
    run_plan(plan, progress=False, record_path=tmp_path / "r.json")
    msg = H.record_after_run(plan, tmp_path / "r.json", tmp_path / "hist")
    assert msg.startswith("recorded 3 task times in ")
    assert H.record_after_run(plan, tmp_path / "missing.json", tmp_path / "hist").startswith("history not updated:")
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    assert H.record_after_run(plan, tmp_path / "r.json", blocked).startswith("history not updated:")


def test_resolve_history_hook(tmp_path, monkeypatch):
    monkeypatch.setenv("STREAMMAP_HISTORY", str(tmp_path / "none"))
    assert H.resolve_history_hook() is None and H.resolve_history_hook(False) is None
    append_records([rec()], tmp_path / "h")
    hook = H.resolve_history_hook(tmp_path / "h")
    assert hook("k", CPU, attrs()) == pytest.approx(1e-3)
    monkeypatch.setenv("STREAMMAP_HISTORY", str(tmp_path / "h"))
    assert H.resolve_history_hook(True)("k", CPU, attrs()) == pytest.approx(1e-3)
    fn = lambda *a: 7.0  # noqa: E731
    assert H.resolve_history_hook(fn) is fn
    assert H.resolve_history_hook(History.load(tmp_path / "h"))("k", CPU, attrs()) == pytest.approx(1e-3)


# -- a history folder holds whatever was put there -----------------------------------------------------

GOOD_LINE = {"kernel": "k", "source": "p", "device_model": "H200", "device_kind": "gpu", "size_key": "flops=1",
             "sizes": {"flops": 1.0}, "seconds": 0.001}


@pytest.mark.parametrize("line", [
    "[" * 100_000 + "]" * 100_000,                                  # a RecursionError in the JSON reader
    json.dumps({**GOOD_LINE, "seconds": float("inf")}),
    json.dumps({**GOOD_LINE, "seconds": float("nan")}),
    json.dumps({**GOOD_LINE, "seconds": True}),
    json.dumps({**GOOD_LINE, "seconds": 1e308}),                    # three in a row are an infinite plan
    json.dumps({**GOOD_LINE, "size_key": [1]}),                    # unhashable: a TypeError in the lookup
    json.dumps({**GOOD_LINE, "device_model": {"a": 1}}),
    json.dumps({**GOOD_LINE, "code": [1]}),
    json.dumps({**GOOD_LINE, "sizes": 5}),
    json.dumps({**GOOD_LINE, "sizes": [1, 2]}),
])
def test_a_history_line_that_is_not_a_measurement_is_skipped(tmp_path, line):
    path = tmp_path / "p" / "k.jsonl"
    path.parent.mkdir()
    path.write_text(line + "\n" + json.dumps(GOOD_LINE) + "\n")
    assert [r["seconds"] for r in H.read_records(path)] == [0.001]


@pytest.mark.parametrize("kind", ["fifo", "folder", "/dev/zero"])
def test_a_history_file_that_is_not_a_regular_file_is_read_as_empty_at_once(tmp_path, kind):
    """A FIFO there held compile in open() for good, /dev/zero filled its memory."""
    path = tmp_path / "p" / "k.jsonl"
    path.parent.mkdir()
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "folder":
        path.mkdir()
    else:
        path.symlink_to(kind)
    assert H.read_records(path) == []
