"""The optimality-gap benchmark and the mapping benchmark's best bound: random DAGs on the shared
clusters, scored against the proven optimum."""


from streammap.bench.cases import random_case, shared_random_cases
from streammap.bench.mapping import run_benchmark
from streammap.bench.optimal_gap import gap_rows, summarize_gaps
from streammap.cost.model import CostModel
from tests.helpers.paths import SHARED, needs_shared


@needs_shared
def test_random_dags_on_the_shared_clusters_use_the_clusters_models_and_reach_the_ccr():
    cases = shared_random_cases(SHARED, sizes=(10,), ccrs=(1.0,))
    assert [c.cluster for c in cases] == ["hetero-2x4", "mixed-vendors", "small-memory"]
    for c in cases:
        g, cl = c.load()
        cost = CostModel(g, cl)
        assert cost.n_tasks == 10
        assert (cost.time < float("inf")).all()           # every model has a time
        models = {d.model for d in cl.devices}
        assert set(next(iter(g.nodes.values()))["times"]) == models


@needs_shared
def test_gap_rows_prove_small_cases_and_auto_after_is_never_worse_than_before():
    rows = gap_rows(shared_random_cases(SHARED, sizes=(8,), ccrs=(1.0,), clusters=("hetero-2x4",)), work=5.0)
    (r,) = rows
    assert r["proven"]
    assert r["after"] <= r["before"] <= r["heft"] * (1 + 1e-12)
    assert r["optimum"] <= r["after"]
    assert r["best_bound"] >= r["lower_bound"]
    assert r["after_cpu_s"] > 0 and r["before_cpu_s"] > 0     # CPU beside plan quality
    (per_ccr, total) = summarize_gaps(rows)
    assert total["proven"] == 1 and total["after_gm"] >= 1.0


def test_the_mapping_benchmark_divides_by_the_best_proven_bound():
    res = run_benchmark([random_case(8, devices=2, seed=3)], ["optimal", "heft"])
    auto_row = next(r for r in res.rows if r["mapper"] == "optimal")
    assert auto_row["solver_bound"] is not None
    assert auto_row["best_bound"] >= max(auto_row["lower_bound"], auto_row["fork_join_bound"])
    assert auto_row["best_bound"] >= auto_row["solver_bound"]
    assert 1.0 - 1e-9 <= auto_row["makespan_best"] == auto_row["makespan"] / auto_row["best_bound"]
