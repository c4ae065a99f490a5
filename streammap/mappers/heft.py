"""HEFT: Heterogeneous Earliest Finish Time, insertion-based and memory-aware.

The baseline every other mapper is measured against (``design.md``, section *The mapper*).

Policy
------
1. **Priorities.** Each task gets its *upward rank* (Topcuoglu et al. [1]_, eq. 8):
   ``rank(t) = w̄(t) + max over successors s of (c̄(t, s) + rank(s))``, where ``w̄`` is the mean
   time of t over the devices where it can run and ``c̄`` the mean transfer time of the edge over
   ordered pairs of distinct devices. Tasks are placed by decreasing rank, rounded to a
   1e-10 fraction of the largest rank first, and ties go to the earlier task in a fixed
   topological order (by depth, then task position): so a zero-cost chain is still placed in
   dependency order, and rounding noise cannot reorder the paper's example (ranks 80 and 80).
2. **Device choice.** For the task at hand, the data-ready time on every device is computed at
   once from the predecessor arrays; the earliest start on a device is the first idle gap between
   already placed tasks that is long enough (insertion policy, [1]_ section 4.1), else the end of
   the device's last task. The device with the earliest finish time wins; ties go to the lower
   device position.
3. **Memory.** Under the benchmark model (``shared/benchmarks/README.md``, and
   :mod:`streammap.mappers.schedule`), a running task holds ``mem`` and its output stays on its device
   from its finish until its last consumer starts. While some consumer is not yet placed, that
   residency is open-ended; it is cut back when the last consumer is placed. A start time on a
   device is accepted only if the device stays within capacity at every instant from that start
   on, counting the new task, its open-ended output, and the outputs of its predecessors that it
   releases by starting. When the data-ready slot does not fit, later slots on the same device
   are tried (the start after each later task there: in the benchmark model a task cannot be
   held back on an idle device, so those are the later start times a plan can express). A device
   is only checked once the largest ``mem`` plus all outputs placed on it could exceed its
   capacity; until then no step function is even built for it. This is MemHEFT of Herrmann,
   Marchal and Robert [2]_ in spirit, on the README's memory model.
4. **Stalls.** If every device the next task may use is kept full by outputs still waiting for
   consumers, the sweep switches from the static order to a ready list by rank: that task is put
   aside and the next ready task by rank is tried; put-aside tasks are tried again whenever the
   ready list runs dry (placing consumers releases their inputs). Only when a whole round of
   retries places nothing does HEFT give up with a :class:`~streammap.errors.MappingError`.

State kept during the sweep: per task its device, start and finish; per device the end of its
last task (``avail``), its idle gaps (a :class:`~streammap.mappers.gaps.GapList`: sorted lists with
an index of their lengths by blocks), an upper bound of the longest gap and the end of the last gap
(to skip gap searches that cannot win), and, for devices where memory can bind, a step function of memory
use; per task the number of consumers not yet placed and the latest start among those placed.

Every estimate this mapper writes is reproduced exactly by :func:`streammap.mappers.schedule.simulate`
on its assignment and order, and :func:`streammap.mappers.schedule.evaluate` finds it memory-valid.

References
----------
.. [1] H. Topcuoglu, S. Hariri, M.-Y. Wu, "Performance-effective and low-complexity task
   scheduling for heterogeneous computing", IEEE Transactions on Parallel and Distributed
   Systems 13(3), 260-274, 2002.
.. [2] J. Herrmann, L. Marchal, Y. Robert, "Memory-aware list scheduling for hybrid platforms",
   IEEE IPDPS Workshops (HCW), 2014.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left, bisect_right

import numpy as np

from streammap.cost.model import CostModel, concat_ranges, segment_max
from streammap.errors import MappingError
from streammap.mappers.gaps import GapList
from streammap.mappers.schedule import MEM_RTOL, Schedule

__all__ = ["heft", "heft_plain", "list_schedule", "restrict_times", "upward_rank", "priority_order",
           "check_placeable", "is_topological"]


def upward_rank(cost: CostModel) -> np.ndarray:
    """Upward rank of every task ([1]_ eq. 8), computed level by level from the sinks.

    Parameters
    ----------
    cost : CostModel

    Returns
    -------
    ndarray
        ``rank[t] = w̄(t) + max_s (c̄(t, s) + rank[s])``; ``w̄`` is the mean time over the devices
        where t can run, ``c̄`` the mean transfer time over ordered pairs of distinct devices.
    """
    wbar = cost.mean_time()
    cbar = cost.mean_comm(cost.succ_bytes)
    rank = np.zeros(cost.n_tasks)
    for lev in reversed(cost.levels):
        e = concat_ranges(cost.succ_ptr[lev], cost.succ_ptr[lev + 1])
        tail = segment_max(cbar[e] + rank[cost.succ_idx[e]], cost.succ_ptr, lev)
        rank[lev] = wbar[lev] + tail
    return rank


def priority_order(cost: CostModel, rank: np.ndarray | None = None) -> np.ndarray:
    """Task positions by decreasing upward rank, ties by topological order (see module docstring)."""
    if rank is None:
        rank = upward_rank(cost)
    if rank.size == 0:
        return np.empty(0, dtype=np.int64)
    top = float(np.max(np.abs(rank)))
    h = top * 1e-10 if top > 0 and math.isfinite(top) else 1.0
    key = np.rint(rank / h)        # monotone, so a predecessor never sorts after its successor
    return np.lexsort((cost.topo_index, -key))


def check_placeable(cost: CostModel, memory: bool = True, times: np.ndarray | None = None) -> None:
    """Raise :class:`MappingError` for the first task (by position) that fits on no device.

    A task fits on a device if it can run there (finite time: the ``device`` clause admits it and
    the task has an estimate for it) and, when ``memory``, both its ``mem`` and its ``out`` fit in
    the capacity. ``times`` replaces ``cost.time`` (e.g. restricted to some devices).

    Without ``times`` the check runs on the device classes (a task fits some device of a class
    iff it fits the class's largest), so it never builds a task x device array.
    """
    need = np.maximum(cost.mem, cost.out)
    if times is None:
        table, cols = cost.class_time, cost.device_class
    else:
        table, cols = times, np.arange(cost.n_devices)
    col_cap = np.full(table.shape[1], -math.inf)
    np.maximum.at(col_cap, cols, cost.capacity)
    ok = np.isfinite(table)
    if memory:
        ok &= need[:, None] <= col_cap[None, :] * (1.0 + MEM_RTOL)
    bad = np.flatnonzero(~ok.any(axis=1)) if cost.n_devices else np.arange(cost.n_tasks)
    if not bad.size:
        return
    i = int(bad[0])
    allowed = np.isfinite(table[i].take(cols))          # the one row the message needs, per device
    tid = cost.tasks[i]
    node = cost.graph.nodes[tid]
    kernel = node.get("kernel")
    cons = node.get("device") or "any"
    path, line = cost.site_line(i)
    more = f" (and {bad.size - 1} more)" if bad.size > 1 else ""
    if not allowed.any():
        what = "no device of the cluster matches its device constraint" if cons != "any" \
            else "it has no time estimate for any device of the cluster"
        raise MappingError(
            f"task {tid} (kernel {kernel}) cannot run on any device: {what} "
            f"(device={cons!r}; devices: {', '.join(sorted({d.kind + ':' + (d.model or '-') for d in cost.devices}))}){more}",
            path=path, line=line,
            hint="relax the kernel's device= clause, give times for these device models or kinds, "
                 "or add a matching device to the cluster")
    cap = cost.capacity[allowed].max()
    big = cost.devices[int(np.flatnonzero(allowed & (cost.capacity == cap))[0])].id
    raise MappingError(
        f"task {tid} (kernel {kernel}) needs {_need(need[i])} of device memory but the largest "
        f"device it may run on, {big}, has {_size(cap)}{_oversub(cost)}{more}",
        path=path, line=line,
        hint="reduce the kernel's mem= (or split it), relax its device= clause, add a device with more "
             "memory, or raise memory_oversubscription in the cluster file")


def _oversub(cost: CostModel) -> str:
    """`` (memory x memory_oversubscription 1.5)`` when the cluster oversubscribes, else ``""``."""
    f = float(getattr(cost.cluster, "oversubscription", 1.0) or 1.0)
    return f" (memory x memory_oversubscription {f:g})" if f > 1 else ""


def _need(b: float) -> str:
    """A task's memory need as the refusal says it: its size, or, where its sizes add up past the
    float range (a hostile workflow's bytes near 1e308), that (not "unlimited memory")."""
    return _size(b) if math.isfinite(b) else "more bytes than a float holds (its sizes add up past 1.8e308)"


def _size(b: float) -> str:
    if not math.isfinite(b):
        return "unlimited memory"
    for unit, f in (("GiB", 2.0**30), ("MiB", 2.0**20), ("KiB", 2.0**10)):
        if b >= f:
            # the exact count while it is readable; a size computed from a huge param is not
            return f"{b / f:.3g} {unit}" + (f" ({int(b)} bytes)" if b < 1e18 else "")
    return f"{int(b)} bytes"


class MemoryProfile:
    """Memory use of one device as a step function: ``v[i]`` bytes on ``[t[i], t[i+1])``.

    Before ``t[0]`` the use is 0; the last step extends to infinity (open-ended outputs).
    The breakpoints are a sorted Python list (bisect, ``list.insert``); the values live in a NumPy
    buffer grown by doubling, so inserting a breakpoint is one block move and adding over a range
    one slice operation. Each value is the sum, in the order of the calls to :meth:`add`, of the
    amounts added over its step (a new breakpoint copies the level of the step it splits), so the
    bytes compared with a capacity do not depend on how the steps were stored.
    """

    __slots__ = ("t", "_v", "n")

    def __init__(self):
        self.t: list[float] = []
        self._v = np.zeros(16)
        self.n = 0

    @property
    def v(self) -> np.ndarray:
        """The values, ``v[i]`` on ``[t[i], t[i+1])`` (a view)."""
        return self._v[:self.n]

    def last(self) -> float:
        """The use from the last breakpoint on (0 if there is none)."""
        return float(self._v[self.n - 1]) if self.n else 0.0

    def _ensure(self, x: float) -> int:
        t = self.t
        i = bisect_left(t, x)
        n = self.n
        if i < n and t[i] == x:
            return i
        v = self._v
        if n == v.size:
            v = self._v = np.concatenate((v, np.zeros(n)))
        if i < n:
            v[i + 1:n + 1] = v[i:n]
        v[i] = v[i - 1] if i > 0 else 0.0
        t.insert(i, x)
        self.n = n + 1
        return i

    @classmethod
    def of_placed(cls, tasks, start, finish, mem, out, pending, last_use) -> "MemoryProfile":
        """The profile of tasks already placed on one device: each holds ``mem`` while it runs, and
        its output from its finish until its last consumer starts (open-ended while some consumer,
        ``pending > 0``, is not placed yet)."""
        prof = cls()
        for u in tasks:
            prof.add(start[u], finish[u], mem[u])
            if out[u] > 0:
                end = math.inf if pending[u] > 0 else max(last_use[u], finish[u])
                prof.add(finish[u], end, out[u])
        return prof

    def add_task(self, start: float, finish: float, mem: float, out: float) -> None:
        """A task placed here: ``mem`` bytes while it runs, then its output ``out`` resident from
        its finish on (until :func:`release_inputs` sees its last consumer start)."""
        self.add(start, finish, mem)
        if out > 0:
            self.add(finish, math.inf, out)

    def add(self, a: float, b: float, amount: float) -> None:
        """Add ``amount`` bytes over ``[a, b)`` (``b`` may be ``inf``; empty if ``b <= a``)."""
        if amount == 0.0 or not b > a:
            return
        i = self._ensure(float(a))
        if math.isinf(b):
            self._v[i:self.n] += amount
        else:
            j = self._ensure(float(b))
            self._v[i:j] += amount

    def range_max(self, a: float, b: float) -> float:
        """Largest use over ``[a, b)`` (``a < b``; ``b`` may be ``inf``)."""
        t = self.t
        i = bisect_right(t, a) - 1
        j = self.n if b == math.inf else bisect_left(t, b)
        if i < 0:
            if j <= 0:
                return 0.0
            top = float(self._v[:j].max())
            return top if top > 0.0 else 0.0
        if j == i + 1:
            return float(self._v[i])
        return float(self._v[i:j].max())

    def fits_with(self, s: float, f: float, m: float, o: float, rel: list, c: float) -> bool:
        """Whether the use stays within ``c`` from ``s`` on if a task is added: ``m`` over
        ``[s, f)``, ``o`` from ``f`` on, and ``a`` bytes released from ``max(l, s)`` on for each
        ``(l, a)`` in ``rel``.

        Same value as ``peak_with(...) <= c``, computed per piece of the added step function
        (between ``s``, ``f`` and the release times) with one range maximum of the profile each:
        adding a constant is monotone in floating point, so the maximum of ``level + k`` is
        ``max(level) + k`` to the last bit. Over two releases, the general :meth:`peak_with` is used
        (its release sums are a matrix product, whose rounding this does not reproduce).
        """
        if len(rel) > 2:
            lu = np.array([x[0] for x in rel])
            rel_a = np.array([x[1] for x in rel])
            return self.peak_with(s, f, m, o, np.maximum(lu, s), rel_a) <= c
        if not rel:
            # Pieces [s, f) holding m and [f, inf) holding o.
            if f > s and self.range_max(s, f) + m > c:
                return False
            return self.range_max(f, math.inf) + o <= c
        rt = [(l if l > s else s) for l, _ in rel]  # noqa: E741
        qs = sorted({s, f, *rt})
        last = len(qs) - 1
        for k, q in enumerate(qs):
            qn = qs[k + 1] if k < last else math.inf
            level = self.range_max(q, qn) + (m if q < f else o)
            if len(rt) == 1:
                if rt[0] <= q:
                    level = level - rel[0][1]
            else:
                a0, a1 = rt[0] <= q, rt[1] <= q
                if a0 and a1:
                    level = level - (rel[0][1] + rel[1][1])
                elif a0:
                    level = level - rel[0][1]
                elif a1:
                    level = level - rel[1][1]
            if level > c:
                return False
        return True

    def peak_with(self, s: float, f: float, m: float, o: float, rel_t: np.ndarray, rel_a: np.ndarray) -> float:
        """Peak use from ``s`` on if a task is added: ``m`` over ``[s, f)``, ``o`` from ``f`` on,
        and ``rel_a[k]`` bytes are released from ``rel_t[k]`` on."""
        t, v = np.asarray(self.t, dtype=np.float64), self.v
        pts = np.concatenate(((s, f), rel_t, t[np.searchsorted(t, s, side="right"):]))
        idx = np.searchsorted(t, pts, side="right") - 1
        level = np.where(idx >= 0, v[np.maximum(idx, 0)], 0.0) if v.size else np.zeros(pts.size)
        level = level + np.where(pts < f, m, o)
        if rel_t.size:
            level = level - (rel_t[None, :] <= pts[:, None]) @ rel_a
        return float(level.max())


def heft(cost: CostModel, *, memory_aware: bool = True, rank: np.ndarray | None = None,
         devices=None, mapper: str | None = None) -> Schedule:
    """Map a task graph with insertion-based, memory-aware HEFT ([1]_).

    Parameters
    ----------
    cost : CostModel
        Times, sizes and links of the graph on the cluster.
    memory_aware : bool, optional
        ``False`` gives *plain* insertion HEFT, which ignores device capacities (the benchmark's
        baseline; its plans may break capacity).
    rank : ndarray, optional
        Priorities to use instead of the upward rank (higher first; ties as in
        :func:`priority_order`). A rank that does not decrease along every edge is served from a
        ready list (see :func:`list_schedule`).
    devices : array of bool or int, optional
        Restrict the mapping to these devices (a mask of length D, or device positions).
    mapper : str, optional
        Name written in the schedule (default ``"heft"``, ``"heft-plain"`` when not memory-aware).

    Returns
    -------
    Schedule
        ``mapper="heft"``; device, start and finish per task; ``seq`` is the placement order.

    Raises
    ------
    MappingError
        If a task fits on no device (device constraint, or ``mem`` above every allowed device's
        capacity), or if at some point no ready task fits anywhere because every device is kept
        full by outputs still waiting for their consumers. The message names the task, its
        kernel, its need and the largest capacity; ``path``/``line`` point at the task's call
        site when it has one.

    Notes
    -----
    Deterministic: ties are broken by task position and device position only, so the same inputs
    give the same schedule. Cost is O(E·D) NumPy work plus, per task, a gap search on the few
    devices where a gap could beat the best append position (a gap ending before
    ``ready + time`` or shorter than the task, or a device whose ``ready + time`` already loses
    to the best append, is never searched; a device whose last gap ends before ``ready + time`` is
    ruled out by one vector comparison for all devices). A search finds the first gap long enough
    in O(32 + gaps / 32) comparisons, most of them C-level maxima over blocks of gap lengths
    (:class:`~streammap.mappers.gaps.GapList`), with the linear scan's answer. Memory checks only
    happen on devices where memory can bind; each tried start costs a few range maxima over the
    device's step function (a bisection plus one vectorised maximum each), and the gaps that the
    device's open outputs rule out are crossed by bisection rather than one by one.

    Examples
    --------
    Three tasks on two equal GPUs: ``a`` (1 s) feeds ``b`` and ``c`` (2 s each) with 1 GB each,
    over a 10 GB/s link. ``c`` runs beside ``b`` on the other GPU once its input has moved (0.1 s),
    rather than after ``b``:

    >>> from streammap.cluster.model import cluster_from_dict
    >>> from streammap.cost.model import CostModel
    >>> from streammap.ir import add_task, new_graph
    >>> from streammap.mappers.heft import heft
    >>> graph = new_graph("tiny", kind="workflow")
    >>> for name, seconds in (("a", 1.0), ("b", 2.0), ("c", 2.0)):
    ...     add_task(graph, name, "k", runtime=seconds)
    >>> graph.add_edge("a", "b", bytes=1e9)
    >>> graph.add_edge("a", "c", bytes=1e9)
    >>> pair = cluster_from_dict({"name": "pair", "nodes": [{
    ...     "name": "n0", "link": {"bandwidth": "10 GB/s", "latency": "0s"},
    ...     "devices": [{"name": "gpu0", "kind": "gpu"}, {"name": "gpu1", "kind": "gpu"}]}]})
    >>> schedule = heft(CostModel(graph, pair))
    >>> [pair.devices[d].id for d in schedule.device]
    ['n0/gpu0', 'n0/gpu0', 'n0/gpu1']
    >>> schedule.start.tolist(), schedule.makespan
    ([0.0, 1.0, 1.1], 3.1)
    """
    if mapper is None:
        mapper = "heft" if memory_aware else "heft-plain"
    times = None
    if devices is not None:
        times = restrict_times(cost, devices)
    check_placeable(cost, memory=memory_aware, times=times)
    order = priority_order(cost, rank)
    return list_schedule(cost, order, times=times, memory_aware=memory_aware, mapper=mapper)


def heft_plain(cost: CostModel) -> Schedule:
    """Plain insertion-based HEFT that ignores device capacities: the benchmark baseline.

    Same as ``heft(cost, memory_aware=False)``; its plans may be memory-invalid.
    """
    return heft(cost, memory_aware=False)


def restrict_times(cost: CostModel, devices) -> np.ndarray:
    """``cost.time`` with ``inf`` on every device not in ``devices`` (mask or positions)."""
    mask = np.asarray(devices)
    if mask.dtype != bool:
        m = np.zeros(cost.n_devices, dtype=bool)
        m[mask] = True
        mask = m
    return np.where(mask[None, :], cost.time, math.inf)


def list_schedule(cost: CostModel, order: np.ndarray, *, times=None, bias=None, memory_aware: bool = True,
                  mapper: str = "heft") -> Schedule:
    """The placement core of HEFT, for any priority order, time table and device-choice bias.

    Parameters
    ----------
    cost : CostModel
    order : ndarray of int
        Every task position once, highest priority first. A topological order is swept as is
        (HEFT); otherwise tasks are taken from a ready list (tasks whose predecessors are all
        placed) by their place in ``order`` (as PEFT does).
    times : indexable, optional
        ``times[t]`` is the row of task t's times over the devices (default ``cost.time``); use
        ``inf`` to forbid a device (see :func:`restrict_times`). An object that computes rows on
        demand (``__getitem__``) avoids a T×D array.
    bias : indexable, optional
        ``bias[t]``, a row over the devices added to the earliest finish time when choosing the
        device (PEFT's optimistic cost table); the start and finish written are the real ones.
    memory_aware : bool
        Keep every device within capacity (see the module docstring); ``False`` ignores memory.
    mapper : str
        Name written in the schedule.

    Raises
    ------
    MappingError
        When no ready task fits anywhere (memory), or a task has no allowed device left.
    """
    T, D = cost.n_tasks, cost.n_devices
    W = cost.time_rows() if times is None else times
    lat, inv_bw = cost.lat, cost.inv_bw
    pp, pi, pb = cost.pred_ptr, cost.pred_idx, cost.pred_bytes
    mem, out = cost.mem, cost.out
    cap = cost.capacity * (1.0 + MEM_RTOL)

    dev = np.full(T, -1, dtype=np.int64)
    start = np.zeros(T)
    finish = np.zeros(T)
    avail = np.zeros(D)
    maxgap = np.zeros(D)                      # upper bound of the longest idle gap per device
    gaps = [GapList() for _ in range(D)]      # idle gaps per device, with an index of their lengths
    gap_s = [g.s for g in gaps]               # the same lists, read by the memory-aware search
    gap_e = [g.e for g in gaps]
    gap_end = np.full(D, -math.inf)           # end of each device's last idle gap
    zeros = np.zeros(D)

    # Devices where memory can bind at all: the sum of every task's need exceeds the capacity.
    need = np.maximum(mem, out)
    total = cost.allowed_anywhere(need) if T else np.zeros(D)
    tracked = (total > cap) if memory_aware else np.zeros(D, dtype=bool)
    any_tracked = bool(tracked.any())
    # Memory can only bind on a tracked device d once (largest mem placed there) + (sum of outputs
    # placed there) could exceed its capacity: one task runs at a time, and at most every output
    # is still resident. Until then d is treated as untracked and its step function is not built.
    out_sum = np.zeros(D)
    open_out = np.zeros(D)                    # outputs on each device still waiting for a consumer
    mem_max = np.zeros(D)
    profiles: dict[int, MemoryProfile] = {}
    placed: list[list[int]] = [[] for _ in range(D)]
    pending = cost.n_succ.copy()              # consumers not yet placed
    last_use = np.full(T, -math.inf)          # latest start among placed consumers
    seq = np.empty(T, dtype=np.int64)

    def gap_fit(d, r, w):
        """Earliest gap on d that holds [max(gap start, r), +w): (index, start) or None."""
        gs, ge = gap_s[d], gap_e[d]
        i = bisect_left(ge, r + w)
        if i == len(ge):
            return None
        st = gs[i] if gs[i] > r else r
        if st + w <= ge[i]:
            return i, st
        # Later gaps start at or after ge[i] >= r + w, so there the start is the gap's own start
        # and the test is s + w <= e: the index finds the first that passes.
        i = gaps[d].first_fit(i + 1, w)
        return None if i is None else (i, gs[i])

    def profile(d):
        prof = profiles.get(d)
        if prof is None:
            # Build the step function from what is already placed on d.
            prof = profiles[d] = MemoryProfile.of_placed(placed[d], start, finish, mem, out, pending, last_use)
        return prof

    def mem_fit(d, t, r, w, est_append, rel):
        """Earliest start on tracked device d that fits in time and memory: ``(gap index or None,
        start)``, or None. ``rel``: ``(last use, bytes)`` of the outputs on d that t releases."""
        prof = profile(d)
        m, o = mem[t], out[t]
        if len(rel) > 2:
            released = float(np.array([x[1] for x in rel]).sum())
        elif len(rel) == 2:
            released = rel[0][1] + rel[1][1]
        elif rel:
            released = rel[0][1]
        else:
            released = 0.0
        c = cap[d]
        if prof.n and prof.last() - released + o > c:
            return None                        # open outputs alone leave no room, at any start
        gs, ge = gap_s[d], gap_e[d]
        i = bisect_left(ge, r + w)
        G = len(ge)
        if i < G:
            # Necessary for a start s: the use after its finish, less every release, plus its
            # output fits. That bound only falls with s: the gaps it rules out are those whose
            # finish falls in [t[0], t[jb]), one run of them, crossed by bisection.
            tt = prof.t
            jb = -1                            # first step where the bound holds (-1: not known yet)
            while i < G:
                g0 = gs[i]
                st = g0 if g0 > r else r
                e = st + w
                if e > ge[i]:
                    i += 1
                    continue
                if tt and e >= tt[0]:
                    if jb < 0:
                        bad = (prof.v - released + o > c).nonzero()[0]
                        jb = int(bad[-1]) + 1 if bad.size else 0
                    if jb > 0 and e < tt[jb]:
                        xb = tt[jb]
                        lo, hi = i + 1, G
                        while lo < hi:
                            mid = (lo + hi) // 2
                            g0 = gs[mid]
                            if (g0 if g0 > r else r) + w >= xb:
                                hi = mid
                            else:
                                lo = mid + 1
                        i = lo
                        continue
                if prof.fits_with(st, e, m, o, rel, c):
                    return i, st
                i += 1
        st = est_append
        if prof.fits_with(st, st + w, m, o, rel, c):
            return None, st
        return None

    def place(t, k):
        """Place task t as the k-th; False if no device has room for it now."""
        a, b = pp[t], pp[t + 1]
        P = None
        if b == a:
            ready = zeros
        elif b - a == 1:
            p = pi[a]
            dp = dev[p]
            ready = finish[p] + lat[dp] + pb[a] * inv_bw[dp]
            P = pi[a:b]
        else:
            P = pi[a:b]
            dp = dev[P]
            ready = (finish[P, None] + lat[dp] + pb[a:b, None] * inv_bw[dp]).max(axis=0)
        w = W[t]
        est = np.maximum(ready, avail)
        eft = est + w
        lb = ready + w
        if bias is not None:
            bt = bias[t]
            eft = eft + bt
            lb = lb + bt
        tight = None
        rel_src = ()                          # (device, last use, bytes) of the outputs t releases
        if any_tracked:
            tight = tracked & (out_sum + out[t] + np.maximum(mem_max, mem[t]) > cap)
            if tight.any():
                # Open outputs stay to the end of time: if they, less what t releases, plus t's
                # output do not fit, no start on that device can work.
                if P is not None:
                    sel = P[pending[P] == 1]
                    if sel.size:
                        rel = np.bincount(dev[sel], weights=out[sel], minlength=D)
                        sel = sel[out[sel] > 0]
                        rel_src = list(zip(dev[sel].tolist(), last_use[sel].tolist(), out[sel].tolist()))
                    else:
                        rel = zeros
                else:
                    rel = zeros
                blocked = tight & (open_out - rel + out[t] > cap)
                if blocked.any():
                    lb = np.where(blocked, math.inf, lb)      # out of the running entirely
                    tight &= ~blocked
            else:
                tight = None
        eft_u = eft if tight is None else np.where(tight | np.isinf(lb), math.inf, eft)
        best = int(eft_u.argmin())
        best_eft = float(eft_u[best])
        best_st = float(est[best])
        best_gap = None
        # Devices where a better slot may exist: an idle gap before the append position (pruned
        # by the longest-gap bound), or any slot on a device whose memory must be checked.
        # A gap can only hold t if it ends at or after ready + w: the last gap's end decides for
        # the whole device, as the search's first bisection would.
        maybe = (ready < avail) & (maxgap >= w) & (gap_end >= ready + w)
        if tight is not None:
            maybe |= tight
        maybe &= lb <= best_eft
        maybe &= np.isfinite(lb)
        cand = maybe.nonzero()[0]
        if cand.size:
            if cand.size > 1:
                cand = cand[np.lexsort((cand, lb[cand]))]
            for d in cand.tolist():
                l = lb[d]  # noqa: E741
                if l > best_eft or (l == best_eft and d > best):
                    break
                wd = float(w[d])
                if tight is not None and tight[d]:
                    res = mem_fit(d, t, float(ready[d]), wd, float(est[d]), [(l, a) for q, l, a in rel_src if q == d])  # noqa: E741
                    if res is None:
                        continue
                    gi, st = res
                else:
                    res = gap_fit(d, float(ready[d]), wd)
                    if res is None:
                        continue
                    gi, st = res
                e = st + wd if bias is None else st + wd + float(bt[d])
                if e < best_eft or (e == best_eft and d < best):
                    best, best_eft, best_st, best_gap = d, e, st, gi
        if not math.isfinite(best_eft):
            return False
        d, st = best, best_st
        ft = best_eft if bias is None else st + float(w[best])
        # Place t on d.
        dev[t], start[t], finish[t], seq[t] = d, st, ft, k
        if best_gap is None:
            if st > avail[d]:
                gaps[d].append(float(avail[d]), st)
                gap_end[d] = st
                if st - avail[d] > maxgap[d]:
                    maxgap[d] = st - avail[d]
            avail[d] = ft
        else:
            gs, ge = gap_s[d], gap_e[d]
            g0, g1 = gs[best_gap], ge[best_gap]
            repl_s, repl_e = [], []
            if st > g0:
                repl_s.append(g0)
                repl_e.append(st)
            if g1 > ft:
                repl_s.append(ft)
                repl_e.append(g1)
            gaps[d].replace(best_gap, repl_s, repl_e)
            gap_end[d] = ge[-1] if ge else -math.inf
            if g1 - g0 >= maxgap[d]:
                maxgap[d] = gaps[d].longest()
        # Memory bookkeeping.
        if any_tracked:
            if tracked[d]:
                placed[d].append(t)
                out_sum[d] += out[t]
                open_out[d] += out[t]
                if mem[t] > mem_max[d]:
                    mem_max[d] = mem[t]
                prof = profiles.get(d)
                if prof is not None:
                    prof.add_task(st, ft, mem[t], out[t])
            if P is not None:
                release_inputs(P, st, last_use, pending, dev, out, finish, profiles, freed_out)
        return True

    def freed_out(dp, p):
        if tracked[dp]:
            open_out[dp] -= out[p]

    place_in_order(cost, order, dev, place)
    makespan = float(finish.max()) if T else 0.0
    return Schedule(mapper, dev, start, finish, makespan, n_devices=D, seq=seq)


def release_inputs(P, start: float, last_use, pending, dev, out, finish, profiles: dict, freed=None) -> None:
    """Account a task starting at ``start`` that consumes the outputs of tasks ``P``.

    Each producer's last use moves to ``start`` and its count of unplaced consumers drops; an
    output whose last consumer this is leaves its device's memory profile (if it has one) from
    then on, and ``freed(device, producer)`` is told (the mappers' own per-device tallies).
    The memory model is the benchmark README's: an output stays resident until its last consumer
    starts. Shared by HEFT, the placement policies and the share-aware scheduler."""
    for p in P.tolist():
        if start > last_use[p]:
            last_use[p] = start
        pending[p] -= 1
        if pending[p] == 0 and out[p] > 0:
            dp = int(dev[p])
            if freed is not None:
                freed(dp, p)
            prof = profiles.get(dp)
            if prof is not None:
                prof.add(max(last_use[p], finish[p]), math.inf, -out[p])


def is_topological(cost: CostModel, order: np.ndarray) -> bool:
    """Whether ``order`` (task positions) puts every predecessor before its successors."""
    if not cost.n_edges:
        return True
    place = np.empty(cost.n_tasks, dtype=np.int64)
    place[order] = np.arange(order.size)
    return bool((place[cost.pred_idx] < place[cost.pred_dst]).all())


def place_in_order(cost: CostModel, order, dev: np.ndarray, place) -> None:
    """Call ``place(t, k)`` for the tasks in ``order`` (the k-th placed gets ``k``) while each
    finds a device; from the first that does not (memory), or when ``order`` is not topological,
    go on by readiness (:func:`_place_rest`). ``place`` records each task's device in ``dev``."""
    order = np.asarray(order, dtype=np.int64)
    T, k = cost.n_tasks, 0
    if is_topological(cost, order):
        order_list = order.tolist()
        while k < T and place(order_list[k], k):
            k += 1
    if k < T:
        _place_rest(cost, order, k, dev, place)


def _place_rest(cost: CostModel, order: np.ndarray, k: int, dev: np.ndarray, place) -> None:
    """Finish the sweep after the task at ``order[k]`` found no device with room.

    Memory can stall the static order: every device the next task may use can be held by outputs
    whose consumers come later in the order. From there on the sweep keeps a ready list (tasks
    whose predecessors are all placed) by rank. A task that does not fit is put aside, and every
    put-aside task is tried again when the ready list runs dry (meanwhile the other placements
    release inputs and move the devices' append positions). Without memory pressure this is the
    static order. Only when a retry of every put-aside task places nothing is the mapping
    impossible for HEFT (MemHEFT of Herrmann, Marchal and Robert fails there too).

    Retrying a put-aside task as soon as some memory is released was tried: it was slower (many
    failed retries) and gave longer schedules, since the task then takes the first late slot.
    """
    T = cost.n_tasks
    prio = np.empty(T, dtype=np.int64)
    prio[order] = np.arange(T)
    unplaced = dev[cost.pred_idx] < 0
    waiting = np.bincount(cost.pred_dst[unplaced], minlength=T).tolist()
    heap = [(int(prio[t]), int(t)) for t in order[k:].tolist() if waiting[t] == 0]
    heapq.heapify(heap)
    sp, si = cost.succ_ptr, cost.succ_idx
    deferred: list[tuple[int, int]] = []
    while True:
        placed_before = k
        while heap:
            item = heapq.heappop(heap)
            t = item[1]
            if not place(t, k):
                deferred.append(item)
                continue
            k += 1
            for c in si[sp[t]:sp[t + 1]].tolist():
                waiting[c] -= 1
                if waiting[c] == 0:
                    heapq.heappush(heap, (int(prio[c]), c))
        if not deferred:
            return
        if k == placed_before:                 # a whole round of retries placed nothing
            _memory_deadlock(cost, min(deferred)[1])
        for item in deferred:
            heapq.heappush(heap, item)
        deferred = []


def _memory_deadlock(cost: CostModel, t: int):
    tid = cost.tasks[t]
    node = cost.graph.nodes[tid]
    allowed = np.isfinite(cost.time_rows()[t])
    path, line = cost.site_line(t)
    need = max(cost.mem[t], cost.out[t])
    cap = cost.capacity[allowed].max()
    big = cost.devices[int(np.flatnonzero(allowed & (cost.capacity == cap))[0])].id
    raise MappingError(
        f"task {tid} (kernel {node.get('kernel')}) needs {_size(need)} of device memory, but every device "
        f"it may run on (largest: {big}, {_size(cap)}{_oversub(cost)}) is kept full by outputs waiting "
        f"for consumers that HEFT places later",
        path=path, line=line,
        hint="add device memory or memory_oversubscription to the cluster file, or reduce mem=/out= of the kernels")
