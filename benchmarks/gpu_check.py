"""``make gpu-check``: the GPU tests, and every sample through StreamMAP against its own kernels
called directly with CuPy, on this machine's GPU, offline, with the figures written to a folder.

What it does, in order (each step within the time budget, ``--budget`` seconds, 420 by default,
so the whole check stays under 8 minutes on one GPU):

1. **Probe.** CuPy (:func:`streammap.optional.import_cupy`) and the number of CUDA devices. With
   neither, it prints why and exits 0 having measured nothing (``skipped.txt`` says so): a
   machine without a GPU has nothing to check. ``--emulate`` runs steps 3 and 4 on the CPU with
   NumPy instead, so the script's logic is exercised anywhere (the test suite does that).
2. **GPU tests.** ``pytest -m gpu`` in a subprocess (no network needed); its output goes to
   ``pytest-gpu.txt``, its exit status into the summary. Skipped under ``--emulate``.
3. **Samples.** Each sample of ``samples/`` at a modest size is compiled for a one-device cluster
   (GPU 0, or the CPU under ``--emulate``) with the ``none`` strategy and no history, so that the
   plan calls exactly the program's own kernels. Then, ``--repeats`` times after a warm-up each:

   * *StreamMAP*: :func:`streammap.runtime.run_plan` (threads, records, supervisor, hand-offs);
   * *direct*: the same kernels of a freshly imported program called one after another in the
     plan's order, with CuPy current on GPU 0 (host results moved to the GPU, as the runtime
     moves them), synchronised at the end: what a user would write by hand.

   Reported per sample: tasks, the median wall time of each, StreamMAP's overhead per task
   (``(streammap - direct) / tasks``), and whether the outputs agree (``numpy.allclose``).
4. **Hand-offs** (only with two GPUs or more): a producer on GPU 0 and a consumer on GPU 1 of
   arrays of 1, 64 and 256 MiB, through StreamMAP (a two-device plan) and directly
   (``cupy.asarray`` under GPU 1: a peer copy), median wall time and the achieved GB/s.

Files in ``--out`` (default ``gpu-check-out/``): ``samples.csv``, ``handoffs.csv`` (with two
GPUs), ``pytest-gpu.txt``, ``summary.txt`` (what was printed).

    python benchmarks/gpu_check.py [--out DIR] [--repeats 5] [--budget 420] [--samples a,b]
                                   [--emulate] [--no-tests]
"""

from __future__ import annotations

import argparse
import csv
import logging
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from streammap.cluster.discover import discover
from streammap.cluster.model import Cluster, ClusterSpec, Node
from streammap.compiler import compile as compile_plan
from streammap.ir import resolve_spec
from streammap.optional import import_cupy
from streammap.plan import validate_plan
from streammap.runtime import run_plan
from streammap.runtime.devices import cuda_device_count
from streammap.runtime.loader import load_program
from streammap.runtime.local import item, name_outputs

ROOT = Path(__file__).resolve().parents[1]
#: (name, params) per sample: sizes at which a GPU kernel does real work yet a run takes well
#: under a second.
SAMPLES = [
    ("fm_radio", {"N": 1 << 20, "BANDS": 8}),
    ("tiled_cholesky", {"T": 4, "B": 512}),
    ("mlp_batches", {"BATCHES": 8, "ROWS": 1024, "WIDTH": 1024, "DEPTH": 3}),
    ("small_kernels", {"JOBS": 16, "CELLS": 1 << 16, "STEPS": 50}),
    ("fm_stream", {"FRAMES": 8, "FRAME": 1 << 16, "BANDS": 4}),
    ("mandelbrot", {"ROWS": 512, "COLS": 512, "ITER": 64}),
    ("model_parallel_mlp", {"BATCHES": 4, "ROWS": 256, "WIDTH": 1024}),
]
#: The same samples at sizes a CPU runs in a blink (``--emulate``: the script's logic, not figures).
EMULATED = {"fm_radio": {"N": 4096, "BANDS": 4}, "tiled_cholesky": {"T": 3, "B": 32},
            "mlp_batches": {"BATCHES": 2, "ROWS": 32, "WIDTH": 32, "DEPTH": 2},
            "small_kernels": {"JOBS": 4, "CELLS": 256, "STEPS": 4},
            "fm_stream": {"FRAMES": 2, "FRAME": 1024, "BANDS": 2}, "mandelbrot": {"ROWS": 32, "COLS": 32, "ITER": 8},
            "model_parallel_mlp": {"BATCHES": 2, "ROWS": 16, "WIDTH": 32}}
HANDOFF_MIB = (1, 64, 256)
HANDOFF = '''\
import numpy as np
import streammap

# @stream param
N = 1024


# @stream kernel(out=4*N, device="gpu")
def produce():
    return streammap.array_module().ones(N, dtype=np.float32)


# @stream kernel(bytes=4*N, out=4, device="gpu")
def consume(x):
    return x[:1] * 2


# @stream graph
def handoff():
    return consume(produce())
'''


class Report:
    """Lines printed and kept for ``summary.txt``."""

    def __init__(self):
        self.lines: list[str] = []

    def __call__(self, text: str = "") -> None:
        print(text, flush=True)
        self.lines.append(text)


def probe(emulate: bool) -> tuple[object | None, int, str]:
    """``(cupy or None, GPU count, why not)``: with ``emulate`` the CPU stands in (no CuPy)."""
    if emulate:
        return None, 0, ""
    cupy = import_cupy()
    if cupy is None:
        return None, 0, "CuPy is not installed (make demo installs the CuPy this driver runs)"
    count = cuda_device_count(cupy)
    if count == 0:
        return None, 0, f"CuPy {cupy.__version__} sees no CUDA device (no GPU, or no driver)"
    return cupy, count, ""


def one_device_cluster(emulate: bool, gpus: int = 1) -> Cluster:
    """GPU 0 (or GPUs 0..gpus-1) of this machine, or its CPU under ``emulate``."""
    node = discover().spec.nodes[0]
    if emulate:
        devices = [d for d in node.devices if d.kind == "cpu"]
    else:
        devices = [d for d in node.devices if d.kind == "gpu"][:gpus]
    link = node.link if len(devices) > 1 else None
    return Cluster(ClusterSpec(name="gpu-check", nodes=[Node(name=node.name, link=link, devices=devices)]))


def direct(plan, cupy, ordinal: int = 0):
    """The plan's kernels called one after another, in plan order, without StreamMAP's executor:
    ``(outputs by name, seconds)``. On a GPU, host results move to it as the runtime moves them."""
    program = load_program(plan)
    try:
        results: dict[str, object] = {}

        def ref(tid, i):
            return item(results[tid], i)

        def on_device(value):
            if cupy is not None and isinstance(value, np.ndarray):
                return cupy.asarray(value)
            return value

        def run():
            for t in plan.tasks:
                args = [resolve_spec(a, ref) for a in t.args]
                kwargs = {k: resolve_spec(v, ref) for k, v in t.kwargs.items()}
                out = program.kernels[t.kernel](*args, **kwargs)
                results[t.id] = tuple(on_device(v) for v in out) if isinstance(out, tuple) else on_device(out)
            if cupy is not None:
                cupy.cuda.Device(ordinal).synchronize()

        t0 = time.perf_counter()
        if cupy is not None:
            with cupy.cuda.Device(ordinal):
                run()
        else:
            run()
        took = time.perf_counter() - t0
        outputs = name_outputs(resolve_spec(plan.outputs, ref)) if plan.outputs is not None else {}
        return outputs, took
    finally:
        program.unload()


def through_streammap(plan, emulate: bool, folder: Path) -> tuple[dict, float]:
    t0 = time.perf_counter()
    outputs = run_plan(plan, emulate=emulate, progress=False, record_path=folder / "run.json")
    return outputs, time.perf_counter() - t0


def agree(a: dict, b: dict) -> bool:
    if sorted(a) != sorted(b):
        return False
    for k in a:
        x, y = np.asarray(a[k]), np.asarray(b[k])
        if x.shape != y.shape or not np.allclose(x, y, rtol=1e-4, atol=1e-6, equal_nan=True):
            return False
    return True


def bench_sample(name: str, params: dict, cluster: Cluster, cupy, emulate: bool, repeats: int, folder: Path) -> dict:
    plan = compile_plan(ROOT / "samples" / f"{name}.py", cluster, params=params, history=False, strategy="none")
    sm_out, _ = through_streammap(plan, emulate, folder)          # warm-up (and CuPy's kernel cache)
    d_out, _ = direct(plan, cupy)
    sm = [through_streammap(plan, emulate, folder)[1] for _ in range(repeats)]
    dt = [direct(plan, cupy)[1] for _ in range(repeats)]
    s, d = statistics.median(sm), statistics.median(dt)
    return {"sample": name, "tasks": len(plan.tasks), "streammap_s": s, "direct_s": d,
            "overhead_per_task_us": (s - d) / len(plan.tasks) * 1e6, "ratio": s / d if d > 0 else float("nan"),
            "outputs_agree": agree(sm_out, d_out)}


def bench_handoffs(cupy, repeats: int, folder: Path) -> list[dict]:
    """GPU 0 -> GPU 1 through a two-device plan, and by a direct peer copy."""
    cluster = one_device_cluster(False, gpus=2)
    src = folder / "handoff.py"
    src.write_text(HANDOFF)
    rows = []
    for mib in HANDOFF_MIB:
        n = mib * (1 << 20) // 4
        plan = compile_plan(src, cluster, params={"N": n}, history=False, strategy="none")
        first, second = cluster.devices[0].id, cluster.devices[1].id
        tasks = [plan.tasks[0].model_copy(update={"device": first}),
                 plan.tasks[1].model_copy(update={"device": second})]
        plan = plan.model_copy(update={"tasks": tasks})
        validate_plan(plan)
        through_streammap(plan, False, folder)
        sm = statistics.median(through_streammap(plan, False, folder)[1] for _ in range(repeats))
        times = []
        for _ in range(repeats + 1):
            with cupy.cuda.Device(0):
                a = cupy.ones(n, dtype=np.float32)
                cupy.cuda.Device(0).synchronize()
            t0 = time.perf_counter()
            with cupy.cuda.Device(1):
                b = cupy.asarray(a)
                cupy.cuda.Device(1).synchronize()
            times.append(time.perf_counter() - t0)
            del a, b
        d = statistics.median(times[1:])
        rows.append({"mib": mib, "from": first, "to": second, "streammap_s": sm, "direct_copy_s": d,
                     "direct_gb_s": mib * (1 << 20) / d / 1e9})
    return rows


def write_csv(path: Path, rows: list[dict]) -> None:
    if not rows:
        return
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="gpu-check-out", help="folder for the figures (default gpu-check-out)")
    ap.add_argument("--repeats", type=int, default=5, help="timed runs of each after a warm-up (default 5)")
    ap.add_argument("--budget", type=float, default=420.0, help="seconds; no new step starts past it (default 420)")
    ap.add_argument("--samples", help="comma-separated sample names (default: all)")
    ap.add_argument("--emulate", action="store_true", help="on the CPU with NumPy: the script's logic, not GPU figures")
    ap.add_argument("--no-tests", action="store_true", help="skip pytest -m gpu")
    args = ap.parse_args(argv)
    quiet = logging.getLogger("streammap")
    level = quiet.level
    quiet.setLevel(logging.ERROR)          # slow-task alerts of clause-only plans
    try:
        return check(args)
    finally:
        quiet.setLevel(level)


def check(args) -> int:
    """``main`` after parsing: the steps of the module docstring."""
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    say = Report()
    start = time.perf_counter()

    def left() -> float:
        return args.budget - (time.perf_counter() - start)

    cupy, gpus, why = probe(args.emulate)
    if not args.emulate and cupy is None:
        text = f"gpu-check: skipped: {why}; nothing was measured (--emulate exercises the script on the CPU)"
        say(text)
        (out / "skipped.txt").write_text(text + "\n")
        return 0
    where = "the CPU (emulated: NumPy, no GPU figures)" if args.emulate else f"{gpus} GPU(s), CuPy {cupy.__version__}"
    say(f"gpu-check on {where}; budget {args.budget:.0f} s; figures in {out}/")

    tests_status = "skipped (--emulate)" if args.emulate else "skipped (--no-tests)"
    if not args.emulate and not args.no_tests:
        say("pytest -m gpu ...")
        try:
            r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider"],
                               cwd=ROOT, capture_output=True, text=True, timeout=max(30.0, left() * 0.5))
            (out / "pytest-gpu.txt").write_text(r.stdout + r.stderr)
            last = (r.stdout.strip().splitlines() or ["no output"])[-1]
            tests_status = f"{'passed' if r.returncode == 0 else 'FAILED'}: {last}"
        except subprocess.TimeoutExpired:
            tests_status = "FAILED: ran past its share of the budget"
        say(f"gpu tests: {tests_status}")

    wanted = set(args.samples.split(",")) if args.samples else None
    cluster = one_device_cluster(args.emulate)
    rows, skipped = [], []
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
        folder = Path(tmp)
        say(f"{'sample':<20}{'tasks':>6}{'streammap':>12}{'direct':>12}{'ratio':>8}{'per task':>12}  outputs")
        for name, params in SAMPLES:
            if wanted is not None and name not in wanted:
                continue
            if left() <= 0:
                skipped.append(name)
                continue
            row = bench_sample(name, EMULATED[name] if args.emulate else params, cluster, cupy, args.emulate,
                               args.repeats, folder)
            rows.append(row)
            say(f"{name:<20}{row['tasks']:>6}{row['streammap_s'] * 1e3:>10.2f}ms{row['direct_s'] * 1e3:>10.2f}ms"
                f"{row['ratio']:>7.2f}x{row['overhead_per_task_us']:>10.0f}us  "
                f"{'agree' if row['outputs_agree'] else 'DIFFER'}")
        write_csv(out / "samples.csv", rows)
        handoffs = []
        if gpus >= 2 and left() > 0:
            handoffs = bench_handoffs(cupy, args.repeats, folder)
            for h in handoffs:
                say(f"hand-off {h['mib']:>4} MiB gpu0 -> gpu1: streammap {h['streammap_s'] * 1e3:.2f} ms, "
                    f"direct peer copy {h['direct_copy_s'] * 1e3:.2f} ms ({h['direct_gb_s']:.1f} GB/s)")
            write_csv(out / "handoffs.csv", handoffs)
        elif not args.emulate:
            say("hand-offs: one GPU, nothing to hand off between")
    if skipped:
        say(f"not run (budget spent): {', '.join(skipped)}")
    bad = [r["sample"] for r in rows if not r["outputs_agree"]]
    say(f"done in {time.perf_counter() - start:.0f} s: {len(rows)} sample(s), outputs "
        f"{'agree' if not bad else 'DIFFER for ' + ', '.join(bad)}; gpu tests {tests_status}")
    (out / "summary.txt").write_text("\n".join(say.lines) + "\n")
    return 1 if bad or tests_status.startswith("FAILED") else 0


if __name__ == "__main__":
    sys.exit(main())
