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
model's topological order. A *pinned view* of a :class:`~streammap.cost.model.CostModel` is a shallow
copy whose ``time`` rows of pinned tasks are ``inf`` off their device; every mapper (HEFT, PEFT,
``auto``, local search, partition, the policies and the share-aware scheduler) already honours
``inf`` as "cannot run here", as it does for ``device=`` clauses. Pinning one device of a class
breaks the class symmetry that the bounds read, so the view makes every device its own class (as
:mod:`streammap.remap` does).

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
stateful kernel are placed as one unit), and :func:`check_plan_colocation` refuses any plan that
breaks it (a hand-edited plan, a plan written by another tool).
"""

from __future__ import annotations

import copy
import math
from typing import Callable

import numpy as np

from streammap.cost.model import CostModel
from streammap.errors import MappingError, PlanError
from streammap.mappers.schedule import Schedule

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
    """A shallow copy of ``cost`` in which the tasks ``rows`` can run only on ``device``."""
    view = copy.copy(cost)
    T = cost.time.copy()
    keep = T[rows, device].copy()
    T[rows, :] = math.inf
    T[rows, device] = keep
    view.time = T
    view.device_class = np.arange(cost.n_devices)
    view.class_time = T
    view.class_count = np.ones(cost.n_devices, dtype=np.int64)
    return view


def colocate_stateful(cost: CostModel, map_fn: Callable[[CostModel], Schedule]) -> Schedule:
    """``map_fn(cost)``, with every stateful kernel's calls on one device (module docstring).

    Raises
    ------
    MappingError
        When a stateful kernel's calls have no device in common (their constraints differ) or no
        candidate device gives a valid mapping; whatever ``map_fn`` raises otherwise.
    """
    groups = stateful_groups(cost)
    schedule = map_fn(cost)
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
            if best is None or got.makespan < best[0].makespan * (1 - 1e-12):
                best = (got, trial)
        if best is None:
            raise failure
        schedule, view = best
    return schedule


def check_plan_colocation(plan, path=None, lines: dict | None = None) -> None:
    """Refuse a plan in which a stateful kernel's calls run on more than one device.

    Raises
    ------
    PlanError
        Naming the kernel, its devices and the first call on a second device.
    """
    lines = lines or {}
    home: dict[str, tuple[str, str]] = {}          # kernel -> (device, first task)
    for i, t in enumerate(plan.tasks):
        if not t.stateful:
            continue
        first = home.setdefault(t.kernel, (t.device, t.id))
        if first[0] != t.device:
            raise PlanError(f"stateful kernel {t.kernel!r} runs on {first[0]} (task {first[1]!r}) and on "
                            f"{t.device} (task {t.id!r}): its calls share state, so they must run on one device",
                            path=path, line=lines.get(("tasks", i)),
                            hint=f"place every task of {t.kernel!r} on {first[0]}, or compile the program again")
