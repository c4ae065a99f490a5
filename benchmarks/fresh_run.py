"""First estimates against a fresh ``streammap run``: ``make demo``'s figure, for every sample.

``benchmarks/estimate_accuracy.py --first-estimate`` judges each task's estimate against its
minimum over runs in one process, after a warm-up: the kernel's own time. What a user of ``make
demo`` sees is one run in a fresh process (``streammap run``), whose first tasks also pay what
being first costs (lazy imports, the allocator; :mod:`streammap.runtime.warm`). This script
discovers this machine (calibrated, as ``make demo`` does), compiles each sample of
``estimate_accuracy.SAMPLES`` for its CPU without history, and runs each plan ``--runs`` times,
each a fresh ``streammap run --no-history`` process, printing per run the record's whole-run
measured/estimated (wall time over the estimated makespan) and its median per-task
measured/estimated, and per sample the medians over the runs.

``--against CHECKOUT`` runs the same plans with another checkout's ``streammap`` (its own
``.venv``, e.g. the main branch's head) too, run for run, the order alternating, so that both are
measured under the same load. The plans are this checkout's; a change that leaves plans alone
(one of the runtime) is then compared on equal terms.

    python benchmarks/fresh_run.py [--runs 3] [--samples fm_radio ...] [--against CHECKOUT]

Wall-clock figures on a shared machine measure the neighbours too: the ``contention`` lines (as
``estimate_accuracy.py`` prints them) say by how much, at the start and at the end. As there, on a
machine more loaded than it has cores and with no BLAS thread count set, every command runs with
one BLAS thread (the first line says so): a 2-thread OpenBLAS product waits for a core another
process holds (at load 10 on 2 cores, fresh runs of tiled_cholesky read ~120x and mlp_batches
~25x with two threads, whichever checkout ran them).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from estimate_accuracy import BLAS_THREAD_VARS, SAMPLES, contention_line, one_blas_thread_wanted

from streammap.runrecord import read_run_record

ROOT = Path(__file__).resolve().parents[1]


def ratios(record_path: Path) -> tuple[float, float]:
    """``(whole run, median per task)`` measured/estimated of one run record."""
    rec = read_run_record(record_path)
    per_task = [t.measured / t.estimated for t in rec.tasks if t.measured and t.estimated]
    return rec.wall_time / rec.estimated_makespan, statistics.median(per_task)


def run_fresh(streammap: Path, plan: Path, out: Path, env: dict) -> tuple[float, float]:
    """One ``streammap run`` of ``plan`` in a fresh process; its :func:`ratios`."""
    subprocess.run([str(streammap), "run", str(plan), "-o", str(out), "--no-history", "--no-progress"],
                   cwd=ROOT, env=env, check=True, capture_output=True)
    return ratios(out.with_suffix(".run.json"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3, help="fresh runs of each plan (default 3)")
    ap.add_argument("--samples", nargs="*", help="only these samples (default: every one of estimate_accuracy.py)")
    ap.add_argument("--against", metavar="CHECKOUT", type=Path,
                    help="also run the plans with this checkout's .venv/bin/streammap, run for run")
    args = ap.parse_args(argv)
    builds = {"this": Path(sys.executable).parent / "streammap"}
    if args.against is not None:
        builds["against"] = args.against.resolve() / ".venv" / "bin" / "streammap"
    samples = [s for s in SAMPLES if not args.samples or s[0] in args.samples]
    with tempfile.TemporaryDirectory(prefix="streammap-fresh-") as tmp:
        tmp = Path(tmp)
        env = {**os.environ, "STREAMMAP_HISTORY": str(tmp / "history")}
        if one_blas_thread_wanted():
            env.update(dict.fromkeys(BLAS_THREAD_VARS, "1"))
        cluster = tmp / "cluster.yaml"
        subprocess.run([str(builds["this"]), "discover", "-o", str(cluster)], env=env, check=True,
                       capture_output=True)
        print(f"BLAS threads: {env.get('OPENBLAS_NUM_THREADS', 'all')}; "
              f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; "
              + next(line for line in cluster.read_text().splitlines() if line.startswith("# calibrated")))
        print(contention_line("start"), flush=True)
        print("per run: whole run measured/estimated (wall time / estimated makespan), "
              "median per-task measured/estimated; then the medians over the runs")
        for name, path, params in samples:
            plan = tmp / f"{name}.yaml"
            subprocess.run([str(builds["this"]), "compile", str(path), "--cluster", str(cluster), "--no-history",
                            "-o", str(plan), *(x for k, v in params.items() for x in ("-D", f"{k}={v}"))],
                           cwd=ROOT, env=env, check=True, capture_output=True)
            got: dict[str, list[tuple[float, float]]] = {b: [] for b in builds}
            for r in range(args.runs):
                for b in (list(builds) if r % 2 == 0 else list(reversed(builds))):
                    got[b].append(run_fresh(builds[b], plan, tmp / f"{name}-{b}.npz", env))
            for b, rows in got.items():
                runs = "  ".join(f"{w:.2f}x/{t:.2f}x" for w, t in rows)
                print(f"{name:<20}{b:<8} {runs}   median whole run {statistics.median(w for w, _ in rows):.2f}x, "
                      f"per task {statistics.median(t for _, t in rows):.2f}x", flush=True)
        print(contention_line("end"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
