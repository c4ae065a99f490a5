"""GPU sharing: co-located tasks by fraction of a device (the ``share`` clause).

Many kernels use a fraction of a modern GPU. HAMi (``nvidia.com/gpucores``), MIG and time-slicing
let a cluster pack them; this module lets the mapper do it, with estimates that stay true.

Semantics (what keeps estimates true)
-------------------------------------
A task with ``share=s`` declares that it needs, and uses, at most the fraction s of its device's
compute, as HAMi's ``gpucores`` limits a container to s of the SMs. Its duration is the cost
model's time for the device (:mod:`streammap.cost.model`), *whether it runs alone or co-located*: a
kernel that only fills s of the SMs does not get faster when the rest is idle, and does not get
slower when other tasks fill the rest. A task without the clause takes the whole device
(``share=1``), so nothing changes for programs that do not use it.

A device is then a resource of capacity 1 in the compute dimension: at every instant the shares of
the tasks running on it sum to at most 1, at most ``max_tasks_per_device`` of them run at once
(the cluster file's knob, HAMi's ``deviceSplitCount``; unbounded when absent), and their memory
fits (the memory model of :mod:`streammap.mappers.schedule`, with the capacity times the cluster's
``memory_oversubscription``).

Policy: list scheduling in FIFO order per device
------------------------------------------------
:func:`share_schedule` places tasks one at a time by decreasing upward rank (HEFT's order,
:func:`streammap.mappers.heft.priority_order`). On each device a task may start no earlier than
the task placed on that device before it (*FIFO*: the runtime admits a device's tasks in plan
order and never lets a later one overtake), and no earlier than its inputs arrive; it starts at
the first such instant where its share, its slot and its memory fit. Under FIFO every task already
on the device started earlier, so the device's use only falls from there: checking the use at the
start instant is enough for the share and the count. The device is then chosen by a policy:

``eft`` (mappers ``heft``, ``peft``)
    the earliest finish time, as HEFT;
``binpack`` (mappers ``binpack``, ``binpack-node``)
    the earliest start, then the device with the most share already in use at that instant:
    fractional tasks pile onto few devices and leave whole devices free;
``spread`` (mappers ``spread``, ``spread-node``)
    the earliest start, then the device with the least share in use: tasks spread out.

``fixed`` (every other mapper: ``least-loaded``, ``fastest``, ``heft-plain``, custom policies)
    the device the mapper chose (:func:`retime_shared`): the mapper decides *where*, this
    scheduler *when*, so that co-located tasks are estimated to run at once as the runtime runs
    them (a whole-device schedule would have them one after another and overestimate).

``auto`` takes the shortest of the three on the whole cluster and on each device subset and node
it maps on without shares, and of whole-device HEFT's and ``auto``'s placements re-timed the same
way (:func:`auto_shared`).

:func:`simulate_shared` replays an assignment and per-device order under the same rule (the
runtime's admission), so a schedule can be re-scored and spill costs added
(:mod:`streammap.placement.spilling`). The plan validation that refuses a device whose shares exceed
1 at some instant, :func:`streammap.plan.check_plan_shares`, belongs to the plan contract; this
module takes :data:`~streammap.plan.SHARE_EPS` and :func:`~streammap.plan.share_profile` from there.

References
----------
.. [1] H. Topcuoglu, S. Hariri, M.-Y. Wu, "Performance-effective and low-complexity task
   scheduling for heterogeneous computing", IEEE TPDS 13(3), 2002 (list scheduling by rank).
.. [2] HAMi, Heterogeneous AI Computing Virtualization Middleware, https://github.com/Project-HAMi/HAMi
   (``nvidia.com/gpucores``, ``deviceSplitCount``, binpack/spread device scheduling policies).
"""

from __future__ import annotations

import math
from bisect import bisect_right

import numpy as np

from streammap.cost.model import CostModel, area_bound, critical_path_bound
from streammap.errors import MappingError
from streammap.mappers.auto import auto, device_subsets, lift, work_tier
from streammap.mappers.heft import MemoryProfile, check_placeable, heft, place_in_order, priority_order, release_inputs
from streammap.mappers.schedule import MEM_RTOL, Schedule
from streammap.plan import SHARE_EPS, share_profile  # noqa: F401 (share_profile: re-exported for the views)

#: Device policy of the share-aware scheduler for each mapper name.
POLICY_OF_MAPPER = {"auto": "eft", "heft": "eft", "peft": "eft", "binpack": "binpack", "binpack-node": "binpack",
                    "spread": "spread", "spread-node": "spread"}


def uses_sharing(cost: CostModel) -> bool:
    """Whether some task of the graph needs less than a whole device (``share < 1``) and the
    cluster has a device that can be shared by fraction (not only CPUs: see ``CostModel.share_on``)."""
    return bool(cost.n_tasks and cost.shareable.any() and (cost.share < 1.0 - SHARE_EPS).any())


def shared_lower_bound(cost: CostModel) -> float:
    """The lower bound when tasks may share devices: the critical path (a task's time does not
    depend on what runs beside it), and the area bound with each task's time weighted by its
    share (a task with share s uses s of its device for its duration)."""
    on_class = np.zeros(cost.class_time.shape[1], dtype=bool)
    on_class[cost.device_class[cost.shareable]] = True
    # Shareability is a property of the device kind, so it is constant on a class: the weighted
    # times keep the classes, and the bound can work on them.
    view = cost.with_times(cost.time * np.where(cost.shareable[None, :], cost.share[:, None], 1.0),
                           class_time=cost.class_time * np.where(on_class[None, :], cost.share[:, None], 1.0))
    return max(critical_path_bound(cost), area_bound(view))


def max_tasks(cost: CostModel) -> float:
    """The cluster's ``max_tasks_per_device`` (``inf`` when not set)."""
    m = getattr(cost.cluster, "max_tasks_per_device", None)
    return math.inf if m is None else float(m)


def map_shared(cost: CostModel, mapper: str, map_fn=None) -> Schedule | None:
    """The share-aware schedule for ``mapper`` (see the module docstring).

    A mapper without a share-aware policy of its own (``map_fn``: a policy, ``heft-plain``, a
    custom one) keeps its device choice and is re-timed (:func:`retime_shared`); without
    ``map_fn`` such a mapper gets ``None``.
    """
    policy = POLICY_OF_MAPPER.get(mapper)
    if policy is None:
        return retime_shared(cost, map_fn(cost)) if map_fn is not None else None
    if mapper != "auto":
        return share_schedule(cost, policy=policy, mapper=f"{mapper}+share")
    return auto_shared(cost)


def auto_shared(cost: CostModel) -> Schedule:
    """``auto`` under ``share`` clauses: the shortest of its share-aware candidates.

    Candidates, in order (ties: the earlier one):

    1. the share-aware scheduler with each device policy (``eft``, ``binpack``, ``spread``) on the
       whole cluster, then on each restriction ``auto`` maps on without shares
       (:func:`streammap.mappers.auto.device_subsets`: the fastest 1, 2, 4, ... devices, the two
       fastest nodes), lifted back onto the cluster. A restriction is skipped when the
       share-weighted lower bound of it (:func:`shared_lower_bound`) cannot beat the best plan so
       far. Restricting wins when transfers dominate: 32 quarter-GPU kernels feeding one fan-in
       run four at a time on each GPU of one fast node, and the fan-in's inputs stay in the node;
       the whole-cluster list scheduler spreads them to slower devices one task at a time;
    2. whole-device plans timed with co-location (:func:`retime_shared`, their devices kept): HEFT's
       and ``auto``'s best whole-device plan (its candidates and local search, no exact step).

    Every candidate is built memory-aware by the share-aware scheduler; one that finds no valid
    plan is dropped. The winner is named ``auto(<candidate>)+share``.

    Raises
    ------
    MappingError
        When no candidate finds a valid plan (the first candidate's error).
    """
    found: list[tuple[float, int, str, Schedule]] = []
    errors: list[MappingError] = []

    def keep(name, build):
        try:
            s = build()
        except MappingError as exc:
            errors.append(exc)
            return
        found.append((s.makespan, len(found), name, s))

    restrictions = [("", None), *device_subsets(cost, work_tier(cost))]
    for label, devs in restrictions:
        sub = cost if devs is None else cost.restrict(devs)
        if devs is not None:
            if not np.isfinite(sub.time).any(axis=1).all():
                continue                       # some task cannot run on the subset
            if found and shared_lower_bound(sub) >= min(f[0] for f in found):
                continue
        for policy in ("eft", "binpack", "spread"):
            name = policy if devs is None else f"{policy}-{label}"
            if devs is None:
                keep(name, lambda p=policy: share_schedule(cost, policy=p))
            else:
                keep(name, lambda p=policy, sub=sub, devs=devs: lift(cost, devs, share_schedule(sub, policy=p)))
    for name, whole in (("heft", heft), ("auto", auto)):
        keep(name, lambda whole=whole: share_schedule(cost, policy="fixed", assign=whole(cost).device))
    if not found:
        raise errors[0]
    ms, _, name, best = min(found, key=lambda f: (f[0], f[1]))
    best.mapper = f"auto({name})+share"
    return best


class _Usage:
    """One device's running tasks under FIFO admission: their finish times, shares and count.

    Every task here started at or before the device's last start, so the use from any later
    instant on is the sum over the tasks that finish after it.
    """

    __slots__ = ("fin", "sh")

    def __init__(self):
        self.fin: list[float] = []          # sorted finish times of tasks that may still run
        self.sh: list[float] = []           # their shares, aligned

    def add(self, f: float, s: float) -> None:
        i = bisect_right(self.fin, f)
        self.fin.insert(i, f)
        self.sh.insert(i, s)

    def prune(self, t: float) -> None:
        """Forget tasks that finish at or before ``t`` (nothing later can start before ``t``)."""
        i = bisect_right(self.fin, t)
        if i:
            del self.fin[:i]
            del self.sh[:i]

    def earliest(self, t0: float, s: float, limit: float) -> float:
        """First instant ``>= t0`` where ``s`` more share and one more task fit."""
        fin, sh = self.fin, self.sh
        i = bisect_right(fin, t0)
        used = sum(sh[i:])
        n = len(fin) - i
        t = t0
        while used + s > 1.0 + SHARE_EPS or n + 1 > limit:
            if i >= len(fin):                 # cannot happen: an empty device takes any share <= 1
                break
            t = fin[i]
            # Everything that finishes at that instant leaves together.
            while i < len(fin) and fin[i] <= t:
                used -= sh[i]
                n -= 1
                i += 1
        return t

    def used_at(self, t: float) -> float:
        i = bisect_right(self.fin, t)
        return float(sum(self.sh[i:]))

    def candidates(self, t0: float) -> list[float]:
        """``t0`` and every later finish: the instants where room can appear."""
        return [t0] + [f for f in self.fin if f > t0]


def retime_shared(cost: CostModel, schedule: Schedule) -> Schedule:
    """``schedule``'s device choice, timed with co-location by share.

    A mapper that places whole devices (a placement policy, ``heft-plain``, a custom policy)
    schedules the tasks of a device one after another; the runtime runs tasks with
    ``share < 1`` at once. This keeps each task on the device the mapper chose and lets
    :func:`share_schedule` (policy ``fixed``) time it: HEFT's priority order, FIFO per device,
    shares, slots and memory. When memory leaves that no order (the fixed devices deadlock), the
    mapper's own per-device order is replayed under the runtime's admission rule
    (:func:`simulate_shared`), and the plan's memory check decides. The name gets ``+share``.
    """
    if not uses_sharing(cost):
        return schedule
    name = f"{schedule.mapper}+share"
    try:
        return share_schedule(cost, policy="fixed", mapper=name, assign=schedule.device)
    except MappingError:
        timed = simulate_shared(cost, schedule.device, schedule.order(), mapper=name)
        return timed


def share_schedule(cost: CostModel, *, policy: str = "eft", mapper: str = "share",
                   memory_aware: bool = True, assign=None) -> Schedule:
    """List-schedule a task graph with co-location by share (see the module docstring).

    Parameters
    ----------
    cost : CostModel
        Times, sizes, links and shares (``cost.share``) of the graph on the cluster.
    policy : {"eft", "binpack", "spread", "fixed"}
        How a device is chosen among those where the task can start (``fixed``: ``assign``'s).
    mapper : str
        Name written in the schedule.
    memory_aware : bool
        Keep every device within ``capacity`` (memory times the oversubscription factor) at
        every instant.
    assign : array of int, optional
        With ``policy="fixed"``: the device position of each task.

    Returns
    -------
    Schedule
        Device, start and finish per task; reproduced exactly by :func:`simulate_shared`.

    Raises
    ------
    MappingError
        A task that fits on no device (its device constraint, or memory), or a memory deadlock.
    """

    if policy not in ("eft", "binpack", "spread", "fixed"):
        raise ValueError(f"unknown sharing policy {policy!r}")
    if (policy == "fixed") != (assign is not None):
        raise ValueError("policy 'fixed' and assign go together")
    check_placeable(cost, memory=memory_aware)
    T, D = cost.n_tasks, cost.n_devices
    W = cost.time
    share_on = cost.share_on
    limit = max_tasks(cost)
    lat, inv_bw = cost.lat, cost.inv_bw
    pp, pi, pb = cost.pred_ptr, cost.pred_idx, cost.pred_bytes
    mem, out = cost.mem, cost.out
    cap = cost.capacity * (1.0 + MEM_RTOL)
    need = np.maximum(mem, out)
    total = need @ np.isfinite(cost.time) if T else np.zeros(D)
    tracked = (total > cap) if memory_aware else np.zeros(D, dtype=bool)

    dev = np.full(T, -1, dtype=np.int64)
    start = np.zeros(T)
    finish = np.zeros(T)
    seq = np.empty(T, dtype=np.int64)
    last_start = np.zeros(D)
    usage = [_Usage() for _ in range(D)]
    count = np.zeros(D, dtype=np.int64)
    profiles = {d: MemoryProfile() for d in np.flatnonzero(tracked).tolist()}
    pending = cost.n_succ.copy()
    last_use = np.full(T, -math.inf)

    def fit_on(t, d, r, w, rel):
        """Earliest start of t on d at or after ``r`` (FIFO, share, slot, memory), or None."""
        u = usage[d]
        t0 = max(r, float(last_start[d]))
        s = u.earliest(t0, share_on(t, d), limit)
        prof = profiles.get(d)
        if prof is None:
            return s
        for c in u.candidates(s):             # the use only falls after s: the share fits at each
            if prof.fits_with(c, c + w, float(mem[t]), float(out[t]), rel, float(cap[d])):
                return c
        return None

    def place(t, k):
        a, b = pp[t], pp[t + 1]
        P = pi[a:b]
        if b == a:
            ready = np.zeros(D)
        else:
            dp = dev[P]
            ready = (finish[P, None] + lat[dp] + pb[a:b, None] * inv_bw[dp]).max(axis=0)
        rel_all = [(int(dev[p]), float(last_use[p]), float(out[p])) for p in P.tolist()
                   if pending[p] == 1 and out[p] > 0]
        best, best_key, best_st = -1, None, 0.0
        for d in np.flatnonzero(np.isfinite(W[t])).tolist() if assign is None else (int(assign[t]),):
            w = float(W[t, d])
            st = fit_on(t, d, float(ready[d]), w, [(l, x) for q, l, x in rel_all if q == d])  # noqa: E741
            if st is None:
                continue
            if policy in ("eft", "fixed"):
                key = (st + w, d)
            else:
                used = usage[d].used_at(st)
                key = (st, -used if policy == "binpack" else used,
                       -count[d] if policy == "binpack" else count[d], d)
            if best_key is None or key < best_key:
                best, best_key, best_st = d, key, st
        if best < 0:
            return False
        d, st = best, best_st
        ft = st + float(W[t, d])
        dev[t], start[t], finish[t], seq[t] = d, st, ft, k
        last_start[d] = st
        usage[d].prune(st)
        if ft > st:
            usage[d].add(ft, share_on(t, d))
        count[d] += 1
        prof = profiles.get(d)
        if prof is not None:
            prof.add_task(st, ft, float(mem[t]), float(out[t]))
        release_inputs(P, st, last_use, pending, dev, out, finish, profiles)
        return True

    place_in_order(cost, priority_order(cost), dev, place)
    makespan = float(finish.max()) if T else 0.0
    return Schedule(mapper, dev, start, finish, makespan, n_devices=D, seq=seq)


def simulate_shared(cost: CostModel, device, order, extra=None, mapper: str = "simulate") -> Schedule:
    """Start and finish times of an assignment and per-device order under FIFO admission by share.

    A task starts when its inputs have arrived, the task before it in its device's order has
    started, and its share and slot fit on the device (the runtime's admission rule). With every
    share 1 this is :func:`streammap.mappers.schedule.simulate`.

    Parameters
    ----------
    cost : CostModel
    device : sequence of int
        Device position of each task.
    order : sequence of sequences of int
        ``order[d]``: the task positions on device d, in admission order.
    extra : array of float, optional
        Seconds added to each task's time (spill traffic, :mod:`streammap.placement.spilling`).

    Raises
    ------
    ValueError
        If the orders contradict the dependencies.
    """
    T, D = cost.n_tasks, cost.n_devices
    device = np.asarray(device, dtype=np.int64)
    w = cost.time[np.arange(T), device] + (0.0 if extra is None else np.asarray(extra, dtype=np.float64))
    limit = max_tasks(cost)
    pos_in = np.zeros(T, dtype=np.int64)
    for d, o in enumerate(order):
        for j, t in enumerate(np.asarray(o, dtype=np.int64).tolist()):
            pos_in[t] = j
    start = np.full(T, np.nan)
    finish = np.full(T, np.nan)
    head = [0] * D
    usage = [_Usage() for _ in range(D)]
    last_start = [0.0] * D
    orders = [np.asarray(o, dtype=np.int64).tolist() for o in order]
    pp, pi, pb = cost.pred_ptr, cost.pred_idx, cost.pred_bytes
    progress = True
    done = 0
    while progress:
        progress = False
        for d in range(D):
            while head[d] < len(orders[d]):
                t = orders[d][head[d]]
                P = pi[pp[t]:pp[t + 1]]
                if P.size and np.isnan(finish[P]).any():
                    break
                r = 0.0
                if P.size:
                    dp = device[P]
                    r = float((finish[P] + cost.lat[dp, d] + pb[pp[t]:pp[t + 1]] * cost.inv_bw[dp, d]).max())
                s = usage[d].earliest(max(r, last_start[d]), cost.share_on(t, d), limit)
                start[t], finish[t] = s, s + w[t]
                last_start[d] = s
                usage[d].prune(s)
                if w[t] > 0:
                    usage[d].add(s + w[t], cost.share_on(t, d))
                head[d] += 1
                done += 1
                progress = True
    if done != T:
        stuck = [cost.tasks[orders[d][head[d]]] for d in range(D) if head[d] < len(orders[d])][:3]
        raise ValueError(f"the device orders contradict the dependencies (deadlock at {', '.join(stuck)})")
    seq = pos_in
    return Schedule(mapper, device, start, finish, float(finish.max()) if T else 0.0, n_devices=D, seq=seq)


def stack_offsets(intervals) -> list[float]:
    """Vertical offsets (0..1) that stack co-located tasks in a Gantt row without overlap.

    ``intervals``: ``(start, finish, share)`` per task. Each task takes the lowest band
    ``[offset, offset + share)`` free over its whole interval among the tasks placed before it
    (first fit, in start order); shares that sum to at most 1 at every instant leave a band for
    almost every task, and a task that finds none (fragmentation) is drawn at 0.
    """
    items = list(intervals)
    order = sorted(range(len(items)), key=lambda i: (items[i][0], items[i][1], i))
    off = [0.0] * len(items)
    placed: list[int] = []
    for i in order:
        s, f, sh = items[i]
        if not f > s:
            continue
        live = [j for j in placed if items[j][0] < f and s < items[j][1]]
        placed = [j for j in placed if items[j][1] > s]     # later tasks start at or after s
        bands = sorted((off[j], off[j] + items[j][2]) for j in live)
        c = 0.0
        for lo, hi in bands:
            if c + sh <= lo + SHARE_EPS:
                break
            c = max(c, hi)
        off[i] = c if c + sh <= 1.0 + SHARE_EPS else 0.0
        placed.append(i)
    return off
