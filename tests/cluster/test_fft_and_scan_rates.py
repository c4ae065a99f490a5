"""Discovery measures FFTs by working set, complex and real (``fft_curve``, ``rfft_curve``; one
peak each: a dip between faster points was a disturbed run), and
scans (``achieved_scan_flops``), writes them readably into the cluster file, which validates them,
and a file written before them still loads. It measures the CPU the way a running program's tasks
run: with the C allocator reusing freed result arrays instead of faulting in fresh pages."""

from __future__ import annotations

import platform
import subprocess
import sys
import textwrap

import pytest

from streammap.cluster import microbench
from streammap.cluster.discover import calibrate
from streammap.cluster.model import DeviceSpec, load_cluster
from streammap.errors import ClusterError
from tests.helpers.clusters import one_node

COMPLEX = ((64 << 10, 5e9), (1 << 20, 7e9), (2 << 20, 6e9))
REAL = ((64 << 10, 4e9), (1 << 20, 7e9), (2 << 20, 3e9))


def test_the_cpu_measurement_gives_complex_and_real_fft_curves_and_a_scan_rate(cpu_measurement):
    got = cpu_measurement
    for curve in (got.fft_curve, got.rfft_curve):
        assert [n for n, _ in curve] == list(microbench.FFT_WORKING_SETS["cpu"])
        assert all(r > 0 for _, r in curve)
    assert got.fft_flops > 0 and got.scan_flops > 0
    assert "scan " in got.describe(DeviceSpec(name="cpu", kind="cpu"))


def test_an_fft_point_slower_than_a_point_on_each_side_was_disturbed_and_gets_the_lower_ones_rate():
    # a real pair of 2 MiB ran while another process held the core: 1.8 GFLOP/s between 6.8 and 2.7
    measured = [(16 << 10, 2.3e9), (1 << 20, 6.8e9), (2 << 20, 1.8e9), (4 << 20, 2.7e9)]
    assert microbench.unimodal_curve(measured) == ((16 << 10, 2.3e9), (1 << 20, 6.8e9), (2 << 20, 2.7e9),
                                                   (4 << 20, 2.7e9))
    rising_then_falling = [(16 << 10, 2e9), (64 << 10, 5e9), (1 << 20, 7e9), (4 << 20, 3e9)]
    assert microbench.unimodal_curve(rising_then_falling) == tuple(rising_then_falling)    # the shape stays


def test_the_cpu_measurement_gives_fft_curves_with_one_peak(cpu_measurement):
    for curve in (cpu_measurement.fft_curve, cpu_measurement.rfft_curve):
        rates = [r for _, r in curve]
        peak = rates.index(max(rates))
        assert rates[: peak + 1] == sorted(rates[: peak + 1]) and rates[peak:] == sorted(rates[peak:], reverse=True)


def test_the_fft_curves_and_the_scan_rate_round_trip_through_the_cluster_file_readably(calibrated_cpu_file):
    measured = microbench.Measured(50e9, 25e9, 0.2, fft_flops=5e9, fft_curve=COMPLEX, rfft_curve=REAL,
                                   scan_flops=0.5e9)
    text, cpu = calibrated_cpu_file(measured)
    assert "fft_curve:\n    - - 64KiB\n      - 5 GFLOP/s\n    - - 1MiB\n      - 7 GFLOP/s\n" in text
    assert "rfft_curve:\n    - - 64KiB\n      - 4 GFLOP/s\n" in text
    assert "achieved_scan_flops: 500 MFLOP/s" in text and "scan 500 MFLOP/s" in text
    assert cpu.fft_curve == COMPLEX and cpu.rfft_curve == REAL
    assert cpu.rate_for("scan") == pytest.approx(0.5e9) and cpu.rate_for("rfft") == pytest.approx(5e9)


def test_an_fft_rate_is_read_at_the_working_set_linear_in_its_logarithm_and_flat_beyond_the_curve(
        calibrated_cpu_file):
    _, cpu = calibrated_cpu_file(microbench.Measured(50e9, 25e9, 0.2, fft_flops=5e9, fft_curve=COMPLEX,
                                                     rfft_curve=REAL))
    assert cpu.fft_rate_at([1 << 10, 256 << 10, 1 << 20, 64 << 20]).tolist() == pytest.approx([5e9, 6e9, 7e9, 6e9])
    assert cpu.rfft_rate_at([1 << 20, 64 << 20]).tolist() == pytest.approx([7e9, 3e9])


def test_boards_of_one_model_record_the_median_fft_curves():
    gpus = [DeviceSpec(name=f"gpu{i}", kind="gpu", model="H100", index=i) for i in range(3)]
    results = {f"gpu{i}": microbench.Measured(40e12, 2e12, fft_curve=((1 << 25, r), (1 << 29, r / 2)),
                                              rfft_curve=((1 << 25, r / 4), (1 << 29, r / 8)))
               for i, r in enumerate([1e12, 3e12, 2e12])}
    devs = calibrate(one_node(*gpus), measure=lambda d, **_: results[d.name]).spec.nodes[0].devices
    assert {(tuple(map(tuple, d.fft_curve)), tuple(map(tuple, d.rfft_curve))) for d in devs} == \
        {(((1 << 25, 2e12), (1 << 29, 1e12)), ((1 << 25, 0.5e12), (1 << 29, 0.25e12)))}


@pytest.mark.parametrize("field", ["fft_curve", "rfft_curve"])
@pytest.mark.parametrize("curve", ["[[2MiB, 6 GFLOP/s], [64KiB, 5 GFLOP/s]]", "[[64KiB, 0]]", "[[0, 5 GFLOP/s]]"])
def test_a_bad_fft_curve_names_the_file_line_and_field(tmp_path, field, curve):
    p = tmp_path / "c.yaml"
    p.write_text(f"name: x\nnodes:\n  - name: n\n    devices:\n      - name: cpu\n        kind: cpu\n"
                 f"        {field}: {curve}\n")
    with pytest.raises(ClusterError) as err:
        load_cluster(p)
    assert err.value.line == 5 and field in err.value.message and "increasing" in err.value.message   # the device's line


def test_a_cluster_file_written_before_the_fft_curves_and_scan_rate_still_loads(tmp_path):
    """Every FFT at the file's one FFT rate whatever its size, scans at the element-wise rate."""
    p = tmp_path / "old.yaml"
    p.write_text("name: x\nnodes:\n  - name: n\n    devices:\n      - {name: cpu, kind: cpu, achieved_flops: "
                 "40 GFLOP/s, achieved_fft_flops: 3 GFLOP/s, achieved_elementwise_flops: 2 GFLOP/s}\n")
    cpu = load_cluster(p).devices[0]
    assert cpu.fft_curve == () and cpu.rfft_curve == () and cpu.achieved_scan_flops is None
    assert cpu.fft_rate_at([1e4, 1e8]).tolist() == [3e9, 3e9] == cpu.rfft_rate_at([1e4, 1e8]).tolist()
    assert cpu.rate_for("scan") == pytest.approx(2e9)


def test_a_file_with_a_complex_curve_alone_prices_real_transforms_on_it(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("name: x\nnodes:\n  - name: n\n    devices:\n      - {name: cpu, kind: cpu, "
                 "fft_curve: [[64KiB, 5 GFLOP/s], [1MiB, 7 GFLOP/s]]}\n")
    cpu = load_cluster(p).devices[0]
    assert cpu.rfft_rate_at([64 << 10, 1 << 20]).tolist() == pytest.approx([5e9, 7e9])


#: A fresh process that runs 20 complex FFTs of 2^16 points (1 MiB results) and prints the page
#: faults of the last ten, after ``settle_allocator`` when its argument says so.
_FAULTS = textwrap.dedent("""\
    import resource, sys
    import numpy as np
    from streammap.cluster.microbench import settle_allocator
    if sys.argv[1] == "settled":
        settle_allocator()
    z = np.ones(1 << 16, dtype=complex)
    for k in range(20):
        if k == 10:
            before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        np.fft.fft(z)
    print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    """)


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
                    reason="the allocator rule is glibc's")
def test_discovery_measures_with_result_arrays_reused_as_in_a_running_program():
    """In a fresh process glibc hands each 1 MiB result fresh pages from the kernel (a fault per 4
    KiB page: ~2.5 us each, half an FFT's time); after ``settle_allocator`` it reuses freed ones."""
    def faults(state):
        out = subprocess.run([sys.executable, "-c", _FAULTS, state], capture_output=True, text=True, check=True)
        return int(out.stdout)
    pages_per_result = (1 << 20) // 4096
    assert faults("fresh") >= 10 * pages_per_result
    assert faults("settled") < pages_per_result
