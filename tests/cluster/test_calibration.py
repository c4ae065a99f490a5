"""Calibrated first estimates: discovery measures each device once (a GEMM and a streaming copy)
and records what it achieved beside the peaks; the cluster file validates the new fields, and
a failed measurement leaves the peaks in place."""

from __future__ import annotations

import numpy as np
import pytest

from streammap.cli import main
from streammap.cluster import microbench
from streammap.cluster.discover import calibrate, discover, write_cluster
from streammap.cluster.model import OTHER_FLOPS_FRACTION, DeviceSpec, load_cluster
from streammap.errors import ClusterError
from tests.helpers.clusters import one_node


def _fake(results):
    """A ``measure`` that answers from ``results[device name]`` (a Measured) instead of running."""
    def measure(device, **_):
        return results[device.name]
    return measure


def test_the_cpu_is_measured_with_numpy_and_gets_positive_rates(cpu_measurement):
    got = cpu_measurement
    assert got.flops > 0 and got.bandwidth > 0 and got.note == ""


def test_devices_that_cannot_be_measured_say_why_and_keep_their_peaks(monkeypatch):
    monkeypatch.setattr(microbench, "import_cupy", lambda: None)
    no_cupy = microbench.measure_device(DeviceSpec(name="gpu0", kind="gpu", index=0))
    assert no_cupy.flops is None and "CuPy is not installed" in no_cupy.note
    mlu = microbench.measure_device(DeviceSpec(name="m", kind="mlu"))
    assert mlu.flops is None and "cannot execute on mlu" in mlu.note

    class BrokenCupy:
        class cuda:
            @staticmethod
            def Device(i):
                raise RuntimeError("cudaErrorNoDevice")
    broken = microbench.measure_device(DeviceSpec(name="gpu0", kind="gpu", index=0), cupy=BrokenCupy)
    assert broken.flops is None and "cudaErrorNoDevice" in broken.note


def test_boards_of_one_model_record_the_median_so_they_stay_one_class():
    gpus = [DeviceSpec(name=f"gpu{i}", kind="gpu", model="H100", flops=67e12, mem_bandwidth=3.35e12, index=i)
            for i in range(3)]
    cpu = DeviceSpec(name="cpu", kind="cpu", flops=1e11)
    results = {"gpu0": microbench.Measured(50e12, 3.0e12), "gpu1": microbench.Measured(40e12, 2.0e12),
               "gpu2": microbench.Measured(45e12, 2.5e12), "cpu": microbench.Measured(None, None, note="busy")}
    found = calibrate(one_node(*gpus, cpu), measure=_fake(results))
    devs = found.spec.nodes[0].devices
    assert [(d.achieved_flops, d.achieved_bandwidth) for d in devs[:3]] == [(45e12, 2.5e12)] * 3
    assert devs[3].achieved_flops is None and devs[3].achieved_bandwidth is None
    assert any("cpu: not measured (busy)" in n for n in found.notes)
    assert any("gpu1: GEMM 40 TFLOP/s (60% of the 67 peak), copy 2 TB/s (60% of the 3.35 peak)" in n
               for n in found.notes)


def test_achieved_figures_round_trip_through_the_cluster_file(tmp_path):
    found = calibrate(discover(), budget_s=0.05)
    out = tmp_path / "cluster.yaml"
    assert main(["discover", "-o", str(out), "--no-calibrate"]) == 0
    assert "achieved_" not in out.read_text()
    write_cluster(found.spec, out, found.notes)
    text = out.read_text()
    assert "achieved_flops:" in text and "achieved_bandwidth:" in text and "# calibrated cpu: GEMM" in text
    cpu = [d for d in load_cluster(out).devices if d.kind == "cpu"][0]
    assert cpu.achieved_flops > 0 and cpu.compute_rate == cpu.achieved_flops
    assert cpu.memory_rate == cpu.achieved_bandwidth


def test_discover_calibrates_unless_told_not_to(tmp_path):
    out = tmp_path / "cluster.yaml"
    assert main(["discover", "-o", str(out)]) == 0
    assert "achieved_flops:" in out.read_text()


@pytest.mark.parametrize("field,value", [("achieved_flops", -1), ("achieved_bandwidth", "fast"),
                                         ("achieved_flops", 0)])
def test_a_bad_achieved_figure_names_the_file_line_and_field(tmp_path, field, value):
    p = tmp_path / "c.yaml"
    p.write_text(f"name: x\nnodes:\n  - name: n\n    devices:\n      - name: cpu\n        kind: cpu\n"
                 f"        {field}: {value}\n")
    with pytest.raises(ClusterError) as err:
        load_cluster(p)
    assert err.value.line == 7 and field in err.value.message


def test_the_cpu_measurement_gives_a_bandwidth_curve_and_a_call_overhead(cpu_measurement):
    got = cpu_measurement
    assert [n for n, _ in got.curve] == [2.0 * n for n in microbench.COPY_SIZES]
    assert got.bandwidth == got.curve[-1][1] and all(r > 0 for _, r in got.curve)
    assert got.call_overhead > 0


@pytest.mark.parametrize("settled", [False, True], ids=["fresh", "settled-allocator"])
@pytest.mark.parametrize("nbytes", microbench.COPY_SIZES)
def test_the_copy_runs_half_a_page_apart_wherever_the_allocator_puts_it(nbytes, settled):
    """memcpy crawls when the destination lies 16 bytes past the source modulo 4 KiB, where two
    arrays allocated one after the other from a settled heap lie; the curve must not measure that."""
    if settled:
        microbench.settle_allocator()
    src, dst = microbench.copy_pair(np, nbytes)
    assert src.nbytes == dst.nbytes == nbytes and not np.shares_memory(src, dst)
    assert (dst.ctypes.data - src.ctypes.data) % 4096 == microbench.COPY_GAP == 2048


def test_discover_records_the_curve_and_the_call_overhead_readably(calibrated_cpu_file):
    curve = ((512.0 * 1024, 100e9), (64.0 * 2**20, 25e9))
    measured = microbench.Measured(50e9, 25e9, 0.2, curve=curve, call_overhead=1.5e-6)
    text, cpu = calibrated_cpu_file(measured)
    assert "bandwidth_curve:\n    - - 512KiB\n      - 100 GB/s\n    - - 64MiB\n      - 25 GB/s\n" in text
    assert "call_overhead: 1.5us" in text
    assert "(in cache: 512 KiB 100 GB/s), call 1.5 us" in text
    assert cpu.bandwidth_curve == curve and cpu.call_overhead == pytest.approx(1.5e-6)


def test_boards_of_one_model_record_the_median_curve_and_overhead():
    gpus = [DeviceSpec(name=f"gpu{i}", kind="gpu", model="H100", index=i) for i in range(3)]
    results = {f"gpu{i}": microbench.Measured(40e12, r, curve=((1e6, 2 * r), (1e9, r)), call_overhead=o)
               for i, (r, o) in enumerate([(2e12, 10e-6), (3e12, 30e-6), (2.5e12, 20e-6)])}
    devs = calibrate(one_node(*gpus), measure=_fake(results)).spec.nodes[0].devices
    assert {(tuple(map(tuple, d.bandwidth_curve)), d.call_overhead) for d in devs} == \
        {(((1e6, 5e12), (1e9, 2.5e12)), 20e-6)}


def test_a_cluster_file_written_before_the_curve_and_overhead_still_loads(tmp_path):
    p = tmp_path / "old.yaml"
    p.write_text("name: x\nnodes:\n  - name: n\n    devices:\n      - {name: cpu, kind: cpu, "
                 "achieved_flops: 40 GFLOP/s, achieved_bandwidth: 20 GB/s}\n")
    cpu = load_cluster(p).devices[0]
    assert cpu.bandwidth_curve == () and cpu.call_overhead is None
    assert cpu.memory_rate_at([1e3, 1e9]).tolist() == [20e9, 20e9]


@pytest.mark.parametrize("curve,words", [("[[64MiB, 25 GB/s], [512KiB, 100 GB/s]]", "increasing"),
                                         ("[[512KiB, 0]]", "positive"), ("[[512KiB]]", "bandwidth_curve")])
def test_a_bad_bandwidth_curve_names_the_file_line_and_field(tmp_path, curve, words):
    p = tmp_path / "c.yaml"
    p.write_text(f"name: x\nnodes:\n  - name: n\n    devices:\n      - name: cpu\n        kind: cpu\n"
                 f"        bandwidth_curve: {curve}\n")
    with pytest.raises(ClusterError) as err:
        load_cluster(p)
    assert words in err.value.message


def test_the_cpu_measurement_gives_a_positive_other_rate(cpu_measurement):
    got = cpu_measurement
    assert got.other_flops > 0
    assert "other " in got.describe(DeviceSpec(name="cpu", kind="cpu"))


def test_the_other_rate_round_trips_through_the_cluster_file_readably(calibrated_cpu_file):
    measured = microbench.Measured(50e9, 25e9, 0.2, other_flops=2.5e9)
    text, cpu = calibrated_cpu_file(measured)
    assert "achieved_other_flops: 2.5 GFLOP/s" in text
    assert "other 2.5 GFLOP/s (5.0% of GEMM)" in text
    assert cpu.achieved_other_flops == pytest.approx(2.5e9) and cpu.other_compute_rate == pytest.approx(2.5e9)


def test_the_cpu_measurement_gives_an_fft_rate_that_round_trips_through_the_cluster_file(
        calibrated_cpu_file, cpu_measurement):
    got = cpu_measurement
    assert got.fft_flops > 0
    measured = microbench.Measured(50e9, 25e9, 0.2, other_flops=2.5e9, fft_flops=4e9)
    text, cpu = calibrated_cpu_file(measured)
    assert "achieved_fft_flops: 4 GFLOP/s" in text
    assert cpu.fft_compute_rate == pytest.approx(4e9) and cpu.rate_for("fft") == pytest.approx(4e9)


def test_boards_of_one_model_record_the_median_other_rate():
    gpus = [DeviceSpec(name=f"gpu{i}", kind="gpu", model="H100", index=i) for i in range(3)]
    results = {f"gpu{i}": microbench.Measured(40e12, 2e12, other_flops=o) for i, o in enumerate([1e12, 3e12, 2e12])}
    devs = calibrate(one_node(*gpus), measure=_fake(results)).spec.nodes[0].devices
    assert {d.achieved_other_flops for d in devs} == {2e12}


def test_a_cluster_file_written_before_the_other_rate_still_loads(tmp_path):
    p = tmp_path / "old.yaml"
    p.write_text("name: x\nnodes:\n  - name: n\n    devices:\n      - {name: cpu, kind: cpu, "
                 "achieved_flops: 40 GFLOP/s, achieved_bandwidth: 20 GB/s, call_overhead: 1us}\n")
    cpu = load_cluster(p).devices[0]
    assert cpu.achieved_other_flops is None
    assert cpu.other_compute_rate == pytest.approx(OTHER_FLOPS_FRACTION * 40e9)


def test_a_bad_other_rate_names_the_file_line_and_field(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("name: x\nnodes:\n  - name: n\n    devices:\n      - name: cpu\n        kind: cpu\n"
                 "        achieved_other_flops: 0\n")
    with pytest.raises(ClusterError) as err:
        load_cluster(p)
    assert err.value.line == 7 and "achieved_other_flops" in err.value.message


def test_the_cpu_measurement_gives_random_and_transcendental_rates_that_round_trip(
        calibrated_cpu_file, cpu_measurement):
    got = cpu_measurement
    assert got.random_flops > 0 and got.transcendental_flops > 0
    measured = microbench.Measured(50e9, 25e9, 0.2, other_flops=2.5e9, random_flops=0.1e9,
                                   transcendental_flops=0.15e9)
    text, cpu = calibrated_cpu_file(measured)
    assert "achieved_random_flops: 100 MFLOP/s" in text and "achieved_transcendental_flops: 150 MFLOP/s" in text
    assert "random 100 MFLOP/s" in text and "transcendental 150 MFLOP/s" in text
    assert cpu.rate_for("random") == pytest.approx(0.1e9) and cpu.rate_for("transcendental") == pytest.approx(0.15e9)


def test_the_cpu_measurement_gives_an_elementwise_rate_that_round_trips(
        calibrated_cpu_file, cpu_measurement):
    got = cpu_measurement
    assert got.elementwise_flops > 0
    measured = microbench.Measured(50e9, 25e9, 0.2, other_flops=2.5e9, elementwise_flops=6e9)
    text, cpu = calibrated_cpu_file(measured)
    assert "achieved_elementwise_flops: 6 GFLOP/s" in text and "element-wise 6 GFLOP/s" in text
    assert cpu.rate_for("other") == pytest.approx(6e9) and cpu.rate_for("mixed") == pytest.approx(2.5e9)


def test_a_cluster_file_written_before_the_elementwise_rate_prices_other_at_the_mix(tmp_path):
    p = tmp_path / "old.yaml"
    p.write_text("name: x\nnodes:\n  - name: n\n    devices:\n      - {name: cpu, kind: cpu, "
                 "achieved_flops: 40 GFLOP/s, achieved_other_flops: 2 GFLOP/s}\n")
    cpu = load_cluster(p).devices[0]
    assert cpu.achieved_elementwise_flops is None
    assert cpu.rate_for("other") == pytest.approx(2e9)


def test_a_bad_elementwise_rate_names_the_file_line_and_field(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("name: x\nnodes:\n  - name: n\n    devices:\n      - name: cpu\n        kind: cpu\n"
                 "        achieved_elementwise_flops: -3 GFLOP/s\n")
    with pytest.raises(ClusterError) as err:
        load_cluster(p)
    assert err.value.line == 7 and "achieved_elementwise_flops" in err.value.message
