"""The cluster model: nodes, their devices, and the links between them.

A cluster is read from ``cluster.yaml`` (see ``design.md``) and validated with pydantic; every
error names the file, the line and the field. Quantities are numbers in base units (bytes,
bytes/s, FLOP/s, seconds) or readable strings (``80GiB``, ``25 GB/s``, ``19.5 TFLOP/s``, ``10us``).

Later stages never look at the YAML: they use :class:`Cluster` and its flat list of
:class:`Device` records, whose ``id`` is ``node/device`` as plans write it.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Optional

import numpy as np
import pydantic
import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from streammap.errors import ClusterError, shown
from streammap.io.yamlfile import load_yaml, validation_error
from streammap.units import MAX_QUANTITY, parse_flops, parse_rate, parse_size, parse_time


def _unit(parser):
    def convert(v):
        try:
            return parser(v)
        except (ValueError, OverflowError, TypeError) as exc:   # OverflowError: a 400-digit number
            raise ValueError(str(exc) or f"cannot read {shown(v)}") from None
    return BeforeValidator(convert)


Size = Annotated[float, _unit(parse_size)]
Rate = Annotated[float, _unit(parse_rate)]
Flops = Annotated[float, _unit(parse_flops)]
Time = Annotated[float, _unit(parse_time)]
#: A plain number of a cluster file (a matrix side, a factor): finite and at most MAX_QUANTITY.
Number = Annotated[float, Field(allow_inf_nan=False, le=MAX_QUANTITY)]

#: Compute and memory rates assumed for a device whose file gives none, scaled by its ``speed``.
REFERENCE_FLOPS = 1e12
REFERENCE_MEM_BANDWIDTH = 100e9
#: The rate of work that is not a matrix product, as a fraction of the matrix product's, for a device
#: whose file does not record ``achieved_other_flops`` (peak-only files, files calibrated before the
#: field existed). Measured: 2-5% on a 2-core EPYC VM (an FFT, ``sin`` and random numbers against a
#: float64 GEMM of side 256); 1/20 is the optimistic end of that range.
OTHER_FLOPS_FRACTION = 0.05
#: ``compute_class`` values whose ``flops`` run at the "other" rate (see :meth:`Device.rate_for`).
OTHER_CLASS = "other"
FFT_CLASS = "fft"
RFFT_CLASS = "rfft"
BLAS_CLASS = "blas"
LAPACK_CLASS = "lapack"
GRAM_CLASS = "gram"
RANDOM_CLASS = "random"
TRANSCENDENTAL_CLASS = "transcendental"
MIXED_CLASS = "mixed"
SCAN_CLASS = "scan"

_NAME = r"^[A-Za-z0-9_.\-]+$"


class Link(BaseModel):
    """A link: bandwidth in bytes/s and latency in seconds."""

    model_config = ConfigDict(extra="forbid")
    bandwidth: Rate = Field(gt=0)
    latency: Time = 0.0


class DeviceSpec(BaseModel):
    """One device as the cluster file lists it."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=_NAME)
    kind: str = Field(pattern=r"^[a-z][a-z0-9_]*$", description="gpu, cpu, mlu, dcu, npu, ...")
    vendor: Optional[str] = None
    model: Optional[str] = None
    memory: Optional[Size] = Field(default=None, gt=0)
    flops: Optional[Flops] = Field(default=None, gt=0)
    mem_bandwidth: Optional[Rate] = Field(default=None, gt=0)
    # At least 1/MAX_QUANTITY, as a rate: the reference rates times a speed near 0 divide a task's
    # work into infinity.
    speed: float = Field(default=1.0, ge=1 / MAX_QUANTITY, le=MAX_QUANTITY, allow_inf_nan=False)
    # Measured by discovery's micro-benchmarks (streammap.cluster.microbench): a GEMM's FLOP/s, a
    # streaming copy's bytes/s beyond any cache, the copy's rate by working-set size ([bytes, rate]
    # pairs, smallest first) and the seconds of a minimal kernel call. The cost model prefers them to
    # the peaks above and to its constant launch overhead when present; files without them still load.
    achieved_flops: Optional[Flops] = Field(default=None, gt=0)
    achieved_bandwidth: Optional[Rate] = Field(default=None, gt=0)
    bandwidth_curve: Optional[list[tuple[Size, Rate]]] = Field(default=None, min_length=1)
    call_overhead: Optional[Time] = Field(default=None, ge=0)
    # FLOP/s of a mix of work that is not a matrix product (sin, an FFT, random numbers), the rate
    # of tasks whose compute_class is "mixed" (random numbers and transcendental functions in one
    # body) and the fallback of the rates below; absent: OTHER_FLOPS_FRACTION of the GEMM's.
    achieved_other_flops: Optional[Flops] = Field(default=None, gt=0)
    # FLOP/s of plain element-wise arithmetic (a * x + b, products, sums, abs, comparisons, where;
    # one per element of each operation), the rate of tasks whose compute_class is "other";
    # absent: achieved_other_flops (files calibrated before the field existed).
    achieved_elementwise_flops: Optional[Flops] = Field(default=None, gt=0)
    # FLOP/s of FFTs (counted 5 n log2 n), the rate of tasks whose compute_class is "fft"; absent:
    # achieved_other_flops (the mix the FFT is part of).
    achieved_fft_flops: Optional[Flops] = Field(default=None, gt=0)
    # FLOP/s of random numbers (one per number drawn), the rate of tasks whose compute_class is
    # "random"; absent: achieved_other_flops (the mix they are part of).
    achieved_random_flops: Optional[Flops] = Field(default=None, gt=0)
    # FLOP/s of transcendental functions NumPy evaluates element by element (sin, **; one per
    # element), the rate of tasks whose compute_class is "transcendental"; absent: achieved_other_flops.
    achieved_transcendental_flops: Optional[Flops] = Field(default=None, gt=0)
    # FLOP/s of scans (cumsum, cumprod, accumulate; one per element of the scan and of the operation
    # forming its input), the rate of tasks whose compute_class is "scan"; absent: the element-wise
    # rate (the one they had before).
    achieved_scan_flops: Optional[Flops] = Field(default=None, gt=0)
    # A complex FFT's FLOP/s (5 n log2 n per transform) by working set ([bytes, rate] pairs, smallest
    # first; the transform's input and output bytes, as the cost model counts a task's): the rate of
    # an "fft" task read at its own working set; absent: achieved_fft_flops for every size.
    fft_curve: Optional[list[tuple[Size, Flops]]] = Field(default=None, min_length=1)
    # The same for a real FFT and its inverse (2.5 n log2 n each), the rate of an "rfft" task; absent: fft_curve.
    rfft_curve: Optional[list[tuple[Size, Flops]]] = Field(default=None, min_length=1)
    # The GEMM's FLOP/s by matrix side ([side, rate] pairs, smallest first; in the dtype of the peak
    # figure: float64 on CPUs, float32 on GPUs): the rate of a "blas" task read at its own side.
    gemm_curve: Optional[list[tuple[Number, Flops]]] = Field(default=None, min_length=1)
    # A Cholesky factorisation's FLOP/s (n³/3 per factorisation) by matrix side, the same way: the
    # rate of a "lapack" task (a factorisation or solver) read at its own side; absent: gemm_curve.
    factor_curve: Optional[list[tuple[Number, Flops]]] = Field(default=None, min_length=1)

    @model_validator(mode="after")
    def _check_curve(self):
        sizes = [n for n, _ in self.bandwidth_curve or ()]
        if any(n <= 0 for n in sizes) or sizes != sorted(set(sizes)):
            raise ValueError("bandwidth_curve: working-set sizes must be positive and increasing, "
                             "e.g. [[512KiB, 100 GB/s], [64MiB, 27 GB/s]]")
        if any(r <= 0 for _, r in self.bandwidth_curve or ()):
            raise ValueError("bandwidth_curve: every rate must be positive")
        for field in ("fft_curve", "rfft_curve"):
            curve = getattr(self, field) or ()
            sizes = [n for n, _ in curve]
            if any(n <= 0 for n in sizes) or sizes != sorted(set(sizes)) or any(r <= 0 for _, r in curve):
                raise ValueError(f"{field}: working-set sizes must be positive and increasing and every rate "
                                 "positive, e.g. [[64KiB, 5 GFLOP/s], [2MiB, 4 GFLOP/s]]")
        for field in ("gemm_curve", "factor_curve"):
            curve = getattr(self, field) or ()
            sides = [n for n, _ in curve]
            if any(n <= 0 for n in sides) or sides != sorted(set(sides)) or any(r <= 0 for _, r in curve):
                raise ValueError(f"{field}: matrix sides must be positive and increasing and every rate positive, "
                                 "e.g. [[64, 40 GFLOP/s], [256, 60 GFLOP/s]]")
        return self

    # Filled in by discovery; the runtime uses ``index`` to find the local GPU.
    index: Optional[int] = Field(default=None, ge=0, le=65535)
    uuid: Optional[str] = None
    sm_count: Optional[int] = None
    clock_mhz: Optional[int] = None
    driver: Optional[str] = None
    cores: Optional[int] = None


class Node(BaseModel):
    """A machine: its devices and the link between them (NVLink, PCIe, shared memory)."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=_NAME)
    address: Optional[str] = None
    link: Optional[Link] = None
    devices: list[DeviceSpec] = Field(min_length=1)
    topology: Optional[dict[str, str]] = None

    @model_validator(mode="after")
    def _check(self):
        seen = set()
        for d in self.devices:
            if d.name in seen:
                raise ValueError(f"device name '{d.name}' appears twice on node '{self.name}'")
            seen.add(d.name)
        if self.link is None and len(self.devices) > 1:
            raise ValueError(
                f"node '{self.name}' has {len(self.devices)} devices but no 'link'; "
                "add link: {bandwidth: ..., latency: ...} for transfers between them")
        return self


#: Most devices a cluster file may describe: a large shared cluster, as the job service and the
#: admission simulator manage it (10,000 GPUs), is a few hundred MB of device records at most.
MAX_DEVICES = 32_768
#: Most devices one plan may span. The cost model keeps device-pair matrices (D x D) and
#: task x device arrays, so 20,000 devices asked for gigabytes before any task was placed; the
#: largest clusters one plan spans have hundreds. Checked by :meth:`Cluster.link_matrices`,
#: before any matrix is built.
MAX_PLAN_DEVICES = 4096


class ClusterSpec(BaseModel):
    """The whole file."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=_NAME)
    network: Optional[Link] = None
    memory_oversubscription: float = Field(default=1.0, ge=1.0, le=MAX_QUANTITY, allow_inf_nan=False)
    # GPU sharing (streammap.placement.sharing): at most this many tasks at once on one device (HAMi's
    # deviceSplitCount), and the host link spilled arrays cross under oversubscription.
    max_tasks_per_device: Optional[int] = Field(default=None, ge=1)
    host_bandwidth: Optional[Rate] = Field(default=None, gt=0)
    nodes: list[Node] = Field(min_length=1)

    @model_validator(mode="after")
    def _check(self):
        devices = sum(len(n.devices) for n in self.nodes)
        if devices > MAX_DEVICES:
            raise ValueError(f"{devices} devices (limit: {MAX_DEVICES}); describe the part of the "
                             "cluster a plan runs on")
        seen = set()
        for n in self.nodes:
            if n.name in seen:
                raise ValueError(f"node name '{n.name}' appears twice")
            seen.add(n.name)
        if self.network is None and len(self.nodes) > 1:
            raise ValueError(f"{len(self.nodes)} nodes but no 'network'; "
                             "add network: {bandwidth: ..., latency: ...} for transfers between nodes")
        return self


@dataclass(frozen=True)
class Device:
    """A device as later stages see it."""

    id: str            # "node/device", as plans write it
    node: str
    name: str
    kind: str
    vendor: str | None
    model: str | None
    memory: float      # bytes; inf when the file gives no capacity
    flops: float       # FLOP/s (reference value x speed when not given)
    mem_bandwidth: float
    speed: float
    index: int | None
    achieved_flops: float | None = None       # FLOP/s a GEMM reached (discovery); None: not measured
    achieved_bandwidth: float | None = None   # bytes/s a streaming copy reached
    bandwidth_curve: tuple[tuple[float, float], ...] = ()   # (working-set bytes, copy bytes/s), smallest first
    call_overhead: float | None = None        # seconds of a minimal kernel call; None: not measured
    achieved_other_flops: float | None = None  # FLOP/s of non-matrix-product work (discovery)
    achieved_elementwise_flops: float | None = None  # FLOP/s of plain element-wise arithmetic (discovery)
    achieved_fft_flops: float | None = None    # FLOP/s of FFTs (discovery)
    achieved_random_flops: float | None = None           # FLOP/s of random numbers, one per number (discovery)
    achieved_transcendental_flops: float | None = None   # FLOP/s of sin and ``**``, one per element (discovery)
    achieved_scan_flops: float | None = None   # FLOP/s of scans (cumsum, cumprod), one per element (discovery)
    fft_curve: tuple[tuple[float, float], ...] = ()     # (working-set bytes, complex FFT FLOP/s), smallest first
    rfft_curve: tuple[tuple[float, float], ...] = ()    # (working-set bytes, real FFT pair FLOP/s), smallest first
    gemm_curve: tuple[tuple[float, float], ...] = ()   # (matrix side, GEMM FLOP/s), smallest first
    factor_curve: tuple[tuple[float, float], ...] = ()  # (matrix side, Cholesky FLOP/s), smallest first

    @property
    def compute_rate(self) -> float:
        """FLOP/s of a matrix product: the achieved GEMM figure when measured, else ``flops`` (the peak)."""
        return self.achieved_flops if self.achieved_flops is not None else self.flops

    @property
    def other_compute_rate(self) -> float:
        """FLOP/s of work that is not a matrix product: the measured figure, else
        :data:`OTHER_FLOPS_FRACTION` of :attr:`compute_rate`."""
        if self.achieved_other_flops is not None:
            return self.achieved_other_flops
        return OTHER_FLOPS_FRACTION * self.compute_rate

    @property
    def elementwise_compute_rate(self) -> float:
        """FLOP/s of plain element-wise arithmetic (one per element of each operation): the measured
        figure, else :attr:`other_compute_rate` (the mix that priced it before it had a figure of its own)."""
        if self.achieved_elementwise_flops is not None:
            return self.achieved_elementwise_flops
        return self.other_compute_rate

    @property
    def fft_compute_rate(self) -> float:
        """FLOP/s of FFTs: the measured figure, else :attr:`other_compute_rate`."""
        if self.achieved_fft_flops is not None:
            return self.achieved_fft_flops
        return self.other_compute_rate

    @property
    def random_compute_rate(self) -> float:
        """FLOP/s of random numbers (one per number): the measured figure, else :attr:`other_compute_rate`
        (the mix that timed random numbers before they had a figure of their own)."""
        if self.achieved_random_flops is not None:
            return self.achieved_random_flops
        return self.other_compute_rate

    @property
    def transcendental_compute_rate(self) -> float:
        """FLOP/s of transcendental functions (one per element): the measured figure, else
        :attr:`other_compute_rate`."""
        if self.achieved_transcendental_flops is not None:
            return self.achieved_transcendental_flops
        return self.other_compute_rate

    @property
    def scan_compute_rate(self) -> float:
        """FLOP/s of scans (one per element): the measured figure, else :attr:`elementwise_compute_rate`
        (scans were plain arithmetic before they had a figure of their own)."""
        if self.achieved_scan_flops is not None:
            return self.achieved_scan_flops
        return self.elementwise_compute_rate

    def fft_rate_at(self, working_set: np.ndarray) -> np.ndarray:
        """FLOP/s of FFTs whose input and output take these working sets (bytes): the measured FFT
        curve, read at each size as :meth:`memory_rate_at` reads the copy's (linear in log(size), the
        end rates beyond it); without a curve, :attr:`fft_compute_rate` for every size.

        An FFT's rate per counted FLOP depends on its length: a short transform pays a fixed cost
        per call that its few FLOP do not hide, and one whose arrays leave the core's cache waits
        for memory on every pass (on a 2-core EPYC VM 2-3 GFLOP/s at 16 KiB, ~5 at 64 KiB, ~7 from
        256 KiB to 2 MiB, ~3 for a real pair at 4 MiB).
        """
        ws = np.asarray(working_set, dtype=np.float64)
        if not self.fft_curve:
            return np.full(ws.shape, self.fft_compute_rate)
        return _read_curve(self.fft_curve, ws)

    def rfft_rate_at(self, working_set: np.ndarray) -> np.ndarray:
        """FLOP/s of real FFTs (``rfft``, ``irfft``) at these working sets: the measured real curve,
        read as :meth:`fft_rate_at` reads the complex one; without it, :meth:`fft_rate_at`."""
        if not self.rfft_curve:
            return self.fft_rate_at(working_set)
        return _read_curve(self.rfft_curve, np.asarray(working_set, dtype=np.float64))

    def rate_for(self, compute_class: str | None) -> float:
        """FLOP/s the cost model divides a task's ``flops`` by, by the task's ``compute_class``:
        :attr:`elementwise_compute_rate` for ``"other"``, :attr:`other_compute_rate` (the mix) for
        ``"mixed"``, :attr:`fft_compute_rate` for ``"fft"`` and ``"rfft"`` (the cost model reads the
        FFT curves at a task's working set), :attr:`scan_compute_rate` for ``"scan"``,
        :attr:`random_compute_rate` and :attr:`transcendental_compute_rate` for those classes;
        :attr:`compute_rate` for ``"blas"`` and for tasks of no class (imported workflows), as
        before the classes existed (the cost model reads the curves for sized products)."""
        if compute_class in (FFT_CLASS, RFFT_CLASS):
            return self.fft_compute_rate
        if compute_class == RANDOM_CLASS:
            return self.random_compute_rate
        if compute_class == TRANSCENDENTAL_CLASS:
            return self.transcendental_compute_rate
        if compute_class == MIXED_CLASS:
            return self.other_compute_rate
        if compute_class == SCAN_CLASS:
            return self.scan_compute_rate
        return self.elementwise_compute_rate if compute_class == OTHER_CLASS else self.compute_rate

    @property
    def memory_rate(self) -> float:
        """Bytes/s the cost model divides ``bytes`` by: the achieved figure when measured, else ``mem_bandwidth``."""
        return self.achieved_bandwidth if self.achieved_bandwidth is not None else self.mem_bandwidth

    def memory_rate_at(self, working_set: np.ndarray) -> np.ndarray:
        """Bytes/s for tasks of these working sets (bytes): the measured copy curve, read at each size.

        Between two measured sizes the rate is interpolated linearly in log(size) (caches hold
        working sets in powers of two); below the smallest size it is the smallest size's rate,
        above the largest the largest's. Without a curve, :attr:`memory_rate` for every size.
        """
        ws = np.asarray(working_set, dtype=np.float64)
        if len(self.bandwidth_curve) < 2:
            return np.full(ws.shape, self.memory_rate)
        sizes, rates = np.array(self.bandwidth_curve).T
        return np.interp(np.log(np.maximum(ws, 1.0)), np.log(sizes), rates)

    def gemm_rate_at(self, side: np.ndarray) -> np.ndarray:
        """FLOP/s of matrix products of these sides: the measured GEMM curve, read at each side.

        Interpolated linearly in log(side) between measured sides, the end rates beyond them;
        without a curve, :attr:`compute_rate` for every side.
        """
        s = np.asarray(side, dtype=np.float64)
        if not self.gemm_curve:
            return np.full(s.shape, self.compute_rate)
        return _read_curve(self.gemm_curve, s)

    def factor_rate_at(self, side: np.ndarray) -> np.ndarray:
        """FLOP/s of factorisations of these sides: the measured Cholesky curve, read at each side
        as :meth:`gemm_rate_at` reads its own; without one, :meth:`gemm_rate_at` (the rate
        factorisations got before the curve was measured)."""
        if not self.factor_curve:
            return self.gemm_rate_at(side)
        return _read_curve(self.factor_curve, np.asarray(side, dtype=np.float64))

    def matches(self, constraint: str | None) -> bool:
        """Whether a kernel's ``device`` clause admits this device.

        The clause is one or more alternatives separated by ``|``; the device is admitted when
        any alternative admits it. An alternative is ``"any"`` (admits every device, so
        ``"cpu|any"`` and ``"any|cpu"`` mean the same as ``"any"``), a kind (``"gpu"``,
        ``"cpu"``, ``"mlu"``...), a vendor (``"nvidia"``), or a case-insensitive substring of
        the model (``"A100"``). Matching ignores case and the spaces around each alternative;
        an empty alternative (``"gpu|"``) admits nothing.
        """
        if constraint is None:
            return True
        for alt in constraint.split("|"):
            alt = alt.strip().lower()
            if not alt:
                continue
            if alt == "any" or alt in (self.kind.lower(), (self.vendor or "").lower()):
                return True
            if self.model and alt in self.model.lower():
                return True
        return False


def _read_curve(curve, side: np.ndarray) -> np.ndarray:
    """A ``((side, rate), ...)`` curve read at ``side``: linear in log(side), the end rates beyond it."""
    sides, rates = np.array(curve).T
    return np.interp(np.log(np.maximum(side, 1.0)), np.log(sides), rates)


class Cluster:
    """A validated cluster: the spec, a flat device list and link matrices."""

    def __init__(self, spec: ClusterSpec, sha256: str = "", path: str | None = None):
        self.spec = spec
        self.name = spec.name
        self.sha256 = sha256
        self.path = path
        self.oversubscription = spec.memory_oversubscription
        self.max_tasks_per_device = spec.max_tasks_per_device
        self.host_bandwidth = spec.host_bandwidth
        devices = []
        for node in spec.nodes:
            for d in node.devices:
                devices.append(Device(
                    id=f"{node.name}/{d.name}", node=node.name, name=d.name, kind=d.kind,
                    vendor=d.vendor, model=d.model,
                    memory=d.memory if d.memory is not None else math.inf,
                    flops=d.flops if d.flops is not None else REFERENCE_FLOPS * d.speed,
                    mem_bandwidth=d.mem_bandwidth if d.mem_bandwidth is not None else REFERENCE_MEM_BANDWIDTH * d.speed,
                    speed=d.speed, index=d.index,
                    achieved_flops=d.achieved_flops, achieved_bandwidth=d.achieved_bandwidth,
                    bandwidth_curve=tuple(tuple(p) for p in d.bandwidth_curve or ()),
                    call_overhead=d.call_overhead, achieved_other_flops=d.achieved_other_flops,
                    achieved_elementwise_flops=d.achieved_elementwise_flops,
                    achieved_fft_flops=d.achieved_fft_flops, achieved_random_flops=d.achieved_random_flops,
                    achieved_transcendental_flops=d.achieved_transcendental_flops,
                    achieved_scan_flops=d.achieved_scan_flops,
                    fft_curve=tuple(tuple(p) for p in d.fft_curve or ()),
                    rfft_curve=tuple(tuple(p) for p in d.rfft_curve or ()),
                    gemm_curve=tuple(tuple(p) for p in d.gemm_curve or ()),
                    factor_curve=tuple(tuple(p) for p in d.factor_curve or ())))
        self.devices: list[Device] = devices
        self.index = {d.id: i for i, d in enumerate(devices)}

    def __len__(self):
        return len(self.devices)

    def link_matrices(self) -> tuple[np.ndarray, np.ndarray]:
        """``(bandwidth, latency)`` arrays of shape (D, D); the diagonal is (inf, 0).

        Raises :class:`ClusterError` for a cluster of more than :data:`MAX_PLAN_DEVICES` devices.
        """
        n = len(self.devices)
        if n > MAX_PLAN_DEVICES:
            raise ClusterError(f"{n} devices (limit for one plan: {MAX_PLAN_DEVICES})", path=self.path,
                               hint="compile for the part of the cluster the plan runs on (a cluster file "
                                    "of its nodes); the job service and `simulate` take larger clusters")
        bw = np.empty((n, n))
        lat = np.empty((n, n))
        node_of = np.array([self._node_pos(d.node) for d in self.devices])
        net = self.spec.network
        for i, a in enumerate(self.devices):
            link = self.spec.nodes[node_of[i]].link
            for j in range(n):
                same = node_of[i] == node_of[j]
                lk = link if same else net
                if lk is None:   # single device / single node: no transfers happen
                    bw[i, j], lat[i, j] = math.inf, 0.0
                else:
                    bw[i, j], lat[i, j] = lk.bandwidth, lk.latency
        np.fill_diagonal(bw, math.inf)
        np.fill_diagonal(lat, 0.0)
        return bw, lat

    def _node_pos(self, name):
        for i, n in enumerate(self.spec.nodes):
            if n.name == name:
                return i
        raise KeyError(name)

    def to_yaml(self) -> str:
        """The cluster as a ``cluster.yaml`` text (units in base numbers)."""
        return dump_cluster_spec(self.spec)


def dump_cluster_spec(spec: ClusterSpec) -> str:
    data = spec.model_dump(exclude_none=True, exclude_defaults=False)
    if data.get("memory_oversubscription") == 1.0:
        del data["memory_oversubscription"]
    for node in data["nodes"]:
        for d in node["devices"]:
            if d.get("speed") == 1.0:
                del d["speed"]
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=None, width=120)


def load_cluster(path) -> Cluster:
    """Read and validate a cluster file.

    Raises
    ------
    ClusterError
        With the file, line and field of the first problem.

    Examples
    --------
    One node with a GPU and a CPU; sizes and speeds are read with their units:

    >>> import pathlib, tempfile
    >>> from streammap.cluster.model import load_cluster
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "cluster.yaml"
    >>> _ = path.write_text('''
    ... name: lab
    ... nodes:
    ...   - name: n0
    ...     link: {bandwidth: 100 GB/s, latency: 3us}
    ...     devices:
    ...       - {name: gpu0, kind: gpu, memory: 80GiB, flops: 19.5 TFLOP/s}
    ...       - {name: cpu, kind: cpu}
    ... ''')
    >>> lab = load_cluster(path)
    >>> [d.id for d in lab.devices]
    ['n0/gpu0', 'n0/cpu']
    >>> lab.devices[0].memory / 2**30, lab.devices[0].flops / 1e12
    (80.0, 19.5)

    A value it cannot read names the file, the line and the field:

    >>> _ = path.write_text('''
    ... name: lab
    ... nodes:
    ...   - name: n0
    ...     devices:
    ...       - {name: gpu0, kind: gpu, memory: 80 gigs}
    ... ''')
    >>> load_cluster(path)
    Traceback (most recent call last):
      ...
    streammap.errors.ClusterError: ...cluster.yaml:6: error: nodes[0].devices[0].memory: cannot read '80 gigs' as a size; ...
    """
    path = Path(path)
    data, lines = load_yaml(path, ClusterError)
    if not isinstance(data, dict):
        raise ClusterError("a cluster file must be a mapping with name, nodes and network",
                           path=path, line=1, hint="see the cluster format in the README")
    try:
        spec = ClusterSpec.model_validate(data)
    except pydantic.ValidationError as exc:
        raise validation_error(exc, path, lines, ClusterError, "cluster file") from None
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    return Cluster(spec, sha256=sha, path=str(path))


def cluster_from_dict(data: dict, name_for_errors: str = "<cluster>") -> Cluster:
    """Validate a cluster given as a dict (Python API); errors name the field.

    Examples
    --------
    >>> from streammap.cluster.model import cluster_from_dict
    >>> pair = cluster_from_dict({"name": "pair", "nodes": [{
    ...     "name": "n0", "link": {"bandwidth": "300 GB/s", "latency": "3us"},
    ...     "devices": [{"name": "gpu0", "kind": "gpu", "memory": "80GiB"},
    ...                 {"name": "gpu1", "kind": "gpu", "memory": "80GiB"}]}]})
    >>> [d.id for d in pair.devices]
    ['n0/gpu0', 'n0/gpu1']
    >>> cluster_from_dict({"name": "pair", "nodes": [{"name": "n0", "devices": [
    ...     {"name": "gpu0", "kind": "gpu"}, {"name": "gpu1", "kind": "gpu"}]}]})
    Traceback (most recent call last):
      ...
    streammap.errors.ClusterError: <cluster>: error: nodes[0]: node 'n0' has 2 devices but no 'link'; ...
    """
    try:
        spec = ClusterSpec.model_validate(data)
    except pydantic.ValidationError as exc:
        raise validation_error(exc, name_for_errors, {}, ClusterError, "cluster") from None
    text = dump_cluster_spec(spec)
    return Cluster(spec, sha256=hashlib.sha256(text.encode()).hexdigest())
