"""Communication-aware candidates of ``auto``: linear clustering keeps heavy chains on one device,
the lookahead keeps a fork-join branch beside its join, and ``auto`` with them is never worse than
HEFT or than either of them, and gives the same plan twice."""

import importlib

import numpy as np
import pytest

from streammap.cluster.model import cluster_from_dict
from streammap.cost.model import CostModel
from streammap.ir import add_task, new_graph
from streammap.mappers.clustering import chain_schedule, linear_chains, map_chains
from streammap.mappers.heft import heft
from streammap.mappers.lookahead import lookahead_assignment, lookahead_heft
from streammap.mappers.schedule import evaluate
from tests.helpers.graphs import mixed_cluster, random_graph

auto_module = importlib.import_module("streammap.mappers.auto")


def two_devices():
    """Two equal processors joined by a 1 byte/s link without latency."""
    return cluster_from_dict({
        "name": "two", "network": {"bandwidth": 1, "latency": 0},
        "nodes": [{"name": "n", "link": {"bandwidth": 1, "latency": 0},
                   "devices": [{"name": "p0", "kind": "cpu", "model": "P0"},
                               {"name": "p1", "kind": "cpu", "model": "P1"}]}]})


def slow_network_cluster():
    """Two nodes of two GPUs and a CPU on a slow network: transfers dominate (high CCR)."""
    return mixed_cluster("64GiB", network=("0.2 GB/s", "1ms"), link=("2 GB/s", "10us"))


def unit(g, name):
    add_task(g, name, name, times={"P0": 1.0, "P1": 1.0})


def heavy_chain_graph():
    """``a -> b -> c`` with 10-byte edges (10 s each over the link), and ``d``, reading ``a``'s
    output for free, in parallel with the chain."""
    g = new_graph("chain", kind="workflow")
    for name in "abcd":
        unit(g, name)
    g.add_edge("a", "b", bytes=10.0)
    g.add_edge("b", "c", bytes=10.0)
    g.add_edge("a", "d", bytes=0.0)
    return CostModel(g, two_devices())


def fork_join_graph():
    """``s`` forks into ``x1`` and ``x2`` (free inputs), which both send 10 bytes to ``j``."""
    g = new_graph("forkjoin", kind="workflow")
    for name in ("s", "x1", "x2", "j"):
        unit(g, name)
    for x in ("x1", "x2"):
        g.add_edge("s", x, bytes=0.0)
        g.add_edge(x, "j", bytes=10.0)
    return CostModel(g, two_devices())


def test_linear_clustering_puts_the_heavy_chain_in_one_cluster():
    cost = heavy_chain_graph()
    chain = linear_chains(cost)
    a, b, c, d = (cost.tasks.index(n) for n in "abcd")
    assert chain[a] == chain[b] == chain[c]
    assert chain[d] != chain[a]


def test_chain_mapping_keeps_the_heavy_chain_on_one_device_and_runs_the_side_task_beside_it():
    cost = heavy_chain_graph()
    s = chain_schedule(cost)
    a, b, c, d = (cost.tasks.index(n) for n in "abcd")
    assert s.device[a] == s.device[b] == s.device[c]
    assert s.device[d] != s.device[a]
    assert s.makespan == pytest.approx(3.0)          # no transfer on the chain; d overlaps it
    ms, valid, _ = evaluate(cost, s)
    assert valid and ms == pytest.approx(s.makespan)


def test_a_chain_restricted_to_a_device_runs_there():
    cost = heavy_chain_graph()
    dev = map_chains(cost, linear_chains(cost), devices=np.array([1]))
    assert (dev == 1).all()


def test_lookahead_keeps_a_fork_branch_beside_its_join_where_heft_sends_it_away():
    cost = fork_join_graph()
    h = heft(cost)
    la = lookahead_heft(cost)
    # HEFT runs x2 on the idle device (it finishes there first) and pays 10 s to reach j.
    assert h.makespan == pytest.approx(13.0)
    assert la.makespan == pytest.approx(4.0)
    assert len(set(la.device.tolist())) == 1
    ms, valid, _ = evaluate(cost, la)
    assert valid and ms == pytest.approx(la.makespan)


def test_lookahead_respects_a_device_restriction():
    cost = fork_join_graph()
    assert (lookahead_assignment(cost, devices=np.array([1])) == 1).all()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_auto_is_never_worse_than_heft_nor_than_the_new_candidates_when_communication_dominates(seed):
    cost = CostModel(random_graph(n=80, seed=seed), slow_network_cluster())
    s = auto_module.auto(cost, exact=False)
    ms, valid, _ = evaluate(cost, s)
    assert valid and ms == pytest.approx(s.makespan, rel=1e-12)
    assert ms <= heft(cost).makespan * (1 + 1e-12)
    assert ms <= chain_schedule(cost).makespan * (1 + 1e-12)
    assert ms <= lookahead_heft(cost).makespan * (1 + 1e-12)


def test_the_new_candidates_and_auto_give_the_same_plan_twice():
    cost = CostModel(random_graph(n=120, seed=5), slow_network_cluster())
    for mapper in (chain_schedule, lookahead_heft, lambda c: auto_module.auto(c, exact=False)):
        s1, s2 = mapper(cost), mapper(cost)
        assert np.array_equal(s1.device, s2.device)
        assert np.array_equal(s1.start, s2.start) and np.array_equal(s1.finish, s2.finish)
