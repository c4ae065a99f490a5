"""First estimates of matrix work: a product ("blas") runs at the measured GEMM rate of its own
side, float32 products (as far as their clauses prove it) at up to twice the float64 rate a CPU
was measured in, and a factorisation or solver ("lapack") at the measured Cholesky rate of its
side."""

from __future__ import annotations

import math

import pytest

from streammap.cluster.model import cluster_from_dict
from streammap.cost.model import CostModel
from streammap.ir import add_task, new_graph

GEMM = [[64, "20 GFLOP/s"], [256, "80 GFLOP/s"]]
FACTOR = [[64, "1 GFLOP/s"], [256, "4 GFLOP/s"]]


def _times(tasks, kind="cpu", **device):
    """Seconds of each ``(flops, bytes, compute_class)`` task on one device (no call overhead)."""
    g = new_graph("t", "program")
    for k, (flops, nbytes, cls) in enumerate(tasks):
        add_task(g, f"t{k}", kernel=f"k{k}", flops=flops, bytes=nbytes, compute_class=cls)
    cluster = cluster_from_dict({"name": "c", "nodes": [{"name": "n", "devices": [
        {"name": "d", "kind": kind, "flops": 100e9, "mem_bandwidth": 1e15, "call_overhead": 0, **device}]}]})
    return CostModel(g, cluster).time[:, 0].tolist()


def _square(n, itemsize):
    """flops and bytes of a square product of side n: 2 n³, and three n x n arrays."""
    return 2.0 * n ** 3, 3.0 * itemsize * n * n


def test_a_product_runs_at_the_gemm_rate_of_its_own_side():
    small, large = _square(64, 8), _square(256, 8)
    mid = 2.0 * 128 ** 3                                  # halfway between 64 and 256 in log(side)
    got = _times([(*small, "blas"), (*large, "blas"), (mid, None, "blas")], gemm_curve=GEMM)
    assert got == pytest.approx([small[0] / 20e9, large[0] / 80e9, mid / 50e9])


def test_beyond_the_measured_sides_a_product_gets_the_nearest_measured_rate():
    got = _times([(2.0 * 16 ** 3, None, "blas"), (2.0 * 4096 ** 3, None, "blas")], gemm_curve=GEMM)
    assert got == pytest.approx([2.0 * 16 ** 3 / 20e9, 2.0 * 4096 ** 3 / 80e9])


def test_a_float32_product_on_a_cpu_runs_at_twice_the_float64_rate():
    f64, f32 = _square(256, 8), _square(256, 4)
    assert _times([(*f64, "blas"), (*f32, "blas")], gemm_curve=GEMM) == \
        pytest.approx([f64[0] / 80e9, f32[0] / 160e9])


def test_a_rectangular_float32_product_is_credited_only_what_its_bytes_prove():
    # 64 x 512 by 512 x 512 in float32: its bytes bound the element size at 6.7 bytes, not 4
    rows, width = 64, 512
    flops, nbytes = 2.0 * rows * width * width, 4.0 * (2 * rows * width + width * width)
    (got,) = _times([(flops, nbytes, "blas")], achieved_flops=80e9)
    assert flops / 160e9 < got < flops / 80e9
    assert got == pytest.approx(flops / (80e9 * 8 / (nbytes / (3 * (flops / 2) ** (2 / 3)))))


def test_a_gpu_was_measured_in_float32_and_is_not_scaled():
    f32 = _square(4096, 4)
    assert _times([(*f32, "blas")], kind="gpu", achieved_flops=50e12) == pytest.approx([f32[0] / 50e12])


def test_a_factorisation_runs_at_the_cholesky_rate_of_its_side():
    potrf = 256.0 ** 3 / 3                                # a Cholesky factorisation of side 256
    got = _times([(potrf, None, "lapack"), (potrf, None, "blas")], gemm_curve=GEMM, factor_curve=FACTOR)
    assert got == pytest.approx([potrf / 4e9, potrf / _gemm_rate_at_side_of(potrf)])


def _gemm_rate_at_side_of(flops):
    """The GEMM curve of this file (20 at 64, 80 at 256, linear in log side) at a product's side."""
    side = (flops / 2) ** (1 / 3)
    t = (math.log(side) - math.log(64)) / (math.log(256) - math.log(64))
    return 20e9 + t * 60e9


def test_without_a_factor_curve_a_factorisation_gets_the_gemm_curve_at_its_side():
    potrf = 256.0 ** 3 / 3
    assert _times([(potrf, None, "lapack")], gemm_curve=GEMM) == pytest.approx([potrf / 80e9])


def test_devices_that_differ_only_in_their_gemm_curve_are_different_classes():
    g = new_graph("t", "program")
    add_task(g, "t", kernel="k", flops=2.0 * 64 ** 3, compute_class="blas")
    cluster = cluster_from_dict({"name": "c", "nodes": [{"name": "n", "link": {"bandwidth": 1e10}, "devices": [
        {"name": "c0", "kind": "cpu", "achieved_flops": 80e9, "gemm_curve": [[64, 20e9], [256, 80e9]]},
        {"name": "c1", "kind": "cpu", "achieved_flops": 80e9, "gemm_curve": [[64, 40e9], [256, 80e9]]}]}]})
    cost = CostModel(g, cluster)
    assert cost.class_time.shape[1] == 2 and cost.time[0, 0] > cost.time[0, 1]
