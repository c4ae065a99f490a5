"""The right CuPy for the driver: NVML says which CUDA the driver supports, ``doctor`` names the
extra to install (``gpu-cuda13`` from CUDA 13 on, else ``gpu-cuda12``), accepts an installed CuPy
of either flavour the driver runs, and fails one built for a newer CUDA than the driver's."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from streammap.cluster import doctor


def _nvml(cuda_version=None, fail=False):
    calls = []

    def init():
        if fail:
            raise RuntimeError("NVML Shared Library Not Found")
        calls.append("init")

    m = SimpleNamespace(nvmlInit=init, nvmlShutdown=lambda: calls.append("shutdown"), calls=calls)
    if cuda_version is not None:
        m.nvmlSystemGetCudaDriverVersion = lambda: cuda_version
    return m


def _cupy():
    rt = SimpleNamespace(is_hip=False, getDeviceCount=lambda: 2, runtimeGetVersion=lambda: 12040)
    return SimpleNamespace(__version__="13.6.0", cuda=SimpleNamespace(runtime=rt))


@pytest.mark.parametrize("version,major", [(12040, 12), (12090, 12), (13000, 13), (13010, 13)])
def test_the_drivers_cuda_major_comes_from_nvml(version, major):
    nvml = _nvml(version)
    assert doctor.cuda_driver_major(nvml) == major
    assert nvml.calls == ["init", "shutdown"]


def test_no_driver_means_no_cuda_and_the_cuda12_extra():
    assert doctor.cuda_driver_major(_nvml(fail=True)) is None
    assert doctor.cuda_driver_major(_nvml(None)) is None         # an NVML too old to say
    assert doctor.cupy_extra(nvml=_nvml(fail=True)) == "gpu-cuda12"
    assert doctor.cupy_extra(nvml=_nvml(13000)) == "gpu-cuda13"


def test_without_cupy_the_fix_names_the_extra_for_this_driver():
    assert "streammap[gpu-cuda13]" in doctor.check_gpu_runtime(None, nvml_gpus=2, cuda_major=13).fix
    check = doctor.check_gpu_runtime(None, nvml_gpus=2, cuda_major=12)
    assert check.status == "fail" and "streammap[gpu-cuda12]" in check.fix and "CUDA 12" in check.fix


@pytest.mark.parametrize("wheel,driver", [(("cupy-cuda12x", 12), 12), (("cupy-cuda12x", 12), 13),
                                          (("cupy-cuda13x", 13), 13)])
def test_an_installed_cupy_of_either_flavour_the_driver_runs_is_accepted(wheel, driver):
    assert doctor.check_gpu_runtime(_cupy(), nvml_gpus=2, cuda_major=driver, wheel=wheel).status == "pass"


def test_a_cupy_built_for_a_newer_cuda_than_the_driver_fails_with_the_swap():
    check = doctor.check_gpu_runtime(_cupy(), nvml_gpus=2, cuda_major=12, wheel=("cupy-cuda13x", 13))
    assert check.status == "fail" and "supports CUDA 12 at most" in check.detail
    assert "pip uninstall cupy-cuda13x" in check.fix and "streammap[gpu-cuda12]" in check.fix


def test_doctor_measures_device_speed_unless_told_not_to(tmp_path):
    from streammap.cluster.microbench import Measured
    fake = lambda device, **_: Measured(40e9, 20e9, 0.1)      # noqa: E731
    checks = doctor.run_checks(path=tmp_path, size_mb=1, nvml=_nvml(fail=True), measure=fake)
    speed = checks[-1]
    assert speed.name == "device speed" and speed.status == "pass" and "GEMM 40 GFLOP/s" in speed.detail
    skipped = doctor.run_checks(path=tmp_path, size_mb=1, nvml=_nvml(fail=True), calibrate_devices=False)[-1]
    assert skipped.status == "skip"


def test_a_gpu_that_cannot_be_measured_is_a_warning_with_the_extra_to_install():
    from streammap.cluster.discover import Discovery
    from streammap.cluster.microbench import Measured
    from streammap.cluster.model import ClusterSpec, DeviceSpec, Node
    found = Discovery(spec=ClusterSpec(name="x", nodes=[Node(name="n", link={"bandwidth": 1e10}, devices=[
        DeviceSpec(name="gpu0", kind="gpu", index=0), DeviceSpec(name="cpu", kind="cpu")])]), status="", notes=[])

    def measure(device, **_):
        return Measured(note="CuPy is not installed") if device.kind == "gpu" else Measured(40e9, 20e9, 0.1)

    check = doctor.check_device_speed(found, measure=measure)
    assert check.status == "warn" and "gpu0: not measured (CuPy is not installed)" in check.detail
    assert "gpu0 not measured" in check.fix and "streammap[gpu-cuda" in check.fix
