"""The first-estimate benchmark: the held-out program compiles into the classes it was written for,
``--per-kernel`` says which kernels miss and which way, and the script runs with one BLAS thread only when the machine is more loaded than it has cores
and the user set no thread count."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from streammap.directives import parse_program
from tests.helpers.modules import load_file
from tests.helpers.paths import ROOT


def _benchmark():
    return load_file(ROOT / "benchmarks" / "estimate_accuracy.py", "estimate_accuracy")


def test_the_held_out_program_has_one_kernel_of_each_new_class():
    g = parse_program(ROOT / "benchmarks" / "held_out_kernels.py")
    assert {a["kernel"]: a["compute_class"] for _, a in g.nodes(data=True)} == {
        "noise": "random", "wave": "transcendental", "shrink": "other", "resonate": "other", "spectrum": "rfft",
        "drawdown": "scan", "gram": "gram", "total": "other"}


def test_per_kernel_lines_say_which_kernels_miss_and_which_way(capsys):
    """One line per kernel: its tasks' median measured time, estimate and measured/estimate."""
    def task(i, kernel, estimate):
        return SimpleNamespace(id=f"t{i}", device="n/cpu", kernel=kernel, start=0.0, finish=estimate)
    plan = SimpleNamespace(tasks=[task(0, "bandpass", 1e-3), task(1, "bandpass", 1e-3), task(2, "smooth", 1e-4)])
    seen = {("t0", "n/cpu"): 0.5e-3, ("t1", "n/cpu"): 0.7e-3, ("t2", "n/cpu"): 3e-4}
    _benchmark().print_kernels(plan, seen)
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[:3] for line in lines] == [["bandpass", "2", "tasks"], ["smooth", "1", "tasks"]]
    assert lines[0].endswith("measured/estimate 0.60x") and lines[1].endswith("measured/estimate 3.00x")


@pytest.mark.parametrize(("argv", "env", "load", "restarts"), [
    (["--first-estimate"], {}, 16.0, True),
    (["--first-estimate"], {}, 0.5, False),                                  # a quiet machine
    (["--first-estimate"], {"OPENBLAS_NUM_THREADS": "2"}, 16.0, False),      # the user's choice stands
    ([], {}, 16.0, False),                                                   # the profile mode
])
def test_one_blas_thread_only_under_load_and_only_for_first_estimates(monkeypatch, argv, env, load, restarts):
    bench = _benchmark()
    for var in bench.BLAS_THREAD_VARS:      # set, then removed: monkeypatch restores the real environment
        monkeypatch.setenv(var, "unset")
        monkeypatch.delenv(var)
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    monkeypatch.setattr(bench.os, "getloadavg", lambda: (load, load, load))
    monkeypatch.setattr(bench.os, "cpu_count", lambda: 2)
    execs = []
    monkeypatch.setattr(bench.os, "execv", lambda exe, args: execs.append(args))
    bench.one_blas_thread_when_loaded(argv)
    assert bool(execs) == restarts
    if restarts:
        assert execs[0][-len(argv):] == argv
        assert all(bench.os.environ[v] == "1" for v in bench.BLAS_THREAD_VARS)


def test_contention_compares_a_long_runs_wall_clock_with_its_cpu_time():
    """The least disturbed run's wall/CPU ratio is at least 1 (one thread cannot use more CPU than
    wall time), its CPU time is positive, and every run reports its preemptions."""
    ratio, cpu, switches = _benchmark().contention(steps=4, runs=3)
    assert ratio >= 0.99 and cpu > 0
    assert len(switches) == 3 and all(n >= 0 for n in switches)


def test_the_contention_line_says_how_far_above_cpu_time_long_tasks_are_measured():
    line = _benchmark().contention_line("start", probe=lambda: (2.5, 0.012, [3, 5, 4]))
    assert line.startswith("contention at the start: a CPU-bound run of 12.0 ms CPU took 2.50x")
    assert "(3-5 preemptions a run)" in line
