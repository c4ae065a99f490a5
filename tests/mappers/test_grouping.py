"""Heavy-edge grouping: tasks joined by dear edges share a node or a device, so a fork-join group
pays no network transfer; cheap edges leave tasks free. Cheap sources first: a short source that
feeds the readers of a long task is placed before it. ``auto`` with these candidates is never
worse than HEFT nor than any of them, and maps the same inputs to the same plan."""

import importlib

import numpy as np
import pytest

from streammap.cluster.model import cluster_from_dict
from streammap.cost.model import CostModel
from streammap.ir import add_task, new_graph
from streammap.mappers.grouping import grouped_schedule, heavy_edge_groups, scope_edge_cost
from streammap.mappers.heft import heft, priority_order, upward_rank
from streammap.mappers.schedule import evaluate
from tests.helpers.graphs import mixed_cluster, random_graph

auto_module = importlib.import_module("streammap.mappers.auto")


def two_nodes(network_bw=1.0, link_bw=1000.0):
    """Two nodes of two equal processors: fast links inside a node, a slow network between."""
    return cluster_from_dict({
        "name": "two-nodes", "network": {"bandwidth": network_bw, "latency": 0},
        "nodes": [{"name": f"n{k}", "link": {"bandwidth": link_bw, "latency": 0},
                   "devices": [{"name": f"p{i}", "kind": "cpu", "model": "P"} for i in range(2)]}
                  for k in range(2)]})


def slow_mixed_cluster():
    """Two nodes of two GPUs and a CPU on a slow network (random graphs pin tasks to GPU or CPU)."""
    return mixed_cluster("64GiB", network=("0.2 GB/s", "1ms"), link=("20 GB/s", "10us"))


def gather_graph(n_sources=8, nbytes=10.0):
    """``n_sources`` independent 1-second sources whose outputs (``nbytes`` each) one join reads:
    1000genome's ``individuals`` feeding ``individuals_merge``."""
    g = new_graph("gather", kind="workflow")
    add_task(g, "join", "join", times={"P": 1.0})
    for i in range(n_sources):
        add_task(g, f"s{i}", "src", times={"P": 1.0})
        g.add_edge(f"s{i}", "join", bytes=nbytes)
    return g


def fork_graph(nbytes):
    """``s`` forks into ``a``, ``b`` and ``c`` (1 s each) over ``nbytes``-byte edges."""
    g = new_graph("fork", kind="workflow")
    for name in "sabc":
        add_task(g, name, name, times={"P": 1.0})
    for x in "abc":
        g.add_edge("s", x, bytes=nbytes)
    return g


def test_the_ends_of_dear_edges_form_one_group_and_cheap_edges_leave_tasks_alone():
    dear = CostModel(fork_graph(100.0), two_nodes())          # 100 s on the network, 0.1 s inside a node
    assert len(set(heavy_edge_groups(dear, "node").tolist())) == 1
    assert len(set(heavy_edge_groups(dear, "device").tolist())) == 4      # 0.1 s < 1 s of work
    cheap = CostModel(fork_graph(0.1), two_nodes())
    assert len(set(heavy_edge_groups(cheap, "node").tolist())) == 4


def test_the_edge_cost_of_a_scope_is_the_mean_over_its_device_pairs():
    cost = CostModel(fork_graph(100.0), two_nodes(network_bw=1.0, link_bw=1000.0))
    assert scope_edge_cost(cost, "node") == pytest.approx([100.0] * 3)
    assert scope_edge_cost(cost, "device") == pytest.approx([0.1] * 3)


def test_a_group_never_grows_past_its_cap():
    cost = CostModel(fork_graph(100.0), two_nodes())
    group = heavy_edge_groups(cost, "node", cap=2.0)
    assert np.bincount(group).max() == 2


def test_node_grouping_keeps_a_gather_on_one_node_where_heft_crosses_the_network():
    cost = CostModel(gather_graph(), two_nodes())
    h = heft(cost)
    s = grouped_schedule(cost, "node")
    # HEFT spreads the sources over all four processors; two outputs then cross the network (10 s).
    assert h.makespan == pytest.approx(13.0)
    # On one node: four sources per processor, 0.01 s inside the node, then the join.
    assert s.makespan == pytest.approx(5.01)
    assert len(set(cost.node_of[s.device].tolist())) == 1
    ms, valid, _ = evaluate(cost, s)
    assert valid and ms == pytest.approx(s.makespan)


def test_device_grouping_keeps_a_dear_fork_on_one_device():
    cost = CostModel(fork_graph(100.0), two_nodes(network_bw=1.0, link_bw=1.0))
    s = grouped_schedule(cost, "device")
    assert len(set(s.device.tolist())) == 1
    assert s.makespan == pytest.approx(4.0)


def test_device_grouping_respects_a_device_restriction():
    cost = CostModel(fork_graph(100.0), two_nodes(network_bw=1.0, link_bw=1.0))
    s = grouped_schedule(cost, "device", devices=np.array([3]))
    assert (s.device == 3).all()


def test_auto_is_never_worse_than_heft_nor_than_a_grouping_candidate():
    cost = CostModel(gather_graph(), two_nodes())
    s = auto_module.auto(cost, exact=False)
    assert s.makespan <= grouped_schedule(cost, "node").makespan * (1 + 1e-12)
    assert s.makespan < heft(cost).makespan


@pytest.mark.parametrize("seed", [0, 1])
def test_auto_beats_or_ties_every_grouping_and_cheap_source_candidate_on_random_graphs(seed):
    cost = CostModel(random_graph(n=80, seed=seed), slow_mixed_cluster())
    s = auto_module.auto(cost, exact=False)
    ms, valid, _ = evaluate(cost, s)
    assert valid and ms == pytest.approx(s.makespan, rel=1e-12)
    assert ms <= heft(cost).makespan * (1 + 1e-12)
    for scope in ("node", "device"):
        for theta in auto_module.GROUP_THETAS:
            assert ms <= grouped_schedule(cost, scope, theta=theta).makespan * (1 + 1e-12)
    co = auto_module.coparent_rank(cost, upward_rank(cost))
    assert ms <= heft(cost, rank=co).makespan * (1 + 1e-12)


def test_grouping_gives_the_same_plan_twice():
    cost = CostModel(random_graph(n=120, seed=5), slow_mixed_cluster())
    for scope in ("node", "device"):
        s1, s2 = grouped_schedule(cost, scope), grouped_schedule(cost, scope)
        assert np.array_equal(s1.device, s2.device)
        assert np.array_equal(s1.start, s2.start) and np.array_equal(s1.finish, s2.finish)


def co_parent_graph():
    """A long task ``L`` (10 s) and a short source ``s`` (1 s, 5 bytes out: 5 s over the link)
    feed one reader ``r`` (1 s); ``K`` (10 s) runs beside them. Two processors, one node."""
    g = new_graph("coparent", kind="workflow")
    for name, t in (("L", 10.0), ("K", 10.0), ("s", 1.0), ("r", 1.0)):
        add_task(g, name, name, times={"P": t})
    g.add_edge("L", "r", bytes=0.0)
    g.add_edge("s", "r", bytes=5.0)
    one_node = cluster_from_dict({
        "name": "one", "network": {"bandwidth": 1, "latency": 0},
        "nodes": [{"name": "n", "link": {"bandwidth": 1, "latency": 0},
                   "devices": [{"name": f"p{i}", "kind": "cpu", "model": "P"} for i in range(2)]}]})
    return CostModel(g, one_node)


def test_a_cheap_source_is_ranked_just_above_the_long_task_beside_it():
    cost = co_parent_graph()
    base = upward_rank(cost)
    co = auto_module.coparent_rank(cost, base)
    pos = {name: cost.pos[name] for name in "LKsr"}
    assert base[pos["s"]] < base[pos["L"]] < co[pos["s"]]
    for name in "LKr":                              # only sources that share a reader move
        assert co[pos[name]] == base[pos[name]]
    order = priority_order(cost, co).tolist()
    assert order.index(pos["s"]) == 0 and order.index(pos["r"]) == 3


def test_placing_the_cheap_source_first_hides_its_transfer_behind_the_long_task():
    cost = co_parent_graph()
    # HEFT places s after L and K (on L's processor, 10-11 s), so r ends at 12 s.
    assert heft(cost).makespan == pytest.approx(12.0)
    # First, s runs at 0-1 s and its output reaches L's processor at 6 s, before L ends at 10 s.
    co = auto_module.coparent_rank(cost, upward_rank(cost))
    assert heft(cost, rank=co).makespan == pytest.approx(11.0)
    assert auto_module.auto(cost, exact=False).makespan == pytest.approx(11.0)
