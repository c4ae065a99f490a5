"""The exact mapper: the optimum of the benchmark model where exhaustive search knows it, device
eligibility and memory respected, the same plan every time, a proven bound in every plan.

The reference is exhaustive search: every assignment of the tasks to devices and every
topological order (which induces every per-device order), each re-timed by ``simulate``; the
best memory-valid makespan is the optimum of the benchmark model.
"""

import importlib

import numpy as np
import pytest

import streammap
from streammap.cluster.model import cluster_from_dict
from streammap.cost.model import CostModel
from streammap.errors import MappingError
from streammap.mappers import get_mapper
from streammap.mappers.auto import EXACT_GAP, EXACT_MAX_TASKS, auto, cheap_bound
from streammap.mappers.heft import heft
from streammap.mappers.optimal import optimal
from streammap.mappers.schedule import evaluate, simulate
from streammap.plan import write_plan
from streammap.views.show import plan_verdict
from tests.helpers.graphs import timed_graph
from tests.helpers.optimum import exhaustive_optimum
from tests.helpers.paths import SHARED, needs_shared


def two_devices(memory=None):
    """Two devices (models A and B) on one node joined by a link of 1 byte/s, no latency."""
    devs = [{"name": "g0", "kind": "gpu", "model": "A"}, {"name": "g1", "kind": "gpu", "model": "B"}]
    if memory is not None:
        for d in devs:
            d["memory"] = memory
    return cluster_from_dict({"name": "two", "nodes": [{"name": "n", "link": {"bandwidth": 1.0, "latency": 0.0},
                                                          "devices": devs}]})




def check(cost, s):
    """``s`` re-scores to its own makespan and is memory-valid; returns the makespan."""
    ms, valid, _ = evaluate(cost, s)
    assert valid
    assert ms == pytest.approx(s.makespan, rel=1e-12)
    return ms


def fork_join():
    """a -> (b, c) -> d where HEFT's greedy choice for c costs two seconds: HEFT 7 s, optimum 5 s."""
    times = [{"A": 1, "B": 1}, {"A": 2, "B": 1}, {"A": 5, "B": 2}, {"A": 5, "B": 1}]
    return CostModel(timed_graph(times, [(0, 1, 4), (0, 2, 5), (1, 3, 0), (2, 3, 0)]), two_devices())


def test_finds_the_optimum_of_a_fork_join_where_heft_is_suboptimal():
    cost = fork_join()
    assert heft(cost).makespan == pytest.approx(7.0)
    assert exhaustive_optimum(cost) == pytest.approx(5.0)
    s = optimal(cost)
    assert check(cost, s) == pytest.approx(5.0)
    assert s.mapper.startswith("optimal")
    # The proof: no plan finishes before 5 s (up to the solver's 10 ns tick).
    assert 5.0 - 1e-7 <= s.bound <= 5.0


@pytest.mark.parametrize("seed", range(4))
def test_matches_exhaustive_search_on_random_tiny_graphs(seed):
    rng = np.random.default_rng(seed)
    times = [{"A": float(rng.integers(1, 6)), "B": float(rng.integers(1, 6))} for _ in range(5)]
    edges = [(u, v, float(rng.integers(0, 5))) for u in range(5) for v in range(u + 1, 5) if rng.random() < 0.4]
    cost = CostModel(timed_graph(times, edges), two_devices())
    s = optimal(cost)
    best = exhaustive_optimum(cost)
    assert check(cost, s) == pytest.approx(best, rel=1e-9)
    assert s.bound <= best * (1 + 1e-12)
    assert s.bound >= best * (1 - 1e-6)


def test_respects_device_eligibility():
    # t1 has no time for model A: it may only run on g1, though A would be the faster device.
    times = [{"A": 1}, {"B": 3}, {"A": 1, "B": 4}]
    cost = CostModel(timed_graph(times, [(0, 1, 1), (1, 2, 1)]), two_devices())
    s = optimal(cost)
    check(cost, s)
    assert s.device[1] == 1
    assert s.device[0] == 0
    assert check(cost, s) == pytest.approx(exhaustive_optimum(cost))


def test_respects_memory_and_finds_the_best_memory_valid_plan():
    # Two independent producers whose outputs cannot both wait on one 10-byte device: without
    # memory both would go to the fast device A.
    times = [{"A": 1, "B": 3}, {"A": 1, "B": 3}, {"A": 1, "B": 3}]
    cost = CostModel(timed_graph(times, [(0, 2, 6), (1, 2, 6)], mem=[6, 6, 6]), two_devices(memory=10))
    unconstrained = CostModel(timed_graph(times, [(0, 2, 6), (1, 2, 6)], mem=[6, 6, 6]), two_devices())
    s = optimal(cost)
    best = exhaustive_optimum(cost)
    assert check(cost, s) == pytest.approx(best)
    assert best > exhaustive_optimum(unconstrained)
    assert s.device[0] != s.device[1]


def test_the_same_inputs_give_the_same_plan():
    rng = np.random.default_rng(7)
    times = [{"A": float(rng.uniform(1, 5)), "B": float(rng.uniform(1, 5))} for _ in range(12)]
    edges = [(u, v, float(rng.uniform(0, 3))) for u in range(12) for v in range(u + 1, 12) if rng.random() < 0.25]
    a = optimal(CostModel(timed_graph(times, edges), two_devices()))
    b = optimal(CostModel(timed_graph(times, edges), two_devices()))
    assert a.mapper == b.mapper
    assert a.bound == b.bound
    assert np.array_equal(a.device, b.device)
    assert np.array_equal(a.start, b.start)


def test_auto_runs_the_exact_model_on_small_graphs_and_keeps_the_better_plan():
    cost = fork_join()
    s = auto(cost, exact=True)
    assert check(cost, s) == pytest.approx(5.0)
    # the solver ran, or the analytic bound (here the fan-out bound, 5 s) already proves the plan optimal
    if s.bound is None:
        assert s.makespan <= cheap_bound(cost) * (1 + EXACT_GAP)
    else:
        assert s.bound <= s.makespan
    before = auto(cost, exact=False)
    assert before.bound is None
    assert s.makespan <= before.makespan <= heft(cost).makespan


@needs_shared
@pytest.mark.parametrize("ccr", [0.1, 1.0, 10.0])
def test_auto_is_never_worse_than_heft_on_random_dags_of_the_shared_clusters(ccr):
    from streammap.bench.cases import shared_random_cases
    for case in shared_random_cases(SHARED, sizes=(12,), ccrs=(ccr,)):
        g, cl = case.load()
        cost = CostModel(g, cl)
        s = auto(cost, exact=True)
        assert check(cost, s) <= heft(cost).makespan
        # the solver ran, or the analytic bound already shows the plan within EXACT_GAP of optimal
        if s.bound is None:
            assert s.makespan <= cheap_bound(cost) * (1 + EXACT_GAP)
        else:
            assert s.bound <= s.makespan * (1 + 1e-12)


def test_auto_skips_the_exact_model_on_large_graphs():
    rng = np.random.default_rng(3)
    n = EXACT_MAX_TASKS + 1
    times = [{"A": float(rng.uniform(1, 2)), "B": float(rng.uniform(1, 2))} for _ in range(n)]
    cost = CostModel(timed_graph(times, [(i, i + 1, 0.5) for i in range(n - 1)]), two_devices())
    assert auto(cost, exact=True).bound is None


def test_optimal_refuses_models_too_large_with_a_hint(monkeypatch):
    monkeypatch.setattr(importlib.import_module("streammap.mappers.optimal"), "OPTIMAL_MAX_TERMS", 3)
    with pytest.raises(MappingError) as err:
        optimal(fork_join())
    assert "too large for the exact mapper" in err.value.message
    assert "--mapper auto" in err.value.hint


def test_registered_as_optimal():
    assert get_mapper("optimal") is optimal


@needs_shared
def test_a_compiled_plan_records_the_solvers_bound_and_show_says_it_is_proven(tmp_path):
    src = SHARED / "classic" / "topcuoglu-10.json"
    cluster = SHARED / "clusters" / "topcuoglu-3p.yaml"
    plan = streammap.compile(src, cluster, mapper="optimal")
    m = plan.mapper
    assert m.solver_bound is not None
    assert m.lower_bound == pytest.approx(max(m.lower_bound, m.solver_bound))
    assert m.estimated_makespan <= m.heft_makespan
    assert "optimal (proven)" in plan_verdict(plan)
    write_plan(plan, tmp_path / "a.yaml")
    write_plan(streammap.compile(src, cluster, mapper="optimal"), tmp_path / "b.yaml")
    assert (tmp_path / "a.yaml").read_bytes() == (tmp_path / "b.yaml").read_bytes()
    assert "solver_bound" in (tmp_path / "a.yaml").read_text()
    heft_plan = streammap.compile(src, cluster, mapper="heft")
    assert heft_plan.mapper.solver_bound is None
    write_plan(heft_plan, tmp_path / "h.yaml")
    assert "solver_bound" not in (tmp_path / "h.yaml").read_text()


# -- identical devices ------------------------------------------------------------------------------

def identical_devices(n_same=3, memory=None):
    """``n_same`` devices of model A on node ``n`` (link 1 byte/s), plus one device of model B
    there; a second node with one device of model A behind a slower network (0.5 byte/s)."""
    dev = [{"name": f"a{i}", "kind": "gpu", "model": "A"} for i in range(n_same)]
    dev.append({"name": "b", "kind": "gpu", "model": "B"})
    if memory is not None:
        for d in dev:
            d["memory"] = memory
    far = {"name": "far", "devices": [{"name": "a", "kind": "gpu", "model": "A"}]}
    return cluster_from_dict({"name": "same", "network": {"bandwidth": 0.5, "latency": 0.0},
                              "nodes": [{"name": "n", "link": {"bandwidth": 1.0, "latency": 0.0}, "devices": dev},
                                        far]})


def test_devices_of_one_model_on_one_node_are_interchangeable_and_no_others():
    from streammap.mappers.exact import interchangeable_groups
    cost = CostModel(timed_graph([{"A": 1, "B": 2}], []), identical_devices(3))
    # n/a0, n/a1, n/a2 swap freely; n/b is another model, far/a another node
    assert interchangeable_groups(cost) == [[0, 1, 2]]
    mem = CostModel(timed_graph([{"A": 1, "B": 2}], []), identical_devices(1))
    assert interchangeable_groups(mem) == []


def test_a_plan_renamed_to_its_canonical_form_is_the_same_plan():
    from streammap.mappers.exact import canonical_devices, interchangeable_groups
    rng = np.random.default_rng(5)
    times = [{"A": float(rng.integers(1, 6)), "B": float(rng.integers(1, 6))} for _ in range(8)]
    edges = [(u, v, float(rng.integers(0, 4))) for u in range(8) for v in range(u + 1, 8) if rng.random() < 0.3]
    cost = CostModel(timed_graph(times, edges), identical_devices(3))
    s = heft(cost)
    groups = interchangeable_groups(cost)
    device = canonical_devices(s.device, groups, cost.time)
    load = [cost.time[device == d, d].sum() for d in groups[0]]
    assert load == sorted(load, reverse=True)
    order = [[int(t) for t in np.argsort(s.start, kind="stable") if s.device[t] == d] for d in range(cost.n_devices)]
    renamed = [[int(t) for t in np.argsort(s.start, kind="stable") if device[t] == d] for d in range(cost.n_devices)]
    assert simulate(cost, device, renamed).makespan == pytest.approx(simulate(cost, s.device, order).makespan)


@pytest.fixture
def symmetry_breaking(monkeypatch):
    """The model with its optional parts on: symmetry breaking and the analytic bound."""
    from streammap.mappers import exact
    monkeypatch.setitem(exact.FEATURES, "symmetry", True)
    monkeypatch.setitem(exact.FEATURES, "bound", True)


@pytest.mark.parametrize("seed", range(3))
def test_symmetry_breaking_keeps_the_optimum_of_exhaustive_search(seed, symmetry_breaking):
    # Three interchangeable devices and an odd one: exhaustive search over every plan (no symmetry
    # breaking) and the solver (with it) agree on the optimum, and the solver proves it.
    rng = np.random.default_rng(100 + seed)
    times = [{"A": float(rng.integers(2, 7)), "B": float(rng.integers(1, 6))} for _ in range(5)]
    edges = [(u, v, float(rng.integers(0, 4))) for u in range(5) for v in range(u + 1, 5) if rng.random() < 0.4]
    cl = cluster_from_dict({"name": "four", "nodes": [{"name": "n", "link": {"bandwidth": 1.0, "latency": 0.0},
                                                       "devices": [{"name": f"a{i}", "kind": "gpu", "model": "A"}
                                                                   for i in range(3)]
                                                       + [{"name": "b", "kind": "gpu", "model": "B"}]}]})
    cost = CostModel(timed_graph(times, edges), cl)
    best = exhaustive_optimum(cost)
    s = optimal(cost)
    assert check(cost, s) == pytest.approx(best, rel=1e-9)
    assert best * (1 - 1e-6) <= s.bound <= best * (1 + 1e-12)


def test_the_solver_proves_a_plan_on_many_identical_devices_optimal(symmetry_breaking):
    # Twelve independent 1..12 s tasks on three identical devices: 26 s each is a perfect split
    # (12+11+3, 10+9+5+2, 8+7+6+4+1); without symmetry breaking the proof must rule out each of
    # the 3! renamings of every plan.
    from streammap.mappers.exact import solve_exact
    cl = cluster_from_dict({"name": "three", "nodes": [{"name": "n", "link": {"bandwidth": 1.0, "latency": 0.0},
                                                        "devices": [{"name": f"a{i}", "kind": "gpu", "model": "A"}
                                                                    for i in range(3)]}]})
    cost = CostModel(timed_graph([{"A": float(i)} for i in range(1, 13)], []), cl)
    res = solve_exact(cost, heft(cost), work=5.0)
    assert res.optimal and res.status == "OPTIMAL"
    assert check(cost, res.schedule) == pytest.approx(26.0)
    assert res.bound == pytest.approx(26.0, rel=1e-6)


def test_autos_short_solve_proves_small_models_and_gives_the_same_plan_every_time():
    # auto's solve: one worker on part of the budget first (it stops at the proof), then the
    # interleaved search on the rest; both deterministic.
    from streammap.mappers.exact import solve_exact
    rng = np.random.default_rng(11)
    times = [{"A": float(rng.uniform(1, 5)), "B": float(rng.uniform(1, 5))} for _ in range(10)]
    edges = [(u, v, float(rng.uniform(0, 3))) for u in range(10) for v in range(u + 1, 10) if rng.random() < 0.3]
    cost = CostModel(timed_graph(times, edges), identical_devices(3))
    runs = [solve_exact(cost, heft(cost), work=0.5, interleave=True) for _ in range(2)]
    assert runs[0].status == runs[1].status == "OPTIMAL"
    assert runs[0].bound == runs[1].bound == pytest.approx(runs[0].schedule.makespan, rel=1e-6)
    assert np.array_equal(runs[0].schedule.device, runs[1].schedule.device)
    assert np.array_equal(runs[0].schedule.start, runs[1].schedule.start)
    assert check(cost, runs[0].schedule) <= heft(cost).makespan
    assert runs[0].bound <= runs[0].schedule.makespan * (1 + 1e-12)


@needs_shared
def test_symmetry_breaking_leaves_a_model_with_many_identical_devices_feasible(symmetry_breaking):
    # 30 tasks at CCR 10 on small-memory (two identical T4s, three identical A2s): the first-task
    # form of symmetry breaking made CP-SAT's presolve report this feasible model INFEASIBLE.
    from streammap.bench.cases import shared_random_cases
    from streammap.mappers.exact import interchangeable_groups, solve_exact
    case = next(c for c in shared_random_cases(SHARED, sizes=(30,), ccrs=(10.0,)) if c.cluster == "small-memory")
    g, cl = case.load()
    cost = CostModel(g, cl)
    assert interchangeable_groups(cost) == [[0, 1], [2, 3, 4]]
    start = heft(cost)
    res = solve_exact(cost, start, work=0.5)
    assert res.status in ("OPTIMAL", "FEASIBLE")
    assert check(cost, res.schedule) <= start.makespan
    assert 0 < res.bound <= res.schedule.makespan
