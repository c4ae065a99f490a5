"""Large-neighbourhood search (``streammap.mappers.lns``): a window placed badly is repaired, the
search never returns a longer or memory-invalid plan, and the same inputs give the same plan.

Every plan is checked by the benchmark model (``simulate``, ``evaluate``), never trusted.
"""

import numpy as np
import pytest

from streammap.cluster.model import cluster_from_dict
from streammap.cost.model import CostModel
from streammap.ir import add_task, new_graph
from streammap.mappers import lns
from streammap.mappers.auto import auto
from streammap.mappers.exact import available
from streammap.mappers.heft import heft
from streammap.mappers.lns import (
    LNS_MAX_TASKS,
    PATIENCE,
    PLAN_SHARE,
    improve_plan,
    solve_window,
    window_budget,
    window_seconds,
    windows,
)
from streammap.mappers.schedule import evaluate, simulate
from tests.helpers.graphs import mixed_cluster, random_graph

pytestmark = pytest.mark.skipif(not available(), reason="OR-Tools is not installed")


def gpu_and_cpu():
    """One node: a GPU (model A) and a CPU ten times slower, joined by a 1 GB/s link."""
    return cluster_from_dict({"name": "two", "nodes": [{"name": "n", "link": {"bandwidth": 1e9, "latency": 0.0},
                                                          "devices": [{"name": "g0", "kind": "gpu", "model": "A"},
                                                                      {"name": "c0", "kind": "cpu", "model": "C"}]}]})


def chain_cost(n=12):
    """A chain t0 -> ... -> t(n-1): 1 s each on the GPU, 10 s on the CPU, 1 GB along every edge."""
    g = new_graph("chain", kind="workflow", source="<chain>")
    for i in range(n):
        add_task(g, f"t{i}", "k", times={"A": 1.0, "C": 10.0})
        if i:
            g.add_edge(f"t{i - 1}", f"t{i}", bytes=1e9)
    return CostModel(g, gpu_and_cpu())


def plan_of(cost, device):
    """The plan that runs each task on ``device[t]`` in topological order, re-timed."""
    device = np.asarray(device, dtype=np.int64)
    order = [cost.topo[device[cost.topo] == d] for d in range(cost.n_devices)]
    return simulate(cost, device, order)


def test_a_stretch_of_the_chain_put_on_the_slow_device_is_moved_back():
    cost = chain_cost()
    gpu = int(np.argmin(cost.time[0]))
    bad_dev = np.full(cost.n_tasks, gpu)
    stretch = [cost.tasks.index(f"t{i}") for i in range(4, 8)]
    bad_dev[stretch] = 1 - gpu
    bad = plan_of(cost, bad_dev)
    assert bad.makespan == pytest.approx(8 + 40 + 2)         # 8 s on the GPU, 40 s on the CPU, two 1 s hops

    fixed = solve_window(cost, bad, np.array(stretch))

    assert fixed is not None
    assert fixed.makespan == pytest.approx(12.0)               # all on the GPU again
    assert (fixed.device == gpu).all()


def test_a_window_that_cannot_do_better_gives_nothing():
    cost = chain_cost()
    good = plan_of(cost, np.full(cost.n_tasks, int(np.argmin(cost.time[0]))))
    assert solve_window(cost, good, np.arange(4)) is None


def test_the_search_repairs_a_bad_window_it_was_not_told_about():
    cost = chain_cost()
    gpu = int(np.argmin(cost.time[0]))
    bad_dev = np.full(cost.n_tasks, gpu)
    bad_dev[[cost.tasks.index(f"t{i}") for i in (5, 6)]] = 1 - gpu
    bad = plan_of(cost, bad_dev)

    better = improve_plan(cost, bad)

    assert better.makespan == pytest.approx(12.0)
    assert evaluate(cost, better)[0] == pytest.approx(better.makespan)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_search_never_returns_a_longer_or_memory_invalid_plan(seed):
    # 6 GiB devices: memory binds, so some window solutions break a capacity and must be dropped.
    cost = CostModel(random_graph(n=70, seed=seed), mixed_cluster(memory="6GiB"))
    start = heft(cost)

    got = improve_plan(cost, start, max_windows=3)

    makespan, valid, _ = evaluate(cost, got)
    assert valid
    assert makespan == pytest.approx(got.makespan)
    assert got.makespan <= start.makespan


def test_the_same_inputs_give_the_same_plan():
    cost = CostModel(random_graph(n=70, seed=3), mixed_cluster())
    start = heft(cost)

    a = improve_plan(cost, start, max_windows=12)
    b = improve_plan(cost, start, max_windows=12)

    assert a.makespan < start.makespan                        # the search had something to do
    for field in ("device", "start", "finish"):
        assert getattr(a, field).tobytes() == getattr(b, field).tobytes()


def test_windows_are_small_distinct_and_led_by_the_critical_path():
    cost = CostModel(random_graph(n=200, seed=4), mixed_cluster())
    plan = heft(cost)

    ws = windows(cost, plan)

    assert ws[0][0] == "path"
    assert {kind for kind, _ in ws} == {"path", "pair", "slice"}
    assert all(2 <= w.size <= lns.WINDOW_TASKS and np.array_equal(w, np.unique(w)) for _, w in ws)
    assert len({w.tobytes() for _, w in ws}) == len(ws)


def test_auto_keeps_the_search_improvement_and_is_never_worse_than_without_it():
    cost = CostModel(random_graph(n=70, seed=5), mixed_cluster())

    with_lns = auto(cost)
    without = auto(cost, exact=False)

    assert with_lns.makespan <= without.makespan <= heft(cost).makespan
    assert evaluate(cost, with_lns)[0] == pytest.approx(with_lns.makespan)
    if with_lns.makespan < without.makespan:
        assert with_lns.mapper.endswith("+lns)")


def solved_windows(monkeypatch):
    """Record the windows ``improve_plan`` hands to the solver, in order."""
    seen = []
    real = lns.solve_window

    def record(cost, plan, window, **kw):
        seen.append(np.asarray(window))
        return real(cost, plan, window, **kw)

    monkeypatch.setattr(lns, "solve_window", record)
    return seen


def bad_stretch_chain(n=48, bad=range(30, 34)):
    """A chain of ``n`` tasks on the GPU but for the stretch ``bad`` on the CPU, and that plan."""
    cost = chain_cost(n)
    gpu = int(np.argmin(cost.time[0]))
    dev = np.full(cost.n_tasks, gpu)
    dev[[cost.tasks.index(f"t{i}") for i in bad]] = 1 - gpu
    return cost, plan_of(cost, dev), [cost.tasks.index(f"t{i}") for i in bad]


def test_the_first_window_tried_holds_the_stretch_of_the_critical_path_that_wastes_time():
    cost, bad, stretch = bad_stretch_chain()

    kind, first = windows(cost, bad)[0]

    assert kind == "path"
    assert set(stretch) <= set(first.tolist())
    assert improve_plan(cost, bad, max_windows=1).makespan == pytest.approx(48.0)


def test_after_an_improvement_the_next_window_overlaps_it(monkeypatch):
    # Two bad stretches far apart: the first window repairs one; the next one tried is around it.
    cost, bad, _ = bad_stretch_chain(n=60, bad=[10, 11, 40, 41])
    seen = solved_windows(monkeypatch)

    better = improve_plan(cost, bad, max_windows=2)

    assert better.makespan < bad.makespan
    assert len(seen) == 2 and np.intersect1d(seen[0], seen[1]).size > 0


def test_a_plan_no_window_can_shorten_costs_only_a_few_windows(monkeypatch):
    cost = chain_cost(80)
    good = plan_of(cost, np.full(cost.n_tasks, int(np.argmin(cost.time[0]))))
    seen = solved_windows(monkeypatch)

    assert improve_plan(cost, good, max_windows=50) is good
    assert len(seen) == PATIENCE


def test_graphs_above_the_limit_get_no_search():
    assert window_budget(LNS_MAX_TASKS + 1) == 0
    assert window_budget(LNS_MAX_TASKS) >= 1
    assert window_budget(100) >= window_budget(1_000)


@pytest.mark.parametrize("makespan", [0.5, 5.0, 30.0, 300.0, 3_000.0, 30_000.0])
def test_the_search_spends_at_most_one_percent_of_the_plan_it_shortens(makespan):
    n = window_budget(100, makespan)

    assert n * window_seconds(100) <= PLAN_SHARE * makespan
    assert window_budget(100, 10 * makespan) >= n             # a longer plan is worth more windows
    assert window_budget(1_000, makespan) <= n                # a larger graph's windows cost more
