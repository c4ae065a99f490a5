"""Micro-benchmarks: what each device of this machine achieves, measured once at discovery.

The cost model's first estimates (before any ``streammap profile``) are rooflines,
``max(flops / F, bytes / B) + launch``. With F and B the datasheet peaks that discovery reads,
every estimate is optimistic by however far real kernels stay below the peak; so
``streammap discover`` (and ``streammap doctor``) run two short measurements per device and
record what was *achieved* beside the peak figures, in the cluster file's optional
``achieved_flops`` and ``achieved_bandwidth`` fields, which the cost model prefers when present.

What is measured
----------------
``achieved_flops``
    A square matrix product ``a @ b`` of side :data:`GEMM_SIDE` (``2 n³`` FLOP each). The dtype
    is the one the device's peak figure is quoted in: float32 on GPUs (discovery's FP32 peak),
    float64 on the CPU (its FP64 AVX2 peak). NumPy's BLAS uses all the cores this process may
    use, as a CPU task of a plan does.
``achieved_bandwidth``
    A streaming copy ``dst[...] = src`` of :data:`COPY_BYTES` (GPU: :data:`GPU_COPY_BYTES`); it
    reads and writes each byte once, so the rate is ``2 × size / time`` (the STREAM convention).

Each measurement runs once to warm up (BLAS threads, CuPy's kernel cache and memory pool), then
repeats until :data:`REPEATS` runs or its share of the time budget is spent, and keeps the best
run: the rate the device *can* reach, as STREAM reports it. GPU runs are timed between
``synchronize()`` calls. The budget (:data:`BUDGET_S` per device, default) bounds the repeats,
not a single run: the sizes are chosen so one run takes milliseconds on the slowest device
StreamMAP expects (a 2-core VM's CPU), well under a second per device in all.

Which array library
-------------------
NumPy on the CPU; CuPy on a GPU (``kind: gpu`` or ``dcu``) when :func:`streammap.optional.import_cupy`
finds it, on the device's ``index``. A GPU without CuPy, a device of a kind StreamMAP cannot
execute (``mlu``, ``npu``, ...), or a measurement that fails (out of memory, a broken driver) is
left unmeasured: its fields stay empty and :class:`Measured.note` says why. Measuring never raises.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from streammap.cluster.model import DeviceSpec
from streammap.optional import import_cupy

#: Side of the square GEMM: 512 on the CPU (0.27 GFLOP: a few ms at tens of GFLOP/s), 4096 on a
#: GPU (137 GFLOP: a few ms at tens of TFLOP/s).
GEMM_SIDE = {"cpu": 512, "gpu": 4096}
#: Bytes copied by the bandwidth test: beyond any CPU cache, and big enough on a GPU that the
#: launch is noise.
COPY_BYTES = 32 << 20
GPU_COPY_BYTES = 512 << 20
#: At most this many timed runs per measurement (after the warm-up): on a quiet device they take a few ms
#: each, and more of them give a shared machine more chances to show its real rate.
REPEATS = 20
#: Seconds of timed runs per device, both measurements together (the warm-ups come on top).
BUDGET_S = 0.3
#: Device kinds measured with CuPy.
CUPY_KINDS = ("gpu", "dcu")


@dataclass(frozen=True)
class Measured:
    """What one device achieved: FLOP/s and bytes/s (``None`` when not measured), and why not."""

    flops: float | None = None
    bandwidth: float | None = None
    seconds: float = 0.0
    note: str = ""

    def describe(self, device: DeviceSpec) -> str:
        """``"cpu: GEMM 41.2 GFLOP/s (50% of the 83.1 peak), copy 23.4 GB/s (117% of the 20 peak) (measured in 0.41 s)"``."""
        if self.flops is None:
            return f"{device.name}: not measured ({self.note})"
        return (f"{device.name}: GEMM {_share(self.flops, device.flops, _FLOP_UNITS)}, "
                f"copy {_share(self.bandwidth, device.mem_bandwidth, _RATE_UNITS)} "
                f"(measured in {self.seconds:.2f} s)")


def measure_device(device: DeviceSpec, *, budget_s: float = BUDGET_S, cupy=None) -> Measured:
    """Measure one device with the library that would run its tasks (see the module docstring).

    Parameters
    ----------
    device : DeviceSpec
        As discovery lists it: ``kind`` chooses NumPy or CuPy, ``index`` the GPU.
    budget_s : float
        Seconds of timed runs, shared by the two measurements.
    cupy : module, optional
        CuPy (tests pass a stand-in); default: :func:`streammap.optional.import_cupy`.
    """
    t0 = time.perf_counter()
    if device.kind == "cpu":
        xp, gpu, side, nbytes, dtype = np, None, GEMM_SIDE["cpu"], COPY_BYTES, np.float64
    elif device.kind in CUPY_KINDS:
        xp = cupy if cupy is not None else import_cupy()
        if xp is None:
            return Measured(note="CuPy is not installed")
        gpu, side, nbytes, dtype = device.index or 0, GEMM_SIDE["gpu"], GPU_COPY_BYTES, np.float32
    else:
        return Measured(note=f"StreamMAP cannot execute on {device.kind} devices")
    try:
        if gpu is None:
            flops, bandwidth = _measure(xp, _no_sync, side, nbytes, dtype, budget_s)
        else:
            with xp.cuda.Device(gpu) as gpu:
                flops, bandwidth = _measure(xp, gpu.synchronize, side, nbytes, dtype, budget_s)
    except Exception as exc:          # noqa: BLE001 -- out of memory, a broken driver: a finding, not a crash
        return Measured(note=f"the measurement failed: {type(exc).__name__}: {exc}",
                        seconds=time.perf_counter() - t0)
    return Measured(flops=flops, bandwidth=bandwidth, seconds=time.perf_counter() - t0)


def calibrate_spec(devices: list[DeviceSpec], *, budget_s: float = BUDGET_S, cupy=None,
                   measure: Callable[..., Measured] | None = None) -> tuple[list[DeviceSpec], list[str]]:
    """``devices`` with ``achieved_flops`` and ``achieved_bandwidth`` filled in, and one note each.

    Every device is measured once. Boards of one model (same kind, vendor, model and peak
    figures) all record the median of their measurements, so that the cost model keeps treating
    them as one class (a few percent of run-to-run noise would otherwise make every GPU of an
    8-GPU node look different to the mapper). Devices that could not be measured are returned
    unchanged: their fields stay empty and the cost model uses their peaks. ``measure`` replaces
    :func:`measure_device` (tests).
    """
    measure = measure or measure_device
    got = [measure(d, budget_s=budget_s, cupy=cupy) for d in devices]
    notes = ["calibrated " + m.describe(d) for d, m in zip(devices, got)]
    groups: dict[tuple, list[Measured]] = {}
    for d, m in zip(devices, got):
        if m.flops is not None and m.bandwidth is not None:
            groups.setdefault(_board(d), []).append(m)
    out = []
    for d, m in zip(devices, got):
        if m.flops is not None and m.bandwidth is not None:
            ms = groups[_board(d)]
            d = d.model_copy(update={"achieved_flops": _sig3(statistics.median(m.flops for m in ms)),
                                     "achieved_bandwidth": _sig3(statistics.median(m.bandwidth for m in ms))})
        out.append(d)
    return out, notes


def _board(d: DeviceSpec) -> tuple:
    return d.kind, d.vendor, d.model, d.flops, d.mem_bandwidth


# -- the measurements ---------------------------------------------------------------------------------

def _measure(xp: Any, sync: Callable[[], Any], side: int, nbytes: int, dtype, budget_s: float):
    """``(FLOP/s, bytes/s)``: the GEMM, then the copy, each with half the budget (one at a time in memory)."""
    return _gemm_rate(xp, sync, side, dtype, budget_s / 2), _copy_rate(xp, sync, nbytes, budget_s / 2)


def _gemm_rate(xp, sync, side, dtype, budget_s):
    a = xp.ones((side, side), dtype=dtype)
    b = xp.ones((side, side), dtype=dtype)
    return 2.0 * side ** 3 / _best(lambda: a @ b, sync, budget_s)


def _copy_rate(xp, sync, nbytes, budget_s):
    src = xp.ones(nbytes // 4, dtype=np.float32)
    dst = xp.empty_like(src)

    def copy():
        dst[...] = src

    return 2.0 * src.nbytes / _best(copy, sync, budget_s)


def _best(run: Callable[[], Any], sync: Callable[[], Any], budget_s: float) -> float:
    """Seconds of the fastest of up to :data:`REPEATS` timed runs within ``budget_s`` (after a warm-up)."""
    run()
    sync()
    best, spent, k = float("inf"), 0.0, 0
    while k < REPEATS and (k == 0 or spent < budget_s):
        t = time.perf_counter()
        run()
        sync()
        dt = time.perf_counter() - t
        best, spent, k = min(best, dt), spent + dt, k + 1
    return max(best, 1e-9)


def _no_sync():
    return None


def _sig3(x: float) -> float:
    return float(f"{x:.3g}")


_FLOP_UNITS = (("PFLOP/s", 1e15), ("TFLOP/s", 1e12), ("GFLOP/s", 1e9), ("MFLOP/s", 1e6))
_RATE_UNITS = (("TB/s", 1e12), ("GB/s", 1e9), ("MB/s", 1e6))


def _share(got: float, peak: float | None, units) -> str:
    """``"49.1 TFLOP/s (73% of the 67 peak)"``: the unit the measured figure reads best in."""
    unit, scale = next(((u, f) for u, f in units if got >= f), units[-1])
    text = f"{got / scale:.3g} {unit}"
    if peak:
        text += f" ({got / peak:.0%} of the {peak / scale:.3g} peak)"
    return text
