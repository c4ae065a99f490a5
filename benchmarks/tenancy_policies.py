"""Admission policies on the same job arrivals: FIFO and plain weighted DRF against StreamMAP's policy.

A seeded Poisson stream of jobs over the shared benchmark workflows (``../shared/benchmarks``),
from tenants with unequal arrival shares, replayed through ``streammap.tenancy`` on a generated
cluster of A100 and V100 nodes (8 GPUs a node; V100s half as fast). Prints the policies side by
side and the issue's targets with PASS/FAIL:

* StreamMAP's average JCT at least 25% below FIFO's;
* Jain's index over tenants' weighted shares during contention at least 0.95;
* GPU utilisation no lower than FIFO's.

    python benchmarks/tenancy_policies.py                    # 10,000 jobs on 1,000 GPUs
    python benchmarks/tenancy_policies.py --jobs 2000 --gpus 200 --estimate-error 0.5
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

from rich.console import Console

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from streammap.cluster.model import cluster_from_dict  # noqa: E402
from streammap.tenancy.admission import SLACK  # noqa: E402
from streammap.tenancy.jobs import graphs_in, poisson_jobs  # noqa: E402
from streammap.tenancy.simulate import compare, plot, results_table, write_csv  # noqa: E402

WORKFLOWS = ROOT.parent / "shared" / "benchmarks" / "workflows"


def generated_cluster(gpus: int) -> dict:
    """``gpus`` GPUs in nodes of 8: half the nodes A100 (speed 1), half V100 (speed 0.5)."""
    nodes = []
    for i in range(max(1, math.ceil(gpus / 8))):
        a100 = i % 2 == 0
        n = min(8, gpus - 8 * i)
        nodes.append({"name": f"n{i}", "link": {"bandwidth": "300 GB/s" if a100 else "150 GB/s", "latency": "3us"},
                      "devices": [{"name": f"g{j}", "kind": "gpu", "vendor": "nvidia",
                                   "model": "A100-SXM4-80GB" if a100 else "V100-SXM2-32GB",
                                   "memory": "80GiB" if a100 else "32GiB", "speed": 1.0 if a100 else 0.5}
                                  for j in range(n)]})
    return {"name": f"gen-{gpus}", "network": {"bandwidth": "25 GB/s", "latency": "10us"}, "nodes": nodes}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--gpus", type=int, default=1_000)
    ap.add_argument("--load", type=float, default=1.1,
                    help="offered load: arrival rate x mean job GPU-seconds (fastest model) / the cluster's "
                         "capacity in fastest-model GPUs")
    ap.add_argument("--tenants", default="a:4,b:3,c:2,d:1", help="NAME:ARRIVAL_SHARE,...")
    ap.add_argument("--estimate-error", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--slack", type=float, default=SLACK, help="the streammap policy's placement slack")
    ap.add_argument("--out", default="bench-out")
    ap.add_argument("--write-cluster", metavar="FILE", help="also write the generated cluster file (for streammap simulate)")
    args = ap.parse_args(argv)
    out = Console(highlight=False, width=200)

    from streammap.tenancy.estimate import Estimator
    from streammap.tenancy.jobs import parse_tenant_shares
    from streammap.tenancy.simulate import prepare_jobs
    shares = parse_tenant_shares(args.tenants)
    cluster = cluster_from_dict(generated_cluster(args.gpus))
    if args.write_cluster:
        from streammap.io.files import atomic_write_text
        atomic_write_text(args.write_cluster, cluster.to_yaml(), what="cluster file")
    graphs = graphs_in([WORKFLOWS])
    # The arrival rate that offers --load: work in GPU-seconds on the fastest model, against the
    # cluster's capacity in fastest-model GPUs (a V100 at half speed counts as half a GPU).
    probe = prepare_jobs(poisson_jobs(graphs, 1.0, len(graphs) * 20, shares, seed=args.seed), Estimator(cluster))
    mean_work = sum(j.work for j in probe) / len(probe)
    sizes = Estimator(cluster).pools
    capacity = sum(len(devs) * sum(j.demand.best.duration / j.demand.option(m).duration for j in probe) / len(probe)
                   for m, devs in sizes.items())
    rate = args.load * capacity / mean_work
    specs = poisson_jobs(graphs, rate, args.jobs, shares, seed=args.seed)
    out.print(f"{args.jobs} jobs ({len(graphs)} workflows), tenants {args.tenants}, {args.gpus} GPUs, "
              f"load {args.load}, {rate:.4g} arrivals/s, estimate error sigma {args.estimate_error}, "
              f"placement slack {args.slack:g}", markup=False)
    t0 = time.perf_counter()
    results = compare(specs, cluster, estimate_error=args.estimate_error, seed=args.seed, slack=args.slack)
    elapsed = time.perf_counter() - t0
    out.print(results_table(results))
    folder = Path(args.out)
    folder.mkdir(parents=True, exist_ok=True)
    write_csv(results, folder / "tenancy.csv")
    plot(results, folder / "tenancy.png")
    by = {r.policy: r for r in results}
    fifo, sm = by["fifo"], by["streammap"]
    cut = 1 - sm.avg_jct / fifo.avg_jct
    checks = [(f"avg JCT {cut:.0%} below FIFO's (target >= 25%)", cut >= 0.25),
              (f"Jain's index {sm.jain:.3f} under contention (target >= 0.95)", sm.jain >= 0.95),
              (f"utilisation {sm.utilisation:.1%} vs FIFO {fifo.utilisation:.1%} (target >= FIFO)",
               sm.utilisation >= fifo.utilisation - 1e-9)]
    for text, ok in checks:
        out.print(f"{'PASS' if ok else 'FAIL'}  {text}", markup=False)
    out.print(f"all three policies simulated (with estimation) in {elapsed:.1f} s; wrote {folder / 'tenancy.csv'}, "
              f"{folder / 'tenancy.png'}", markup=False)
    return 0 if all(ok for _, ok in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
