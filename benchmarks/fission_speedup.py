"""Data parallelism: estimated and measured speedup of splitting one kernel over k devices.

The kernel is ``escape`` of ``samples/mandelbrot.py`` (every row independent, ``split=0``).

* **Estimated** (large input, 4096 x 4096 pixels, 512 iterations): for k = 1 .. 8, the cost
  model's time of the split kernel with its scatter and gather, transfers included
  (:func:`streammap.strategies.fission.shard_plans`; on unequal devices the shards are sized by
  speed), and the mapper's makespan of the whole program with ``escape`` split k ways
  (``heft``), each against k = 1 on the same cluster: a homogeneous node (the four A100s of
  ``hetero-2x4``, k <= 4) and the whole ``hetero-2x4``, where ``ideal`` is the k devices'
  aggregate speed in units of the fastest (compute only: a V100 here is 0.8 of an A100 by the
  roofline of its flops clause, and behind the network), and ``reach`` the most k shards can give
  with transfers, scatter and gather, but no launch overheads or latencies
  (``t1 / (fixed + 1 / sum 1/b_d)`` of :func:`streammap.strategies.fission.shard_costs`: each
  shard's input and output cross the link to the device that scatters and gathers); where ``reach < 0.85 k`` the target is out of reach
  for that k on that cluster.
* **Measured** (a size this CPU runs in a few seconds): the same program split k ways, run by the
  local executor under ``--emulate`` (every device a thread on this machine's CPU), wall time
  against k = 1, beside the estimate for that size. Emulated devices share this machine's cores,
  so the measured speedup is bounded by the cores free to the run, not by the plan.

Usage::

    python benchmarks/fission_speedup.py [--rows 1024 --iter 48] [--reps 3]

Target (issue 5): estimated speedup at least 0.85 k for large inputs.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from streammap.cluster.model import cluster_from_dict, load_cluster
from streammap.compiler import build_plan, load_source_graph
from streammap.cost.model import CostModel, lower_bound
from streammap.mappers import get_mapper
from streammap.strategies.fission import _pins, shard_costs, shard_plans, split_graph

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "samples" / "mandelbrot.py"
HETERO = ROOT.parent / "shared" / "benchmarks" / "clusters" / "hetero-2x4.yaml"
TARGET = 0.85


def escape_id(graph) -> str:
    return next(t for t, a in graph.nodes(data=True) if a["kernel"] == "escape")


def split_for(graph, cluster, k: int):
    """The program with ``escape`` split k ways as the data strategy would (shares and pins)."""
    tid = escape_id(graph)
    if k == 1:
        return graph
    plan = shard_plans(graph, tid, cluster, k_max=k).get(k)
    if plan is None:                   # k shards cannot pay at this size: split equally anyway
        return split_graph(graph, {tid: k})
    fractions, pins = _pins(cluster, graph.nodes[tid], plan)
    return split_graph(graph, {tid: fractions}, {tid: pins})


def program_makespan(graph, cluster, k: int) -> float:
    return get_mapper("heft")(CostModel(split_for(graph, cluster, k), cluster)).makespan


def estimated(cluster, kmax: int, params: dict) -> float:
    """Print T(k) and speedups; return the worst speedup / k."""
    graph = load_source_graph(SAMPLE, params)
    plans = shard_plans(graph, escape_id(graph), cluster, k_max=kmax)
    t_all, home, _, b, fixed = shard_costs(graph, escape_id(graph), cluster)
    whole = CostModel(graph, cluster).time[CostModel(graph, cluster).pos[escape_id(graph)]]
    base = program_makespan(graph, cluster, 1)
    t1 = plans[1].time
    print(f"\n{cluster.name}: escape on {params['ROWS']}x{params['COLS']} pixels, {params['ITER']} iterations")
    print(f"{'k':>3} {'kernel T(k)':>12} {'speedup':>8} {'/k':>6} {'ideal':>6} {'/ideal':>7} {'reach':>6}   "
          f"{'program':>10} {'speedup':>8}  target")
    worst = None
    for k in range(1, kmax + 1):
        if k not in plans:
            continue
        sp = t1 / plans[k].time
        ideal = float((whole.min() / whole[plans[k].devices]).sum())   # the k devices' aggregate speed
        reach = float(t_all[home] / (fixed + 1.0 / (1.0 / b[plans[k].devices]).sum()))  # no launch, no latency
        prog = program_makespan(graph, cluster, k)
        worst = sp / k if worst is None else min(worst, sp / k)
        verdict = "PASS" if sp >= TARGET * k else ("FAIL" if reach >= TARGET * k else "FAIL (out of reach)")
        print(f"{k:>3} {plans[k].time * 1e3:>10.3f}ms {sp:>8.2f} {sp / k:>6.2f} {ideal:>6.2f} {sp / ideal:>7.2f} "
              f"{reach:>6.2f}   {prog * 1e3:>8.3f}ms {base / prog:>8.2f}  {verdict}")
    return worst


def measured(cluster, ks, params: dict, reps: int, tmp: Path) -> None:
    import streammap
    graph = load_source_graph(SAMPLE, params)
    plans = shard_plans(graph, escape_id(graph), cluster, k_max=max(ks))
    print(f"\nmeasured on this CPU under --emulate ({os.cpu_count()} cores), {params['ROWS']}x{params['COLS']} "
          f"pixels, {params['ITER']} iterations, best of {reps}")
    print(f"{'k':>3} {'wall':>10} {'measured':>9} {'estimated':>10}")
    base = None
    for k in ks:
        g = split_for(graph, cluster, k)
        cost = CostModel(g, cluster)
        sched = get_mapper("heft")(cost)
        plan = build_plan(g, cluster, cost, sched, source_path=SAMPLE, lower=lower_bound(cost), heft_makespan=None)
        best = float("inf")
        for _ in range(reps):
            t0 = time.perf_counter()
            streammap.run(plan, emulate=True, telemetry=False)
            best = min(best, time.perf_counter() - t0)
        base = base or best
        est = f"{plans[1].time / plans[k].time:>10.2f}" if k in plans else f"{'(no gain)':>10}"
        print(f"{k:>3} {best * 1e3:>8.1f}ms {base / best:>9.2f} {est}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=1024, help="image side for the measured runs (default 1024)")
    ap.add_argument("--iter", type=int, default=48, help="iterations for the measured runs (default 48)")
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args(argv)
    if not HETERO.exists():
        print(f"needs {HETERO}", file=sys.stderr)
        return 2
    hetero = load_cluster(HETERO)
    spec = hetero.spec.model_dump(mode="json", exclude_none=True)
    a100 = dict(spec, name="a100-node", nodes=[spec["nodes"][0]])
    a100.pop("network", None)
    large = {"ROWS": 4096, "COLS": 4096, "ITER": 512}
    worst = estimated(cluster_from_dict(a100), 4, large)
    estimated(hetero, 8, large)
    measured(cluster_from_dict(a100), [1, 2, 4], {"ROWS": args.rows, "COLS": args.rows, "ITER": args.iter},
             args.reps, Path("."))
    print(f"\ntarget: estimated speedup >= {TARGET} k on the homogeneous node for a large input: "
          f"worst speedup/k {worst:.3f}: {'PASS' if worst >= TARGET else 'FAIL'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
