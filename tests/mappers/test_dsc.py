"""Dominant Sequence Clustering: a task joins its predecessor's cluster exactly when that makes it
start earlier, so dear edges are zeroed and cheap ones leave the parallelism; clusters merge along
their heaviest traffic down to the device count; the plans are memory-valid, the same every time,
and ``auto`` with these candidates is never worse than HEFT on a Montage-shaped workflow."""

import importlib

import numpy as np
import pytest

from streammap.cluster.model import cluster_from_dict
from streammap.cost.model import CostModel
from streammap.ir import add_task, new_graph
from streammap.mappers.dsc import dsc_clusters, dsc_schedule, merge_clusters
from streammap.mappers.heft import heft
from streammap.mappers.schedule import evaluate
from tests.helpers.graphs import mixed_cluster, random_graph

auto_module = importlib.import_module("streammap.mappers.auto")


def processors(n=2, nodes=1, network_bw=1.0, link_bw=1.0):
    """``nodes`` nodes of ``n`` equal processors; a byte takes ``1 / bw`` seconds, no latency."""
    return cluster_from_dict({
        "name": "procs", "network": {"bandwidth": network_bw, "latency": 0},
        "nodes": [{"name": f"n{k}", "link": {"bandwidth": link_bw, "latency": 0},
                   "devices": [{"name": f"p{i}", "kind": "cpu", "model": "P"} for i in range(n)]}
                  for k in range(nodes)]})


def fork_join(nbytes):
    """``s`` forks into ``a`` and ``b``, joined by ``j``; 1 s each, ``nbytes`` on every edge."""
    g = new_graph("forkjoin", kind="workflow")
    for name in "sabj":
        add_task(g, name, name, times={"P": 1.0})
    for u, v in (("s", "a"), ("s", "b"), ("a", "j"), ("b", "j")):
        g.add_edge(u, v, bytes=nbytes)
    return g


def clusters_by_name(cost, cluster):
    """The clusters as sets of task names, in a stable form for comparison."""
    groups = {}
    for t, k in enumerate(cluster.tolist()):
        groups.setdefault(k, set()).add(cost.tasks[t])
    return sorted(groups.values(), key=sorted)


def test_dear_edges_of_a_fork_join_are_all_zeroed():
    # Every edge costs 10 s against 1 s of work: each task starts earliest beside its parent.
    cost = CostModel(fork_join(10.0), processors())
    assert clusters_by_name(cost, dsc_clusters(cost)) == [{"s", "a", "b", "j"}]


def test_cheap_edges_keep_the_fork_parallel_and_the_join_beside_its_later_branch():
    # Edges of 0.1 s: a joins s (it can start at 1 s there instead of 1.1 s), b starts at 1.1 s in
    # a cluster of its own rather than wait for a until 2 s, and j joins b, whose output arrives
    # last (start 2.1 s beside b instead of 2.2 s alone): DSC's parallel time 3.1 s against 4 s serial.
    cost = CostModel(fork_join(0.1), processors())
    assert clusters_by_name(cost, dsc_clusters(cost)) == [{"s", "a"}, {"b", "j"}]
    s = dsc_schedule(cost)
    assert s.makespan == pytest.approx(3.1)


def test_a_dear_fork_join_runs_on_one_device_without_a_transfer():
    # Serial on one device: 4 s; any branch on the other device would pay two 10-s transfers.
    cost = CostModel(fork_join(10.0), processors())
    s = dsc_schedule(cost)
    assert len(set(s.device.tolist())) == 1 and s.makespan == pytest.approx(4.0)


def test_merging_joins_the_clusters_that_exchange_the_most_bytes_first():
    # Four independent pairs x_i -> y_i; x0 also feeds y1 with 5 bytes, x2 feeds y3 with 1 byte.
    g = new_graph("pairs", kind="workflow")
    for i in range(4):
        add_task(g, f"x{i}", "x", times={"P": 1.0})
        add_task(g, f"y{i}", "y", times={"P": 1.0})
        g.add_edge(f"x{i}", f"y{i}", bytes=0.0)
    g.add_edge("x0", "y1", bytes=5.0)
    g.add_edge("x2", "y3", bytes=1.0)
    cost = CostModel(g, processors(n=2))
    pairs = np.array([int(name[1]) for name in cost.tasks])    # one cluster per pair
    merged = merge_clusters(cost, pairs, target=3, cap=100.0)
    assert clusters_by_name(cost, merged) == [{"x0", "y0", "x1", "y1"}, {"x2", "y2"}, {"x3", "y3"}]
    two = merge_clusters(cost, pairs, target=2, cap=100.0)
    assert len(set(two.tolist())) == 2
    # A cap below two pairs' work leaves every pair alone.
    assert len(set(merge_clusters(cost, pairs, target=1, cap=3.0).tolist())) == 4


@pytest.mark.parametrize("kw", [dict(), dict(target=1.0, weight="min"), dict(target=1.0, comm="device", scope="node")])
def test_dsc_plans_are_valid_and_the_same_every_time(kw):
    cost = CostModel(random_graph(n=120, seed=3), mixed_cluster("64GiB", network=("0.2 GB/s", "1ms")))
    s1, s2 = dsc_schedule(cost, **kw), dsc_schedule(cost, **kw)
    assert np.array_equal(s1.device, s2.device)
    assert np.array_equal(s1.start, s2.start) and np.array_equal(s1.finish, s2.finish)
    ms, valid, _ = evaluate(cost, s1)
    assert valid and ms == pytest.approx(s1.makespan, rel=1e-12)


def test_a_device_restriction_is_kept():
    cost = CostModel(fork_join(0.1), processors(n=4))
    s = dsc_schedule(cost, devices=np.array([1, 2]))
    assert set(s.device.tolist()) <= {1, 2}


def montage_like(n=6, nbytes=40.0):
    """A Montage-shaped workflow: ``n`` projections, a difference fit per neighbouring pair, one
    concatenation and background model read by ``n`` background corrections (each also reading
    its projection), then table, co-add and viewer. Every edge carries ``nbytes``."""
    g = new_graph("montage", kind="workflow")
    for name, t in (("concat", 2.0), ("bgmodel", 2.0), ("imgtbl", 1.0), ("add", 4.0), ("viewer", 1.0)):
        add_task(g, name, name, times={"P": t, "Q": 2 * t})
    for i in range(n):
        add_task(g, f"proj{i}", "proj", times={"P": 3.0, "Q": 6.0})
        add_task(g, f"bg{i}", "bg", times={"P": 1.0, "Q": 2.0})
    for i in range(n - 1):
        add_task(g, f"diff{i}", "diff", times={"P": 1.0, "Q": 2.0})
        g.add_edge(f"proj{i}", f"diff{i}", bytes=nbytes)
        g.add_edge(f"proj{i + 1}", f"diff{i}", bytes=nbytes)
        g.add_edge(f"diff{i}", "concat", bytes=nbytes)
    g.add_edge("concat", "bgmodel", bytes=nbytes)
    for i in range(n):
        g.add_edge("bgmodel", f"bg{i}", bytes=nbytes)
        g.add_edge(f"proj{i}", f"bg{i}", bytes=nbytes)
        g.add_edge(f"bg{i}", "imgtbl", bytes=nbytes)
        g.add_edge(f"bg{i}", "add", bytes=nbytes)
    g.add_edge("imgtbl", "add", bytes=nbytes)
    g.add_edge("add", "viewer", bytes=nbytes)
    return g


def fast_and_slow_nodes():
    """Two fast processors on one node, two at half speed on another; a slow network between."""
    return cluster_from_dict({
        "name": "fast-slow", "network": {"bandwidth": 2.0, "latency": 0},
        "nodes": [{"name": "fast", "link": {"bandwidth": 100.0, "latency": 0},
                   "devices": [{"name": f"p{i}", "kind": "cpu", "model": "P"} for i in range(2)]},
                  {"name": "slow", "link": {"bandwidth": 100.0, "latency": 0},
                   "devices": [{"name": f"q{i}", "kind": "cpu", "model": "Q"} for i in range(2)]}]})


@pytest.mark.parametrize("nbytes", [4.0, 40.0])
def test_auto_is_never_worse_than_heft_nor_than_a_dsc_candidate_on_a_montage_shape(nbytes):
    cost = CostModel(montage_like(nbytes=nbytes), fast_and_slow_nodes())
    s = auto_module.auto(cost, exact=False)
    ms, valid, _ = evaluate(cost, s)
    assert valid and ms == pytest.approx(s.makespan, rel=1e-12)
    assert ms <= heft(cost).makespan * (1 + 1e-12)
    assert ms <= heft(cost, memory_aware=False).makespan * (1 + 1e-12)
    for _, kw in auto_module.DSC_VARIANTS:
        assert ms <= dsc_schedule(cost, **kw).makespan * (1 + 1e-12)
