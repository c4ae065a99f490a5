"""A plan states HEFT's makespan beside its own (``show`` compares them); ``auto`` runs HEFT first
anyway, so it hands that makespan on and ``compile`` does not run HEFT a second time."""

import json

import pytest

from streammap import mappers
from streammap.cluster.model import load_cluster
from streammap.compiler import compile as compile_plan
from streammap.cost.model import CostModel
from streammap.io.importers import load_graph
from streammap.mappers.auto import auto
from streammap.mappers.heft import heft
from tests.helpers.graphs import mixed_cluster, random_graph


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_auto_hands_on_the_makespan_of_heft_on_the_same_costs(seed):
    cost = CostModel(random_graph(120, seed=seed), mixed_cluster("64GiB"))
    assert auto(cost).heft_makespan == heft(cost).makespan


def test_compile_states_heft_makespan_without_a_second_heft_pass(tmp_path, samples, monkeypatch):
    # A fork-join of unequal branches: auto's winner is not HEFT's plan here, so before, compile
    # ran HEFT again only to state its makespan. (Branches of 1-5 ms: with 1-7 ms, auto's best plan
    # since issue 17 only ties HEFT's, and HEFT, the first candidate, wins the tie.)
    nodes = [{"id": "src", "kernel": "a", "times": {"gpu": 1e-3}}, {"id": "sink", "kernel": "a", "times": {"gpu": 1e-3}}]
    nodes += [{"id": f"b{i}", "kernel": "b", "times": {"gpu": 1e-3 * (1 + i % 5)}} for i in range(60)]
    edges = [{"source": "src", "target": f"b{i}", "bytes": 4e4 * (i % 3)} for i in range(60)]
    edges += [{"source": f"b{i}", "target": "sink", "bytes": 4e4 * (i % 2)} for i in range(60)]
    path = tmp_path / "fj.json"
    path.write_text(json.dumps({"graph": {"name": "fj"}, "nodes": nodes, "edges": edges}))
    cluster = samples / "clusters" / "tiny-gpus.yaml"
    second_passes = []
    monkeypatch.setitem(mappers.MAPPERS, "heft", lambda cost, **kw: second_passes.append(1) or heft(cost, **kw))
    plan = compile_plan(path, cluster, history=False)
    assert plan.mapper.name != "auto(heft)"       # HEFT's plan lost, yet HEFT ran once only
    assert second_passes == []
    assert plan.mapper.heft_makespan == heft(CostModel(load_graph(path), load_cluster(cluster))).makespan
