"""Accuracy of task-time estimates, from clauses alone and after one ``streammap profile`` run.

For each sample (fm_radio, tiled_cholesky, mlp_batches, at modest sizes) on this machine's CPU
(a one-device cluster from discovery):

1. compile without history (roofline estimates from the clauses), run the plan ``--runs`` times
   after a warm-up run, and take each task's median measured duration;
2. profile the program once into a temporary history folder (``streammap.cost.calibrate.profile``,
   the same params), compile again with that history, run it the same way.

The error of a task is ``|estimate − measured| / measured``, where the estimate is the plan's
``finish − start`` of the task and the measured time its median over the runs. Reported per
sample and pooled over all tasks: the median error in each case, beside the target (at most 25%
after one profile run), and where the second plan's estimates came from.

    python benchmarks/estimate_accuracy.py [--runs 3] [--repeats 3] [--all-devices] [--held-out]
                                           [--first-estimate [--per-kernel]] [--check]

``--held-out`` profiles each program at four *other* sizes instead (one param varied, two below
and two above the compiled size), so that every estimate comes from the history's regression
over sizes rather than from an exact match.

``--first-estimate`` measures the estimates a user gets *before* any profile, against five
cluster files of this machine: the peak figures alone (``streammap discover --no-calibrate``);
round 1's calibration (the side-256 GEMM rate for every task, the copy's bandwidth curve and the
call overhead); round 2's (besides, the "other" and FFT rates for kernels of those compute
classes); and the whole calibration ("new": besides, every matrix product at the rate of the GEMM
curve at its own side and element size, and every factorisation or solver at the rate of the
Cholesky curve at its side, plain arithmetic at the element-wise rate, every FFT at the rate of
the FFT curve, complex or real, at its working set and scans at the scan rate; the column
"round 6" is that file without the FFT curves and the scan rate, as files calibrated before them
price FFTs and scans). The first two give every task the GEMM rate, as the cost
model did before kernels had compute classes. Each sample is compiled without history against
each, and every task's estimate compared with its measured time: the task's *minimum* over
``--runs`` runs after a warm-up (on a shared, loaded machine every disturbance only adds time, so
the minimum is the standard estimate of a task's own time under noise); one program's plans all
run their tasks on the same devices, so they are run once and every column is judged against the
same measurements. Reported per sample and pooled: the median per-task ratio
``max(measured, estimate) / min(...)`` (1 is exact; target at most 2, :data:`FIRST_TARGET`), and
the median ``measured / estimate`` (above 1: the estimates are optimistic). A last row, after the
pooled one, reports ``benchmarks/held_out_kernels.py`` (:data:`HELD_OUT_SAMPLES`), a program the
compute-class rules were not checked on, outside the pooled figure. ``--per-kernel`` prints, beneath
each sample, a line per kernel of the "new" column: its tasks' median measured time, estimate and
``measured / estimate`` (which kernels set a sample's figure, and which way they miss).

A task several of the scheduler's time slices long (a few milliseconds each under Linux's CFS)
is measured slower than its CPU time on a machine more loaded than it has cores, whatever its
estimate: the kernel preempts it once a slice or so, and it waits while other processes run.
Shorter tasks often run a whole run undisturbed, and their minimum over runs is their own time;
a longer one is preempted in every run, so no minimum removes it. ``--first-estimate`` measures
that at its start and at its end (:func:`contention`): the best of a few runs of a CPU-bound
element-wise loop of ~12 ms CPU, its wall-clock time over its CPU time and its preemptions per
run. The estimates price CPU time (discovery keeps each measurement's least disturbed run);
this line says how much more a long task's measured time holds. Mandelbrot's ``escape`` (~15 ms
CPU at the benchmark's size) is such a task: at load 16-23 on 2 cores it took 47-60 ms wall for
15-21 ms CPU, preempted 4-5 times a run.

On a machine more loaded than it has cores (the one-minute load average at least the core count),
``--first-estimate`` runs with one BLAS thread (``OPENBLAS_NUM_THREADS=1``, and the OpenMP and MKL
equivalents, unless one is set already; the script starts itself again with them): a 2-thread
OpenBLAS product waits for a core that another process holds, and in four runs of seven the
matrix-product tasks ran 7-500x slower than any estimate, a figure of the machine's load, not of
the estimates. Discovery runs in the same process, so the GEMM curve it measures is the
one-thread curve the tasks then run at. The first line says how many BLAS threads ran.

``--all-devices`` compiles for every device discovery finds (GPUs run with CuPy) instead of the
CPU alone; ``--check`` exits with status 1 when the pooled median after profiling misses the
target.
"""

from __future__ import annotations

import argparse
import inspect
import logging
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from streammap.cluster.discover import calibrate, discover
from streammap.cluster.model import Cluster, ClusterSpec, Node
from streammap.compiler import build_plan, load_source_graph
from streammap.cost.calibrate import profile
from streammap.cost.history import History, estimate_sources_summary
from streammap.cost.model import CostModel, lower_bound
from streammap.mappers import get_mapper
from streammap.runrecord import read_run_record
from streammap.runtime import run_plan

TARGET = 0.25
#: --first-estimate: the median per-task max(measured/estimate, estimate/measured) to reach.
FIRST_TARGET = 2.0
#: --held-out: (param, sizes profiled) per sample; the compiled size is the one in SAMPLES.
HELD_OUT = {"fm_radio": ("N", [1 << 14, 1 << 15, 1 << 17, 1 << 18]),
            "tiled_cholesky": ("B", [64, 96, 192, 256]),
            "mlp_batches": ("WIDTH", [128, 192, 384, 512]),
            "small_kernels": ("CELLS", [1024, 2048, 8192, 16384]),
            "fm_stream": ("FRAME", [1 << 12, 1 << 13, 1 << 15, 1 << 16]),
            "mandelbrot": ("ITER", [32, 48, 96, 128]),
            "model_parallel_mlp": ("WIDTH", [128, 256, 768, 1024])}
ROOT = Path(__file__).resolve().parents[1]
SAMPLES = [
    ("fm_radio", ROOT / "samples" / "fm_radio.py", {"N": 1 << 16, "BANDS": 8}),
    ("tiled_cholesky", ROOT / "samples" / "tiled_cholesky.py", {"T": 4, "B": 128}),
    ("mlp_batches", ROOT / "samples" / "mlp_batches.py", {"BATCHES": 8, "ROWS": 256, "WIDTH": 256, "DEPTH": 3}),
    ("small_kernels", ROOT / "samples" / "small_kernels.py", {"JOBS": 16, "CELLS": 4096, "STEPS": 100}),
    ("fm_stream", ROOT / "samples" / "fm_stream.py", {"FRAMES": 8, "FRAME": 1 << 14, "BANDS": 4}),
    ("mandelbrot", ROOT / "samples" / "mandelbrot.py", {"ROWS": 256, "COLS": 256, "ITER": 64}),
    ("model_parallel_mlp", ROOT / "samples" / "model_parallel_mlp.py", {"BATCHES": 4, "ROWS": 64, "WIDTH": 512}),
]
#: --first-estimate: a program none of the compute-class rules was checked on (a random, an
#: arithmetic, a transcendental, a real-FFT, a scan and a Gram kernel), reported beside the samples and
#: left out of the pooled figure.
HELD_OUT_SAMPLES = [("held_out_kernels", ROOT / "benchmarks" / "held_out_kernels.py", {"JOBS": 4, "B": 192})]


def local_cluster(all_devices: bool, calibrated: bool = False, found=None) -> Cluster:
    found = found or discover()
    spec = (calibrate(found) if calibrated else found).spec
    if not all_devices:
        node = spec.nodes[0]
        cpu = [d for d in node.devices if d.kind == "cpu"]
        spec = ClusterSpec(name="local-cpu", nodes=[Node(name=node.name, devices=cpu)])
    return Cluster(spec, path="local")


def make_plan(path, params, cluster, history_dir=None):
    """Compile, through ``streammap.compile(history=...)`` when it has that parameter."""
    from streammap.compiler import compile as compile_plan
    hook = History.load(history_dir).as_hook() if history_dir is not None else None
    if "history" in inspect.signature(compile_plan).parameters:
        return compile_plan(path, cluster, params=params, history=hook if hook is not None else False)
    graph = load_source_graph(path, params)
    cost = CostModel(graph, cluster, history=hook)
    heft = get_mapper("heft")
    return build_plan(graph, cluster, cost, heft(cost), source_path=path, lower=lower_bound(cost),
                      heft_makespan=None)


def ratios(plan, runs: int) -> list[float]:
    """Per task: median measured / estimate, over ``runs`` runs after a warm-up (as the run record has them)."""
    measured = measured_times(plan, runs)
    return [statistics.median(measured[t.id]) / (t.finish - t.start)
            for t in plan.tasks if measured[t.id] and t.finish > t.start]


def measured_times(plan, runs: int) -> dict[str, list[float]]:
    measured: dict[str, list[float]] = {t.id: [] for t in plan.tasks}
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(runs + 1):
            rec = Path(tmp) / f"r{k}.json"
            run_plan(plan, progress=False, record_path=rec)
            if k:
                for t in read_run_record(rec).tasks:
                    if t.measured:
                        measured[t.id].append(t.measured)
    return measured


def first_estimate(args) -> int:
    """The ``--first-estimate`` mode (see the module docstring)."""
    found = discover()
    calibrated = local_cluster(args.all_devices, calibrated=True, found=found)
    peak = local_cluster(args.all_devices, found=found)
    clusters = {"peak": one_rate(peak), "round 1": one_rate(calibrated), "round 2": no_gemm_curve(calibrated),
                "round 6": before_fft_curves(calibrated), "new": calibrated}
    for d in calibrated.devices:
        curve = ", ".join(f"{n / 2**20:.3g} MiB {r / 1e9:.3g}" for n, r in d.bandwidth_curve)
        gemm = ", ".join(f"{n:g} {r / 1e9:.3g}" for n, r in d.gemm_curve)
        factor = ", ".join(f"{n:g} {r / 1e9:.3g}" for n, r in d.factor_curve)
        print(f"device {d.id} ({d.model or d.kind}): peak {d.flops / 1e9:.4g} GFLOP/s, {d.mem_bandwidth / 1e9:.4g} GB/s; "
              f"achieved GEMM {_g(d.achieved_flops)} GFLOP/s" + (f" (by side: {gemm})" if gemm else "")
              + (f", Cholesky by side: {factor}" if factor else "")
              + f", other {_g(d.achieved_other_flops)} GFLOP/s, element-wise {_g(d.achieved_elementwise_flops)} GFLOP/s, FFT {_g(d.achieved_fft_flops)} GFLOP/s"
              + "".join(f" ({what} by working set: " + ", ".join(f"{n / 2**10:g} KiB {r / 1e9:.3g}" for n, r in c) + ")"
                        for what, c in (("complex", d.fft_curve), ("real pair", d.rfft_curve)) if c)
              + f", random {_g(d.achieved_random_flops)} GFLOP/s, transcendental {_g(d.achieved_transcendental_flops)} GFLOP/s, "
              f"scan {_g(d.achieved_scan_flops)} GFLOP/s, "
              f"{_g(d.achieved_bandwidth)} GB/s" + (f" (by working set: {curve} GB/s)" if curve else "")
              + (f", call {d.call_overhead * 1e6:.3g} us" if d.call_overhead is not None else ""))
    print(f"BLAS threads: {os.environ.get('OPENBLAS_NUM_THREADS', 'all')} (load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")
    print(contention_line("start"), flush=True)
    print(f"target: median per-task max(measured/estimate, estimate/measured) <= {FIRST_TARGET:g} before any profile; "
          f"measured = each task's minimum over {args.runs} runs after a warm-up")
    print(f"{'':<26}" + "".join(f"{key + ': ratio':>18}{'meas/est':>10}" for key in clusters))
    pooled: dict[str, list[float]] = {key: [] for key in clusters}
    for name, path, params in SAMPLES:
        for key, got in sample_row(name, path, params, clusters, args.runs, args.per_kernel).items():
            pooled[key] += got
    row = "".join(f"{statistics.median(_sym(r) for r in got):>17.2f}x{statistics.median(got):>9.2f}x"
                  for got in pooled.values())
    mc = statistics.median(_sym(r) for r in pooled["new"])
    print(f"{'all tasks':<20}{len(pooled['new']):>6}{row}  target <= {FIRST_TARGET:g}x: "
          f"{'met' if mc <= FIRST_TARGET else 'MISSED'}")
    for name, path, params in HELD_OUT_SAMPLES:
        sample_row(name + " (held out)", path, params, clusters, args.runs, args.per_kernel)
    print(contention_line("end"))
    return 1 if args.check and mc > FIRST_TARGET else 0


def sample_row(name, path, params, clusters: dict, runs: int, per_kernel: bool = False) -> dict[str, list[float]]:
    """One program's row: each cluster's per-task ratios, printed as their medians; with
    ``per_kernel``, a line per kernel of the last column's plan beneath it."""
    row, seen, out = "", {}, {}
    for key, cluster in clusters.items():
        plan = make_plan(path, params, cluster)
        got = out[key] = min_ratios(plan, runs, seen)
        row += f"{statistics.median(_sym(r) for r in got):>17.2f}x{statistics.median(got):>9.2f}x"
    print(f"{name:<20}{len(got):>6}{row}", flush=True)
    if per_kernel:
        print_kernels(plan, seen)
    return out


def print_kernels(plan, seen: dict) -> None:
    """One line per kernel of ``plan``: its tasks' median measured time, median estimate and median
    ``measured / estimate`` (the tasks that set a sample's figure, and which way they miss)."""
    by_kernel: dict[str, list] = {}
    for t in plan.tasks:
        if (t.id, t.device) in seen and t.finish > t.start:
            by_kernel.setdefault(t.kernel, []).append((seen[t.id, t.device], t.finish - t.start))
    for kernel, pairs in by_kernel.items():
        measured = statistics.median(m for m, _ in pairs)
        estimate = statistics.median(e for _, e in pairs)
        ratio = statistics.median(m / e for m, e in pairs)
        print(f"    {kernel:<22}{len(pairs):>4} tasks  measured {measured * 1e6:>9.1f} us  "
              f"estimate {estimate * 1e6:>9.1f} us  measured/estimate {ratio:.2f}x", flush=True)


def min_ratios(plan, runs: int, seen: dict) -> list[float]:
    """Per task: its minimum measured time over ``runs`` runs / the plan's estimate.

    ``seen`` maps (task id, device) to the minimum measured in an earlier plan of the same program:
    a plan whose every task runs where an earlier one ran is compared with those measurements
    instead of being run again, so that every column of a row is judged against the same times.
    """
    if any((t.id, t.device) not in seen for t in plan.tasks):
        measured = measured_times(plan, runs)
        seen.update(((t.id, t.device), min(measured[t.id])) for t in plan.tasks if measured[t.id])
    return [seen[t.id, t.device] / (t.finish - t.start)
            for t in plan.tasks if (t.id, t.device) in seen and t.finish > t.start]


#: Steps of :func:`contention`'s loop over 2^16 float64s: ~12 ms of CPU on a 2-core EPYC VM, a few
#: scheduler slices, as long as the longest sample task (mandelbrot's ``escape``).
CONTENTION_STEPS = 120
#: Runs of :func:`contention`; it keeps the least disturbed.
CONTENTION_RUNS = 5


def contention(steps: int = CONTENTION_STEPS, runs: int = CONTENTION_RUNS) -> tuple[float, float, list[int]]:
    """How much longer than its CPU time a task of several scheduler slices is measured here.

    Runs ``steps`` steps of CPU-bound element-wise arithmetic on one thread (``a = a * 0.5 + y``,
    a compare and a select over 2^16 float64s: in cache, no allocation the allocator does not
    reuse) ``runs`` times, and returns the least disturbed run's wall-clock time over its CPU time
    (1 on a machine with a core to spare), that run's CPU seconds, and the involuntary context
    switches of each run (the times the kernel preempted it).
    """
    y = np.linspace(0.0, 1.0, 1 << 16)
    best, switches = (np.inf, 0.0), []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_THREAD).ru_nivcsw
        wall, cpu = time.perf_counter(), time.thread_time()
        a = y
        for _ in range(steps):
            a = np.where(a * 0.5 + y <= 4.0, a * 0.5 + y, 2.0)
        cpu, wall = time.thread_time() - cpu, time.perf_counter() - wall
        switches.append(resource.getrusage(resource.RUSAGE_THREAD).ru_nivcsw - before)
        best = min(best, (wall / max(cpu, 1e-9), cpu))
    return best[0], best[1], switches


def contention_line(when: str, probe=contention) -> str:
    """The ``contention`` line ``--first-estimate`` prints at its ``when`` (``"start"``, ``"end"``)."""
    ratio, cpu, switches = probe()
    return (f"contention at the {when}: a CPU-bound run of {cpu * 1e3:.1f} ms CPU took {ratio:.2f}x that on the "
            f"wall clock at best ({min(switches)}-{max(switches)} preemptions a run): tasks of several "
            f"milliseconds are measured up to that much above their CPU time here")


def one_rate(cluster: Cluster) -> Cluster:
    """``cluster`` with every task's ``flops`` at the side-256 GEMM rate (``achieved_other_flops`` and
    ``achieved_fft_flops`` = ``achieved_flops``, or the peak; no GEMM curve): the cost model before
    kernels had compute classes."""
    gemm = lambda d: d.achieved_flops or d.flops       # noqa: E731
    return _with_devices(cluster, lambda d: {"achieved_other_flops": gemm(d), "achieved_fft_flops": gemm(d),
                                             "achieved_random_flops": gemm(d), "achieved_elementwise_flops": gemm(d),
                                             "achieved_transcendental_flops": gemm(d), "gemm_curve": None,
                                             "achieved_scan_flops": gemm(d), "fft_curve": None, "rfft_curve": None})


def no_gemm_curve(cluster: Cluster) -> Cluster:
    """``cluster`` without the GEMM curves: every product at the side-256 GEMM's rate, whatever its
    size and element type, and random and transcendental kernels at the "other" mix's rate (a file
    calibrated before those figures existed)."""
    return _with_devices(cluster, lambda d: {"gemm_curve": None, "achieved_random_flops": None,
                                             "achieved_transcendental_flops": None, "achieved_elementwise_flops": None,
                                             **NEW_IN_ROUND_7})


#: The fields of round 7 (the FFT curves by working set, the scan rate), cleared for the columns before it.
NEW_IN_ROUND_7 = {"fft_curve": None, "rfft_curve": None, "achieved_scan_flops": None}


def before_fft_curves(cluster: Cluster) -> Cluster:
    """``cluster`` without the FFT curves and the scan rate: every FFT at ``achieved_fft_flops``
    whatever its size, scans at the element-wise rate, as a file calibrated in round 6 prices them."""
    return _with_devices(cluster, lambda d: dict(NEW_IN_ROUND_7))


def _with_devices(cluster: Cluster, update) -> Cluster:
    nodes = [n.model_copy(update={"devices": [d.model_copy(update=update(d)) for d in n.devices]})
             for n in cluster.spec.nodes]
    return Cluster(cluster.spec.model_copy(update={"nodes": nodes}), path=cluster.path)


def _sym(r: float) -> float:
    return max(r, 1.0 / r)


def _g(x):
    return f"{x / 1e9:.4g}" if x else "—"


def errors(plan, runs: int) -> list[float]:
    """Per task: |estimate − median measured| / median measured, over ``runs`` runs after a warm-up."""
    measured = measured_times(plan, runs)
    out = []
    for t in plan.tasks:
        if measured[t.id]:
            m = statistics.median(measured[t.id])
            out.append(abs((t.finish - t.start) - m) / m)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3, help="timed runs per plan after a warm-up (default 3)")
    ap.add_argument("--repeats", type=int, default=3, help="profile repeats (default 3)")
    ap.add_argument("--all-devices", action="store_true", help="compile for every local device, not the CPU alone")
    ap.add_argument("--held-out", action="store_true", help="profile at other sizes only (regression lookups)")
    ap.add_argument("--first-estimate", action="store_true",
                    help="estimates before any profile: peak against calibrated cluster files, no history")
    ap.add_argument("--check", action="store_true", help="exit 1 when the pooled median misses the target")
    ap.add_argument("--per-kernel", action="store_true",
                    help="--first-estimate: beneath each sample, every kernel's median measured/estimate (last column)")
    args = ap.parse_args(argv)
    logging.getLogger("streammap").setLevel(logging.ERROR)   # slow-task alerts of clause-only plans
    if args.first_estimate:
        return first_estimate(args)

    cluster = local_cluster(args.all_devices)
    names = ", ".join(f"{d.id} ({d.model or d.kind})" for d in cluster.devices)
    how = "profiled at other sizes (regression)" if args.held_out else "one profile run"
    print(f"devices: {names}; target: median |estimate - measured| / measured <= {TARGET:.0%} after {how}")
    print(f"{'sample':<16}{'tasks':>6}{'clauses only':>14}{'after profile':>15}  estimates after profile")
    pooled_before, pooled_after = [], []
    with tempfile.TemporaryDirectory(prefix="streammap-history-") as hist:
        for name, path, params in SAMPLES:
            before = errors(make_plan(path, params, cluster), args.runs)
            devs = None if args.all_devices else ["cpu"]
            if args.held_out:
                param, values = HELD_OUT[name]
                for v in values:
                    profile(path, params={**params, param: v}, repeats=args.repeats, devices=devs,
                            history_dir=hist)
            else:
                profile(path, params=params, repeats=args.repeats, devices=devs, history_dir=hist)
            plan = make_plan(path, params, cluster, history_dir=hist)
            after = errors(plan, args.runs)
            pooled_before += before
            pooled_after += after
            print(f"{name:<16}{len(plan.tasks):>6}{statistics.median(before):>14.1%}"
                  f"{statistics.median(after):>15.1%}  {estimate_sources_summary(plan)}")
    mb, ma = statistics.median(pooled_before), statistics.median(pooled_after)
    print(f"{'all tasks':<16}{len(pooled_after):>6}{mb:>14.1%}{ma:>15.1%}  "
          f"target <= {TARGET:.0%}: {'met' if ma <= TARGET else 'MISSED'}")
    return 1 if args.check and ma > TARGET else 0


#: Variables that set the BLAS libraries' thread counts.
BLAS_THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def one_blas_thread_wanted() -> bool:
    """Whether timings here should run with one BLAS thread: the machine is more loaded than it
    has cores and no BLAS thread count is set (module docstring)."""
    return not any(v in os.environ for v in BLAS_THREAD_VARS) and os.getloadavg()[0] >= (os.cpu_count() or 1)


def one_blas_thread_when_loaded(argv: list[str]) -> None:
    """Start this script again with one BLAS thread when ``--first-estimate`` runs where
    :func:`one_blas_thread_wanted`; else return.

    The variables must be set before NumPy loads its BLAS, hence a fresh process.
    """
    if "--first-estimate" not in argv or not one_blas_thread_wanted():
        return
    os.environ.update(dict.fromkeys(BLAS_THREAD_VARS, "1"))
    os.execv(sys.executable, [sys.executable, __file__, *argv])


if __name__ == "__main__":
    one_blas_thread_when_loaded(sys.argv[1:])
    sys.exit(main())
