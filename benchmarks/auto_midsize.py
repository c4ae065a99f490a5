"""Mapping time of ``auto`` on the 700-2,000-task band of the generated WfCommons suite (issue 17),
before and after a change, side by side in one run.

Each case is mapped in its own subprocess, once per source tree (``--base`` and this checkout),
the two alternating case by case so that the machine's load falls on both alike. A worker reports
the CPU seconds ``auto`` spent (``time.process_time``, the whole call, and per step of the module
docstring of :mod:`streammap.mappers.auto`), the plan's makespan re-timed under the README's model
(:func:`streammap.mappers.schedule.evaluate`) over plain HEFT's, and the winner's name.

Usage::

    git archive main streammap | tar -x -C /tmp/base      # the "before" source tree
    nice -n 10 .venv/bin/python benchmarks/auto_midsize.py --base /tmp/base [--seeds tune|report]
    .venv/bin/python benchmarks/auto_midsize.py --worker CASE_NAME [--seeds ...] [--profile]

The sample: the generated suite's 700-2,000-task band (drawn with every band, as the suite does), CCR 1 and 10,
one instance per recipe (the first seed of the set that has one), each CCR on one of the shared
workflow clusters in turn (the next one where memory-aware HEFT finds no plan on it), so every recipe,
both CCRs and every cluster appear (16 cases).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "benchmarks"
if not SHARED.exists():
    SHARED = Path("/work/shared/benchmarks")
#: The steps of ``auto`` timed on their own: the names ``auto``'s module calls them by.
STEPS = ("heft", "peft", "lookahead_heft", "chain_schedule", "partition_tasks", "list_schedule",
         "grouped_schedule", "dsc_schedule", "improve", "improve_plan", "extend_search", "join_first_search",
         "cheap_bound", "peak_memory")


def sample(seeds: str):
    """The sample's cases (see the module docstring)."""
    from streammap.bench.cases import WORKFLOW_CLUSTERS
    from streammap.bench.generated import RECIPES, generated_cases
    from streammap.cost.model import CostModel
    from streammap.errors import MappingError
    from streammap.mappers.heft import heft

    def placeable(k) -> bool:
        """Whether memory-aware HEFT finds a plan (else ``auto`` may find none: nothing to time)."""
        try:
            heft(CostModel(*k.load()))
        except MappingError:
            return False
        return True

    # The whole suite's draw (the sizes depend on the bands drawn together), narrowed to the band.
    cases = [k for k in generated_cases(str(SHARED), seeds=seeds, ccrs=[1.0, 10.0]) if k.params["n"] >= 700]
    out, seen = [], set()
    for i, app in enumerate(RECIPES):
        for j, c in enumerate((1.0, 10.0)):
            # The clusters in turn; where a task fits on no device of one (small-memory), the next.
            for step in range(len(WORKFLOW_CLUSTERS)):
                cl = WORKFLOW_CLUSTERS[(2 * i + j + step) % len(WORKFLOW_CLUSTERS)]
                pick = [k for k in cases if k.params["app"] == app and k.ccr == c and k.cluster == cl]
                pick.sort(key=lambda k: k.params["seed"])
                if pick and pick[0].name not in seen and placeable(pick[0]):
                    seen.add(pick[0].name)
                    out.append(pick[0])
                    break
    return out


def worker(name: str, seeds: str, profile: bool) -> dict:
    """Map one case with ``auto`` and report its CPU time, per step too, and its makespan / HEFT."""
    import importlib

    auto_mod = importlib.import_module("streammap.mappers.auto")  # the package exports a function of the name
    from streammap.cost.model import CostModel
    from streammap.mappers.heft import heft
    from streammap.mappers.schedule import evaluate

    case = next(k for k in sample(seeds) if k.name == name)
    graph, cluster = case.load()
    cost = CostModel(graph, cluster)
    steps: dict[str, float] = {}
    gains: dict[str, float] = {}           # step -> product of (makespan out / in) over its calls
    starts: list[str] = []                 # the plans step 5's local searches started from
    depth = [0]

    def timed(step, fn):
        def wrap(*a, **kw):
            if depth[0]:
                return fn(*a, **kw)
            depth[0] += 1
            t = time.process_time()
            try:
                out = fn(*a, **kw)
            finally:
                steps[step] = steps.get(step, 0.0) + time.process_time() - t
                depth[0] -= 1
            if step == "improve" and len(a) > 1:
                starts.append(getattr(a[1], "mapper", "?"))
            got = out[0] if isinstance(out, tuple) else out
            if len(a) > 1 and hasattr(a[1], "makespan") and hasattr(got, "makespan") and a[1].makespan > 0:
                gains[step] = gains.get(step, 1.0) * got.makespan / a[1].makespan
            return out
        return wrap

    for step in STEPS:
        if hasattr(auto_mod, step):
            setattr(auto_mod, step, timed(step, getattr(auto_mod, step)))
    prof = None
    if profile:
        import cProfile
        prof = cProfile.Profile()
        prof.enable()
    t0 = time.process_time()
    s = auto_mod.auto(cost)
    cpu = time.process_time() - t0
    if prof is not None:
        import pstats
        prof.disable()
        pstats.Stats(prof, stream=sys.stderr).sort_stats("cumulative").print_stats(45)
    ms, valid, _ = evaluate(cost, s)
    plain = heft(cost, memory_aware=False)
    hms, hvalid, _ = evaluate(cost, plain)
    return dict(case=name, tasks=cost.n_tasks, edges=cost.n_edges, devices=cost.n_devices, cpu=cpu,
                makespan=ms, valid=bool(valid), heft=hms, heft_valid=bool(hvalid), ratio=ms / hms,
                winner=s.mapper, starts=starts, gains={k: round(v, 5) for k, v in gains.items()}, steps={k: round(v, 3) for k, v in sorted(steps.items(), key=lambda x: -x[1])})


def run_one(src: str | None, name: str, seeds: str) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    if src:
        env["PYTHONPATH"] = src
    out = subprocess.run([sys.executable, __file__, "--worker", name, "--seeds", seeds], env=env,
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def time_compile(src: str | None, workflow: Path, cluster: Path, out: Path) -> tuple[float, float, str]:
    """Wall and CPU seconds of ``streammap compile WORKFLOW --cluster CLUSTER`` as a user runs it (a
    fresh process: imports, the importer, estimates, ``auto``, the plan written), and the plan's
    mapper line."""
    import resource

    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    if src:
        env["PYTHONPATH"] = src
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import sys; from streammap.cli import main; sys.exit(main())", "compile",
                    str(workflow), "--cluster", str(cluster), "--no-history", "-o", str(out)],
                   env=env, check=True, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    mapper = next((ln.strip() for ln in out.read_text().splitlines() if ln.startswith("mapper:")), "?")
    return wall, cpu, mapper


def gm(xs) -> float:
    xs = list(xs)
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", help="source tree of the 'before' (a folder holding streammap/)")
    ap.add_argument("--seeds", default="tune")
    ap.add_argument("--worker")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--only", help="comma-separated substrings of case names to run")
    ap.add_argument("--json", help="write the rows here")
    ap.add_argument("--compile", metavar="WORKFLOW",
                    help="also time `streammap compile WORKFLOW --cluster hetero-2x4.yaml`, before and after")
    a = ap.parse_args()
    if a.worker:
        print(json.dumps(worker(a.worker, a.seeds, a.profile)))
        return 0
    cases = sample(a.seeds)
    if a.only:
        cases = [k for k in cases if any(s in k.name for s in a.only.split(","))]
    for k in cases:                        # generate (and cache) the instances before timing anything
        k.load()
    print(f"load: {os.getloadavg()[0]:.2f}; {len(cases)} cases, seeds {a.seeds}", flush=True)
    rows = []
    for k in cases:
        b = run_one(a.base, k.name, a.seeds) if a.base else None
        n = run_one(None, k.name, a.seeds)
        rows.append(dict(case=k.name, before=b, after=n))
        bb = f"{b['cpu']:7.1f} s {b['ratio']:.4f} {b['winner']:32}" if b else ""
        print(f"{k.name:44} T={n['tasks']:5} E={n['edges']:6} | {bb} | {n['cpu']:7.1f} s {n['ratio']:.4f} "
              f"{n['winner']}", flush=True)
        print("    steps after: " + ", ".join(f"{s}={v:.1f}" for s, v in n["steps"].items() if v >= 0.05), flush=True)
        print("    gains after: " + ", ".join(f"{s}={v:.4f}" for s, v in n["gains"].items()), flush=True)
        if b:
            print("    steps before: " + ", ".join(f"{s}={v:.1f}" for s, v in b["steps"].items() if v >= 0.05),
                  flush=True)
    for side in ("before", "after"):
        rs = [r[side] for r in rows if r[side]]
        if rs:
            cpu = [r["cpu"] for r in rs]
            above = sum(1 for r in rs if r["heft_valid"] and r["ratio"] > 1 + 1e-9)
            print(f"{side:6}: CPU mean {sum(cpu) / len(cpu):.2f} s, max {max(cpu):.2f} s; geomean makespan/HEFT "
                  f"{gm(r['ratio'] for r in rs):.4f}; above a valid HEFT plan: {above}; invalid: "
                  f"{sum(1 for r in rs if not r['valid'])}")
    if a.compile:
        import tempfile

        cluster = SHARED / "clusters" / "hetero-2x4.yaml"
        with tempfile.TemporaryDirectory() as tmp:
            for side, src in (("before", a.base), ("after", None)) if a.base else (("after", None),):
                wall, cpu, mapper = time_compile(src, Path(a.compile), cluster, Path(tmp) / f"{side}.plan.yaml")
                print(f"compile {Path(a.compile).name} on hetero-2x4, {side:6}: {wall:.1f} s wall, {cpu:.1f} s CPU; "
                      f"{mapper}", flush=True)
    print(f"load: {os.getloadavg()[0]:.2f}")
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
