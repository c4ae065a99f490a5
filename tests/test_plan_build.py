"""The plan lists tasks in start order, ties broken by one fixed topological order, and each task's
deps in that order: the plan file is byte-for-byte the same for the same inputs."""

import networkx as nx
import pytest

from streammap.bench.cases import random_cluster, random_dag
from streammap.compiler import least_position_topological_order
from streammap.cost.model import CostModel
from tests.helpers.graphs import mixed_cluster, random_graph


@pytest.mark.parametrize("graph", [random_graph(200, seed=3), random_dag(500, seed=4, n_models=2),
                                   random_dag(300, alpha=0.3, out_degree=5, seed=5, n_models=2)],
                         ids=["random", "layered", "deep"])
def test_the_tie_breaking_order_is_the_least_position_topological_order(graph):
    cost = CostModel(graph, mixed_cluster() if graph.graph["name"] == "rand" else random_cluster(4, n_models=2))
    expected = [cost.pos[t] for t in nx.lexicographical_topological_sort(graph, key=cost.pos.__getitem__)]
    assert least_position_topological_order(cost).tolist() == expected


def test_a_compiled_plan_records_the_transfer_aware_bound_of_a_fan_out(tmp_path):
    """A gate whose output costs more to move than its readers take to run: the plan's bound counts
    that transfer (the optimum, 4 s, keeps the readers beside the gate), where the transfer-blind
    bounds see two devices for 4 s of work."""
    from streammap.cluster.model import cluster_from_dict, dump_cluster_spec
    from streammap.compiler import compile as compile_plan
    from streammap.cost.model import fan_out_bound, lower_bound
    from streammap.ir import add_task, new_graph, write_graph

    g = new_graph("fan", kind="workflow", source="<fan>")
    for i in range(4):
        add_task(g, f"t{i}", "k", times={"A": 1.0, "B": 1.0})
    for c in range(1, 4):
        g.add_edge("t0", f"t{c}", bytes=10.0)
    write_graph(g, tmp_path / "fan.json")
    spec = {"name": "c", "nodes": [{"name": "n0", "link": {"bandwidth": 1.0, "latency": 0.0},
                                    "devices": [{"name": "d0", "kind": "gpu", "model": "A"},
                                                {"name": "d1", "kind": "gpu", "model": "B"}]}]}
    (tmp_path / "c.yaml").write_text(dump_cluster_spec(cluster_from_dict(spec).spec))
    plan = compile_plan(tmp_path / "fan.json", str(tmp_path / "c.yaml"), history=False)
    cost = CostModel(g, cluster_from_dict(spec))
    assert lower_bound(cost) < 3.0
    assert plan.mapper.lower_bound == pytest.approx(fan_out_bound(cost)) == pytest.approx(4.0)
    assert plan.mapper.estimated_makespan == pytest.approx(4.0)
