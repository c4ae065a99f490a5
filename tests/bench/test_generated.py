"""The generated WfCommons suite: fixed disjoint seed sets, every shared application but rnaseq,
instances that are the same bytes for the same seed, and a clear exit without wfcommons."""

import builtins
import filecmp

import pytest

from streammap.bench import generated
from streammap.bench.generated import (
    EXCLUDED,
    RECIPES,
    SEED_SETS,
    SIZE_BANDS,
    draw_sizes,
    generate_instance,
    generated_cases,
    instance_seed,
)
from streammap.bench.mapping import by_recipe, check_targets, run_benchmark
from streammap.cli import main as cli_main
from streammap.io.importers import load_graph
from tests.helpers.paths import needs_shared

# ---------------------------------------------------------------------- without wfcommons


def test_tune_and_report_seeds_are_fixed_and_disjoint():
    assert set(SEED_SETS) == {"tune", "report"}
    assert SEED_SETS["tune"] and SEED_SETS["report"]
    assert not set(SEED_SETS["tune"]) & set(SEED_SETS["report"])


def test_every_shared_application_but_rnaseq_has_a_recipe(shared):
    apps = {p.stem.split("-")[0] for p in (shared / "workflows").glob("*.json")}
    assert "rnaseq" in apps and "rnaseq" not in RECIPES and "rnaseq" in EXCLUDED
    assert set(RECIPES) == apps - {"rnaseq"}


def test_sizes_are_drawn_per_band_from_the_seed_alone():
    a = draw_sizes("montage", 101, min_tasks=60)
    assert a == draw_sizes("montage", 101, min_tasks=60)
    assert a != draw_sizes("montage", 102, min_tasks=60)
    assert len(a) == len(SIZE_BANDS)
    for n, (lo, hi) in zip(a, SIZE_BANDS):
        assert lo <= n <= hi


def test_no_size_below_the_recipe_minimum():
    sizes = draw_sizes("bwa", 11, min_tasks=106)
    assert min(sizes) >= 106
    assert draw_sizes("bwa", 11, bands=[(50, 100), (100, 300)], min_tasks=106)[0] >= 106
    assert len(draw_sizes("bwa", 11, bands=[(50, 100)], min_tasks=106)) == 0   # band wholly below: skipped


def test_instance_seeds_differ_by_application_size_and_seed():
    seeds = {instance_seed(a, n, s) for a in ("blast", "bwa") for n in (100, 200) for s in (11, 101)}
    assert len(seeds) == 8


def _without_wfcommons(monkeypatch):
    real = builtins.__import__

    def fake(name, *args, **kwargs):
        if name == "wfcommons" or name.startswith("wfcommons."):
            raise ImportError(f"No module named {name!r}")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake)


def test_cli_without_wfcommons_exits_2_with_the_install_hint(monkeypatch, tmp_path, capsys):
    _without_wfcommons(monkeypatch)
    rc = cli_main(["bench", "mapping", "--generated", "--quick", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert rc == 2
    assert "pip install 'streammap[bench]'" in err
    assert "Traceback" not in err
    assert list(tmp_path.iterdir()) == []                 # nothing written


def test_unknown_seed_set_is_refused(shared):
    pytest.importorskip("wfcommons")
    with pytest.raises(generated.StreamMapError, match="seed set"):
        generated_cases(shared, seeds="holdout")


# ---------------------------------------------------------------------- with wfcommons

def test_an_instance_is_the_same_bytes_for_the_same_seed(tmp_path):
    pytest.importorskip("wfcommons")
    a = generate_instance("epigenomics", 60, 7, tmp_path / "a.json")
    b = generate_instance("epigenomics", 60, 7, tmp_path / "b.json")
    c = generate_instance("epigenomics", 60, 8, tmp_path / "c.json")
    assert filecmp.cmp(a, b, shallow=False)
    assert not filecmp.cmp(a, c, shallow=False)
    g = load_graph(a)
    assert 40 <= g.number_of_nodes() <= 60 and g.number_of_edges() > 0
    assert all(d["bytes"] >= 0 for _, _, d in g.edges(data=True))


def test_a_size_below_the_recipe_minimum_is_a_clear_error(tmp_path):
    pytest.importorskip("wfcommons")
    with pytest.raises(generated.StreamMapError, match="smallest base graph"):
        generate_instance("bwa", 50, 1, tmp_path / "x.json")
    assert not (tmp_path / "x.json").exists()


@needs_shared
def test_quick_suite_covers_every_recipe_cluster_and_ccr(shared, tmp_path):
    pytest.importorskip("wfcommons")
    cases = generated_cases(shared, seeds="tune", quick=True, cache=tmp_path)
    assert {c.group for c in cases} == {"generated-tune"}
    assert {c.params["app"] for c in cases} == set(RECIPES)
    assert {c.cluster for c in cases} == {"hetero-2x4", "mixed-vendors", "small-memory"}
    assert {c.ccr for c in cases} == {0.1, 1.0, 10.0}
    assert {c.params["seed"] for c in cases} == {SEED_SETS["tune"][0]}
    assert all(c.params["n"] <= 700 for c in cases)
    report = generated_cases(shared, seeds="report", quick=True, cache=tmp_path)
    assert not {c.name for c in cases} & {c.name for c in report}


@needs_shared
def test_generated_cases_are_scored_and_grouped_by_recipe(shared, tmp_path):
    pytest.importorskip("wfcommons")
    cases = generated_cases(shared, seeds=[5], cache=tmp_path, apps=["epigenomics"], bands=[(60, 80)],
                            clusters=["hetero-2x4"], ccrs=[1.0, 10.0])
    assert len(cases) == 2
    res = run_benchmark(cases, ["heft-plain", "heft"])
    assert all(r["status"] == "ok" for r in res.rows)
    g, cl = cases[1].load()
    assert g is cases[0].load()[0]                        # one instance, read once, shared by its cases
    rec = by_recipe(res.rows, "heft")
    assert [(r["recipe"], r["ccr"]) for r in rec] == [("epigenomics", 1.0), ("epigenomics", 10.0)]
    targets = {t["target"]: t for t in check_targets(res, "heft")}
    assert "generated: cases above a memory-valid HEFT plan = 0" in targets
