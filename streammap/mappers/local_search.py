"""Local search on a schedule: move tasks of the critical path to other devices.

A schedule is re-timed for a given assignment by :class:`FixedAssignment`: list scheduling in a
fixed priority order (a topological order) where every task's device is given and only its
start is chosen, the earliest idle gap on that device after its inputs arrive (insertion, as
HEFT). Its estimates are exactly what :func:`streammap.mappers.schedule.simulate` gives for the
resulting device orders. Because the sweep is sequential, changing the device of the task at
place k of the order leaves every task before k untouched: the sweep restarts from the nearest
checkpoint before k (sixteen per sweep). A re-timed plan is checked against the capacities only on
a device whose tasks, all together, need more than it holds (a task holds at most the larger of its
memory and its output at any instant), so on most clusters no memory profile is built. Both halve
the cost of a re-timing without changing any plan. Nor is a move's plan profiled unless it beats
the plan the search holds: one that does not is undone whatever its memory (on a 1,056-task SoyKB
instance on ``mixed-vendors``, where memory binds, the profiles were a fifth of the search's CPU).

The priority order itself is not searched, only the assignment. On the generated suite's tune
instances of Montage and Epigenomics at CCR 1 and 10, CP-SAT given ``auto``'s final assignment and
free to choose every device's order found orders at most 0.1% shorter and proved every order within
0.6% of optimal (within 1.1% before the large-neighbourhood search); local moves of critical tasks'
priorities (0.5% at most), an event-driven "earliest ready, longest tail" dispatch (up to 9% longer)
and order moves interleaved with the moves below (noise) gained nothing worth their re-timings.

:func:`improve` then repeatedly takes the critical path of the current schedule (walking back
from the last task through whichever input or device predecessor set each start) and tries to
move one of its tasks to another device, or it and the next task of the path together, keeping a
change when it lowers the makespan, or keeps it and lowers the sum of finish times (which lets
the search cross plateaus where several paths are critical). Plans that break a device's
capacity (when memory binds) are rejected. When no move or swap (a path task exchanging devices
with the task of another device that starts nearest to it) improves, the search is iterated: the
best plan so far gets a kick (one to three of its critical tasks moved to random devices, from a
NumPy generator seeded by ``seed``) and the descent starts again from there. The effort is bounded by a number of re-timings, so
the result depends on the inputs only.

**Heavy-neighbourhood moves** (``groups=True``). When transfers cost more than the work (CCR 10),
moving one task alone to another device almost never pays: its dear edges now cross. A Montage
projection feeds its difference fits and its background correction hundreds of megabytes each;
the projection can only leave its device *together* with them. So each task of the path is also
moved with its *heavy neighbours on the same device* (:func:`heavy_neighbours`: predecessors and
successors joined by an edge whose transfer, at the mean over distinct device pairs, costs at least
the cheaper end's fastest time), to every other device; tried *first*, before the single moves
and the pairs (at CCR 10 a lone move of such a task pays the crossing, so the single moves would
spend the re-timing budget on moves that cannot pay; the figures in README were measured with
this order). Off by default: ``auto`` runs one search with them (its own candidate) beside the others.

**Budget.** :func:`improve` spends exactly the re-timings it is given (``max_runs``); how many is
``auto``'s policy: a fixed share for its first searches, then, only where the plan stays far from its
lower bound and the searches still shorten it, more rounds from the best plan, each with its own
seed (:mod:`streammap.mappers.adaptive`). A re-timing costs ``O(T + E)``, about a millisecond on a
graph of a few hundred tasks: far less than a CP-SAT window, so those rounds spend re-timings
freely and windows sparingly.
"""

from __future__ import annotations

from bisect import bisect_left

import numpy as np

from streammap.cost.model import CostModel
from streammap.mappers.grouping import scope_edge_cost
from streammap.mappers.schedule import Schedule, fits, peak_memory

__all__ = ["FixedAssignment", "heavy_neighbours", "improve"]


class FixedAssignment:
    """Re-time assignments of one graph in one priority order (see the module docstring).

    State: the last assignment re-timed, its start and finish per task, and *checkpoints* of the
    sweep (each device's end and idle gaps) every :attr:`step` places of the order. The next
    assignment is re-timed from the last checkpoint before the first place whose task changed
    device: every task before it keeps its start and finish (the sweep is sequential), so a move
    late in the order costs a short sweep. The result is the same as a full sweep's.

    Parameters
    ----------
    cost : CostModel
    order : ndarray of int
        A topological order of the task positions.
    """

    #: Most checkpoints of one sweep (each copies the devices' gap lists).
    CHECKPOINTS = 16

    def __init__(self, cost: CostModel, order: np.ndarray):
        self.cost = cost
        self.order = [int(t) for t in order]
        T = cost.n_tasks
        self.place = np.empty(T, dtype=np.int64)
        self.place[np.asarray(order, dtype=np.int64)] = np.arange(T)
        pp = cost.pred_ptr.tolist()
        pi = cost.pred_idx.tolist()
        pb = cost.pred_bytes.tolist()
        self.preds = [list(zip(pi[pp[t]:pp[t + 1]], pb[pp[t]:pp[t + 1]])) for t in range(T)]
        self.lat = cost.lat.tolist()
        self.inv = cost.inv_bw.tolist()
        self.time = cost.time
        self.rows = cost.time.tolist()
        self.count = 0                          # number of re-timings so far (effort measure)
        self.step = max(1, -(-T // self.CHECKPOINTS))
        self._last: np.ndarray | None = None    # the assignment of the last sweep
        self._start = [0.0] * T
        self._finish = [0.0] * T
        self._snaps: list = [None] * (T // self.step + 1)

    def _first_changed(self, dev: np.ndarray) -> int:
        """Place in the order of the first task whose device differs from the last sweep's."""
        if self._last is None:
            return 0
        moved = np.flatnonzero(dev != self._last)
        return int(self.place[moved].min()) if moved.size else len(self.order)

    def run(self, dev) -> tuple[np.ndarray, np.ndarray]:
        """Start and finish of every task for the assignment ``dev`` (device position per task)."""
        self.count += 1
        cost = self.cost
        T, D = cost.n_tasks, cost.n_devices
        dev = np.asarray(dev, dtype=np.int64)
        devl = dev.tolist()
        k = self._first_changed(dev) // self.step
        snap = self._snaps[k] if k > 0 else None
        if snap is None:
            k = 0
            avail = [0.0] * D
            gs: list[list[float]] = [[] for _ in range(D)]
            ge: list[list[float]] = [[] for _ in range(D)]
        else:
            avail = list(snap[0])
            gs = [list(g) for g in snap[1]]
            ge = [list(g) for g in snap[2]]
        self._last = dev.copy()
        start, finish = self._start, self._finish
        lat, inv, preds, rows, snaps = self.lat, self.inv, self.preds, self.rows, self._snaps
        step = self.step
        order = self.order
        for i in range(k * step, T):
            if i % step == 0:
                snaps[i // step] = (list(avail), [list(g) for g in gs], [list(g) for g in ge])
            t = order[i]
            d = devl[t]
            r = 0.0
            for p, b in preds[t]:
                dp = devl[p]
                if dp == d:
                    a = finish[p]
                else:
                    a = finish[p] + lat[dp][d] + b * inv[dp][d]
                if a > r:
                    r = a
            wt = rows[t][d]
            av = avail[d]
            if r >= av:
                if r > av:
                    gs[d].append(av)
                    ge[d].append(r)
                st = r
                avail[d] = r + wt
            else:
                st = None
                g_s, g_e = gs[d], ge[d]
                for j in range(bisect_left(g_e, r + wt), len(g_e)):
                    s0 = g_s[j] if g_s[j] > r else r
                    if s0 + wt <= g_e[j]:
                        st = s0
                        e1 = g_e[j]
                        repl_s, repl_e = [], []
                        if s0 > g_s[j]:
                            repl_s.append(g_s[j])
                            repl_e.append(s0)
                        if e1 > s0 + wt:
                            repl_s.append(s0 + wt)
                            repl_e.append(e1)
                        g_s[j:j + 1] = repl_s
                        g_e[j:j + 1] = repl_e
                        break
                if st is None:
                    st = av
                    avail[d] = av + wt
            start[t] = st
            finish[t] = st + wt
        return np.array(start), np.array(finish)


def critical_path(cost: CostModel, dev: np.ndarray, start: np.ndarray, finish: np.ndarray) -> list[int]:
    """Tasks of one critical path, from the last task back (see the module docstring)."""
    T = cost.n_tasks
    if T == 0:
        return []
    # Task on each device finishing at each instant (the device predecessor of a blocked start).
    ends = {}
    for t in np.argsort(finish, kind="stable").tolist():
        ends[(int(dev[t]), float(finish[t]))] = t
    t = int(np.argmax(finish))
    path = [t]
    pp, pi, pb = cost.pred_ptr, cost.pred_idx, cost.pred_bytes
    seen = {t}
    while True:
        s = start[t]
        if s <= 0.0:
            break
        nxt = None
        a, b = pp[t], pp[t + 1]
        d = dev[t]
        for k in range(a, b):
            p = pi[k]
            dp = dev[p]
            arr = finish[p] if dp == d else finish[p] + cost.lat[dp, d] + pb[k] * cost.inv_bw[dp, d]
            if arr >= s:
                nxt = int(p)
                break
        if nxt is None:
            nxt = ends.get((int(d), float(s)))
        if nxt is None or nxt in seen:
            break
        seen.add(nxt)
        path.append(nxt)
        t = nxt
    return path


def heavy_neighbours(cost: CostModel) -> list[list[int]]:
    """Each task's neighbours (predecessors and successors) across an edge dearer than its cheaper end.

    An edge is *heavy* when its transfer time, averaged over distinct device pairs
    (:func:`streammap.mappers.grouping.scope_edge_cost` at scope ``"device"``), is at least the
    smaller of its two tasks' fastest times: splitting it costs more than running either end.

    Returns
    -------
    list of list of int
        ``out[t]``: task positions, in edge order (successors and predecessors as the edges come).
    """
    T = cost.n_tasks
    out: list[list[int]] = [[] for _ in range(T)]
    if T == 0 or cost.n_edges == 0 or cost.n_devices < 2:
        return out
    src = np.repeat(np.arange(T), np.diff(cost.succ_ptr))
    dst = cost.succ_idx
    tmin = cost.min_time()
    heavy = scope_edge_cost(cost, "device") >= np.minimum(tmin[src], tmin[dst])
    for e in np.flatnonzero(heavy).tolist():
        u, w = int(src[e]), int(dst[e])
        out[u].append(w)
        out[w].append(u)
    return out


def improve(cost: CostModel, schedule: Schedule, order: np.ndarray, *, max_runs: int,
            memory_aware: bool = True, mapper: str | None = None, seed: int = 0,
            kicks: bool = True, groups: bool = False) -> Schedule:
    """Local search from ``schedule`` (see the module docstring).

    Parameters
    ----------
    cost : CostModel
    schedule : Schedule
        The start point; only its assignment is used.
    order : ndarray of int
        Topological priority order used to re-time assignments.
    max_runs : int
        At most this many re-timings (the effort bound).
    memory_aware : bool
        Reject assignments whose re-timed plan breaks a capacity.
    mapper : str, optional
        Name of the returned schedule (default: the start's name).
    seed : int
        Seed of the random kicks (iterated local search); the result depends on it and on the
        inputs only.
    kicks : bool
        When a local optimum is reached, perturb the best assignment found (move a few tasks of
        its critical path to random devices) and descend again, until the budget is spent.
    groups : bool
        Also move each path task together with its heavy neighbours on its device
        (heavy-neighbourhood moves of the module docstring).

    Returns
    -------
    Schedule
        The best schedule found (the start re-timed if nothing better was found, or the start
        itself if its re-timing is worse).
    """
    T, D = cost.n_tasks, cost.n_devices
    if T == 0 or D < 2 or max_runs < 2:
        return schedule
    fx = FixedAssignment(cost, order)
    cap = cost.capacity
    check_mem = memory_aware and bool(np.isfinite(cap).any())
    allowed = np.isfinite(cost.time)
    rng = np.random.default_rng(seed)

    # A device can only break its capacity where the needs of all its tasks together exceed it
    # (a task holds at most the larger of its memory and its output at any instant): most
    # assignments need no memory profile.
    need = np.maximum(cost.mem, cost.out)

    def score(dev, beat=None):
        """``((makespan, sum of finishes), start, finish)`` of ``dev``, or None where it breaks a
        capacity; with ``beat``, also None where the score is not below ``beat``: such a move is
        undone either way, so its memory profile (a third of a re-timing's cost where memory can
        bind) is never built."""
        s, f = fx.run(dev)
        key = (float(f.max()), float(f.sum()))
        if beat is not None and not key < beat:
            return None
        if (check_mem and (np.bincount(dev, weights=need, minlength=D) > cap).any()
                and not fits(peak_memory(cost, dev, s, f), cap).all()):
            return None
        return key, s, f

    dev = schedule.device.copy()
    got = score(dev)
    if got is None:
        return schedule
    cur, start, finish = got
    gbest, gdev, gstart, gfinish = cur, dev.copy(), start, finish
    tried: set = set()
    nbrs = heavy_neighbours(cost) if groups else []
    kinds = ("group", "single", "pair") if groups else ("single", "pair")

    def descend_step():
        """One improving move from ``dev`` (first found); True if the current plan changed."""
        nonlocal cur, start, finish
        path = critical_path(cost, dev, start, finish)
        # With ``groups``, first each path task with its heavy neighbours on its device; then single
        # moves (each task of the path, devices by speed), then pair moves (a task and the path's
        # next task, which is its critical input or device predecessor, together).
        for kind in kinds:
            for i, t in enumerate(path):
                if fx.count >= max_runs:
                    return False
                if kind == "group":
                    tasks = [t] + [u for u in nbrs[t] if dev[u] == dev[t]]
                    if len(tasks) < 2:
                        continue
                else:
                    tasks = [t] if kind == "single" else path[i:i + 2]
                    if len(tasks) < (1 if kind == "single" else 2):
                        continue
                ok = allowed[tasks].all(axis=0)
                cands = np.flatnonzero(ok)
                cands = cands[np.lexsort((cands, cost.time[t, cands]))]
                for d in cands.tolist():
                    if all(dev[u] == d for u in tasks):
                        continue
                    key = (tuple(tasks), d, cur)
                    if key in tried:
                        continue
                    tried.add(key)
                    old = dev[tasks].copy()
                    dev[tasks] = d
                    got = score(dev, cur)
                    if got is not None and got[0] < cur:
                        cur, start, finish = got
                        return True
                    dev[tasks] = old
                    if fx.count >= max_runs:
                        return False
        # Swaps: a task of the path and, on every other device, the task starting nearest to it.
        by_dev = [np.flatnonzero(dev == d) for d in range(D)]
        for t in path:
            dt = int(dev[t])
            for d in range(D):
                if d == dt or not allowed[t, d] or by_dev[d].size == 0:
                    continue
                us = by_dev[d]
                u = int(us[np.argmin(np.abs(start[us] - start[t]))])
                if not allowed[u, dt]:
                    continue
                key = ((t, u), -1, cur)
                if key in tried:
                    continue
                tried.add(key)
                dev[t], dev[u] = d, dt
                got = score(dev, cur)
                if got is not None and got[0] < cur:
                    cur, start, finish = got
                    return True
                dev[t], dev[u] = dt, d
                if fx.count >= max_runs:
                    return False
        return False

    while fx.count < max_runs:
        if descend_step():
            if cur < gbest:
                gbest, gdev, gstart, gfinish = cur, dev.copy(), start, finish
            continue
        if not kicks or fx.count >= max_runs:
            break
        # Kick: from the best plan, move a few tasks of its critical path to random devices.
        dev = gdev.copy()
        path = critical_path(cost, dev, gstart, gfinish)
        k = min(len(path), 1 + int(rng.integers(0, 3)))
        for t in rng.choice(np.asarray(path), size=k, replace=False).tolist():
            # With ``groups``, a task is kicked with its heavy neighbours on its device.
            tasks = [t] + [u for u in nbrs[t] if dev[u] == dev[t]] if groups else [t]
            ds = np.flatnonzero(allowed[tasks].all(axis=0))
            dev[tasks] = int(ds[rng.integers(0, ds.size)])
        got = score(dev)
        if got is None:
            dev = gdev.copy()
            cur, start, finish = gbest, gstart, gfinish
            continue
        cur, start, finish = got
        if cur < gbest:
            gbest, gdev, gstart, gfinish = cur, dev.copy(), start, finish
    best, dev, start, finish = gbest, gdev, gstart, gfinish
    if best[0] >= schedule.makespan:
        return schedule
    seq = np.empty(T, dtype=np.int64)
    seq[np.asarray(order, dtype=np.int64)] = np.arange(T)
    return Schedule(mapper or schedule.mapper, dev, start, finish, best[0], n_devices=D, seq=seq)
