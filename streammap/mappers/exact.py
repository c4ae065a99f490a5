"""An exact model of the benchmark's scheduling problem, solved with OR-Tools CP-SAT.

:func:`solve_exact` states the problem :func:`streammap.mappers.schedule.simulate` and
:func:`~streammap.mappers.schedule.peak_memory` score, as a constraint program, and asks CP-SAT for
a plan of least makespan and for a proof of how good it is (a lower bound on every plan's
makespan). The ``optimal`` mapper (:mod:`streammap.mappers.optimal`) and ``auto`` call it on
small graphs.

The model
---------
For every task t: a start ``s[t]`` and end ``e[t]``; for every device d where t can run (finite
time) a literal ``x[t, d]`` and an optional interval ``[s[t], e[t])`` of length ``dur[t, d]``
present when ``x[t, d]``; exactly one ``x[t, ·]`` holds. Then, as the benchmark model says:

* **eligibility**: no literal exists for a device where t's time is ``inf`` (nor where its
  ``mem`` or ``out`` alone exceeds the capacity);
* **one task per device at a time**: one no-overlap constraint per device over its intervals;
* **transfers**: for an edge p → c of b bytes, ``s[c] >= e[p]``, and for each device ``a`` of p,
  if ``x[p, a]`` then ``s[c] >= e[p] + sum over devices d of c of comm(a, d) x[c, d]`` with
  ``comm(a, d) = lat[a, d] + b / bw[a, d]`` (0 when ``a == d``): exactly the arrival time the
  simulator uses, whichever pair of devices the two tasks take;
* **memory**, on the devices where it can bind (the tasks that may run there need more than the
  capacity in all): a cumulative constraint per device holding ``mem[t]`` over ``[s[t], e[t])``
  and ``out[t]`` over ``[e[t], L[t])``, ``L[t]`` the latest start among t's consumers (the
  benchmark README's residency), against the capacity (with :data:`~streammap.mappers.schedule.MEM_RTOL`);
* **objective**: the makespan ``M >= e[t]`` for every sink, minimised; and, redundant but a strong
  cut for the linear relaxation, ``M >= sum over t of dur[t, d] x[t, d]`` on every device, and
  ``M >=`` the analytic bound (critical path, area, fork-join, fan-out; :func:`analytic_bound`) in ticks
  (optional, off by default: :data:`FEATURES`);
* **symmetry breaking** (optional, off by default: :data:`FEATURES`): devices that are interchangeable (one class on one node, the same
  capacity, and swapping them changes no link: :func:`interchangeable_groups`) are loaded in
  order: ``sum over t of dur[t, d] x[t, d]`` does not increase along a group. Every plan has a
  renaming of that form (:func:`canonical_devices`, applied to the hint), so the optimum is
  unchanged while the search no longer visits all ``k!`` renamings of each plan on a group of
  ``k`` devices.

Ordering the devices of a group by their *first task* instead (device j takes a task only after
device j - 1 took an earlier one, topologically) was tried first and left out: with it, CP-SAT
9.15's presolve reported some feasible models INFEASIBLE (the 30- and 40-task ``small-memory``
and 50-task ``hetero-2x4`` random DAGs at CCR 10; the same model with the hint fixed, or without
presolve, is feasible), a wrong answer the load order does not give on them.
A cumulative constraint per group of interchangeable devices (at most ``k`` of its tasks at once)
was tried as a further redundant constraint and left out: on the 30-task random DAGs it slowed the
search (a case proved in 2 deterministic seconds without it was not proved with it).

Rounding
--------
CP-SAT works on integers. Times are counted in a *tick*: 1 ns, or the power-of-ten multiple of
it that keeps the horizon (the warm start's makespan) below :data:`MAX_TICKS`; every duration and
transfer time is rounded **down** to whole ticks. Bytes are counted in a power-of-two unit that
keeps the largest finite capacity below :data:`MAX_BYTE_UNITS`; demands are rounded **down** and
capacities **up**. So every real plan, its times rounded down, is a solution of the integer
model: the integer model is a *relaxation*, and the solver's bound times the tick is a valid lower
bound on the real makespan of every plan.

The solution is then turned back into a plan by its assignment and per-device order (by integer
start), re-timed by :func:`~streammap.mappers.schedule.simulate`: the makespan written is the
project's model, not the solver's rounding, and a plan the re-timing makes memory-invalid (the
solver may hold a task back on an idle device to save memory; a plan cannot) is dropped.

Determinism
-----------
One worker, or on request (``auto``) one worker on :data:`SINGLE_SHARE` of the budget (on graphs
of at most :data:`SINGLE_FIRST_MAX_TASKS` tasks: it stops at a proof, which small models reach at
once) and then, warm-started from its plan, CP-SAT's
interleaved search (``interleave_search``: :data:`WORKERS` subsolvers, among them
large-neighbourhood search, run in batches that synchronise in a fixed order, which the solver
documents as independent of the number of threads and of their timing), a fixed seed, and a work
budget in CP-SAT's *deterministic time* (``max_deterministic_time``, roughly seconds of work on a
reference machine), never wall time: the same inputs give the same plan on any machine and under
any load.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from streammap.cost.model import CostModel, combined_bound
from streammap.errors import MappingError
from streammap.mappers.schedule import MEM_RTOL, Schedule, fits, peak_memory, simulate

__all__ = ["ExactResult", "available", "interchangeable_groups", "model_size", "solve_exact", "solve_model",
           "tick_for", "to_units", "MAX_TICKS", "MAX_BYTE_UNITS"]

#: Largest horizon in ticks (the tick grows by powers of ten past 1 ns to stay below it).
MAX_TICKS = 2**31
#: Largest finite capacity in byte units (the unit grows by powers of two to stay below it).
MAX_BYTE_UNITS = 2**20
#: CP-SAT's search workers, interleaved deterministically (``interleave_search``).
WORKERS = 4
#: Share of the budget of an interleaved solve that one worker gets first (it stops at a proof) ...
SINGLE_SHARE = 0.3
#: ... on graphs of at most this many tasks. Measured on the random DAGs (README, "auto's exact
#: search"): at 10-20 tasks the same plans for a third of the CPU; at 30-40 tasks nothing is proven
#: in auto's budget and the interleaved search, given all of it, finds plans up to 7% shorter.
SINGLE_FIRST_MAX_TASKS = 20
#: The model's optional parts: ``symmetry`` (symmetry breaking among interchangeable devices),
#: ``bound`` (the analytic lower bound as a constraint on the makespan). Both off: on the random
#: DAGs of 30-50 tasks neither proved a case the plain model did not within 2 deterministic
#: seconds, and with symmetry breaking the plans found were longer (README, "auto's exact search").
FEATURES = {"symmetry": False, "bound": False}


def available() -> bool:
    """Whether OR-Tools can be imported (``auto`` skips the exact step otherwise)."""
    try:
        import ortools.sat.python.cp_model  # noqa: F401, PLC0415
    except ImportError:
        return False
    return True


def model_size(cost: CostModel) -> int:
    """Terms of the model: a measure of the work of building and solving it.

    ``sum over edges of |devices of p| x |devices of c|`` (the transfer constraints) plus
    ``sum over tasks of |devices of t|`` (the literals).
    """
    elig = np.isfinite(cost.time).sum(axis=1)
    if not cost.n_edges:
        return int(elig.sum())
    return int((elig[cost.pred_idx] * elig[cost.pred_dst]).sum() + elig.sum())


@dataclass
class ExactResult:
    """What :func:`solve_exact` found.

    Attributes
    ----------
    schedule : Schedule or None
        The solver's plan re-timed by :func:`~streammap.mappers.schedule.simulate`, if it found
        one that is also memory-valid after re-timing; ``None`` otherwise.
    bound : float
        Lower bound, in seconds, on the makespan of every plan of the graph (0 if none proved).
    optimal : bool
        Whether the solver proved its solution optimal (for the integer model).
    status : str
        CP-SAT's status name (``OPTIMAL``, ``FEASIBLE``, ``UNKNOWN``, ...).
    """

    schedule: Schedule | None
    bound: float
    optimal: bool
    status: str


def tick_for(horizon: float, max_ticks: int = MAX_TICKS) -> float:
    """Seconds per tick: 1 ns, times ten until ``horizon`` is below ``max_ticks`` ticks.

    Examples
    --------
    >>> tick_for(1.0), tick_for(12_000.0, max_ticks=1_000_000)
    (1e-09, 0.1)
    """
    tick = 1e-9
    while horizon / tick >= max_ticks:
        tick *= 10.0
    return tick


def _byte_unit(cost: CostModel) -> float:
    finite = cost.capacity[np.isfinite(cost.capacity)]
    top = float(finite.max()) if finite.size else 1.0
    unit = 1.0
    while top / unit >= MAX_BYTE_UNITS:
        unit *= 2.0
    return unit


def to_units(x, unit) -> np.ndarray:
    """``x / unit`` rounded down to integers (with a relative 1e-12 guard against ``0.3/0.1`` noise)."""
    q = np.asarray(x, dtype=np.float64) / unit
    return np.floor(q * (1.0 - 1e-12)).astype(np.int64)


def analytic_bound(cost: CostModel) -> float:
    """The largest of the critical-path, area, fork-join and fan-out bounds
    (:func:`streammap.cost.model.combined_bound`)."""
    return combined_bound(cost)


def memory_devices(cost: CostModel) -> np.ndarray:
    """Devices where memory can bind: the needs of the tasks that may run there exceed the capacity
    (the same test as the list scheduler's)."""
    need = np.maximum(cost.mem, cost.out)
    total = need @ np.isfinite(cost.time) if cost.n_tasks else np.zeros(cost.n_devices)
    return total > cost.capacity * (1.0 + MEM_RTOL)


def interchangeable_groups(cost: CostModel) -> list[list[int]]:
    """Devices any plan can swap without changing its makespan or its memory peaks.

    Two devices are interchangeable when they are of one class (the same time for every task) on
    one node, with the same capacity and shareability, and exchanging them leaves every link of the
    cluster (latency and bandwidth, in both directions) as it was. Swapping is an automorphism of
    the model, so the relation is an equivalence; the groups are its classes of two or more
    devices, each in ascending device order.
    """
    groups: list[list[int]] = []
    for d in range(cost.n_devices):
        for g in groups:
            if _swappable(cost, g[0], d):
                g.append(d)
                break
        else:
            groups.append([d])
    return [g for g in groups if len(g) > 1]


def _swappable(cost: CostModel, a: int, b: int) -> bool:
    if (cost.device_class[a] != cost.device_class[b] or cost.node_of[a] != cost.node_of[b]
            or cost.capacity[a] != cost.capacity[b] or cost.shareable[a] != cost.shareable[b]):
        return False
    perm = np.arange(cost.n_devices)
    perm[[a, b]] = [b, a]
    return all(np.array_equal(m[np.ix_(perm, perm)], m) for m in (cost.lat, cost.inv_bw))


def canonical_devices(device: np.ndarray, groups: list[list[int]], dur: np.ndarray) -> np.ndarray:
    """``device`` with each group's devices renamed in non-increasing order of their load (the sum
    of ``dur[t, d]`` over their tasks; ties keep the device order).

    The plan is the same plan (the renaming is a swap of interchangeable devices), and it
    satisfies the model's symmetry-breaking constraints.
    """
    out = np.array(device, dtype=np.int64, copy=True)
    T = len(device)
    for g in groups:
        load = {d: int(dur[np.flatnonzero(device == d), d].sum()) if T else 0 for d in g}
        rename = dict(zip(sorted(g, key=lambda d: (-load[d], d)), g))
        for t in range(T):
            if int(device[t]) in rename:
                out[t] = rename[int(device[t])]
    return out


def solve_exact(cost: CostModel, hint: Schedule, *, work: float, seed: int = 0,
                interleave: bool = False) -> ExactResult:
    """Solve the model of the module docstring, warm-started from ``hint``.

    Parameters
    ----------
    cost : CostModel
    hint : Schedule
        A valid plan (the best heuristic one). Its makespan caps the model's horizon, and its
        assignment and times are given to CP-SAT as a solution hint.
    work : float
        CP-SAT's ``max_deterministic_time``, in deterministic seconds.
    seed : int
        CP-SAT's ``random_seed``.
    interleave : bool
        After one worker's tree search on :data:`SINGLE_SHARE` of the budget (graphs of at most
        :data:`SINGLE_FIRST_MAX_TASKS` tasks; it stops as soon as it proves optimality), spend the rest on the deterministic interleaved search
        (:data:`WORKERS` subsolvers, large-neighbourhood search among them: short plans far
        sooner, for ``auto``'s short budget). Otherwise the whole budget goes to one worker.

    Returns
    -------
    ExactResult

    Raises
    ------
    MappingError
        If OR-Tools is not installed.
    """
    try:
        from ortools.sat.python import cp_model  # noqa: PLC0415
    except ImportError as exc:
        raise MappingError("the exact mapper needs OR-Tools (CP-SAT), which cannot be imported",
                           hint="pip install ortools, or use --mapper auto") from exc
    T, D = cost.n_tasks, cost.n_devices
    if T == 0:
        return ExactResult(hint, 0.0, True, "OPTIMAL")
    tick = tick_for(max(float(hint.makespan), 1e-9))
    H = int(math.ceil(float(hint.makespan) / tick)) + 1
    cap_ok = np.maximum(cost.mem, cost.out)[:, None] <= cost.capacity[None, :] * (1.0 + MEM_RTOL)
    elig = np.isfinite(cost.time) & cap_ok
    dur = np.where(elig, to_units(np.where(elig, cost.time, 0.0), tick), 0)
    devs = [np.flatnonzero(elig[t]).tolist() for t in range(T)]

    m = cp_model.CpModel()
    s = [m.NewIntVar(0, H, f"s{t}") for t in range(T)]
    e = [m.NewIntVar(0, H, f"e{t}") for t in range(T)]
    x: list[dict[int, object]] = []
    ivs: list[dict[int, object]] = []
    by_dev: list[list[tuple[int, object]]] = [[] for _ in range(D)]
    for t in range(T):
        xt, it = {}, {}
        for d in devs[t]:
            lit = m.NewBoolVar(f"x{t}_{d}")
            iv = m.NewOptionalIntervalVar(s[t], int(dur[t, d]), e[t], lit, f"i{t}_{d}")
            xt[d], it[d] = lit, iv
            by_dev[d].append((t, iv))
        m.AddExactlyOne(xt.values())
        # Redundant with the intervals, but gives the linear relaxation the task's length.
        m.Add(e[t] == s[t] + sum(int(dur[t, d]) * xt[d] for d in devs[t]))
        x.append(xt)
        ivs.append(it)
    for d in range(D):
        if len(by_dev[d]) > 1:
            m.AddNoOverlap([iv for _, iv in by_dev[d]])

    # Transfers: the arrival time of p's output at c depends on both devices.
    comm_lat, inv_bw = cost.lat, cost.inv_bw
    for k in range(cost.n_edges):
        p, c, b = int(cost.pred_idx[k]), int(cost.pred_dst[k]), float(cost.pred_bytes[k])
        m.Add(s[c] >= e[p])
        dc = devs[c]
        for a in devs[p]:
            row = to_units(comm_lat[a, dc] + b * inv_bw[a, dc], tick)
            row[np.asarray(dc) == a] = 0
            if not row.any():
                continue
            m.Add(s[c] >= e[p] + sum(int(v) * x[c][d] for v, d in zip(row.tolist(), dc) if v)).OnlyEnforceIf(x[p][a])

    # Memory: running tasks and resident outputs on the devices where it can bind.
    tracked = memory_devices(cost)
    last_use: dict[int, object] = {}
    if tracked.any():
        unit = _byte_unit(cost)
        mem_u = to_units(cost.mem, unit)
        out_u = to_units(cost.out, unit)
        cap_u = np.where(np.isfinite(cost.capacity),
                         np.ceil(np.where(np.isfinite(cost.capacity), cost.capacity, 0.0) * (1.0 + MEM_RTOL) / unit), 0)
        res_iv: dict[tuple[int, int], object] = {}
        for t in range(T):
            if out_u[t] <= 0 or not any(tracked[d] for d in devs[t]):
                continue
            succ = cost.succ_idx[cost.succ_ptr[t]:cost.succ_ptr[t + 1]].tolist()
            L = m.NewIntVar(0, H, f"L{t}")
            m.AddMaxEquality(L, [s[c] for c in succ])
            last_use[t] = L
            span = m.NewIntVar(0, H, f"r{t}")
            for d in devs[t]:
                if tracked[d]:
                    res_iv[t, d] = m.NewOptionalIntervalVar(e[t], span, L, x[t][d], f"o{t}_{d}")
        for d in np.flatnonzero(tracked).tolist():
            items, demands = [], []
            for t, iv in by_dev[d]:
                if mem_u[t] > 0:
                    items.append(iv)
                    demands.append(int(mem_u[t]))
                if (t, d) in res_iv:
                    items.append(res_iv[t, d])
                    demands.append(int(out_u[t]))
            if items and sum(demands) > cap_u[d]:
                m.AddCumulative(items, demands, int(cap_u[d]))

    # Symmetry: interchangeable devices are loaded in non-increasing order.
    groups = interchangeable_groups(cost) if FEATURES["symmetry"] else []
    for g in groups:
        _break_symmetry(m, g, dur, x)

    # Objective: the makespan, over the sinks (every other task ends before a successor starts).
    M = m.NewIntVar(0, H, "makespan")
    if FEATURES["bound"]:
        # Every real plan is at least the analytic bound long, and its rounded-down integer image
        # can take M = floor(its makespan / tick): the model stays a relaxation.
        lb = int(to_units(analytic_bound(cost), tick))
        m.Add(M >= min(lb, H))
    for t in np.flatnonzero(cost.n_succ == 0).tolist():
        m.Add(M >= e[t])
    # Redundant: no device is busy longer than the makespan (a strong cut when computation
    # dominates, where the bound is the balance of the work over the devices).
    for d in range(D):
        if by_dev[d]:
            m.Add(sum(int(dur[t, d]) * x[t][d] for t, _ in by_dev[d]) <= M)
    m.Minimize(M)

    if groups:
        hint = Schedule(hint.mapper, canonical_devices(hint.device, groups, dur), hint.start, hint.finish,
                        hint.makespan, n_devices=D, seq=hint.seq)
    _add_hint(m, cost, hint, tick, dur, x, s, e, M, last_use, lb if FEATURES["bound"] else 0)

    floor = 0.0                         # a bound proved by the first stage, kept beside the second's
    share = SINGLE_SHARE if T <= SINGLE_FIRST_MAX_TASKS else 0.0
    solver, status = None, "UNKNOWN"
    if not interleave or share > 0:
        solver, status = solve_model(m, work=work * share if interleave else work, seed=seed)
    if interleave and status != "OPTIMAL":
        # One worker first (above): on the models it proves quickly it stops at the proof, where
        # the interleaved search would spend its whole budget; the rest of the budget, warm-started
        # from what it found, goes to the interleaved search (short plans far sooner).
        first, first_status = solver, status
        if first_status == "FEASIBLE":
            floor = first.BestObjectiveBound()
            m.ClearHints()
            for v in [*s, *e, M, *(lit for xt in x for lit in xt.values()), *last_use.values()]:
                m.AddHint(v, first.Value(v))
        solver, status = solve_model(m, work=work * (1.0 - share), seed=seed, workers=WORKERS)
        if first_status == "FEASIBLE" and (
                status not in ("OPTIMAL", "FEASIBLE") or first.ObjectiveValue() < solver.ObjectiveValue()):
            # the interleaved search may repair a hint into a worse plan: keep the better one
            solver, status = first, "FEASIBLE"
    name = status
    if status not in ("OPTIMAL", "FEASIBLE"):
        return ExactResult(None, 0.0, False, name)
    bound = max(0.0, float(solver.BestObjectiveBound()), float(floor)) * tick
    device = np.array([next(d for d in devs[t] if solver.BooleanValue(x[t][d])) for t in range(T)], dtype=np.int64)
    s_val = np.array([solver.Value(v) for v in s], dtype=np.int64)
    e_val = np.array([solver.Value(v) for v in e], dtype=np.int64)
    schedule = _retime(cost, device, s_val, e_val)
    if schedule is not None and tracked.any() and \
            not bool(fits(peak_memory(cost, schedule.device, schedule.start, schedule.finish), cost.capacity).all()):
        schedule = None
    return ExactResult(schedule, bound, status == "OPTIMAL", name)


def solve_model(m, *, work: float, seed: int = 0, workers: int = 1, linearization: int = 2):
    """Run CP-SAT on the model ``m`` deterministically: the entry point for any model built on this
    module's conventions (ticks of :func:`tick_for`, times rounded down by :func:`to_units`), the
    exact model or a sub-model of it (the windows of :mod:`streammap.mappers.lns`).

    Parameters
    ----------
    m : ortools.sat.python.cp_model.CpModel
        The model, its hint already added.
    work : float
        CP-SAT's ``max_deterministic_time``, in deterministic seconds (never wall time).
    seed : int
        CP-SAT's ``random_seed``.
    workers : int
        Subsolvers; more than one runs the deterministic interleaved search.
    linearization : int
        CP-SAT's ``linearization_level``: 2 (the full relaxation) proves the exact model optimal
        several times sooner; 0 (propagation alone) explores far more of a small sub-model.

    Returns
    -------
    (CpSolver, str)
        The solver, holding the solution found if any, and its status name (``OPTIMAL``,
        ``FEASIBLE``, ``INFEASIBLE``, ``UNKNOWN``, ...).
    """
    solver = _solver(workers, seed, work)
    solver.parameters.linearization_level = int(linearization)
    return solver, solver.StatusName(solver.Solve(m))


def _solver(workers: int, seed: int, work: float):
    """A CP-SAT solver set up (not yet run): ``workers`` subsolvers (more than one: the
    deterministic interleaved search), ``seed``, ``work`` deterministic seconds."""
    from ortools.sat.python import cp_model  # noqa: PLC0415
    solver = cp_model.CpSolver()
    prm = solver.parameters
    # Deterministic parallel search: the subsolvers (the complete search and the large-neighbourhood
    # ones, which find short plans far sooner than one worker's tree search) run in batches
    # synchronised in a fixed order, so the result does not depend on the number of threads nor on
    # their timing.
    prm.num_workers = workers
    if workers > 1:
        prm.interleave_search = True
    prm.random_seed = int(seed)
    prm.max_deterministic_time = float(work)
    # Full linear relaxation: on these models it proves optimality several times sooner.
    prm.linearization_level = 2
    prm.log_search_progress = False
    return solver


def _break_symmetry(m, group: list[int], dur, x) -> None:
    """Devices of ``group`` are busy in non-increasing order of their load (total task time): of
    the plans equal up to renaming the group's devices, only those of :func:`canonical_devices`
    stay."""
    load = [sum(int(dur[t, d]) * x[t][d] for t in range(len(x)) if d in x[t]) for d in group]
    for a, b in zip(load, load[1:]):
        m.Add(a >= b)


def _add_hint(m, cost: CostModel, hint: Schedule, tick: float, dur, x, s, e, M, last_use, lb: int = 0) -> None:
    """Hint ``hint``'s assignment and times, rounded down to ticks as the model's times are (so the
    hint satisfies every constraint: ``floor(a) + floor(b) <= floor(a + b)``)."""
    start = to_units(np.maximum(hint.start, 0.0), tick)
    end = start + dur[np.arange(cost.n_tasks), hint.device]
    for t in range(cost.n_tasks):
        d = int(hint.device[t])
        for dd, lit in x[t].items():
            m.AddHint(lit, dd == d)
        m.AddHint(s[t], int(start[t]))
        m.AddHint(e[t], int(end[t]))
    for t, L in last_use.items():
        succ = cost.succ_idx[cost.succ_ptr[t]:cost.succ_ptr[t + 1]]
        m.AddHint(L, int(start[succ].max()))
    m.AddHint(M, max(int(end.max()), lb))


def _retime(cost: CostModel, device: np.ndarray, s_val: np.ndarray, e_val: np.ndarray) -> Schedule | None:
    """The solver's assignment and per-device order (by integer start, then end, then topological
    place: a strict order along every dependency), re-timed by the benchmark model."""
    key = np.lexsort((cost.topo_index, e_val, s_val, device))
    order = [key[device[key] == d] for d in range(cost.n_devices)]
    try:
        return simulate(cost, device, order, mapper="optimal")
    except ValueError:                 # an order against the dependencies: cannot happen (see above)
        return None
