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
* **Joint placement** (:mod:`.packing`): a job of one device that needs only a fraction of it
  holds that fraction and its memory of a shared device, beside other such jobs, from its own
  start to its own end; jobs of whole devices never share. The hooks are marked "joint placement".

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
    Across tenants, a **fair-share floor** instead of DRF's strict turn-taking: each pass computes
    every tenant's weighted max-min fair share of the GPUs (water-filling by weight, capped at what
    it holds plus what its queued jobs ask for: the share Jain's index is scored against). Tenants
    holding less than :data:`FLOOR` of it go first, the one that has *attained* least of its share
    under contention recently first (GPU-seconds held over fair GPU-seconds, decayed with time
    constant :data:`MEMORY`: with fractional shares, "held now" alone ties, and a tenant could
    lose every tie for ever); the jobs of the other tenants are then taken in one order, the
    earliest slowdown deadline first, whichever tenant they belong to. Within a tenant, priority
    first, then the earliest **slowdown deadline** ``arrival + SLOWDOWN x estimated duration``:
    the instant at which the job's wait reaches :data:`SLOWDOWN` times its own length. Short
    jobs go first, as in shortest-first (which the compiler's estimates make possible where Tiresias [2]_ must use
    attained service), but every job's deadline is a fixed point in time, so a long job is passed
    only by jobs whose deadlines come before its own and its wait is bounded: aging as a principle
    (a bounded slowdown) rather than a guard. The deadline is brought forward by the **tail
    deadline** ``arrival + max(0, TAIL x q95 - duration) + TAIL_WAIT x w``, ``q95`` the 95th
    percentile of recent estimates and ``w`` the mean wait of recent starts: the longest jobs
    *are* the 95th percentile of completion times, so shortest-first with aging made exactly them
    wait (the README measures it); now a job near the tail may wait about twice as long as jobs
    wait at present, not :data:`SLOWDOWN` times its own length. Not when it arrives to a queue
    that asks for more GPUs than the cluster has (:data:`OVERLOAD`): under overload the
    backlog has to fall on someone, and giving the long jobs FIFO-like waits then cost the average
    far more (README). Also outside overload, every job's deadline is at the latest ``arrival +
    WAIT_CAP x w`` (the **wait bound**, :data:`WAIT_CAP`): estimate-free, so a job is not left
    waiting four times an estimate that was high while the cluster keeps up (on the benchmark the
    759-1,006-s jobs' mean wait fell 10-18% and the average with it; the README measures it). The
    **tail exchange** (:data:`TAIL_EXCHANGE`; by default for each tenant whose estimates have proven
    precise, :data:`EXCHANGE_SPREAD`): a start the pass gives to a job at least as long
    as the tail bound goes to the oldest queued job of its tenant, priority and shape still within its
    tail allowance (:meth:`Scheduler._exchange_for`): under overload the long jobs keep their
    slowdown deadlines, so the start a long job gets comes after hours of waiting and the 95th
    percentile of completion times was theirs; the same start given to an identical job that has
    waited little ends that one inside the tail, and moves no other job (identical jobs are
    interchangeable to the plan, and the two swap places in the order, so long jobs start as often
    as before). Moore and Hodgson's rule for the fewest late jobs [7]_ (docs/measurements.md, "This
    round: the tail exchange"). Only while "identical" is true: where a tenant's jobs of one estimate
    end far apart (its learned spread above :data:`EXCHANGE_SPREAD`), the older twin that takes the
    start may run much longer, and the exchange lost tails (σ 1, held out), so ``"auto"`` leaves
    that tenant's jobs as they are. The ``themis`` order (``order="themis"``, :data:`ORDERS`) replaces that
    switch by a bound on **finish-time fairness** (after Themis [4]_): a job's
    ``rho = (wait so far + expected remaining wait + run) / alone``, ``alone`` its run on its
    tenant's weighted share of the cluster (:meth:`Scheduler._alone`), the expected remaining
    wait the start the last pass planned for it (its reservation; none past the depth). Under
    overload the longest jobs get the tail deadline too, but only while they can still meet
    ``rho <= THEMIS_BOUND``: a job whose planned start ends it past the bound, or that has not
    started by ``arrival + (THEMIS_BOUND - 1) x alone``, cannot meet it any more, and serving it
    first would only push the jobs behind it past theirs (earliest-deadline-first's domino effect
    under overload) and hold devices for it meanwhile, so it *gives way*: it takes its slowdown
    deadline, as every job did under overload before. The backlog then falls on the long jobs
    that cannot meet their bound instead of on all of them (docs/measurements.md, "This round: finish-time
    fairness"). Each pass asks this of the jobs its predecessor planned (at most the depth) and of
    a heap of instants to give way: no work that grows with the queue.
    The order never changes while jobs wait (a deadline is fixed at submission; a preempted job
    keeps its own; in the ``themis`` order a job that gives way moves back once), so the queue
    stays sorted. The **response-ratio** orders ``hrrn`` and ``hrrn-themis`` keep the same
    deadlines (and the same tail and give-way rules as ``deadline`` and ``themis``) but take the
    jobs by HRRN's ratio [6]_ on the wait the deadline allows, ``(now - arrival) / (deadline -
    arrival)``, largest first: the deadline order fixes at submission the instant a job's ratio
    reaches 1; HRRN asks at every pass which job's has grown most, so a job that has waited long
    goes before a newcomer whose deadline would come sooner. A ratio moves with time, so a sorted
    queue would be re-sorted every pass; instead each tenant's queue is split into *classes* of
    allowed wait, log-spaced by :data:`RATIO_CLASS` (Tiresias' discretised queues [2]_), each in
    arrival order, which is the ratio's order within a class up to the class width (the earlier
    arrival has waited longer, on an allowed wait within the width of the later one's); a pass
    merges the classes' heads by their ratio then, in the heap it merges tenants in (about twenty
    classes in use on the benchmark), so a pass costs what it costs in the deadline order, not a
    sort of the queue.
    They are options, not the default: HRRN equalises ratios where the deadline order equalises
    lateness, so when waits are long against the short jobs' estimates a newcomer long job waits
    until its ratio catches up with theirs, a multiple of its allowed wait; on the tuning grid
    the average fell in the overloaded four-tenant settings but 7-8 met p95 targets were lost
    (docs/measurements.md, "This round: response ratio"). Wrong estimates degrade it gracefully: an
    estimate 10x too high moves a job's
    deadline, not to never; one 10x too low gets it started early, and the jobs behind plan
    around its expected end (below), not its estimate. Estimates wrong *by tenant* are
    corrected (:mod:`.correction`): the duration in both deadlines is the estimate times the
    tenant's real/estimated ratio against the other tenants' (1 unless the difference is
    significant), learned from runs that ended on their own (:meth:`Scheduler.finish` with ``now``),
    so a tenant that declares short estimates gains no earlier place. SLOWDOWN was chosen on tuning seeds over
    loads, cluster sizes, tenant mixes and estimate errors and checked on held-out seeds (README);
    plain shortest-first (``SLOWDOWN`` = infinity) buys the average with a p95 up to 1.45x FIFO's.
    And:

    * *heterogeneity-aware placement* (after Gavel [3]_): the job goes on the model where it is
      estimated to **finish** first, counting the wait for devices, except that it starts now
      on a slower model with room when it would end there within ``slack`` (default
      :data:`SLACK`) times its time to finish on the faster one: idle devices are capacity lost.
      The slack is a trade the simulator measures (README): at 2 (on the benchmark's half-speed
      V100s, "never wait when a slower model has room") long jobs land on slow GPUs and make the
      tail; at 1.5 a job waits for a fast GPU when that ends it sooner by a third or more, which
      sends the long jobs (the ones a wait costs least relative to their length) to fast GPUs
      and the short ones to the idle slow ones. Only a job that holds a **reservation** (below)
      on the faster model waits for it: a job past the reservation depth is promised nothing
      there (the next pass reserves that device for an earlier job, pass after pass), so it
      starts on the fastest model with room now that no reservation wants before it would end
      (issue 18: at 10,000 GPUs every second StreamMAP's jobs waited, they waited beside free
      V100s, which idled while jobs arrived; README). Except a **long** job (its estimate at least
      the :data:`LONG` quantile of recent ones, :data:`LONG_WIDE` above :data:`WIDE_CLUSTER`
      GPUs: :func:`long_quantile`): past the depth it is **promised** the faster
      model when the slack says to wait for it, a reservation after the pass's that every later
      pass plans first, at its earliest fit (at most :data:`PROMISES` at a time, and none on a
      cluster of up to :data:`SMALL_CLUSTER` GPUs: :func:`promise_limit`). On a half-speed model
      a long job costs its length again, a short one little: at 2,000 GPUs the long jobs past
      the depth took the V100s and the average and the drain grew (README). The wait spent
      since the promise counts against the slack, so a promise that slips (running jobs
      overran) gives way to a slower model with room;
    * *conservative backfill* [5]_: each pass keeps an availability profile per model (free
      devices over time, from the running jobs' expected ends: the estimated end, or for a job
      already past it the first ``start + 2^i x estimate`` still ahead). Every job looked at in
      the pass that cannot start now gets a **reservation**: the earliest time its gang fits for
      its whole estimated duration around the reservations of every job looked at before it; a
      job starts now only if it fits now around all of them. So backfilling a job never delays
      an earlier job's estimated start (EASY backfilling protects only the first waiting job).
      The first ``depth`` waiting jobs of a pass get reservations (:func:`reservation_depth`:
      :data:`DEPTH`, 64, up to 512 GPUs, 32 above; the service shows them as
      estimated starts); jobs after them may still start where they fit around those, but get
      none themselves (with 10,000 jobs on 1,000 GPUs the queue can hold thousands, and planning
      them all on every event would cost many minutes; the jobs past the depth are the latest
      deadlines, or those of tenants above their share; a pass past the depth stops as soon as
      every job it can still look at (each tenant's next ones, up to its budget) is of a shape
      refused since the plan last changed, or with no model with room, since each such job would
      return unchanged). Each reservation is shown with an
      interval calibrated on how real starts compared with earlier promises (:mod:`.forecast`).
      "Earlier" is the pass's order: fair share across tenants, priority and the slowdown
      deadline within one; a newly arrived job that this order puts
      ahead may still take a slot, as in any priority backfilling. A job held back by its own
      tenant's quota gets no reservation;
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
.. [5] A. W. Mu'alem, D. G. Feitelson, "Utilization, predictability, workloads, and user runtime
   estimates in scheduling the IBM SP2 with backfilling", IEEE TPDS 12(6), 2001.
.. [6] P. Brinch Hansen, "Short-term scheduling in multiprogramming systems", SOSP 1971 (highest
   response ratio next).
.. [7] J. M. Moore, "An n job, one machine sequencing algorithm for minimizing the number of late
   jobs", Management Science 15(1), 1968 (with T. J. Hodgson's algorithm).
"""

from __future__ import annotations

import bisect
import heapq
import math
import numbers
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from streammap.errors import StreamMapError, shown
from streammap.tenancy.availability import Profile, Releases
from streammap.tenancy.correction import EstimateCorrection
from streammap.tenancy.estimate import Demand, Option, accelerator_pools
from streammap.tenancy.forecast import StartForecast
from streammap.tenancy.packing import SharedDevices, expected_end, free_over
from streammap.tenancy.tenants import Tenants

POLICIES = ("fifo", "drf", "streammap")
#: The slowdown deadline of the streammap policy: a job's place in its tenant's queue is
#: ``arrival + SLOWDOWN x estimated duration``, the time at which its wait reaches SLOWDOWN times
#: its length (0 would be FIFO, infinity shortest-first; chosen by the simulator, README).
SLOWDOWN = 4.0
#: Waiting jobs per pass that get a reservation (conservative backfill's depth; streammap policy):
#: DEPTH on a cluster of up to SMALL_CLUSTER GPUs, LARGE_DEPTH above (see :func:`reservation_depth`).
#: Only a job with a reservation waits for a faster model (_Plan.placement), so on a small cluster,
#: where few devices free at a time, the reservations are how the long jobs get the fast GPUs: with
#: 32 the jobs past them took the slow ones, and the average and tail grew (256 GPUs, tuning seeds,
#: up to +0.09x FIFO's average at sigma 1.0); 64 kept them as before the promise rule. On a large
#: cluster devices free every few seconds, so the jobs past the plan find room anyway: at 2,000 and
#: 10,000 GPUs 32 reservations did as well as 64 (within 0.03x FIFO's average) for two thirds of
#: the CPU time (README), which the 100,000-job scale target needs.
DEPTH = 64
SMALL_CLUSTER = 512
LARGE_DEPTH = 32
#: A job that would end first on a busy model starts now on a slower one with room if it ends there
#: within this factor of its time to finish on the busy one, waiting included (see _Plan.placement).
#: Only a job that gets a reservation waits: one past the reservation depth takes the room it has.
SLACK = 1.5
#: Promises past the reservation depth (streammap policy; see _Plan and Scheduler._promise): a job
#: past the depth whose estimate is at least the LONG quantile of recent estimates, and that would
#: end sooner on a faster busy model than on a slower free one by more than the slack, gets a
#: reservation on the faster model that later passes keep before any other (at most PROMISES
#: outstanding, on a cluster of more than SMALL_CLUSTER GPUs: see :func:`promise_limit`). A long job
#: on a half-speed GPU costs twice its length, which the short jobs that take the slow GPUs instead
#: do not (docs/measurements.md, "This round: placement"). 16 promises sufficed while jobs arrived, but not in the
#: drain of an overloaded stream: at 2,000 and 10,000 GPUs, load 1.1, the queue ends with hundreds of
#: jobs, the long ones past the sixteenth promise took V100s at half speed and set the makespan
#: (utilisation +0.3 and +4.1 points against FIFO's; with 64: +16.2 and +18.2, the average within
#: 0.01x; 312, one per 32 GPUs at 10,000, did no better; docs/measurements.md, "This round: placement at scale").
#: LONG was 0.9: with 0.7 the 4-GPU jobs of 759 s, which had taken V100s past the depth 63% of the
#: time, wait for A100s too, and every shorter job waits less (2,000 GPUs, load 1.1, sigma 0:
#: average 0.88 -> 0.83x FIFO's; 0.8: 0.84x, 0.5: 0.83x with Jain's index falling to 0.970).
#: Above WIDE_CLUSTER GPUs it stays LONG_WIDE (see :func:`long_quantile`): at 10,000 GPUs jobs wait
#: about a minute, 0.7 bought nothing there (0.898x FIFO's average either way), took the 64
#: promises from the longest jobs in the drain (utilisation +18.2 -> +0.1 points) and doubled the
#: CPU time of a pass (the 100,000-job scale target); 312 promises won 0.015x for three times the CPU.
LONG = 0.7
LONG_WIDE = 0.9
WIDE_CLUSTER = 4096
PROMISES = 64
#: A tenant holding less than this share of its weighted max-min fair share of the GPUs goes
#: first in a pass; the others' jobs are taken in one order, by slowdown deadline (streammap policy;
#: 1 measured a better tail and Jain's index than 0.8 on the tuning seeds, README).
FLOOR = 1.0
#: The tail deadline: a job's deadline is at the latest ``arrival + max(0, TAIL x q95 - duration) +
#: TAIL_WAIT x w``, with q95 the 95th percentile of the last 1,000 submitted jobs' estimates and w the
#: mean wait of the last 1,000 starts, so that the long jobs, which make the 95th percentile of
#: completion times, are not the ones left to wait. Not while the queue asks for more than
#: OVERLOAD x the cluster's GPUs (overload: no order keeps that tail short; short jobs keep their lead).
#: 0 turns it off; TAIL and TAIL_WAIT were chosen on the tuning seeds (README).
TAIL = 1.0
TAIL_WAIT = 2.0
#: The wait bound: outside overload (:data:`OVERLOAD`) a job's deadline is at the latest ``arrival +
#: WAIT_CAP x w``, w the mean wait of the last 1,000 starts, whatever its estimate says. Estimate-free:
#: a job whose estimate is high (or wrong) is not left waiting 4x that estimate while the cluster keeps
#: up (tuning seeds, 256 GPUs, loads 1.0-1.2, sigma 0-1: two more average targets and one more p95
#: target met, none lost; 4x and 16x measured close, README "This round: a wait bound"). Not under
#: overload, where a bound for every job (16x) cost 0.03-0.13x of the average. 0 (or inf) turns it off.
WAIT_CAP = 8.0
#: The tail exchange: a start that a pass gives a *tail job* (its estimate at least the tail bound,
#: the 95th percentile of recent estimates: the jobs that make the p95 of completion times) goes to
#: the oldest queued job of its tenant, priority and shape that can still start within its tail
#: allowance ``max(0, q95 - duration) + TAIL_WAIT x w`` of its arrival, when that is another job
#: (see :meth:`Scheduler._exchange_for`). Jobs of one shape are the same job to the policy, so the
#: exchange leaves the plan, and the sum of completion times, as they were; it changes which of them
#: end late: under overload every long job waits for its slowdown deadline, and the p95 is theirs.
#: The two jobs swap places in the order, so long jobs start as often as without the exchange.
#: ``"on"``, ``"off"``, or ``"auto"`` (the default): on for a tenant whose estimates have proven
#: precise, i.e. the learned spread of its runs' ``log(real / estimated)``
#: (:meth:`~streammap.tenancy.correction.EstimateCorrection.spread`, at least 30 runs) is at most
#: :data:`EXCHANGE_SPREAD`. Always on, it met five more p95 targets on the tuning grid (σ 0 and
#: 0.5) and one more held out (σ 0), but lost three σ-1 tails held out, where two jobs of one shape
#: run for very different times: "the same job" is then false, and the older twin that takes the
#: start may run much longer (docs/measurements.md, "This round: the tail exchange", and "This
#: round: the tail exchange where estimates are precise").
TAIL_EXCHANGE = "auto"
#: The modes of the tail exchange (:data:`TAIL_EXCHANGE`).
TAIL_EXCHANGES = ("auto", "on", "off")
#: The largest learned spread (standard deviation of a tenant's ``log(real / estimated)``) at which
#: ``"auto"`` exchanges that tenant's jobs. With spread s, two runs of one estimate differ by a factor
#: of about ``exp(s x sqrt(2))`` at one standard deviation: 2.0x at s = 0.5, 4.1x at s = 1. The
#: measurements (σ 0, 0.5 and 1) place it between 0.5, where the exchange met more tails and lost
#: none, and 1, where it lost tails held out; 0.75 is the midpoint: no measured cell tells values in
#: between apart.
EXCHANGE_SPREAD = 0.75
#: Time constant (seconds) of the memory of attained service: among tenants below the floor, the
#: one that held least of its fair share under contention, decayed by exp(-age / MEMORY), goes first.
MEMORY = 3600.0
#: The tail deadline is not given to a job that arrives while the queue asks for more than this
#: multiple of the cluster's GPUs. 0.5 measured a slightly better average on the tuning seeds
#: (0-0.05x FIFO's) but on the held-out ones gave the skewed mix's tail back under overload
#: (p95 0.66 -> 1.72x, 0.61 -> 1.59x FIFO's) and met no further average target (README).
OVERLOAD = 1.0
#: The streammap policy's orders within and across tenants: ``deadline`` (the default: the tail
#: deadline is not given under overload) and ``themis`` (under overload too, while the job can still
#: finish within THEMIS_BOUND times its run on its tenant's share; see the module docstring), and
#: their response-ratio forms ``hrrn`` and ``hrrn-themis``: the same deadlines, but a pass takes the
#: jobs by the share of their allowed wait already spent, largest first (see RATIO_CLASS).
ORDERS = ("deadline", "themis", "hrrn", "hrrn-themis")
ORDER = "deadline"
#: The orders that give the tail deadline under overload too, until the job gives way.
TAIL_UNDER_OVERLOAD = ("themis", "hrrn-themis")
#: The response-ratio orders: a queued job's place at time ``now`` is its response ratio on its
#: *allowed wait* ``a = deadline - arrival`` (SLOWDOWN x its estimate, or less for a job holding the
#: tail deadline), ``(now - arrival) / a``, largest first: HRRN's ``1 + wait / estimate`` up to the
#: constant SLOWDOWN, with the tail deadline read as a shorter allowed wait. Options, not the default:
#: on the tuning grid they won 3-4 average targets and lost 7-8 met p95 ones (README, "This round:
#: response ratio").
RATIO_ORDERS = ("hrrn", "hrrn-themis")
#: The response-ratio orders keep each tenant's queue as *classes* of allowed wait, log-spaced by
#: this factor (class ``floor(log a / log RATIO_CLASS)``), each in arrival order (after Tiresias'
#: discretised queues, Gu et al. NSDI 2019): within a class the earlier arrival has waited longer on
#: an allowed wait within this factor of the later one's, so arrival order is HRRN's up to the class
#: width, and a pass merges only the class heads by their ratio now (a heap of one entry per class
#: and tenant in use, at most 22 on the benchmark's 256-GPU settings) instead of re-sorting the queue.
#: 1 + 1e-9 is exact HRRN (a class per distinct allowed wait: a heap as large as their number).
RATIO_CLASS = 2 ** 0.25
#: The shortest allowed wait a class tells apart (seconds): a tail deadline at the arrival itself
#: (no wait allowed) ranks as this.
RATIO_MIN_WAIT = 1.0
#: The ``themis`` order's bound on finish-time fairness, (wait so far + expected remaining wait +
#: run) / run on the tenant's share: a job given the tail deadline under overload keeps it while its
#: planned start still ends it within the bound and it has waited less than (THEMIS_BOUND - 1) times
#: that run (README: on the tuning seeds 1.5 and above cost more of the average for no better tail,
#: 1.1-1.15 kept too few long jobs for the p95).
THEMIS_BOUND = 1.25


def reservation_depth(gpus: int) -> int:
    """How many waiting jobs of a pass get a reservation on a cluster of ``gpus`` GPUs:
    :data:`DEPTH` up to :data:`SMALL_CLUSTER` GPUs, :data:`LARGE_DEPTH` above."""
    return DEPTH if gpus <= SMALL_CLUSTER else LARGE_DEPTH


def promise_limit(gpus: int) -> int:
    """How many long jobs past the reservation depth may hold a promise at a time on a cluster of
    ``gpus`` GPUs: none up to :data:`SMALL_CLUSTER` GPUs, :data:`PROMISES` above. On a small
    cluster the 64 reservations of a pass already send the long jobs to the fast GPUs (256 GPUs,
    seed 1: 258 of the longest tenth's 283 jobs ran on A100s), and a promise planned before them
    held a large part of its A100s for hours: the average went from 0.63x FIFO's to 1.05x (README)."""
    return 0 if gpus <= SMALL_CLUSTER else PROMISES


def long_quantile(gpus: int) -> float:
    """The quantile of recent estimates from which a job past the depth counts as long (and may be
    promised its fastest model) on a cluster of ``gpus`` GPUs: :data:`LONG` up to
    :data:`WIDE_CLUSTER` GPUs, :data:`LONG_WIDE` above (measured at 2,000 and 10,000 GPUs only)."""
    return LONG if gpus <= WIDE_CLUSTER else LONG_WIDE


def tail_exchange_mode(value: str | bool) -> str:
    """The tail exchange's mode (:data:`TAIL_EXCHANGES`) from a mode name or a bool (True: ``"on"``)."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if value not in TAIL_EXCHANGES:
        raise StreamMapError(f"unknown tail exchange mode {shown(value)}",
                             hint=f"modes: {', '.join(TAIL_EXCHANGES)} (auto: for tenants whose estimates proved precise)")
    return value


def water_fill(demand: dict[str, float], weights: dict[str, float], capacity: float) -> dict[str, float]:
    """Weighted max-min fair shares of ``capacity`` (water-filling): no tenant gets more than it
    demands, and the rest is split in proportion to weight among the tenants still wanting more."""
    fair = {t: 0.0 for t in demand}
    active = {t for t, d in demand.items() if d > 0}
    left = float(capacity)
    while active and left > 1e-12:
        wsum = sum(weights[t] for t in active)
        unit = left / wsum
        capped = {t for t in active if demand[t] - fair[t] <= unit * weights[t]}
        if not capped:
            for t in active:
                fair[t] += unit * weights[t]
            break
        for t in capped:
            left -= demand[t] - fair[t]
            fair[t] = demand[t]
        active -= capped
    return fair


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
    memory: float            # GPU memory granted (sum of the devices' capacities; a fraction: its own)

    @property
    def est_finish(self) -> float:
        return self.start + self.option.duration


class Pool:
    """Free accelerators by model and node; grants whole devices, packing a gang onto few nodes.

    State: ``free[model][node]``, the node's free device ids (a take pops from the end, a give
    appends), ``free_count[model]``, and per model *buckets*: ``buckets[model][c]``, the names of
    the nodes with exactly ``c`` free devices, sorted. A take looks only at the buckets (a node
    has at most a few dozen devices, so there are few), not at every node of the model: at 10,000
    GPUs a model has 1,250 nodes, and scanning them on every start was a tenth of a pass. The
    choice is the one a scan makes: the fitting node with the fewest free devices (then the least
    name), else the nodes with the most free devices first (then by name).
    """

    def __init__(self, cluster):
        self.models = accelerator_pools(cluster)
        self.size = {m: len(ds) for m, ds in self.models.items()}
        self.memory_of = {d.id: (d.memory if math.isfinite(d.memory) else 0.0)
                          for ds in self.models.values() for d in ds}
        self.model_of = {d.id: m for m, ds in self.models.items() for d in ds}
        self.node_of = {d.id: d.node for ds in self.models.values() for d in ds}
        self.free: dict[str, dict[str, list[str]]] = {}
        self.buckets: dict[str, list[list[str]]] = {}
        for m, ds in self.models.items():
            nodes: dict[str, list[str]] = {}
            for d in ds:
                nodes.setdefault(d.node, []).append(d.id)
            self.free[m] = nodes
            buckets: list[list[str]] = [[] for _ in range(max(map(len, nodes.values()), default=0) + 1)]
            for n, ids in nodes.items():
                buckets[len(ids)].append(n)
            for names in buckets:
                names.sort()
            self.buckets[m] = buckets
        self.free_count = dict(self.size)
        #: Bumped by every take and give: what was decided from the free counts stands while it does not move.
        self.version = 0
        self.total_gpus = sum(self.size.values())
        self.total_memory = sum(self.memory_of.values())

    def take(self, model: str, k: int) -> tuple[str, ...] | None:
        """``k`` free devices of ``model`` (the fullest-fitting single node, else the fullest nodes), or None."""
        if self.free_count.get(model, 0) < k:
            return None
        nodes, buckets = self.free[model], self.buckets[model]
        fit = next((names[0] for names in buckets[max(k, 1):] if names), None)
        if fit is not None:
            order = [fit]                       # best fit: keep big holes for big gangs
        else:
            order = [n for names in reversed(buckets[1:]) for n in names]
        got: list[str] = []
        for n in order:
            ids = nodes[n]
            before = len(ids)
            while ids and len(got) < k:
                got.append(ids.pop())
            self._moved(model, n, before, len(ids))
            if len(got) == k:
                break
        self.free_count[model] -= k
        self.version += 1
        return tuple(got)

    def take_exact(self, devices) -> None:
        """Mark these devices busy (a grant found again after a restart)."""
        for dev in devices:
            m, n = self.model_of[dev], self.node_of[dev]
            ids = self.free[m][n]
            ids.remove(dev)
            self._moved(m, n, len(ids) + 1, len(ids))
            self.free_count[m] -= 1
        self.version += 1

    def give(self, devices) -> None:
        for dev in devices:
            m, n = self.model_of[dev], self.node_of[dev]
            ids = self.free[m][n]
            ids.append(dev)
            self._moved(m, n, len(ids) - 1, len(ids))
            self.free_count[m] += 1
        self.version += 1

    def _moved(self, model: str, node: str, before: int, after: int) -> None:
        """Node ``node`` went from ``before`` to ``after`` free devices: move it between buckets."""
        if before == after:
            return
        buckets = self.buckets[model]
        names = buckets[before]
        del names[bisect.bisect_left(names, node)]
        bisect.insort(buckets[after], node)


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
        Conservative backfill in the ``streammap`` policy (on by default; off, a job that must
        wait blocks its model for every job after it).
    depth : int, optional
        Reservation depth of the ``streammap`` policy: how many waiting jobs per pass get a
        reservation (see the module docstring); by default :func:`reservation_depth` of the
        cluster's GPUs.
    slack : float
        Placement slack of the ``streammap`` policy (see the module docstring; at least 1).
    slowdown : float
        The slowdown deadline of the ``streammap`` policy's order (see :data:`SLOWDOWN`; >= 0).
    floor : float
        The fair-share floor of the ``streammap`` policy (see :data:`FLOOR`; 0 to 1).
    tail, tail_wait : float
        The tail deadline of the ``streammap`` policy (see :data:`TAIL`; ``tail`` 0 turns it off).
    wait_cap : float
        The wait bound of the ``streammap`` policy's deadlines outside overload, a multiple of the
        mean wait of recent starts (see :data:`WAIT_CAP`; 0 turns it off).
    tail_exchange : {"auto", "on", "off"} or bool
        The tail exchange of the ``streammap`` policy (see :data:`TAIL_EXCHANGE`; ``"auto"`` by default:
        for each tenant whose estimates have proven precise). True is ``"on"``, False ``"off"``.
    promises : int, optional
        How many long jobs past the reservation depth may hold a promise of their fastest model at
        a time (see the module docstring); by default :func:`promise_limit` of the cluster's GPUs.
    order : str
        The ``streammap`` policy's order: ``deadline``, ``themis`` (the tail under overload),
        or their response-ratio forms ``hrrn`` and ``hrrn-themis`` (see :data:`ORDERS` and the
        module docstring; these need a finite ``slowdown``).
    joint : bool
        Joint placement (:mod:`.packing`): jobs with fractional demands share devices. Off, each
        such job runs on a whole device, as a job without ``share`` does. Nothing changes for
        jobs without fractional demands either way.
    """

    def __init__(self, cluster, tenants: Tenants, policy: str = "streammap", backfill: bool = True,
                 depth: int | None = None, slack: float = SLACK, slowdown: float = SLOWDOWN, floor: float = FLOOR,
                 tail: float = TAIL, tail_wait: float = TAIL_WAIT, joint: bool = True,
                 promises: int | None = None, order: str = ORDER, wait_cap: float = WAIT_CAP,
                 tail_exchange: str | bool = TAIL_EXCHANGE):
        if policy not in POLICIES:
            raise StreamMapError(f"unknown policy {policy!r}", hint=f"policies: {', '.join(POLICIES)}")
        if order not in ORDERS:
            raise StreamMapError(f"unknown order {order!r}", hint=f"orders: {', '.join(ORDERS)}")
        self.policy = policy
        self.backfill = backfill
        self.tenants = tenants
        self.pool = Pool(cluster)
        # -- joint placement (packing): fractional jobs share open devices -------------------
        self.joint = joint
        self.packing = SharedDevices(self.pool)
        self._fractions_queued = 0                      # queued jobs with fractional options
        self.running: dict[str, Running] = {}
        self.usage = {t.name: Usage() for t in tenants}
        self.jobs: dict[str, Job] = {}                 # queued jobs by id
        # Per lane (a tenant, or in the ratio orders a class of one: see _lane): (key, job id), sorted.
        self._queues: dict = {t.name: [] for t in tenants}
        self._queue_shapes: dict = {t.name: [] for t in tenants}   # the same jobs' shapes
        self._fifo: list = []
        self._arrivals: dict[str, list] = {t.name: [] for t in tenants}   # per tenant, arrival order
        self._by_model: dict[str, dict[str, Running]] = {m: {} for m in self.pool.models}
        self._ends = {m: Releases() for m in self.pool.models}
        self.depth = reservation_depth(self.pool.total_gpus) if depth is None else depth
        if not slack >= 1:
            raise StreamMapError(f"placement slack must be at least 1, not {slack}",
                                 hint="1 always waits for the earliest finish; 2 starts on a half-speed model with room")
        self.slack = slack
        if not slowdown >= 0:
            raise StreamMapError(f"the slowdown deadline must be at least 0, not {slowdown}",
                                 hint="0 orders a tenant's jobs by arrival; larger values favour short jobs more")
        self.slowdown = slowdown
        if isinstance(wait_cap, bool) or not isinstance(wait_cap, numbers.Real) or not wait_cap >= 0:
            raise StreamMapError(f"the wait bound must be a number at least 0, not {shown(wait_cap)}",
                                 hint="0 turns it off; 8 bounds a wait by 8x the mean wait of recent starts")
        # inf bounds nothing, as 0 does (and inf x a mean wait of 0 would be NaN)
        self.wait_cap = float(wait_cap) if math.isfinite(wait_cap) else 0.0
        self.tail_exchange = tail_exchange_mode(tail_exchange)
        if not 0 <= floor <= 1:
            raise StreamMapError(f"the fair-share floor must be between 0 and 1, not {floor}",
                                 hint="1: a tenant below its fair share always goes first; 0: one order for all")
        self.floor = floor
        self.order = order
        # The response-ratio orders keep each tenant's queue as classes of allowed wait ("lanes",
        # keyed (tenant, -priority, class)), made on first use and dropped empty at a pass's start;
        # the other orders and policies have one lane per tenant, its name.
        self._ratio = policy == "streammap" and order in RATIO_ORDERS
        if self._ratio and not math.isfinite(slowdown):
            raise StreamMapError(f"the {order} order needs a finite slowdown deadline, not {slowdown}",
                                 hint="its ratio is the wait over the allowed wait, SLOWDOWN x the estimate")
        self._class_log = math.log(RATIO_CLASS)
        self._pass_now = 0.0                            # the time of the pass under way (ratio orders)
        # The themis order: each tenant's weighted share of the cluster's GPUs (what "alone" runs on),
        # and the jobs given the tail deadline under overload, by the instant they give way to their
        # slowdown deadline: a heap of (instant, job id), popped at the start of a pass.
        weights = sum(t.weight for t in tenants)
        self._share_gpus = {t.name: self.pool.total_gpus * t.weight / weights for t in tenants}
        self._give_way: list[tuple[float, str]] = []
        self._holding_tail: set[str] = set()            # queued jobs holding the tail deadline under overload
        #: The last pass's plan for queued jobs (streammap policy): job id -> (estimated start, model).
        self.estimated_starts: dict[str, tuple[float, str]] = {}
        #: The same jobs' calibrated start intervals: job id -> (earliest, latest) (see :mod:`.forecast`).
        self.start_intervals: dict[str, tuple[float, float]] = {}
        self.forecast = StartForecast()
        self.queued_gpus = 0                            # GPUs the queued jobs ask for (own widths)
        self._queued_gpus = {t.name: 0 for t in tenants}   # the same, per tenant
        # Per tenant: [GPU-seconds held, GPU-seconds of its fair share] under contention, decayed.
        self._attained = {t.name: [0.0, 0.0] for t in tenants}
        self._last_pass: tuple | None = None             # (time, fair shares if contended, GPUs held after it)
        self._deadline: dict[str, float] = {}            # streammap order: job id -> its deadline
        self.correction = EstimateCorrection()           # per tenant: real / estimated durations seen
        self.tail = tail
        self.tail_wait = tail_wait
        self._recent: deque = deque(maxlen=1000)        # the last submitted jobs' estimated durations
        self._tail_bound: float | None = None
        self._since_tail = 0
        self._waits: deque = deque(maxlen=1000)         # the last grants' waits (now - arrival)
        self._wait_sum = 0.0
        self._seq = 0
        # Job shapes: each distinct option set gets a number once, at submission (hashing the
        # options themselves on every job looked at was a tenth of a pass). A pass past its
        # reservation depth ends once every shape in the queue is refused (a thousand-job queue
        # holds a few dozen shapes): queued jobs per shape.
        self._shape_ids: dict[tuple, int] = {}
        self._shape_options: list[tuple] = []
        self._shape_of: dict[str, int] = {}
        self._shapes: dict[int, int] = {}
        # The tail exchange: per (tenant, shape), the queued jobs as (arrival, seq, id), in arrival order
        # (kept only with the exchange on: no other decision reads it).
        self._twins: dict[tuple, list] = {}
        # Shapes with no room (free devices; for a fraction, open ones too), as of the versions in [0]:
        # past the depth a pass asks this of hundreds of jobs, and room moves only with a start or a finish.
        self._roomless: tuple[tuple, dict[int, bool]] = ((-1, -1), {})
        self._shapes_moved = 0                          # submits and unqueues so far
        self._roomy: tuple | None = None                 # ((pool, packing versions, _shapes_moved), shapes with room)
        self._no_quotas = all(self._unlimited(t.name) for t in tenants)
        # Promises past the depth: job id -> (the option promised, when first promised), in order
        # given; kept by every later pass before any other job is planned (see _keep_promises).
        self._promises: dict[str, tuple[Option, float]] = {}
        self.promises = promise_limit(self.pool.total_gpus) if promises is None else promises
        self._long: tuple[int, float] = (-1, math.inf)   # (submissions // 50, the long_q quantile then)
        self.long_q = long_quantile(self.pool.total_gpus)

    # -- the queue ----------------------------------------------------------------------
    def _key(self, job: Job) -> tuple:
        """A job's place in its lane (:meth:`_lane`): priority, then its deadline, or in the ratio
        orders its arrival (the allowed wait rides along for the pass's ratio, never compared:
        ``seq`` is unique)."""
        if self.policy == "streammap":
            if self._ratio:
                return (-job.priority, job.arrival, job.seq, self._allowed_wait(job))
            return (-job.priority, self._deadline[job.id], job.seq)
        return (-job.priority, job.arrival, job.seq)

    def _lane(self, job: Job):
        """The queue a job waits in: its tenant's; in the ratio orders its tenant's class of its
        priority and allowed wait (:data:`RATIO_CLASS`), in which arrival order is the ratio's up
        to the class width. Fixed while the job's deadline is."""
        if not self._ratio:
            return job.tenant
        return (job.tenant, -job.priority, math.floor(math.log(self._allowed_wait(job)) / self._class_log))

    @staticmethod
    def _tenant_of(lane) -> str:
        return lane if isinstance(lane, str) else lane[0]

    def _allowed_wait(self, job: Job) -> float:
        """The ratio orders' denominator: the wait the job's deadline allows, ``deadline - arrival``
        (SLOWDOWN x its corrected estimate, less while it holds the tail deadline), at least
        :data:`RATIO_MIN_WAIT`."""
        return max(RATIO_MIN_WAIT, self._deadline[job.id] - job.arrival)

    def _drop_empty_lanes(self) -> None:
        """The ratio orders, at a pass's start: forget the classes no job waits in, so that a pass
        merges only the heads of classes in use."""
        for lane in [lane for lane, q in self._queues.items() if not q]:
            del self._queues[lane], self._queue_shapes[lane]

    def _deadline_of(self, job: Job) -> float:
        """The streammap order's deadline: the earliest of the slowdown deadline, the wait bound
        (:data:`WAIT_CAP`) and the tail deadline (the last start at which the job still ends within
        the tail bound, see :data:`TAIL`). Under overload the wait bound is not given, and the tail
        deadline only in the ``themis`` order (and then only until the job gives way,
        :meth:`_gives_way_at`)."""
        d = self._duration(job)
        if not math.isfinite(self.slowdown):
            return d                                           # shortest first
        deadline = self._slowdown_deadline(job, d)
        overloaded = self._overloaded()
        if self.wait_cap and len(self._recent) >= 30 and not overloaded:
            # The wait bound (WAIT_CAP): from the 31st job on, as the tail bound.
            deadline = min(deadline, job.arrival + self.wait_cap * self._typical_wait())
        if self._tail_bound is not None and (self.order in TAIL_UNDER_OVERLOAD or not overloaded):
            deadline = min(deadline, job.arrival + max(0.0, self._tail_bound - d)
                           + self.tail_wait * self._typical_wait())
        return deadline

    def _slowdown_deadline(self, job: Job, duration: float | None = None) -> float:
        """``arrival + slowdown x`` the job's corrected estimate (``duration``, when the caller
        has it already): the latest its place can be."""
        return job.arrival + self.slowdown * (self._duration(job) if duration is None else duration)

    def _duration(self, job: Job) -> float:
        """The estimate the order uses: of a tenant whose jobs run longer than estimated, against
        the others', corrected (:mod:`.correction`), so that under-estimating buys no earlier place."""
        return job.demand.best.duration * self.correction.factor(job.tenant)

    def _alone(self, job: Job) -> float:
        """The job's finish time on its tenant's weighted share of the cluster alone (Themis' ideal,
        the denominator of finish-time fairness): its run, stretched where its gang is wider than
        that share."""
        return self._duration(job) * max(1.0, job.demand.gpus / self._share_gpus[job.tenant])

    def _gives_way_at(self, job: Job, deadline: float) -> float | None:
        """The ``themis`` order: when a job that got the tail deadline under overload gives way to
        its slowdown deadline (the last start that keeps its finish-time fairness within
        :data:`THEMIS_BOUND`); None for any other job."""
        if self.order not in TAIL_UNDER_OVERLOAD or not self._overloaded() or not math.isfinite(self.slowdown):
            return None
        if deadline >= self._slowdown_deadline(job):
            return None                          # the slowdown deadline is its own: nothing to give
        return job.arrival + (THEMIS_BOUND - 1.0) * self._alone(job)

    def _give_way_due(self, now: float) -> None:
        """The ``themis`` order, at the start of a pass: the jobs holding the tail deadline under
        overload that can no longer finish within :data:`THEMIS_BOUND` times their run alone give
        way (:meth:`_give_way_now`): those whose start, as the last pass planned it, ends them past
        the bound, and those whose instant to give way has come."""
        for jid, (at, model) in self.estimated_starts.items():     # at most the depth and the promises
            if jid in self._holding_tail:
                job = self.jobs[jid]
                if max(at, now) + job.demand.option(model).duration > job.arrival + THEMIS_BOUND * self._alone(job):
                    self._give_way_now(job)
        heap = self._give_way
        while heap and heap[0][0] <= now:
            jid = heapq.heappop(heap)[1]
            if jid in self._holding_tail:        # (not started, cancelled or given way meanwhile)
                self._give_way_now(self.jobs[jid])

    def _give_way_now(self, job: Job) -> None:
        """A job gives up the tail deadline: it takes its slowdown deadline, and its queue entry moves back."""
        self._holding_tail.discard(job.id)
        sid = self._leave_queue(job)
        self._deadline[job.id] = self._slowdown_deadline(job)
        self._join_queue(job, sid)

    def _join_queue(self, job: Job, sid: int) -> None:
        """Put the job (of shape ``sid``) in its lane (:meth:`_lane`) at its key's place, after equal keys."""
        lane, entry = self._lane(job), (self._key(job), job.id)
        q = self._queues.get(lane)
        if q is None:
            q = self._queues[lane] = []
            self._queue_shapes[lane] = []
        i = bisect.bisect_right(q, entry)
        q.insert(i, entry)
        self._queue_shapes[lane].insert(i, sid)

    def _leave_queue(self, job: Job) -> int:
        """Take the job out of its lane (found by its key, which must be unchanged since it
        joined); its shape id."""
        lane = self._lane(job)
        q = self._queues[lane]
        i = bisect.bisect_left(q, (self._key(job), job.id))
        q.pop(i)
        return self._queue_shapes[lane].pop(i)

    def _overloaded(self) -> bool:
        """Whether the queue asks for more than :data:`OVERLOAD` times the cluster's GPUs (the tail
        deadline is not given to jobs arriving then)."""
        return self.queued_gpus > OVERLOAD * self.pool.total_gpus

    def _typical_wait(self) -> float:
        """The mean wait of the last jobs started (0 before any)."""
        return self._wait_sum / len(self._waits) if self._waits else 0.0

    def _learn_duration(self, d: float) -> None:
        """One more submitted job's estimate: the tail bound follows the recent 95th percentile."""
        self._recent.append(d)
        self._since_tail += 1
        if self.tail and len(self._recent) >= 30 and (self._since_tail >= 50 or self._tail_bound is None):
            self._tail_bound = self.tail * float(np.quantile(np.fromiter(self._recent, float), 0.95))
            self._since_tail = 0

    def submit(self, job: Job) -> None:
        """Queue a job (its tenant must be known; its demand must fit some pool)."""
        if job.tenant not in self.usage:
            raise StreamMapError(f"unknown tenant {job.tenant!r}", hint=f"tenants: {', '.join(self.usage)}")
        if job.demand.whole is not None:                 # joint placement (packing)
            if not self.joint:
                job.demand = job.demand.whole            # without it: a whole device
            else:
                self._fractions_queued += 1
        if not job.seq:
            self._seq += 1
            job.seq = self._seq
        else:
            self._seq = max(self._seq, job.seq)
        self.jobs[job.id] = job
        if self.policy == "streammap":
            if job.id not in self._deadline:       # a preempted job keeps its place
                self._deadline[job.id] = deadline = self._deadline_of(job)
                gives_way = self._gives_way_at(job, deadline)
                if gives_way is not None:
                    heapq.heappush(self._give_way, (gives_way, job.id))
                    self._holding_tail.add(job.id)
                self._learn_duration(job.demand.best.duration)
        self.queued_gpus += job.demand.held             # its fraction, for a fractional job
        self._queued_gpus[job.tenant] += job.demand.held
        sid = self._shape_ids.get(job.demand.options)
        if sid is None:
            sid = self._shape_ids[job.demand.options] = len(self._shape_options)
            self._shape_options.append(job.demand.options)
        self._shape_of[job.id] = sid
        self._shapes[sid] = self._shapes.get(sid, 0) + 1
        if self.tail_exchange != "off":                 # its only reader is the exchange
            bisect.insort(self._twins.setdefault((job.tenant, sid), []), (job.arrival, job.seq, job.id))
        self._shapes_moved += 1
        self._join_queue(job, sid)
        bisect.insort(self._fifo, ((job.arrival, job.seq), job.id))
        bisect.insort(self._arrivals[job.tenant], ((job.arrival, job.seq), job.id))

    def _unqueue(self, job: Job) -> None:
        del self.jobs[job.id]
        self._holding_tail.discard(job.id)
        self._promises.pop(job.id, None)
        self.queued_gpus -= job.demand.held
        self._queued_gpus[job.tenant] -= job.demand.held
        if job.demand.whole is not None:
            self._fractions_queued -= 1
        sid = self._shape_of.pop(job.id)
        if self.tail_exchange != "off":
            twins = self._twins[(job.tenant, sid)]
            twins.pop(bisect.bisect_left(twins, (job.arrival, job.seq, job.id)))
        left = self._shapes[sid] - 1
        if left:
            self._shapes[sid] = left
        else:
            del self._shapes[sid]
        self._shapes_moved += 1
        self._leave_queue(job)
        self._fifo.pop(bisect.bisect_left(self._fifo, ((job.arrival, job.seq), job.id)))
        a = self._arrivals[job.tenant]
        a.pop(bisect.bisect_left(a, ((job.arrival, job.seq), job.id)))

    def cancel(self, job_id: str) -> bool:
        """Remove a queued job, or release a running one's devices; whether it was known."""
        if job_id in self.jobs:
            self._unqueue(self.jobs[job_id])
            self._deadline.pop(job_id, None)
            self.forecast.forget(job_id)
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
        if option.share < 1.0:                   # joint placement: its fraction of an open device
            self.packing.restore(job.id, devices[0], option.share, option.memory, start, option.duration)
        else:
            self.pool.take_exact(devices)
        self._grant(job, option, tuple(devices), start)

    def _grant(self, job: Job, option: Option, devices: tuple, now: float) -> Start:
        fraction = option.share < 1.0
        mem = option.memory if fraction else sum(self.pool.memory_of[d] for d in devices)
        self.running[job.id] = r = Running(job, option, devices, now, mem)
        self._by_model[option.model][job.id] = r
        if fraction:
            self._shared_end(option.model, devices[0])
        else:
            self._ends[option.model].add(job.id, now, option.duration, option.gpus)
        u = self.usage[job.tenant]
        u.gpus += option.held
        u.memory += mem
        u.models[option.model] = u.models.get(option.model, 0) + option.held
        self.forecast.started(job.id, now)
        if len(self._waits) == self._waits.maxlen:
            self._wait_sum -= self._waits[0]
        self._waits.append(now - job.arrival)
        self._wait_sum += now - job.arrival
        return Start(job.id, job.tenant, option, devices, now)

    def finish(self, job_id: str, now: float | None = None) -> Running:
        """A running job ended (done, failed, cancelled or preempted): free its devices.

        ``now``, given only for a run that ended on its own, is when: its real duration against
        its estimate teaches the estimate correction of its tenant (:mod:`.correction`)."""
        r = self.running.pop(job_id)
        if now is not None:
            self.correction.observe(r.job.tenant, r.option.duration, now - r.start)
        self._deadline.pop(job_id, None)
        del self._by_model[r.option.model][job_id]
        if r.option.share < 1.0:                 # joint placement: only its fraction is freed
            self.packing.give(job_id, r.devices[0])
            self._shared_end(r.option.model, r.devices[0])
        else:
            self._ends[r.option.model].remove(job_id)
            self.pool.give(r.devices)
        u = self.usage[r.job.tenant]
        u.gpus -= r.option.held
        u.memory -= r.memory
        u.models[r.option.model] -= r.option.held
        return r

    def _shared_end(self, model: str, device: str) -> None:
        """Joint placement: the availability profiles see an open device as one device held until
        its last holder's expected end (an entry of its own among the running jobs' ends)."""
        key, ends = "\0" + device, self._ends[model]
        if key in ends:
            ends.remove(key)
        last = self.packing.last_holder(device)
        if last is not None:
            ends.add(key, last[0], last[1], 1)

    def preempt(self, job_id: str, now: float) -> Job:
        """Stop a running job and queue it again (it restarts from the beginning)."""
        deadline = self._deadline.get(job_id)
        r = self.finish(job_id)
        if deadline is not None:
            self._deadline[job_id] = deadline     # it keeps its place in the order
        self.submit(r.job)
        return r.job

    def quota_allows(self, tenant: str, option: Option, *, ever: bool = False) -> bool:
        """Whether ``tenant`` may start ``option`` now (or ``ever``: holding nothing else)."""
        if self._unlimited(tenant):
            return True                          # no quota: the common case, asked for every job looked at
        q = self.tenants.quota(tenant)
        u = Usage() if ever else self.usage[tenant]
        held = option.held                       # a fractional job counts its fraction and its memory
        if q.gpus is not None and u.gpus + held > q.gpus + 1e-9:
            return False
        if q.gpu_memory is not None:
            need = option.memory if option.share < 1.0 else self._model_memory(option.model) * option.gpus
            if u.memory + need > q.gpu_memory * (1 + 1e-12):
                return False
        cap = q.models.get(option.model)
        return cap is None or u.models.get(option.model, 0) + held <= cap + 1e-9

    def _unlimited(self, tenant: str) -> bool:
        q = self.tenants.quota(tenant)
        return q.gpus is None and q.gpu_memory is None and not q.models

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

    def _start_now(self, job: Job, option: Option, now: float, device: str | None = None,
                   fresh: bool = False) -> Start:
        if option.share < 1.0:                   # joint placement: a fraction of an open or fresh device
            devices = (self.packing.take(job.id, option.model, option.share, option.memory, now,
                                         option.duration, device, fresh),)
        else:
            devices = self.pool.take(option.model, option.gpus)
        self._unqueue(job)
        return self._grant(job, option, devices, now)

    def _fastest_free(self, job: Job) -> Option | None:
        for o in job.demand.options:
            if self._room_for(o) and self.quota_allows(job.tenant, o):
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

    def _fair_pass(self, now: float, max_scan: int) -> tuple[list[Start], list[str]]:
        smart = self.policy == "streammap"
        starts: list[Start] = []
        preempted: list[str] = []
        plan = _Plan(self, now) if smart else None
        fair = self._account(now) if smart else None
        if smart:
            if self._holding_tail:
                self._give_way_due(now)
            if self._ratio:
                self._pass_now = now
                self._drop_empty_lanes()
            self.estimated_starts, self.start_intervals = {}, {}
            if self._promises:
                starts += self._keep_promises(now, plan)
        # A pass merges the lanes (tenants, or classes of them) by the rank of their next job;
        # the scan budget is per tenant, whichever of its lanes spends it.
        last = {lane: None for lane, q in self._queues.items() if q}
        at = dict.fromkeys(last, 0)              # where each lane's last job looked at was
        waiting = {self._tenant_of(lane) for lane in last}
        budget = {t: max(32, max_scan // max(1, len(waiting))) for t in waiting}
        heap = [self._rank(lane, fair, last, at) for lane in last]
        heapq.heapify(heap)
        while heap:
            if (not any(self.pool.free_count.values()) and not (smart and self.tenants.preemption)
                    and not (smart and plan.depth_left > 0)
                    and not (self._fractions_queued and self.packing.used)):   # joint placement: open devices
                break                            # nothing can start, and nothing more is planned
            if smart and plan.recheck and self._settled(plan, last, at, budget):
                break                            # every job left is of a shape that cannot start now
            lane = heapq.heappop(heap)[-1]
            tenant = self._tenant_of(lane)
            if budget[tenant] <= 0:
                continue                         # another lane of its tenant spent its budget
            q = self._queues[lane]
            i = self._next_at(lane, last, at)
            if i >= len(q):
                continue
            last[lane], at[lane] = q[i], i
            job = self.jobs[q[i][1]]
            budget[tenant] -= 1
            if smart and self._returns_unchanged(self._shape_of[job.id], plan):
                plan.recheck = True              # what _place_smart would have done, and all
                self._pass_over(lane, heap, budget, fair, last, at, plan)
                continue
            if smart:
                if self.tail_exchange != "off":
                    job = self._exchange_for(job, now, plan) or job
                s, p = self._place_smart(job, now, plan)
                preempted += p
            else:
                o = self._fastest_free(job)
                s = self._start_now(job, o, now) if o else None
                if s is None:
                    continue                     # this tenant waits for this round
            if s is not None:
                starts.append(s)
            if budget[tenant] > 0:
                heapq.heappush(heap, self._rank(lane, fair, last, at))
        if smart:     # what each tenant holds until the next pass
            self._last_pass = self._last_pass[:2] + ({t: u.gpus for t, u in self.usage.items()},)
        return starts, preempted

    def _exchange_for(self, job: Job, now: float, plan: "_Plan") -> Job | None:
        """The tail exchange (:data:`TAIL_EXCHANGE`): the job that takes ``job``'s place in this pass,
        or None for ``job`` itself.

        Only when ``job`` is a tail job (estimate at least the tail bound) about to start now: then
        the start goes to the oldest queued job of its tenant, priority and shape whose wait is still
        within its tail allowance ``max(0, q95 - duration) + TAIL_WAIT x w`` (``w`` the mean wait of
        recent starts now), if that is another job not yet looked at in this pass, and the two jobs
        **swap places** in the order (each takes the other's deadline): ``job`` waits where the other
        waited. Of jobs with equal lengths and equal due dates after arrival, serving the oldest that
        can still be on time and leaving those past it for later is Moore and Hodgson's rule for the
        fewest late jobs [7]_, and jobs of one shape are interchangeable to the plan (same options,
        same estimates): the exchange moves no reservation and no other job, and long jobs start
        exactly as often as before. (Without the swap of places, ``job`` kept its deadline, due
        already, was first again at the next pass and gave that start away too: long jobs started
        more often under overload, and the average paid; docs/measurements.md.) Only in the
        ``deadline`` order, without quotas, preemption or a fraction of a GPU, and never for a
        promised job (:meth:`_keep_promises` plans those)."""
        # Every job the pass places comes here and 95% are shorter than the tail bound: that test first.
        duration = job.demand.best.duration
        if self._tail_bound is None or duration < self._tail_bound:
            return None
        if (self.order != "deadline" or not self._no_quotas or self.tenants.preemption
                or job.demand.whole is not None or job.id in self._promises):
            return None
        if self.tail_exchange == "auto" and not self._precise(job.tenant):
            return None
        twins = self._twins[(job.tenant, self._shape_of[job.id])]
        allowance = max(0.0, self._tail_bound - duration) + self.tail_wait * self._typical_wait()
        i = bisect.bisect_left(twins, (now - allowance,))     # the oldest still within its allowance
        if i >= len(twins) or twins[i][2] == job.id:
            return None
        twin = self.jobs[twins[i][2]]
        if twin.priority != job.priority or twin.id in self._promises or self._key(twin) <= self._key(job):
            return None                          # (a key before job's: looked at already in this pass)
        allowed = list(job.demand.options)
        best, at = plan.placement(allowed, promised=plan.depth_left > 0 or self._may_promise(job, allowed))
        if at != now or best.model in plan.blocked:
            return None                          # job does not start now: it keeps its own place
        # The two swap places: the pass has looked at job's entry, and twin's (after it) is not looked at.
        job_shape, twin_shape = self._leave_queue(job), self._leave_queue(twin)
        self._deadline[job.id], self._deadline[twin.id] = self._deadline[twin.id], self._deadline[job.id]
        self._join_queue(job, job_shape)
        self._join_queue(twin, twin_shape)
        return twin

    def _precise(self, tenant: str) -> bool:
        """Whether ``tenant``'s estimates have proven precise enough for ``"auto"``'s tail exchange:
        the learned spread of its runs is known and at most :data:`EXCHANGE_SPREAD`."""
        spread = self.correction.spread(tenant)
        return spread is not None and spread <= EXCHANGE_SPREAD

    def _returns_unchanged(self, sid: int, plan: "_Plan") -> bool:
        """Whether :meth:`_place_smart` would return a job of shape ``sid`` at once, changing
        nothing but ``plan.recheck``: past the reservation depth, without quotas, its shape has no
        room now (:meth:`_no_room`: for a fractional shape, neither a free device nor an open one it
        fits on), or (without preemption) was refused since the plan last changed."""
        if plan.depth_left > 0 or not self._no_quotas:
            return False
        if not self.tenants.preemption and sid in plan.refused:
            return True
        return self._no_room(sid)

    def _no_room(self, sid: int) -> bool:
        """Whether no model of shape ``sid`` has room for it now: as many free devices as it asks
        for, or, for a fractional shape, a free device or an open one it fits on beside its holders
        (joint placement: a cluster with no whole device free still has room for a fraction).
        Remembered until the pool or the open devices next change."""
        known = self._room_known()
        out = known.get(sid)
        if out is None:
            out = known[sid] = not any(self._room_for(o) for o in self._shape_options[sid])
        return out

    def _room_for(self, o: Option) -> bool:
        """Whether option ``o`` could start now: a fraction on a free or open shared device, whole
        devices as many free as it asks for."""
        if o.share < 1.0:
            return self.packing.can_start(o.model, o.share, o.memory)
        return self.pool.free_count[o.model] >= o.gpus

    def _room_known(self) -> dict[int, bool]:
        """The shapes known to have no room (True) or room (False) in the pool and the open
        devices as they are now."""
        version, known = self._roomless
        now = (self.pool.version, self.packing.version)
        if version != now:
            known = {}
            self._roomless = (now, known)
        return known

    def _pass_over(self, lane, heap: list, budget: dict, fair: dict, last: dict, at: dict,
                   plan: "_Plan") -> None:
        """Look past the job at ``q[at[lane]]`` of the queue of ``lane`` (a tenant, or a class of
        one: :meth:`_lane`; one that returns unchanged), and past every next job of the same lane
        that the pass would take before any other lane's (its rank stays ahead of the heap's best)
        and that returns unchanged too; then put the lane back in the heap as the pass loop would have.

        Each such job costs the pass loop a heap pop and push and a call that decides nothing
        (past the depth, a pass is mostly such jobs: a rare shape keeps it from settling); here
        it costs a rank and a set lookup. The jobs looked at, their order, and each tenant's
        budget are exactly the loop's, so the pass decides the same. Nothing changes while jobs
        are passed over, so the queue does not either: the next job is the next position."""
        # Called only past the depth and without quotas (the first job returned unchanged), and
        # passing over changes nothing: _returns_unchanged is its last two tests, inlined.
        tenant = self._tenant_of(lane)
        q, i = self._queues[lane], at[lane]
        shapes, left = self._queue_shapes[lane], budget[tenant]
        refused = () if self.tenants.preemption else plan.refused
        roomless = self._room_known()
        end = len(q) - 1
        while left > 0:
            entry = q[i + 1] if i < end else None
            rank = self._rank_of(lane, fair, entry)
            if (heap and rank > heap[0]) or entry is None:
                break
            sid = shapes[i + 1]
            if sid not in refused:
                no_room = roomless.get(sid)
                if not (self._no_room(sid) if no_room is None else no_room):
                    break
            i += 1
            left -= 1
        if i != at[lane]:
            last[lane], at[lane], budget[tenant] = q[i], i, left
        if left > 0:
            heapq.heappush(heap, rank)

    def _next_at(self, lane, last: dict, at: dict) -> int:
        """Where the next job of ``lane``'s queue after the last one a pass looked at is: the
        position after it, unless the queue changed since (then the last one is looked for)."""
        prev = last[lane]
        if prev is None:
            return 0
        q, i = self._queues[lane], at[lane]
        return i + 1 if i < len(q) and q[i] is prev else bisect.bisect_right(q, prev)

    def _rank(self, lane, fair: dict | None, last: dict, at: dict) -> tuple:
        """A lane's place in a pass's heap: the rank of its next job (:meth:`_rank_of`)."""
        q = self._queues[lane]
        i = self._next_at(lane, last, at)
        return self._rank_of(lane, fair, q[i] if i < len(q) else None)

    def _rank_of(self, lane, fair: dict | None, entry: tuple | None) -> tuple:
        """The rank of ``lane`` (a tenant, or a class of one) whose next job is the queue entry
        ``entry`` (None: none left): the least weighted dominant share first (``drf``); for
        ``streammap``, tenants held below :data:`FLOOR` of their fair share first, then the
        earliest slowdown deadline of each lane's next job, whichever tenant it belongs to; in
        the ratio orders, priority, then the largest ratio now of the wait to the allowed wait."""
        if fair is None:
            return (self.share(lane), lane)
        if self._ratio:
            return self._ratio_rank(lane, fair, entry)
        deadline = entry[0][1] if entry is not None else math.inf       # (a lane is a tenant here)
        if self.usage[lane].gpus < self.floor * fair[lane]:
            return (0, self.attained(lane), deadline, lane)
        return (1, 0.0, deadline, lane)

    def _ratio_rank(self, lane: tuple, fair: dict, entry: tuple | None) -> tuple:
        """:meth:`_rank_of` in the ratio orders: the fair-share floor first, as in every order;
        then priority, then the largest ratio of the head's wait to its allowed wait at the pass's
        time (negated: the heap pops the least)."""
        tenant = lane[0]
        if entry is None:
            priority, ratio = math.inf, math.inf
        else:
            key = entry[0]                       # (-priority, arrival, seq, allowed wait)
            priority, ratio = key[0], (key[1] - self._pass_now) / key[3]
        if self.usage[tenant].gpus < self.floor * fair[tenant]:
            return (0, self.attained(tenant), priority, ratio, lane)
        return (1, 0.0, priority, ratio, lane)

    def attained(self, tenant: str) -> float:
        """GPU-seconds ``tenant`` held under contention over those its fair share would have given
        it, both decayed by :data:`MEMORY` (1 before it has been in contention)."""
        held, fair = self._attained[tenant]
        return held / fair if fair > 0 else 1.0

    def _account(self, now: float) -> dict[str, float]:
        """Add the time since the last pass to each tenant's attained and fair GPU-seconds (if the
        cluster was contended then) and return the fair shares now."""
        last = self._last_pass
        if last is not None and now > last[0] and last[1] is not None:
            dt = now - last[0]
            keep = math.exp(-dt / MEMORY)
            for t, (held, fair) in self._attained.items():
                self._attained[t] = [held * keep + last[2][t] * dt, fair * keep + last[1][t] * dt]
        fair = self.fair_gpus()
        contended = self.queued_gpus + sum(u.gpus for u in self.usage.values()) > self.pool.total_gpus
        self._last_pass = (now, fair if contended else None, None)
        return fair

    def fair_gpus(self) -> dict[str, float]:
        """Each tenant's weighted max-min fair share of the cluster's GPUs now (water-filling of
        the GPUs by weight, capped at what the tenant holds plus what its queued jobs ask for)."""
        demand = {t: self.usage[t].gpus + self._queued_gpus[t] for t in self.usage}
        return water_fill(demand, {t: self.tenants.weight(t) for t in demand}, self.pool.total_gpus)

    def _place_smart(self, job: Job, now: float, plan: "_Plan") -> tuple[Start | None, list[str]]:
        """Conservative backfilling with heterogeneity-aware placement: the job goes on the model
        where it is estimated to *finish* first, given the running jobs and the reservations of
        every job looked at before it in this pass; it starts if that is now, else preempts where
        allowed, else reserves that time (within the reservation depth)."""
        allowed = (job.demand.options if self._no_quotas
                   else [o for o in job.demand.options if self.quota_allows(job.tenant, o)])
        if not allowed:
            return None, []                      # its own tenant's running jobs hold it back
        if allowed[0].share < 1.0:
            return self._place_fraction(job, now, plan, allowed), []    # joint placement (packing)
        if job.id in self._promises:
            return None, []                      # planned first in this pass (_keep_promises)
        deep = plan.depth_left > 0
        if not deep and not any(self.pool.free_count[o.model] >= o.gpus for o in allowed):
            plan.recheck = True
            return None, []                      # cannot start now, and gets no reservation
        # The option set, as a number (with quotas: and which of its models the quotas allow).
        sid = self._shape_of[job.id]
        shape = sid if len(allowed) == len(job.demand.options) else (sid, tuple(o.model for o in allowed))
        if not deep and shape in plan.refused and not self.tenants.preemption:
            plan.recheck = True
            return None, []                      # a job of this very shape could not start; nothing changed since
        promised = deep or self._may_promise(job, allowed)
        best, at = plan.placement(allowed, promised=promised)
        if not deep and promised and at > now:
            if math.isfinite(at) and best is allowed[0]:
                self._promise(job, best, at, now, plan)
                return None, []
            best, at = plan.placement(allowed, promised=False)      # no promise to wait for
        if at == now and best.model not in plan.blocked:
            plan.take(best, now)
            return self._start_now(job, best, now), []
        if self.tenants.preemption:
            for o in allowed:
                victims = self._victims(job, o)
                if victims is not None:
                    for v in victims:
                        plan.give_back(self.running[v])
                        self.preempt(v, now)
                    plan.take(o, now)
                    return self._start_now(job, o, now), victims
        plan.refused.add(shape)
        if not self.backfill:
            plan.blocked.add(best.model)         # nothing later may start on this model in this pass
        elif deep and math.isfinite(at):
            plan.take(best, at)
            plan.depth_left -= 1
            self.estimated_starts[job.id] = (at, best.model)
            self.start_intervals[job.id] = self.forecast.planned(job.id, now, at)
        return None, []

    def _may_promise(self, job: Job, allowed: list[Option]) -> bool:
        """Whether a job past the reservation depth may be promised its fastest model: it is long
        (its estimate at least the :func:`long_quantile` of recent ones), fewer than ``promises``
        (:func:`promise_limit`) are outstanding, it has a slower model to compare with, and no
        quota or preemption is in play."""
        return (len(self._promises) < self.promises and len(allowed) > 1 and self._no_quotas
                and self.backfill and not self.tenants.preemption
                and allowed[0].duration >= self._long_bound())

    def _long_bound(self) -> float:
        """The :func:`long_quantile` of the last submitted jobs' estimates (``inf`` before 30 are
        known), recomputed every 50 submissions."""
        key = self._seq // 50
        # An "unknown yet" (inf) is asked again until 30 estimates are known, not kept to the 50th.
        if self._long[0] != key or (self._long[1] == math.inf and len(self._recent) >= 30):
            recent = self._recent
            bound = float(np.quantile(np.fromiter(recent, float), self.long_q)) if len(recent) >= 30 else math.inf
            self._long = (key, bound)
        return self._long[1]

    def _promise(self, job: Job, o: Option, at: float, now: float, plan: "_Plan") -> None:
        """Reserve ``o`` at ``at`` for a job past the depth, and keep it for the next passes."""
        plan.take(o, at)
        self._promises[job.id] = (o, now)
        self.estimated_starts[job.id] = (at, o.model)
        self.start_intervals[job.id] = self.forecast.planned(job.id, now, at)

    def _keep_promises(self, now: float, plan: "_Plan") -> list[Start]:
        """Plan the promised jobs before any other of the pass, in the order promised: each keeps
        a reservation on its promised model at the earliest fit, and starts when that is now.
        This is the promise's priority: the first devices of its model that free for long enough
        go to it, even where an earlier pass had reserved them for a job of the depth (which then
        takes the next ones, or a slower model within its slack); planned after the depth, as
        when it was promised, the long job saw its devices taken pass after pass by jobs of
        earlier deadlines arriving meanwhile, and its wait ran out its slack (README). The wait
        already spent since the promise counts against the slack: when a slower model has room
        now and the job would end there within ``slack`` times its time from the promise to its
        end on the promised model, it takes that room instead."""
        starts = []
        for jid, (o, since) in list(self._promises.items()):
            job = self.jobs[jid]
            at = plan.profile(o.model).earliest_fit(o.gpus, o.duration)
            if at == now:
                plan.take(o, now)
                starts.append(self._start_now(job, o, now))
                continue
            room = self._slower_room(job, o, at + o.duration - since, plan)
            if room is not None:
                plan.take(room, now)
                starts.append(self._start_now(job, room, now))
                continue
            if not math.isfinite(at):
                del self._promises[jid]          # the model can no longer hold it: planned as any job
                continue
            plan.take(o, at)
            self.estimated_starts[jid] = (at, o.model)
            self.start_intervals[jid] = self.forecast.planned(jid, now, at)
        return starts

    def _slower_room(self, job: Job, o: Option, to_end: float, plan: "_Plan") -> Option | None:
        """A slower option than the promised ``o`` with room now around the plan, on which ``job``
        would end within ``slack`` times ``to_end`` (its time from the promise to its end on ``o``)."""
        for s in job.demand.options:
            if (s is not o and s.duration <= self.slack * to_end
                    and plan.profile(s.model).fits_now(s.gpus, s.duration)):
                return s
        return None

    def _settled(self, plan: "_Plan", last: dict, at: dict, budget: dict) -> bool:
        """Whether no queued job can start in the rest of this pass (streammap policy, past the
        reservation depth, no quotas, no preemption): every job the pass can still look at (each
        tenant's next ones, as many as its budget) is of a shape refused since the pass last
        changed, or with no model with enough free devices. Such a job returns at once from
        :meth:`_place_smart` without changing anything, so stopping here decides exactly the same.
        (Asking this of every shape in the queue instead stopped a pass only once each rare
        shape had been met, which past the depth took a hundred jobs looked at for nothing.)"""
        plan.recheck = False
        if plan.depth_left > 0 or self.tenants.preemption or not self._no_quotas or self._fractions_queued:
            return False                         # (fractional jobs: joint placement may still fit them)
        # Settled-ness changes only when a shape is refused or the plan changes (a start).
        state = (len(plan.refused), plan.changes)
        if state == plan.checked:
            return False
        plan.checked = state
        refused = plan.refused
        live = {sid for sid in self._shapes_with_room() if sid not in refused}
        if not live:
            return True
        if plan.windows is None or plan.windows[0] != plan.changes:
            plan.windows = (plan.changes, self._windows(last, at, budget))
        return live.isdisjoint(plan.windows[1])

    def _shapes_with_room(self) -> list[int]:
        """The queued shapes with a model with enough free devices (kept until a job is queued or
        unqueued or the pool changes: past the depth, a pass asks after every refusal)."""
        state = (self.pool.version, self.packing.version, self._shapes_moved)
        if self._roomy is None or self._roomy[0] != state:
            self._roomy = (state, [sid for sid in self._shapes if not self._no_room(sid)])
        return self._roomy[1]

    def _windows(self, last: dict, at: dict, budget: dict) -> set:
        """The shapes of the jobs the lanes can still be looked at in this pass: for each, from
        the job after its last one looked at, as many as its tenant's budget. While the plan does
        not change the queues do not either, and each job looked at moves a window's start by one
        and spends one of its budget: its end stays or comes nearer (a tenant's other lanes spend
        the same budget), and the shapes remembered are a superset of the window's."""
        out: set = set()
        for lane in last:
            i = self._next_at(lane, last, at)
            out.update(self._queue_shapes[lane][i:i + max(0, budget[self._tenant_of(lane)])])
        return out

    def _place_fraction(self, job: Job, now: float, plan: "_Plan", allowed: list[Option]) -> Start | None:
        """Joint placement (:mod:`.packing`) of a fractional job, around the pass's plan: it starts
        now on the option that ends first among those with room, on an open device when one fits
        (best fit among those it ends within; else the best fit whose hold the plan can extend,
        having a device free for the extension), else on a free whole device that the plan leaves
        free for its duration; as for whole jobs (:meth:`_Plan.placement`), only if it ends there
        within ``slack`` times its time to finish where it would end first, waiting for a whole
        device included (a long job waits for a fast model rather than take a slow one now), and
        only within the reservation depth (a job that will hold no reservation is promised no
        faster device, and takes the room it has). Else
        it reserves a whole device, as a one-device job (within the reservation depth). It never
        preempts, nor is it preempted (a fraction frees no whole device)."""
        best = None
        for o in allowed:
            if o.model in plan.blocked:
                continue
            end, profile = now + o.duration, plan.profile(o.model)
            dev, until = self._open_device_for(o, end, profile, now)
            if dev is not None:
                cand = (end, 0, o, dev, until)
            elif profile.fits_now(1, o.duration):
                cand = (end, 1, o, None, now)
            else:
                continue
            if best is None or cand[:2] < best[:2]:
                best = cand
        if best is not None and best[2] is not allowed[0] and plan.depth_left > 0:
            # Only a job that will hold a reservation may wait for a faster model (_Plan.placement).
            o_wait, at = plan.placement(allowed)             # where it would end first, waiting included
            if best[0] > at + o_wait.duration and best[2].duration > self.slack * (at + o_wait.duration - now):
                best = None                                  # not within the slack: it waits for that
        if best is not None:
            end, _, o, dev, until = best
            if dev is None:
                plan.take(o, now)                # a fresh device, held for its whole run
            elif end > until:
                plan.profile(o.model).add(until, end, -1)     # the open device is held longer
                plan.refused.clear()
                plan.changes += 1
            return self._start_now(job, o, now, device=dev, fresh=dev is None)
        if plan.depth_left > 0:
            o, at = plan.placement(allowed)
            if at > now and math.isfinite(at):
                plan.take(o, at)
                plan.depth_left -= 1
                self.estimated_starts[job.id] = (at, o.model)
                self.start_intervals[job.id] = self.forecast.planned(job.id, now, at)
        return None

    def _open_device_for(self, o: Option, end: float, profile, now: float) -> tuple[str | None, float]:
        """Joint placement: an open device for ``o`` ending at ``end``, and its hold's expected end:
        the best fit among those that hold past ``end`` already, else the best fit whose hold the
        plan can extend to ``end``; ``(None, now)`` when neither."""
        extendable = None
        for dev in self.packing.fitting(o.model, o.share, o.memory):
            until = expected_end(*self.packing.last_holder(dev), now)
            if end <= until:
                return dev, until
            if extendable is None and free_over(profile, until, end) >= 1:
                extendable = (dev, until)
        return extendable or (None, now)

    def _victims(self, job: Job, o: Option) -> list[str] | None:
        """Running jobs to preempt so that ``job`` starts on ``o.model`` now, or None."""
        need = o.gpus - self.pool.free_count[o.model]
        my_share = self.share(job.tenant)
        cands = [r for r in self.running.values() if r.option.model == o.model and r.job.priority < job.priority
                 and r.option.share >= 1.0     # joint placement: a fraction frees no whole device
                 and (r.job.tenant == job.tenant or self.share(r.job.tenant) > my_share)]
        cands.sort(key=lambda r: (r.job.priority, -r.start, r.job.id))
        chosen, got = [], 0
        for r in cands:
            if got >= need:
                break
            chosen.append(r.job.id)
            got += r.option.gpus
        return chosen if got >= need else None


class _Plan:
    """One pass's plan (streammap policy): an availability profile per model, built on first use
    from the running jobs' estimated ends, and what the pass has taken from it so far."""

    def __init__(self, sched: Scheduler, now: float):
        self.sched = sched
        self.now = now
        self.profiles: dict[str, Profile] = {}
        self.depth_left = sched.depth
        self.blocked: set[str] = set()          # models closed to later jobs (backfill off)
        self.refused: set[tuple] = set()        # option sets that could not start now, since the last change
        self.recheck = False                    # a refusal since the last check whether the pass is settled
        self.changes = 0                        # reservations, starts and preemptions so far
        self.checked: tuple | None = None       # (refusals, changes) at the last check
        self.windows: tuple | None = None       # (changes, shapes the tenants can still be looked at)

    def profile(self, model: str) -> Profile:
        p = self.profiles.get(model)
        if p is None:
            p = self.profiles[model] = self.sched._ends[model].profile(self.now, self.sched.pool.free_count[model])
        return p

    def placement(self, options: list[Option], promised: bool = True) -> tuple[Option, float]:
        """Where and when a job of ``options`` (fastest first) should run.

        A job that will hold a reservation (``promised``): the option estimated to end first
        (ties: the faster model), unless it must wait and a slower model has room now for the job
        to end within ``slack`` times its time to finish on the first (waiting included).

        A job past the reservation depth is promised nothing: the faster model's "free in a few
        seconds" goes to whichever job the next pass reserves it for, so waiting for it can last
        for ever while the slower model idles (issue 18: at 10,000 GPUs StreamMAP's whole wait was
        beside free devices). Such a job starts on the fastest model with room now around the
        pass's reservations (room no reserved job wants before it would end), else it waits
        (``inf``). A long job past the depth is placed as a promised one, and its wait, if any, made
        a promise (:meth:`Scheduler._may_promise`)."""
        first = options[0]
        p0 = self.profiles.get(first.model) or self.profile(first.model)
        if p0.fits_now(first.gpus, first.duration):
            return first, self.now              # the fastest model, now: nothing ends sooner
        if not promised:
            for o in options[1:]:
                p = self.profiles.get(o.model) or self.profile(o.model)
                if o.model not in self.blocked and p.fits_now(o.gpus, o.duration):
                    return o, self.now
            return first, math.inf
        profiles = [p0] + [self.profiles.get(o.model) or self.profile(o.model) for o in options[1:]]
        best, best_at, best_end = first, math.inf, math.inf
        for o, p in zip(options, profiles):
            at = p.earliest_fit(o.gpus, o.duration)
            if at + o.duration < best_end:
                best, best_at, best_end = o, at, at + o.duration
        if best_at > self.now:
            for o, p in zip(options, profiles):
                if (o.model not in self.blocked and o.duration <= self.sched.slack * (best_end - self.now)
                        and p.fits_now(o.gpus, o.duration)):
                    return o, self.now
        return best, best_at

    def take(self, o: Option, start: float) -> None:
        self.profile(o.model).reserve(start, o.gpus, o.duration)
        self.refused.clear()
        self.changes += 1

    def give_back(self, r: Running) -> None:
        """A running job is preempted: its devices are free from now to its estimated end."""
        self.profile(r.option.model).add(self.now, max(r.est_finish, math.nextafter(self.now, math.inf)),
                                         r.option.gpus)
        self.refused.clear()
        self.changes += 1
