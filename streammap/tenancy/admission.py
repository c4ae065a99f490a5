"""Admission: which queued job starts now, on which devices. Shared by the simulator and the service.

State
-----
:class:`Pool`
    The free accelerators, by device model and node.
:class:`Scheduler`
    The queue (per tenant, kept sorted by the policy's key), the running jobs (their grants and
    estimated finish times) and each tenant's usage: GPUs, GPU memory (of the devices granted,
    whole) and GPUs per model. It takes plain data in (:class:`Job`, a time) and gives plain data
    out (:class:`Start`, preempted job ids); it never sleeps, runs or reads a clock, so simulated
    time and wall-clock time drive it alike.

Invariants every policy keeps
-----------------------------
* **Gang admission**: a job starts only when all ``k`` devices of one model it needs are granted
  at once; it holds them until it ends.
* **Hard quotas**: a start that would take a tenant over its ``gpus``, ``gpu_memory`` or per-model
  quota is never made (the job waits; it never blocks other tenants' jobs).

Policies
--------
``fifo``
    One queue in arrival order. The head job starts on its fastest model with ``k`` free devices;
    when none has, the queue waits (head-of-line blocking: no backfill, no fairness).
``drf``
    Weighted dominant-resource fairness [1]_: repeatedly the tenant with the least dominant share
    (max over GPUs and GPU memory of its share of the cluster, divided by its weight) starts its
    next job (priority, then arrival), on the fastest model with room; a tenant whose next job
    does not fit is skipped for this round, the others go on (Kueue's fair sharing).
``streammap``
    The same weighted-DRF choice of tenant, and within a tenant priority first, then the least
    estimated GPU-seconds (``k x duration``: shortest job first, which the compiler's estimates
    make possible where Tiresias [2]_ must use attained service), and:

    * *heterogeneity-aware placement* (after Gavel [3]_): the job starts on the fastest model with
      room, but when only slower models have room it waits for the faster one if it is
      estimated to **finish** sooner there (counting the wait: the running jobs' estimated ends)
      and that model holds no reservation yet; so long jobs, which gain the most, get fast GPUs;
    * *EASY backfill*: the first job that must wait for a model gets a reservation at the time
      enough devices free up (the shadow time); later jobs start on that model only if they
      end before the shadow time or use devices the reservation does not need, so backfill never
      delays an earlier job's estimated start;
    * *no starvation*: a job that has waited more than :data:`STARVATION` times its own estimated
      duration goes before its tenant's shorter jobs (Tiresias' promotion; a small factor turns
      the policy back into FIFO under load, which the simulator showed);
    * *preemption*, only when the tenants file says ``preemption: true``: a waiting job may stop
      running jobs of strictly lower priority of its own tenant, or of a tenant above its own
      weighted share, taking the most recently started first (least work lost); a preempted job
      goes back to the queue and is run again from the start. Themis' [4]_ finish-time fairness
      motivates letting only over-share tenants be preempted.

References
----------
.. [1] A. Ghodsi, M. Zaharia, B. Hindman, A. Konwinski, S. Shenker, I. Stoica, "Dominant Resource
   Fairness: fair allocation of multiple resource types", NSDI 2011.
.. [2] J. Gu et al., "Tiresias: a GPU cluster manager for distributed deep learning", NSDI 2019.
.. [3] D. Narayanan et al., "Heterogeneity-aware cluster scheduling policies for deep learning
   workloads" (Gavel), OSDI 2020.
.. [4] K. Mahajan et al., "Themis: fair and efficient GPU cluster scheduling", NSDI 2020.
"""

from __future__ import annotations

import bisect
import heapq
import math
from dataclasses import dataclass, field

from ..errors import StreamMapError
from .estimate import Demand, Option, accelerator_pools
from .tenants import Tenants

POLICIES = ("fifo", "drf", "streammap")
#: A job waiting longer than this many times its estimated duration is promoted (streammap policy).
STARVATION = 100.0


@dataclass
class Job:
    """A job as admission sees it: who, when, how important, and its demand."""

    id: str
    tenant: str
    arrival: float
    demand: Demand
    priority: int = 0
    seq: int = 0

    @property
    def work(self) -> float:
        """Estimated GPU-seconds on its fastest model."""
        return self.demand.gpus * self.demand.best.duration


@dataclass(frozen=True)
class Start:
    """A decision: start ``job_id`` now on ``devices`` (all of ``option.model``)."""

    job_id: str
    tenant: str
    option: Option
    devices: tuple[str, ...]
    time: float


@dataclass
class Running:
    job: Job
    option: Option
    devices: tuple[str, ...]
    start: float
    memory: float            # GPU memory granted (sum of the devices' capacities)

    @property
    def est_finish(self) -> float:
        return self.start + self.option.duration


class Pool:
    """Free accelerators by model and node; grants whole devices, packing a gang onto few nodes."""

    def __init__(self, cluster):
        self.models = accelerator_pools(cluster)
        self.size = {m: len(ds) for m, ds in self.models.items()}
        self.memory_of = {d.id: (d.memory if math.isfinite(d.memory) else 0.0)
                          for ds in self.models.values() for d in ds}
        self.model_of = {d.id: m for m, ds in self.models.items() for d in ds}
        self.node_of = {d.id: d.node for ds in self.models.values() for d in ds}
        self.free: dict[str, dict[str, list[str]]] = {}
        for m, ds in self.models.items():
            nodes: dict[str, list[str]] = {}
            for d in ds:
                nodes.setdefault(d.node, []).append(d.id)
            self.free[m] = nodes
        self.free_count = dict(self.size)
        self.total_gpus = sum(self.size.values())
        self.total_memory = sum(self.memory_of.values())

    def take(self, model: str, k: int) -> tuple[str, ...] | None:
        """``k`` free devices of ``model`` (the fullest-fitting single node, else the fullest nodes), or None."""
        if self.free_count.get(model, 0) < k:
            return None
        nodes = self.free[model]
        fit = [n for n, ids in nodes.items() if len(ids) >= k]
        if fit:
            order = [min(fit, key=lambda n: (len(nodes[n]), n))]     # best fit: keep big holes for big gangs
        else:
            order = sorted((n for n in nodes if nodes[n]), key=lambda n: (-len(nodes[n]), n))
        got: list[str] = []
        for n in order:
            ids = nodes[n]
            while ids and len(got) < k:
                got.append(ids.pop())
            if len(got) == k:
                break
        self.free_count[model] -= k
        return tuple(got)

    def take_exact(self, devices) -> None:
        """Mark these devices busy (a grant found again after a restart)."""
        for dev in devices:
            m = self.model_of[dev]
            self.free[m][self.node_of[dev]].remove(dev)
            self.free_count[m] -= 1

    def give(self, devices) -> None:
        for dev in devices:
            m = self.model_of[dev]
            self.free[m][self.node_of[dev]].append(dev)
            self.free_count[m] += 1


@dataclass
class Usage:
    gpus: int = 0
    memory: float = 0.0
    models: dict = field(default_factory=dict)


class Scheduler:
    """The admission state and the policy that changes it.

    Parameters
    ----------
    cluster : Cluster
    tenants : Tenants
    policy : str
        ``fifo``, ``drf`` or ``streammap`` (see the module docstring).
    backfill : bool
        EASY backfill in the ``streammap`` policy (on by default).
    """

    def __init__(self, cluster, tenants: Tenants, policy: str = "streammap", backfill: bool = True):
        if policy not in POLICIES:
            raise StreamMapError(f"unknown policy {policy!r}", hint=f"policies: {', '.join(POLICIES)}")
        self.policy = policy
        self.backfill = backfill
        self.tenants = tenants
        self.pool = Pool(cluster)
        self.running: dict[str, Running] = {}
        self.usage = {t.name: Usage() for t in tenants}
        self.jobs: dict[str, Job] = {}                 # queued jobs by id
        self._queues: dict[str, list] = {t.name: [] for t in tenants}   # sorted (key, job id)
        self._fifo: list = []
        self._arrivals: dict[str, list] = {t.name: [] for t in tenants}   # per tenant, arrival order
        self._ends: dict[str, list] = {}
        self.queued_gpus = 0                            # GPUs the queued jobs ask for (own widths)
        self._seq = 0

    # -- the queue ----------------------------------------------------------------------
    def _key(self, job: Job) -> tuple:
        if self.policy == "streammap":
            return (-job.priority, job.work, job.arrival, job.seq)
        return (-job.priority, job.arrival, job.seq)

    def submit(self, job: Job) -> None:
        """Queue a job (its tenant must be known; its demand must fit some pool)."""
        if job.tenant not in self.usage:
            raise StreamMapError(f"unknown tenant {job.tenant!r}", hint=f"tenants: {', '.join(self.usage)}")
        if not job.seq:
            self._seq += 1
            job.seq = self._seq
        else:
            self._seq = max(self._seq, job.seq)
        self.jobs[job.id] = job
        self.queued_gpus += job.demand.gpus
        bisect.insort(self._queues[job.tenant], (self._key(job), job.id))
        bisect.insort(self._fifo, ((job.arrival, job.seq), job.id))
        bisect.insort(self._arrivals[job.tenant], ((job.arrival, job.seq), job.id))

    def _unqueue(self, job: Job) -> None:
        del self.jobs[job.id]
        self.queued_gpus -= job.demand.gpus
        q = self._queues[job.tenant]
        q.pop(bisect.bisect_left(q, (self._key(job), job.id)))
        self._fifo.pop(bisect.bisect_left(self._fifo, ((job.arrival, job.seq), job.id)))
        a = self._arrivals[job.tenant]
        a.pop(bisect.bisect_left(a, ((job.arrival, job.seq), job.id)))

    def cancel(self, job_id: str) -> bool:
        """Remove a queued job, or release a running one's devices; whether it was known."""
        if job_id in self.jobs:
            self._unqueue(self.jobs[job_id])
            return True
        if job_id in self.running:
            self.finish(job_id)
            return True
        return False

    def queued(self) -> list[Job]:
        return [self.jobs[j] for _, j in self._fifo]

    # -- grants -------------------------------------------------------------------------
    def restore(self, job: Job, option: Option, devices, start: float) -> None:
        """Record a job that already holds ``devices`` (the service, after a restart)."""
        self.pool.take_exact(devices)
        self._grant(job, option, tuple(devices), start)

    def _grant(self, job: Job, option: Option, devices: tuple, now: float) -> Start:
        mem = sum(self.pool.memory_of[d] for d in devices)
        self.running[job.id] = Running(job, option, devices, now, mem)
        u = self.usage[job.tenant]
        u.gpus += option.gpus
        u.memory += mem
        u.models[option.model] = u.models.get(option.model, 0) + option.gpus
        return Start(job.id, job.tenant, option, devices, now)

    def finish(self, job_id: str) -> Running:
        """A running job ended (done, failed, cancelled or preempted): free its devices."""
        r = self.running.pop(job_id)
        self.pool.give(r.devices)
        u = self.usage[r.job.tenant]
        u.gpus -= r.option.gpus
        u.memory -= r.memory
        u.models[r.option.model] -= r.option.gpus
        return r

    def preempt(self, job_id: str, now: float) -> Job:
        """Stop a running job and queue it again (it restarts from the beginning)."""
        r = self.finish(job_id)
        self.submit(r.job)
        return r.job

    def quota_allows(self, tenant: str, option: Option, *, ever: bool = False) -> bool:
        """Whether ``tenant`` may start ``option`` now (or ``ever``: holding nothing else)."""
        q = self.tenants.quota(tenant)
        u = Usage() if ever else self.usage[tenant]
        if q.gpus is not None and u.gpus + option.gpus > q.gpus:
            return False
        if q.gpu_memory is not None:
            per = self._model_memory(option.model)
            if u.memory + per * option.gpus > q.gpu_memory * (1 + 1e-12):
                return False
        cap = q.models.get(option.model)
        return cap is None or u.models.get(option.model, 0) + option.gpus <= cap

    def _model_memory(self, model: str) -> float:
        # Devices of one model may differ in memory; quota checks use the largest (never exceeded).
        return max(self.pool.memory_of[d.id] for d in self.pool.models[model])

    def share(self, tenant: str) -> float:
        """Weighted dominant share: max(GPU share, GPU-memory share) / weight."""
        u = self.usage[tenant]
        s = u.gpus / self.pool.total_gpus
        if self.pool.total_memory > 0:
            s = max(s, u.memory / self.pool.total_memory)
        return s / self.tenants.weight(tenant)

    # -- the policies -------------------------------------------------------------------
    def schedule(self, now: float, max_scan: int = 512) -> tuple[list[Start], list[str]]:
        """Start what the policy allows at time ``now``.

        Returns
        -------
        starts : list of Start
            Jobs started now (already removed from the queue, their devices granted).
        preempted : list of str
            Running jobs stopped to make room (already back in the queue).
        """
        if not self.jobs:
            return [], []
        if self.policy == "fifo":
            return self._fifo_pass(now), []
        return self._fair_pass(now, max_scan)

    def _start_now(self, job: Job, option: Option, now: float) -> Start:
        devices = self.pool.take(option.model, option.gpus)
        self._unqueue(job)
        return self._grant(job, option, devices, now)

    def _fastest_free(self, job: Job) -> Option | None:
        for o in job.demand.options:
            if self.pool.free_count[o.model] >= o.gpus and self.quota_allows(job.tenant, o):
                return o
        return None

    def _fifo_pass(self, now: float) -> list[Start]:
        starts = []
        for _, jid in list(self._fifo):
            job = self.jobs[jid]
            if not any(self.quota_allows(job.tenant, o) for o in job.demand.options):
                continue                         # its tenant's quota holds it, not the cluster
            o = self._fastest_free(job)
            if o is None:
                break
            starts.append(self._start_now(job, o, now))
        return starts

    def _free_at(self, model: str, k: int, now: float) -> float:
        """The estimated time when ``k`` devices of ``model`` are free (running jobs' estimated ends)."""
        free = self.pool.free_count[model]
        if free >= k:
            return now
        ends = self._ends.get(model)
        if ends is None:
            ends = self._ends[model] = sorted((max(r.est_finish, now), r.option.gpus) for r in self.running.values()
                                              if r.option.model == model)
        for t, g in ends:
            free += g
            if free >= k:
                return t
        return math.inf

    def _fair_pass(self, now: float, max_scan: int) -> tuple[list[Start], list[str]]:
        smart = self.policy == "streammap"
        starts: list[Start] = []
        preempted: list[str] = []
        # Per model: [shadow time, devices spare at the shadow time] of its one reservation.
        reserved: dict[str, list] = {}
        self._ends = {}                          # per model, running jobs' (end, gpus), sorted; per pass
        last = {t: None for t, q in self._queues.items() if q}
        budget = {t: max(32, max_scan // max(1, len(last))) for t in last}
        promoted = {t: self._starving(t, now) for t in last} if smart else {}
        heap = [(self.share(t), t) for t in last]
        heapq.heapify(heap)
        while heap:
            if not any(self.pool.free_count.values()) and not (smart and self.tenants.preemption):
                break
            _, tenant = heapq.heappop(heap)
            q = self._queues[tenant]
            job = self.jobs.get(promoted.pop(tenant, None) or "")
            if job is None:
                # The next job after the last one looked at (the queue may have changed since).
                i = 0 if last[tenant] is None else bisect.bisect_right(q, last[tenant])
                if i >= len(q):
                    continue
                last[tenant] = q[i]
                job = self.jobs[q[i][1]]
            budget[tenant] -= 1
            if smart:
                s, p = self._place_smart(job, now, reserved)
                preempted += p
            else:
                o = self._fastest_free(job)
                s = self._start_now(job, o, now) if o else None
                if s is None:
                    continue                     # this tenant waits for this round
            if s is not None:
                starts.append(s)
                self._ends.pop(s.option.model, None)
                if smart and p:
                    self._ends.clear()           # preempted jobs freed devices
            if budget[tenant] > 0:
                heapq.heappush(heap, (self.share(tenant), tenant))
        return starts, preempted

    def _starving(self, tenant: str, now: float) -> str | None:
        """The tenant's longest-waiting job, if it has waited more than STARVATION x its duration."""
        q = self._arrivals[tenant]
        if not q:
            return None
        job = self.jobs[q[0][1]]
        return job.id if now - job.arrival > STARVATION * max(job.demand.best.duration, 1e-9) else None

    def _place_smart(self, job: Job, now: float, reserved: dict) -> tuple[Start | None, list[str]]:
        """Start on the fastest model with room (never delaying a reservation), else preempt where
        allowed, else reserve the model where the job is estimated to finish first."""
        allowed = [o for o in job.demand.options if self.quota_allows(job.tenant, o)]
        o = self._choose_shape(job, allowed, now, reserved)
        if o is not None:
            r = reserved.get(o.model)
            if r is not None and now + o.duration > r[0]:
                r[1] -= o.gpus                   # it uses devices the reservation does not need
            return self._start_now(job, o, now), []
        if not allowed:
            return None, []
        if self.tenants.preemption:
            for o in allowed:
                victims = self._victims(job, o)
                if victims is not None:
                    for v in victims:
                        self.preempt(v, now)
                    return self._start_now(job, o, now), victims
        # Wait: reserve the model where it would finish first (Gavel's heterogeneity awareness,
        # with the wait for busy devices counted), unless that model already holds a reservation.
        best = min(allowed, key=lambda o: (self._free_at(o.model, o.gpus, now) + o.duration, o.model))
        if not self.backfill:
            reserved.setdefault(best.model, [now, 0])          # nothing may jump this job
        elif best.model not in reserved:
            t = self._free_at(best.model, best.gpus, now)
            if math.isfinite(t):
                reserved[best.model] = [t, self._spare_at(best.model, t, now) - best.gpus]
        return None, []

    def _choose_shape(self, job: Job, allowed: list[Option], now: float, reserved: dict) -> Option | None:
        """The fastest model where ``job`` can start now without delaying a reservation, or None
        when it should wait: for nothing free, or for a faster model it would end sooner on."""
        own = [o for o in allowed if self.pool.free_count[o.model] >= o.gpus and self._backfill_ok(o, now, reserved)]
        if not own:
            return None
        best = own[0]
        if best is not allowed[0]:
            # Only slower models have room. Waiting for a faster one is worth it when the job is
            # estimated to end sooner there (Gavel's point: fast devices should go where they save
            # the most time), and nobody holds that model's reservation yet.
            f = allowed[0]
            if f.model not in reserved and self._free_at(f.model, f.gpus, now) + f.duration < now + best.duration:
                return None
        return best

    def _backfill_ok(self, o: Option, now: float, reserved: dict) -> bool:
        r = reserved.get(o.model)
        return r is None or now + o.duration <= r[0] or o.gpus <= r[1]

    def _spare_at(self, model: str, t: float, now: float) -> int:
        free = self.pool.free_count[model]
        for r in self.running.values():
            if r.option.model == model and max(r.est_finish, now) <= t:
                free += r.option.gpus
        return free

    def _victims(self, job: Job, o: Option) -> list[str] | None:
        """Running jobs to preempt so that ``job`` starts on ``o.model`` now, or None."""
        need = o.gpus - self.pool.free_count[o.model]
        my_share = self.share(job.tenant)
        cands = [r for r in self.running.values() if r.option.model == o.model and r.job.priority < job.priority
                 and (r.job.tenant == job.tenant or self.share(r.job.tenant) > my_share)]
        cands.sort(key=lambda r: (r.job.priority, -r.start, r.job.id))
        chosen, got = [], 0
        for r in cands:
            if got >= need:
                break
            chosen.append(r.job.id)
            got += r.option.gpus
        return chosen if got >= need else None
