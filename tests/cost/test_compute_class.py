"""A task's flops run at the rate of its kernel's compute class: the GEMM's for "blas" kernels (and
for tasks of no class, such as imported workflows), the measured random, transcendental and FFT
rates for those kernels, the measured mix ("achieved_other_flops") for bodies that both draw random
numbers and call transcendental functions ("mixed"), the measured element-wise rate for the rest
("other"); a cluster file without the element-wise rate gives "other" tasks the mix's rate, and one
without either a fixed fraction of the GEMM rate. A Gram product (``l @ l.T``)
costs the full product NumPy runs, not the symmetric half its clause counts. FFT kernels run at
the measured FFT curve, complex ("fft") or real ("rfft"), read at the task's working set, and
scans ("scan") at the measured scan rate."""

from __future__ import annotations

import pytest

from streammap.cluster.model import OTHER_FLOPS_FRACTION, cluster_from_dict
from streammap.cost.model import CostModel
from streammap.ir import add_task, new_graph


def _graph(*classes):
    g = new_graph("t", "program")
    for k, cls in enumerate(classes):
        add_task(g, f"t{k}", kernel=f"k{k}", flops=1e9, compute_class=cls)
    return g


def _cpu(**extra):
    return cluster_from_dict({"name": "c", "nodes": [{"name": "n", "devices": [
        {"name": "cpu", "kind": "cpu", "flops": 100e9, "call_overhead": 0, **extra}]}]})


def test_blas_tasks_run_at_the_gemm_rate_and_other_tasks_at_the_other_rate():
    cost = CostModel(_graph("blas", "other"), _cpu(achieved_flops="50 GFLOP/s", achieved_other_flops="2 GFLOP/s"))
    assert cost.time[:, 0].tolist() == pytest.approx([1e9 / 50e9, 1e9 / 2e9])


def test_fft_tasks_run_at_the_fft_rate_and_else_at_the_other_rate():
    measured = CostModel(_graph("fft"), _cpu(achieved_other_flops=2e9, achieved_fft_flops="5 GFLOP/s"))
    assert measured.time[0, 0] == pytest.approx(1e9 / 5e9)
    older_file = CostModel(_graph("fft"), _cpu(achieved_other_flops=2e9))     # calibrated before the field
    assert older_file.time[0, 0] == pytest.approx(1e9 / 2e9)


def test_a_task_of_no_class_runs_at_the_gemm_rate_as_before_classes_existed():
    cost = CostModel(_graph(None), _cpu(achieved_flops=50e9, achieved_other_flops=2e9))
    assert cost.time[0, 0] == pytest.approx(1e9 / 50e9)


def test_without_a_measured_other_rate_other_tasks_get_a_fraction_of_the_gemm_rate():
    measured = CostModel(_graph("other"), _cpu(achieved_flops=50e9)).time[0, 0]
    peak_only = CostModel(_graph("other"), _cpu()).time[0, 0]
    assert measured == pytest.approx(1e9 / (OTHER_FLOPS_FRACTION * 50e9))
    assert peak_only == pytest.approx(1e9 / (OTHER_FLOPS_FRACTION * 100e9))


#: The rates an "other" task may run at: the mix (files calibrated before the element-wise rate) and
#: plain element-wise arithmetic, with a rate for each that is below the task's memory time.
OTHER_RATES = [("achieved_other_flops", 1e3, 1e9), ("achieved_elementwise_flops", 1e6, 5e9)]


@pytest.mark.parametrize("field, flops, rate", OTHER_RATES)
def test_the_other_rates_do_not_change_memory_bound_tasks_beyond_their_bytes(field, flops, rate):
    g = new_graph("t", "program")
    add_task(g, "copy", kernel="copy", flops=flops, bytes=1e9, compute_class="other")
    cost = CostModel(g, _cpu(**{field: rate}, achieved_bandwidth=10e9))
    assert cost.time[0, 0] == pytest.approx(1e9 / 10e9)


@pytest.mark.parametrize("field", [field for field, _, _ in OTHER_RATES])
def test_devices_that_differ_only_in_an_other_rate_are_different_classes(field):
    cluster = cluster_from_dict({"name": "c", "nodes": [{"name": "n", "link": {"bandwidth": 1e10}, "devices": [
        {"name": "g0", "kind": "gpu", "model": "H100", field: "1 TFLOP/s", "call_overhead": 0},
        {"name": "g1", "kind": "gpu", "model": "H100", field: "2 TFLOP/s", "call_overhead": 0}]}]})
    cost = CostModel(_graph("other"), cluster)
    assert len(set(cost.device_class)) == 2
    assert cost.time[0, 0] == pytest.approx(2 * cost.time[0, 1], rel=1e-3)


def test_random_and_transcendental_tasks_run_at_their_measured_rates():
    cost = CostModel(_graph("random", "transcendental"),
                     _cpu(achieved_other_flops=2e9, achieved_random_flops="0.1 GFLOP/s",
                          achieved_transcendental_flops="0.2 GFLOP/s"))
    assert cost.time[:, 0].tolist() == pytest.approx([1e9 / 0.1e9, 1e9 / 0.2e9])


def test_without_their_own_figures_random_and_transcendental_tasks_get_the_other_rate():
    cost = CostModel(_graph("random", "transcendental"), _cpu(achieved_other_flops=2e9))   # an older file
    assert cost.time[:, 0].tolist() == pytest.approx([1e9 / 2e9, 1e9 / 2e9])


def test_a_gram_task_costs_the_full_product_numpy_runs():
    """``l @ l.T`` with a clause of ``n³`` (the symmetric update BLAS syrk counts) runs NumPy's full
    ``2 n³`` product: twice the time of a product clause of ``n³`` read at the same side."""
    n = 256.0
    g = new_graph("t", "program")
    add_task(g, "syrk", kernel="syrk", flops=n ** 3, bytes=24 * n * n, compute_class="gram")
    add_task(g, "gemm", kernel="gemm", flops=2 * n ** 3, bytes=24 * n * n, compute_class="blas")
    cpu = _cpu(achieved_flops=40e9, gemm_curve=[[64, 10e9], [256, 40e9]])
    cost = CostModel(g, cpu)
    assert cost.time[0, 0] == pytest.approx(2 * n ** 3 / 40e9)
    assert cost.time[0, 0] == pytest.approx(cost.time[1, 0])


def test_devices_that_differ_only_in_their_random_rate_are_different_classes():
    cluster = cluster_from_dict({"name": "c", "nodes": [{"name": "n", "link": {"bandwidth": 1e10}, "devices": [
        {"name": "g0", "kind": "gpu", "model": "H100", "achieved_random_flops": "1 TFLOP/s", "call_overhead": 0},
        {"name": "g1", "kind": "gpu", "model": "H100", "achieved_random_flops": "2 TFLOP/s", "call_overhead": 0}]}]})
    cost = CostModel(_graph("random"), cluster)
    assert cost.time[0, 0] == pytest.approx(2 * cost.time[0, 1], rel=1e-3)


def test_other_tasks_run_at_the_elementwise_rate_and_mixed_tasks_at_the_mix_rate():
    cost = CostModel(_graph("other", "mixed"),
                     _cpu(achieved_other_flops=2e9, achieved_elementwise_flops="5 GFLOP/s"))
    assert cost.time[:, 0].tolist() == pytest.approx([1e9 / 5e9, 1e9 / 2e9])


def test_a_file_calibrated_before_the_elementwise_rate_prices_other_tasks_at_the_mix_rate():
    cost = CostModel(_graph("other", "mixed"), _cpu(achieved_other_flops=2e9))
    assert cost.time[:, 0].tolist() == pytest.approx([1e9 / 2e9, 1e9 / 2e9])


def _fft_graph(*tasks):
    """``(class, working-set bytes)`` per task, each of 1 GFLOP."""
    g = new_graph("t", "program")
    for k, (cls, ws) in enumerate(tasks):
        add_task(g, f"t{k}", kernel=f"k{k}", flops=1e9, mem=ws, compute_class=cls)
    return g


#: A complex and a real FFT curve by working set: 64 KiB, 1 MiB and 2 MiB.
FFT_CURVES = {"achieved_fft_flops": "1 GFLOP/s", "fft_curve": [["64KiB", 5e9], ["1MiB", 8e9], ["2MiB", 6e9]],
              "rfft_curve": [["64KiB", 4e9], ["1MiB", 7e9], ["2MiB", 2e9]]}


def test_fft_tasks_run_at_their_curves_rate_for_their_own_working_set():
    """A complex FFT reads the complex curve, a real one the real curve, at the task's working set:
    interpolated linearly in its logarithm (256 KiB lies halfway between 64 KiB and 1 MiB), the
    end rates beyond the curve."""
    cost = CostModel(_fft_graph(("fft", 64 << 10), ("fft", 256 << 10), ("fft", 64 << 20),
                                ("rfft", 1 << 20), ("rfft", 2 << 20), ("rfft", 1 << 10)), _cpu(**FFT_CURVES))
    rates = [1e9 / t for t in cost.time[:, 0]]
    assert rates == pytest.approx([5e9, 6.5e9, 6e9, 7e9, 2e9, 4e9])


def test_the_working_set_of_an_fft_task_is_its_input_and_output_bytes():
    """A real filter of n float64s: 8n bytes in from its producer, 8n out."""
    n = 1 << 16
    g = new_graph("t", "program")
    add_task(g, "signal", kernel="signal", flops=1.0, out=8 * n, compute_class="other")
    add_task(g, "filter", kernel="filter", flops=1e9, out=8 * n, compute_class="rfft")
    g.add_edge("signal", "filter", bytes=8 * n)
    cost = CostModel(g, _cpu(**FFT_CURVES))
    assert 1e9 / cost.time[cost.pos["filter"], 0] == pytest.approx(7e9)      # 16n = 1 MiB


def test_without_curves_every_fft_task_gets_the_one_fft_rate_and_a_real_one_the_complex_curve():
    older_file = CostModel(_fft_graph(("fft", 64 << 10), ("rfft", 2 << 20)), _cpu(achieved_fft_flops="3 GFLOP/s"))
    assert older_file.time[:, 0].tolist() == pytest.approx([1e9 / 3e9, 1e9 / 3e9])
    complex_only = CostModel(_fft_graph(("rfft", 1 << 20)), _cpu(fft_curve=[["64KiB", 5e9], ["1MiB", 8e9]]))
    assert complex_only.time[0, 0] == pytest.approx(1e9 / 8e9)


def test_devices_that_differ_only_in_an_fft_curve_are_different_classes():
    cluster = cluster_from_dict({"name": "c", "nodes": [{"name": "n", "link": {"bandwidth": 1e10}, "devices": [
        {"name": "g0", "kind": "gpu", "model": "H100", "rfft_curve": [["1MiB", "1 TFLOP/s"]], "call_overhead": 0},
        {"name": "g1", "kind": "gpu", "model": "H100", "rfft_curve": [["1MiB", "2 TFLOP/s"]], "call_overhead": 0}]}]})
    cost = CostModel(_fft_graph(("rfft", 1 << 20)), cluster)
    assert len(set(cost.device_class)) == 2
    assert cost.time[0, 0] == pytest.approx(2 * cost.time[0, 1], rel=1e-3)


def test_scan_tasks_run_at_the_scan_rate_and_in_older_files_at_the_elementwise_rate():
    cost = CostModel(_graph("scan", "other"), _cpu(achieved_elementwise_flops=4e9, achieved_scan_flops="0.5 GFLOP/s"))
    assert cost.time[:, 0].tolist() == pytest.approx([1e9 / 0.5e9, 1e9 / 4e9])
    older_file = CostModel(_graph("scan"), _cpu(achieved_elementwise_flops=4e9))
    assert older_file.time[0, 0] == pytest.approx(1e9 / 4e9)
