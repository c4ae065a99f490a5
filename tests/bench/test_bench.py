"""The mapping benchmark: CCR definition and scaling, the random-DAG generator, the harness outputs."""

import csv
import io

import networkx as nx
import numpy as np
import pytest
from rich.console import Console

from streammap.bench.cases import (
    ccr,
    random_case,
    random_cases,
    random_cluster,
    random_dag,
    scale_cluster_for_ccr,
    shared_cases,
)
from streammap.bench.mapping import (
    CSV_COLUMNS,
    SUMMARY_COLUMNS,
    check_targets,
    plot,
    print_report,
    run_benchmark,
    summarize,
    write_csv,
    write_summary_csv,
)
from streammap.cli import build_parser
from streammap.cluster.model import cluster_from_dict
from streammap.cost.model import CostModel
from streammap.errors import StreamMapError
from streammap.ir import add_task, new_graph
from tests.helpers.paths import SHARED, needs_shared


def two_device_cluster(bw=1e9):
    return cluster_from_dict({"name": "two", "nodes": [{"name": "n", "link": {"bandwidth": bw, "latency": 1e-3},
                                                        "devices": [{"name": "a", "kind": "gpu", "speed": 1.0},
                                                                    {"name": "b", "kind": "gpu", "speed": 0.5}]}]})


# ---------------------------------------------------------------------- CCR

def test_ccr_follows_the_readme_definition():
    g = new_graph("g", kind="workflow")
    add_task(g, "x", "k", runtime=1.0)
    add_task(g, "y", "k", runtime=3.0)
    g.add_edge("x", "y", bytes=4e9)
    cost = CostModel(g, two_device_cluster(bw=2e9))
    # mean bytes / mean bandwidth = 4e9 / 2e9 = 2 s; mean over tasks of the mean time over devices:
    # x: (1 + 2) / 2 = 1.5, y: (3 + 6) / 2 = 4.5 -> 3. Latency does not enter.
    assert ccr(cost) == pytest.approx(2.0 / 3.0, rel=1e-12)


def test_ccr_is_zero_without_communication():
    g = new_graph("g", kind="workflow")
    add_task(g, "x", "k", runtime=1.0)
    assert ccr(CostModel(g, two_device_cluster())) == 0.0
    with pytest.raises(StreamMapError):
        scale_cluster_for_ccr(g, two_device_cluster(), 1.0)


@pytest.mark.parametrize("target", [0.1, 1.0, 10.0, 0.0123])
def test_scaling_reaches_the_target_ccr_on_a_random_graph(target):
    g = random_dag(60, 1.0, 3, 1.0, 0.5, seed=4, n_models=8)
    cl = random_cluster(8, per_node=4)
    scaled = scale_cluster_for_ccr(g, cl, target)
    assert ccr(CostModel(g, scaled)) == pytest.approx(target, rel=1e-6)
    # One factor on every bandwidth: the ratios between links are kept, latencies untouched.
    bw0, lat0 = cl.link_matrices()
    bw1, lat1 = scaled.link_matrices()
    off = ~np.eye(8, dtype=bool)
    ratio = bw1[off] / bw0[off]
    np.testing.assert_allclose(ratio, ratio[0], rtol=1e-12)
    np.testing.assert_array_equal(lat0, lat1)


def test_scaling_reaches_the_target_ccr_on_every_shared_graph(shared):
    for case in shared_cases(shared, ccrs=(0.1, 10.0)):
        g, cl = case.load()
        got = ccr(CostModel(g, cl))
        if case.ccr is not None:
            assert got == pytest.approx(case.ccr, rel=1e-6), case.name


@needs_shared
def test_shared_cases_are_the_102_plus_the_classic_example():
    cases = shared_cases(SHARED)
    shared = [c for c in cases if c.group == "shared"]
    assert len(shared) == 102 and len({c.name for c in cases}) == len(cases)
    assert {c.ccr for c in shared} == {0.1, 1.0, 10.0}
    assert {c.cluster for c in shared if c.graph.startswith("cholesky")} == {"cholesky-node"}
    assert {c.cluster for c in shared if not c.graph.startswith("cholesky")} == {"hetero-2x4", "mixed-vendors",
                                                                                  "small-memory"}
    classic = [c for c in cases if c.group == "classic"]
    assert len(classic) == 1 and classic[0].ccr is None


# ---------------------------------------------------------------------- random DAGs

def test_random_dag_is_seeded_acyclic_and_of_the_requested_size():
    for n, alpha, od in ((20, 0.5, 1), (100, 1.0, 3), (300, 2.0, 5)):
        g = random_dag(n, alpha, od, 1.0, 0.5, seed=7)
        assert g.number_of_nodes() == n
        assert nx.is_directed_acyclic_graph(g)
        assert g.number_of_edges() > 0
        again = random_dag(n, alpha, od, 1.0, 0.5, seed=7)
        assert list(g.nodes(data="times")) == list(again.nodes(data="times"))
        assert list(g.edges(data="bytes")) == list(again.edges(data="bytes"))
        other = random_dag(n, alpha, od, 1.0, 0.5, seed=8)
        assert list(g.edges(data="bytes")) != list(other.edges(data="bytes"))


def test_random_dag_shape_out_degree_and_heterogeneity():
    n = 400
    thin = CostModel(random_dag(n, 0.5, 2, 1.0, 0.5, seed=1), random_cluster(8))
    wide = CostModel(random_dag(n, 2.0, 2, 1.0, 0.5, seed=1), random_cluster(8))
    assert len(thin.levels) > len(wide.levels)            # alpha sets the shape
    # Tasks are numbered level by level and only the last level has no children: the sinks are a
    # suffix. Tasks before the last two levels have exactly the requested out-degree or more (orphans
    # of the next level may get an extra parent).
    sinks = np.flatnonzero(wide.n_succ == 0)
    np.testing.assert_array_equal(sinks, np.arange(n - sinks.size, n))
    assert (wide.n_succ[: n - sinks.size] >= 1).all()
    assert np.median(wide.n_succ[: n - sinks.size]) == 2
    # beta bounds the spread of a task's times around its mean: [w(1 - b/2), w(1 + b/2)].
    g = random_dag(200, 1.0, 3, 1.0, 0.2, seed=2, n_models=8)
    t = np.array([list(g.nodes[v]["times"].values()) for v in g.nodes])
    assert (t.max(axis=1) <= t.min(axis=1) * (1.1 / 0.9) * (1 + 1e-12)).all()
    assert t.shape == (200, 8)


def test_random_cluster_matches_the_graph_models():
    g = random_dag(30, 1.0, 2, 1.0, 1.0, seed=0, n_models=4)
    cl = random_cluster(10, n_models=4, per_node=4)
    cost = CostModel(g, cl)
    assert cost.n_devices == 10 and np.isfinite(cost.time).all()
    assert len({d.node for d in cl.devices}) == 3
    assert (cost.source == np.array(["times"] * 30)).all() if isinstance(cost.source, np.ndarray) else \
        set(cost.source) == {"times"}


def test_random_suite_is_seeded():
    a = [c.name for c in random_cases(seed=3, quick=True)]
    b = [c.name for c in random_cases(seed=3, quick=True)]
    assert a == b and len(a) == len(set(a)) == 39
    assert len(random_cases(seed=3)) == 141


# ---------------------------------------------------------------------- the harness

def small_cases():
    cases = [random_case(20, 1.0, 2, 1.0, 0.5, devices=4, seed=1),
             random_case(40, 0.5, 3, 10.0, 1.0, devices=8, seed=2)]
    if SHARED.exists():
        cases += [c for c in shared_cases(SHARED, ccrs=(0.1,)) if c.group == "classic"
                  or c.name == "blast-chameleon-small-001/small-memory/ccr0.1"]
    return cases


def test_harness_writes_a_csv_and_a_png(tmp_path):
    res = run_benchmark(small_cases(), mappers=("heft", "fastest", "least-loaded", "no-such-mapper"))
    assert any("no-such-mapper" in n for n in res.notes)
    assert res.mappers[0] == res.baseline and "fastest" in res.mappers
    write_csv(res, tmp_path / "m.csv")
    write_summary_csv(res, tmp_path / "s.csv")
    plot(res, tmp_path / "m.png")
    with open(tmp_path / "m.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == CSV_COLUMNS
    assert len(rows) == len({r["case"] for r in rows}) * len(res.mappers)
    for r in rows:
        if r["status"] == "ok":
            assert float(r["makespan_lb"]) >= 1.0 - 1e-9
            assert r["memory_valid"] in ("true", "false")
            assert float(r["map_time_s"]) >= 0
    base = [r for r in rows if r["mapper"] == res.baseline and r["status"] == "ok"]
    assert base and all(float(r["makespan_heft"]) == 1.0 for r in base)
    with open(tmp_path / "s.csv", newline="") as f:
        assert list(next(csv.reader(f))) == SUMMARY_COLUMNS
    png = (tmp_path / "m.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    if SHARED.exists():
        # A task larger than every device: only capacity-blind HEFT makes a (memory-invalid) plan.
        blast = [r for r in rows if r["case"].startswith("blast")]
        assert all(r["valid_plan_exists"] == "false" for r in blast)
        assert all(r["status"] == "no plan" for r in blast if r["mapper"] != res.baseline)
        if res.baseline == "heft-plain":
            assert [r["memory_valid"] for r in blast if r["mapper"] == res.baseline] == ["false"]


def test_summary_targets_and_report():
    res = run_benchmark(small_cases()[:2], mappers=("heft", "fastest"))
    summ = summarize(res)
    assert {s["mapper"] for s in summ} == set(res.mappers)
    fast = [s for s in summ if s["mapper"] == "fastest" and s["ccr"] is None][0]
    assert fast["cases"] == 2 and fast["gm_heft"] >= 1.0 - 1e-9
    checks = check_targets(res, "fastest")
    assert checks and all(set(c) == {"target", "limit", "value", "ok"} for c in checks)
    buf = io.StringIO()
    print_report(res, Console(file=buf, width=200), target_mapper="fastest")
    text = buf.getvalue()
    assert "random DAGs" in text and "mk/HEFT gm" in text and "targets for fastest" in text


def test_a_mapper_that_crashes_is_recorded_not_fatal():
    from streammap.mappers import MAPPERS

    def broken(cost):
        raise RuntimeError("boom")
    MAPPERS["broken-for-test"] = broken
    try:
        res = run_benchmark(small_cases()[:1], mappers=("heft", "broken-for-test"))
    finally:
        del MAPPERS["broken-for-test"]
    r = [r for r in res.rows if r["mapper"] == "broken-for-test"][0]
    assert r["status"] == "error" and "boom" in r["message"]


def test_bench_command_line(tmp_path):
    p = build_parser("bench")
    args = p.parse_args(["bench", "mapping", "--quick", "--no-shared", "--mappers", "heft,fastest",
                         "--out", str(tmp_path)])
    assert args.func(args) == 0
    assert (tmp_path / "mapping.csv").exists() and (tmp_path / "mapping.png").exists()
    args = p.parse_args(["bench"])
    assert args.func(args) == 2


def test_a_negative_seed_is_refused_before_anything_runs(tmp_path, capsys):
    """NumPy's seeds are >= 0: -1 was a ValueError traceback once the random suite was drawn."""
    from tests.helpers.cli import refused
    refused(["bench", "mapping", "--quick", "--no-shared", "--seed", "-1", "--out", str(tmp_path)], capsys,
            "--seed: -1", ">= 0")
    assert not any(tmp_path.iterdir())
