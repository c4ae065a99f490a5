"""The ``optimal`` mapper: the exact model, with a larger budget, warm-started from ``auto``.

Policy
------
1. ``auto``'s heuristic candidates and local search (:func:`streammap.mappers.auto.auto` with
   ``exact=False``) give a valid plan: the warm start, and the answer if the solver finds none
   better.
2. The exact model (:func:`streammap.mappers.exact.solve_exact`) runs with
   :data:`OPTIMAL_WORK` deterministic seconds. On the random HEFT-paper DAGs of 10-30 tasks that
   is enough to prove most plans optimal; when it is not, the plan still carries the solver's
   proven lower bound.
3. The better plan is returned (ties: the heuristic one), named ``"optimal"`` when the solver's
   plan won, else ``"optimal(<auto's winner>)"``; its ``bound`` is the solver's.

Graphs whose model exceeds :data:`OPTIMAL_MAX_TERMS` terms (:func:`~streammap.mappers.exact.model_size`)
are refused with a :class:`~streammap.errors.MappingError`: building the model alone would take
minutes there, and ``auto`` is the mapper for them. Deterministic as ``auto`` and the solver are.
"""

from __future__ import annotations

from streammap.cost.model import CostModel
from streammap.errors import MappingError
from streammap.mappers.auto import auto
from streammap.mappers.exact import model_size, solve_exact
from streammap.mappers.heft import check_placeable
from streammap.mappers.schedule import Schedule

__all__ = ["optimal", "OPTIMAL_WORK", "OPTIMAL_MAX_TERMS"]

#: CP-SAT's work budget, in deterministic seconds.
OPTIMAL_WORK = 30.0
#: Largest model (terms) the mapper builds.
OPTIMAL_MAX_TERMS = 500_000


def optimal(cost: CostModel, *, work: float = OPTIMAL_WORK) -> Schedule:
    """Map a task graph with the exact model, warm-started from ``auto``'s best heuristic plan.

    Parameters
    ----------
    cost : CostModel
    work : float
        CP-SAT's budget in deterministic seconds.

    Returns
    -------
    Schedule
        Memory-valid, never longer than ``auto``'s heuristic plan; ``bound`` is the solver's
        proven lower bound on every plan's makespan.

    Raises
    ------
    MappingError
        If a task fits on no device, no valid plan is found, or the model is too large.
    """
    check_placeable(cost)
    size = model_size(cost)
    if size > OPTIMAL_MAX_TERMS:
        path = cost.graph.graph.get("source")
        raise MappingError(
            f"the graph is too large for the exact mapper: its model has {size:,} terms "
            f"({cost.n_tasks:,} tasks, {cost.n_edges:,} edges, {cost.n_devices} devices; the limit is "
            f"{OPTIMAL_MAX_TERMS:,})", path=path,
            hint="use --mapper auto (it runs the exact model itself on graphs small enough)")
    start = auto(cost, exact=False)
    res = solve_exact(cost, start, work=work)
    name, best = f"optimal({start.mapper})", start
    if res.schedule is not None and res.schedule.makespan < start.makespan:
        name, best = "optimal", res.schedule
    return Schedule(name, best.device, best.start, best.finish, best.makespan,
                    n_devices=cost.n_devices, seq=best.seq, bound=res.bound)
