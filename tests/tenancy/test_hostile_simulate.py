"""``streammap simulate`` with hostile flags and jobs files: a usage error (exit 2) naming the
flag or the file and line, before a stream is built; never a traceback, a 7 TiB allocation or a
table of inf and NaN. The Python API (``compare``) refuses the same values with the same hint."""

import pytest

from streammap.cli import main
from streammap.errors import StreamMapError
from streammap.tenancy.jobs import load_jobs
from streammap.tenancy.simulate import compare
from tests.helpers.cli import replay_small_stream
from tests.helpers.paths import SHARED, needs_shared

GRAPH = SHARED / "workflows" / "blast-chameleon-small-001.json"
CLUSTER = SHARED / "clusters" / "hetero-2x4.yaml"

pytestmark = needs_shared


def usage_error(argv, capsys) -> str:
    """Run the CLI; it must stop with status 2 and a message, without a traceback."""
    try:
        status = main([str(a) for a in argv])
    except SystemExit as exc:           # argparse refuses a flag's value this way
        status = exc.code
    err = capsys.readouterr().err
    assert status == 2, err
    assert "Traceback" not in err
    return err


@pytest.mark.parametrize("flag, value", [
    ("--jobs-count", "1000000000000"), ("--jobs-count", "-5"),
    ("--jobs-count", "0"),                  # an empty stream: the file written would be refused as input
    ("--rate", "nan"), ("--rate", "inf"), ("--rate", "0"),
    ("--priorities", "-1"), ("--priorities", "100000000000"),
    ("--shared", "nan"), ("--seed", "-1"), ("--estimate-error", "nan"), ("--estimate-error", "-1"),
])
def test_generator_flags_out_of_range_are_refused_naming_the_flag(tmp_path, capsys, flag, value):
    err = usage_error(["simulate", "--generate", "poisson", "--jobs", tmp_path / "j.yaml", "--graphs", GRAPH,
                       flag, value], capsys)
    assert f"argument {flag}: {value} is not" in err
    assert not (tmp_path / "j.yaml").exists()


@pytest.mark.parametrize("shares", ["a:nan,b", "a:inf,b", "a:-1,b", "a:1e308,b:1e308", "a:1e-320,b"])
def test_tenant_shares_must_be_finite_and_positive(tmp_path, capsys, shares):
    err = usage_error(["simulate", "--generate", "poisson", "--jobs", tmp_path / "j.yaml", "--graphs", GRAPH,
                       "--tenants", shares], capsys)
    assert "shares must be numbers from 1e-09 to 1e+09" in err


@pytest.mark.parametrize("jobs, needle", [
    (f"- {{graph: {GRAPH}, tenant: a}}\n- {{graph: {GRAPH}, tenant: a, arrival: .inf}}\n", "j.yaml:2:"),
    (f"- {{graph: {GRAPH}, tenant: a, arrival: 1e308}}\n", "less than or equal to 1000000000"),
    (f"- {{graph: {GRAPH}, tenant: a, priority: 100000000000000000000000}}\n", "priority"),
    ("[]\n", "not an empty one"),
])
def test_jobs_files_whose_figures_would_be_inf_or_nan_are_refused_at_their_line(tmp_path, capsys, jobs, needle):
    (tmp_path / "j.yaml").write_text(jobs)
    err = usage_error(["simulate", "--jobs", tmp_path / "j.yaml", "--cluster", CLUSTER, "--policy", "fifo",
                       "--out", tmp_path / "out"], capsys)
    assert needle in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("out", ["a-file", "/dev/null"])
def test_an_out_that_is_not_a_folder_is_refused_before_the_simulation(tmp_path, capsys, out):
    (tmp_path / "a-file").write_text("keep me")
    (tmp_path / "j.yaml").write_text(f"- {{graph: {GRAPH}, tenant: a}}\n")
    target = tmp_path / out if out == "a-file" else out
    err = usage_error(["simulate", "--jobs", tmp_path / "j.yaml", "--cluster", CLUSTER, "--policy", "fifo",
                       "--out", target], capsys)
    assert "exists and is not a folder" in err
    assert (tmp_path / "a-file").read_text() == "keep me"


@pytest.mark.parametrize("weight", ["1.0e+308", "1.0e-320", "1.0e+10"])
def test_a_tenant_weight_past_the_weight_bounds_is_refused_at_its_line(tmp_path, capsys, weight):
    """Two tenants of weight 1e308 (or 1e-320) are two equal tenants, yet their weights summed past
    the float range (or their fair shares underflowed): Jain's index was NaN and the schedule
    not the one equal weights give. Weights are from MIN_WEIGHT to MAX_WEIGHT."""
    (tmp_path / "j.yaml").write_text(f"- {{graph: {GRAPH}, tenant: a}}\n")
    (tmp_path / "t.yaml").write_text(f"tenants:\n  - {{name: a, weight: {weight}}}\n  - {{name: b, weight: {weight}}}\n")
    err = usage_error(["simulate", "--jobs", tmp_path / "j.yaml", "--cluster", CLUSTER, "--tenants", tmp_path / "t.yaml",
                       "--policy", "fifo", "--out", tmp_path / "out"], capsys)
    assert "t.yaml:2:" in err and "weight" in err
    assert not (tmp_path / "out").exists()


def test_an_infinite_tenant_weight_is_refused_at_its_line(tmp_path, capsys):
    (tmp_path / "j.yaml").write_text(f"- {{graph: {GRAPH}, tenant: a}}\n")
    (tmp_path / "t.yaml").write_text("tenants:\n  - {name: a, weight: .inf}\n  - {name: b}\n")
    err = usage_error(["simulate", "--jobs", tmp_path / "j.yaml", "--cluster", CLUSTER, "--tenants", tmp_path / "t.yaml",
                       "--policy", "fifo", "--out", tmp_path / "out"], capsys)
    assert "t.yaml:2:" in err and "weight" in err


@pytest.mark.parametrize("value, needle", [
    ("-1", "--wait-cap must be at least 0, not -1"), ("nan", "--wait-cap must be at least 0, not nan"),
    ("-inf", "--wait-cap must be at least 0, not -inf"),
    ("eight", "argument --wait-cap: eight is not a number: 8 bounds every deadline"),
])
def test_a_wait_bound_that_is_not_a_number_at_least_0_is_refused_naming_the_flag(tmp_path, capsys, value, needle):
    (tmp_path / "j.yaml").write_text(f"- {{graph: {GRAPH}, tenant: a}}\n")
    err = usage_error(["simulate", "--jobs", tmp_path / "j.yaml", "--cluster", CLUSTER, "--policy", "streammap",
                       f"--wait-cap={value}", "--out", tmp_path / "out"], capsys)
    assert needle in err and "0 turns" in err
    assert not (tmp_path / "out").exists()


def test_an_infinite_wait_bound_bounds_nothing_as_0_does(tmp_path):
    """``inf`` (and ``1e309``, which reads as inf) is a wait bound that never binds: the replay is
    the one without the bound, not a table of NaN deadlines."""
    rows = {}
    for value in ("0", "inf", "1e309"):
        folder = tmp_path / value
        folder.mkdir()
        assert replay_small_stream(folder, f"--wait-cap={value}") == 20
        rows[value] = (folder / "sim" / "simulate-jobs.csv").read_text()
    assert rows["inf"] == rows["1e309"] == rows["0"]


@pytest.mark.parametrize("wait_cap", [-1.0, float("nan"), "8", None, True])
def test_compare_refuses_a_wait_bound_that_is_not_a_number_at_least_0(tmp_path, wait_cap):
    """The Python API's ``compare(wait_cap=)``: a StreamMapError with the hint, not a TypeError
    from comparing a text with 0, nor a NaN bound that no deadline compares with."""
    (tmp_path / "j.yaml").write_text(f"- {{graph: {GRAPH}, tenant: a}}\n")
    with pytest.raises(StreamMapError, match="the wait bound must be a number at least 0") as info:
        compare(load_jobs(tmp_path / "j.yaml"), CLUSTER, policies=["streammap"], wait_cap=wait_cap)
    assert "0 turns it off" in info.value.format()
