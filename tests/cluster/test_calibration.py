"""Calibrated first estimates: discovery measures each device once (a GEMM and a streaming copy)
and records what it achieved beside the peaks; the cluster file validates the new fields, and
a failed measurement leaves the peaks in place."""

from __future__ import annotations

import pytest

from streammap.cli import main
from streammap.cluster import microbench
from streammap.cluster.discover import Discovery, calibrate, discover, write_cluster
from streammap.cluster.model import ClusterSpec, DeviceSpec, Node, load_cluster
from streammap.errors import ClusterError


def _fake(results):
    """A ``measure`` that answers from ``results[device name]`` (a Measured) instead of running."""
    def measure(device, **_):
        return results[device.name]
    return measure


def _node(*devices):
    return Discovery(spec=ClusterSpec(name="x", nodes=[Node(name="n", link={"bandwidth": 1e10},
                                                            devices=list(devices))]),
                     status="test", notes=[])


def test_the_cpu_is_measured_with_numpy_and_gets_positive_rates():
    got = microbench.measure_device(DeviceSpec(name="cpu", kind="cpu"), budget_s=0.05)
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
    found = calibrate(_node(*gpus, cpu), measure=_fake(results))
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
