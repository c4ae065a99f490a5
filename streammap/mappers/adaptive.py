"""More search where the gap to the lower bound is large: ``auto``'s adaptive rounds (issue 17).

``auto`` gives every graph of a size the same first search (its steps 5-7: local search from the
best candidates, the heavy-neighbourhood search, then the exact model or a large-neighbourhood
search). Most plans are then within a few percent of a lower bound and more search cannot pay; a
few (Montage and Epigenomics at CCR 10) are far above it and still shortening. A uniformly longer
search spent the time everywhere and, since it changed which plan the later steps started from,
lost as often as it gained. :func:`extend_search` instead *continues* from ``auto``'s final plan,
only while the plan is far from the bound and the search still pays, so a plan is never longer
than the first search's.

Policy
------
State: the best plan so far, the lower bound it is compared with (the largest of ``auto``'s
analytic bound and the exact model's proven bound), and what the rounds have spent, in re-timings.

* A round runs only while the best plan is more than :data:`ADAPT_GAP` above the lower bound, and
  only on a plan long enough to be worth it: one round's local search, at
  :data:`RETIME_TASK_SECONDS` a task re-timed, may cost at most
  :data:`~streammap.mappers.lns.PLAN_SHARE` (1%) of the makespan (the large-neighbourhood search's
  product rule), so a program whose plan takes milliseconds compiles as before.
* A round is first one iterated local search from the best plan
  (:func:`~streammap.mappers.local_search.improve`, with the heavy-neighbour moves where some edge
  is heavy) of :data:`ROUND_RUNS` times the first search's length, seeded by the round's number:
  re-timings are cheap (a millisecond on a few hundred tasks), and on the tune seeds the gains
  came mostly from these long searches (a kick that pays is rare; a longer search meets more).
* A round's re-timings are also bounded by the tasks and edges they sweep: at most
  :data:`ROUND_ELEMENTS` in all (:func:`round_runs`). ``auto`` sizes its first search by ``T``
  alone, but a re-timing costs ``O(T + E)``: without this bound a round cost about the same
  10 million re-timed tasks and edges on every graph of 500-2,000 tasks, up to 20 s of CPU on the
  generated suite's SoyKB and Montage instances (issue 17).
* The rounds stop when a round shortens nothing (the search has converged; a graph whose first
  search found its optimum gets no round at all, or one, where the bound is loose), when the gap
  falls to :data:`ADAPT_GAP`, or after :data:`ADAPT_ROUNDS` rounds (the cap: each round's effort is
  an operation count, re-timings, that ``auto`` scales with the graph as it does its first
  search's).

Two options were measured on the tune seeds, left off and then removed (docs/measurements.md,
"Adaptive search"): CP-SAT windows when a round's local search found nothing, including windows
that target communication (0.9994x the makespans for 19% more CPU), and restarts of the first
round from the next distinct candidates ``auto`` did not search (not one ended shorter).

Deterministic: the seeds are the rounds' numbers, CP-SAT's budget is deterministic time, no step
reads the clock; ties keep the earlier plan.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from streammap.cost.model import CostModel
from streammap.mappers.lns import PLAN_SHARE
from streammap.mappers.local_search import heavy_neighbours, improve
from streammap.mappers.schedule import Schedule

__all__ = ["extend_search", "affordable", "round_runs", "Round", "ADAPT_GAP", "ADAPT_ROUNDS", "ROUND_RUNS",
           "ROUND_ELEMENTS"]

#: Rounds run only while the best plan is more than this fraction above the lower bound.
ADAPT_GAP = 0.05
#: Most rounds (the cap: each round's effort is bounded by the count below). On the tune seeds
#: the first round gave 80% of four rounds' gain for 42% of their CPU, the second most of the rest.
ADAPT_ROUNDS = 2
#: Re-timings of a round's local search, in lengths of ``auto``'s first search (``runs``): a
#: re-timing costs ``O(T + E)``, a small share of a window's CPU, so the rounds search longer.
ROUND_RUNS = 8
#: Most tasks and edges one round may re-time in all (its re-timings times ``T + E``): a re-timing
#: sweeps every task and every edge, so a round of ``ROUND_RUNS`` times a first search that ``auto``
#: sized by ``T`` alone cost about 10 million of them on every graph of 500-2,000 tasks, 6-20 s of
#: CPU on the generated suite's 700-2,000-task band (issue 17), and the most on the graphs with the
#: most edges per task. Graphs up to a few hundred tasks and edges stay below it.
ROUND_ELEMENTS = 4_000_000
#: Mapping time of one task's re-timing, in seconds of one core (fitted on the tune seeds' rounds:
#: 9,000 re-timings of 138-276 tasks in 0.7-1.6 s; a constant, never measured at run time). A round
#: whose local search would cost more than :data:`~streammap.mappers.lns.PLAN_SHARE` of the plan's
#: makespan is not run: a plan of milliseconds (a small program's) gets no round.
RETIME_TASK_SECONDS = 6e-7
#: Seeds of the rounds' searches start here (``auto``'s first searches use the number of candidates).
SEED_BASE = 1_000


@dataclass(frozen=True)
class Round:
    """What one round did: its makespan before and after, and the re-timings it spent."""

    before: float
    after: float
    runs: int


def gap(makespan: float, lower: float) -> float:
    """How far ``makespan`` is above ``lower``, as a fraction of ``lower`` (infinite when the bound is 0)."""
    return makespan / lower - 1.0 if lower > 0 else float("inf")


def round_runs(cost: CostModel, runs: int) -> int:
    """Re-timings of one round: :data:`ROUND_RUNS` times the first search's ``runs``, at most
    :data:`ROUND_ELEMENTS` tasks and edges re-timed in all.

    Examples
    --------
    The same first search (300 re-timings), on 200 and on 2,000 tasks with three edges a task:

    >>> from types import SimpleNamespace as G
    >>> round_runs(G(n_tasks=200, n_edges=600), 300), round_runs(G(n_tasks=2_000, n_edges=6_000), 300)
    (2400, 500)
    """
    return min(ROUND_RUNS * runs, ROUND_ELEMENTS // max(1, cost.n_tasks + cost.n_edges))


def affordable(cost: CostModel, runs: int, makespan: float) -> bool:
    """Whether a round may run at all: a local search of ``runs`` re-timings exists (8 or more),
    there are tasks and devices to move, and one round's re-timings (:func:`round_runs`) cost at
    most :data:`~streammap.mappers.lns.PLAN_SHARE` of ``makespan`` (:data:`RETIME_TASK_SECONDS` a
    task). Cheap: ``auto`` asks it before it computes the lower bound the rounds need."""
    if runs < 8 or cost.n_devices < 2 or cost.n_tasks < 2:
        return False
    return round_runs(cost, runs) * cost.n_tasks * RETIME_TASK_SECONDS <= PLAN_SHARE * makespan


def extend_search(cost: CostModel, plan: Schedule, *, lower: float, runs: int) -> tuple[Schedule, list[Round]]:
    """Rounds of search from ``plan`` while it is far from ``lower`` and the rounds pay (module docstring).

    Parameters
    ----------
    cost : CostModel
    plan : Schedule
        ``auto``'s best plan, memory-valid.
    lower : float
        A lower bound on every plan's makespan.
    runs : int
        Re-timings of one local search (``auto``'s first search's length); fewer than 8: no round.

    Returns
    -------
    (Schedule, list of Round)
        The shortest plan found (``plan`` itself if no round shortened it; else its ``mapper`` is
        ``plan.mapper + "+adapt"``), and the rounds run.
    """
    done: list[Round] = []
    if not affordable(cost, runs, plan.makespan):
        return plan, done
    n_runs = round_runs(cost, runs)
    groups = any(heavy_neighbours(cost))
    best = plan
    while len(done) < ADAPT_ROUNDS and gap(best.makespan, lower) > ADAPT_GAP:
        got = _search(cost, best, n_runs, SEED_BASE + len(done), groups)
        done.append(Round(best.makespan, min(best.makespan, got.makespan), n_runs))
        if not got.makespan < best.makespan:
            break
        best = got
    if best is plan:
        return plan, done
    return Schedule(plan.mapper + "+adapt", best.device, best.start, best.finish, best.makespan,
                    n_devices=cost.n_devices, seq=best.seq), done


def _search(cost: CostModel, s: Schedule, runs: int, seed: int, groups: bool) -> Schedule:
    """One iterated local search of ``runs`` re-timings from ``s``, re-timed in the order of its starts.

    The order of starts (then finishes, then topological place) is topological for any plan, a
    list scheduler's or a re-timed solver's (whose ``seq`` is a place on its device only), and
    re-timing ``s``'s assignment in it by insertion starts no task later than ``s`` does."""
    order = np.lexsort((cost.topo_index, s.finish, s.start))
    return improve(cost, s, order, max_runs=runs, seed=seed, groups=groups)
