"""auto's guard: never longer than a HEFT plan that is memory-valid, memory-aware or plain.

The benchmark's baseline is plain (capacity-blind) HEFT. Memory-aware HEFT counts every output as
resident until its last consumer is placed, so where memory can bind it may refuse a device that
plain HEFT uses without ever breaking a capacity: it ends longer than plain HEFT's valid plan, or
(the graph below) finds no plan at all. A
guard that compares with memory-aware HEFT alone then lets auto lose to a valid HEFT plan; on small
graphs the other HEFT orders usually hide it, on the largest graphs (auto's cheapest tier) nothing
does.
"""

import importlib

import numpy as np
import pytest

from streammap.bench.cases import random_cluster, random_dag, scale_cluster_for_ccr
from streammap.cost.model import CostModel
from streammap.errors import MappingError
from streammap.mappers.auto import auto
from streammap.mappers.heft import heft
from streammap.mappers.schedule import evaluate

auto_module = importlib.import_module("streammap.mappers.auto")


def tight_memory_case(seed=14, n=10, headroom=1.2):
    """A 10-task HEFT-paper DAG on two devices whose memory is 1.2x the largest single need."""
    g = random_dag(n, 1.0, 2, 1.0, 0.5, seed, n_models=2)
    base = CostModel(g, random_cluster(2, 2, per_node=2))
    need = float(np.maximum(base.mem, base.out).max())
    cluster = random_cluster(2, 2, per_node=2, memory=int(need * headroom))
    return CostModel(g, scale_cluster_for_ccr(g, cluster, 1.0))


def test_memory_aware_heft_can_miss_a_plan_that_plain_heft_finds_within_capacity():
    cost = tight_memory_case()
    _, plain_valid, _ = evaluate(cost, heft(cost, memory_aware=False))
    assert plain_valid
    with pytest.raises(MappingError, match="outputs waiting for consumers"):
        heft(cost)


@pytest.mark.parametrize("tier", ["small graphs", "largest graphs"])
def test_auto_is_never_longer_than_a_valid_plain_heft_plan(monkeypatch, tier):
    cost = tight_memory_case()
    if tier == "largest graphs":
        # The thresholds scale with tasks x devices; lowering them runs this graph the way auto
        # runs one of millions of task-devices: no other HEFT orders, invalid candidates dropped.
        monkeypatch.setattr(auto_module, "SMALL_WORK", 0)
        monkeypatch.setattr(auto_module, "MEDIUM_WORK", 0)
    plain_ms, plain_valid, _ = evaluate(cost, heft(cost, memory_aware=False))
    s = auto(cost)
    ms, valid, _ = evaluate(cost, s)
    assert plain_valid and valid
    assert ms <= plain_ms * (1 + 1e-12)
    assert ms == pytest.approx(s.makespan, rel=1e-12)      # the estimate is what the benchmark scores
