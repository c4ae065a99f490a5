"""Join-first restarts of ``auto`` (:mod:`streammap.mappers.join_first`): where independent long
joins each gate readers, serving one join's inputs before the next join's lets the first join and
its readers run while the next join's inputs still run, instead of all joins ending together."""

import importlib

import numpy as np
import pytest

from streammap.cost.model import CostModel
from streammap.ir import add_task, new_graph
from streammap.mappers.heft import heft, priority_order, upward_rank
from streammap.mappers.join_first import independent_joins, join_first_rank, join_first_search
from streammap.mappers.schedule import evaluate
from tests.helpers.graphs import mixed_cluster, node_cluster, random_graph

auto_module = importlib.import_module("streammap.mappers.auto")


def two_joins(scale: float = 1.0):
    """Joins ``am`` (4 s on F) and ``bm`` (3.5 s), each after three 1-second inputs and before one
    4-second reader; one node of a fast device F and a device S twice as slow; free transfers.
    ``scale`` multiplies every time (the hostile-input tests' times near the float range's end)."""
    g = new_graph("two-joins", kind="workflow", source="<t>")
    for grp, tm in (("a", 4.0), ("b", 3.5)):
        add_task(g, f"{grp}m", "merge", times={"F": tm * scale, "S": 2 * tm * scale})
        add_task(g, f"{grp}r", "read", times={"F": 4.0 * scale, "S": 8.0 * scale})
        g.add_edge(f"{grp}m", f"{grp}r", bytes=0.0)
        for i in range(3):
            add_task(g, f"{grp}i{i}", "in", times={"F": 1.0 * scale, "S": 2.0 * scale})
            g.add_edge(f"{grp}i{i}", f"{grp}m", bytes=0.0)
    return CostModel(g, node_cluster([(["F", "S"], 1.0, 0.0)]))


def names(cost, order):
    return [cost.tasks[t] for t in order]


def test_the_inputs_of_the_highest_ranked_join_come_before_every_other_task():
    cost = two_joins()
    base = upward_rank(cost)
    # HEFT's ranks interleave: every input, then both joins.
    assert names(cost, priority_order(cost, base))[:8] == ["ai0", "ai1", "ai2", "bi0", "bi1", "bi2", "am", "bm"]
    first = names(cost, priority_order(cost, join_first_rank(cost, base, 1)))
    assert first[:4] == ["ai0", "ai1", "ai2", "am"]
    jr = join_first_rank(cost, base, 1)
    for name in ("bi0", "bm", "ar", "br"):            # not an ancestor of am: its rank is kept
        assert jr[cost.pos[name]] == base[cost.pos[name]]


def test_later_joins_follow_in_rank_order_and_the_order_stays_topological():
    cost = CostModel(random_graph(n=150, seed=3), mixed_cluster())
    base = upward_rank(cost)
    for k in (1, 2, 5):
        jr = join_first_rank(cost, base, k)
        p, c = cost.pred_idx, cost.pred_dst
        assert (jr[p] > jr[c]).all()                  # parents above children, as upward ranks are
        order = priority_order(cost, jr)
        place = np.empty(cost.n_tasks, dtype=np.int64)
        place[order] = np.arange(cost.n_tasks)
        assert (place[p] < place[c]).all()


def test_a_graph_without_joins_keeps_its_ranks():
    g = new_graph("fork", kind="workflow", source="<t>")
    for name in "abcd":
        add_task(g, name, "k", times={"F": 1.0})
    for u, v in (("a", "b"), ("a", "c"), ("b", "d")):
        g.add_edge(u, v, bytes=0.0)
    cost = CostModel(g, node_cluster([(["F", "F"], 1.0, 0.0)]))
    base = upward_rank(cost)
    assert np.array_equal(join_first_rank(cost, base, 2), base)


def test_serving_one_join_first_lets_its_reader_overlap_the_next_joins_inputs():
    cost = two_joins()
    # HEFT: the six inputs share F and S until 4 s, am runs 4-8 s and bm 4-11 s (on S), and both
    # readers then queue for F: 16 s.
    assert heft(cost).makespan == pytest.approx(16.0)
    # Join first: a's inputs end at 2 s, am runs 2-6 s on F while b's inputs run, ar runs on S
    # from 6 s and bm and br follow on F: 14.5 s.
    jr = join_first_rank(cost, upward_rank(cost), 1)
    assert heft(cost, rank=jr).makespan == pytest.approx(14.5)
    assert auto_module.auto(cost).makespan <= 14.5 + 1e-12


def test_the_restart_finds_the_join_first_plan_from_heft_s():
    cost = two_joins()
    base = upward_rank(cost)
    assert independent_joins(cost, base)
    s = join_first_search(cost, heft(cost), lower=10.0, rank=base, runs=50, memory_aware=False)
    assert s.makespan == pytest.approx(14.5)
    ms, valid, _ = evaluate(cost, s)
    assert valid and ms == pytest.approx(s.makespan)
    assert s.mapper.startswith(("heft-join", "lookahead-join"))


def test_no_restart_near_the_bound_nor_where_the_joins_share_inputs():
    cost = two_joins()
    base = upward_rank(cost)
    h = heft(cost)
    # Within ADAPT_GAP of the lower bound: the plan as it is.
    assert join_first_search(cost, h, lower=h.makespan, rank=base, runs=50, memory_aware=False) is h
    # One input feeding both joins: not independent groups.
    g = cost.graph.copy()
    g.add_edge("ai0", "bm", bytes=0.0)
    shared = CostModel(g, cost.cluster)
    base = upward_rank(shared)
    assert not independent_joins(shared, base)
    hs = heft(shared)
    assert join_first_search(shared, hs, lower=1.0, rank=base, runs=50, memory_aware=False) is hs


def groups_graph(seed, n_groups=3, n_in=6, n_read=6):
    """``n_groups`` independent groups: ``n_in`` inputs (1-5 s on F, twice that on S), one join
    (5-10 s on F, 15-30 s on S), ``n_read`` readers (1-4 s on F, four times that on S); two F and
    three S devices on one node."""
    rng = np.random.default_rng(seed)
    g = new_graph("groups", kind="workflow", source="<t>")
    for k in range(n_groups):
        add_task(g, f"m{k}", "merge", times={"F": float(rng.uniform(5, 10)), "S": float(rng.uniform(15, 30))})
        for i in range(n_in):
            t = float(rng.uniform(1, 5))
            add_task(g, f"i{k}_{i}", "in", times={"F": t, "S": 2 * t})
            g.add_edge(f"i{k}_{i}", f"m{k}", bytes=float(rng.uniform(0, 2)))
        for i in range(n_read):
            t = float(rng.uniform(1, 4))
            add_task(g, f"r{k}_{i}", "read", times={"F": t, "S": 4 * t})
            g.add_edge(f"m{k}", f"r{k}_{i}", bytes=float(rng.uniform(0, 2)))
    return CostModel(g, node_cluster([(["F", "F", "S", "S", "S"], 1.0, 0.0)]))


@pytest.mark.parametrize("seed", [0, 1])
def test_auto_is_never_longer_with_the_restart_than_without(seed, monkeypatch):
    cost = groups_graph(seed)
    assert independent_joins(cost, upward_rank(cost))
    ran = []

    def spy(cost, plan, **kw):
        ran.append(plan.makespan)
        return join_first_search(cost, plan, **kw)

    monkeypatch.setattr(auto_module, "join_first_search", spy)
    ms, valid, _ = evaluate(cost, auto_module.auto(cost))
    assert valid and ran                                # the restart was asked
    monkeypatch.setattr(auto_module, "join_first_search", lambda cost, plan, **kw: plan)
    assert ms <= auto_module.auto(cost).makespan * (1 + 1e-12)
