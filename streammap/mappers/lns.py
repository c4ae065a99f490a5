"""Large-neighbourhood search over windows of a plan, each window solved with CP-SAT.

``auto`` solves the whole scheduling problem exactly only on small graphs
(:mod:`streammap.mappers.exact`). On larger ones, :func:`improve_plan` starts from ``auto``'s best
heuristic plan and repeatedly frees a *window* of it, a few dozen tasks, while everything else
keeps its device and its place in its device's order; CP-SAT re-places the window (device and
start of each of its tasks) so that what comes after it can start as soon as possible (the
makespan, when the window's model reaches the end of the plan), and the plan is replaced
whenever the result, re-timed by :func:`~streammap.mappers.schedule.simulate` (the evaluator
``auto`` compares its candidates with) and checked against every capacity, is shorter. This is
large-neighbourhood search (Shaw 1998) with adaptive neighbourhood choice (Ropke & Pisinger
2006).

State
-----
The current plan: an assignment ``device[T]``, and the order of the tasks on each device, with the
start and finish :func:`simulate` gives them. Every task runs as early as its order allows, so a
task none of whose ancestors (through data edges or device order) is in the window cannot move:
it is a *constant* of the window's model (a fixed interval on its device, a fixed arrival time of
its outputs). Only the window's own tasks choose a device and a place among the others on their
device. The first of the window's descendants, in order of start, up to :data:`VARIABLE_TASKS`
tasks with the window, keep their device and order but their start is a variable; the
descendants past them are *beyond*: fixed intervals at their start in the plan, and *needs*: the
instants by which their inputs (and device turns) must be there.

Windows, and the order they are tried in (:func:`windows`, :func:`improve_plan`)
--------------------------------------------------------------------------------
1. **Critical-path stretches**: :data:`PATH_STRETCH` consecutive tasks of the plan's critical path
   (:func:`~streammap.mappers.local_search.critical_path`) with their data neighbours and the
   tasks that overlap them in time, up to :data:`WINDOW_TASKS` tasks; the stretches that waste the
   most first (:func:`path_waste`: time on a slower device than the task's fastest, waits for a
   transfer or an idle device), where a window is likely to pay.
2. **Device pairs**: the tasks of two devices nearest in time to the critical path's tasks on
   them; first the pairs the critical path transfers between, by the time it waits for those
   transfers, then the device running most of the path with each other device.
3. **Time slices**: the tasks in consecutive slices of the plan's time (by start), from the end.

Two kinds that target communication (a dear crossing edge's two ends with their neighbourhoods; a
node's tasks re-placed among its devices) were tried in ``auto``'s adaptive rounds, measured, left
off and removed (docs/measurements.md, "Adaptive search").

The kinds are chosen adaptively (Ropke & Pisinger 2006, with scores instead of random draws):
the next window is the next one of the kind with the best record so far (improvements + 1 over
tries + 2). After an improvement the windows are computed again on the new plan, and the few
that share a task with the improving window come first (the neighbourhood it changed may now
give more). The search ends when the budget in windows is spent (:func:`window_budget`), when
:data:`PATIENCE` windows in a row improved nothing, or when every window of the plan was tried.

The model of a window
---------------------
As :mod:`streammap.mappers.exact` (the model of the cost model: eligibility, transfer times per
device pair from whichever devices the two ends take, one task at a time per device), restricted
as above. The objective is the *shift* of the window's boundary: the largest of (end of a variable
sink - the plan's makespan) and (arrival of an input or device turn at a task beyond - its start
in the plan), at most 0. When every descendant is a variable it is the makespan less the plan's;
otherwise every task beyond can start that much sooner, as far as the window is concerned.
Times are whole *ticks* rounded down (:func:`streammap.mappers.exact.tick_for`, at most
:data:`WINDOW_TICKS` over the plan: a tick of a millionth of the plan or more), so the current
plan, its times rounded down, satisfies every constraint and is given to CP-SAT as its hint: the
window's solution is never worse in the model than the plan it came from. It is solved by
:func:`streammap.mappers.exact.solve_model`, and kept only when the plan it gives, re-timed, is
shorter (a gain within the rounding is none). Memory is not in the window's model: a window
solution that the re-timing shows to break a capacity is dropped (the plan in hand is kept).

Cost
----
A window costs about a tenth of a second of one core on graphs of a hundred tasks
(:func:`window_seconds`), and almost all of it is CP-SAT's search: building the model is about
0.02 s and presolve 0.06 s, while :data:`WINDOW_WORK` deterministic seconds of search take far
more CPU than they count on these models. Two things made windows four times cheaper than the
first version's (0.4 s): the coarse tick (with 1 ns ticks CP-SAT spent its budget on a chain of
improvements of a few nanoseconds each) and smaller windows (25 tasks, 60 variables, half the
budget), which gain as much per window. Restricting a task to a shortlist of devices halved the
cost again but lost half the gain, and is left out.

Determinism
-----------
CP-SAT runs one worker with a fixed seed and a budget in deterministic time
(``max_deterministic_time``, :data:`WINDOW_WORK`), windows come in a fixed order, and ties are
broken by task position: the same inputs give the same plan on any machine, under any load.

References
----------
S. Ropke and D. Pisinger, "An adaptive large neighborhood search heuristic for the pickup and
delivery problem with time windows", Transportation Science 40(4), 2006. P. Shaw, "Using
constraint programming and local search methods to solve vehicle routing problems", CP 1998.
"""

from __future__ import annotations

import math

import numpy as np

from streammap.cost.model import CostModel
from streammap.mappers.exact import solve_model, tick_for, to_units
from streammap.mappers.local_search import critical_path
from streammap.mappers.schedule import MEM_RTOL, Schedule, fits, peak_memory, simulate

__all__ = ["improve_plan", "windows", "path_waste", "solve_window", "window_budget", "window_seconds", "LNS_MAX_TASKS",
           "WINDOW_TASKS"]

#: Graphs of more tasks get no LNS: a window there costs more than the budget for their size allows
#: (:func:`window_budget` is 1 at 2,000 tasks, 0 soon after).
LNS_MAX_TASKS = 2_000
#: Most tasks freed in one window.
WINDOW_TASKS = 25
#: Tasks of the critical path in one critical-path window (the rest of the window is their
#: neighbourhood).
PATH_STRETCH = 12
#: Most tasks whose start is a variable of a window's model: the window and the first of its
#: descendants (:func:`_variables`); the model of a window early in a large plan stays small.
VARIABLE_TASKS = 60
#: Most ticks in a window's horizon (:func:`~streammap.mappers.exact.tick_for`): a tick of a
#: millionth of the plan or more. Finer ticks (the exact model's 1 ns) let CP-SAT spend its budget
#: on improvements of a few nanoseconds, one after the other.
WINDOW_TICKS = 1_000_000
#: CP-SAT's budget for one window, in deterministic seconds.
WINDOW_WORK = 0.01
#: CP-SAT's linear relaxation in a window (``linearization_level``): 0, propagation alone, explores
#: far more of a small window within the budget than the full relaxation the exact model uses.
LINEARIZATION = 0
#: The kinds of window, in the order they are preferred at equal record.
KINDS = ("path", "pair", "slice")
#: Consecutive windows that shorten nothing before the search stops.
PATIENCE = 10
#: Most windows around the last improvement tried first (of those sharing a task with it).
FOCUS_WINDOWS = 4
#: Most mapping time, in seconds of one core, the search spends on one graph (12 windows of the
#: first version at its assumed 0.5 s each) ...
LNS_SECONDS = 6.0
#: ... and on a graph of T tasks, ``LNS_TASK_SECONDS / T`` (a window's model grows with the graph).
LNS_TASK_SECONDS = 1_500.0
#: Share of a plan's makespan worth spending on its search (a product rule: compile time should
#: not exceed about 1% of the run it plans): a plan of a few seconds, which no window can shorten
#: by the time it costs, gets none; one of an hour gets the whole budget.
PLAN_SHARE = 0.01
#: Mapping time of one window, in seconds of one core: model building, presolve and
#: :data:`WINDOW_WORK` deterministic seconds of search (which counts far less than the CPU time it
#: takes), ``WINDOW_SECONDS + WINDOW_TASK_SECONDS * T`` on a graph of T tasks (the model holds the
#: fixed tasks the window may meet). Fitted to the windows of the generated suite's tune seeds
#: (README, "Large-neighbourhood search"); constants, never measured at run time: plans stay the
#: same on every machine.
WINDOW_SECONDS = 0.1
WINDOW_TASK_SECONDS = 0.0003


def window_budget(n_tasks: int, makespan: float = math.inf) -> int:
    """Windows :func:`improve_plan` solves on a graph of ``n_tasks`` tasks whose best plan takes
    ``makespan`` seconds (0: no LNS).

    The search may spend the least of :data:`LNS_SECONDS`, ``LNS_TASK_SECONDS / n_tasks`` and
    :data:`PLAN_SHARE` of the makespan, at :func:`window_seconds` a window; none above
    :data:`LNS_MAX_TASKS` tasks.

    Examples
    --------
    >>> window_budget(100), window_budget(700), window_budget(10_000)
    (46, 6, 0)
    >>> window_budget(100, makespan=0.068), window_budget(100, makespan=60.0)
    (0, 4)
    """
    if n_tasks > LNS_MAX_TASKS:
        return 0
    seconds = min(LNS_SECONDS, LNS_TASK_SECONDS / max(1, n_tasks))
    if math.isfinite(makespan):
        seconds = min(seconds, max(0.0, makespan * PLAN_SHARE))
    return int(seconds / window_seconds(n_tasks) + 1e-9)


def window_seconds(n_tasks: int) -> float:
    """Mapping time of one window on a graph of ``n_tasks`` tasks, in seconds of one core (the
    fitted constants :data:`WINDOW_SECONDS` and :data:`WINDOW_TASK_SECONDS`)."""
    return WINDOW_SECONDS + WINDOW_TASK_SECONDS * n_tasks


def _orders(schedule: Schedule, cost: CostModel) -> list[np.ndarray]:
    return schedule.order() if schedule.n_devices == cost.n_devices else Schedule(
        schedule.mapper, schedule.device, schedule.start, schedule.finish, schedule.makespan,
        n_devices=cost.n_devices, seq=schedule.seq).order()


def _nearest_in_time(cost: CostModel, plan: Schedule, core: list[int], extra: np.ndarray, limit: int) -> np.ndarray:
    """``core`` and then the tasks of ``extra`` nearest in time to the core's span, ``limit`` in all
    (ties: task position)."""
    core_arr = np.unique(np.asarray(core, dtype=np.int64))
    if core_arr.size >= limit:
        return np.sort(core_arr[:limit])
    extra = np.setdiff1d(extra, core_arr)
    lo, hi = plan.start[core_arr].min(), plan.finish[core_arr].max()
    mid = 0.5 * (plan.start[extra] + plan.finish[extra])
    dist = np.maximum(0.0, np.maximum(lo - mid, mid - hi))
    take = extra[np.lexsort((extra, dist))][:limit - core_arr.size]
    return np.sort(np.concatenate([core_arr, take]))


def path_waste(cost: CostModel, plan: Schedule, path: list[int]) -> np.ndarray:
    """What each task of the critical ``path`` (last task first) loses: its time on its device less
    its time on its fastest one, plus the wait between its path predecessor's end and its start
    (a transfer, or an idle gap). A stretch of the path that loses nothing can still gain (another
    task may leave its device), but one that loses much is where a window is likely to pay."""
    p = np.asarray(path, dtype=np.int64)
    if p.size == 0:
        return np.zeros(0)
    best = np.where(np.isfinite(cost.time[p]), cost.time[p], np.inf).min(axis=1)
    slow = cost.time[p, plan.device[p]] - best
    wait = np.zeros(p.size)
    wait[:-1] = plan.start[p[:-1]] - plan.finish[p[1:]]
    return np.maximum(0.0, slow) + np.maximum(0.0, wait)


def windows(cost: CostModel, plan: Schedule) -> list[tuple[str, np.ndarray]]:
    """The windows of ``plan`` to try, each kind in its order of promise (see the module docstring).

    Returns
    -------
    list of (str, ndarray of int)
        A kind of :data:`KINDS` (``"path"``, ``"pair"``, ``"slice"``) and the sorted task positions
        of each window; no window twice. Path windows by decreasing waste of their stretch
        (:func:`path_waste`), pair windows by decreasing transfer time between the pair's devices
        along the critical path, slices from the end of the plan backwards.
    """
    T, D = cost.n_tasks, cost.n_devices
    out: list[tuple[str, np.ndarray]] = []
    seen: set[bytes] = set()

    def add(kind, tasks):
        tasks = np.asarray(tasks, dtype=np.int64)
        key = tasks.tobytes()
        if tasks.size >= 2 and key not in seen:
            seen.add(key)
            out.append((kind, tasks))

    path = critical_path(cost, plan.device, plan.start, plan.finish)
    waste = path_waste(cost, plan, path)
    sp, si, pp, pi = cost.succ_ptr, cost.succ_idx, cost.pred_ptr, cost.pred_idx
    starts = list(range(0, max(1, len(path) - PATH_STRETCH // 2), PATH_STRETCH // 2)) if path else []
    stretches = [path[i:i + PATH_STRETCH] for i in starts]
    by_waste = sorted(range(len(stretches)), key=lambda k: (-waste[starts[k]:starts[k] + PATH_STRETCH].sum(), k))
    for k in by_waste:
        stretch = stretches[k]
        nb = [si[sp[t]:sp[t + 1]] for t in stretch] + [pi[pp[t]:pp[t + 1]] for t in stretch]
        lo, hi = plan.start[stretch].min(), plan.finish[stretch].max()
        overlap = np.flatnonzero((plan.finish > lo) & (plan.start < hi))
        near = np.unique(np.concatenate([*nb, overlap]))
        add("path", _nearest_in_time(cost, plan, stretch, near, WINDOW_TASKS))
    if D > 1 and path:
        for a, b, core in _pairs(cost, plan, path):
            on = np.flatnonzero((plan.device == a) | (plan.device == b))
            add("pair", _nearest_in_time(cost, plan, core, on, WINDOW_TASKS))
    # Time slices, from the end of the plan backwards (where the makespan is decided).
    by_start = np.lexsort((np.arange(T), plan.start))
    for end in range(T, 0, -WINDOW_TASKS // 2):
        add("slice", np.sort(by_start[max(0, end - WINDOW_TASKS):end]))
    return out


def _pairs(cost: CostModel, plan: Schedule, path: list[int]) -> list[tuple[int, int, list[int]]]:
    """Device pairs for pair windows, each with the tasks of the path on it (its core).

    First the pairs between which the critical path transfers, by decreasing transfer time (the
    wait of a path task for its path predecessor on the other device); then the device that runs
    most of the path with each other device, busiest first."""
    D = cost.n_devices
    dev = plan.device
    p = np.asarray(path, dtype=np.int64)
    cross = {}
    for i in range(p.size - 1):
        c, q = int(p[i]), int(p[i + 1])
        if dev[c] != dev[q]:
            key = (min(int(dev[c]), int(dev[q])), max(int(dev[c]), int(dev[q])))
            cross[key] = cross.get(key, 0.0) + max(0.0, float(plan.start[c] - plan.finish[q]))
    pairs = [k for k, _ in sorted(cross.items(), key=lambda kv: (-kv[1], kv[0]))]
    busy = np.bincount(dev[p], weights=(plan.finish - plan.start)[p], minlength=D)
    hot = int(np.argmax(busy))
    pairs += [(min(hot, d), max(hot, d)) for d in np.argsort(-busy, kind="stable").tolist() if d != hot]
    out, seen = [], set()
    for a, b in pairs:
        if (a, b) in seen:
            continue
        seen.add((a, b))
        core = [int(t) for t in p if dev[t] in (a, b)][:PATH_STRETCH]
        if not core:                   # the pair's task nearest to the end of the path
            on = np.flatnonzero((dev == a) | (dev == b))
            if on.size == 0:
                continue
            core = [int(on[np.argmin(np.abs(plan.finish[on] - plan.finish[p[0]]))])]
        out.append((a, b, core))
    return out


def solve_window(cost: CostModel, plan: Schedule, window: np.ndarray, *, work: float | None = None,
                 seed: int = 0) -> Schedule | None:
    """Re-place the tasks of ``window`` for the least makespan, the rest of ``plan`` kept in order.

    Parameters
    ----------
    cost : CostModel
    plan : Schedule
        A plan re-timed by :func:`~streammap.mappers.schedule.simulate` (every task as early as its
        order allows), on every device of ``cost``.
    window : ndarray of int
        The task positions freed (device and start).
    work : float, optional
        CP-SAT's budget in deterministic seconds (default :data:`WINDOW_WORK`).
    seed : int
        CP-SAT's random seed.

    Returns
    -------
    Schedule or None
        The solver's plan re-timed by ``simulate``, when it is shorter than ``plan`` (a gain in the
        model alone, within the rounding to ticks, is none); ``None`` otherwise. Memory is not
        checked here (:func:`improve_plan` does).
    """
    from ortools.sat.python import cp_model  # noqa: PLC0415
    T, D = cost.n_tasks, cost.n_devices
    dev = plan.device
    order = _orders(plan, cost)
    free = np.zeros(T, dtype=bool)
    free[window] = True
    nxt = np.full(T, -1, dtype=np.int64)        # next task on the same device (the plan's order)
    for o in order:
        if o.size > 1:
            nxt[o[:-1]] = o[1:]
    var, cut = _variables(cost, plan, free, nxt)
    tick = tick_for(max(float(plan.makespan), 1e-9), WINDOW_TICKS)
    H = int(math.ceil(float(plan.makespan) / tick)) + 1
    fs = to_units(plan.start, tick)
    ff = to_units(plan.finish, tick)
    elig = np.isfinite(cost.time)
    dur = np.where(elig, to_units(np.where(elig, cost.time, 0.0), tick), 0)
    lat, inv = cost.lat, cost.inv_bw

    def comm(b, a, ds):
        """Transfer ticks of ``b`` bytes from device ``a`` to each device of ``ds`` (0 on ``a``)."""
        row = to_units(lat[a, ds] + b * inv[a, ds], tick)
        row[np.asarray(ds) == a] = 0
        return row.tolist()

    m = cp_model.CpModel()
    s, e, x = {}, {}, {}
    by_dev: list[list] = [[] for _ in range(D)]
    for t in np.flatnonzero(var).tolist():
        s[t] = m.NewIntVar(0, H, f"s{t}")
        if free[t]:
            e[t] = m.NewIntVar(0, H, f"e{t}")
            xt = {}
            for d in np.flatnonzero(elig[t]).tolist():
                lit = m.NewBoolVar(f"x{t}_{d}")
                by_dev[d].append(m.NewOptionalIntervalVar(s[t], int(dur[t, d]), e[t], lit, f"i{t}_{d}"))
                xt[d] = lit
            m.AddExactlyOne(xt.values())
            m.Add(e[t] == s[t] + sum(int(dur[t, d]) * xt[d] for d in xt))
            x[t] = xt
        else:
            e[t] = s[t] + int(dur[t, dev[t]])
            by_dev[int(dev[t])].append(m.NewIntervalVar(s[t], int(dur[t, dev[t]]), e[t], f"i{t}"))
    # Fixed intervals: the tasks that are not variables, where a window task could meet them (after
    # the earliest instant any window task can start).
    lo_free = H
    for t in np.flatnonzero(free).tolist():
        P = cost.pred_idx[cost.pred_ptr[t]:cost.pred_ptr[t + 1]]
        lo_free = min(lo_free, int(ff[P].max()) if P.size and not var[P].any() else 0)
    for t in np.flatnonzero(~var & (ff > lo_free) & (ff > fs)).tolist():
        by_dev[int(dev[t])].append(m.NewIntervalVar(int(fs[t]), int(ff[t] - fs[t]), int(ff[t]), f"c{t}"))
    for d in range(D):
        if len(by_dev[d]) > 1:
            m.AddNoOverlap(by_dev[d])
    # The objective: how much later than in the plan the boundary is reached (negative: sooner).
    # Its terms: every variable sink against the makespan, and every input or device turn a task
    # beyond the variables waits for, against that task's start.
    Z = m.NewIntVar(-H, 0, "shift")
    hint_z = -H
    hint_end = {t: int(fs[t] + dur[t, dev[t]]) for t in s}

    def boundary(expr, need: int, hint_value: int):
        nonlocal hint_z
        m.Add(Z >= expr - need)
        hint_z = max(hint_z, hint_value - need)

    for t in np.flatnonzero(var & (cost.n_succ == 0)).tolist():
        boundary(e[t], int(ff.max()), hint_end[t])
    # The order of the tasks outside the window, on each device.
    for o in order:
        rest = [int(t) for t in o if not free[t]]
        for a, b in zip(rest, rest[1:]):
            if var[b]:
                m.Add(s[b] >= (e[a] if var[a] else int(ff[a])))
            elif cut[b] and var[a]:
                boundary(e[a], int(fs[b]), hint_end[a])
    # Transfers into a variable task, and from a variable task to a task beyond the variables.
    edges = np.flatnonzero(var[cost.pred_dst] | (cut[cost.pred_dst] & var[cost.pred_idx])).tolist()
    for k in edges:
        p, c, b = int(cost.pred_idx[k]), int(cost.pred_dst[k]), float(cost.pred_bytes[k])
        end_p = e[p] if var[p] else int(ff[p])
        if free[c]:
            dc = list(x[c])
            if not free[p]:
                m.Add(s[c] >= end_p + sum(v * x[c][d] for v, d in zip(comm(b, int(dev[p]), dc), dc) if v))
                continue
            m.Add(s[c] >= end_p)
            for a in x[p]:
                row = comm(b, a, dc)
                if any(row):
                    m.Add(s[c] >= end_p + sum(v * x[c][d] for v, d in zip(row, dc) if v)).OnlyEnforceIf(x[p][a])
            continue
        if free[p]:
            pa = list(x[p])
            row = [comm(b, a, [int(dev[c])])[0] for a in pa]
            arrival = end_p + sum(v * x[p][a] for v, a in zip(row, pa) if v)
            hint_arrival = hint_end[p] + row[pa.index(int(dev[p]))]
        else:
            gap = comm(b, int(dev[p]), [int(dev[c])])[0]
            arrival = end_p + gap
            hint_arrival = (hint_end[p] if var[p] else int(ff[p])) + gap
        if var[c]:
            m.Add(s[c] >= arrival)
        else:
            boundary(arrival, int(fs[c]), hint_arrival)
    m.Minimize(Z)
    # Hint: the plan itself, its times rounded down (it satisfies every constraint above).
    for t in s:
        m.AddHint(s[t], int(fs[t]))
        if free[t]:
            m.AddHint(e[t], hint_end[t])
            for d, lit in x[t].items():
                m.AddHint(lit, d == dev[t])
    m.AddHint(Z, hint_z)
    solver, status = solve_model(m, work=WINDOW_WORK if work is None else work, seed=seed,
                                 linearization=LINEARIZATION)
    # Rounding down loses under a tick per duration and per transfer along a path: a gain in the
    # model may be none in the plan, which the re-timing below and the caller's comparison show.
    if status not in ("OPTIMAL", "FEASIBLE") or solver.Value(Z) >= hint_z:
        return None
    new_dev = dev.copy()
    key = fs.copy()
    for t in s:
        key[t] = solver.Value(s[t])
        if free[t]:
            new_dev[t] = next(d for d, lit in x[t].items() if solver.BooleanValue(lit))
    # Per-device order by the solver's start; ties by topological place (zero-length tasks).
    o = np.lexsort((cost.topo_index, key, new_dev))
    orders = [o[new_dev[o] == d] for d in range(D)]
    try:
        got = simulate(cost, new_dev, orders, mapper=plan.mapper)
    except ValueError:                 # an order the rounding made contradict a dependency
        return None
    return got if got.makespan < plan.makespan else None


def _variables(cost: CostModel, plan: Schedule, free: np.ndarray, nxt: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The tasks whose start is a variable of a window's model, and the tasks beyond them.

    The window's tasks and, in order of start, their descendants through data edges and device
    order, up to :data:`VARIABLE_TASKS` tasks in all; the descendants past that are *beyond*: fixed
    at their start in the plan, which the objective measures the variables' outputs against.
    Every other task cannot move (none of its ancestors is in the window).
    """
    T = cost.n_tasks
    down = free.copy()
    var = np.zeros(T, dtype=bool)
    room = max(0, VARIABLE_TASKS - int(free.sum()))     # descendants that may still be variables
    for t in _plan_order(plan, cost):
        if not down[t]:
            continue
        if free[t] or room > 0:
            var[t] = True
            room -= int(not free[t])
        for c in cost.succ_idx[cost.succ_ptr[t]:cost.succ_ptr[t + 1]].tolist():
            down[c] = True
        if nxt[t] >= 0:
            down[nxt[t]] = True
    return var, down & ~var


def _plan_order(plan: Schedule, cost: CostModel) -> list[int]:
    """The tasks in order of start (then finish, then topological place): every data and device
    predecessor of a task comes before it."""
    return np.lexsort((cost.topo_index, plan.finish, plan.start)).tolist()


def improve_plan(cost: CostModel, plan: Schedule, *, max_windows: int | None = None,
                 work: float | None = None, seed: int = 0) -> Schedule:
    """Large-neighbourhood search from ``plan`` (see the module docstring).

    Parameters
    ----------
    cost : CostModel
    plan : Schedule
        A valid plan (memory-valid when memory binds) on every device of ``cost``.
    max_windows : int, optional
        Windows to solve (default :func:`window_budget` of the graph's size).
    work : float, optional
        CP-SAT's budget per window, in deterministic seconds (default :data:`WINDOW_WORK`).
    seed : int
        CP-SAT's random seed.

    Returns
    -------
    Schedule
        A plan re-timed by :func:`~streammap.mappers.schedule.simulate`, memory-valid, strictly
        shorter than ``plan``; or ``plan`` itself when no window shortened it.
    """
    budget = window_budget(cost.n_tasks) if max_windows is None else max_windows
    if budget <= 0 or cost.n_tasks < 2:
        return plan
    cap = cost.capacity
    check_mem = bool(np.isfinite(cap).any())
    try:
        cur = simulate(cost, plan.device, _orders(plan, cost), mapper=plan.mapper)
    except ValueError:
        return plan
    if cur.makespan > plan.makespan * (1.0 + MEM_RTOL):
        return plan
    best = plan
    wins = {kind: 0 for kind in KINDS}
    tries = {kind: 0 for kind in KINDS}
    queue = _Queue(windows(cost, cur), None)
    fails = 0
    for _ in range(budget):
        if fails >= PATIENCE:
            break
        nxt = queue.pop(wins, tries)
        if nxt is None:
            break
        kind, w = nxt
        tries[kind] += 1
        got = solve_window(cost, cur, w, work=work, seed=seed)
        if got is None or not got.makespan < cur.makespan or (
                check_mem and not fits(peak_memory(cost, got.device, got.start, got.finish), cap).all()):
            fails += 1
            continue
        wins[kind] += 1
        fails = 0
        cur = got
        if cur.makespan < best.makespan:
            best = cur
        queue = _Queue(windows(cost, cur), w)
    return best


class _Queue:
    """The windows of one plan, handed out in the order :func:`improve_plan` tries them.

    First those that share a task with ``focus`` (the window of the last improvement: the
    neighbourhood it changed may now give more), then, one at a time, the next window of the kind
    with the best record so far (successes + 1 over tries + 2, ties in :data:`KINDS` order): the
    adaptive choice of neighbourhood of Ropke & Pisinger, with scores instead of random draws.
    """

    def __init__(self, cands: list[tuple[str, np.ndarray]], focus: np.ndarray | None):
        self.first: list[tuple[str, np.ndarray]] = []
        self.rest: dict[str, list[np.ndarray]] = {kind: [] for kind in KINDS}
        for kind, w in cands:
            if focus is not None and len(self.first) < FOCUS_WINDOWS and np.intersect1d(w, focus).size:
                self.first.append((kind, w))
            else:
                self.rest[kind].append(w)
        self.first.reverse()
        for ws in self.rest.values():
            ws.reverse()

    def pop(self, wins: dict[str, int], tries: dict[str, int]) -> tuple[str, np.ndarray] | None:
        if self.first:
            return self.first.pop()
        left = [k for k in KINDS if self.rest[k]]
        if not left:
            return None
        kind = max(left, key=lambda k: ((wins[k] + 1) / (tries[k] + 2), -KINDS.index(k)))
        return kind, self.rest[kind].pop()
