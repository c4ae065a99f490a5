"""The default mapper: the best of several placements, polished by local search.

Policy
------
``auto`` builds a set of *candidate* schedules, each a complete, memory-valid plan, and returns
the one with the smallest makespan (ties: the earlier candidate in the list below). Memory-aware
HEFT is always the first candidate, and plain HEFT's plan, whenever it is within capacity, is
compared last, so the result is never worse than either HEFT plan that is memory-valid; every
candidate is built by the same insertion list scheduler
(:func:`streammap.mappers.heft.list_schedule`), so memory is respected by construction, and
whatever the local search changes is re-checked against every capacity.

Candidates, in order:

1. **HEFT** (:func:`~streammap.mappers.heft.heft`). Where memory can bind, **plain HEFT**
   (``memory_aware=False``) is also built, and its plan, when within capacity, replaces the
   winner at the end if shorter (the guard; it takes no part in the search). Memory-aware HEFT
   counts an output as resident until its last consumer is placed, so it may refuse a device
   that plain HEFT uses without ever breaking a capacity: it can end longer than plain HEFT's
   valid plan, or find none.
2. **PEFT** (:func:`~streammap.mappers.peft.peft`): optimistic-cost-table ranking and device choice
   (a lookahead to where the successors can run fast).
2b. **HEFT in other priority orders** (small graphs): upward rank with each task's fastest time,
   and with its harmonic-mean time over the devices; in each of these two orders also the
   lookahead of candidate 4c.
3. **Device subsets**: HEFT, and PEFT where affordable, on the fastest device alone, on the fastest
   k devices for k = 2, 4, 8, ... below D, and on each of the two fastest nodes. Decisive when
   communication dominates (CCR 10): using fewer, faster, better-connected devices avoids
   transfers that the full-cluster list schedulers accept greedily one task at a time.
4. **Partitions** (:mod:`streammap.mappers.partition`, METIS through pymetis): the graph cut into
   one part per node, and into one part per device of the fastest 2, 4, ... devices, with edges
   weighted by bytes and parts weighted by speed; HEFT then places each task on the devices of
   its part. Keeps heavy edges inside a node or a device.
4b. **Chains** (:func:`streammap.mappers.clustering.chain_schedule`, graphs up to
   :data:`MEDIUM_WORK`): linear clustering (Kim & Browne 1988) cuts the graph into paths, each
   mapped whole onto one device HEFT-style, so heavy edges along a path cost nothing; on the whole
   cluster, and (small graphs) restricted to each subset of candidate 3.
4c. **Lookahead HEFT** (:func:`streammap.mappers.lookahead.lookahead_heft`, Bittencourt et al.
   2010): HEFT's order, each task on the device where its children could finish earliest, which
   keeps a fork-join branch beside its join when transfers are dear (CCR 10); on the whole cluster
   and (small graphs) on each subset. One pass costs ``O(E·D²)``; neither 4b nor 4c runs above
   :data:`LARGE_WORK`, so the mapping time at scale is unchanged.
4d. **Cheap sources first** (:func:`coparent_rank`, graphs up to :data:`SMALL_WORK`): HEFT and
   the lookahead with every source task raised to the highest rank among its children's other
   parents, so a short task that gates many readers beside a long one (1000genome's ``sifting``)
   starts at time 0 and its transfers overlap the long task, instead of being placed last.
4e. **Heavy-edge grouping** (:func:`streammap.mappers.grouping.grouped_schedule`, graphs up to
   :data:`MEDIUM_WORK`): edges dearer than :data:`GROUP_THETAS` times the work they would
   serialise join their ends into one group (a fork-join group of a workflow: 1000genome's
   ``individuals`` and their merge, ``sifting`` and its sixteen readers); each group is kept on
   one node, HEFT placing its tasks among that node's devices (where the cluster has several
   nodes), or mapped whole onto one device. One list-scheduling pass each (about a HEFT pass);
   at tier 1 (work above :data:`SMALL_WORK`) only the first threshold.
4f. **Dominant Sequence Clustering** (:func:`streammap.mappers.dsc.dsc_schedule`, graphs up to
   :data:`SMALL_WORK`): DSC (Yang and Gerasoulis 1994) zeroes the edges of the dominant sequence
   as if processors were unbounded; its clusters are then mapped whole onto devices HEFT-style,
   either as they are, each kept on its device's *node* (HEFT placing its tasks among the node's
   devices), or merged along their heaviest traffic down to one cluster per device
   (:data:`DSC_VARIANTS`); on the whole cluster and on each subset of candidate 3 with two or
   more devices, within :data:`DSC_BUDGET` task-passes (all of them up to 2,000 tasks, one
   at 20,000). About one list-scheduling pass each.
5. **Local search** (:func:`streammap.mappers.local_search.improve`) from the best few distinct
   candidates: tasks on the critical path are moved to other devices, or swapped with a task of
   another device, while the makespan (then the sum of finish times) falls; at a local optimum
   the best plan is kicked (a few critical tasks to random devices, seeded RNG) and the descent
   resumes, until the re-timing budget is spent (iterated local search).
5b. **Heavy-neighbourhood search** (``improve(..., groups=True)``), where some edge costs more to
   cross than its cheaper end costs to run: one more search, from the best plan after 5, with its
   own share of the budget, whose moves and kicks take a critical task *with its heavy neighbours
   on its device* (:func:`streammap.mappers.local_search.heavy_neighbours`). At CCR 10 a Montage
   projection can leave its device only together with its difference fits and its background
   correction; a lone move always pays the crossing, so the search of 5 stops where this one
   still finds shorter plans (``"<name>+group"``).
6. **Exact model** (:func:`streammap.mappers.exact.solve_exact`), by default, on graphs of at
   most :data:`EXACT_MAX_TASKS` tasks whose model has at most :data:`EXACT_MAX_TERMS` terms, and
   only when the best plan so far is more than :data:`EXACT_GAP` (0.5%) above the analytic bound
   (:func:`cheap_bound`: critical path, area, fork-join, fan-out): a plan the bound already proves
   near-optimal costs no solver. CP-SAT, warm-started from the best plan so far, runs its
   deterministic interleaved search for :data:`EXACT_WORK` deterministic seconds (a fraction of a
   second of wall on such graphs). Its plan replaces the best one only if shorter (winner
   ``"exact"``); either way the schedule carries the solver's proven lower bound
   (``Schedule.bound``). Never on large graphs: the mapping time at scale is that of the
   heuristics. ``exact=False`` leaves it out (the gap benchmark's "before").
7. **Large-neighbourhood search** (:func:`streammap.mappers.lns.improve_plan`), by default, on
   graphs too large for the exact model and of at most :data:`~streammap.mappers.lns.LNS_MAX_TASKS`
   tasks, when the best plan is more than :data:`EXACT_GAP` above :func:`cheap_bound`: windows of
   the best plan (critical-path stretches, device pairs, time slices) are re-placed by CP-SAT, the
   rest of the plan kept in its order, and every window solution that shortens the whole plan,
   re-timed and memory-valid, is kept (winner ``"<name>+lns"``). Its budget, in windows of a fixed
   deterministic time each, shrinks as the graph grows and as the plan gets shorter (at most 1% of the
   makespan at the measured cost of a window, :func:`~streammap.mappers.lns.window_seconds`: a plan
   of milliseconds gets none). ``exact=False`` leaves it out too.
8. **Adaptive rounds** (:func:`streammap.mappers.adaptive.extend_search`): steps 5-7 give every
   graph of a size the same effort; where the final plan is still more than
   :data:`~streammap.mappers.adaptive.ADAPT_GAP` (5%) above its lower bound (the largest of
   :func:`cheap_bound` and the exact model's proven bound), the search *continues from it* in
   rounds: each a local search eight times as long as 5's, with the heavy-neighbour moves of 5b,
   its own seed, and at most :data:`~streammap.mappers.adaptive.ROUND_ELEMENTS` tasks and edges
   re-timed in all (:func:`~streammap.mappers.adaptive.round_runs`: a re-timing sweeps
   ``T + E``, so on graphs of 700-2,000 tasks with several edges a task a round re-times fewer
   times than eight first searches). The rounds stop at the first one that shortens nothing, when the gap closes, at
   the cap (:data:`~streammap.mappers.adaptive.ADAPT_ROUNDS`, two rounds of bounded re-timings),
   and none runs where one would cost more than 1% of the makespan: a plan the bound proves
   near-optimal costs nothing more, and a plan is never longer than steps 5-7 made it (winner
   ``"<name>+adapt"``). Two options were measured on the tune seeds, left off and removed
   (docs/measurements.md, "Adaptive search"): restarts from the next distinct candidates (never
   won) and CP-SAT windows when a round's search finds nothing, including windows that target
   communication (0.9994x for 19% more CPU). ``exact=False`` leaves the rounds out, as it does
   steps 6 and 7. A uniformly longer
   search did not pay (README, "Measuring mappers"): it changed which plan the later steps started
   from and lost as often as it gained.
9. **Join-first restart** (:func:`streammap.mappers.join_first.join_first_search`, small graphs,
   where step 8 may run): where the two highest-ranked joins head independent, comparable groups
   (disjoint ancestries of similar size: 1000genome's chromosomes) and the plan is still more than 5% above its lower
   bound, HEFT and the lookahead with one join's inputs served before the next join's, searched
   as the best candidate is (steps 5, 5b, then 6 or 7), replace the plan only if shorter (winner
   ``"heft-join<k>+search"``). A restart, not a candidate: as candidates these plans displaced
   others from step 5's starts, and one SoyKB plan ended 9.6% longer.

Effort is bounded by operation counts that scale with the graph (no wall-clock budget, which
would make plans depend on the machine's load): the number of candidates shrinks as ``T × D``
grows, the local search gets a number of re-timings inversely proportional to T (step 8's rounds
also at most :data:`~streammap.mappers.adaptive.ROUND_ELEMENTS` re-timed tasks and edges a round,
since a re-timing costs ``O(T + E)``), and the solver a budget in its deterministic time. ``T × D`` counts at least :data:`MIN_PASS_WIDTH` devices
(a task's placement has a fixed cost however few devices there are). Above :data:`LARGE_WORK` the candidate list
itself is cut to a budget of full-cluster list-scheduling passes, :data:`LARGE_PASS_BUDGET` task-device
placements in all (:func:`large_graph_passes`): HEFT, then PEFT while the budget lasts, and nothing
else (no subsets, partitions or local search), so a graph of 10,000 tasks on 64 devices maps in two
passes and one of 100,000 tasks on 512 devices in HEFT's one, with HEFT's quality or better. Every
graph of the mapping benchmark's shared and random sets lies below :data:`LARGE_WORK`. The
schedule's ``mapper`` names the winner, e.g. ``"auto(peft+search)"``.

Deterministic: every step breaks ties by task and device position, METIS and CP-SAT run with a
fixed seed (CP-SAT with its deterministic interleaved search), and no step reads the clock.
"""

from __future__ import annotations

import math

import numpy as np

from streammap.cost.model import CostModel, combined_bound, concat_ranges, segment_max
from streammap.errors import MappingError
from streammap.mappers.adaptive import affordable, extend_search
from streammap.mappers.clustering import chain_schedule
from streammap.mappers.dsc import dsc_schedule
from streammap.mappers.exact import available as exact_available
from streammap.mappers.exact import model_size, solve_exact
from streammap.mappers.grouping import grouped_schedule
from streammap.mappers.heft import check_placeable, heft, list_schedule, priority_order, upward_rank
from streammap.mappers.join_first import join_first_search
from streammap.mappers.lns import improve_plan, window_budget
from streammap.mappers.local_search import heavy_neighbours, improve
from streammap.mappers.lookahead import lookahead_heft
from streammap.mappers.partition import GroupTimes, device_speed, partition_tasks
from streammap.mappers.partition import available as metis_available
from streammap.mappers.peft import peft
from streammap.mappers.schedule import MEM_RTOL, Schedule, fits, peak_memory

__all__ = ["auto", "lift", "exact_fits", "device_subsets", "work_tier", "coparent_rank"]

#: Work (tasks × devices) up to which every candidate is tried.
SMALL_WORK = 200_000
#: Work up to which PEFT on subsets and the fastest node are tried (above it: HEFT on the fastest
#: device and node, PEFT, the node partition).
MEDIUM_WORK = 4_000_000
#: Work above which the candidates are full-cluster passes within :data:`LARGE_PASS_BUDGET` alone.
LARGE_WORK = 500_000
#: Task-device placements (``T × D`` per full-cluster pass) that ``auto`` spends above :data:`LARGE_WORK`.
LARGE_PASS_BUDGET = 2_000_000
#: The full-cluster passes of a large graph, in the order they are run (HEFT always).
LARGE_PASSES = ("heft", "peft")
#: The fewest devices a pass is counted over in the work ``T x D``: each task's placement has a
#: fixed Python cost beside its vectorised cost per device, so 100,000 tasks on one device cost
#: a candidate pass about what they cost on eight (a 100,000-call program on ``--cluster local``
#: otherwise got every small-graph candidate: 33 s of mapping for one device).
MIN_PASS_WIDTH = 8
#: Thresholds of the heavy-edge grouping candidates (:func:`~streammap.mappers.grouping.heavy_edge_groups`):
#: an edge joins its ends' groups when it costs at least this many times the smaller group's work.
GROUP_THETAS = (1.0, 4.0)
#: The DSC candidates (:func:`~streammap.mappers.dsc.dsc_schedule`): name suffix and options.
#: ``"-node"``: DSC's own clusters, each kept on the node of the device it is mapped to (HEFT
#: places its tasks among that node's devices); ``""``: merged to one cluster per device, planned
#: with the fastest task times, each on one device; ``"-merged-node"``: merged to one cluster per
#: device with transfers at their cost inside a node, each kept on its device's node.
DSC_VARIANTS = (("-node", dict(scope="node")),
                ("", dict(target=1.0, weight="min")),
                ("-merged-node", dict(target=1.0, comm="device", scope="node")))
#: Tasks × DSC passes ``auto`` spends (each costs about a HEFT pass, ``O((T + E) log T)`` with
#: a Python step per task): every variant on the whole cluster and on five subsets up to 2,000
#: tasks, a single pass at 20,000.
DSC_BUDGET = 30_000
#: Tasks × re-timings the local search may spend (each re-timing costs O(T + E)), on graphs up
#: to :data:`SMALL_WORK`; larger graphs get :data:`SEARCH_BUDGET_LARGE`.
SEARCH_BUDGET = 700_000
SEARCH_BUDGET_LARGE = 100_000
#: Local searches, from the best distinct candidates, sharing the re-timing budget.
SEARCH_STARTS = 2
#: Most re-timings for one local search.
SEARCH_MAX_RUNS = 1500
#: The exact model runs on graphs of at most this many tasks ...
EXACT_MAX_TASKS = 60
#: ... whose model has at most this many terms (:func:`streammap.mappers.exact.model_size`).
EXACT_MAX_TERMS = 60_000
#: CP-SAT's work budget there, in deterministic seconds (well under a second of wall on a small
#: graph; the interleaved search's large-neighbourhood workers find most optima within it).
EXACT_WORK = 0.1
#: The exact model runs only when the best heuristic plan is more than this fraction above the
#: analytic bound (:func:`cheap_bound`): below it the plan is already proven near-optimal.
EXACT_GAP = 0.005


def lift(cost: CostModel, devices, schedule: Schedule, mapper: str | None = None) -> Schedule:
    """A schedule on ``cost.restrict(devices)`` (:meth:`~streammap.cost.model.CostModel.restrict`)
    expressed on all of ``cost``'s devices."""
    devs = np.asarray(devices, dtype=np.int64)
    return Schedule(mapper or schedule.mapper, devs[schedule.device], schedule.start, schedule.finish,
                    schedule.makespan, n_devices=cost.n_devices, seq=schedule.seq)


def upward_rank_with(cost: CostModel, w: np.ndarray) -> np.ndarray:
    """Upward rank as :func:`~streammap.mappers.heft.upward_rank` with task times ``w`` instead of
    the mean time over the devices (transfers still at their mean cost)."""
    cbar = cost.mean_comm(cost.succ_bytes)
    rank = np.zeros(cost.n_tasks)
    for lev in reversed(cost.levels):
        e = concat_ranges(cost.succ_ptr[lev], cost.succ_ptr[lev + 1])
        rank[lev] = w[lev] + segment_max(cbar[e] + rank[cost.succ_idx[e]], cost.succ_ptr, lev)
    return rank


def coparent_rank(cost: CostModel, rank: np.ndarray) -> np.ndarray:
    """``rank`` with every source task raised to the highest rank among its children's parents.

    A cheap source that feeds the same tasks as a long one (BWA's ``fastq_reduce`` beside
    ``bwa_index``, 1000genome's ``sifting`` beside ``individuals_merge``, SRA search's
    ``bowtie2-build`` beside each ``fasterq-dump``) has a low upward rank, so HEFT places it after
    the long co-parents, when every device is busy: it starts late and its output then crosses
    the network while its readers wait. Raised to just above its co-parents' rank it is placed
    first, at time 0, and its transfers overlap the long tasks. Only sources are raised (they
    have no predecessors), so the order stays topological.

    Examples
    --------
    See ``tests/mappers/test_grouping.py``: a 1-second source whose reader also reads a
    10-second task is placed first, and its transfer then hides behind the long task.
    """
    r = np.array(rank, dtype=np.float64, copy=True)
    T = cost.n_tasks
    if T == 0 or cost.n_edges == 0:
        return r
    tasks = np.arange(T)
    # Highest parent rank of every task with parents.
    top_parent = segment_max(rank[cost.pred_idx], cost.pred_ptr, tasks, empty=-math.inf)
    sources = np.flatnonzero((np.diff(cost.pred_ptr) == 0) & (np.diff(cost.succ_ptr) > 0))
    if sources.size == 0:
        return r
    e = concat_ranges(cost.succ_ptr[sources], cost.succ_ptr[sources + 1])
    co = segment_max(top_parent[cost.succ_idx[e]], cost.succ_ptr, sources, empty=-math.inf)
    raise_ = co > r[sources]
    # Just above the co-parent, so that the source is placed before it (priority_order rounds
    # ranks at 1e-10 of the largest, hence a margin well above that).
    r[sources[raise_]] = co[raise_] + np.abs(co[raise_]) * 1e-8 + 1e-12
    return r


def pass_work(n_tasks: int, n_devices: int) -> int:
    """The work of one full-cluster pass, ``T x max(D, MIN_PASS_WIDTH)`` (:data:`MIN_PASS_WIDTH`)."""
    return n_tasks * max(n_devices, MIN_PASS_WIDTH)


def large_graph_passes(n_tasks: int, n_devices: int) -> tuple[str, ...] | None:
    """The candidates ``auto`` builds for a graph of ``n_tasks`` on ``n_devices``, when its work
    ``T × D`` exceeds :data:`LARGE_WORK`: the first of :data:`LARGE_PASSES` whose passes fit in
    :data:`LARGE_PASS_BUDGET` (HEFT at least); ``None`` at or below :data:`LARGE_WORK` (every
    candidate of the module docstring).

    Examples
    --------
    >>> large_graph_passes(5_000, 16) is None
    True
    >>> large_graph_passes(10_000, 64), large_graph_passes(100_000, 512)
    (('heft', 'peft'), ('heft',))
    >>> large_graph_passes(100_000, 1)
    ('heft', 'peft')
    """
    work = pass_work(n_tasks, n_devices)
    if work <= LARGE_WORK:
        return None
    return LARGE_PASSES[:max(1, LARGE_PASS_BUDGET // work)]


def work_tier(cost: CostModel) -> int:
    """0, 1 or 2: how many candidates ``auto`` can afford for the graph's work ``T x D`` (all of
    them up to :data:`SMALL_WORK`, fewer up to :data:`MEDIUM_WORK`, fewest above)."""
    work = pass_work(cost.n_tasks, cost.n_devices)
    return 0 if work <= SMALL_WORK else (1 if work <= MEDIUM_WORK else 2)


def device_subsets(cost: CostModel, tier: int = 0) -> list[tuple[str, np.ndarray]]:
    """The restrictions of the cluster that ``auto`` maps on (candidates 3 of the module docstring).

    The fastest k devices (``"top<k>"``, k = 1, 2, 4, ... below D; ties: device position) and the
    fastest two nodes (``"node0"``, ``"node1"``, by summed device speed) when they are not one of
    those already. ``tier`` (0 small, 1 medium, 2 large graphs) thins the list: the single fastest
    device and the subsets of at least D/8 devices at tier 1, and only the fastest device and node
    at tier 2. Used with and without ``share`` clauses
    (:func:`streammap.placement.sharing.auto_shared`).

    Returns
    -------
    list of (str, ndarray of int)
        Name and sorted device positions of each subset, in the order they are tried.
    """
    D = cost.n_devices
    speed = device_speed(cost)
    by_speed = np.lexsort((np.arange(D), -speed))
    sizes = []
    k = 1
    while k < D:
        sizes.append(k)
        k *= 2
    if tier >= 1:                              # the single fastest device and a few large subsets
        sizes = sorted({1} | {k for k in sizes if k >= D // 8})
    subsets = [(f"top{k}", np.sort(by_speed[:k])) for k in sizes]
    nodes = np.unique(cost.node_of)
    if nodes.size > 1:
        node_speed = np.array([speed[cost.node_of == n].sum() for n in nodes])
        for rank_i, n in enumerate(nodes[np.lexsort((nodes, -node_speed))][:2 if tier == 0 else 1].tolist()):
            devs = np.flatnonzero(cost.node_of == n)
            if not any(np.array_equal(devs, d) for _, d in subsets):
                subsets.append((f"node{rank_i}", devs))
    if tier == 2:
        subsets = [x for x in subsets if x[1].size == 1 or x[0].startswith("node")]
    return subsets


def _placement_order(s: Schedule) -> np.ndarray:
    return np.argsort(s.seq, kind="stable")


def cheap_bound(cost: CostModel) -> float:
    """The analytic lower bound ``auto`` compares its best heuristic plan with before it runs the
    exact model: the largest of the critical path, the area bound, the fork-join bound and the
    fan-out bound (:func:`streammap.cost.model.combined_bound`). Every plan is at least this long."""
    return combined_bound(cost)


def auto(cost: CostModel, *, exact: bool = True) -> Schedule:
    """Map a task graph with the best of HEFT, PEFT, subset, partition and local-search candidates.

    Parameters
    ----------
    cost : CostModel
    exact : bool
        Run the exact model (:mod:`streammap.mappers.exact`) on small graphs (see
        :func:`exact_fits`) when the best heuristic plan is more than :data:`EXACT_GAP` above
        :func:`cheap_bound`, and the large-neighbourhood search on larger graphs (candidate 7;
        the default), then step 8's adaptive rounds; ``False`` gives the heuristic candidates
        alone (with their local search): never shorter than ``True``'s plan.

    Returns
    -------
    Schedule
        Never a longer makespan than :func:`~streammap.mappers.heft.heft` gives, nor than
        ``heft(cost, memory_aware=False)`` when that plan is memory-valid; memory-valid;
        ``mapper`` is ``"auto(<winner>)"``; ``bound`` is the exact model's proven lower bound
        when it ran.

    Raises
    ------
    MappingError
        If a task fits on no device, or if no candidate finds a plan within capacity (the error
        of the first candidate that failed).

    Notes
    -----
    Every candidate but HEFT is first built capacity-blind (faster: no memory bookkeeping). If
    that plan happens to be memory-valid (:func:`~streammap.mappers.schedule.peak_memory`) it is kept as
    is; otherwise, when it would beat the best so far, it is rebuilt memory-aware (except above
    :data:`MEDIUM_WORK`, where such a candidate is dropped).
    """
    T, D = cost.n_tasks, cost.n_devices
    check_placeable(cost)
    if T == 0 or D == 0:
        s = heft(cost)
        s.mapper = "auto(heft)"
        return s
    tier = work_tier(cost)
    results: list[tuple[float, int, str, Schedule]] = []
    errors: list[MappingError] = []
    cap = cost.capacity
    need = np.maximum(cost.mem, cost.out)
    # Memory can bind only where all the tasks' needs together exceed the capacity.
    binds = bool((need @ np.isfinite(cost.time) > cap * (1.0 + MEM_RTOL)).any())

    def best_ms():
        return min((r[0] for r in results), default=math.inf)

    def cannot_win(floor):
        """Whether a subset whose work, spread perfectly, needs ``floor`` seconds (``inf``: a task
        has no device there; :func:`_subset_floor`) is not worth a pass: it cannot beat the best
        plan so far."""
        return floor >= best_ms()

    def attempt(name, build):
        """``build(memory_aware) -> Schedule``; keep its result if it is a valid plan."""
        try:
            s = build(not binds)
            if binds:
                valid = bool(fits(peak_memory(cost, s.device, s.start, s.finish), cap).all())
                if not valid:
                    # Rebuild memory-aware only if it may win, and not on the largest graphs,
                    # where memory checks cost as much as HEFT itself.
                    if tier == 2 or not s.makespan < best_ms():
                        return None
                    s = build(True)
        except MappingError as exc:
            errors.append(exc)
            return None
        results.append((s.makespan, len(results), name, s))
        return s

    heft_ms = None
    try:
        h = heft(cost)
        results.append((h.makespan, 0, "heft", h))
        heft_ms = h.makespan
    except MappingError as exc:
        errors.append(exc)
    # The final guard also covers plain HEFT's plan when it happens to fit (see candidate 1). It
    # stays out of the candidate list so that the search starts and seeds do not move.
    plain = heft(cost, memory_aware=False) if binds else None
    if plain is not None and not fits(peak_memory(cost, plain.device, plain.start, plain.finish), cap).all():
        plain = None
    passes = large_graph_passes(T, D)
    if passes is not None:
        if "peft" in passes:
            attempt("peft", lambda mem: peft(cost, memory_aware=mem))
        if plain is not None:
            results.append((plain.makespan, len(results), "heft-plain", plain))
        return _best_of(results, errors, D, heft_ms)
    attempt("peft", lambda mem: peft(cost, memory_aware=mem))
    if tier == 0:
        # HEFT in other priority orders: upward ranks from the fastest and from the harmonic-mean
        # time of each task (closer to what a load-balanced plan spends than the mean time).
        with np.errstate(divide="ignore", invalid="ignore"):
            inv = np.where(np.isfinite(cost.time), 1.0 / cost.time, np.nan)
            hmean = np.nan_to_num(1.0 / np.nanmean(inv, axis=1), nan=0.0, posinf=0.0)
        for name, w in (("heft-minrank", cost.min_time()), ("heft-hrank", hmean)):
            r = upward_rank_with(cost, w)
            attempt(name, lambda mem, r=r, name=name: heft(cost, memory_aware=mem, rank=r, mapper=name))
            la = name.replace("heft", "lookahead")
            attempt(la, lambda mem, r=r, la=la: lookahead_heft(cost, rank=r, memory_aware=mem, mapper=la))

    speed = device_speed(cost)
    by_speed = np.lexsort((np.arange(D), -speed))
    nodes = np.unique(cost.node_of)
    subsets = device_subsets(cost, tier)
    # Each subset's restriction and floor, computed once: the subset passes here and the DSC
    # passes below both judge and map on them.
    restricted = {name: _restricted(cost, devs) for name, devs in subsets}
    for name, devs in subsets:
        sub, floor = restricted[name]
        if cannot_win(floor):
            continue
        attempt(f"heft-{name}", lambda mem, sub=sub, devs=devs: lift(cost, devs, heft(sub, memory_aware=mem)))
        if tier <= 1:
            attempt(f"peft-{name}", lambda mem, sub=sub, devs=devs: lift(cost, devs, peft(sub, memory_aware=mem)))
    if tier > 0:
        restricted.clear()          # their only later user is DSC, at tier 0: free their times now

    # Partitions: one part per node, one part per device of the fastest m devices.
    if metis_available() and T > 1:
        order = priority_order(cost)
        groupings: list[tuple[str, list[np.ndarray]]] = []
        if nodes.size > 1:
            groupings.append(("nodes", [np.flatnonzero(cost.node_of == n) for n in nodes]))
        if tier == 0:
            m = 2
            while m <= D:
                groupings.append((f"dev{m}", [np.array([d]) for d in np.sort(by_speed[:m])]))
                if m == D:
                    break
                m = min(2 * m, D)
        for name, groups in groupings:
            wts = [float(speed[g].sum()) for g in groups]
            # Every part must expect a few tasks (METIS cannot bisect empty parts).
            if min(wts) <= 0 or min(wts) / sum(wts) * T < 4:
                continue
            part = partition_tasks(cost, wts)
            gt = GroupTimes(cost, groups, part)
            attempt(f"part-{name}", lambda mem, gt=gt: list_schedule(cost, order, times=gt, memory_aware=mem,
                                                                   mapper="part"))

    # Linear clustering: chains of heavy edges kept on one device, on the whole cluster and on
    # the subsets above.
    if tier <= 1:
        attempt("chains", lambda mem: chain_schedule(cost, memory_aware=mem))
        attempt("lookahead", lambda mem: lookahead_heft(cost, memory_aware=mem))
        for name, devs in (subsets if tier == 0 else []):
            if devs.size > 1:
                attempt(f"chains-{name}", lambda mem, devs=devs, name=name: chain_schedule(
                    cost, devices=devs, memory_aware=mem, mapper=f"chains-{name}"))
                attempt(f"lookahead-{name}", lambda mem, devs=devs, name=name: lookahead_heft(
                    cost, devices=devs, memory_aware=mem, mapper=f"lookahead-{name}"))

    # Cheap sources first: HEFT and the lookahead with every source raised to its co-parents'
    # rank (skipped where no source is raised: the plans would be HEFT's and the lookahead's).
    if tier == 0:
        base = upward_rank(cost)
        co = coparent_rank(cost, base)
        if not np.array_equal(co, base):
            attempt("heft-coparent", lambda mem: heft(cost, memory_aware=mem, rank=co, mapper="heft-coparent"))
            attempt("lookahead-coparent", lambda mem: lookahead_heft(cost, rank=co, memory_aware=mem,
                                                                    mapper="lookahead-coparent"))

    # Heavy-edge grouping: fork-join groups joined by dear edges kept on one node (HEFT inside
    # it) or on one device.
    if tier <= 1:
        scopes = ("node", "device") if nodes.size > 1 else ("device",)
        for scope in scopes:
            for theta in (GROUP_THETAS if tier == 0 else GROUP_THETAS[:1]):
                nm = f"group-{scope}{theta:g}"
                attempt(nm, lambda mem, scope=scope, theta=theta, nm=nm: grouped_schedule(
                    cost, scope, theta=theta, memory_aware=mem, mapper=nm))

    # Dominant Sequence Clustering, the clusters merged onto the devices: on the whole cluster and
    # on each subset of two or more devices (small graphs only), within DSC_BUDGET task-passes.
    if tier == 0:
        dsc_passes = DSC_BUDGET // max(1, T)
        for name, devs in [("", None)] + [s for s in subsets if s[1].size > 1]:
            sub, floor = (cost, -math.inf) if devs is None else restricted[name]
            if cannot_win(floor):
                continue
            for tag, kw in DSC_VARIANTS[:dsc_passes]:
                nm = f"dsc{tag}" + (f"-{name}" if name else "")
                attempt(nm, lambda mem, sub=sub, devs=devs, kw=kw, nm=nm: _on(cost, devs, dsc_schedule(
                    sub, memory_aware=mem, mapper=nm, **kw)))
            dsc_passes -= len(DSC_VARIANTS[:dsc_passes])

    if not results:
        if plain is None:
            raise errors[0]
        results.append((plain.makespan, 0, "heft-plain", plain))
    results.sort(key=lambda r: (r[0], r[1]))

    # Local search from the best distinct candidates.
    runs = min(SEARCH_MAX_RUNS, (SEARCH_BUDGET if tier == 0 else SEARCH_BUDGET_LARGE) // max(1, T))
    share = 0
    if runs >= 8 and D > 1:
        starts, seen = [], set()
        for ms, i, name, s in results:
            key = s.device.tobytes()
            if key in seen:
                continue
            seen.add(key)
            starts.append((name, s))
            if len(starts) == SEARCH_STARTS:
                break
        share = runs // len(starts)
        for name, s in starts:
            better = improve(cost, s, _placement_order(s), max_runs=share, seed=len(results))
            if better is not s:
                results.append((better.makespan, len(results), f"{name}+search", better))
        results.sort(key=lambda r: (r[0], r[1]))
        # Heavy-neighbourhood search (candidate 5b) from the best plan so far, where some edge
        # costs more to cross than its cheaper end costs to run.
        if any(heavy_neighbours(cost)):
            _, _, name, s = results[0]
            better = improve(cost, s, _placement_order(s), max_runs=share, seed=len(results), groups=True)
            if better is not s:
                results.append((better.makespan, len(results), f"{name}+group", better))
                results.sort(key=lambda r: (r[0], r[1]))

    ms, _, name, best = results[0]
    if plain is not None and plain.makespan < ms:
        ms, name, best = plain.makespan, "heft-plain", plain
    bound = analytic = None
    exact_step = exact and exact_fits(cost)
    lns_windows = 0 if exact_step or not exact else window_budget(T, ms)
    polishable = exact_step or (lns_windows > 0 and exact_available())
    if polishable:
        analytic = cheap_bound(cost)        # once: the plan's lower bound reuses it

    def polish(s: Schedule) -> tuple[Schedule, float | None]:
        """Candidate 6 or 7 from ``s`` (where ``polishable``), never longer than ``s``, with the
        solver's proven bound (``None`` from windows)."""
        if exact_step:
            # The exact model, warm-started from ``s``: a better plan, or a proof of how close it is.
            res = solve_exact(cost, s, work=EXACT_WORK, interleave=True)
            if res.schedule is not None and res.schedule.makespan < s.makespan:
                return res.schedule, res.bound
            return s, res.bound
        # Too large for the exact model: CP-SAT on windows of ``s`` (candidate 7), which keeps
        # only plans shorter than the one in hand; a short plan gets few windows.
        return improve_plan(cost, s, max_windows=lns_windows), None

    if analytic is not None and ms > analytic * (1.0 + EXACT_GAP):
        # Not when the analytic bounds already show the plan within EXACT_GAP of optimal.
        better, bound = polish(best)
        if better is not best:
            name, best = ("exact" if exact_step else f"{name}+lns"), better
    # Adaptive rounds (step 8): more search, only while the plan is far from its lower bound and
    # the rounds still shorten it.
    if exact and affordable(cost, share, best.makespan):
        if analytic is None:
            analytic = cheap_bound(cost)    # the plan's lower bound reuses it (the compiler's gap)
        lower = max(analytic, bound or 0.0)
        better, _ = extend_search(cost, best, lower=lower, runs=share)
        if better is not best:
            name, best = f"{name}+adapt", better
        # Join-first restart (step 9): independent fork-join groups served one after another.
        if tier == 0:
            better = join_first_search(cost, best, lower=lower, rank=base, runs=share, memory_aware=binds,
                                       polish=(lambda s: polish(s)[0]) if polishable else None)
            if better is not best:
                name, best = better.mapper, better
    return Schedule(f"auto({name})", best.device, best.start, best.finish, best.makespan,
                    n_devices=D, seq=best.seq, bound=bound, heft_makespan=heft_ms, analytic_bound=analytic)


def _restricted(cost: CostModel, devices: np.ndarray) -> tuple[CostModel, float]:
    """``(cost.restrict(devices), floor)``: the subset's cost model and the least makespan its
    work allows, each task at its fastest there spread perfectly over the subset (``inf`` when a
    task has no device there)."""
    sub = cost.restrict(devices)
    tmin = sub.time.min(axis=1)
    return sub, (tmin.sum() / devices.size if np.isfinite(tmin).all() else math.inf)


def _on(cost: CostModel, devices, schedule: Schedule) -> Schedule:
    """``schedule`` as is when ``devices`` is None (the whole cluster), else :func:`lift`-ed."""
    return schedule if devices is None else lift(cost, devices, schedule)


def _best_of(results: list, errors: list, n_devices: int, heft_ms: float | None) -> Schedule:
    """The shortest of ``results`` (ties: the earlier), as ``auto(<name>)``; the first error if none."""
    if not results:
        raise errors[0]
    _, _, name, best = min(results, key=lambda r: (r[0], r[1]))
    return Schedule(f"auto({name})", best.device, best.start, best.finish, best.makespan,
                    n_devices=n_devices, seq=best.seq, heft_makespan=heft_ms)


def exact_fits(cost: CostModel) -> bool:
    """Whether ``auto`` runs the exact model on ``cost``: OR-Tools is there, the graph has at most
    :data:`EXACT_MAX_TASKS` tasks and the model at most :data:`EXACT_MAX_TERMS` terms."""
    return (cost.n_tasks <= EXACT_MAX_TASKS and model_size(cost) <= EXACT_MAX_TERMS
            and exact_available())
