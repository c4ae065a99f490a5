"""The transfer-aware bounds (``comm_path_bound``, ``crossing_bound``, together ``transfer_bound``):
no plan of the cost model finishes before them, and where transfers are dear they say how long any
plan must take when the transfer-blind bounds cannot.

The reference for "no plan" is exhaustive search on tiny graphs (every assignment, every topological
order, each re-timed by ``simulate``; memory not constrained, so its optimum is at most the
memory-valid one), the exact CP-SAT model where it proves optimality on graphs of 8-12 tasks, and
HEFT and ``auto`` on larger random graphs, whose plans the bounds must never exceed either.
"""

import numpy as np
import pytest

from streammap.bench.cases import scale_cluster_for_ccr, shared_random_case
from streammap.cluster.model import dump_cluster_spec, load_cluster
from streammap.compiler import compile as compile_plan
from streammap.cost.model import (
    CostModel,
    combined_bound,
    comm_path_bound,
    crossing_bound,
    fan_out_bound,
    fork_join_bound,
    lower_bound,
    transfer_bound,
)
from streammap.io.importers import load_graph
from streammap.ir import write_graph
from streammap.mappers.auto import auto
from streammap.mappers.exact import solve_exact
from streammap.mappers.heft import heft
from streammap.views.show import plan_verdict
from tests.helpers.graphs import node_cluster, random_model_times, timed_graph
from tests.helpers.optimum import exhaustive_optimum
from tests.helpers.paths import SHARED, needs_shared

#: Relative slack for float sums taken in another order by the simulator.
RTOL = 1e-9


def old_bound(cost):
    """The transfer-blind bounds and the fan-out bound: what plans were measured against before."""
    return max(lower_bound(cost), fork_join_bound(cost), fan_out_bound(cost))


# ---------------------------------------------------------------------- what the bounds say

def join_fork_join():
    """Two parents join in t2, which forks to two children that join in t5; every task 1 s on
    either of two devices, every edge 10 s to cross."""
    times = [{"A": 1.0, "B": 1.0}] * 6
    edges = [(0, 2, 10.0), (1, 2, 10.0), (2, 3, 10.0), (2, 4, 10.0), (3, 5, 10.0), (4, 5, 10.0)]
    return CostModel(timed_graph(times, edges), node_cluster([(["A", "B"], 1.0, 0.0)]))


def test_every_join_and_fork_along_the_path_pays_a_transfer_or_waits_its_turn():
    # Parents of a join either share its device and run one after the other, or send 10 s of data:
    # t2 starts at 2 s at the soonest, its children end at 5 s on its device, t5 at 6 s. The optimum
    # runs everything on one device (6 s); the bounds that look at one gate at a time stop at 5 s.
    cost = join_fork_join()
    assert comm_path_bound(cost) == pytest.approx(6.0)
    assert old_bound(cost) < 5.0 + RTOL
    assert combined_bound(cost) == pytest.approx(6.0)
    assert exhaustive_optimum(cost, memory=False) == pytest.approx(6.0)


def test_a_compiled_plan_records_the_bound_and_shows_it_optimal(tmp_path):
    # The plan of join_fork_join (6 s, everything on one device) is proven optimal by the transfer
    # bound alone, with no solver: its mapper block records 6 s, and show says so in its sentence.
    cost = join_fork_join()
    write_graph(cost.graph, tmp_path / "g.json")
    (tmp_path / "c.yaml").write_text(dump_cluster_spec(cost.cluster.spec))
    plan = compile_plan(tmp_path / "g.json", str(tmp_path / "c.yaml"), history=False)
    assert plan.mapper.lower_bound == pytest.approx(6.0) == pytest.approx(plan.mapper.estimated_makespan)
    assert "optimal: it reaches the lower bound" in plan_verdict(plan)


def test_a_chain_may_stay_on_one_device_and_pays_no_transfer():
    times = [{"A": 1.0, "B": 2.0}] * 4
    cost = CostModel(timed_graph(times, [(0, 1, 50.0), (1, 2, 50.0), (2, 3, 50.0)]), node_cluster([(["A", "B"], 1.0, 0.0)]))
    assert comm_path_bound(cost) == pytest.approx(4.0)
    assert transfer_bound(cost) == pytest.approx(4.0) == pytest.approx(exhaustive_optimum(cost, memory=False))


def mesh(network):
    """Four sources of 1 s each feed each of four sinks of 1 s (one byte an edge), on two nodes of
    two devices linked inside at 1,000 bytes/s; ``network`` (bandwidth, latency) between them."""
    times = [{"A": 1.0}] * 8
    edges = [(s, 4 + k, 1.0) for s in range(4) for k in range(4)]
    return CostModel(timed_graph(times, edges), node_cluster([(["A", "A"], 1000.0, 0.0)] * 2, network=network))


@pytest.mark.parametrize("network", [(0.01, 0.0), (1e9, 100.0)], ids=["slow-link", "long-latency"])
def test_edges_too_dear_to_cross_the_network_keep_the_graph_on_one_node(network):
    # Crossing the network takes 100 s, longer than any plan on one node: all eight seconds of work
    # run on one node's two devices, 4 s at least (4.002 s with the transfers inside the node). The
    # transfer-blind bounds spread it over all four devices, the fan-out bound over a gate's children.
    cost = mesh(network)
    assert crossing_bound(cost) == pytest.approx(4.0)
    assert old_bound(cost) < 3.01
    assert combined_bound(cost) == pytest.approx(4.0)
    best = auto(cost, exact=False)
    assert 4.0 <= best.makespan <= 4.003


def test_a_network_as_fast_as_the_node_ties_nothing_to_a_node():
    # Every edge may cross for 1 ms: a plan either pays one on a source-sink path (2.001 s) or runs
    # all eight seconds on one device. Nothing beyond what the fan-out bound already saw.
    cost = mesh((1000.0, 0.0))
    assert crossing_bound(cost) == pytest.approx(2.001)
    assert combined_bound(cost) == pytest.approx(old_bound(cost))


def test_a_task_that_can_run_nowhere_has_no_plan():
    times = [{"C": 1.0}, {"A": 1.0}, {"A": 1.0}]
    cost = CostModel(timed_graph(times, [(0, 1, 1.0), (0, 2, 1.0)]), node_cluster([(["A", "B"], 1.0, 0.0)]))
    assert comm_path_bound(cost) == np.inf
    assert crossing_bound(cost) == np.inf


def test_without_edges_the_path_bound_is_the_longest_task_and_nothing_is_forced():
    cost = CostModel(timed_graph([{"A": 1.0}, {"A": 2.0, "B": 3.0}], []), node_cluster([(["A", "B"], 1.0, 0.0)]))
    assert comm_path_bound(cost) == pytest.approx(2.0)
    assert crossing_bound(cost) == 0.0
    assert transfer_bound(cost) == pytest.approx(2.0)


@needs_shared
def test_montage_at_ccr_10_on_two_nodes_is_bounded_by_one_node():
    # The shared Montage workflow at CCR 10 on hetero-2x4: its projections and difference fits
    # exchange data that crosses the network slower than a plan on the four A100s runs, so they
    # share a node, and the bound rises well above the transfer-blind ones (which spread the work
    # over all eight devices); no plan goes below it.
    g = load_graph(SHARED / "workflows" / "montage-chameleon-2mass-01d-001.json")
    cl = scale_cluster_for_ccr(g, load_cluster(SHARED / "clusters" / "hetero-2x4.yaml"), 10.0)
    cost = CostModel(g, cl)
    assert transfer_bound(cost) > 1.2 * old_bound(cost)
    assert combined_bound(cost) <= heft(cost, memory_aware=False).makespan * (1 + RTOL)


# ---------------------------------------------------------------------- never above a plan

def random_tiny_case(seed):
    """A random DAG of 4-5 tasks on 1-3 nodes of 1-2 devices (two models), some tasks pinned to a
    model or sharing, heavy, light and zero-byte edges, links of random speed and latency."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(4, 6))
    times, shares = [], []
    for _ in range(n):
        times.append(random_model_times(rng))
        shares.append(float(rng.choice([1.0, 1.0, 0.5])))
    edges = [(u, v, float(rng.choice([0.0, rng.uniform(0.1, 2.0), rng.uniform(2.0, 20.0)])))
             for v in range(1, n) for u in range(v) if rng.random() < 0.45]
    nodes = []
    for _ in range(int(rng.integers(1, 4))):
        models = [str(m) for m in rng.choice(["A", "B"], size=int(rng.integers(1, 3)))]
        nodes.append((models, float(rng.uniform(1.0, 20.0)), float(rng.uniform(0.0, 0.5))))
    while sum(len(m) for m, _, _ in nodes) > 3:
        nodes.pop()
    network = (float(rng.uniform(0.2, 2.0)), float(rng.uniform(0.0, 1.0)))
    return CostModel(timed_graph(times, edges, shares), node_cluster(nodes, network))


@pytest.mark.parametrize("seed", range(60))
def test_no_plan_of_a_tiny_graph_finishes_before_the_bounds(seed):
    cost = random_tiny_case(seed)
    optimum = exhaustive_optimum(cost, memory=False)
    assert comm_path_bound(cost) <= optimum * (1 + RTOL)
    assert crossing_bound(cost) <= optimum * (1 + RTOL)
    assert combined_bound(cost) <= optimum * (1 + RTOL)


@needs_shared
@pytest.mark.parametrize("seed", range(12))
def test_the_proven_optimum_is_never_below_the_bounds(seed):
    cl = ["hetero-2x4", "mixed-vendors", "small-memory"][seed % 3]
    ccr = (0.1, 1.0, 10.0)[(seed // 3) % 3]
    case = shared_random_case(8 + seed % 5, load_cluster(SHARED / "clusters" / f"{cl}.yaml"), ccr=ccr, seed=seed,
                              out_degree=2 + seed % 3)
    cost = CostModel(*case.load())
    result = solve_exact(cost, heft(cost, memory_aware=False), work=5.0)
    assert result.optimal
    assert transfer_bound(cost) <= result.schedule.makespan * (1 + RTOL)
    assert combined_bound(cost) <= result.schedule.makespan * (1 + RTOL)


@needs_shared
@pytest.mark.parametrize("ccr", [0.1, 1.0, 10.0])
@pytest.mark.parametrize("cl", ["hetero-2x4", "mixed-vendors", "small-memory"])
def test_heft_and_auto_plans_are_never_below_the_bounds(cl, ccr):
    case = shared_random_case(40, load_cluster(SHARED / "clusters" / f"{cl}.yaml"), ccr=ccr, seed=1)
    cost = CostModel(*case.load())
    bound = transfer_bound(cost)
    assert bound <= heft(cost, memory_aware=False).makespan * (1 + RTOL)
    assert bound <= auto(cost, exact=False).makespan * (1 + RTOL)
