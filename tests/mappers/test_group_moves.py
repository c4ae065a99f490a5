"""Heavy-neighbourhood moves of the local search: where every edge of a fork costs far more to cross
than its tasks cost to run, a task can only leave its device together with the tasks it exchanges
dear data with. Moving one task (or a task and its critical neighbour) never pays there; moving
the fork whole does. ``auto`` runs such a search as one of its candidates: it stays never worse
than HEFT, memory-valid, and maps the same inputs to the same plan."""

import importlib

import numpy as np
import pytest

from streammap.cost.model import CostModel
from streammap.ir import add_task, new_graph
from streammap.mappers.heft import heft
from streammap.mappers.local_search import heavy_neighbours, improve
from streammap.mappers.schedule import evaluate, fits, peak_memory
from tests.helpers.graphs import montage_like, processors

auto_module = importlib.import_module("streammap.mappers.auto")




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
