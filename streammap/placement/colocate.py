"""Co-location of a stateful kernel's calls: every call of one on one device, in every strategy.

A ``stateful`` kernel keeps state between calls in its module's globals. The local executor runs
every device in one process, so any placement is right there; on Ray each device has its own
actor, with its own copy of the module, so calls of one stateful kernel that land on two devices
see two different states and give wrong results. The constraint is therefore part of the mapping,
not of one executor: all calls of a stateful kernel (the tasks with ``stateful`` set, grouped by
``kernel`` name, the same key by which the front end chains them in program order) run on one
device.

State
-----
A *group* is the task positions of one stateful kernel's calls (two or more of them), in the cost
model's topological order. A *pinned view* of a :class:`~streammap.cost.model.CostModel` is the model
with times whose rows of pinned tasks are ``inf`` off their device
(:meth:`~streammap.cost.model.CostModel.with_times`); every mapper (HEFT, PEFT,
``auto``, local search, partition, the policies and the share-aware scheduler) already honours
``inf`` as "cannot run here", as it does for ``device=`` clauses. Pinning one device of a class
breaks the class symmetry that the bounds read, so the view makes every device its own class (as
:mod:`streammap.remap` does; ``with_times`` without class times).

Policy: the first call's device is chosen freely, the later calls follow it
---------------------------------------------------------------------------
1. Map the graph as it is. Groups that the mapper already kept on one device are left alone (no
   cost at all for programs without state, or whose state the mapper did not spread).
2. For each group that spans devices, in topological order of its first call: the candidate
   devices are the group's devices in that schedule, the first call's first, then by how many of
   the group's calls ran there (at most :data:`MAX_CANDIDATES`); for each, pin the group there and
   map again; keep the shortest schedule. Groups pinned earlier stay pinned.

So the mapper still chooses where the state lives (the first call's device, or another device it
had picked for the group's calls when that maps shorter), and the pin costs at most
``1 + MAX_CANDIDATES`` mapper runs per spread group. The pipeline strategy honours the same rule
in its own stage placement (:func:`streammap.strategies.pipeline.map_pipeline`: the stages of one
stateful kernel are placed as one unit), and the plan validation
(:func:`streammap.plan.check_plan_colocation`) refuses any plan that breaks it (a hand-edited plan,
a plan written by another tool).
"""

from __future__ import annotations

import math
from typing import Callable, TypeVar

import numpy as np

from streammap.cost.model import CostModel
from streammap.errors import MappingError
from streammap.mappers.heft import heft
from streammap.mappers.schedule import Schedule

#: What a mapper given to :func:`colocate_stateful` returns (a schedule, or a result holding one).
R = TypeVar("R")

#: Devices tried for one spread group (the mapper's own choices for its calls, first call first).
MAX_CANDIDATES = 3


def stateful_groups(cost: CostModel) -> list[np.ndarray]:
    """Task positions of each stateful kernel with two or more calls, in topological order
    (groups ordered by their first call)."""
    by_kernel: dict[str, list[int]] = {}
    g = cost.graph
    for i, t in enumerate(cost.tasks):
        a = g.nodes[t]
        if a.get("stateful"):
            by_kernel.setdefault(a.get("kernel"), []).append(i)
    groups = []
    for rows in by_kernel.values():
        if len(rows) > 1:
            rows = np.array(sorted(rows, key=lambda i: cost.topo_index[i]), dtype=np.int64)
            groups.append(rows)
    groups.sort(key=lambda r: cost.topo_index[r[0]])
    return groups


def pinned_view(cost: CostModel, rows: np.ndarray, device: int) -> CostModel:
    """A view of ``cost`` in which the tasks ``rows`` can run only on ``device`` (every device its
    own class: :meth:`~streammap.cost.model.CostModel.with_times`)."""
    T = cost.time.copy()
    keep = T[rows, device].copy()
    T[rows, :] = math.inf
    T[rows, device] = keep
    return cost.with_times(T)


def colocate_stateful(cost: CostModel, map_fn: Callable[[CostModel], R],
                      schedule_of: Callable[[R], Schedule] | None = None) -> R:
    """``map_fn(cost)``, with every stateful kernel's calls on one device (module docstring).

    Parameters
    ----------
    cost : CostModel
    map_fn : callable
        The mapper. It returns a :class:`~streammap.mappers.schedule.Schedule`, or a result that
        holds one beside what else its producer gives (the compiler's: a spill estimate).
    schedule_of : callable, optional
        The schedule of a ``map_fn`` result (default: the result is the schedule).

    Returns
    -------
    Schedule, or what ``map_fn`` returns
        ``map_fn``'s result on the view where every spread group is pinned (on ``cost`` itself
        when no group spreads), as it returned it.

    Raises
    ------
    MappingError
        When a stateful kernel's calls have no device in common (their constraints differ) or no
        candidate device gives a valid mapping; whatever ``map_fn`` raises otherwise.
    """
    if schedule_of is None:
        schedule_of = _itself
    groups = stateful_groups(cost)
    result = map_fn(cost)
    schedule = schedule_of(result)
    view = cost
    for rows in groups:
        devs = schedule.device[rows]
        if np.all(devs == devs[0]):
            continue
        common = np.isfinite(view.time[rows]).all(axis=0)
        if not common.any():
            kernel = cost.graph.nodes[cost.tasks[int(rows[0])]].get("kernel")
            path, line = cost.site_line(int(rows[0]))
            raise MappingError(f"the calls of stateful kernel {kernel!r} have no device in common",
                               path=path, line=line,
                               hint="a stateful kernel keeps its state on one device: give its calls the same device clause")
        counts = np.bincount(devs, minlength=cost.n_devices)
        cands = [int(devs[0])] + [int(d) for d in np.argsort(-counts, kind="stable") if counts[d] and d != devs[0]]
        cands = [d for d in cands if common[d]][:MAX_CANDIDATES]
        if not cands:                  # the mapper used none of the common devices: the fastest one
            total = np.where(common, view.time[rows].sum(axis=0), math.inf)
            cands = [int(np.argmin(total))]
        best = None
        failure = None
        for d in cands:
            trial = pinned_view(view, rows, d)
            try:
                got = map_fn(trial)
            except MappingError as exc:
                failure = exc
                continue
            if best is None or schedule_of(got).makespan < schedule_of(best[0]).makespan * (1 - 1e-12):
                best = (got, trial)
        if best is None:
            raise failure
        result, view = best
        schedule = schedule_of(result)
    return result


def whole_device_heft(cost: CostModel) -> Schedule:
    """The reference every plan is compared with (the plan's ``mapper.heft_makespan``): memory-aware
    HEFT on whole devices (``share`` clauses ignored: one task per device at a time) under the same
    constraints as the plan, device clauses and this module's rule included (every call of a
    stateful kernel on one device). A plan and its reference then solve the same problem.

    Raises
    ------
    MappingError
        When HEFT finds no memory-valid placement under those constraints.
    """
    return colocate_stateful(cost, heft)


def _itself(schedule: Schedule) -> Schedule:
    return schedule
