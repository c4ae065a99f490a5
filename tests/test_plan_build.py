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
