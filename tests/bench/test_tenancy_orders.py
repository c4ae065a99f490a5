"""The admission benchmark with several streammap orders: each order is run on the same arrivals
and scored against one FIFO run, a row per order."""

import csv

import pytest

from tests.helpers.modules import load_file
from tests.helpers.paths import ROOT, needs_shared


@pytest.fixture(scope="module")
def bench():
    return load_file(ROOT / "benchmarks" / "tenancy_policies.py", "tenancy_policies_orders")


@needs_shared
def test_two_orders_give_two_rows_scored_against_the_same_fifo_run(bench, tmp_path):
    rows = bench.run_setting(16, 60, "a:2,b:1", 1, 1.1, [0.0], ["fifo", "streammap"], bench.SLACK, bench.SLOWDOWN,
                             {}, order=("deadline", "hrrn"))
    assert [r["order"] for r in rows] == ["deadline", "hrrn"]
    assert rows[0]["results"]["fifo"] is rows[1]["results"]["fifo"]          # FIFO ran once
    assert rows[0]["results"]["streammap"] is not rows[1]["results"]["streammap"]
    bench.write_rows(rows, tmp_path / "t.csv")
    written = list(csv.DictReader((tmp_path / "t.csv").open()))
    assert [(r["policy"], r["order"]) for r in written] == [("fifo", ""), ("streammap", "deadline"),
                                                           ("streammap", "hrrn")]


def test_an_unknown_order_is_refused_with_the_orders_named(bench, capsys):
    with pytest.raises(SystemExit) as exit_:
        bench.main(["--order", "deadline,sjf"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "unknown --order 'sjf'" in err and "hrrn-themis" in err


def test_a_negative_wait_bound_is_refused_before_anything_runs(bench, capsys):
    with pytest.raises(SystemExit) as exit_:
        bench.main(["--wait-cap", "-1"])
    assert exit_.value.code == 2
    assert "--wait-cap must be at least 0" in capsys.readouterr().err
