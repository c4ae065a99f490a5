"""Re-timing a fixed assignment, as the local search does thousands of times per graph.

The search re-times one assignment after another, each a move away from the one before. A
re-timing starts from the last checkpoint before the first task (in the priority order) whose
device changed, so it must give exactly what a sweep from scratch gives, whatever came before it;
and a plan is checked against memory only where it could break a capacity, so the search must
still never return a plan that breaks one.
"""

import importlib

import numpy as np
import pytest

from streammap.cost.model import CostModel
from streammap.mappers.heft import heft, priority_order
from streammap.mappers.local_search import FixedAssignment, improve
from streammap.mappers.schedule import evaluate, fits, peak_memory
from tests.helpers.graphs import mixed_cluster, random_graph

ls = importlib.import_module("streammap.mappers.local_search")


def allowed_devices(cost, rng, dev, k):
    """``dev`` with ``k`` random tasks moved to random devices where they can run."""
    dev = dev.copy()
    for t in rng.choice(cost.n_tasks, size=k, replace=False).tolist():
        ds = np.flatnonzero(np.isfinite(cost.time[t]))
        dev[t] = int(ds[rng.integers(0, ds.size)])
    return dev


def test_a_retiming_after_other_retimings_equals_a_sweep_from_scratch():
    cost = CostModel(random_graph(120, seed=3), mixed_cluster(memory="64GiB"))
    order = priority_order(cost)
    warm = FixedAssignment(cost, order)
    rng = np.random.default_rng(0)
    dev = heft(cost).device
    for _ in range(60):
        # Moves of one task or several, early or late in the order, accepted or not.
        cand = allowed_devices(cost, rng, dev, int(rng.integers(1, 4)))
        got = warm.run(cand)
        want = FixedAssignment(cost, order).run(cand)
        assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
        if rng.random() < 0.5:
            dev = cand
    # Re-timing the same assignment twice gives the same times, and each run is counted.
    assert np.array_equal(warm.run(dev)[1], warm.run(dev)[1])
    assert warm.count == 62


def test_retiming_a_heft_plan_reproduces_it_under_the_benchmark_model():
    cost = CostModel(random_graph(80, seed=5), mixed_cluster(memory="64GiB"))
    h = heft(cost)
    fx = FixedAssignment(cost, np.argsort(h.seq, kind="stable"))
    fx.run(allowed_devices(cost, np.random.default_rng(1), h.device, 5))   # a different plan first
    start, finish = fx.run(h.device)
    assert np.allclose(start, h.start) and np.allclose(finish, h.finish)


def test_the_search_keeps_every_device_within_capacity_where_memory_binds():
    # 6 GiB devices: the tasks HEFT puts on a device need more than it holds, all together.
    cost = CostModel(random_graph(60, seed=2, gpu_only=0.0, cpu_only=0.0), mixed_cluster(memory="6GiB"))
    h = heft(cost)
    assert fits(peak_memory(cost, h.device, h.start, h.finish), cost.capacity).all()
    need = np.maximum(cost.mem, cost.out)
    assert (np.bincount(h.device, weights=need, minlength=cost.n_devices) > cost.capacity).any()
    s = improve(cost, h, np.argsort(h.seq, kind="stable"), max_runs=400, seed=4)
    ms, valid, _ = evaluate(cost, s)
    assert valid and ms <= h.makespan * (1 + 1e-9)


def test_the_search_builds_a_memory_profile_only_for_a_plan_that_beats_the_one_it_holds(monkeypatch):
    # A move that does not shorten the plan is undone whatever its memory, so its profile (a third
    # of a re-timing's cost where memory binds) is never built. Without kicks the held plan only
    # shortens, so every profile after the start's is of a plan no longer than the start.
    cost = CostModel(random_graph(80, seed=2), mixed_cluster(memory="6GiB"))
    start = heft(cost)
    profiled = []
    real = ls.peak_memory

    def record(cost, device, s, f):
        profiled.append(float(np.max(f)))
        return real(cost, device, s, f)

    monkeypatch.setattr(ls, "peak_memory", record)
    got = improve(cost, start, priority_order(cost), max_runs=300, kicks=False)

    assert profiled, "memory binds here: the start's plan is profiled"
    assert all(ms <= profiled[0] for ms in profiled[1:])
    makespan, valid, _ = evaluate(cost, got)
    assert valid and makespan == pytest.approx(got.makespan)
