"""Discovery: the cluster file for the machine StreamMAP runs on.

:func:`discover_local` asks NVML (the ``pynvml`` module of ``nvidia-ml-py``) about NVIDIA GPUs and
the operating system about the CPU, and returns a :class:`~streammap.cluster.model.ClusterSpec` with one
node. :func:`write_cluster` writes it as ``cluster.yaml`` (atomically, with a comment header that
says when and how it was discovered), and :func:`nvml_status` gives the reason in words when no GPU
was found ("no NVIDIA driver (NVML: ...)").

No driver, no ``pynvml``, NVML failing to start, or zero GPUs are normal cases: the result then
lists the CPU only. Each NVML query is tolerated on its own; a query that fails or is not supported
leaves its field empty (``None``) and never stops discovery.

How the numbers are obtained
----------------------------
GPU (one device ``gpu<i>`` per NVML index ``i``; ``index`` is the NVML index, which follows PCI bus
order: a runtime should run CUDA with ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` or match by ``uuid``):

``model``          ``nvmlDeviceGetName``; ``memory``: ``nvmlDeviceGetMemoryInfo().total``;
``uuid``           ``nvmlDeviceGetUUID``; ``driver``: ``nvmlSystemGetDriverVersion``;
``sm_count``       ``nvmlDeviceGetAttributes().multiprocessorCount`` (absent on some boards);
``clock_mhz``      the maximum SM clock, ``nvmlDeviceGetMaxClockInfo(NVML_CLOCK_SM)``;
``mem_bandwidth``  ``2 × max memory clock × bus width / 8`` bytes/s (double data rate:
                   ``nvmlDeviceGetMaxClockInfo(NVML_CLOCK_MEM)`` and
                   ``nvmlDeviceGetMemoryBusWidth``). This reproduces the datasheet peak for HBM
                   and GDDR boards (A100 80GB: 2 × 1593 MHz × 5120 bit / 8 = 2.04 TB/s);
``flops``          FP32 (non-tensor) peak: the datasheet figure of a known model, matched by
                   name (:data:`KNOWN_FP32`); otherwise ``SM count × FP32 lanes per SM × 2 (FMA)
                   × max SM clock``, with 128 lanes per SM, or 64 for compute capability 6.0,
                   7.x and 8.0 (P100, V100, T4, A100) when NVML reports the capability;
``speed``          ``flops / streammap.cluster.model.REFERENCE_FLOPS`` (1 TFLOP/s), three significant
                   digits: the same reference the cluster model uses for a device that gives only
                   a ``speed``, so a reference runtime "on a speed-1.0 device" means 1 TFLOP/s.

The PCI bus id, memory clock, bus width and PCIe link have no field in the cluster format; they
are listed in the file's comment header (``Discovery.notes``).

Node link (the one link the cluster model has between the devices of a node):

* NVLink when every GPU (and there is at least one) has an active NVLink
  (``nvmlDeviceGetNvLinkState`` over ``NVML_NVLINK_MAX_LINKS``): bandwidth = the smallest, over
  GPUs, of *active links × per-link rate of its NVLink version* (:data:`NVLINK_GBPS`: 20 GB/s for
  NVLink 1, 25 GB/s for 2 to 4, 50 GB/s for 5, per direction), latency 3 µs. This is the
  aggregate a GPU has through its links: exact behind an NVSwitch, optimistic for a pair of GPUs
  in a mesh where the links are split between peers.
* Otherwise PCIe: lanes × per-lane rate of the generation (:data:`PCIE_LANE_GBPS`: gen3 0.985,
  gen4 1.969, gen5 3.938 GB/s), the smallest over GPUs, latency 10 µs. The *maximum* link
  generation and width are used (``nvmlDeviceGetMaxPcieLink*``), because an idle GPU trains its
  link down; the current ones are the fallback.
* A CPU-only node has one device and needs no link.

The same link also stands for CPU ↔ GPU copies, which in reality go over PCIe (or NVLink-C2C on
Grace machines): a limitation of the one-link-per-node model.

``Node.topology`` records each GPU pair, ``{"gpu0-gpu1": "NVLINK"}``: ``NVLINK`` when
``nvmlDeviceGetP2PStatus(..., NVML_P2P_CAPS_INDEX_NVLINK)`` says so, else the common PCIe ancestor
from ``nvmlDeviceGetTopologyCommonAncestor`` in ``nvidia-smi topo`` words: ``PIX`` (one PCIe
switch), ``PXB`` (several switches), ``PHB`` (a host bridge), ``NODE`` (one NUMA node), ``SYS``
(across sockets), ``SAME`` (one board).

CPU (device ``cpu``, ``kind: cpu``): ``model`` from ``/proc/cpuinfo`` "model name" (or
``platform.processor()``); ``memory`` the physical memory (``os.sysconf``), lowered to a cgroup
limit when there is one; ``cores`` the logical CPUs this process may use; ``flops`` =
physical cores × nominal GHz × 16, a rough FP64 AVX2 figure (two 4-wide FMA units: 2 × 4 × 2 = 16
FLOP per cycle); nominal GHz from the model name ("@ 2.40GHz"), else the base or maximum
frequency in ``/sys``, else "cpu MHz", else 2.5 GHz; ``mem_bandwidth`` = 20 GB/s per socket
(:data:`CPU_BANDWIDTH_PER_SOCKET`), a deliberately modest default for what a few threads reach.

Calibration (``streammap discover`` without ``--no-calibrate``; :func:`calibrate`): the figures
above are peaks, read or derived; :func:`calibrate` adds what each device *achieved* in two short
micro-benchmarks, ``achieved_flops`` with its ``gemm_curve`` by matrix side, a Cholesky factorisation's
``factor_curve``, the rates of the other compute classes (an FFT's ``fft_curve`` by working set,
``achieved_scan_flops``, ...), ``achieved_bandwidth`` with
its ``bandwidth_curve`` by working-set size, and ``call_overhead`` (:mod:`streammap.cluster.microbench`), which the cost model prefers. :func:`discover` itself never measures (``--cluster local`` at
compile time stays fast and deterministic).
"""

from __future__ import annotations

import datetime as _dt
import math
import os
import platform
import re
import socket
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

from streammap.cluster.microbench import calibrate_spec
from streammap.cluster.model import REFERENCE_FLOPS, ClusterSpec, DeviceSpec, Link, Node
from streammap.cluster.rocm import rocm_devices
from streammap.errors import ClusterError
from streammap.io.files import atomic_write_text
from streammap.io.yamlfile import dump_yaml

#: Datasheet FP32 (non-tensor) peak FLOP/s of known boards, matched in order (first wins) as a
#: case-insensitive regular expression searched in the NVML name. More specific names come first.
KNOWN_FP32: list[tuple[str, float]] = [
    (r"GH200", 67e12),
    (r"H200 NVL", 60e12),
    (r"H200", 67e12),
    (r"H100 NVL", 60e12),
    (r"H100.*PCIe", 51.2e12),
    (r"H100", 67e12),
    (r"H800.*PCIe", 51.2e12),
    (r"H800", 67e12),
    (r"\bH20\b", 44e12),
    (r"A100", 19.5e12),
    (r"A800", 19.5e12),
    (r"\bA30\b", 10.3e12),
    (r"\bA40\b", 37.4e12),
    (r"\bA10G?\b", 31.2e12),
    (r"L40S", 91.6e12),
    (r"\bL40\b", 90.5e12),
    (r"\bL4\b", 30.3e12),
    (r"V100S", 16.4e12),
    (r"V100.*PCIE", 14e12),
    (r"V100", 15.7e12),
    (r"P100", 9.3e12),
    (r"\bT4\b", 8.1e12),
    (r"RTX 6000 Ada", 91.1e12),
    (r"RTX A6000", 38.7e12),
    (r"RTX A5000", 27.8e12),
    (r"RTX A4000", 19.2e12),
    (r"RTX 5090", 104.8e12),
    (r"RTX 4090", 82.6e12),
    (r"RTX 4080", 48.7e12),
    (r"RTX 3090 Ti", 40e12),
    (r"RTX 3090", 35.6e12),
    (r"RTX 3080 Ti", 34.1e12),
    (r"RTX 3080", 29.8e12),
    (r"RTX 2080 Ti", 13.4e12),
    (r"TITAN RTX", 16.3e12),
]

#: Per-link, per-direction NVLink rate in bytes/s by ``nvmlDeviceGetNvLinkVersion`` value
#: (1: NVLink 1.0, 2-3: 2.x, 4-5: 3.x, 6: 4.0, 7: 5.0); unknown versions count 25 GB/s.
NVLINK_GBPS = {1: 20e9, 2: 25e9, 3: 25e9, 4: 25e9, 5: 25e9, 6: 25e9, 7: 50e9}
NVLINK_DEFAULT = 25e9
NVLINK_LATENCY = 3e-6

#: Usable PCIe rate per lane in bytes/s by generation (after line encoding).
PCIE_LANE_GBPS = {1: 0.25e9, 2: 0.5e9, 3: 0.985e9, 4: 1.969e9, 5: 3.938e9, 6: 7.563e9}
PCIE_LATENCY = 10e-6
#: Used when NVML gives no PCIe figure at all: gen3 x16.
PCIE_DEFAULT = 16 * PCIE_LANE_GBPS[3]

CPU_FLOP_PER_CYCLE = 16
CPU_DEFAULT_GHZ = 2.5
CPU_BANDWIDTH_PER_SOCKET = 20e9

_TOPOLOGY_WORDS = {0: "SAME", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
_FP32_LANES_64 = {(6, 0), (7, 0), (7, 2), (7, 5), (8, 0)}


@dataclass
class Discovery:
    """What :func:`discover` found: the spec, a status line and notes for the file header."""

    spec: ClusterSpec
    status: str
    notes: list[str] = field(default_factory=list)
    gpus: int = 0


# -- public API ---------------------------------------------------------------------------------

def discover_local(node_name: str | None = None, cluster_name: str = "local",
                   nvml: ModuleType | Any | None = None) -> ClusterSpec:
    """The cluster spec of this machine: its NVIDIA GPUs (through NVML) and its CPU.

    Parameters
    ----------
    node_name : str, optional
        The node's name; default: the host name with characters outside ``[A-Za-z0-9_.-]``
        replaced by ``-``.
    cluster_name : str
        The cluster's name (default ``"local"``).
    nvml : module, optional
        An object with the ``pynvml`` API (tests pass a fake); default: ``import pynvml``.

    Never raises for a missing driver or library; raises :class:`ClusterError` for an invalid
    explicit ``node_name`` or ``cluster_name``.
    """
    return discover(node_name, cluster_name, nvml).spec


def discover(node_name: str | None = None, cluster_name: str = "local",
             nvml: ModuleType | Any | None = None, rocm: Callable | None = None) -> Discovery:
    """Like :func:`discover_local`, with the NVML status and header notes.

    AMD GPUs and Hygon DCUs come from :func:`streammap.cluster.rocm.rocm_devices` (``rocm``
    replaces it in tests: a callable taking the first free ``gpu<i>`` number).
    """
    node_name = _check_name(node_name, "node") if node_name is not None else default_node_name()
    cluster_name = _check_name(cluster_name, "cluster")
    notes: list[str] = []
    gpus, topology, link, status, gpu_notes = _nvml_gpus(nvml)
    notes += gpu_notes
    if rocm is None:
        rocm = rocm_devices
    amd, amd_notes = rocm(len(gpus))
    gpus, notes = gpus + amd, notes + amd_notes
    cpu, cpu_notes = cpu_device()
    notes += cpu_notes
    devices = gpus + [cpu]
    if link is None and len(devices) > 1:        # cannot happen with GPUs, but stay valid
        link = Link(bandwidth=PCIE_DEFAULT, latency=PCIE_LATENCY)
    node = Node(name=node_name, link=link, devices=devices, topology=topology or None)
    spec = ClusterSpec(name=cluster_name, nodes=[node])
    return Discovery(spec=spec, status=status, notes=notes, gpus=len(gpus))


def calibrate(found: Discovery, *, budget_s: float | None = None, cupy=None, measure=None) -> Discovery:
    """``found`` with every device of every node measured once (``achieved_flops``, ``gemm_curve``, ``factor_curve``,
    ``achieved_bandwidth``, ``bandwidth_curve``, ``call_overhead``).

    The micro-benchmarks of :mod:`streammap.cluster.microbench` (a GEMM and a streaming copy, CuPy
    on GPUs, NumPy on the CPU) run on this machine, so only a discovery of this machine is
    calibrated. Each device's result, or why it was not measured, becomes a header note.
    ``budget_s``, ``cupy`` and ``measure`` go to :func:`~streammap.cluster.microbench.calibrate_spec`.
    """
    nodes, notes = [], list(found.notes)
    kwargs = {"cupy": cupy, "measure": measure}
    if budget_s is not None:
        kwargs["budget_s"] = budget_s
    for node in found.spec.nodes:
        devices, got = calibrate_spec(list(node.devices), **kwargs)
        nodes.append(node.model_copy(update={"devices": devices}))
        notes += got
    spec = found.spec.model_copy(update={"nodes": nodes})
    return Discovery(spec=spec, status=found.status, notes=notes, gpus=found.gpus)


def nvml_status(nvml: ModuleType | Any | None = None) -> str:
    """Why GPUs were or were not found, in words, for the CLI to print.

    ``"NVML: driver 550.54.15, 2 GPUs"``, ``"no NVIDIA driver (NVML: NVML Shared Library Not
    Found)"``, ``"nvidia-ml-py is not installed ..."`` or ``"NVIDIA driver 550.54.15 sees no GPU"``.
    """
    mod, reason = _load_nvml(nvml)
    if mod is None:
        return reason
    try:
        mod.nvmlInit()
    except Exception as exc:               # noqa: BLE001 -- any failure is a reason to report
        return _init_failure(exc)
    try:
        driver = _text(_try(mod.nvmlSystemGetDriverVersion))
        count = _try(mod.nvmlDeviceGetCount)
        return _status_line(driver, count)
    finally:
        _try(mod.nvmlShutdown)


def default_node_name() -> str:
    """The host name, sanitised to ``[A-Za-z0-9_.-]`` (``node0`` if nothing is left)."""
    try:
        host = socket.gethostname()
    except OSError:
        host = ""
    return sanitise_name(host) or "node0"


def sanitise_name(text: str) -> str:
    """``text`` with every character outside ``[A-Za-z0-9_.-]`` replaced by ``-``."""
    return re.sub(r"[^A-Za-z0-9_.\-]", "-", text or "").strip("-")


def format_cluster(spec: ClusterSpec, notes: list[str] | None = None,
                   when: _dt.datetime | None = None) -> str:
    """``cluster.yaml`` text for ``spec``: a comment header, then readable quantities.

    Memory in binary units, rounded down to four significant digits unless short and exact
    (``140.4GiB``); estimated rates with four significant digits (``67 TFLOP/s``,
    ``4.8 TB/s``). :func:`streammap.cluster.model.load_cluster` reads it back.
    """
    when = when or _dt.datetime.now().astimezone()
    host = default_node_name()
    header = [f"cluster.yaml written by `streammap discover` on host {host} "
              f"at {when.isoformat(timespec='seconds')}",
              "GPUs from NVML (nvidia-ml-py), the CPU from the operating system; numbers are "
              "estimates: edit them freely."]
    if notes is None:
        notes = [nvml_status()]
    header += notes
    lines = []
    for h in header:
        for part in str(h).splitlines() or [""]:
            lines.append(("# " + part).rstrip())
    data = _readable(spec)
    body = dump_yaml(data, sort_keys=False, default_flow_style=False, width=120, allow_unicode=True)
    return "\n".join(lines) + "\n" + body


def write_cluster(spec: ClusterSpec, path, notes: list[str] | None = None) -> None:
    """Write ``spec`` to ``path`` atomically (a half-written file never exists).

    ``notes`` are comment lines for the header (``Discovery.notes``); when omitted, the header
    carries :func:`nvml_status`.
    """
    path = Path(path)
    text = format_cluster(spec, notes)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, text, what="cluster file")


# -- NVML ---------------------------------------------------------------------------------------

def _load_nvml(nvml):
    if nvml is not None:
        return nvml, ""
    try:
        import pynvml  # noqa: PLC0415 -- optional at run time, and tests replace it
    except Exception as exc:               # noqa: BLE001
        return None, (f"nvidia-ml-py is not installed ({type(exc).__name__}: {exc}); "
                      "no GPUs discovered (pip install nvidia-ml-py)")
    return pynvml, ""


def _init_failure(exc: Exception) -> str:
    name = type(exc).__name__
    value = getattr(exc, "value", None)
    text = str(exc) or name
    if name.endswith(("LibraryNotFound", "DriverNotLoaded")) or value in (9, 12):
        return f"no NVIDIA driver (NVML: {text})"
    if name.endswith("NoPermission") or value == 4:
        return f"NVML refused access to the GPUs (NVML: {text})"
    return f"NVML failed to start (NVML: {text})"


def _status_line(driver, count) -> str:
    drv = f"driver {driver}" if driver else "driver of unknown version"
    if count is None:
        return f"NVML: {drv}, but the GPU count is unavailable"
    if count == 0:
        return f"NVIDIA {drv} sees no GPU"
    return f"NVML: {drv}, {count} GPU{'s' if count != 1 else ''}"


def _try(fn: Callable | None, *args):
    """``fn(*args)``, or ``None`` when the function is missing or raises anything."""
    if fn is None:
        return None
    try:
        return fn(*args)
    except Exception:                      # noqa: BLE001 -- NotSupported, FunctionNotFound, ...
        return None


def _text(v) -> str | None:
    if v is None:
        return None
    if isinstance(v, bytes):
        v = v.decode("utf-8", "replace")
    return str(v).strip("\x00 ").strip() or None


def _int(v) -> int | None:
    try:
        return int(v) if v is not None else None
    except (TypeError, ValueError):
        return None


def _nvml_gpus(nvml):
    """``(devices, topology, link, status, notes)`` for the GPUs NVML sees."""
    mod, reason = _load_nvml(nvml)
    if mod is None:
        return [], {}, None, reason, [reason]
    try:
        mod.nvmlInit()
    except Exception as exc:               # noqa: BLE001
        status = _init_failure(exc)
        return [], {}, None, status, [status + "; only the CPU is listed"]
    try:
        return _query_gpus(mod)
    finally:
        _try(getattr(mod, "nvmlShutdown", None))


def _query_gpus(mod):
    f = lambda name: getattr(mod, name, None)           # noqa: E731
    const = lambda name, default: getattr(mod, name, default)   # noqa: E731
    driver = _text(_try(f("nvmlSystemGetDriverVersion")))
    count = _int(_try(f("nvmlDeviceGetCount")))
    status = _status_line(driver, count)
    notes = [status]
    if not count:
        notes[0] += "; only the CPU is listed"
        return [], {}, None, status, notes

    clock_sm, clock_mem = const("NVML_CLOCK_SM", 1), const("NVML_CLOCK_MEM", 2)
    gpus: list[DeviceSpec] = []
    handles: list[tuple[str, Any]] = []
    nvlink_bw: list[float] = []          # per GPU: active links x rate (0 when none)
    pcie_bw: list[float] = []
    for i in range(count):
        h = _try(f("nvmlDeviceGetHandleByIndex"), i)
        if h is None:
            notes.append(f"GPU {i}: NVML gives no handle; skipped")
            continue
        name = f"gpu{i}"
        model = _text(_try(f("nvmlDeviceGetName"), h))
        mem = _try(f("nvmlDeviceGetMemoryInfo"), h)
        memory = _int(getattr(mem, "total", None)) or None
        uuid = _text(_try(f("nvmlDeviceGetUUID"), h))
        pci = _try(f("nvmlDeviceGetPciInfo"), h)
        bus_id = _text(getattr(pci, "busId", None)) if pci is not None else None
        attrs = _try(f("nvmlDeviceGetAttributes"), h)
        sm_count = _int(getattr(attrs, "multiprocessorCount", None)) or None
        sm_clock = _int(_try(f("nvmlDeviceGetMaxClockInfo"), h, clock_sm)) or None
        mem_clock = _int(_try(f("nvmlDeviceGetMaxClockInfo"), h, clock_mem)) or None
        bus_width = _int(_try(f("nvmlDeviceGetMemoryBusWidth"), h)) or None
        cc = _try(f("nvmlDeviceGetCudaComputeCapability"), h)

        mem_bandwidth = 2.0 * mem_clock * 1e6 * bus_width / 8 if mem_clock and bus_width else None
        flops, how = gpu_fp32_flops(model, sm_count, sm_clock, cc)
        speed = _sig3(flops / REFERENCE_FLOPS) if flops else 1.0

        links = _nvlinks(mod, h)
        nvlink_bw.append(sum(NVLINK_GBPS.get(v, NVLINK_DEFAULT) if v else NVLINK_DEFAULT for v in links))
        gen = _int(_try(f("nvmlDeviceGetMaxPcieLinkGeneration"), h)) or _int(_try(f("nvmlDeviceGetCurrPcieLinkGeneration"), h))
        width = _int(_try(f("nvmlDeviceGetMaxPcieLinkWidth"), h)) or _int(_try(f("nvmlDeviceGetCurrPcieLinkWidth"), h))
        if gen and width:
            pcie_bw.append(width * PCIE_LANE_GBPS.get(gen, PCIE_LANE_GBPS[5] if gen > 5 else PCIE_LANE_GBPS[1]))

        gpus.append(DeviceSpec(
            name=name, kind="gpu", vendor="nvidia", model=model, memory=memory,
            flops=flops, mem_bandwidth=mem_bandwidth, speed=speed, index=i, uuid=uuid,
            sm_count=sm_count, clock_mhz=sm_clock, driver=driver))
        handles.append((name, h))
        parts = [f"{name}: {model or 'unknown model'}"]
        if bus_id:
            parts.append(f"PCI {bus_id}")
        if mem_clock and bus_width:
            parts.append(f"memory {mem_clock} MHz x {bus_width} bit")
        if gen and width:
            parts.append(f"PCIe gen{gen} x{width}")
        if links:
            parts.append(f"{len(links)} active NVLink{'s' if len(links) != 1 else ''}")
        parts.append(f"FP32 {how}")
        notes.append(", ".join(parts))

    if not gpus:
        return [], {}, None, status, notes

    if all(bw > 0 for bw in nvlink_bw):
        link = Link(bandwidth=min(nvlink_bw), latency=NVLINK_LATENCY)
        notes.append(f"node link: NVLink, {_gb(min(nvlink_bw))} per GPU (active links x per-link rate)")
    else:
        bw = min(pcie_bw) if pcie_bw else PCIE_DEFAULT
        link = Link(bandwidth=bw, latency=PCIE_LATENCY)
        src = "lanes x per-lane rate" if pcie_bw else "NVML gave no PCIe link; gen3 x16 assumed"
        notes.append(f"node link: PCIe, {_gb(bw)} ({src})")

    topology: dict[str, str] = {}
    nvlink_idx = const("NVML_P2P_CAPS_INDEX_NVLINK", 2)
    p2p_ok = const("NVML_P2P_STATUS_OK", 0)
    for a in range(len(handles)):
        for b in range(a + 1, len(handles)):
            (na, ha), (nb, hb) = handles[a], handles[b]
            word = None
            if nvlink_bw[a] > 0 and nvlink_bw[b] > 0:
                st = _try(f("nvmlDeviceGetP2PStatus"), ha, hb, nvlink_idx)
                if st is not None and st == p2p_ok:
                    word = "NVLINK"
            if word is None:
                level = _int(_try(f("nvmlDeviceGetTopologyCommonAncestor"), ha, hb))
                if level is not None:
                    word = _TOPOLOGY_WORDS.get(level, f"LEVEL{level}")
            if word is not None:
                topology[f"{na}-{nb}"] = word
    return gpus, topology, link, status, notes


def _nvlinks(mod, handle) -> list[int]:
    """NVLink versions (0 when unknown) of the device's active links."""
    state = getattr(mod, "nvmlDeviceGetNvLinkState", None)
    if state is None:
        return []
    enabled = getattr(mod, "NVML_FEATURE_ENABLED", 1)
    version = getattr(mod, "nvmlDeviceGetNvLinkVersion", None)
    out = []
    for link in range(int(getattr(mod, "NVML_NVLINK_MAX_LINKS", 18))):
        try:
            on = state(handle, link)
        except Exception:                  # noqa: BLE001 -- NotSupported / InvalidArgument: no such link
            continue
        if on == enabled:
            out.append(_int(_try(version, handle, link)) or 0)
    return out


def gpu_fp32_flops(model: str | None, sm_count: int | None, clock_mhz: int | None,
                   compute_capability=None) -> tuple[float | None, str]:
    """FP32 peak FLOP/s of a GPU and how it was obtained (see the module docstring)."""
    if model:
        for pattern, value in KNOWN_FP32:
            if re.search(pattern, model, re.IGNORECASE):
                return value, f"{value / 1e12:g} TFLOP/s from the datasheet table"
    if sm_count and clock_mhz:
        lanes = 128
        try:
            if compute_capability is not None and tuple(int(x) for x in compute_capability)[:2] in _FP32_LANES_64:
                lanes = 64
        except (TypeError, ValueError):
            pass
        value = sm_count * lanes * 2.0 * clock_mhz * 1e6
        return value, f"{value / 1e12:.3g} TFLOP/s = {sm_count} SMs x {lanes} lanes x 2 x {clock_mhz} MHz"
    return None, "unknown (model not in the table, SM count or clock unavailable)"


# -- CPU ----------------------------------------------------------------------------------------

def cpu_device(cpuinfo: str | None = None) -> tuple[DeviceSpec, list[str]]:
    """The CPU as a device, and a header note saying how it was estimated."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
        except OSError:
            cpuinfo = ""
    model = None
    m = re.search(r"^model name\s*:\s*(.+)$", cpuinfo, re.MULTILINE)
    if m:
        model = re.sub(r"\s+", " ", m.group(1)).strip()
    if not model:
        model = (platform.processor() or platform.machine() or "").strip() or None

    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    logical, pairs, socket_ids = 0, set(), set()
    for block in re.split(r"\n\s*\n", cpuinfo):
        fields = dict((k.strip(), v.strip()) for k, _, v in
                      (ln.partition(":") for ln in block.splitlines() if ":" in ln))
        if "processor" in fields:
            logical += 1
        if "physical id" in fields:
            socket_ids.add(fields["physical id"])
            if "core id" in fields:
                pairs.add((fields["physical id"], fields["core id"]))
    sockets = len(socket_ids) or 1
    threads_per_core = max(1, round(logical / len(pairs))) if logical and pairs else 1
    physical = max(1, cores // threads_per_core)

    ghz, ghz_src = _cpu_ghz(model, cpuinfo)
    flops = physical * ghz * 1e9 * CPU_FLOP_PER_CYCLE
    memory = _physical_memory()
    dev = DeviceSpec(name="cpu", kind="cpu", vendor=_cpu_vendor(cpuinfo, model), model=model,
                     memory=memory, flops=flops, mem_bandwidth=CPU_BANDWIDTH_PER_SOCKET * sockets,
                     speed=_sig3(flops / REFERENCE_FLOPS), cores=cores)
    note = (f"cpu: {model or 'unknown model'}, {cores} usable CPUs ({physical} cores counted for FLOP/s), "
            f"{sockets} socket{'s' if sockets != 1 else ''}; FLOP/s = {physical} x {ghz:.3g} GHz ({ghz_src}) x "
            f"{CPU_FLOP_PER_CYCLE} (rough FP64 AVX2-FMA peak); mem_bandwidth = "
            f"{_gb(CPU_BANDWIDTH_PER_SOCKET)} per socket (default, not measured)")
    return dev, [note]


def _cpu_ghz(model, cpuinfo) -> tuple[float, str]:
    if model:
        m = re.search(r"@\s*([\d.]+)\s*GHz", model, re.IGNORECASE)
        if m:
            try:
                return float(m.group(1)), "model name"
            except ValueError:
                pass
    for fname in ("base_frequency", "cpuinfo_max_freq"):
        try:
            khz = int(Path(f"/sys/devices/system/cpu/cpu0/cpufreq/{fname}").read_text().strip())
            if khz > 0:
                return khz / 1e6, fname
        except (OSError, ValueError):
            pass
    m = re.search(r"^cpu MHz\s*:\s*([\d.]+)", cpuinfo or "", re.MULTILINE)
    if m:
        try:
            mhz = float(m.group(1))
            if mhz > 0:
                return mhz / 1e3, "cpu MHz"
        except ValueError:
            pass
    return CPU_DEFAULT_GHZ, "default"


def _cpu_vendor(cpuinfo, model) -> str | None:
    m = re.search(r"^vendor_id\s*:\s*(\S+)", cpuinfo or "", re.MULTILINE)
    text = (m.group(1) if m else "") + " " + (model or "")
    low = text.lower()
    for key, vendor in (("intel", "intel"), ("amd", "amd"), ("hygon", "hygon"), ("arm", "arm"),
                        ("apple", "apple")):
        if key in low:
            return vendor
    return None


def _physical_memory() -> float | None:
    total = None
    try:
        total = float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):
        total = None
    for limit_file in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(limit_file).read_text().strip()
        except OSError:
            continue
        if text.isdigit():
            limit = float(text)
            if limit > 0 and (total is None or limit < total):
                total = limit
        break
    return total if total and total > 0 else None


# -- helpers ------------------------------------------------------------------------------------

def _check_name(name: str, what: str) -> str:
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.\-]+", name):
        raise ClusterError(f"{what} name {name!r} may only use letters, digits, '_', '.' and '-'",
                           hint=f"for example {sanitise_name(str(name)) or what + '0'!r}")
    return name


def _sig3(x: float) -> float:
    return float(f"{x:.3g}")


def _gb(rate: float) -> str:
    return f"{rate / 1e9:.4g} GB/s"


def _readable_size(n: float):
    """Bytes as a binary-unit string: exact when short (``80GiB``, ``140.5GiB``), else rounded
    *down* to four significant digits (``23.54GiB``), so a capacity is never overstated."""
    if n is None or not math.isfinite(n):
        return n
    for unit, scale in (("TiB", 2.0**40), ("GiB", 2.0**30), ("MiB", 2.0**20), ("KiB", 2.0**10)):
        if n >= scale:
            v = n / scale                      # exact: scaling by a power of two
            text = repr(v)
            if text.endswith(".0"):
                text = text[:-2]
            if "e" not in text and len(text.partition(".")[2]) <= 3:
                return f"{text}{unit}"
            digits = max(0, 3 - int(math.floor(math.log10(v))))
            q = math.floor(v * 10**digits) / 10**digits
            return f"{q:.{digits}f}".rstrip("0").rstrip(".") + unit
    return int(n) if float(n).is_integer() else n


def _sig4(x: float, units) -> str:
    for unit, scale in units:
        if abs(x) >= scale:
            return f"{x / scale:.4g} {unit}"
    return f"{x:.4g} {units[-1][0]}"


_RATE_UNITS = [("TB/s", 1e12), ("GB/s", 1e9), ("MB/s", 1e6), ("B/s", 1.0)]
_FLOP_UNITS = [("PFLOP/s", 1e15), ("TFLOP/s", 1e12), ("GFLOP/s", 1e9), ("MFLOP/s", 1e6), ("FLOP/s", 1.0)]
#: A device's rate fields, written in readable units (the peaks, then what discovery measured).
_RATE_FIELDS = (("flops", _FLOP_UNITS), ("mem_bandwidth", _RATE_UNITS), ("achieved_flops", _FLOP_UNITS),
                ("achieved_other_flops", _FLOP_UNITS), ("achieved_elementwise_flops", _FLOP_UNITS),
                ("achieved_fft_flops", _FLOP_UNITS),
                ("achieved_random_flops", _FLOP_UNITS), ("achieved_transcendental_flops", _FLOP_UNITS),
                ("achieved_scan_flops", _FLOP_UNITS),
                ("achieved_bandwidth", _RATE_UNITS))


def _time_text(t: float):
    if t == 0:
        return 0
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6), ("ns", 1e-9)):
        if t >= scale:
            return f"{t / scale:.4g}{unit}"
    return t


def _readable(spec: ClusterSpec) -> dict:
    data = spec.model_dump(exclude_none=True)
    if data.get("memory_oversubscription") == 1.0:
        del data["memory_oversubscription"]

    def link(d):
        d["bandwidth"] = _sig4(d["bandwidth"], _RATE_UNITS)
        if "latency" in d:
            d["latency"] = _time_text(d["latency"])

    if data.get("network"):
        link(data["network"])
    for node in data["nodes"]:
        if node.get("link"):
            link(node["link"])
        for d in node["devices"]:
            if "memory" in d:
                d["memory"] = _readable_size(d["memory"])
            for key, units in _RATE_FIELDS:
                if key in d:
                    d[key] = _sig4(d[key], units)
            if "bandwidth_curve" in d:
                d["bandwidth_curve"] = [[_readable_size(n), _sig4(r, _RATE_UNITS)] for n, r in d["bandwidth_curve"]]
            for key in ("fft_curve", "rfft_curve"):
                if key in d:
                    d[key] = [[_readable_size(n), _sig4(r, _FLOP_UNITS)] for n, r in d[key]]
            for key in ("gemm_curve", "factor_curve"):
                if key in d:
                    d[key] = [[int(n), _sig4(r, _FLOP_UNITS)] for n, r in d[key]]
            if "call_overhead" in d:
                d["call_overhead"] = _time_text(d["call_overhead"])
            if d.get("speed") == 1.0:
                del d["speed"]
    return data
