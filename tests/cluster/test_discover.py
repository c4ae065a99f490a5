"""Discovery with a fake NVML (2 GPUs on NVLink, 2 on PCIe, failing queries) and without a driver."""

from __future__ import annotations

import sys
import types
from types import SimpleNamespace

import pytest

from streammap.cluster import discover as disc
from streammap.cluster.model import ClusterSpec, load_cluster
from streammap.errors import ClusterError


class NVMLError(Exception):
    def __init__(self, value, text):
        super().__init__(text)
        self.value = value


class NVMLError_LibraryNotFound(NVMLError):
    def __init__(self):
        super().__init__(12, "NVML Shared Library Not Found")


class NVMLError_NotSupported(NVMLError):
    def __init__(self):
        super().__init__(3, "Not Supported")


def not_supported(*_):
    raise NVMLError_NotSupported()


GPU_H100 = dict(name="NVIDIA H100 80GB HBM3", total=85899345920, uuid="GPU-aaaa", bus="00000000:18:00.0",
                sms=132, sm_clock=1980, mem_clock=2619, bus_width=5120, cc=(9, 0),
                nvlinks=18, nvlink_version=6, pcie=(5, 16))


def fake_nvml(gpus, *, init_error=None, p2p_nvlink=True, topology_level=50, driver=b"550.54.15",
              missing=()):
    """A module object with the parts of the pynvml API that discovery uses."""
    m = types.ModuleType("pynvml")
    m.NVMLError = NVMLError
    m.NVML_CLOCK_SM, m.NVML_CLOCK_MEM = 1, 2
    m.NVML_FEATURE_ENABLED, m.NVML_FEATURE_DISABLED = 1, 0
    m.NVML_NVLINK_MAX_LINKS = 18
    m.NVML_P2P_CAPS_INDEX_NVLINK, m.NVML_P2P_STATUS_OK = 2, 0
    m.calls = []

    def init():
        m.calls.append("init")
        if init_error is not None:
            raise init_error

    m.nvmlInit = init
    m.nvmlShutdown = lambda: m.calls.append("shutdown")
    m.nvmlSystemGetDriverVersion = lambda: driver
    m.nvmlDeviceGetCount = lambda: len(gpus)
    m.nvmlDeviceGetHandleByIndex = lambda i: ("handle", i)
    g = lambda h: gpus[h[1]]                                  # noqa: E731
    m.nvmlDeviceGetName = lambda h: g(h)["name"].encode()     # old pynvml returns bytes
    m.nvmlDeviceGetMemoryInfo = lambda h: SimpleNamespace(total=g(h)["total"], free=0, used=0)
    m.nvmlDeviceGetUUID = lambda h: g(h)["uuid"]
    m.nvmlDeviceGetPciInfo = lambda h: SimpleNamespace(busId=g(h)["bus"].encode())

    def attributes(h):
        if g(h)["sms"] is None:
            raise NVMLError_NotSupported()
        return SimpleNamespace(multiprocessorCount=g(h)["sms"])

    m.nvmlDeviceGetAttributes = attributes
    m.nvmlDeviceGetMaxClockInfo = lambda h, kind: g(h)["sm_clock"] if kind == 1 else g(h)["mem_clock"]
    m.nvmlDeviceGetMemoryBusWidth = lambda h: g(h)["bus_width"]
    m.nvmlDeviceGetCudaComputeCapability = lambda h: g(h)["cc"]

    def nvlink_state(h, link):
        n = g(h)["nvlinks"]
        if n is None:
            raise NVMLError_NotSupported()
        return 1 if link < n else 0

    m.nvmlDeviceGetNvLinkState = nvlink_state
    m.nvmlDeviceGetNvLinkVersion = lambda h, link: g(h)["nvlink_version"]
    m.nvmlDeviceGetMaxPcieLinkGeneration = lambda h: g(h)["pcie"][0]
    m.nvmlDeviceGetMaxPcieLinkWidth = lambda h: g(h)["pcie"][1]
    m.nvmlDeviceGetCurrPcieLinkGeneration = lambda h: 1          # idle link: must not be used
    m.nvmlDeviceGetCurrPcieLinkWidth = lambda h: 1
    m.nvmlDeviceGetP2PStatus = lambda a, b, idx: 0 if p2p_nvlink else 1
    m.nvmlDeviceGetTopologyCommonAncestor = lambda a, b: topology_level
    for name in missing:
        setattr(m, name, not_supported)
    return m


def gpu(**kw):
    d = dict(GPU_H100)
    d.update(kw)
    return d


def check_round_trip(spec: ClusterSpec, tmp_path, notes=None):
    path = tmp_path / "cluster.yaml"
    disc.write_cluster(spec, path, notes=notes)
    text = path.read_text()
    assert text.startswith("# cluster.yaml written by `streammap discover`")
    assert not list(tmp_path.glob(".cluster.yaml.tmp*"))     # atomic write leaves no temp file
    cluster = load_cluster(path)
    again = cluster.spec
    assert again.name == spec.name
    assert [n.name for n in again.nodes] == [n.name for n in spec.nodes]
    for a, b in zip(again.nodes[0].devices, spec.nodes[0].devices):
        assert a.name == b.name and a.kind == b.kind and a.model == b.model and a.index == b.index
        for f in ("memory", "flops", "mem_bandwidth"):
            x, y = getattr(a, f), getattr(b, f)
            assert (x is None) == (y is None)
            if x is not None:
                assert x == pytest.approx(y, rel=1e-3)
                if f == "memory":
                    assert x <= y                     # a capacity is never overstated
    assert again.nodes[0].topology == spec.nodes[0].topology
    return cluster, text


def test_two_gpus_nvlink(tmp_path):
    nv = fake_nvml([gpu(), gpu(uuid="GPU-bbbb", bus="00000000:2A:00.0")])
    d = disc.discover(node_name="box1", nvml=nv)
    spec = ClusterSpec.model_validate(d.spec.model_dump())       # validates
    node = spec.nodes[0]
    assert node.name == "box1" and spec.name == "local"
    assert [x.name for x in node.devices] == ["gpu0", "gpu1", "cpu"]
    g0 = node.devices[0]
    assert (g0.kind, g0.vendor, g0.model, g0.index, g0.uuid) == ("gpu", "nvidia", "NVIDIA H100 80GB HBM3", 0, "GPU-aaaa")
    assert g0.memory == 85899345920 and g0.sm_count == 132 and g0.clock_mhz == 1980
    assert g0.driver == "550.54.15"
    assert g0.flops == 67e12 and g0.speed == 67.0                # datasheet table
    assert g0.mem_bandwidth == pytest.approx(2 * 2619e6 * 5120 / 8)   # 3.35 TB/s
    assert node.devices[1].index == 1
    assert node.link.bandwidth == pytest.approx(18 * 25e9) and node.link.latency == disc.NVLINK_LATENCY
    assert node.topology == {"gpu0-gpu1": "NVLINK"}
    assert d.gpus == 2 and d.status == "NVML: driver 550.54.15, 2 GPUs"
    assert any("PCI 00000000:18:00.0" in n and "18 active NVLinks" in n for n in d.notes)
    assert nv.calls[-1] == "shutdown"
    cluster, text = check_round_trip(d.spec, tmp_path, d.notes)
    assert "# gpu0: NVIDIA H100 80GB HBM3, PCI 00000000:18:00.0" in text
    assert "450 GB/s" in text and "67 TFLOP/s" in text and "80GiB" in text
    assert [x.id for x in cluster.devices] == ["box1/gpu0", "box1/gpu1", "box1/cpu"]
    assert cluster.devices[0].matches("H100") and cluster.devices[2].matches("cpu")


def test_two_gpus_pcie_and_fallback_flops(tmp_path):
    # An unknown board without NVLink: FLOP/s from SMs x 128 x 2 x clock, link from PCIe gen4 x16.
    nv = fake_nvml([gpu(name="NVIDIA Future GPU", nvlinks=0, pcie=(4, 16), sms=100, sm_clock=2000),
                    gpu(name="NVIDIA Future GPU", nvlinks=None, pcie=(4, 8), sms=100, sm_clock=2000)],
                   p2p_nvlink=False, topology_level=30)
    d = disc.discover(node_name="pc", nvml=nv)
    node = d.spec.nodes[0]
    g0 = node.devices[0]
    assert g0.flops == pytest.approx(100 * 128 * 2 * 2000e6)
    assert g0.speed == pytest.approx(51.2)
    assert node.link.bandwidth == pytest.approx(8 * 1.969e9)     # the narrower link, max gen (not idle gen1)
    assert node.link.latency == disc.PCIE_LATENCY
    assert node.topology == {"gpu0-gpu1": "PHB"}
    assert any("PCIe gen4 x16" in n and "SMs x 128 lanes" in n for n in d.notes)
    check_round_trip(d.spec, tmp_path, d.notes)


def test_pcie_when_only_some_gpus_have_nvlink():
    nv = fake_nvml([gpu(pcie=(3, 16)), gpu(nvlinks=0, pcie=(3, 16))], p2p_nvlink=False, topology_level=10)
    node = disc.discover_local("n", nvml=nv).nodes[0]
    assert node.link.bandwidth == pytest.approx(16 * 0.985e9)
    assert node.topology == {"gpu0-gpu1": "PIX"}


def test_failing_optional_queries_leave_fields_empty(tmp_path):
    missing = ("nvmlDeviceGetAttributes", "nvmlDeviceGetMemoryBusWidth", "nvmlDeviceGetUUID",
               "nvmlDeviceGetPciInfo", "nvmlDeviceGetNvLinkState", "nvmlDeviceGetMaxPcieLinkGeneration",
               "nvmlDeviceGetCurrPcieLinkGeneration", "nvmlDeviceGetTopologyCommonAncestor",
               "nvmlSystemGetDriverVersion", "nvmlDeviceGetCudaComputeCapability")
    nv = fake_nvml([gpu(name="Mystery"), gpu(name="Mystery")], missing=missing)
    d = disc.discover(node_name="n", nvml=nv)
    g0 = d.spec.nodes[0].devices[0]
    assert g0.model == "Mystery" and g0.memory == 85899345920
    assert g0.sm_count is None and g0.uuid is None and g0.driver is None
    assert g0.mem_bandwidth is None and g0.flops is None and g0.speed == 1.0
    assert d.spec.nodes[0].link.bandwidth == disc.PCIE_DEFAULT
    assert d.spec.nodes[0].topology is None
    check_round_trip(d.spec, tmp_path, d.notes)


def test_a_gpu_without_handle_is_skipped():
    nv = fake_nvml([gpu(), gpu()])
    nv.nvmlDeviceGetHandleByIndex = lambda i: ("handle", i) if i == 1 else not_supported()
    d = disc.discover(node_name="n", nvml=nv)
    assert [x.name for x in d.spec.nodes[0].devices] == ["gpu1", "cpu"]
    assert d.spec.nodes[0].devices[0].index == 1
    assert any("GPU 0: NVML gives no handle" in n for n in d.notes)


def test_no_driver_gives_cpu_only(tmp_path, monkeypatch):
    nv = fake_nvml([], init_error=NVMLError_LibraryNotFound())
    monkeypatch.setitem(sys.modules, "pynvml", nv)             # the default import path
    spec = disc.discover_local()
    node = spec.nodes[0]
    assert [x.name for x in node.devices] == ["cpu"] and node.link is None
    cpu = node.devices[0]
    assert cpu.kind == "cpu" and cpu.cores >= 1 and cpu.flops > 0 and cpu.memory > 0
    assert cpu.mem_bandwidth > 0 and cpu.speed > 0
    assert node.name == disc.default_node_name()
    status = disc.nvml_status()
    assert status == "no NVIDIA driver (NVML: NVML Shared Library Not Found)"
    cluster, text = check_round_trip(spec, tmp_path)          # header carries nvml_status()
    assert "# no NVIDIA driver (NVML: NVML Shared Library Not Found)" in text
    assert len(cluster.devices) == 1


def test_real_pynvml_without_driver_does_not_raise():
    spec = disc.discover_local("here")
    assert spec.nodes[0].devices[-1].name == "cpu"
    assert isinstance(disc.nvml_status(), str)


def test_no_pynvml_installed(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)           # makes `import pynvml` fail
    d = disc.discover(node_name="n")
    assert [x.name for x in d.spec.nodes[0].devices] == ["cpu"]
    assert "nvidia-ml-py is not installed" in d.status
    assert "nvidia-ml-py is not installed" in disc.nvml_status()


def test_zero_gpus():
    nv = fake_nvml([])
    d = disc.discover(node_name="n", nvml=nv)
    assert [x.name for x in d.spec.nodes[0].devices] == ["cpu"]
    assert d.status == "NVIDIA driver 550.54.15 sees no GPU"
    assert disc.nvml_status(nv) == d.status


def test_names():
    assert disc.sanitise_name("my host.example:01") == "my-host.example-01"
    assert disc.default_node_name()
    with pytest.raises(ClusterError, match="node name"):
        disc.discover_local("bad name", nvml=fake_nvml([]))


def test_flops_table_order():
    f = lambda name: disc.gpu_fp32_flops(name, None, None)[0]     # noqa: E731
    assert f("NVIDIA A100-SXM4-80GB") == 19.5e12
    assert f("NVIDIA A10") == 31.2e12 and f("NVIDIA A10G") == 31.2e12
    assert f("NVIDIA H100 PCIe") == 51.2e12 and f("NVIDIA H200") == 67e12
    assert f("NVIDIA L4") == 30.3e12 and f("NVIDIA L40S") == 91.6e12 and f("NVIDIA L40") == 90.5e12
    assert f("Tesla T4") == 8.1e12 and f("Tesla V100-PCIE-16GB") == 14e12
    assert f("NVIDIA GeForce RTX 4090") == 82.6e12
    assert f("Unknown") is None
    # V100 has 64 FP32 lanes per SM
    assert disc.gpu_fp32_flops("x", 80, 1530, (7, 0))[0] == pytest.approx(80 * 64 * 2 * 1530e6)


def test_cpu_device_from_cpuinfo():
    info = "\n\n".join(
        f"processor\t: {p}\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7763 64-Core Processor @ 2.45GHz\n"
        f"physical id\t: {p // 4}\ncore id\t\t: {(p % 4) // 2}\ncpu MHz\t\t: 1500.0"
        for p in range(8))
    dev, notes = disc.cpu_device(info)
    assert dev.model == "AMD EPYC 7763 64-Core Processor @ 2.45GHz" and dev.vendor == "amd"
    assert dev.mem_bandwidth == 2 * disc.CPU_BANDWIDTH_PER_SOCKET        # two sockets
    # 2 threads per core: usable CPUs / 2 physical cores x 2.45 GHz x 16
    assert dev.flops == pytest.approx(max(1, dev.cores // 2) * 2.45e9 * 16)
    assert "model name" in notes[0]
