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
analytic bound and the exact model's proven bound), and what the rounds have spent, in re-timings
and CP-SAT windows.

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
* Only when that search shortened nothing, and on graphs that ``auto`` gives a large-neighbourhood
  search, CP-SAT windows of the plan may decide whether the rounds go on
  (:func:`~streammap.mappers.lns.improve_plan`, :data:`ROUND_WINDOWS` of the first search's window
  budget, every kind of window including those that target communication: a dear crossing edge's
  two ends with their neighbourhoods, a node's tasks re-placed among its devices; CP-SAT seeded by
  the round). Off by default: a window costs about a hundred re-timings, and on the tune seeds a
  quarter of the first search's windows in each round gave 0.9994x the makespans for 19% more CPU.
* The rounds stop when a round shortens nothing (the search has converged; a graph whose first
  search found its optimum gets no round at all, or one, where the bound is loose), when the gap
  falls to :data:`ADAPT_GAP`, or after :data:`ADAPT_ROUNDS` rounds (the cap: each round's effort is
  an operation count, re-timings and windows, that ``auto`` scales with the graph as it does its
  first search's).
* *Restarts* (:data:`DIVERSE_STARTS`, off): the first round may also search, when the gap is above
  :data:`DIVERSE_GAP`, from the next distinct candidates that ``auto`` did not search (a plain and
  a heavy-neighbour search of the first search's length from each). Measured with two restarts on
  30 tune cases (the smaller instance of Montage, Epigenomics, 1000genome, SoyKB and Seismology on
  the three clusters at CCR 1 and 10): not one restart ended shorter than the search from the best
  plan, so they are left out.

Deterministic: the seeds are the rounds' numbers, CP-SAT's budget is deterministic time, no step
reads the clock; ties keep the earlier plan.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from streammap.cost.model import CostModel
from streammap.mappers.lns import ALL_KINDS, PLAN_SHARE, improve_plan
from streammap.mappers.local_search import heavy_neighbours, improve
from streammap.mappers.schedule import Schedule

__all__ = ["extend_search", "affordable", "Round", "ADAPT_GAP", "ADAPT_ROUNDS", "DIVERSE_GAP", "DIVERSE_STARTS", "ROUND_RUNS",
           "ROUND_WINDOWS"]

#: Rounds run only while the best plan is more than this fraction above the lower bound.
ADAPT_GAP = 0.05
#: Restarts from other candidates only when the gap is above this fraction.
DIVERSE_GAP = 0.10
#: Most distinct candidates the first round restarts from.
DIVERSE_STARTS = 0
#: Most rounds (the cap: each round's effort is bounded by the two counts below). On the tune seeds
#: the first round gave 80% of four rounds' gain for 42% of their CPU, the second most of the rest.
ADAPT_ROUNDS = 2
#: Re-timings of a round's local search, in lengths of ``auto``'s first search (``runs``): a
#: re-timing costs ``O(T + E)``, a small share of a window's CPU, so the rounds search longer.
ROUND_RUNS = 8
#: Windows of a round's large-neighbourhood search, as a share of ``auto``'s first one (``windows``),
#: run only when the round's local search shortened nothing. Off (0): measured at 0.25 on the tune
#: seeds (91 cases, four rounds), 0.9994x the makespans for 19% more CPU.
ROUND_WINDOWS = 0.0
#: Mapping time of one task's re-timing, in seconds of one core (fitted on the tune seeds' rounds:
#: 9,000 re-timings of 138-276 tasks in 0.7-1.6 s; a constant, never measured at run time). A round
#: whose local search would cost more than :data:`~streammap.mappers.lns.PLAN_SHARE` of the plan's
#: makespan is not run: a plan of milliseconds (a small program's) gets no round.
RETIME_TASK_SECONDS = 6e-7
#: Seeds of the rounds' searches start here (``auto``'s first searches use the number of candidates).
SEED_BASE = 1_000


@dataclass(frozen=True)
class Round:
    """What one round did: its makespan before and after, and the re-timings and windows it spent."""

    before: float
    after: float
    runs: int
    windows: int


def gap(makespan: float, lower: float) -> float:
    """How far ``makespan`` is above ``lower``, as a fraction of ``lower`` (infinite when the bound is 0)."""
    return makespan / lower - 1.0 if lower > 0 else float("inf")


def affordable(cost: CostModel, runs: int, makespan: float) -> bool:
    """Whether a round may run at all: a local search of ``runs`` re-timings exists (8 or more),
    there are tasks and devices to move, and one round's re-timings cost at most
    :data:`~streammap.mappers.lns.PLAN_SHARE` of ``makespan`` (:data:`RETIME_TASK_SECONDS` a task).
    Cheap: ``auto`` asks it before it computes the lower bound the rounds need."""
    if runs < 8 or cost.n_devices < 2 or cost.n_tasks < 2:
        return False
    return ROUND_RUNS * runs * cost.n_tasks * RETIME_TASK_SECONDS <= PLAN_SHARE * makespan


def extend_search(cost: CostModel, plan: Schedule, *, lower: float, runs: int, windows: int = 0,
                  restarts: list[Schedule] | tuple = ()) -> tuple[Schedule, list[Round]]:
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
    windows : int
        CP-SAT windows of one round's large-neighbourhood search (0: none).
    restarts : sequence of Schedule
        Distinct candidates the first round also searches from, best first (memory-valid).

    Returns
    -------
    (Schedule, list of Round)
        The shortest plan found (``plan`` itself if no round shortened it; else its ``mapper`` is
        ``plan.mapper + "+adapt"``), and the rounds run.
    """
    done: list[Round] = []
    if not affordable(cost, runs, plan.makespan):
        return plan, done
    n_runs = ROUND_RUNS * runs
    groups = any(heavy_neighbours(cost))
    best = plan
    n_windows = int(ROUND_WINDOWS * windows)
    while len(done) < ADAPT_ROUNDS and gap(best.makespan, lower) > ADAPT_GAP:
        seed = SEED_BASE + len(done)
        got = _search(cost, best, n_runs, seed, groups)
        used = n_runs
        if not done and gap(best.makespan, lower) > DIVERSE_GAP:
            for other in list(restarts)[:DIVERSE_STARTS]:
                s = _search(cost, other, runs, seed, False)
                s = _search(cost, s, runs, seed, groups) if groups else s
                used += 2 * runs if groups else runs
                if s.makespan < got.makespan:
                    got = s
        used_windows = 0
        if n_windows > 0 and not got.makespan < best.makespan:
            # The local search has converged: CP-SAT windows decide whether the rounds go on.
            got = improve_plan(cost, got, max_windows=n_windows, seed=len(done) + 1, kinds=ALL_KINDS)
            used_windows = n_windows
        done.append(Round(best.makespan, min(best.makespan, got.makespan), used, used_windows))
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
