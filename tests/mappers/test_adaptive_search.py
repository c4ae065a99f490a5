"""``auto``'s adaptive rounds (``streammap.mappers.adaptive``): more search only where the plan is
far from its lower bound, and only while the rounds still shorten it.

A plan the bound proves near-optimal gets no round; a plan whose search has converged gets one,
which finds nothing, and no more; a plan far from the bound that the rounds can shorten gets
them, and ends shorter. The rounds never return a longer or memory-invalid plan, never make
``auto`` worse than HEFT, and the same inputs give the same plan, byte for byte.
"""

import importlib

import numpy as np
import pytest

from streammap.cost.model import CostModel
from streammap.ir import add_task, new_graph
from streammap.mappers import adaptive
from streammap.mappers.adaptive import ADAPT_GAP, ADAPT_ROUNDS, extend_search
from streammap.mappers.heft import heft
from streammap.mappers.schedule import evaluate, simulate
from tests.helpers.graphs import mixed_cluster, montage_like, processors, random_graph

auto_module = importlib.import_module("streammap.mappers.auto")






def independent(n=8, seconds=10.0):
    """``n`` independent tasks of ``seconds``: on four processors the optimum, two tasks in turn,
    is the area bound."""
    g = new_graph("flat", kind="workflow")
    for i in range(n):
        add_task(g, f"t{i}", "k", times={"P": seconds})
    return g


def all_on(cost, d=0):
    """Every task on device ``d``, in topological order."""
    dev = np.full(cost.n_tasks, d, dtype=np.int64)
    return simulate(cost, dev, [cost.topo if k == d else [] for k in range(cost.n_devices)])


def counted_searches(monkeypatch):
    """Record the re-timing budget of every local search the rounds run."""
    budgets = []
    real = adaptive.improve

    def count(cost, schedule, order, *, max_runs, **kw):
        budgets.append(max_runs)
        return real(cost, schedule, order, max_runs=max_runs, **kw)

    monkeypatch.setattr(adaptive, "improve", count)
    return budgets


def test_a_plan_the_bound_proves_near_optimal_gets_no_round(monkeypatch):
    cost = CostModel(independent(), processors(4, 10.0))
    best = auto_module.auto(cost)
    assert best.makespan == pytest.approx(20.0)
    budgets = counted_searches(monkeypatch)

    got, rounds = extend_search(cost, best, lower=20.0, runs=100)

    assert got is best and rounds == [] and budgets == []


def test_the_rounds_stop_after_the_first_round_that_finds_nothing(monkeypatch):
    # The optimum already, but a loose bound (half of it): one round is spent, finds nothing, and
    # no second follows.
    cost = CostModel(independent(), processors(4, 10.0))
    best = auto_module.auto(cost)
    budgets = counted_searches(monkeypatch)

    got, rounds = extend_search(cost, best, lower=10.0, runs=100)

    assert got is best
    assert len(rounds) == 1 and rounds[0].after == rounds[0].before
    assert budgets == [adaptive.ROUND_RUNS * 100]


def test_auto_spends_no_round_on_a_graph_its_first_search_solves(monkeypatch):
    cost = CostModel(independent(), processors(4, 10.0))
    seen = []
    real = auto_module.extend_search

    def record(*args, **kw):
        got, rounds = real(*args, **kw)
        seen.append(rounds)
        return got, rounds

    monkeypatch.setattr(auto_module, "extend_search", record)
    s = auto_module.auto(cost)
    assert s.makespan == pytest.approx(20.0)
    assert seen == [[]]
    assert "+adapt" not in s.mapper


def test_a_plan_of_milliseconds_gets_no_round_however_far_from_its_bound(monkeypatch):
    # One round's search would cost more than 1% of the plan (the LNS's product rule).
    cost = CostModel(independent(seconds=1e-3), processors(4, 10.0))
    start = all_on(cost)                                       # 8 ms, four times the optimum
    budgets = counted_searches(monkeypatch)

    got, rounds = extend_search(cost, start, lower=2e-3, runs=100)

    assert got is start and rounds == [] and budgets == []


def test_a_plan_far_from_its_bound_gets_rounds_and_ends_shorter(monkeypatch):
    cost = CostModel(montage_like(8), processors(4, 10.0))
    start = all_on(cost)                                     # everything on one processor
    lower = auto_module.cheap_bound(cost)
    assert start.makespan > lower * (1 + ADAPT_GAP)
    budgets = counted_searches(monkeypatch)

    got, rounds = extend_search(cost, start, lower=lower, runs=200)

    assert 1 <= len(rounds) <= ADAPT_ROUNDS
    assert budgets and sum(budgets) == sum(r.runs for r in rounds)
    assert got.makespan < start.makespan and got.mapper.endswith("+adapt")
    assert rounds[0].after < rounds[0].before
    makespan, valid, _ = evaluate(cost, got)
    assert valid and makespan == pytest.approx(got.makespan)


def test_bigger_budget_only_where_the_gap_is_large(monkeypatch):
    cost = CostModel(montage_like(8), processors(4, 10.0))
    start = all_on(cost)
    budgets = counted_searches(monkeypatch)

    extend_search(cost, start, lower=start.makespan / (1 + ADAPT_GAP / 2), runs=200)   # within the gap
    near = list(budgets)
    extend_search(cost, start, lower=start.makespan / 2, runs=200)                 # twice the bound
    assert near == [] and len(budgets) > 0


@pytest.mark.parametrize("seed", [0, 1])
def test_auto_on_a_montage_shaped_graph_at_ccr_10_is_never_worse_than_heft(seed):
    cost = CostModel(montage_like(10, seed=seed), processors(4, 10.0))

    s = auto_module.auto(cost)

    assert s.makespan <= heft(cost).makespan * (1 + 1e-12)
    assert s.makespan <= heft(cost, memory_aware=False).makespan * (1 + 1e-12)
    makespan, valid, _ = evaluate(cost, s)
    assert valid and makespan == pytest.approx(s.makespan)


def test_the_rounds_never_return_a_longer_or_memory_invalid_plan():
    # 6 GiB devices: memory binds, so some moves break a capacity.
    cost = CostModel(random_graph(n=80, seed=2), mixed_cluster(memory="6GiB"))
    start = heft(cost)

    got, rounds = extend_search(cost, start, lower=start.makespan / 3, runs=100)

    makespan, valid, _ = evaluate(cost, got)
    assert valid and makespan == pytest.approx(got.makespan)
    assert got.makespan <= start.makespan
    assert rounds and all(r.after <= r.before for r in rounds)


def test_the_same_inputs_give_the_same_plan_byte_for_byte():
    cost = CostModel(montage_like(10, seed=1), processors(4, 10.0))

    a, b = auto_module.auto(cost), auto_module.auto(cost)

    assert a.mapper == b.mapper
    for field in ("device", "start", "finish", "seq"):
        assert getattr(a, field).tobytes() == getattr(b, field).tobytes()


def test_a_round_re_times_fewer_times_on_a_graph_with_more_tasks_and_edges(monkeypatch):
    # A re-timing sweeps every task and edge: a round's re-timings times T + E stay within
    # ROUND_ELEMENTS, so on a graph of more tasks and edges the same first search buys a shorter round.
    cost = CostModel(montage_like(8), processors(4, 10.0))
    start = all_on(cost)
    lower = start.makespan / 3                      # far from the bound: the rounds run
    size = cost.n_tasks + cost.n_edges
    budgets = counted_searches(monkeypatch)
    monkeypatch.setattr(adaptive, "ROUND_ELEMENTS", size * 50)

    extend_search(cost, start, lower=lower, runs=200)

    assert budgets and set(budgets) == {50}         # 50 re-timings, not ROUND_RUNS x 200
    assert adaptive.round_runs(cost, 200) == 50
    assert adaptive.round_runs(cost, 4) == adaptive.ROUND_RUNS * 4     # a short first search: unchanged
