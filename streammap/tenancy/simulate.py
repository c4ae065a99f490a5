"""Replay a stream of job arrivals through the admission core in simulated time, and score policies.

The simulator is the job service without its clock: the same :class:`~.admission.Scheduler`
decides, the same :class:`~.estimate.Estimator` sizes every job with the mapper. State is a heap
of events (an arrival, the end of a run) and the scheduler; at every instant where something
happens, all its events are applied, then the policy runs once. A job's real duration is its
estimate, times a seeded log-normal factor when ``estimate_error`` > 0 (the same factor for a job
under every policy, so policies see the same world). A preempted job loses its run and is queued
again.

Metrics (computed the same way for every policy; nothing is measured only where it helps)
-----------------------------------------------------------------------------------------
JCT
    Job completion time: finish - arrival, for every job; ``avg_jct`` is the mean and ``p95_jct``
    the 95th percentile (linear interpolation, ``numpy.percentile``).
makespan
    Last finish - first arrival.
utilisation
    Busy GPU-seconds / (GPUs x makespan); a GPU is busy while a job holds it (including the
    lost runs of preempted jobs); a job holding a fraction of a GPU (joint placement,
    :mod:`.packing`) makes that fraction busy. ``used_gpu_seconds`` counts what the jobs need of
    what they hold (a fractional job's fraction even where it was given a whole GPU), so
    ``busy - used`` is GPU time held and left idle inside grants. The makespan ends with the last job, so on a finite stream one
    long job that overran (estimate error) can move it by hours whatever the policy did before;
    ``utilisation_arriving`` is the same ratio over first to last arrival only, where the policy
    packs a queue it keeps being given (both are reported; the targets use the first).
start coverage
    Of the jobs that were shown an estimated start interval while waiting (:mod:`.forecast`), the
    share whose actual first start fell inside the first interval they were shown.
Jain's index
    ``(sum x)^2 / (n * sum x^2)`` over tenants [1]_, 1 when every ``x_i`` is equal, 1/n at worst,
    of each tenant's normalised share ``x_i = H_i / F_i``: ``H_i`` the GPU-seconds tenant i held
    during contention, ``F_i`` the GPU-seconds its weighted max-min fair share would have given it
    over the same time. *Contention* is every interval in which the GPUs the tenants demand (held,
    plus asked for by their queued jobs) exceed the cluster's; the fair share of an interval
    is the water-filling of the cluster's GPUs by weight, capped at each tenant's demand
    (:func:`fair_shares`, as in DRF [2]_), so a tenant that asks for little and gets all of it
    is treated fairly. Tenants with ``F_i = 0`` are left out; ``nan`` when there is no contention.

References
----------
.. [1] R. Jain, D. Chiu, W. Hawe, "A quantitative measure of fairness and discrimination for
   resource allocation in shared computer systems", DEC TR-301, 1984.
.. [2] A. Ghodsi et al., "Dominant Resource Fairness: fair allocation of multiple resource
   types", NSDI 2011.
"""

from __future__ import annotations

import csv
import heapq
import io
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from streammap.compiler import load_source_graph, resolve_cluster
from streammap.errors import StreamMapError
from streammap.io.files import atomic_write, atomic_write_text
from streammap.tenancy.admission import (
    FLOOR,
    ORDER,
    POLICIES,
    SLACK,
    SLOWDOWN,
    TAIL,
    TAIL_EXCHANGE,
    TAIL_WAIT,
    WAIT_CAP,
    Job,
    Scheduler,
    water_fill,
)
from streammap.tenancy.estimate import Estimator, graph_key
from streammap.tenancy.jobs import JobSpec
from streammap.tenancy.tenants import Tenants, load_tenants, tenants_from_dict

#: The shared benchmark graphs the generator draws from by default (relative to the project root).
DEFAULT_GRAPHS = "../shared/benchmarks/workflows"


@dataclass
class JobResult:
    id: str
    tenant: str
    arrival: float
    start: float            # first start
    finish: float
    gpus: int
    model: str              # model of the run that finished
    preemptions: int = 0
    share: float = 1.0      # fraction of its device held (joint placement), 1: whole devices

    @property
    def jct(self) -> float:
        return self.finish - self.arrival


@dataclass
class SimResult:
    """One policy's replay: per-job results and the metrics of the module docstring."""

    policy: str
    jobs: list[JobResult]
    gpus: int
    busy_gpu_seconds: float
    contention_seconds: float
    tenant_contention_gpu_seconds: dict[str, float]
    tenant_fair_gpu_seconds: dict[str, float]
    weights: dict[str, float]
    wall_seconds: float = 0.0
    max_tenant_gpus: dict[str, int] = field(default_factory=dict)
    #: Jobs that were shown an estimated start interval while waiting, and of those, how many
    #: started inside the first interval they were shown.
    shown_intervals: int = 0
    starts_inside: int = 0
    busy_arriving: float = 0.0     # busy GPU-seconds between the first and the last arrival
    used_gpu_seconds: float = 0.0  # of the busy GPU-seconds, those the jobs need (module docstring)

    @property
    def utilisation_arriving(self) -> float:
        """Busy GPU-seconds / (GPUs x time from the first to the last arrival)."""
        if not self.jobs:
            return 0.0
        span = max(j.arrival for j in self.jobs) - min(j.arrival for j in self.jobs)
        return self.busy_arriving / (self.gpus * span) if span > 0 else 0.0

    @property
    def start_coverage(self) -> float:
        """Share of the jobs shown an interval whose actual start fell inside it (nan: none shown)."""
        return self.starts_inside / self.shown_intervals if self.shown_intervals else math.nan

    @property
    def avg_jct(self) -> float:
        return float(np.mean([j.jct for j in self.jobs])) if self.jobs else 0.0

    @property
    def p95_jct(self) -> float:
        return float(np.percentile([j.jct for j in self.jobs], 95)) if self.jobs else 0.0

    @property
    def makespan(self) -> float:
        if not self.jobs:
            return 0.0
        return max(j.finish for j in self.jobs) - min(j.arrival for j in self.jobs)

    @property
    def utilisation(self) -> float:
        ms = self.makespan
        return self.busy_gpu_seconds / (self.gpus * ms) if ms > 0 else 0.0

    @property
    def jain(self) -> float:
        if self.contention_seconds <= 0:
            return math.nan
        x = [self.tenant_contention_gpu_seconds[t] / self.tenant_fair_gpu_seconds[t]
             for t in self.weights if self.tenant_fair_gpu_seconds[t] > 0]
        return jain_index(x)

    def summary(self) -> dict:
        return {"policy": self.policy, "jobs": len(self.jobs), "avg_jct": self.avg_jct, "p95_jct": self.p95_jct,
                "makespan": self.makespan, "utilisation": self.utilisation,
                "utilisation_arriving": self.utilisation_arriving, "jain": self.jain,
                "contention_seconds": self.contention_seconds,
                "preemptions": sum(j.preemptions for j in self.jobs), "start_coverage": self.start_coverage,
                "shown_intervals": self.shown_intervals, "sim_wall_seconds": self.wall_seconds,
                "busy_gpu_seconds": self.busy_gpu_seconds, "used_gpu_seconds": self.used_gpu_seconds}


def jain_index(x) -> float:
    """Jain's fairness index ``(sum x)^2 / (n sum x^2)`` (1 for equal values; nan for no values)."""
    x = np.asarray(x, dtype=float)
    if x.size == 0 or not (x ** 2).sum() > 0:
        return math.nan
    return float(x.sum() ** 2 / (x.size * (x ** 2).sum()))


def fair_shares(demand: dict[str, float], weights: dict[str, float], capacity: float) -> dict[str, float]:
    """Weighted max-min fair shares of ``capacity`` (the admission core's water-filling)."""
    return water_fill(demand, weights, capacity)


def prepare_jobs(specs: list[JobSpec], estimator: Estimator) -> list[Job]:
    """Admission jobs from job specs: each graph loaded and mapped once per shape (cached)."""
    graphs: dict[tuple, object] = {}
    out = []
    for s in specs:
        key = graph_key(s.source, s.defines, s.entry)
        if key not in graphs:
            graphs[key] = load_source_graph(s.source, s.defines or None, s.entry)
        try:
            demand = estimator.demand(key, graphs[key], s.gpus, share=s.share)
        except StreamMapError as exc:
            path, line = s._where
            raise StreamMapError(f"job {s.id} ({Path(s.source).name}): {exc.message}", hint=exc.hint,
                                 path=path, line=line) from None
        out.append(Job(id=s.id, tenant=s.tenant, arrival=s.arrival, demand=demand, priority=s.priority))
    return out


def simulate(jobs: list[Job], cluster, tenants: Tenants, policy: str = "streammap",
             estimate_error: float = 0.0, seed: int = 0, backfill: bool = True, depth: int | None = None,
             slack: float = SLACK, slowdown: float = SLOWDOWN, floor: float = FLOOR, tail: float = TAIL,
             tail_wait: float = TAIL_WAIT, joint: bool = True, order: str = ORDER,
             wait_cap: float = WAIT_CAP, tail_exchange: str | bool = TAIL_EXCHANGE) -> SimResult:
    """Replay ``jobs`` (admission jobs with demands) under ``policy``; see the module docstring.

    Parameters
    ----------
    jobs : list of Job
        From :func:`prepare_jobs`.
    cluster : Cluster
    tenants : Tenants
        Every job's tenant must be in it.
    policy : str
        ``fifo``, ``drf`` or ``streammap``.
    estimate_error : float
        Sigma of the log-normal factor between a job's real and estimated duration (0: exact).
    backfill, depth, slack, slowdown, floor, tail, tail_wait, order, wait_cap, tail_exchange : bool, int, float, float, float, float, float, str, float, str
        Conservative backfill, its reservation depth (default: the cluster's, see
        :func:`~.admission.reservation_depth`), the placement slack, the slowdown deadline,
        the fair-share floor, the tail deadline, the order (one of :data:`~.admission.ORDERS`:
        ``deadline``, ``themis``, or their response-ratio forms ``hrrn`` and ``hrrn-themis``), the
        wait bound outside overload, the tail exchange (``streammap`` policy; see
        :class:`~.admission.Scheduler`).
    joint : bool
        Joint placement of fractional jobs (:mod:`.packing`); off, each runs on a whole device.
    """
    t0 = time.perf_counter()
    sched = Scheduler(cluster, tenants, policy=policy, backfill=backfill, depth=depth, slack=slack,
                      slowdown=slowdown, floor=floor, tail=tail, tail_wait=tail_wait, joint=joint,
                      order=order, wait_cap=wait_cap, tail_exchange=tail_exchange)
    rng = np.random.default_rng(seed)
    factor = {j.id: (float(np.exp(rng.normal(0.0, estimate_error) - estimate_error ** 2 / 2))
                     if estimate_error > 0 else 1.0) for j in jobs}
    events: list = []
    for i, j in enumerate(sorted(jobs, key=lambda j: (j.arrival, j.id))):
        events.append((j.arrival, 1, i, "arrive", j, 0))
    heapq.heapify(events)
    seq = len(events)
    generation: dict[str, int] = {}
    first_start: dict[str, float] = {}
    preempts: dict[str, int] = {}
    results: list[JobResult] = []
    names = [t.name for t in tenants]
    weights = {t.name: t.weight for t in tenants}
    need = {j.id: j.demand.held for j in jobs}    # what each job needs of a GPU (a fraction: shared)
    used = 0.0
    held = {t: 0 for t in names}
    waiting = {t: 0 for t in names}          # GPUs asked for by the tenant's queued jobs
    cont_gpu = {t: 0.0 for t in names}
    cont_fair = {t: 0.0 for t in names}
    max_held = {t: 0 for t in names}
    busy = busy_arriving = 0.0
    last_arrival = max((j.arrival for j in jobs), default=0.0)
    contention = 0.0
    total_held = 0
    now = events[0][0] if events else 0.0
    while events:
        t = events[0][0]
        # Integrate the state that held over [now, t).
        dt = t - now
        if dt > 0:
            busy += total_held * dt
            busy_arriving += total_held * max(0.0, min(t, last_arrival) - now)
            demand = {n: held[n] + waiting[n] for n in names}
            if sum(demand.values()) > sched.pool.total_gpus:
                contention += dt
                fair = fair_shares(demand, weights, sched.pool.total_gpus)
                for n in names:
                    cont_gpu[n] += held[n] * dt
                    cont_fair[n] += fair[n] * dt
        now = t
        while events and events[0][0] == now:
            _, _, _, kind, job, gen = heapq.heappop(events)
            if kind == "arrive":
                sched.submit(job)
                waiting[job.tenant] += job.demand.held
            elif generation.get(job.id) == gen:           # a run that was not preempted
                r = sched.finish(job.id, now)
                held[job.tenant] -= r.option.held
                total_held -= r.option.held
                used += need[job.id] * (now - r.start)
                results.append(JobResult(job.id, job.tenant, job.arrival, first_start[job.id], now, r.option.gpus,
                                         r.option.model, preempts.get(job.id, 0), r.option.share))
        starts, preempted = sched.schedule(now)
        for jid in preempted:
            # A job preempted early in a pass may have started again later in the same pass.
            job = sched.jobs[jid] if jid in sched.jobs else sched.running[jid].job
            generation[jid] = generation.get(jid, 0) + 1        # its pending end event is void
            preempts[jid] = preempts.get(jid, 0) + 1
            g = job.demand.held
            held[job.tenant] -= g
            total_held -= g
            waiting[job.tenant] += g
        for s in starts:
            job = sched.running[s.job_id].job
            gen = generation.get(s.job_id, 0)
            generation[s.job_id] = gen
            first_start.setdefault(s.job_id, now)
            held[s.tenant] += s.option.held
            total_held += s.option.held
            max_held[s.tenant] = max(max_held[s.tenant], held[s.tenant])
            waiting[s.tenant] -= s.option.held
            seq += 1
            heapq.heappush(events, (now + s.option.duration * factor[s.job_id], 0, seq, "end", job, gen))
    if sched.jobs:
        stuck = next(iter(sched.jobs.values()))
        raise StreamMapError(f"job {stuck.id} of tenant {stuck.tenant} can never start: its tenant's quota "
                             "is smaller than the job", hint="raise the quota or ask for fewer GPUs")
    results.sort(key=lambda r: (r.arrival, r.id))
    shown = sched.forecast.first_shown
    inside = sum(1 for jid, (lo, hi) in shown.items() if lo - 1e-6 <= first_start[jid] <= hi + 1e-6)
    return SimResult(policy=policy, jobs=results, gpus=sched.pool.total_gpus, busy_gpu_seconds=busy,
                     contention_seconds=contention, tenant_contention_gpu_seconds=cont_gpu,
                     tenant_fair_gpu_seconds=cont_fair, weights=weights, wall_seconds=time.perf_counter() - t0,
                     max_tenant_gpus=max_held, shown_intervals=len(shown), starts_inside=inside,
                     busy_arriving=busy_arriving, used_gpu_seconds=used)


def compare(specs: list[JobSpec], cluster, tenants=None, policies=POLICIES, mapper: str = "heft",
            estimate_error: float = 0.0, seed: int = 0, slack: float = SLACK,
            slowdown: float = SLOWDOWN, floor: float = FLOOR, order: str = ORDER,
            wait_cap: float = WAIT_CAP, tail_exchange: str | bool = TAIL_EXCHANGE) -> list[SimResult]:
    """Replay the same job stream under each policy (the Python API of ``streammap simulate``).

    ``tenants`` is a :class:`Tenants`, a dict, a tenants file, or ``None`` (the jobs' tenants,
    equal weights, no quotas).
    """
    clus = resolve_cluster(cluster)
    ten = _resolve_tenants(tenants, specs)
    unknown = sorted({s.tenant for s in specs} - set(ten.names()))
    if unknown:
        raise StreamMapError(f"jobs name tenant(s) not in the tenants file: {', '.join(unknown)}", path=ten.path)
    jobs = prepare_jobs(specs, Estimator(clus, mapper=mapper))
    return [simulate([_copy(j) for j in jobs], clus, ten, policy=p, estimate_error=estimate_error, seed=seed,
                     slack=slack, slowdown=slowdown, floor=floor, order=order, wait_cap=wait_cap,
                     tail_exchange=tail_exchange) for p in policies]


def _copy(job: Job) -> Job:
    return Job(job.id, job.tenant, job.arrival, job.demand, job.priority)


def _resolve_tenants(tenants, specs) -> Tenants:
    if tenants is None:
        return tenants_from_dict(sorted({s.tenant for s in specs}))
    if isinstance(tenants, (str, Path)):
        return load_tenants(tenants)
    return tenants_from_dict(tenants)


# -- reporting ---------------------------------------------------------------------------------

_COLUMNS = ("policy", "jobs", "avg_jct", "p95_jct", "makespan", "utilisation", "utilisation_arriving", "jain", "contention_seconds",
            "preemptions", "start_coverage", "shown_intervals", "sim_wall_seconds", "busy_gpu_seconds",
            "used_gpu_seconds")


def results_table(results: list[SimResult]):
    """A rich table: one column per policy, one row per metric, with each policy against FIFO."""
    from rich.table import Table  # noqa: PLC0415
    base = next((r for r in results if r.policy == "fifo"), None)
    table = Table(title="policies on the same arrivals")
    table.add_column("metric")
    for r in results:
        table.add_column(r.policy, justify="right")
    rows = [("jobs", lambda r: f"{len(r.jobs)}"),
            ("avg JCT", lambda r: _t(r.avg_jct) + _vs(r.avg_jct, base.avg_jct if base else None)),
            ("p95 JCT", lambda r: _t(r.p95_jct) + _vs(r.p95_jct, base.p95_jct if base else None)),
            ("makespan", lambda r: _t(r.makespan)),
            ("GPU utilisation", lambda r: f"{r.utilisation:.1%}"),
            ("utilisation while arriving", lambda r: f"{r.utilisation_arriving:.1%}"),
            ("Jain's index (contention)", lambda r: "n/a" if math.isnan(r.jain) else f"{r.jain:.3f}"),
            ("contention time", lambda r: _t(r.contention_seconds)),
            ("preemptions", lambda r: str(sum(j.preemptions for j in r.jobs))),
            ("start inside shown interval", lambda r: "n/a" if math.isnan(r.start_coverage)
             else f"{r.start_coverage:.0%} of {r.shown_intervals}"),
            ("simulated in", lambda r: f"{r.wall_seconds:.1f} s")]
    for name, f in rows:
        table.add_row(name, *[f(r) for r in results])
    return table


def _t(s: float) -> str:
    return f"{s:,.0f} s" if s >= 100 else f"{s:.3g} s"


def _vs(x: float, base: float | None) -> str:
    if base is None or base <= 0:
        return ""
    return f" ({(x - base) / base:+.0%})"


def write_csv(results: list[SimResult], path) -> None:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=_COLUMNS)
    w.writeheader()
    for r in results:
        w.writerow(r.summary())
    atomic_write_text(path, buf.getvalue(), what="CSV")


def write_jobs_csv(results: list[SimResult], path) -> None:
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["policy", "job", "tenant", "arrival", "start", "finish", "jct", "gpus", "model", "preemptions"])
    for r in results:
        for j in r.jobs:
            w.writerow([r.policy, j.id, j.tenant, f"{j.arrival:.6f}", f"{j.start:.6f}", f"{j.finish:.6f}",
                        f"{j.jct:.6f}", j.gpus, j.model, j.preemptions])
    atomic_write_text(path, buf.getvalue(), what="CSV")


def plot(results: list[SimResult], path) -> Path:
    """JCT distributions (CDF) and the metrics side by side, one picture."""
    import matplotlib  # noqa: PLC0415
    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt  # noqa: PLC0415
    path = Path(path)
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for r in results:
        jct = np.sort([j.jct for j in r.jobs])
        axes[0].plot(jct, np.arange(1, jct.size + 1) / max(1, jct.size), label=r.policy)
    axes[0].set_xscale("log")
    axes[0].set_xlabel("job completion time (s)")
    axes[0].set_ylabel("share of jobs")
    axes[0].set_title("JCT distribution")
    axes[0].legend()
    names = [r.policy for r in results]
    x = np.arange(len(names))
    axes[1].bar(x - 0.2, [r.avg_jct for r in results], 0.4, label="average")
    axes[1].bar(x + 0.2, [r.p95_jct for r in results], 0.4, label="95th percentile")
    axes[1].set_xticks(x, names)
    axes[1].set_ylabel("seconds")
    axes[1].set_title("job completion time")
    axes[1].legend()
    axes[2].bar(x - 0.2, [r.utilisation for r in results], 0.4, label="GPU utilisation")
    axes[2].bar(x + 0.2, [0 if math.isnan(r.jain) else r.jain for r in results], 0.4, label="Jain's index")
    axes[2].set_xticks(x, names)
    axes[2].set_ylim(0, 1.05)
    axes[2].set_title("utilisation and fairness")
    axes[2].legend(loc="lower right")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, dpi=100, format=path.suffix.lstrip(".") or "png")
    plt.close(fig)
    atomic_write(path, lambda f: f.write(buf.getvalue()), binary=True, what="plot")
    return path


# -- the command -------------------------------------------------------------------------------
