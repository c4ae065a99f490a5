"""AMD GPUs and Hygon DCUs: discovered through ROCm, executed through CuPy's ROCm build by the same
runtime; Cambricon MLUs are mapped and exported but refused at run time with what to do instead."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from streammap.cluster.discover import discover, write_cluster
from streammap.cluster.model import load_cluster
from streammap.cluster.rocm import rocm_devices
from streammap.errors import StreamMapError
from streammap.runtime import run_plan
from tests.helpers.plans import FAN, make_plan, ref, task
from tests.helpers.telemetry import NVMLError, fake_nvml


def fake_amdsmi(boards):
    calls = []
    return SimpleNamespace(
        calls=calls,
        amdsmi_init=lambda: calls.append("init"),
        amdsmi_shut_down=lambda: calls.append("shutdown"),
        amdsmi_get_processor_handles=lambda: list(range(len(boards))),
        amdsmi_get_gpu_asic_info=lambda h: {"market_name": boards[h][0], "vendor_name": boards[h][1],
                                            "num_compute_units": 220},
        amdsmi_get_gpu_vram_info=lambda h: {"vram_size": 131072},
        amdsmi_get_gpu_device_uuid=lambda h: f"uuid-{h}",
    )


def no_amdsmi():
    def fail():
        raise RuntimeError("no amdgpu driver")
    return SimpleNamespace(amdsmi_init=fail)


def test_amd_gpus_from_amdsmi():
    devs, notes = rocm_devices(amdsmi=fake_amdsmi([("AMD Instinct MI250X", "Advanced Micro Devices Inc.")] * 2),
                               run=lambda *a, **k: None)
    assert [(d.name, d.kind, d.vendor, d.index, d.uuid) for d in devs] == [
        ("gpu0", "gpu", "amd", 0, "uuid-0"), ("gpu1", "gpu", "amd", 1, "uuid-1")]
    assert devs[0].memory == 128 * 2**30 and devs[0].sm_count == 220
    assert notes == ["ROCm: 2 device(s) from amdsmi"]


def test_hygon_dcus_from_rocm_smi():
    out = {"card0": {"Card series": "Z100", "Card vendor": "Chengdu Haiguang IC Design Co., Ltd.",
                     "VRAM Total Memory (B)": str(32 * 2**30), "Unique ID": "0x1234"},
           "card1": {"Card series": "Z100", "Card vendor": "Chengdu Haiguang IC Design Co., Ltd.",
                     "VRAM Total Memory (B)": str(32 * 2**30), "Unique ID": "N/A"}}

    def run(cmd, **kw):
        assert cmd[0] == "rocm-smi" and "--json" in cmd
        return SimpleNamespace(stdout=json.dumps(out), returncode=0)
    devs, _ = rocm_devices(amdsmi=no_amdsmi(), run=run)
    assert [(d.name, d.kind, d.vendor, d.model, d.uuid) for d in devs] == [
        ("dcu0", "dcu", "hygon", "Z100", "0x1234"), ("dcu1", "dcu", "hygon", "Z100", None)]


def test_hip_devices_from_cupy_when_nothing_else_answers():
    props = {"name": b"AMD Radeon PRO W7900", "totalGlobalMem": 48 * 2**30, "multiProcessorCount": 96,
             "clockRate": 2_495_000}
    cupy = SimpleNamespace(cuda=SimpleNamespace(runtime=SimpleNamespace(
        is_hip=True, getDeviceCount=lambda: 1, getDeviceProperties=lambda i: props)))
    devs, notes = rocm_devices(3, amdsmi=no_amdsmi(), run=lambda *a, **k: SimpleNamespace(stdout="oops"), cupy=cupy)
    assert [(d.name, d.model, d.clock_mhz) for d in devs] == [("gpu3", "AMD Radeon PRO W7900", 2495)]
    assert notes == ["ROCm: 1 device(s) from CuPy (HIP)"]
    cuda = SimpleNamespace(cuda=SimpleNamespace(runtime=SimpleNamespace(is_hip=False)))
    assert rocm_devices(amdsmi=no_amdsmi(), run=lambda *a, **k: SimpleNamespace(stdout="{}"), cupy=cuda) == ([], [])


def test_a_rocm_machine_becomes_a_cluster_file(tmp_path):
    m = fake_nvml([])

    def no_driver():
        raise NVMLError(9, "Driver Not Loaded")
    m.nvmlInit = no_driver
    found = discover("box", nvml=m, rocm=lambda first: rocm_devices(
        first, amdsmi=fake_amdsmi([("AMD Instinct MI300X", "AMD"), ("Hygon DCU K100", "Hygon")])))
    write_cluster(found.spec, tmp_path / "c.yaml", found.notes)
    cluster = load_cluster(tmp_path / "c.yaml")
    assert [(d.id, d.kind, d.vendor) for d in cluster.devices] == [
        ("box/gpu0", "gpu", "amd"), ("box/dcu0", "dcu", "hygon"), ("box/cpu", "cpu", cluster.devices[2].vendor)]
    assert "ROCm: 2 device(s) from amdsmi" in (tmp_path / "c.yaml").read_text()


# -- execution --------------------------------------------------------------------------------------

def _plan(tmp_path, devices):
    ids = [d["id"] for d in devices]
    tasks = [task("src", "source", ids[0])]
    tasks += [task(f"scale{k}", "scale", ids[k % len(ids)], ref("src"), k) for k in range(6)]
    tasks.append(task("sum", "total", ids[-1], *[ref(f"scale{k}") for k in range(6)]))
    return make_plan(tmp_path, FAN, tasks, devices=devices, outputs=ref("sum"))


ROCM_DEVICES = [{"id": "node0/gpu0", "kind": "gpu", "vendor": "amd", "index": 0},
                {"id": "node0/dcu0", "kind": "dcu", "vendor": "hygon", "index": 1},
                {"id": "node0/cpu", "kind": "cpu"}]


def test_amd_and_hygon_devices_run_through_cupys_rocm_build(tmp_path, fake_cupy):
    fake_cupy(2, hip=True)
    plan = _plan(tmp_path, ROCM_DEVICES)
    out = run_plan(plan, progress=False, telemetry=False, record_path=tmp_path / "r.json")
    x = np.arange(64, dtype=np.float64)
    np.testing.assert_allclose(out["result"], sum(x * (k + 1) for k in range(6)))
    record = json.loads((tmp_path / "r.json").read_text())
    executors = {d["id"]: d["executor"] for d in record["devices"]}
    assert executors["node0/gpu0"] == "cupy:0" and executors["node0/dcu0"] == "cupy:1"


def test_the_other_cupy_build_is_refused_with_the_one_to_install(tmp_path, fake_cupy):
    fake_cupy(2)                                                        # the CUDA build
    with pytest.raises(StreamMapError, match="ROCm") as info:
        run_plan(_plan(tmp_path, ROCM_DEVICES), progress=False, telemetry=False)
    assert "cupy-rocm" in info.value.hint
    fake_cupy(2, hip=True)
    nvidia = [{"id": "node0/gpu0", "kind": "gpu", "vendor": "nvidia", "index": 0}]
    with pytest.raises(StreamMapError, match="needs CuPy's CUDA build") as info:
        run_plan(_plan(tmp_path, nvidia), progress=False, telemetry=False)
    assert "cupy-cuda12x" in info.value.hint


def test_mlu_tasks_are_refused_naming_the_task_and_device_and_run_emulated(tmp_path):
    devices = [{"id": "node0/cpu", "kind": "cpu"},
               {"id": "node0/mlu0", "kind": "mlu", "vendor": "cambricon", "model": "MLU370-X8"}]
    plan = _plan(tmp_path, devices)
    with pytest.raises(StreamMapError) as info:
        run_plan(plan, progress=False, telemetry=False)
    text = info.value.format()
    assert "task scale1 is placed on node0/mlu0 (Cambricon MLU, MLU370-X8)" in text
    assert "--emulate" in text
    out = run_plan(plan, emulate=True, progress=False, telemetry=False)
    x = np.arange(64, dtype=np.float64)
    np.testing.assert_allclose(out["result"], sum(x * (k + 1) for k in range(6)))
