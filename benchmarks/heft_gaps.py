"""HEFT's CPU time against another revision of ``heft.py``, in one process, schedules compared.

Issue 16: at 1M tasks x 1,024 devices most of HEFT's time went into the search of a device's
idle gaps (``gap_fit``). This benchmark builds each generated graph's cost model once (the graphs
of :mod:`benchmarks.scale`, node-link JSON kept in ``--workdir``, written there if missing), then
runs HEFT of this checkout and HEFT of ``--against`` (a git revision; its ``heft.py`` is loaded
from ``git show`` as a separate module) alternately, ``--repeat`` times each, and prints the least
CPU seconds (``time.process_time``) of each, with a SHA-256 fingerprint of both schedules (device,
start, finish, order): they must be equal.

    nice -n 10 .venv/bin/python benchmarks/heft_gaps.py --tasks 100000 300000 --devices 1024 \
        --workdir /tmp/scale --against main
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from streammap.bench.cases import random_cluster
from streammap.cost.model import CostModel
from streammap.io.importers import load_graph
from streammap.mappers.heft import heft

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from scale import graph_file  # noqa: E402


def fingerprint(schedule) -> str:
    """SHA-256 (16 hex digits) of a schedule's device, start, finish and order, as bytes."""
    h = hashlib.sha256()
    for values in (schedule.device, schedule.start, schedule.finish, schedule.seq):
        h.update(np.ascontiguousarray(values).tobytes())
    return h.hexdigest()[:16]


def heft_of_revision(rev: str, folder: Path):
    """The ``heft`` function of ``streammap/mappers/heft.py`` at git revision ``rev``."""
    source = subprocess.run(["git", "show", f"{rev}:streammap/mappers/heft.py"], cwd=ROOT, check=True,
                            capture_output=True, text=True).stdout
    path = folder / "heft_against.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("heft_against", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.heft


def cpu_of(fn, cost):
    t0 = time.process_time()
    schedule = fn(cost)
    return time.process_time() - t0, schedule


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, nargs="+", default=[100_000])
    ap.add_argument("--devices", type=int, nargs="+", default=[1024])
    ap.add_argument("--against", metavar="REV", help="git revision whose heft.py to time beside this one")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--workdir", metavar="DIR", help="keep (and reuse) the generated graphs there")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(args.workdir or tmp)
        folder.mkdir(parents=True, exist_ok=True)
        other = heft_of_revision(args.against, Path(tmp)) if args.against else None
        print(f"{'tasks':>9} {'devices':>7} {'this cpu s':>11} {'against s':>10} {'ratio':>6}  fingerprints")
        for n in args.tasks:
            graph, _ = graph_file(n, folder)
            g = load_graph(graph, max_tasks=max(n, 200_000))
            for p in args.devices:
                cost = CostModel(g, random_cluster(p, n_models=8))
                mine, theirs = [], []
                for _ in range(args.repeat):
                    s, sched = cpu_of(heft, cost)
                    mine.append(s)
                    if other is not None:
                        s, sched_o = cpu_of(other, cost)
                        theirs.append(s)
                fp = fingerprint(sched)
                if other is None:
                    print(f"{n:>9} {p:>7} {min(mine):>11.2f} {'':>10} {'':>6}  {fp}", flush=True)
                    continue
                fo = fingerprint(sched_o)
                same = "same" if fp == fo else "DIFFERENT"
                print(f"{n:>9} {p:>7} {min(mine):>11.2f} {min(theirs):>10.2f} {min(theirs) / min(mine):>6.2f}"
                      f"  {fp} {fo} {same}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
