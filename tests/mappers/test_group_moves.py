"""Heavy-neighbourhood moves of the local search: where every edge of a fork costs far more to cross
than its tasks cost to run, a task can only leave its device together with the tasks it exchanges
dear data with. Moving one task (or a task and its critical neighbour) never pays there; moving
the fork whole does. ``auto`` runs such a search as one of its candidates: it stays never worse
than HEFT, memory-valid, and maps the same inputs to the same plan."""

import importlib

import numpy as np
import pytest

from streammap.cluster.model import cluster_from_dict
from streammap.cost.model import CostModel
from streammap.ir import add_task, new_graph
from streammap.mappers.heft import heft
from streammap.mappers.local_search import heavy_neighbours, improve
from streammap.mappers.schedule import evaluate, fits, peak_memory

auto_module = importlib.import_module("streammap.mappers.auto")


def processors(n=2, bandwidth=1.0):
    """``n`` equal processors on one node, joined by ``bandwidth`` bytes/s, no latency."""
    return cluster_from_dict({
        "name": "procs", "network": {"bandwidth": bandwidth, "latency": 0},
        "nodes": [{"name": "n0", "link": {"bandwidth": bandwidth, "latency": 0},
                   "devices": [{"name": f"p{i}", "kind": "cpu", "model": "P"} for i in range(n)]}]})


def two_forks(nbytes=100.0):
    """Two projections ``p0``, ``p1`` (1 s) each sending ``nbytes`` to three readers of 1 s (two
    difference fits and a background correction, as in Montage)."""
    g = new_graph("forks", kind="workflow")
    for k in range(2):
        add_task(g, f"p{k}", "project", times={"P": 1.0})
        for r in ("d", "e", "b"):
            add_task(g, f"{r}{k}", r, times={"P": 1.0})
            g.add_edge(f"p{k}", f"{r}{k}", bytes=nbytes)
    return g


def all_on_first_device(cost):
    """HEFT restricted to device 0, as a plan of the whole cluster."""
    return auto_module.lift(cost, [0], heft(cost.restrict([0])))


def test_an_edge_dearer_than_its_cheaper_end_joins_its_ends_as_heavy_neighbours():
    dear = CostModel(two_forks(100.0), processors())           # 100 s to cross, 1 s of work
    cheap = CostModel(two_forks(0.5), processors())            # 0.5 s to cross
    nbrs = heavy_neighbours(dear)
    p0 = dear.tasks.index("p0")
    assert sorted(dear.tasks[u] for u in nbrs[p0]) == ["b0", "d0", "e0"]
    assert not any(heavy_neighbours(cheap))


def test_a_fork_of_dear_edges_leaves_its_device_only_whole():
    cost = CostModel(two_forks(100.0), processors())
    start = all_on_first_device(cost)
    assert start.makespan == pytest.approx(8.0)                # eight 1-second tasks in turn
    order = np.argsort(start.seq, kind="stable")
    single = improve(cost, start, order, max_runs=500, kicks=False)
    assert single.makespan == pytest.approx(8.0)               # any lone move pays 100 s
    grouped = improve(cost, start, order, max_runs=500, kicks=False, groups=True)
    assert grouped.makespan == pytest.approx(4.0)              # one fork per processor
    assert len(set(grouped.device.tolist())) == 2
    ms, _, _ = evaluate(cost, grouped)
    assert ms == pytest.approx(grouped.makespan)               # the estimate is the simulated plan


def montage_like(n=6, nbytes=400.0, seed=0):
    """A small Montage: ``n`` projections (8-12 s), a difference fit (1 s) on each neighbouring
    pair, a concatenating fit and a background model (0.5 s each, small outputs), one background
    correction per projection (2 s, reading it and the model) and a co-add (1 s) of every corrected
    image; projections and corrected images are ``nbytes`` each."""
    rng = np.random.default_rng(seed)
    g = new_graph("montage", kind="workflow")
    add_task(g, "concat", "concat", times={"P": 0.5})
    add_task(g, "model", "model", times={"P": 0.5})
    add_task(g, "add", "add", times={"P": 1.0})
    g.add_edge("concat", "model", bytes=1.0)
    for i in range(n):
        add_task(g, f"proj{i}", "project", times={"P": float(rng.uniform(8.0, 12.0))})
        add_task(g, f"bg{i}", "background", times={"P": 2.0})
        g.add_edge(f"proj{i}", f"bg{i}", bytes=nbytes)
        g.add_edge("model", f"bg{i}", bytes=1.0)
        g.add_edge(f"bg{i}", "add", bytes=nbytes)
    for i in range(n - 1):
        add_task(g, f"diff{i}", "diff", times={"P": 1.0})
        g.add_edge(f"proj{i}", f"diff{i}", bytes=nbytes)
        g.add_edge(f"proj{i + 1}", f"diff{i}", bytes=nbytes)
        g.add_edge(f"diff{i}", "concat", bytes=1.0)
    return g


@pytest.mark.parametrize("bandwidth", [4.0, 40.0, 400.0])
def test_auto_on_a_montage_like_graph_is_never_worse_than_heft_and_is_deterministic(bandwidth):
    cost = CostModel(montage_like(), processors(4, bandwidth))
    first, second = auto_module.auto(cost), auto_module.auto(cost)
    assert first.makespan <= heft(cost).makespan * (1 + 1e-12)
    assert first.makespan <= heft(cost, memory_aware=False).makespan * (1 + 1e-12)
    assert np.array_equal(first.device, second.device) and np.array_equal(first.start, second.start)
    assert first.mapper == second.mapper
    assert fits(peak_memory(cost, first.device, first.start, first.finish), cost.capacity).all()


def test_the_heavy_neighbourhood_search_is_deterministic():
    cost = CostModel(montage_like(8, seed=3), processors(4, 10.0))
    h = heft(cost)
    order = np.argsort(h.seq, kind="stable")
    a = improve(cost, h, order, max_runs=300, seed=5, groups=True)
    b = improve(cost, h, order, max_runs=300, seed=5, groups=True)
    assert np.array_equal(a.device, b.device) and a.makespan == b.makespan
    assert a.makespan <= h.makespan
