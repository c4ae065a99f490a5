"""Discovery measures matrix products and factorisations at several sides (``gemm_curve``,
``factor_curve``), keeps each curve non-decreasing so that a disturbed large run cannot sink it,
and writes both readably into the cluster file, which validates them."""

from __future__ import annotations

import pytest

from streammap.cluster import microbench
from streammap.cluster.discover import calibrate
from streammap.cluster.model import DeviceSpec, load_cluster
from streammap.errors import ClusterError
from tests.helpers.clusters import one_node


def test_a_larger_side_that_measured_slower_gets_the_rate_of_the_smaller_one():
    # side 256 ran while another process held a core (its BLAS threads waited): 1 GFLOP/s
    assert microbench.monotone_curve([(64, 40e9), (128, 45e9), (256, 1e9)]) == \
        ((64, 40e9), (128, 45e9), (256, 45e9))
    assert microbench.monotone_curve([(64, 40e9), (256, 80e9)]) == ((64, 40e9), (256, 80e9))


def test_the_cpu_measurement_gives_non_decreasing_gemm_and_cholesky_curves_by_side(cpu_measurement):
    got = cpu_measurement
    for curve, sides in ((got.gemm_curve, microbench.GEMM_SIDES["cpu"]),
                         (got.factor_curve, microbench.FACTOR_SIDES["cpu"])):
        assert [n for n, _ in curve] == list(sides)
        rates = [r for _, r in curve]
        assert all(r > 0 for r in rates) and rates == sorted(rates)
    assert got.flops == dict(got.gemm_curve)[microbench.GEMM_SIDE["cpu"]]
    assert "Cholesky " in got.describe(DeviceSpec(name="cpu", kind="cpu"))


def test_discover_records_both_curves_readably_and_they_load_back(calibrated_cpu_file):
    gemm, factor = ((64, 40e9), (256, 60e9)), ((64, 2e9), (256, 8e9))
    measured = microbench.Measured(60e9, 25e9, 0.2, gemm_curve=gemm, factor_curve=factor)
    text, cpu = calibrated_cpu_file(measured)
    assert "gemm_curve:\n    - - 64\n      - 40 GFLOP/s\n    - - 256\n      - 60 GFLOP/s\n" in text
    assert "factor_curve:\n    - - 64\n      - 2 GFLOP/s\n    - - 256\n      - 8 GFLOP/s\n" in text
    assert cpu.gemm_curve == gemm and cpu.factor_curve == factor


def test_boards_of_one_model_record_the_median_curves():
    gpus = [DeviceSpec(name=f"gpu{i}", kind="gpu", model="H100", index=i) for i in range(3)]
    results = {f"gpu{i}": microbench.Measured(r, 2e12, gemm_curve=((1024, r / 2), (4096, r)),
                                              factor_curve=((1024, r / 20), (4096, r / 10)))
               for i, r in enumerate([40e12, 60e12, 50e12])}
    devs = calibrate(one_node(*gpus), measure=lambda d, **_: results[d.name]).spec.nodes[0].devices
    assert {(tuple(map(tuple, d.gemm_curve)), tuple(map(tuple, d.factor_curve))) for d in devs} == \
        {(((1024, 25e12), (4096, 50e12)), ((1024, 2.5e12), (4096, 5e12)))}


@pytest.mark.parametrize("field", ["gemm_curve", "factor_curve"])
@pytest.mark.parametrize("curve", ["[[256, 60 GFLOP/s], [64, 40 GFLOP/s]]", "[[64, 0]]", "[[0, 40 GFLOP/s]]"])
def test_a_bad_matrix_curve_names_the_file_line_and_field(tmp_path, field, curve):
    p = tmp_path / "c.yaml"
    p.write_text(f"name: x\nnodes:\n  - name: n\n    devices:\n      - name: cpu\n        kind: cpu\n"
                 f"        {field}: {curve}\n")
    with pytest.raises(ClusterError) as err:
        load_cluster(p)
    assert field in err.value.message and "increasing" in err.value.message


def test_a_cluster_file_written_before_the_curves_still_loads_and_uses_its_gemm_rate(tmp_path):
    p = tmp_path / "old.yaml"
    p.write_text("name: x\nnodes:\n  - name: n\n    devices:\n      - {name: cpu, kind: cpu, "
                 "achieved_flops: 40 GFLOP/s, achieved_bandwidth: 20 GB/s}\n")
    cpu = load_cluster(p).devices[0]
    assert cpu.gemm_curve == () and cpu.factor_curve == ()
    assert cpu.gemm_rate_at([64, 1024]).tolist() == [40e9, 40e9]
    assert cpu.factor_rate_at([64, 1024]).tolist() == [40e9, 40e9]
