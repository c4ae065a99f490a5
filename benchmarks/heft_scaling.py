"""How HEFT's mapping time grows with the graph and the cluster.

Generates seeded random layered DAGs in the style of the HEFT paper's random graph generator
(Topcuoglu, Hariri, Wu, IEEE TPDS 2002, section 5.1: number of tasks ``v``, shape ``alpha``
setting the height ``sqrt(v) / alpha``, out-degree, communication-to-computation ratio CCR) and
heterogeneous clusters (nodes of different speeds, NVLink-class links inside a node and a slower
network between nodes), then times the construction of the :class:`~streammap.cost.model.CostModel`
and the HEFT mapping separately, and prints a table. Ends with the HEFT paper's worked example
(``shared/benchmarks/classic/topcuoglu-10.json``, makespan 80) when the shared benchmarks are
present.

Usage::

    python benchmarks/heft_scaling.py               # 1,000 and 10,000 tasks x 8 and 64 devices
    python benchmarks/heft_scaling.py --large       # also 100,000 tasks x 512 devices
    python benchmarks/heft_scaling.py --tasks 2000 --devices 16 --ccr 1.0 --seed 3
    python benchmarks/heft_scaling.py --mappers peft auto --large   # time other mappers beside HEFT

Targets: HEFT (issue 2): 10,000 tasks x 64 devices mapped in at most 10 s on a 2-core machine;
the default mapper ``auto`` (issue 3): 10,000 x 64 in at most 5 s, 100,000 x 512 in at most 60 s.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

from streammap.cluster.model import cluster_from_dict, load_cluster
from streammap.cost.model import CostModel, lower_bound
from streammap.errors import MappingError
from streammap.ir import add_task, new_graph
from streammap.mappers import get_mapper
from streammap.mappers.heft import heft
from streammap.mappers.schedule import evaluate

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "benchmarks"


def random_dag(v: int, seed: int, alpha: float = 1.0, out_degree: float = 3.0, ccr: float = 1.0,
               mean_runtime: float = 1e-3, bandwidth: float = 12.5e9):
    """A random layered DAG of ``v`` tasks (HEFT-paper style).

    The height is ``sqrt(v) / alpha`` levels on average, each level's width drawn uniformly
    around ``v / height``; every task past the first level has 1 to ``2 * out_degree - 1``
    parents, mostly in the previous level and otherwise in any earlier one. Runtimes (seconds on a
    speed-1.0 device) are uniform in ``[0, 2 * mean_runtime]``; edge bytes are uniform around
    ``ccr * mean_runtime * bandwidth`` so that the mean transfer takes about ``ccr`` times the
    mean task.
    """
    rng = np.random.default_rng(seed)
    height = max(1, int(round(math.sqrt(v) / alpha)))
    widths = rng.uniform(0.5, 1.5, height)
    widths = np.maximum(1, np.floor(widths / widths.sum() * v)).astype(int)
    widths[-1] += v - widths.sum()
    while widths[-1] < 1:              # keep every level non-empty
        i = int(np.argmax(widths[:-1]))
        widths[i] -= 1
        widths[-1] += 1
    starts = np.concatenate(([0], np.cumsum(widths)))
    g = new_graph(f"random-v{v}-s{seed}", kind="workflow", source=f"<random v={v} seed={seed}>")
    runtimes = rng.uniform(0.0, 2.0 * mean_runtime, v)
    for i in range(v):
        add_task(g, f"t{i}", "k", runtime=float(runtimes[i]))
    mean_bytes = ccr * mean_runtime * bandwidth
    for lev in range(1, height):
        lo, hi = starts[lev], starts[lev + 1]
        for t in range(lo, hi):
            k = int(rng.integers(1, max(2, int(2 * out_degree))))
            prev_lo = starts[lev - 1]
            near = rng.integers(prev_lo, lo, size=k)
            far = rng.integers(0, lo, size=k)
            parents = np.where(rng.random(k) < 0.8, near, far)
            for p in np.unique(parents):
                g.add_edge(f"t{p}", f"t{t}", bytes=float(rng.uniform(0.5, 1.5) * mean_bytes))
    return g


def random_cluster(n_devices: int, seed: int, per_node: int = 8, memory: str = "80GiB"):
    """``n_devices`` GPUs on nodes of ``per_node`` (at least two nodes), each node its own speed."""
    rng = np.random.default_rng(seed + 1)
    per_node = min(per_node, max(1, n_devices // 2))
    n_nodes = math.ceil(n_devices / per_node)
    nodes, left = [], n_devices
    for n in range(n_nodes):
        speed = float(rng.choice([0.5, 0.75, 1.0, 1.5, 2.0]))
        k = min(per_node, left)
        left -= k
        nodes.append({
            "name": f"node{n}", "link": {"bandwidth": "300 GB/s", "latency": "3us"},
            "devices": [{"name": f"gpu{i}", "kind": "gpu", "model": f"G{speed:g}", "memory": memory,
                         "speed": speed} for i in range(k)]})
    return cluster_from_dict({"name": f"random-{n_devices}", "network": {"bandwidth": "12.5 GB/s", "latency": "10us"},
                              "nodes": nodes})


def run_case(v: int, d: int, seed: int, ccr: float, check: bool, memory: str = "80GiB", others=()):
    t0 = time.perf_counter()
    g = random_dag(v, seed, ccr=ccr)
    cl = random_cluster(d, seed, memory=memory)
    t1 = time.perf_counter()
    cost = CostModel(g, cl)
    t2 = time.perf_counter()
    try:
        sched = heft(cost)
    except MappingError as exc:                # memory too small for this graph
        return dict(tasks=v, devices=d, edges=g.number_of_edges(), gen=t1 - t0, cost=t2 - t1,
                    heft=time.perf_counter() - t2, error=exc.message)
    t3 = time.perf_counter()
    lb = lower_bound(cost)
    t4 = time.perf_counter()
    ok = ""
    if check:
        ms, valid, _ = evaluate(cost, sched)
        ok = "yes" if (ms == sched.makespan and valid) else "NO"
    extra = {}
    for name in others:                        # other mappers: time and makespan / HEFT's
        t5 = time.perf_counter()
        try:
            s = get_mapper(name)(cost)
        except MappingError:
            extra[name] = (time.perf_counter() - t5, math.nan)
            continue
        extra[name] = (time.perf_counter() - t5, s.makespan / sched.makespan)
        if check:
            ms, valid, _ = evaluate(cost, s)
            ok = ok if (abs(ms - s.makespan) <= 1e-9 * ms and valid) else "NO"
    return dict(tasks=v, devices=d, edges=g.number_of_edges(), gen=t1 - t0, cost=t2 - t1, heft=t3 - t2,
                lb_time=t4 - t3, makespan=sched.makespan, lb=lb, check=ok, extra=extra)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tasks", type=int, nargs="*", default=[1000, 10000])
    ap.add_argument("--devices", type=int, nargs="*", default=[8, 64])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--ccr", type=float, default=1.0)
    ap.add_argument("--large", action="store_true", help="also 100,000 tasks x 512 devices")
    ap.add_argument("--check", action="store_true", help="re-score every schedule with schedule.evaluate")
    ap.add_argument("--memory", default="80GiB",
                    help="device memory (default 80GiB; e.g. 1GiB makes the memory checks bind)")
    ap.add_argument("--mappers", nargs="*", default=[],
                    help="other registered mappers to time beside HEFT (e.g. peft auto): seconds and makespan / HEFT")
    args = ap.parse_args(argv)

    cases = [(v, d) for v in args.tasks for d in args.devices]
    if args.large:
        cases.append((100_000, 512))
    print(f"HEFT scaling (seed {args.seed}, CCR {args.ccr}, device memory {args.memory}); times in seconds")
    head = f"{'tasks':>7} {'devices':>7} {'edges':>7} {'gen':>6} {'cost':>6} {'heft':>7} {'bound':>6} " \
           f"{'makespan':>10} {'/bound':>7}" + ("  valid" if args.check else "") + \
           "".join(f" {m[:8]:>8} {'/heft':>6}" for m in args.mappers)
    print(head)
    print("-" * len(head))
    for v, d in cases:
        r = run_case(v, d, args.seed, args.ccr, args.check, args.memory, args.mappers)
        if "error" in r:
            print(f"{r['tasks']:>7} {r['devices']:>7} {r['edges']:>7} {r['gen']:>6.2f} {r['cost']:>6.2f} "
                  f"{r['heft']:>7.2f}  no plan: {r['error'][:60]}...")
            continue
        print(f"{r['tasks']:>7} {r['devices']:>7} {r['edges']:>7} {r['gen']:>6.2f} {r['cost']:>6.2f} "
              f"{r['heft']:>7.2f} {r['lb_time']:>6.2f} {r['makespan']:>10.4g} {r['makespan'] / r['lb']:>7.3f}"
              + (f"  {r['check']:>5}" if args.check else "")
              + "".join(f" {r['extra'][m][0]:>8.2f} {r['extra'][m][1]:>6.3f}" for m in args.mappers))
        sys.stdout.flush()

    ex = SHARED / "classic" / "topcuoglu-10.json"
    if ex.exists():
        from streammap.io.importers import load_graph
        cost = CostModel(load_graph(ex), load_cluster(SHARED / "clusters" / "topcuoglu-3p.yaml"))
        s = heft(cost)
        print(f"\nTopcuoglu et al. 2002, Fig. 2: HEFT makespan {s.makespan:g} (paper: 80), "
              f"lower bound {lower_bound(cost):g}")
        for d, tasks in enumerate(s.order()):
            row = ", ".join(f"{cost.tasks[t]} [{s.start[t]:g}, {s.finish[t]:g})" for t in tasks)
            print(f"  {cost.devices[d].id}: {row}")


if __name__ == "__main__":
    main()
