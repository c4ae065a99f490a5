"""``auto`` on large graphs: a budget of full-cluster passes, and small graphs' plans unchanged.

The expected makespans below were computed with ``auto`` before the large-graph budget existed
(commit 9ed1c81): graphs below ``LARGE_WORK`` must get exactly the plans they got then. The first
is since shorter (2.7746 -> 2.7061): issue 17's lookahead candidate won there, and the second
(2.1486 -> 2.1083): the cheap-sources-first HEFT won there, and the third (13.1098 -> 13.0952): the
heavy-neighbourhood search won there; a new candidate may only shorten these plans. The large-neighbourhood search that follows the candidates (``exact=True``, the default)
may shorten them further, never lengthen them.
"""

import importlib

import pytest

from streammap.bench.cases import random_cluster, random_dag, scale_cluster_for_ccr
from streammap.cost.model import CostModel
from streammap.mappers.heft import heft
from streammap.mappers.peft import peft

auto_module = importlib.import_module("streammap.mappers.auto")


def _cost(n, devices, ccr, seed):
    g = random_dag(n, 1.0, 3, ccr, 0.5, seed, n_models=8)
    return CostModel(g, scale_cluster_for_ccr(g, random_cluster(devices, 8, per_node=8), ccr))


@pytest.mark.parametrize("n, devices, ccr, seed, mapper, makespan", [
    (100, 8, 1.0, 1, "auto(lookahead-hrank+search)", 2.706072512139724),
    (1000, 16, 1.0, 0, "auto(heft-coparent+search)", 2.1082972662766672),
    (1000, 16, 10.0, 2, "auto(heft-node0+search+group)", 13.095180488807415),
])
def test_graphs_below_the_large_work_keep_the_plans_they_had(n, devices, ccr, seed, mapper, makespan):
    cost = _cost(n, devices, ccr, seed)
    s = auto_module.auto(cost, exact=False)
    assert (s.mapper, s.makespan) == (mapper, makespan)
    assert auto_module.auto(cost).makespan <= makespan


def test_the_pass_budget_shrinks_the_candidates_as_the_graph_grows():
    assert auto_module.large_graph_passes(5_000, 16) is None          # the whole candidate list
    assert auto_module.large_graph_passes(10_000, 64) == ("heft", "peft")
    assert auto_module.large_graph_passes(100_000, 512) == ("heft",)
    assert auto_module.large_graph_passes(1_000_000, 1024) == ("heft",)
    # A pass costs each task a fixed placement however few the devices: 100,000 tasks on one
    # device are a large graph too (a 100,000-call program compiled for --cluster local).
    assert auto_module.large_graph_passes(100_000, 1) == ("heft", "peft")
    assert auto_module.large_graph_passes(60_000, 8) is None


def test_a_large_graph_gets_the_better_of_heft_and_peft(monkeypatch):
    cost = _cost(300, 8, 1.0, 4)
    monkeypatch.setattr(auto_module, "LARGE_WORK", 0)
    monkeypatch.setattr(auto_module, "LARGE_PASS_BUDGET", 2 * 300 * 8)
    s = auto_module.auto(cost)
    h, p = heft(cost).makespan, peft(cost).makespan
    assert s.makespan == min(h, p)
    assert s.mapper == ("auto(heft)" if h <= p else "auto(peft)")


def test_a_large_graph_over_budget_gets_heft_s_plan(monkeypatch):
    cost = _cost(300, 8, 1.0, 4)
    monkeypatch.setattr(auto_module, "LARGE_WORK", 0)
    monkeypatch.setattr(auto_module, "LARGE_PASS_BUDGET", 300 * 8)
    s, h = auto_module.auto(cost), heft(cost)
    assert s.mapper == "auto(heft)"
    assert (s.device == h.device).all() and (s.start == h.start).all()
