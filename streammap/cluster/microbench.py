"""Micro-benchmarks: what each device of this machine achieves, measured once at discovery.

The cost model's first estimates (before any ``streammap profile``) are rooflines plus a fixed
cost per call, ``call_overhead + max(flops / F, bytes / B(working set))``. With F and B the
datasheet peaks that discovery reads, every estimate is optimistic by however far real kernels
stay below the peak, and a task of a few microseconds of work is all overhead; so
``streammap discover`` (and ``streammap doctor``) run five short measurements per device and
record what was *achieved* beside the peak figures, in the cluster file's optional
``achieved_flops``, ``gemm_curve``, ``achieved_other_flops``, ``achieved_elementwise_flops``, ``achieved_fft_flops``,
``achieved_random_flops``, ``achieved_transcendental_flops``, ``achieved_scan_flops``, ``fft_curve``, ``rfft_curve``,
``achieved_bandwidth``, ``bandwidth_curve`` and ``call_overhead`` fields, which the cost model
prefers when present.

What is measured
----------------
``achieved_flops``, ``gemm_curve``
    Square matrix products ``a @ b`` at each side of :data:`GEMM_SIDES` (``2 n³`` FLOP each):
    64, 128 and 256 on the CPU, the sizes of the tiles and batches tasks multiply. The dtype
    is the one the device's peak figure is quoted in: float32 on GPUs (discovery's FP32 peak),
    float64 on the CPU (its FP64 AVX2 peak); the cost model scales the rate for tasks whose
    clauses prove a narrower element (:func:`streammap.cost.model.compute_rates`). NumPy's BLAS
    uses all the cores this process may use, as a CPU task of a plan does. ``gemm_curve`` lists
    ``[side, FLOP/s]`` for every side, made non-decreasing (:func:`monotone_curve`): a small tile
    multiplies well below a big product's rate, and a larger product that measured slower than a
    smaller one was disturbed, not slow. ``achieved_flops`` is the curve's rate at
    :data:`GEMM_SIDE`. The non-decreasing curve is what keeps the figure stable on a loaded
    machine: on a 2-core VM shared with other jobs the 2-thread product of side 256 measured
    anywhere between 0.8 and 57 GFLOP/s from one discovery to the next (its threads wait for each
    other when another process holds a core), while the products of side 64 and 128, a fraction
    of a millisecond each and run by OpenBLAS on one thread, measured 35-50 in every discovery.
``factor_curve``
    A Cholesky factorisation ``linalg.cholesky(a)`` of a symmetric positive definite matrix at
    the sides of :data:`FACTOR_SIDES` in the same dtype (``n³/3`` FLOP each), non-decreasing the same way: the rate of
    kernels whose compute class is ``"lapack"`` (factorisations and solvers). At the sides tasks
    factorise, LAPACK runs far below the product's rate (~4 against ~40 GFLOP/s at side 128 on a
    2-core EPYC VM), so tiles factorised at the GEMM's rate were estimated 10x too fast.
``achieved_other_flops``
    The rate of work that is not a matrix product, which every kernel not multiplying matrices
    got before the classes below (:mod:`streammap.directives.kernel_class`): NumPy (or CuPy) runs an FFT, a
    transcendental ufunc or a random generator at a few percent of its GEMM rate (2-5% on a 2-core
    EPYC VM), so one rate for both kinds was wrong by 5-20x for one of them. A mix of
    :data:`OTHER_SIZE` elements: ``sin`` of float64s, a complex128 FFT and standard normal random
    numbers, with their FLOP counted as the README counts ``flops`` clauses (one per element of
    an elementwise function, transcendental or not, one per random number, ``5 n log2 n`` per
    FFT); the rate is their FLOP over the sum of their best times.
    It is the rate of kernels whose compute class is ``"mixed"`` (random numbers and
    transcendental functions in one body), and of the classes below in files without their figure.
``achieved_elementwise_flops``
    Plain element-wise arithmetic over as many float64s as the mix: ``a * x + b`` (two FLOP per
    element), a product ``x * y`` and a sum ``x + y`` (one each) and a selection
    ``where(abs(x) > c, x, y)`` (three: abs, compare, select), counted one FLOP per element of
    each operation as clauses count them; their FLOP over the sum of their best times: the rate of
    kernels whose compute class is ``"other"``. The mix priced them when "other" was the only
    class besides the products, but ``sin`` and random numbers cost 4-9 ns per element against
    ~0.3-1 ns for an addition, so arithmetic kernels (a Mandelbrot iteration, an FM
    demodulator's products) were estimated 2-2.5x slow. The arrays are the mix's size (512 KiB
    of float64s on a CPU), within the caches: the roofline still takes ``bytes / B`` when a
    task's arrays are bigger, so the rate must be the arithmetic's, not the memory's.
``fft_curve``, ``rfft_curve``, ``achieved_fft_flops``
    The FFTs kernels call, alone, at each working set of :data:`FFT_WORKING_SETS` (a transform's
    input and output bytes, as the cost model counts a task's working set): a complex FFT of
    ``ws / 32`` complex128s (``5 n log2 n`` FLOP; ``fft_curve``, the rate of kernels whose compute
    class is ``"fft"``) and a real pair ``irfft(rfft(x))`` of ``ws / 16`` float64s (``2.5 n log2 n``
    each, as the README counts a real transform; ``rfft_curve``, the rate of ``"rfft"`` kernels),
    each read at the task's working set, every dip between two faster points filled
    (:func:`unimodal_curve`). ``achieved_fft_flops`` is both transforms' FLOP over the
    sum of their times at the mix's length (:data:`OTHER_SIZE` points: the rate files without the
    curves give every FFT, as they measured it). An FFT runs several times faster per counted FLOP than ``sin`` or a random generator, so
    FFT-heavy kernels at the mix's rate were over-estimated 3-4x. Its rate also depends on its
    length: on a 2-core EPYC VM (1 MiB of L2 per core) 2-3 GFLOP/s at 16 KiB and ~5 at 64 KiB (a
    fixed cost per call of 5-10 microseconds that a short transform's FLOP do not hide), ~7 from
    256 KiB to 2 MiB, and at 4 MiB ~6 for the complex transform but ~3 for the real pair (its
    spectrum and work buffer push it out of L2 sooner). The runs are re-warmed before each timed run (below): a task's FFT reads
    the array its producer has just written (on arrays the round's other runs had evicted, ~10%
    slower). Measured in a fresh process without :func:`settle_allocator` the rate was ~3
    GFLOP/s, half the tasks' (the page faults of each result array), under which fm_radio's and
    fm_stream's FFT tasks were estimated 1.6-2x slow.
``achieved_random_flops``
    The mix's standard normal random numbers alone, one FLOP per number: the rate of kernels
    whose compute class is ``"random"``. A normal random number costs ~9 ns on a 2-core EPYC VM,
    more than ``sin`` (~8 ns) and several times a mix with an FFT in it, so kernels that draw
    random numbers at the mix's rate were under-estimated 2-3x.
``achieved_transcendental_flops``
    ``sin(2 x)`` and a power ``0.5 ** abs(x)`` over as many float64s, each counted two FLOP per
    element (the function and the operation that computes its argument), their FLOP over the
    sum of their best times: the rate of kernels whose compute class is ``"transcendental"``
    (the functions NumPy evaluates one element at a time through libm: ~8 ns per ``sin``, ~4 ns
    per ``**``, against ~0.2 ns per addition). A transcendental function rarely comes alone in
    a kernel: its argument is computed (a scaled angle, a distance), and a clause counts that
    operation as a FLOP too, so the rate of the bare functions (one FLOP per 6 ns) estimated the
    elementwise kernels that call them 2-3.6x slow on a 2-core EPYC VM (``RHO ** abs(p - q)``,
    three FLOP per element, ran in ~6 ns).
``achieved_scan_flops``
    Scans over as many float64s as the mix: ``cumsum(2 x)`` and ``cumprod(1 + e)``, each counted
    two FLOP per element (the scan and the operation that forms its input, as the transcendental
    rate counts ``sin(2 x)``), their FLOP over the sum of their best times: the rate of kernels
    whose compute class is ``"scan"``. Each element of a scan waits for the one before it, so NumPy
    runs it at ~3.3 ns per element against ~0.2 ns for an addition: at the element-wise rate a
    moving average built on ``cumsum`` was estimated 2.3-3.6x too fast.
``achieved_bandwidth``, ``bandwidth_curve``
    A streaming copy ``dst[...] = src`` at each size of :data:`COPY_SIZES` (GPU:
    :data:`GPU_COPY_SIZES`), the destination half a page after the source modulo 4 KiB
    (:func:`copy_pair`: at 16 bytes, where two arrays allocated one after the other from a
    settled heap lie, ``memcpy`` ran 15x slower); it reads and writes each byte once, so the rate is
    ``2 × size / time`` (the STREAM convention). ``achieved_bandwidth`` is the rate of the largest
    size (beyond any cache: the memory's rate); ``bandwidth_curve`` lists ``[working-set bytes,
    rate]`` for every size (the working set of a copy of n bytes is 2n), so that the cost model
    can give a task whose arrays stay in cache the rate of the cache, as the cache-aware
    roofline does [1]_: on a 2-core EPYC VM a copy within 512 KiB ran at ~100 GB/s, one of
    64 MiB at ~27 GB/s.
``call_overhead``
    Seconds a call of a minimal kernel takes: a Python function that adds 1 to an 8-element
    array (CuPy: launches that kernel and synchronizes), the median of :data:`CALL_REPEATS`
    calls. Every task pays it once (dispatch, allocation of the result, and on a GPU the launch
    and synchronization), however little work it does.

.. [1] A. Ilic, F. Pratas, L. Sousa, "Cache-aware Roofline model: Upgrading the loft", IEEE
   Computer Architecture Letters 13(1), 2014.

Each run (the GEMM, each part of the mix, each copy) runs once to warm up (BLAS threads, CuPy's
kernel cache and memory pool); then they take turns, one timed run of each per round, until
:data:`REPEATS` rounds or the time budget is spent, and each keeps its best run: the rate the
device *can* reach, as STREAM reports it (the least disturbed run on a shared machine; taking turns
means a burst of load slows one run of each, not all runs of one). Even so, the CPU GEMM is the
least stable figure on a loaded 2-core VM: a 2-thread BLAS product of side 256 ran at ~40-60
GFLOP/s, or at ~1 for spells of a second when another process held one core (its threads wait for
each other), so two discoveries a minute apart could differ by 50x before the curve's smaller
sides set its floor (:func:`monotone_curve`). The call overhead keeps the
median instead: it is a latency every task pays, and its best run is the rare one no other thread
interrupted. GPU runs are timed between ``synchronize()`` calls. The budget (:data:`BUDGET_S` per device, default) bounds the repeats,
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

import math
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from streammap.cluster.model import DeviceSpec
from streammap.optional import import_cupy

#: Side of the square GEMM whose rate is ``achieved_flops``: 256 on the CPU (34 MFLOP: about a
#: millisecond at tens of GFLOP/s, the size of a task's tile), 4096 on a GPU (137 GFLOP: a few ms
#: at tens of TFLOP/s).
GEMM_SIDE = {"cpu": 256, "gpu": 4096}
#: Sides of the GEMM curve (``gemm_curve``): the sizes of tiles and batches tasks multiply, up to
#: :data:`GEMM_SIDE` (larger products get its rate). Not 512 on the CPU: on a loaded 2-core VM its
#: 2-thread runs took 0.2-0.5 s each while a thread waited for a core, ate the budget (a discovery
#: took 5 s) and left BLAS threads spinning that slowed every other measurement of the round.
GEMM_SIDES = {"cpu": (64, 128, 256), "gpu": (1024, 2048, 4096)}
#: Sides of the Cholesky curve (``factor_curve``), the same.
FACTOR_SIDES = GEMM_SIDES
#: Elements of the "other" mix: 2^16 on the CPU (a task's block: about a millisecond per part),
#: 2^24 on a GPU (a few ms per part at its rate of such work).
OTHER_SIZE = {"cpu": 1 << 16, "gpu": 1 << 24}
#: Working sets (bytes of a transform's input and output) of the FFT curves (``fft_curve``,
#: ``rfft_curve``), a complex FFT of ws/32 points and a real pair of ws/16 at each. On the CPU two
#: short transforms (16 and 64 KiB: complex 2^9 and 2^11), whose fixed cost per call their few
#: FLOP do not hide; two within a core's L2 (256 KiB and 1 MiB); the mix's 2^16 points (2 MiB
#: complex, 1 MiB real); and one past L2 (4 MiB: complex 2^17, real 2^18), where a real pair ran
#: at half its in-cache rate on a 2-core EPYC VM. On a GPU 2^20 and 2^24 complex points, and the
#: real pair of 2^24. Larger transforms get the last rate: measuring further out took tens of
#: milliseconds a run on a loaded 2-core VM.
FFT_WORKING_SETS = {"cpu": (16 << 10, 64 << 10, 256 << 10, 1 << 20, 2 << 20, 4 << 20),
                    "gpu": (32 << 20, 256 << 20, 512 << 20)}
#: Bytes copied by the bandwidth tests, smallest first: on the CPU one size within a core's L2
#: cache, one within a typical L3 share, one beyond any cache; on a GPU one size big enough that
#: the launch is noise.
COPY_SIZES = (256 << 10, 4 << 20, 32 << 20)
GPU_COPY_SIZES = (512 << 20,)
#: The largest CPU copy (the ``achieved_bandwidth`` figure).
COPY_BYTES = COPY_SIZES[-1]
#: Calls timed for the call overhead (each a few microseconds).
CALL_REPEATS = 200
#: At most this many timed runs per measurement (after the warm-up): on a quiet device they take a few ms
#: each, and more of them give a shared machine more chances to show its real rate.
REPEATS = 20
#: Rounds run whatever the budget: on a loaded machine a few disturbed runs of the larger products
#: could spend the budget in one or two rounds, and a best of one or two was off by 10-30x (an FFT
#: at 0.17 GFLOP/s against 4 in the next discovery).
MIN_ROUNDS = 5
#: Seconds of timed runs per device, all measurements together (the warm-ups come on top).
BUDGET_S = 0.3
#: Bytes allocated and freed before the CPU is measured. glibc's ``malloc`` maps a block of more
#: than 128 KiB from the kernel afresh and returns it on ``free``, so each new result array pays a
#: page fault per 4 KiB page (~2.5 us each on a 2-core EPYC VM), until the program frees such a
#: block: ``free`` then raises the threshold to that block's size (up to 32 MiB) and later blocks
#: are reused from the heap. A program that runs tasks has long since freed one (its first
#: temporaries), but a fresh process that measures first has not, and measured a 2^16-point FFT
#: at half the rate the same FFT reached in a task (1.5 against 0.77 ms: the page faults of its
#: 1 MiB result), and the GEMM of side 256 and the element-wise runs (512 KiB results) slow the
#: same way. A no-op for allocators without that rule.
SETTLE_BYTES = 16 << 20
#: Device kinds measured with CuPy.
CUPY_KINDS = ("gpu", "dcu")


@dataclass(frozen=True)
class Measured:
    """What one device achieved: FLOP/s and bytes/s (``None`` when not measured), and why not."""

    flops: float | None = None
    bandwidth: float | None = None
    seconds: float = 0.0
    note: str = ""
    #: ``((working-set bytes, bytes/s), ...)`` of the copies, smallest first (``bandwidth`` is the last rate).
    curve: tuple[tuple[float, float], ...] = ()
    #: Seconds of a minimal kernel call (``None``: not measured).
    call_overhead: float | None = None
    #: FLOP/s of the "other" mix (not a matrix product; ``None``: not measured).
    other_flops: float | None = None
    #: FLOP/s of plain element-wise arithmetic (one per element of each operation; ``None``: not measured).
    elementwise_flops: float | None = None
    #: FLOP/s of FFTs at the largest working set of the curve (``5 n log2 n`` per transform; ``None``: not measured).
    fft_flops: float | None = None
    #: ``((working-set bytes, FLOP/s), ...)`` of the complex FFTs, smallest first.
    fft_curve: tuple[tuple[float, float], ...] = ()
    #: The same for the real pairs (``irfft(rfft(x))``).
    rfft_curve: tuple[tuple[float, float], ...] = ()
    #: FLOP/s of scans (``cumsum``, ``cumprod``), two per element with the operation forming their input.
    scan_flops: float | None = None
    #: FLOP/s of the mix's random numbers alone (one per number; ``None``: not measured).
    random_flops: float | None = None
    #: FLOP/s of ``sin`` and ``**`` (one per element; ``None``: not measured).
    transcendental_flops: float | None = None
    #: ``((matrix side, FLOP/s), ...)`` of the GEMMs, smallest first, non-decreasing (``flops`` is the rate at :data:`GEMM_SIDE`).
    gemm_curve: tuple[tuple[float, float], ...] = ()
    #: The same for Cholesky factorisations (``n³/3`` FLOP each).
    factor_curve: tuple[tuple[float, float], ...] = ()

    def describe(self, device: DeviceSpec) -> str:
        """``"cpu: GEMM 41.2 GFLOP/s (50% of the 83.1 peak), copy 23.4 GB/s (117% of the 20 peak) (measured in 0.41 s)"``."""
        if self.flops is None:
            return f"{device.name}: not measured ({self.note})"
        text = f"{device.name}: GEMM {_share(self.flops, device.flops, _FLOP_UNITS)}, "
        if self.other_flops is not None:
            text += f"other {_share(self.other_flops, None, _FLOP_UNITS)} ({self.other_flops / self.flops:.1%} of GEMM), "
        if self.elementwise_flops is not None:
            text += f"element-wise {_share(self.elementwise_flops, None, _FLOP_UNITS)}, "
        if self.fft_flops is not None:
            text += f"FFT {_share(self.fft_flops, None, _FLOP_UNITS)}, "
        if self.random_flops is not None:
            text += f"random {_share(self.random_flops, None, _FLOP_UNITS)}, "
        if self.transcendental_flops is not None:
            text += f"transcendental {_share(self.transcendental_flops, None, _FLOP_UNITS)}, "
        if self.scan_flops is not None:
            text += f"scan {_share(self.scan_flops, None, _FLOP_UNITS)}, "
        if self.factor_curve:
            text += f"Cholesky {_share(self.factor_curve[-1][1], None, _FLOP_UNITS)} (side {self.factor_curve[-1][0]:g}), "
        text += f"copy {_share(self.bandwidth, device.mem_bandwidth, _RATE_UNITS)}"
        if len(self.curve) > 1:
            text += " (in cache: " + ", ".join(f"{_size(n)} {_share(r, None, _RATE_UNITS)}"
                                               for n, r in self.curve[:-1]) + ")"
        if self.call_overhead is not None:
            text += f", call {self.call_overhead * 1e6:.3g} us"
        return text + f" (measured in {self.seconds:.2f} s)"


def measure_device(device: DeviceSpec, *, budget_s: float = BUDGET_S, cupy=None) -> Measured:
    """Measure one device with the library that would run its tasks (see the module docstring).

    Parameters
    ----------
    device : DeviceSpec
        As discovery lists it: ``kind`` chooses NumPy or CuPy, ``index`` the GPU.
    budget_s : float
        Seconds of timed runs, shared by the measurements.
    cupy : module, optional
        CuPy (tests pass a stand-in); default: :func:`streammap.optional.import_cupy`.
    """
    t0 = time.perf_counter()
    if device.kind == "cpu":
        xp, gpu, side, sizes, dtype, other_n = np, None, GEMM_SIDE["cpu"], COPY_SIZES, np.float64, OTHER_SIZE["cpu"]
    elif device.kind in CUPY_KINDS:
        xp = cupy if cupy is not None else import_cupy()
        if xp is None:
            return Measured(note="CuPy is not installed")
        gpu, side, sizes, dtype = device.index or 0, GEMM_SIDE["gpu"], GPU_COPY_SIZES, np.float32
        other_n = OTHER_SIZE["gpu"]
    else:
        return Measured(note=f"StreamMAP cannot execute on {device.kind} devices")
    try:
        if gpu is None:
            got = _measure(xp, _no_sync, "cpu", sizes, dtype, budget_s, other_n)
        else:
            with xp.cuda.Device(gpu) as gpu:
                got = _measure(xp, gpu.synchronize, "gpu", sizes, dtype, budget_s, other_n)
    except Exception as exc:          # noqa: BLE001 -- out of memory, a broken driver: a finding, not a crash
        return Measured(note=f"the measurement failed: {type(exc).__name__}: {exc}",
                        seconds=time.perf_counter() - t0)
    return Measured(flops=dict(got["gemm_curve"])[side], seconds=time.perf_counter() - t0, **got)


def calibrate_spec(devices: list[DeviceSpec], *, budget_s: float = BUDGET_S, cupy=None,
                   measure: Callable[..., Measured] | None = None) -> tuple[list[DeviceSpec], list[str]]:
    """``devices`` with ``achieved_flops``, ``achieved_bandwidth``, ``bandwidth_curve`` (when more
    than one size was copied) and ``call_overhead`` filled in, and one note each.

    Every device is measured once. Boards of one model (same kind, vendor, model and peak
    figures) all record the median of their measurements (figure by figure), so that the cost model keeps treating
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
            d = d.model_copy(update=_achieved(groups[_board(d)]))
        out.append(d)
    return out, notes


def _achieved(ms: list[Measured]) -> dict:
    """The cluster-file fields of a board model: the median of each figure over its boards."""
    fields = {"achieved_flops": _sig3(statistics.median(m.flops for m in ms)),
              "achieved_bandwidth": _sig3(statistics.median(m.bandwidth for m in ms))}
    sizes = [n for n, _ in ms[0].curve]
    if len(sizes) > 1 and all([n for n, _ in m.curve] == sizes for m in ms):
        fields["bandwidth_curve"] = [(n, _sig3(statistics.median(m.curve[k][1] for m in ms)))
                                     for k, n in enumerate(sizes)]
    overheads = [m.call_overhead for m in ms if m.call_overhead is not None]
    if overheads:
        fields["call_overhead"] = _sig3(statistics.median(overheads))
    others = [m.other_flops for m in ms if m.other_flops is not None]
    if others:
        fields["achieved_other_flops"] = _sig3(statistics.median(others))
    for attr, field in (("elementwise_flops", "achieved_elementwise_flops"),
                        ("fft_flops", "achieved_fft_flops"), ("random_flops", "achieved_random_flops"),
                        ("transcendental_flops", "achieved_transcendental_flops"),
                        ("scan_flops", "achieved_scan_flops")):
        got = [getattr(m, attr) for m in ms if getattr(m, attr) is not None]
        if got:
            fields[field] = _sig3(statistics.median(got))
    for key in ("gemm_curve", "factor_curve", "fft_curve", "rfft_curve"):
        sides = [n for n, _ in getattr(ms[0], key)]
        if sides and all([n for n, _ in getattr(m, key)] == sides for m in ms):
            fields[key] = [(n, _sig3(statistics.median(getattr(m, key)[k][1] for m in ms)))
                           for k, n in enumerate(sides)]
    return fields


def _board(d: DeviceSpec) -> tuple:
    return d.kind, d.vendor, d.model, d.flops, d.mem_bandwidth


# -- the measurements ---------------------------------------------------------------------------------

def _measure(xp: Any, sync: Callable[[], Any], kind: str, sizes: tuple[int, ...], dtype,
             budget_s: float, other_n: int) -> dict:
    """The :class:`Measured` fields of one device: the timed runs of every measurement interleaved
    within ``budget_s`` (:func:`_best_of_rounds`), then the call overhead (a few milliseconds,
    outside the budget). ``kind`` (``"cpu"`` or ``"gpu"``) chooses the matrix sides."""
    sides, factor_sides, fft_sets = GEMM_SIDES[kind], FACTOR_SIDES[kind], FFT_WORKING_SETS[kind]
    if xp is np:
        settle_allocator()
    runs = {("gemm", n): _gemm(xp, n, dtype) for n in sides}
    runs.update((("factor", n), _cholesky(xp, n, dtype)) for n in factor_sides)
    runs.update(_other_mix(xp, other_n))
    for ws in fft_sets:
        runs.update(_ffts(xp, ws))
    runs.update(_transcendentals(xp, other_n))
    runs.update(_scans(xp, other_n))
    runs.update(_elementwise(xp, other_n))
    runs.update((("copy", n), _copy(xp, n)) for n in sizes)
    rewarm = {*(("gemm", n) for n in sides), *(("factor", n) for n in factor_sides), *(("copy", n) for n in sizes[:-1]),
              *((kind, ws) for ws in fft_sets for kind in ("complex_fft", "real_fft_pair"))}
    best = _best_of_rounds(runs, sync, budget_s, rewarm=rewarm)
    curve = tuple((2.0 * n, 2.0 * n / best["copy", n]) for n in sizes)
    fft_curve = unimodal_curve([(float(ws), _fft_flops(ws // 32) / best["complex_fft", ws]) for ws in fft_sets])
    rfft_curve = unimodal_curve([(float(ws), _fft_flops(ws // 16) / best["real_fft_pair", ws]) for ws in fft_sets])
    mix_complex, mix_real = 32 * other_n, 16 * other_n      # the working sets of the mix's length
    return {"gemm_curve": monotone_curve([(n, 2.0 * n ** 3 / best["gemm", n]) for n in sides]),
            "factor_curve": monotone_curve([(n, n ** 3 / 3.0 / best["factor", n]) for n in factor_sides]),
            "other_flops": sum(_OTHER_FLOPS[k](other_n) for k in _OTHER_FLOPS) / sum(best[k] for k in _OTHER_FLOPS),
            "elementwise_flops": sum(_ELEMENTWISE_FLOPS.values()) * other_n / sum(best[k] for k in _ELEMENTWISE_FLOPS),
            "fft_flops": 2 * _fft_flops(other_n) / (best["complex_fft", mix_complex] + best["real_fft_pair", mix_real]),
            "fft_curve": fft_curve, "rfft_curve": rfft_curve,
            "random_flops": _OTHER_FLOPS["normal"](other_n) / best["normal"],
            "transcendental_flops": 2.0 * 2.0 * other_n / (best["sin_of_product"] + best["power_of_abs"]),
            "scan_flops": 2.0 * 2.0 * other_n / (best["cumsum_of_product"] + best["cumprod_of_sum"]),
            "curve": curve, "bandwidth": curve[-1][1], "call_overhead": _call_overhead(xp, sync)}


def settle_allocator(nbytes: int = SETTLE_BYTES) -> None:
    """Allocate and free ``nbytes``, so that the C allocator serves the measurements' results as it
    serves a running program's tasks (see :data:`SETTLE_BYTES`). A run does the same before its
    first task (:mod:`streammap.runtime.warm`), so its tasks meet the rates measured here."""
    np.empty(nbytes, dtype=np.uint8)


def monotone_curve(points) -> tuple[tuple[float, float], ...]:
    """``((side, rate), ...)`` with each rate raised to the best rate of any smaller side (a running maximum).

    A larger product is never slower per FLOP than a smaller one on the same BLAS (it has more
    work per byte and per thread hand-off), so a larger side that measured slower was disturbed:
    on a loaded 2-core VM the 2-thread products of side 256 and more ran at ~1 GFLOP/s while one
    of the threads waited for a core, those of side 64 and 128 (a fraction of a millisecond,
    single-threaded in OpenBLAS) at ~40-50 in every discovery. The smaller sides' rates are the
    floor that keeps the curve stable from one discovery to the next.

    >>> monotone_curve([(64, 40e9), (256, 1e9), (512, 60e9)])
    ((64, 40000000000.0), (256, 40000000000.0), (512, 60000000000.0))
    """
    out, top = [], 0.0
    for side, rate in points:
        top = max(top, rate)
        out.append((side, top))
    return tuple(out)


def unimodal_curve(points) -> tuple[tuple[float, float], ...]:
    """``((size, rate), ...)`` with every dip filled: each rate raised to the lower of the best rates
    at or below its size and at or above it.

    An FFT's rate per FLOP rises with its length while a fixed cost per call dominates, then falls
    once its arrays leave the cache: one peak. A point slower than a point on each side of it was
    disturbed (on a loaded 2-core VM a real pair of 2 MiB measured 1.8 GFLOP/s between 6.8 at
    1 MiB and 2.7 at 4 MiB, and priced FFTs of that size 3x slow); it gets the lower neighbour's
    rate. A disturbed point at either end cannot be told from the curve's shape and stays.

    >>> unimodal_curve([(16, 2.0), (64, 6.0), (256, 1.0), (1024, 3.0)])
    ((16, 2.0), (64, 6.0), (256, 3.0), (1024, 3.0))
    """
    rates = [r for _, r in points]
    return tuple((n, min(max(rates[: k + 1]), max(rates[k:]))) for k, (n, _) in enumerate(points))


def _gemm(xp, side, dtype):
    a = xp.ones((side, side), dtype=dtype)
    b = xp.ones((side, side), dtype=dtype)
    return lambda: a @ b


def _cholesky(xp, side, dtype):
    """The Cholesky factorisation of a symmetric positive definite matrix of ``side`` (``n³/3`` FLOP)."""
    a = xp.ones((side, side), dtype=dtype) + side * xp.eye(side, dtype=dtype)
    return lambda: xp.linalg.cholesky(a)


#: FLOP of each part of the "other" mix for n elements, counted as the README counts ``flops``
#: clauses: one per element of an elementwise function (a transcendental one too), one per random
#: number, ``5 n log2 n`` for a complex FFT of n points.
_OTHER_FLOPS = {"sin": lambda n: float(n), "fft": lambda n: 5.0 * n * math.log2(n),
                "normal": lambda n: float(n)}


def _other_mix(xp, n):
    """The runs of the "other" mix over ``n`` elements: ``sin`` of float64s, an FFT of complex128s
    and standard normal random numbers (NumPy's Generator; CuPy's module-level generator)."""
    x = xp.linspace(0.0, 1.0, n)
    z = x + 1j * x
    rng = np.random.default_rng(0) if xp is np else xp.random
    return {"sin": lambda: xp.sin(x), "fft": lambda: xp.fft.fft(z),
            "normal": lambda: rng.standard_normal(n)}


def _ffts(xp, working_set):
    """The two runs of the FFT curve at ``working_set`` bytes (input and output): a complex FFT of
    ``working_set / 32`` complex128s and a real FFT and its inverse over ``working_set / 16`` float64s."""
    n = working_set // 16
    y = xp.sin(xp.linspace(0.0, 100.0, n))
    z = y[: n // 2] + 1j * y[n // 2:]
    return {("complex_fft", working_set): lambda: xp.fft.fft(z),
            ("real_fft_pair", working_set): lambda: xp.fft.irfft(xp.fft.rfft(y), n=n)}


def _fft_flops(n: int) -> float:
    """FLOP of a complex FFT of ``n`` points, or of a real pair of ``n`` (``2.5 n log2 n`` per real
    transform, as the README counts them): ``5 n log2 n``."""
    return 5.0 * n * math.log2(n)


def _scans(xp, n):
    """The runs of the scan rate over ``n`` float64s, each two FLOP per element: ``cumsum(2 x)`` and
    ``cumprod(1 + e)`` (``e`` within a millionth of 0, so the running product stays near 1: no
    overflow, no subnormal numbers, which would time something else)."""
    x = xp.linspace(-8.0, 8.0, n)
    e = xp.linspace(-1e-6, 1e-6, n)
    return {"cumsum_of_product": lambda: xp.cumsum(2.0 * x), "cumprod_of_sum": lambda: xp.cumprod(1.0 + e)}


def _transcendentals(xp, n):
    """The runs of the transcendental rate over ``n`` float64s, each two FLOP per element:
    ``sin(2 x)`` and ``0.5 ** abs(x)`` (``RHO ** abs(p - q)``: ``pow`` per element)."""
    x = xp.linspace(-8.0, 8.0, n)
    return {"sin_of_product": lambda: xp.sin(2.0 * x), "power_of_abs": lambda: 0.5 ** xp.abs(x)}


#: FLOP per element of each run of the element-wise rate, one per operation as clauses count them.
_ELEMENTWISE_FLOPS = {"axpb": 2, "product": 1, "sum": 1, "select": 3}


def _elementwise(xp, n):
    """The runs of the element-wise rate over ``n`` float64s (:data:`_ELEMENTWISE_FLOPS` per element):
    ``a * x + b``, ``x * y``, ``x + y`` and ``where(abs(x) > 0.5, x, y)``."""
    x = xp.linspace(-1.0, 1.0, n)
    y = xp.linspace(2.0, 3.0, n)
    return {"axpb": lambda: 1.5 * x + 0.25, "product": lambda: x * y, "sum": lambda: x + y,
            "select": lambda: xp.where(xp.abs(x) > 0.5, x, y)}


def _copy(xp, nbytes):
    src, dst = copy_pair(xp, nbytes)

    def copy():
        dst[...] = src

    return copy


#: Bytes between the end of a copy's source and the start of its destination (:func:`copy_pair`):
#: half a 4 KiB page, so that the destination lies half a page after the source modulo 4096.
COPY_GAP = 2048


def copy_pair(xp, nbytes: int):
    """``(src, dst)``: two float32 arrays of ``nbytes`` each (a multiple of 4 KiB), the destination
    :data:`COPY_GAP` bytes past the source's end, in one allocation.

    Where the two lie relative to each other modulo a 4 KiB page decides the copy's speed: on a
    2-core EPYC VM, a 256 KiB ``dst[...] = src`` (glibc's ``memcpy``) ran at ~60 GB/s at every
    distance tried but one, 16 bytes, where it ran at ~4 GB/s (a store to ``dst`` looks, to the
    core, like it may overwrite the ``src`` bytes loaded just after: "4K aliasing"). Two arrays
    allocated one after the other from the heap are exactly that far apart (a page multiple plus
    malloc's 16-byte header), which is where they were once discovery settled the allocator
    (:func:`settle_allocator`): the in-cache points of the bandwidth curve read 3.8-5.7 GB/s, and
    tasks whose arrays fit in the caches (``small_kernels``' rods, ``mandelbrot``'s ``escape``) were
    estimated 5-8x slow. Arrays a kernel computes on are not copied by ``memcpy``, and two
    independent arrays are rarely at that distance, so the curve is measured half a page apart.
    """
    n = nbytes // 4
    gap = COPY_GAP // 4
    pair = xp.ones(2 * n + gap, dtype=np.float32)
    return pair[:n], pair[n + gap:]


def _call_overhead(xp, sync, repeats: int = CALL_REPEATS) -> float:
    """Median seconds of a minimal kernel call: a function adding 1 to 8 numbers, synchronized."""
    tiny = xp.ones(8, dtype=np.float64)

    def kernel(a):
        return a + 1.0

    kernel(tiny)
    sync()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        kernel(tiny)
        sync()
        times.append(time.perf_counter() - t)
    return max(statistics.median(times), 1e-9)


def _best_of_rounds(runs: dict, sync: Callable[[], Any], budget_s: float, rewarm=frozenset()) -> dict:
    """Seconds of the fastest timed run of each of ``runs``, after one warm-up run each.

    The runs take turns, one timed run of each per round, for up to :data:`REPEATS` rounds, until
    the time they took passes ``budget_s`` (:data:`MIN_ROUNDS` rounds at least): a burst of load from another
    process then slows one run of every measurement, not every run of one of them, and each
    keeps its least disturbed run. The runs named in ``rewarm`` run once more, untimed, just
    before each timed run: the copies meant to stay in cache, whose arrays the other runs of the
    round evicted, the FFTs, whose task reads an array its producer has just written, and the GEMM, whose BLAS threads went to sleep during the other runs (waking
    them on a loaded 2-core VM took tens of milliseconds: the GEMM measured ~1 GFLOP/s cold against
    ~40 warm, and a task's product runs warm after the products before it).
    """
    for run in runs.values():
        run()
        sync()
    best = dict.fromkeys(runs, math.inf)
    spent, k = 0.0, 0
    while k < REPEATS and (k < MIN_ROUNDS or spent < budget_s):
        for key, run in runs.items():
            if key in rewarm:
                run()
                sync()
            t = time.perf_counter()
            run()
            sync()
            dt = time.perf_counter() - t
            best[key], spent = min(best[key], dt), spent + dt
        k += 1
    return {key: max(dt, 1e-9) for key, dt in best.items()}


def _no_sync():
    return None


def _sig3(x: float) -> float:
    return float(f"{x:.3g}")


_FLOP_UNITS = (("PFLOP/s", 1e15), ("TFLOP/s", 1e12), ("GFLOP/s", 1e9), ("MFLOP/s", 1e6))
_RATE_UNITS = (("TB/s", 1e12), ("GB/s", 1e9), ("MB/s", 1e6))


def _size(n: float) -> str:
    """``"512 KiB"``, ``"8 MiB"``: a working set in the binary unit it reads best in."""
    unit, scale = next(((u, f) for u, f in (("GiB", 1 << 30), ("MiB", 1 << 20)) if n >= f), ("KiB", 1 << 10))
    return f"{n / scale:.3g} {unit}"


def _share(got: float, peak: float | None, units) -> str:
    """``"49.1 TFLOP/s (73% of the 67 peak)"``: the unit the measured figure reads best in."""
    unit, scale = next(((u, f) for u, f in units if got >= f), units[-1])
    text = f"{got / scale:.3g} {unit}"
    if peak:
        text += f" ({got / peak:.0%} of the {peak / scale:.3g} peak)"
    return text
