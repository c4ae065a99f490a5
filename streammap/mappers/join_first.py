"""Join-first restarts: independent fork-join groups served one after another (issue 17).

Where a workflow holds several independent fork-join groups, each a long join after many inputs
and before many readers (1000genome: per chromosome, a dozen ``individuals`` feed one
``individuals_merge`` of minutes, which with its ``sifting`` gates some twenty
``mutation_overlap`` and ``frequency`` tasks), HEFT's upward ranks give the inputs of every group
about the same priority. The inputs interleave on the fast devices, the joins end late and
together, and their readers then queue for the fast devices together while the slow ones idle.
Served one group after another, the first group's inputs take the fast devices, its join and
readers start early, and the next group's inputs run meanwhile on the devices left: the groups'
phases overlap as jobs do in a flow shop (Johnson 1954). CP-SAT, given minutes from ``auto``'s
plan, found such plans 4-7% shorter on the generated 1000genome instance of 63 tasks (README,
"This round: where the gap is"); ``auto``'s searches, which move tasks between devices but keep
the rank order, do not reach them.

Policy
------
:func:`join_first_search` runs after ``auto``'s adaptive rounds, on ``auto``'s final plan, and only
where (a) the two highest-ranked joins (tasks of at least :data:`JOIN_MIN_PREDS` predecessors)
head independent, comparable groups (:func:`independent_joins`: disjoint ancestor sets, the
smaller at least half the larger, together a tenth of the graph; elsewhere the join-first order
only reshuffles one shared ancestry, or serves a side branch first) and (b) the plan is more than
:data:`~streammap.mappers.adaptive.ADAPT_GAP` above its lower bound. It builds HEFT and the
lookahead in the join-first orders of :func:`join_first_rank` (:data:`JOIN_FIRST`), takes the
shortest valid one, and runs from it the same search ``auto`` runs from its best candidate: the
local search, the heavy-neighbourhood search where some edge is heavy, and the caller's polish
(``auto``: its large-neighbourhood search, or the exact model on small graphs). The result
replaces the plan only if shorter, so ``auto``'s plan is never longer, and where (a) or (b)
fails nothing runs. It is a restart rather than one more candidate: as a candidate, the
join-first plans entered ``auto``'s two search starts in place of others and changed which plan
the later steps started from (on the tune seeds, one SoyKB case 9.6% longer).

Deterministic: fixed seeds, CP-SAT in deterministic time, no clock.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from streammap.cost.model import CostModel, concat_ranges
from streammap.errors import MappingError
from streammap.mappers.adaptive import ADAPT_GAP, gap
from streammap.mappers.heft import heft
from streammap.mappers.local_search import heavy_neighbours, improve
from streammap.mappers.lookahead import lookahead_heft
from streammap.mappers.schedule import Schedule, fits, peak_memory

__all__ = ["JOIN_FIRST", "JOIN_MIN_PREDS", "GROUP_RATIO", "GROUP_SHARE", "ancestors", "top_joins", "join_first_rank", "independent_joins",
           "join_first_search"]

#: The join-first orders tried: the inputs of the highest-ranked join first, and of the two
#: highest in turn.
JOIN_FIRST = (1, 2)
#: A join: a task with at least this many predecessors.
JOIN_MIN_PREDS = 3
#: Independent groups are comparable when the smaller holds at least this share of the larger's
#: tasks ...
GROUP_RATIO = 0.5
#: ... and a part of the workflow when the two hold at least this share of its tasks.
GROUP_SHARE = 0.1


def top_joins(cost: CostModel, rank: np.ndarray, k: int, min_preds: int = JOIN_MIN_PREDS) -> np.ndarray:
    """The ``k`` joins of highest ``rank`` (ties: topological order), highest first."""
    cand = np.flatnonzero(cost.n_pred >= min_preds)
    return cand[np.lexsort((cost.topo_index[cand], -np.asarray(rank)[cand]))][:k]


def ancestors(cost: CostModel, task: int) -> np.ndarray:
    """Boolean mask of ``task`` and every task it depends on, one sweep up the levels."""
    mark = np.zeros(cost.n_tasks, dtype=bool)
    mark[task] = True
    for lev in reversed(cost.levels):            # children before parents
        hit = lev[mark[lev]]
        if hit.size:
            mark[cost.pred_idx[concat_ranges(cost.pred_ptr[hit], cost.pred_ptr[hit + 1])]] = True
    return mark


def join_first_rank(cost: CostModel, rank: np.ndarray, joins: int, min_preds: int = JOIN_MIN_PREDS) -> np.ndarray:
    """``rank`` with the ancestors of the ``joins`` highest-ranked joins served first, join by join.

    Parameters
    ----------
    cost : CostModel
    rank : ndarray
        The priorities to start from (e.g. :func:`~streammap.mappers.heft.upward_rank`).
    joins : int
        How many joins, by decreasing ``rank``, get their inputs served first.
    min_preds : int
        A join is a task with at least this many predecessors.

    Returns
    -------
    ndarray
        ``rank`` plus, on the ancestors of the i-th join (the join included) not already raised
        for an earlier one, ``(joins - i) * (2 max|rank| + 1)``: above every task not raised, and
        in join order. An ancestor set is closed upwards, so every task stays above its children
        wherever ``rank`` had it so, and the list order stays topological. A copy of ``rank`` when
        the graph has no join, or when the raised ranks would pass the float range (ranks above
        about 1e307: task times or transfers near it, a hostile graph's): infinite ranks would tie
        every raised task and lose the join order.
    """
    r = np.array(rank, dtype=np.float64, copy=True)
    chosen = top_joins(cost, r, joins, min_preds) if joins >= 1 else np.empty(0, dtype=np.int64)
    if chosen.size == 0:
        return r
    with np.errstate(over="ignore"):
        span = 2.0 * float(np.abs(r).max()) + 1.0
        top = float(np.abs(r).max()) + chosen.size * span
    if not np.isfinite(top):
        return r
    raised = np.zeros(cost.n_tasks, dtype=bool)
    for i, j in enumerate(chosen.tolist()):
        mark = ancestors(cost, j) & ~raised
        r[mark] += (chosen.size - i) * span
        raised |= mark
    return r


def independent_joins(cost: CostModel, rank: np.ndarray, min_preds: int = JOIN_MIN_PREDS) -> bool:
    """Whether the two highest-ranked joins head independent, comparable groups of the workflow.

    Their ancestor sets (each join with its ancestors) share no task, the smaller holds at least
    :data:`GROUP_RATIO` of the larger's tasks, and together they hold at least
    :data:`GROUP_SHARE` of the graph: parts of the workflow that compete for the same devices, as
    1000genome's chromosomes do. (A small group beside a large one, Montage's and Epigenomics'
    side branches, changes little when served first.)
    """
    j = top_joins(cost, rank, 2, min_preds)
    if j.size < 2:
        return False
    a, b = ancestors(cost, int(j[0])), ancestors(cost, int(j[1]))
    na, nb = int(a.sum()), int(b.sum())
    return (not bool((a & b).any()) and min(na, nb) >= GROUP_RATIO * max(na, nb)
            and na + nb >= GROUP_SHARE * cost.n_tasks)


def join_first_search(cost: CostModel, plan: Schedule, *, lower: float, rank: np.ndarray, runs: int,
                      memory_aware: bool, polish: Callable[[Schedule], Schedule] | None = None) -> Schedule:
    """A restart from the join-first orders, kept only if shorter than ``plan`` (module docstring).

    Parameters
    ----------
    cost : CostModel
    plan : Schedule
        ``auto``'s final plan (memory-valid).
    lower : float
        A lower bound on every plan's makespan: no restart within :data:`ADAPT_GAP` of it.
    rank : ndarray
        The base priorities (``auto``: the upward rank).
    runs : int
        Re-timings of each local search (``auto``'s first search's share); fewer than 8: none.
    memory_aware : bool
        Build the join-first plans memory-aware (where memory can bind).
    polish : callable, optional
        ``polish(schedule) -> schedule``, never longer: the caller's last step (``auto``: its
        large-neighbourhood search or exact model).

    Returns
    -------
    Schedule
        ``plan`` itself, or a memory-valid plan strictly shorter than it, named
        ``"join<k>+search..."``.
    """
    if runs < 8 or cost.n_devices < 2 or gap(plan.makespan, lower) <= ADAPT_GAP \
            or not independent_joins(cost, rank):
        return plan
    cands: list[Schedule] = []
    for k in JOIN_FIRST:
        jr = join_first_rank(cost, rank, k)
        for build in (lambda: heft(cost, memory_aware=memory_aware, rank=jr, mapper=f"heft-join{k}"),
                      lambda: lookahead_heft(cost, rank=jr, memory_aware=memory_aware, mapper=f"lookahead-join{k}")):
            try:
                cands.append(build())
            except MappingError:          # memory-aware in this order, no plan fits: not a start
                continue
    cands = [s for s in cands if fits(peak_memory(cost, s.device, s.start, s.finish), cost.capacity).all()]
    if not cands:
        return plan
    best = min(cands, key=lambda s: s.makespan)       # ties: the first built
    name = best.mapper
    s = improve(cost, best, np.argsort(best.seq, kind="stable"), max_runs=runs, seed=0)
    if any(heavy_neighbours(cost)):
        s = improve(cost, s, np.argsort(s.seq, kind="stable"), max_runs=runs, seed=1, groups=True)
    if polish is not None:
        s = polish(s)
    if not s.makespan < plan.makespan:
        return plan
    return Schedule(f"{name}+search", s.device, s.start, s.finish, s.makespan, n_devices=cost.n_devices, seq=s.seq)
