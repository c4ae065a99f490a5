"""Admission policies on the same job arrivals: FIFO and plain weighted DRF against StreamMAP's policy.

A seeded Poisson stream of jobs over the shared benchmark workflows (``../shared/benchmarks``),
from tenants with unequal arrival shares, replayed through ``streammap.tenancy`` on a generated
cluster of A100 and V100 nodes (8 GPUs a node; V100s half as fast). Every setting is run at
estimate error sigma 0, 0.5 and 1.0 (real durations = estimates x a seeded log-normal factor),
and StreamMAP is scored against FIFO on the same arrivals with the issue's targets:

| measure                        | sigma 0     | sigma 0.5 | sigma 1.0 |
| average JCT vs FIFO            | <= 0.60x    | <= 0.65x  | <= 0.75x  |
| p95 JCT vs FIFO                | <= 0.90x    | <= 1.00x  | <= 1.00x  |
| Jain's index under contention  | >= 0.95     | >= 0.95   | >= 0.95   |
| GPU utilisation                | >= FIFO + 5 | >= FIFO   | >= FIFO   |
| actual start inside interval   | >= 90%      | >= 80%    | reported  |

    python benchmarks/tenancy_policies.py                       # 10,000 jobs on 1,000 GPUs, load 1.1, seed 1
    python benchmarks/tenancy_policies.py --loads 0.9,1.0,1.1,1.2 --seeds 7,8 --gpus 256,1000 \\
        --tenants a:4,b:3,c:2,d:1 --tenants a:8,b:1,c:1        # a sweep: one row per setting
    python benchmarks/tenancy_policies.py --jobs 100000 --gpus 10000 --policies streammap --sigmas 0

    python benchmarks/tenancy_policies.py --shared 0.3 --gpus 256 --sigmas 0
        # joint placement: 30% of the jobs need a quarter or half GPU; every policy with and without

``--shared P`` gives a share P of the jobs a ``share`` of 0.25 or 0.5 (one GPU each; the same
arrivals, tenants and graphs as without) and runs every policy again without joint placement
(each such job on a whole GPU): GPU-seconds held and left idle inside grants, utilisation, and
average and p95 JCT, with and without.

The ``avg floor`` column is the average JCT no policy can beat, as a multiple of FIFO's: every job
started the moment it arrives, on its fastest model, running for its real duration there (see
:func:`avg_jct_floor`). Where it is above a target, the target cannot be met on those arrivals.

Two columns say *why* a setting misses. ``wait (room)``: StreamMAP's mean wait per job, and in
brackets the part of it during which one of the job's models had enough free devices for it
(:func:`room_wait`: waits the policy chose, to keep a reservation or to wait for a faster model,
not waits the cluster imposed). ``drain``: StreamMAP's time from the last arrival to the last
finish, as a multiple of FIFO's (:func:`drain`); while jobs arrive both keep the cluster equally
busy (``util arr.``), so the utilisation target is won or lost in the drain.

``--jobs`` defaults to 10 jobs per GPU (the default's ratio). Tune on some seeds, report on others:
the README's figures were tuned on seeds 1 and 2 and are reported on held-out seeds 7 and 8.
"""

from __future__ import annotations

import argparse
import csv
import io
import math
import sys
import time
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from streammap.cluster.model import cluster_from_dict  # noqa: E402
from streammap.io.files import atomic_write_text  # noqa: E402
from streammap.tenancy.admission import (  # noqa: E402
    FLOOR,
    ORDER,
    ORDERS,
    POLICIES,
    SLACK,
    SLOWDOWN,
    TAIL,
    TAIL_EXCHANGE,
    TAIL_EXCHANGES,
    TAIL_WAIT,
    WAIT_CAP,
    Job,
)
from streammap.tenancy.estimate import Estimator  # noqa: E402
from streammap.tenancy.jobs import graphs_in, parse_tenant_shares, poisson_jobs  # noqa: E402
from streammap.tenancy.simulate import prepare_jobs, simulate  # noqa: E402
from streammap.tenancy.tenants import tenants_from_dict  # noqa: E402

WORKFLOWS = ROOT.parent / "shared" / "benchmarks" / "workflows"
#: sigma -> (avg JCT ratio at most, p95 ratio at most, utilisation points above FIFO at least,
#: start coverage at least or None).
TARGETS = {0.0: (0.60, 0.90, 5.0, 0.90), 0.5: (0.65, 1.00, 0.0, 0.80), 1.0: (0.75, 1.00, 0.0, None)}
JAIN = 0.95


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


def arrival_rate(load: float, graphs, shares, estimator: Estimator, seed: int) -> float:
    """The arrival rate that offers ``load``: work in GPU-seconds on the fastest model, against the
    cluster's capacity in fastest-model GPUs (a V100 at half speed counts as half a GPU)."""
    probe = prepare_jobs(poisson_jobs(graphs, 1.0, len(graphs) * 20, shares, seed=seed), estimator)
    mean_work = sum(j.work for j in probe) / len(probe)
    capacity = sum(len(devs) * sum(j.demand.best.duration / j.demand.option(m).duration for j in probe) / len(probe)
                   for m, devs in estimator.pools.items())
    return load * capacity / mean_work


def run_setting(gpus: int, jobs: int, mix: str, seed: int, load: float, sigmas, policies, slack, slowdown,
                estimators: dict, floor: float = FLOOR, tail: float = TAIL,
                tail_wait: float = TAIL_WAIT, shared: float = 0.0, order: str | tuple = ORDER,
                wait_cap: float = WAIT_CAP, tail_exchange: str | bool = TAIL_EXCHANGE) -> list[dict]:
    """One (cluster, tenants, seed, load): every policy at every sigma, on the same arrivals.

    ``order`` is the streammap policy's order, or several (a tuple): streammap then runs once per
    order, the other policies once, and there is one row per order (its ``order``), each scored
    against the same FIFO run."""
    orders = (order,) if isinstance(order, str) else tuple(order)
    shares = parse_tenant_shares(mix)
    if gpus not in estimators:
        estimators[gpus] = (cluster_from_dict(generated_cluster(gpus)), None)
        estimators[gpus] = (estimators[gpus][0], Estimator(estimators[gpus][0]))
    cluster, est = estimators[gpus]
    graphs = graphs_in([WORKFLOWS])
    rate = arrival_rate(load, graphs, shares, est, seed)
    admitted = prepare_jobs(poisson_jobs(graphs, rate, jobs, shares, seed=seed, shared=shared), est)
    tenants = tenants_from_dict(sorted(shares))
    sizes = {m: len(devs) for m, devs in est.pools.items()}
    rows = []
    for sigma in sigmas:
        res = {o: {} for o in orders}
        whole = {o: {} for o in orders}
        for p in policies:
            for o in orders if p == "streammap" else orders[:1]:
                for joint, into in ((True, res[o]), (False, whole[o])) if shared > 0 else ((True, res[o]),):
                    into[p] = simulate([_copy(j) for j in admitted], cluster, tenants, policy=p,
                                       estimate_error=sigma, seed=seed, slack=slack, slowdown=slowdown, floor=floor,
                                       tail=tail, tail_wait=tail_wait, joint=joint, order=o,
                                       wait_cap=wait_cap, tail_exchange=tail_exchange)
        for o in orders[1:]:                      # the other policies ran once: every order's row has them
            res[o] = {**res[orders[0]], **res[o]}
            whole[o] = {**whole[orders[0]], **whole[o]}
        first = res[orders[0]]
        floor_jct = avg_jct_floor(admitted, first["fifo"]) if "fifo" in first else math.nan
        others = {p: room_wait(admitted, r, sizes) for p, r in first.items() if p != "streammap"}
        for o in orders:
            waits = {p: others[p] if p in others else room_wait(admitted, r, sizes) for p, r in res[o].items()}
            rows.append({"gpus": gpus, "jobs": jobs, "tenants": mix, "seed": seed, "load": load, "sigma": sigma,
                         "shared": shared, "order": o, "first_order": o == orders[0], "results": res[o],
                         "whole": whole[o], "avg_floor": floor_jct,
                         "room_wait": waits})
    return rows


def avg_jct_floor(admitted: list[Job], result) -> float:
    """The average JCT no policy reaches below on these arrivals: each job with no wait, on its
    fastest model, for its real duration there.

    ``result`` is a simulation without preemption (FIFO's): a job's real run on the model it got,
    ``finish - start``, is scaled to its fastest model by the ratio of the two estimates (the
    simulator's real durations are the estimates times one factor per job, the same on every model).
    """
    demand = {j.id: j.demand for j in admitted}
    runs = [(r.finish - r.start) * demand[r.id].best.duration / demand[r.id].option(r.model).duration
            for r in result.jobs]
    return sum(runs) / len(runs)


def room_wait(admitted: list[Job], result, sizes: dict[str, int]) -> float:
    """The mean, over jobs, of the part of each job's wait during which one of its models had
    enough free devices for it: waiting the policy *chose* (a reservation it must not overlap,
    a faster model it waits for, FIFO's blocked head), not waiting the cluster imposed.

    ``sizes`` is the devices per model. Free devices are counted from ``result``'s runs (first
    start to finish: exact without preemption; a fractional job counts as holding its whole
    device), after every start and end at the same instant, as a pass sees them.
    """
    demand = {j.id: j.demand for j in admitted}
    steps = {}
    for model, size in sizes.items():
        delta: dict[float, int] = {}
        for r in result.jobs:
            if r.model == model:
                delta[r.start] = delta.get(r.start, 0) - r.gpus
                delta[r.finish] = delta.get(r.finish, 0) + r.gpus
        times = np.array(sorted(delta))
        steps[model] = (times, size + np.cumsum([delta[t] for t in times]))
    total = 0.0
    for r in result.jobs:
        if r.start <= r.arrival:
            continue
        needs = [(o.model, o.gpus) for o in demand[r.id].options if o.model in steps]
        cuts = [np.array([r.arrival])] + [t[(t > r.arrival) & (t < r.start)] for t, _ in (steps[m] for m, _ in needs)]
        edges = np.unique(np.concatenate(cuts + [np.array([r.start])]))
        begins, lengths = edges[:-1], np.diff(edges)
        room = np.zeros(begins.size, dtype=bool)
        for model, k in needs:
            times, free = steps[model]
            i = np.searchsorted(times, begins, side="right") - 1
            room |= np.where(i >= 0, free[np.maximum(i, 0)], sizes[model]) >= k
        total += float(lengths[room].sum())
    return total / len(result.jobs) if result.jobs else 0.0


def mean_wait(result) -> float:
    """Mean seconds from arrival to first start."""
    return float(np.mean([j.start - j.arrival for j in result.jobs])) if result.jobs else 0.0


def drain(result) -> float:
    """Seconds from the last arrival to the last finish: the part of the makespan no arrival fills."""
    return max(j.finish for j in result.jobs) - max(j.arrival for j in result.jobs) if result.jobs else 0.0


def _copy(job):
    return Job(job.id, job.tenant, job.arrival, job.demand, job.priority)


def verdicts(row: dict) -> list[tuple[str, bool | None]]:
    """The targets of ``row``'s sigma for StreamMAP against FIFO: (text, pass) pairs."""
    res = row["results"]
    if "fifo" not in res or "streammap" not in res:
        return []
    fifo, sm = res["fifo"], res["streammap"]
    avg_max, p95_max, util_pts, cov_min = TARGETS.get(row["sigma"], TARGETS[1.0])
    avg, p95 = sm.avg_jct / fifo.avg_jct, sm.p95_jct / fifo.p95_jct
    pts = 100 * (sm.utilisation - fifo.utilisation)
    out = [(f"avg JCT {avg:.2f}x FIFO (<= {avg_max:.2f}x)", avg <= avg_max),
           (f"p95 JCT {p95:.2f}x FIFO (<= {p95_max:.2f}x)", p95 <= p95_max),
           (f"Jain {sm.jain:.3f} (>= {JAIN})", None if math.isnan(sm.jain) else sm.jain >= JAIN),
           (f"utilisation {pts:+.1f} points vs FIFO (>= {util_pts:+.0f})", pts >= util_pts - 1e-9),
           (f"start inside interval {sm.start_coverage:.0%}" + (f" (>= {cov_min:.0%})" if cov_min else ""),
            None if cov_min is None or math.isnan(sm.start_coverage) else sm.start_coverage >= cov_min)]
    return out


def sweep_table(rows: list[dict]) -> Table:
    t = Table(title="StreamMAP against FIFO on the same arrivals (ratios; utilisation in points)")
    for col in ("GPUs", "jobs", "tenants", "seed", "load", "sigma", "order", "avg JCT", "avg floor", "p95 JCT", "DRF avg/p95",
                "Jain", "util", "util arr.", "drain", "wait (room)", "in interval", "sim s", "targets"):
        t.add_column(col, justify="right")
    for r in rows:
        res = r["results"]
        fifo, sm, drf = res.get("fifo"), res.get("streammap"), res.get("drf")
        if fifo is None or sm is None:
            continue
        v = verdicts(r)
        met = sum(1 for _, ok in v if ok)
        graded = sum(1 for _, ok in v if ok is not None)
        failed = ", ".join(text.split(" ")[0] + (" JCT" if "JCT" in text.split(" ")[1] else "")
                           for text, ok in v if ok is False)
        t.add_row(str(r["gpus"]), str(r["jobs"]), r["tenants"], str(r["seed"]), f"{r['load']:g}", f"{r['sigma']:g}",
                  r.get("order", ORDER), f"{sm.avg_jct / fifo.avg_jct:.2f}", f"{r['avg_floor'] / fifo.avg_jct:.2f}",
                  f"{sm.p95_jct / fifo.p95_jct:.2f}",
                  f"{drf.avg_jct / fifo.avg_jct:.2f}/{drf.p95_jct / fifo.p95_jct:.2f}" if drf else "-",
                  "n/a" if math.isnan(sm.jain) else f"{sm.jain:.3f}",
                  f"{100 * (sm.utilisation - fifo.utilisation):+.1f}",
                  f"{100 * (sm.utilisation_arriving - fifo.utilisation_arriving):+.1f}",
                  f"{drain(sm) / drain(fifo):.2f}" if drain(fifo) > 0 else "-",
                  f"{mean_wait(sm):,.0f} ({r['room_wait']['streammap']:,.0f}) s",
                  "n/a" if math.isnan(sm.start_coverage) else f"{sm.start_coverage:.0%}",
                  f"{sm.wall_seconds:.0f}", f"{met}/{graded}" + (f" ({failed})" if failed else ""))
    return t


def joint_table(rows: list[dict]) -> Table:
    """Joint placement against whole GPUs for the small jobs, per policy, on the same arrivals."""
    t = Table(title="joint placement (small jobs share GPUs) against a whole GPU each, same arrivals")
    for col in ("GPUs", "seed", "load", "sigma", "shared", "policy", "idle in grants (whole)",
                "recovered", "util held (whole -> joint)", "makespan (whole -> joint)", "avg JCT (whole -> joint)",
                "p95 JCT (whole -> joint)"):
        t.add_column(col, justify="right")
    for r in rows:
        for p, on in r["results"].items():
            off = r["whole"].get(p)
            if off is None:
                continue
            idle_off = off.busy_gpu_seconds - off.used_gpu_seconds
            idle_on = on.busy_gpu_seconds - on.used_gpu_seconds
            t.add_row(str(r["gpus"]), str(r["seed"]), f"{r['load']:g}", f"{r['sigma']:g}", f"{r['shared']:.0%}", p,
                      f"{idle_off / off.busy_gpu_seconds:.1%} of held",
                      f"{(idle_off - idle_on) / off.busy_gpu_seconds:.1%} of held",
                      f"{off.utilisation:.1%} -> {on.utilisation:.1%}",
                      f"{off.makespan:,.0f} -> {on.makespan:,.0f} s",
                      f"{off.avg_jct:,.0f} -> {on.avg_jct:,.0f} s ({on.avg_jct / off.avg_jct:.2f}x)",
                      f"{off.p95_jct:,.0f} -> {on.p95_jct:,.0f} s ({on.p95_jct / off.p95_jct:.2f}x)")
    return t


def write_rows(rows: list[dict], path: Path) -> None:
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["gpus", "jobs", "tenants", "seed", "load", "sigma", "order", "policy", "avg_jct", "p95_jct", "utilisation", "utilisation_arriving",
                "jain", "start_coverage", "shown_intervals", "preemptions", "sim_wall_seconds", "shared", "joint",
                "busy_gpu_seconds", "used_gpu_seconds", "mean_wait", "room_wait", "drain"])
    for r in rows:
        for joint, results in ((True, r["results"]), (False, r.get("whole", {}))):
            for p, s in results.items():
                if p != "streammap" and not r.get("first_order", True):
                    continue                      # the same run as in the first order's row
                w.writerow([r["gpus"], r["jobs"], r["tenants"], r["seed"], r["load"], r["sigma"],
                            r.get("order", ORDER) if p == "streammap" else "", p, f"{s.avg_jct:.3f}",
                            f"{s.p95_jct:.3f}", f"{s.utilisation:.5f}", f"{s.utilisation_arriving:.5f}", f"{s.jain:.5f}", f"{s.start_coverage:.4f}",
                            s.shown_intervals, sum(j.preemptions for j in s.jobs), f"{s.wall_seconds:.2f}",
                            r.get("shared", 0.0), int(joint), f"{s.busy_gpu_seconds:.1f}", f"{s.used_gpu_seconds:.1f}",
                            f"{mean_wait(s):.1f}", f"{r['room_wait'][p]:.1f}" if joint else "", f"{drain(s):.1f}"])
    atomic_write_text(path, buf.getvalue(), what="CSV")


def _floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x.strip()]


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=None, help="jobs per setting (default 10 per GPU)")
    ap.add_argument("--gpus", default="1000", help="cluster sizes, comma-separated")
    ap.add_argument("--loads", "--load", default="1.1",
                    help="offered loads, comma-separated: arrival rate x mean job GPU-seconds (fastest model) / "
                         "the cluster's capacity in fastest-model GPUs")
    ap.add_argument("--tenants", action="append", default=None,
                    help="NAME:ARRIVAL_SHARE,... (repeat for several mixes; default a:4,b:3,c:2,d:1)")
    ap.add_argument("--sigmas", "--estimate-error", default="0,0.5,1.0", help="estimate errors, comma-separated")
    ap.add_argument("--seeds", "--seed", default="1", help="seeds, comma-separated")
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--slack", type=float, default=SLACK, help="the streammap policy's placement slack")
    ap.add_argument("--slowdown", type=float, default=SLOWDOWN, help="the streammap policy's slowdown deadline")
    ap.add_argument("--floor", type=float, default=FLOOR, help="the streammap policy's fair-share floor")
    ap.add_argument("--tail", type=float, default=TAIL, help="the streammap policy's tail deadline (0: off)")
    ap.add_argument("--tail-wait", type=float, default=TAIL_WAIT, help="the tail deadline's multiple of the mean wait")
    ap.add_argument("--wait-cap", type=float, default=WAIT_CAP,
                    help="the streammap policy's wait bound outside overload, a multiple of the mean wait (0: off)")
    ap.add_argument("--tail-exchange", choices=TAIL_EXCHANGES, default=TAIL_EXCHANGE,
                    help="the streammap policy's tail exchange (a start given to a job of the longest kind goes to "
                         "the oldest job of its tenant and shape still within its tail allowance; auto, the "
                         "default: for tenants whose estimates proved precise)")
    ap.add_argument("--order", default=ORDER,
                    help=f"the streammap policy's order, or several comma-separated, each run on the same arrivals "
                         f"and scored against the same FIFO run: {', '.join(ORDERS)} (default {ORDER}; themis: "
                         f"finish-time fairness bound under overload; hrrn: response ratio, README)")
    ap.add_argument("--shared", type=float, default=0.0,
                    help="share of the jobs that need a quarter or half GPU; every policy also runs without joint placement")
    ap.add_argument("--out", default="bench-out")
    args = ap.parse_args(argv)
    orders = tuple(o for o in args.order.split(",") if o)
    unknown = [o for o in orders if o not in ORDERS]
    if unknown or not orders:
        ap.error(f"unknown --order {','.join(unknown) or args.order!r}; orders: {', '.join(ORDERS)}")
    if not args.wait_cap >= 0:
        ap.error(f"--wait-cap must be at least 0 (0 turns the wait bound off), not {args.wait_cap:g}")
    out = Console(highlight=False, width=220)
    mixes = args.tenants or ["a:4,b:3,c:2,d:1"]
    policies = [p for p in args.policies.split(",") if p]
    estimators: dict = {}
    rows = []
    t0 = time.perf_counter()
    for gpus in _ints(args.gpus):
        for mix in mixes:
            for seed in _ints(args.seeds):
                for load in _floats(args.loads):
                    rows += run_setting(gpus, args.jobs or 10 * gpus, mix, seed, load, _floats(args.sigmas),
                                        policies, args.slack, args.slowdown, estimators, args.floor, args.tail,
                                        args.tail_wait, args.shared, orders, args.wait_cap,
                                        args.tail_exchange)
                    out.print(f"... {gpus} GPUs, {mix}, seed {seed}, load {load}: done "
                              f"({time.perf_counter() - t0:.0f} s)", markup=False)
    out.print(f"slowdown deadline {args.slowdown:g}, placement slack {args.slack:g}, fair-share floor {args.floor:g}, "
              f"tail deadline {args.tail:g} (+ {args.tail_wait:g} x mean wait), wait bound {args.wait_cap:g} x mean wait, "
              f"tail exchange {args.tail_exchange}, "
              f"order {', '.join(orders)}", markup=False)
    out.print(sweep_table(rows))
    if args.shared > 0:
        out.print(joint_table(rows))
    for r in rows:
        for p, s in r["results"].items():
            if p == "streammap" and "fifo" not in r["results"]:
                out.print(f"{r['gpus']} GPUs, {r['jobs']} jobs, sigma {r['sigma']}, order {r['order']}: streammap simulated in "
                          f"{s.wall_seconds:.1f} s (avg JCT {s.avg_jct:,.0f} s, utilisation {s.utilisation:.1%})",
                          markup=False)
    folder = Path(args.out)
    folder.mkdir(parents=True, exist_ok=True)
    write_rows(rows, folder / "tenancy.csv")
    failed = [(r, text) for r in rows for text, ok in verdicts(r) if ok is False]
    for r, text in failed:
        out.print(f"FAIL  {r['gpus']} GPUs {r['tenants']} seed {r['seed']} load {r['load']} sigma {r['sigma']} "
                  f"order {r['order']}: "
                  f"{text}", markup=False)
    out.print(f"{len(rows)} settings in {time.perf_counter() - t0:.0f} s; wrote {folder / 'tenancy.csv'}",
              markup=False)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
