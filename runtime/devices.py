"""What executes each plan device on this machine: NumPy on the CPU, or CuPy on a local GPU.

:func:`check_devices` decides, before anything runs, how each device that has tasks will be
executed, and refuses plans this machine cannot run (with a hint to use ``--emulate``):

- ``cpu`` devices run on NumPy;
- ``gpu`` devices (and Hygon ``dcu`` devices) run on CuPy (``cupy.cuda.Device(i)``, one
  non-blocking stream each), where ``i`` is the device's ``index`` in the plan, else its position
  among the CuPy devices of its node; NVIDIA devices need CuPy's CUDA build, AMD and Hygon devices
  its ROCm build (:mod:`streammap.runtime.accelerators`);
- under ``emulate=True`` every device runs on NumPy, whatever its kind, with the same threads and
  task order as a real run;
- without ``emulate``, devices of other kinds (mlu, npu, ...), plans spanning several nodes,
  GPU plans without CuPy, with the other CuPy build, or without enough devices are refused.

:func:`make_devices` then builds the executor devices (:class:`NumpyDevice`, :class:`CupyDevice`).
CuPy is imported only here and only when a plan needs a real GPU.
"""

from __future__ import annotations

import sys
from collections import deque
from dataclasses import dataclass
from typing import Optional

import numpy

from streammap.errors import StreamMapError
from streammap.optional import import_cupy
from streammap.plan import Plan
from streammap.runtime.accelerators import CUDA, EITHER, HIP, KIND_NAMES, build_name, cupy_platform, is_hip

#: Device kinds this machine can execute without ``--emulate``.
EXECUTABLE_KINDS = ("cpu", "gpu", "dcu")
#: GPU vendors CuPy can drive (CUDA, and ROCm builds of CuPy).
CUPY_VENDORS = (None, "nvidia", "amd", "hygon")

_EMULATE = "use --emulate to run this plan on the CPU with NumPy (same threads and order)"


def node_of(device_id: str) -> str:
    """``node0/gpu1`` → ``node0`` (a device id without a node part is its own node)."""
    return device_id.split("/", 1)[0] if "/" in device_id else ""


def gpu_ordinals(plan: Plan) -> dict[str, int]:
    """The local CUDA ordinal of every gpu device of the plan.

    ``PlanDevice.index`` when it is set, else the device's position among the gpu devices of its
    node, in the order the plan lists them.
    """
    out: dict[str, int] = {}
    position: dict[str, int] = {}
    for d in plan.devices:
        if cupy_platform(d.kind, d.vendor) is None:
            continue
        node = node_of(d.id)
        pos = position.get(node, 0)
        position[node] = pos + 1
        out[d.id] = d.index if d.index is not None else pos
    return out


@dataclass(frozen=True)
class Placement:
    """How one plan device is executed here: ``numpy`` or ``cupy`` (with its ordinal)."""

    device_id: str
    kind: str
    backend: str                    # "numpy" or "cupy"
    ordinal: Optional[int] = None
    emulated: bool = False

    @property
    def executor(self) -> str:
        if self.backend == "cupy":
            return f"cupy:{self.ordinal}"
        return f"numpy (emulating {self.device_id})" if self.emulated else "numpy"


def used_devices(plan: Plan) -> list[str]:
    """Ids of the devices that have tasks, in the plan's device order."""
    used = {t.device for t in plan.tasks}
    return [d.id for d in plan.devices if d.id in used]


def check_devices(plan: Plan, emulate: bool = False) -> dict[str, Placement]:
    """Decide how each used device runs; raise :class:`StreamMapError` when this machine cannot.

    Nothing is started: at most CuPy is imported and the CUDA devices counted.
    """
    ids = used_devices(plan)
    if emulate:
        return {i: Placement(i, plan.device(i).kind, "numpy", emulated=plan.device(i).kind != "cpu")
                for i in ids}

    nodes = sorted({node_of(i) for i in ids})
    if len(nodes) > 1:
        raise StreamMapError(
            f"this plan spans {len(nodes)} nodes ({', '.join(nodes)}); the local executor runs one machine",
            hint=f"{_EMULATE}, or run it on a Ray cluster with --backend ray")

    for i in ids:
        d = plan.device(i)
        if d.kind != "cpu" and cupy_platform(d.kind, d.vendor) is None:
            raise_not_executable(plan, i)

    gpus = [i for i in ids if plan.device(i).kind != "cpu"]
    placements = {i: Placement(i, "cpu", "numpy") for i in ids if i not in gpus}
    if not gpus:
        return placements

    cupy = import_cupy()
    if cupy is None:
        raise StreamMapError(
            f"this plan runs tasks on {len(gpus)} GPU(s) ({', '.join(gpus)}) but CuPy is not installed",
            hint=f"pip install 'streammap[gpu]', or {_EMULATE}")
    hip = is_hip(cupy)
    for i in gpus:
        need_platform = cupy_platform(plan.device(i).kind, plan.device(i).vendor)
        if need_platform not in (EITHER, HIP if hip else CUDA):
            d = plan.device(i)
            raise StreamMapError(
                f"{i} ({d.vendor or d.kind} {d.model or ''}) needs CuPy's {build_name(not hip)} build, but the "
                f"installed CuPy is built for {build_name(hip)}",
                hint=("install cupy-cuda12x for NVIDIA GPUs" if need_platform == CUDA else
                      "install CuPy's ROCm build (cupy-rocm-*) for AMD and Hygon devices") + f", or {_EMULATE}")
    count = cuda_device_count(cupy)
    ordinals = gpu_ordinals(plan)
    need = {i: ordinals[i] for i in gpus}
    missing = [f"{i} (CUDA device {o})" for i, o in need.items() if o >= count]
    if missing:
        have = "no CUDA device" if count == 0 else f"{count} CUDA device(s)"
        raise StreamMapError(f"this machine has {have}; the plan needs {', '.join(missing)}",
                             hint=_EMULATE)
    seen: dict[int, str] = {}
    for i, o in need.items():
        if o in seen:
            raise StreamMapError(f"devices {seen[o]} and {i} are both CUDA device {o}",
                                 hint="give each gpu device its own 'index' in the cluster file")
        seen[o] = i
        placements[i] = Placement(i, "gpu", "cupy", ordinal=o)
    return placements


def raise_not_executable(plan: Plan, device_id: str):
    """Refuse a device no runtime drives, naming the first task placed on it and what to do."""
    d = plan.device(device_id)
    task = next((t.id for t in plan.tasks if t.device == device_id), None)
    what = KIND_NAMES.get(d.kind, d.kind) if d.kind != "gpu" else f"{d.vendor} gpu"
    raise StreamMapError(
        f"StreamMAP cannot execute on {d.kind} devices here: task {task} is placed on {device_id} "
        f"({what}{', ' + d.model if d.model else ''}), and StreamMAP has no runtime for them "
        "(only CuPy on CUDA/ROCm and NumPy)",
        hint=f"{_EMULATE}; or compile for a cluster file without these devices; "
             "`streammap export k8s` still maps them for Kubernetes")


def cuda_device_count(cupy) -> int:
    try:
        return int(cupy.cuda.runtime.getDeviceCount())
    except Exception:               # no driver, no device: CUDARuntimeError  # noqa: BLE001
        return 0


# -- executor devices ----------------------------------------------------------------------

class NumpyDevice:
    """A plan device executed on the host with NumPy."""

    is_gpu = False
    xp = numpy

    def __init__(self, placement: Placement):
        self.id = placement.device_id
        self.placement = placement
        self.executor = placement.executor

    def peak_memory(self) -> Optional[float]:
        return None


class CupyDevice:
    """A plan device executed on local GPU ``ordinal`` with CuPy, on its own non-blocking stream.

    The device's worker thread keeps the CUDA device and :attr:`stream` current, so kernels (and
    :meth:`bring`) allocate on this GPU and launch on this stream. Every task records an event
    after it; consumers on other devices wait on that event (``stream.wait_event``), never on the
    host, unless they run on the host themselves (:func:`to_host`).
    """

    is_gpu = True
    #: A call that ran past its timeout was abandoned here (:mod:`.guard`): its stream may never finish.
    abandoned = False

    def __init__(self, placement: Placement, cupy):
        self.id = placement.device_id
        self.placement = placement
        self.executor = placement.executor
        self.ordinal = placement.ordinal
        self.cupy = cupy
        self.xp = cupy
        self.device = cupy.cuda.Device(self.ordinal)
        with self.device:
            self.stream = cupy.cuda.Stream(non_blocking=True)
        self._pending: deque = deque()        # (event, source array) of peer copies in flight
        self._peak = 0
        try:
            self._pool = cupy.get_default_memory_pool()
        except Exception:  # noqa: BLE001
            self._pool = None

    # -- memory --------------------------------------------------------------------------
    def sample_memory(self) -> None:
        """Note the memory pool's use on this device (call with this device current)."""
        if self._pool is not None:
            used = self._pool.used_bytes()
            if used > self._peak:
                self._peak = used

    def peak_memory(self) -> Optional[float]:
        """Peak bytes in use in CuPy's memory pool on this device, sampled after each task
        (``None`` when the pool saw no use: another allocator, or nothing allocated)."""
        return float(self._peak) if self._pool is not None and self._peak > 0 else None

    def release_pending(self) -> None:
        """Drop the sources of peer copies that have completed."""
        pending = self._pending
        while pending and pending[0][0].done:
            pending.popleft()

    # -- moving values here --------------------------------------------------------------
    def bring(self, value, src=None, event=None):
        """``value`` with its arrays on this GPU (call from this device's worker thread).

        ``src`` is the device that produced it and ``event`` the event its task recorded: this
        stream waits on the event, then NumPy arrays are uploaded (``cupy.asarray`` on this stream)
        and CuPy arrays of other GPUs copied. Tuples, lists and dict values are walked.
        """
        if event is not None:
            self.stream.wait_event(event)
        return self._bring(value, src)

    def _bring(self, v, src):
        cp = self.cupy

        def one(a):
            if isinstance(a, numpy.ndarray):
                return cp.asarray(a)
            if isinstance(a, cp.ndarray) and a.data.device_id != self.ordinal:
                return self._copy_peer(a, src)
            return a
        return map_leaves(v, one)

    def _copy_peer(self, a, src):
        """Copy CuPy array ``a`` from another GPU to this one, on this device's stream.

        The source is kept alive (``_pending``) until the copy is done, so the producer's stream
        cannot reuse its memory while the copy still reads it.
        """
        cp = self.cupy
        if a.size == 0:
            return cp.empty(a.shape, a.dtype)
        if not a.flags.c_contiguous:
            owner = a.data.device_id
            with cp.cuda.Device(owner):
                ours = getattr(src, "is_gpu", False) and src.ordinal == owner
                s = src.stream if ours else cp.cuda.Stream.null
                with s:
                    a = cp.ascontiguousarray(a)
                self.stream.wait_event(s.record())
        out = cp.empty(a.shape, a.dtype)
        out.data.copy_from_device_async(a.data, a.nbytes, self.stream)
        self._pending.append((self.stream.record(), a))
        return out


def to_host(value, event=None):
    """``value`` with every CuPy array (in tuples, lists and dict values) copied to NumPy.

    ``event`` is the producer's event: the host waits on it before copying.
    """
    cupy = sys.modules.get("cupy")
    if cupy is None:
        return value
    if event is not None:
        event.synchronize()
    return _host(value, cupy.ndarray)


def _host(v, nd):
    return map_leaves(v, lambda a: a.get() if isinstance(a, nd) else a)


def map_leaves(value, fn):
    """``value`` with ``fn`` applied to each leaf: the items of tuples and lists and the values
    of dicts are walked (a kernel's result is such a structure of arrays), anything else is a
    leaf. Every move of a result (upload, peer copy, download, spill, CUDA IPC) goes through it."""
    t = type(value)
    if t is tuple or t is list:
        return t(map_leaves(x, fn) for x in value)
    if t is dict:
        return {k: map_leaves(x, fn) for k, x in value.items()}
    return fn(value)


def leaves(value):
    """The leaves of ``value`` (see :func:`map_leaves`), in order."""
    t = type(value)
    if t is tuple or t is list:
        for x in value:
            yield from leaves(x)
    elif t is dict:
        for x in value.values():
            yield from leaves(x)
    else:
        yield value


def make_devices(placements: dict[str, Placement]) -> dict[str, object]:
    """Executor devices for ``placements`` (creates the CUDA streams)."""
    cupy = None
    out: dict[str, object] = {}
    for i, p in placements.items():
        if p.backend == "cupy":
            cupy = cupy or import_cupy()
            out[i] = CupyDevice(p, cupy)
        else:
            out[i] = NumpyDevice(p)
    return out
