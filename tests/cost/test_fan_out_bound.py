"""The fan-out bound: no plan of the cost model finishes before it, and where a gating task's output
is expensive to move, it is the bound that says how long any plan must take.

The reference for "no plan" is exhaustive search on tiny graphs (every assignment, every topological
order, each re-timed by ``simulate``; memory is not constrained, so its optimum is at most the
memory-valid one) and the exact CP-SAT model on graphs of ten tasks; HEFT and ``auto`` on larger
random graphs give plans the bound must never exceed either.
"""


import numpy as np
import pytest

from streammap.bench.cases import ccr, shared_random_case
from streammap.cluster.model import load_cluster
from streammap.cost.model import (
    CostModel,
    combined_bound,
    fan_out_bound,
    fork_join_bound,
    lower_bound,
)
from streammap.ir import add_task, new_graph
from streammap.mappers.auto import auto
from streammap.mappers.heft import heft
from streammap.mappers.optimal import optimal
from tests.helpers.graphs import mixed_cluster, node_cluster, random_graph, random_model_times, timed_graph
from tests.helpers.optimum import exhaustive_optimum
from tests.helpers.paths import SHARED, needs_shared

#: Relative slack for float sums taken in another order by the simulator.
RTOL = 1e-9


def random_tiny_case(seed):
    """A fan-out or fan-in of 4-5 tasks on 2-3 devices of two models, some tasks pinned to a model,
    heavy, light and zero-byte edges, links of random speed and latency."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(4, 6))
    times = []
    for _ in range(n):
        times.append(random_model_times(rng))
    edges = []
    for child in range(1, n):                              # task 0 gates every other one
        edges.append((0, child, float(rng.choice([0.0, rng.uniform(0.1, 2.0), rng.uniform(2.0, 10.0)]))))
    if rng.random() < 0.5:                                 # and half the time a join closes it
        edges = [(u, v, b) for u, v, b in edges if v != n - 1]
        edges += [(u, n - 1, float(rng.uniform(0.0, 5.0))) for u in range(1, n - 1)]
    layout = rng.integers(0, 3)
    if layout == 0:
        nodes = [(["A", "B"], float(rng.uniform(1.0, 20.0)), float(rng.uniform(0.0, 0.5)))]
    elif layout == 1:
        nodes = [(["A", "A"], float(rng.uniform(1.0, 20.0)), 0.0), (["B"], 1.0, 0.0)]
    else:
        nodes = [(["A", "B", "A"], float(rng.uniform(1.0, 20.0)), float(rng.uniform(0.0, 0.5)))]
    network = (float(rng.uniform(0.2, 2.0)), float(rng.uniform(0.0, 1.0)))
    return CostModel(timed_graph(times, edges), node_cluster(nodes, network))


@pytest.mark.parametrize("seed", range(40))
def test_no_plan_of_a_tiny_graph_finishes_before_the_bound(seed):
    cost = random_tiny_case(seed)
    optimum = exhaustive_optimum(cost, memory=False)
    assert fan_out_bound(cost) <= optimum * (1 + RTOL)
    assert combined_bound(cost) <= optimum * (1 + RTOL)


def fan_out(n_children, nbytes):
    """t0 (1 s) sends ``nbytes`` to each of ``n_children`` tasks of 1 s, on two devices joined by 1 byte/s."""
    times = [{"A": 1.0, "B": 1.0}] * (n_children + 1)
    return CostModel(timed_graph(times, [(0, c, nbytes) for c in range(1, n_children + 1)]), node_cluster([(["A", "B"], 1.0, 0.0)]))


def test_children_stay_with_a_gate_whose_output_costs_more_to_move_than_to_wait_for():
    # Moving a child's input takes 10 s, running all three after the gate 3 s: the optimum (4 s)
    # keeps them on the gate's device. The transfer-blind bounds see 2 devices for 4 s of work.
    cost = fan_out(3, 10.0)
    assert fork_join_bound(cost) == pytest.approx(2.5)
    assert fan_out_bound(cost) == pytest.approx(4.0)
    assert exhaustive_optimum(cost, memory=False) == pytest.approx(4.0)


def test_children_that_are_cheap_to_move_share_the_far_devices_time():
    # 0.5 s to move: a child off the gate's device ends at 1 + 0.5 + 1 = 2.5 s at the soonest, but
    # the three seconds of children must fit on the gate's device from 1 s and on the other from
    # 1.5 s: (T - 1) + (T - 1.5) >= 3 gives T = 2.75 s. The optimum is 3 s (a task does not split).
    cost = fan_out(3, 0.5)
    assert fan_out_bound(cost) == pytest.approx(2.75)
    assert exhaustive_optimum(cost, memory=False) == pytest.approx(3.0)


def test_a_zero_byte_edge_still_pays_the_links_latency():
    times = [{"A": 1.0, "B": 1.0}] * 4
    lat = 0.25
    cost = CostModel(timed_graph(times, [(0, c, 0.0) for c in (1, 2, 3)]), node_cluster([(["A", "B"], 1.0, lat)]))
    # Three seconds of children on the gate's device from 1 s and on the other from 1 + latency.
    assert fan_out_bound(cost) == pytest.approx(1.0 + (3.0 + lat) / 2)
    assert fan_out_bound(cost) <= exhaustive_optimum(cost, memory=False)
    # Nothing to move and no latency: what is left is the transfer-free fork-join bound.
    free = CostModel(timed_graph(times, [(0, c, 0.0) for c in (1, 2, 3)]), node_cluster([(["A", "B"], 1.0, 0.0)]))
    assert fan_out_bound(free) == pytest.approx(fork_join_bound(free)) == pytest.approx(2.5)


def test_on_one_device_every_child_runs_after_the_gate_in_turn():
    times = [{"A": 2.0}, {"A": 1.0}, {"A": 3.0}, {"A": 0.5}, {"A": 1.0}]
    # t3 -> t4 gives t3 a tail of 1 s; the last child to end has a tail of at least 0 s.
    cost = CostModel(timed_graph(times, [(0, 1, 5.0), (0, 2, 5.0), (0, 3, 5.0), (3, 4, 1.0)]), node_cluster([(["A"], 1.0, 0.0)]))
    assert fan_out_bound(cost) == pytest.approx(2.0 + 1.0 + 3.0 + 0.5)
    assert fan_out_bound(cost) <= exhaustive_optimum(cost, memory=False) * (1 + RTOL)


def test_a_child_eligible_only_on_the_gates_device_stays_there():
    # t1 runs only on model A: with the gate on A it must run there after it, with the gate on B it
    # pays the 10 s transfer. The gate is faster on B, which the bound must not take for granted.
    times = [{"A": 3.0, "B": 1.0}, {"A": 1.0}, {"A": 1.0, "B": 1.0}]
    cost = CostModel(timed_graph(times, [(0, 1, 10.0), (0, 2, 10.0)]), node_cluster([(["A", "B"], 1.0, 0.0)]))
    # Gate on A: both children after it there (3 + 2 = 5), or t2 far (3 + 10 + 1 = 14, and t1 still 4): 5.
    # Gate on B: t1 must move (1 + 10 + 1 = 12). The least of the two: 5, the optimum.
    assert fan_out_bound(cost) == pytest.approx(5.0)
    assert exhaustive_optimum(cost, memory=False) == pytest.approx(5.0)


def test_a_gate_that_can_run_nowhere_has_no_plan():
    times = [{"C": 1.0}, {"A": 1.0}, {"A": 1.0}]
    cost = CostModel(timed_graph(times, [(0, 1, 1.0), (0, 2, 1.0)]), node_cluster([(["A", "B"], 1.0, 0.0)]))
    assert fan_out_bound(cost) == np.inf


def test_a_graph_without_edges_has_nothing_to_say():
    cost = CostModel(timed_graph([{"A": 1.0}, {"A": 2.0}], []), node_cluster([(["A"], 1.0, 0.0)]))
    assert fan_out_bound(cost) == 0.0
    assert combined_bound(cost) == pytest.approx(3.0)


def test_the_join_mirrors_the_fan_out():
    # Three parents of 1 s each send 10 bytes (10 s) to a join of 1 s: keeping them on the join's
    # device costs 3 + 1 = 4 s, the optimum; reversing every edge gives the fan-out of 4 s too.
    times = [{"A": 1.0, "B": 1.0}] * 4
    join = CostModel(timed_graph(times, [(p, 3, 10.0) for p in (0, 1, 2)]), node_cluster([(["A", "B"], 1.0, 0.0)]))
    assert fan_out_bound(join) == pytest.approx(4.0)
    assert exhaustive_optimum(join) == pytest.approx(4.0)


def exact_case(seed):
    """A ten-task random DAG on a shared cluster at CCR 1 or 10 (the exact model proves these)."""
    cl = ["hetero-2x4", "mixed-vendors", "small-memory"][seed % 3]
    case = shared_random_case(10, load_cluster(SHARED / "clusters" / f"{cl}.yaml"), ccr=(1.0, 10.0)[seed % 2],
                              seed=seed, out_degree=3 + seed % 3)
    g, c = case.load()
    return CostModel(g, c)


@needs_shared
@pytest.mark.parametrize("seed", range(8))
def test_the_exact_optimum_is_never_below_the_bound(seed):
    cost = exact_case(seed)
    plan = optimal(cost, work=10.0)
    bound = combined_bound(cost)
    assert bound <= plan.makespan * (1 + RTOL)
    assert fan_out_bound(cost) <= plan.makespan * (1 + RTOL)


@needs_shared
@pytest.mark.parametrize("ccr", [0.1, 1.0, 10.0])
@pytest.mark.parametrize("cl", ["hetero-2x4", "mixed-vendors", "small-memory", "topcuoglu-3p"])
def test_heft_and_auto_plans_are_never_below_the_bound(cl, ccr):
    for seed in range(3):
        case = shared_random_case(40, load_cluster(SHARED / "clusters" / f"{cl}.yaml"), ccr=ccr, seed=seed)
        cost = CostModel(*case.load())
        bound = fan_out_bound(cost)
        assert bound <= heft(cost, memory_aware=False).makespan * (1 + RTOL)
        assert bound <= auto(cost, exact=False).makespan * (1 + RTOL)


def test_pinned_tasks_and_a_mixed_cluster_keep_the_bound_valid():
    for seed in range(4):
        cost = CostModel(random_graph(n=80, seed=seed), mixed_cluster(memory="64GiB"))
        assert fan_out_bound(cost) <= heft(cost, memory_aware=False).makespan * (1 + RTOL)


def bwa_like(nbytes):
    """An index task whose output (``nbytes``) feeds 32 aligners, all merged: BWA's shape."""
    g = new_graph("bwa", kind="workflow", source="bwa.json")
    add_task(g, "index", "k", runtime=0.02, mem=1e9, out=1e9)
    add_task(g, "merge", "k", runtime=0.01, mem=1e9, out=1e9)
    for i in range(32):
        add_task(g, f"align{i}", "k", runtime=0.01, mem=1e9, out=1e9)
        g.add_edge("index", f"align{i}", bytes=nbytes)
        g.add_edge(f"align{i}", "merge", bytes=nbytes / 100)
    return g


@needs_shared
def test_on_a_bwa_like_fan_out_at_high_ccr_the_bound_is_within_a_few_percent_of_heft():
    cost = CostModel(bwa_like(200e9), load_cluster(SHARED / "clusters" / "hetero-2x4.yaml"))
    assert ccr(cost) > 10
    plan = heft(cost).makespan
    old = max(lower_bound(cost), fork_join_bound(cost))
    new = fan_out_bound(cost)
    assert old < 0.5 * plan                    # the transfer-blind bounds leave HEFT looking 2x off
    assert plan * 0.97 <= new <= plan * (1 + RTOL)
    assert combined_bound(cost) == pytest.approx(new)
