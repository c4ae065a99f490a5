"""The cost model: how long each task takes on each device, how big it is, and what moving data costs.

A :class:`CostModel` turns the task graph (IR, :mod:`streammap.ir`) and a
:class:`~streammap.cluster.model.Cluster` into flat NumPy arrays, so that mappers never touch networkx or
node dictionaries in their inner loops. Everything is indexed by *task position* (the order of
``graph.nodes``; ``cost.tasks[i]`` is the id, ``cost.pos[id]`` the position) and *device position*
(the order of ``cluster.devices``).

State (all read-only after construction)
----------------------------------------
``class_time[T, C]``, ``device_class[D]``, ``class_count[C]``
    Seconds of task t on device d are ``class_time[t, device_class[d]]``; ``inf`` where t cannot
    run on d (its ``device`` clause does not admit d, or it has ``times`` with no entry for d and
    no ``runtime`` to fall back on). Devices that every estimate treats alike (same kind, vendor,
    model, speed, rates and launch overhead) form a *class* and share one column; class
    ``device_class[d]`` has ``class_count[c]`` devices. A generated 1,024-device cluster has a
    handful of classes, so a million tasks take C columns of float64 (tens of MiB), not the
    8 GiB of a task x device matrix.
``time[T, D]``
    The same times per device, ``class_time[:, device_class]``, built on first access and kept
    (a property). Mappers for large graphs never touch it: they read a task's row with
    :meth:`CostModel.time_rows` (a gather of its C class times), the times of an assignment with
    :meth:`CostModel.times_on`, and per-task reductions (:meth:`CostModel.mean_time`,
    :meth:`CostModel.min_time`) over the classes. A view made by :meth:`CostModel.with_times`
    holds its own dense ``time`` (times that may break the classes' symmetry).
``mem[T]``, ``out[T]``
    Bytes held while running, and bytes of the output kept after finishing while consumers remain
    (0 for a task without successors: an output nobody consumes leaves at once).
``share[T]``, ``shareable[D]``
    The ``share`` clause: the fraction of its device's compute a task needs (1 by default);
    :mod:`streammap.placement.sharing` co-locates tasks whose shares fit, on the devices that can be shared
    by fraction (accelerators). A CPU device runs one task at a time: its NumPy kernels hold the
    GIL between calls, so co-located tasks would take turns, not run side by side, and a share
    there counts as the whole device (:meth:`CostModel.share_on`).
``capacity[D]``
    Device memory times the cluster's ``memory_oversubscription`` (``inf`` when not given).
``bw[D, D]``, ``lat[D, D]``, ``inv_bw[D, D]``
    Link bandwidth, latency and ``1 / bw`` (0 on the diagonal), from
    :meth:`Cluster.link_matrices`: per device pair, never per edge (a transfer's time is computed
    when a mapper needs it), so 1,024 devices take 24 MiB whatever the graph.
``node_of[D]``
    Index of each device's node (devices with equal values share a node link).
``pred_ptr``, ``pred_idx``, ``pred_bytes``, ``pred_dst`` (and ``succ_ptr``, ``succ_idx``, ``succ_bytes``)
    The edges in compressed sparse row form: the predecessors of task t are
    ``pred_idx[pred_ptr[t]:pred_ptr[t+1]]``, carrying ``pred_bytes`` of the same slice
    (``pred_dst`` repeats t for each of them); sorted by position, so every loop over them is
    deterministic. ``n_pred[T]`` and ``n_succ[T]`` are the degrees.
``levels``, ``topo``, ``topo_index``
    Tasks grouped by depth (sources first); ``topo`` is their concatenation, a topological order,
    and ``topo_index[t]`` the place of t in it.
``source[T]``
    Where each estimate came from: ``"history"``, ``"clauses"``, ``"times"``, ``"runtime"`` or
    ``"default"`` (the best one used on any device); ``compile`` reports it per task.

Policy: time of task t on device d
----------------------------------
In this order of preference (``design.md``, section *The cost model*):

1. ``history(kernel, device_model, task_attrs)`` when a history hook is given and it returns a
   number: a measured time, as StarPU's performance models do [1]_;
2. a roofline estimate [2]_ when the task has ``flops`` or ``bytes`` clauses:
   ``launch(d) + max(flops / F, bytes / B(m))``, where F and B are the rates the device
   *achieved* in discovery's micro-benchmarks (``achieved_flops``: a GEMM, ``achieved_bandwidth``:
   a streaming copy; :mod:`streammap.cluster.microbench`) when the cluster file records them, else
   its peak ``flops`` and ``mem_bandwidth`` (``Device.compute_rate``, ``Device.memory_rate``).
   F depends on the task's ``compute_class`` (:mod:`streammap.directives.kernel_class`) and is
   picked by :func:`compute_rates`: a kernel that multiplies matrices (``"blas"``) gets the GEMM's
   rate at the task's own matrix side (the measured ``gemm_curve``; on a CPU up to twice that for
   float32, as far as the task's ``bytes`` prove it), one that factorises or solves
   (``"lapack"``) the Cholesky curve's (``factor_curve``) at its side, a kernel that calls an FFT
   (``"fft"``) the rate of the device's measured FFT curve at the task's working set (``fft_curve``,
   ``Device.fft_rate_at``; else ``achieved_fft_flops``, else its other rate), one whose FFTs are
   all real (``"rfft"``) the real transforms' curve (``rfft_curve``), one that calls a
   scan (``"scan"``: ``cumsum``, ``cumprod``) the measured scan rate, a Gram product
   (``"gram"``, ``l @ l.T``) half the GEMM's rate at its full product's side, kernels that draw
   random numbers or evaluate ``sin``/``**`` (``"random"``, ``"transcendental"``) the measured
   rates of those (else the other rate), one that does both (``"mixed"``) the rate of the
   measured mix of ``sin``, an FFT and random numbers (``achieved_other_flops``), any other
   (``"other"``: plain element-wise arithmetic, reductions) the device's
   ``achieved_elementwise_flops``, else ``achieved_other_flops``, else a fixed fraction of the
   GEMM rate (``Device.rate_for``); a task
   of no class (imported workflows) the GEMM's, as before the classes existed.
   B depends on the task's working set m (``mem`` below) when the file records the copy's
   ``bandwidth_curve``: a task whose arrays stay in cache gets the cache's rate, read off the
   curve (``Device.memory_rate_at``; the cache-aware roofline [3]_). Kept by measurement: on five
   runs of ``benchmarks/estimate_accuracy.py --first-estimate`` it never made the pooled error
   worse than the largest copy's (DRAM) rate for every size, and better in three;
3. ``times[d.model]``, else ``times[d.kind]``, else ``runtime / d.speed`` (imported workflows; this
   is exactly the benchmark model of ``shared/benchmarks/README.md``);
4. otherwise the launch overhead alone (a task with no estimate at all).

The launch overhead is the fixed cost of a call every task pays however little work it does
(Python's call and NumPy's dispatch and allocation; a kernel launch and synchronization on a
GPU): the device's measured ``call_overhead`` when the cluster file records it (discovery's
micro-benchmark), else :data:`LAUNCH_OVERHEAD` by device kind, :data:`DEFAULT_LAUNCH_OVERHEAD`
for every other (accelerator-like) kind (the figures files written before calibration measured
it get). The ``share`` and ``split`` clauses do not change the
estimate: a task with ``share=s`` is taken to use at most s of its device, so it runs as long
co-located as alone (:mod:`streammap.placement.sharing`).

Memory: ``mem`` is the task's ``mem`` attribute when set, else its input bytes (sum of incoming
edge bytes) plus its output bytes. Output bytes are the task's ``out`` attribute when set, else the
largest outgoing edge (in a node-link graph every consumer receives the same result, so the union
of what the consumers need is the largest of them). Importers of WfCommons traces set both
attributes themselves (``memoryInBytes`` and file unions).

Transfers: 0 on one device, else ``lat + bytes / bw`` of the link between the two devices (the
node's link inside a node, the cluster network between nodes), with no contention.

Derived views
-------------
Two methods give a new model that shares the graph, the task arrays and the edges with its parent
and differs only where it says (shallow copies: nothing is rebuilt, the parent is unchanged):

:meth:`CostModel.restrict` keeps a subset of the devices. Every per-device attribute is sliced,
the attributes and their device axes being listed once, in :data:`DEVICE_AXES` (a test checks that
every per-device array of a model is listed there), and the device classes are renumbered (the
dense ``time``, when the model holds one, is sliced with them).
:meth:`CostModel.with_times` replaces the time matrix (a pinned task, a slowed or lost device,
shares as work): with new class times, or with every device its own class when a change breaks
the symmetry of a class.

The module also gives :func:`lower_bound`, the bound every mapper is reported against, and the
stronger ones :func:`combined_bound` takes the largest of: :func:`fork_join_bound`,
:func:`fan_out_bound` and the transfer-aware :func:`comm_path_bound` and :func:`crossing_bound`
(:func:`transfer_bound`), each a proven lower bound on the makespan of every plan.

References
----------
.. [1] C. Augonnet, S. Thibault, R. Namyst, P.-A. Wacrenier, "StarPU: a unified platform for task
   scheduling on heterogeneous multicore architectures", Concurrency and Computation: Practice
   and Experience 23(2), 2011 (history-based performance models).
.. [2] S. Williams, A. Waterman, D. Patterson, "Roofline: an insightful visual performance model
   for multicore architectures", Communications of the ACM 52(4), 2009.
.. [3] A. Ilic, F. Pratas, L. Sousa, "Cache-aware Roofline model: Upgrading the loft", IEEE
   Computer Architecture Letters 13(1), 2014.
"""

from __future__ import annotations

import contextlib
import copy
import math
from typing import Callable, Mapping, Optional

import networkx as nx
import numpy as np

from streammap.cluster.model import (
    BLAS_CLASS,
    FFT_CLASS,
    GRAM_CLASS,
    LAPACK_CLASS,
    MIXED_CLASS,
    OTHER_CLASS,
    RANDOM_CLASS,
    RFFT_CLASS,
    SCAN_CLASS,
    TRANSCENDENTAL_CLASS,
    Cluster,
    Device,
)
from streammap.errors import StreamMapError
from streammap.io.bulk import gc_paused

#: Launch overhead in seconds by device kind (a kernel launch, or a thread hand-off on a CPU).
LAUNCH_OVERHEAD = {"cpu": 2e-6}
#: Launch overhead of every kind not in :data:`LAUNCH_OVERHEAD` (GPU-like accelerators).
DEFAULT_LAUNCH_OVERHEAD = 10e-6

#: The possible values of :attr:`CostModel.source`, best first.
SOURCES = ("history", "clauses", "times", "runtime", "default")

#: Every per-device attribute of a :class:`CostModel` (an array), by name: the axes indexed by device
#: position. :meth:`CostModel.restrict` slices each of them; a new per-device array must be listed
#: here. ``devices`` (the list) and ``n_devices`` are per-device too, and kept beside them; so is the
#: dense ``time`` when a model holds one (it is derived from ``class_time`` and ``device_class``).
DEVICE_AXES: dict[str, tuple[int, ...]] = {
    "capacity": (0,), "shareable": (0,), "node_of": (0,), "device_class": (0,),
    "bw": (0, 1), "lat": (0, 1), "inv_bw": (0, 1),
}

#: Signature of the history hook: ``(kernel, device_model, task_attrs) -> seconds or None``.
History = Callable[[str, str, Mapping], Optional[float]]


def launch_overhead(device: Device) -> float:
    """Seconds added to every roofline estimate on ``device``: its measured ``call_overhead``,
    else :data:`LAUNCH_OVERHEAD` by kind."""
    if device.call_overhead is not None:
        return device.call_overhead
    return LAUNCH_OVERHEAD.get(device.kind, DEFAULT_LAUNCH_OVERHEAD)


#: Bytes of one element of the dtype a device's GEMM was measured in (``gemm_curve``,
#: :mod:`streammap.cluster.microbench`): float64 on a CPU, float32 on every other kind.
GEMM_ITEMSIZE = {"cpu": 8}
DEFAULT_GEMM_ITEMSIZE = 4


def compute_rates(devices: list[Device], flops: np.ndarray, nbytes: np.ndarray, blas: np.ndarray,
                  other: np.ndarray, fft: np.ndarray, lapack: np.ndarray, *, gram: np.ndarray | None = None,
                  random: np.ndarray | None = None, transcendental: np.ndarray | None = None,
                  mixed: np.ndarray | None = None, scan: np.ndarray | None = None,
                  rfft: np.ndarray | None = None, working_set: np.ndarray | None = None) -> np.ndarray:
    """FLOP/s that each task's ``flops`` run at on each device, shape ``(tasks, devices)``.

    ``blas``, ``other`` and ``fft`` mark the tasks of those compute classes. ``"other"`` and
    ``"fft"`` tasks get the device's ``elementwise_compute_rate`` (plain arithmetic; the "other"
    mix in files without it) and ``fft_compute_rate``, tasks of no
    class (imported workflows) its ``compute_rate``, as before the classes existed. A ``"blas"``
    task multiplies matrices and gets the GEMM rate at its own size: its square-equivalent
    side ``n = (flops / 2) ** (1/3)`` (a product of side n is ``2 n³`` FLOP) read off the
    device's ``gemm_curve`` (``Device.gemm_rate_at``: small tiles multiply well below a big
    product's rate, 40 against 80 GFLOP/s at sides 64 and 512 on a 2-core VM).

    The element size counts too: a CPU multiplies float32 at twice the float64 rate it was
    measured in (twice the lanes per vector instruction). The clauses bound it: a product of
    ``2 m k n`` FLOP moves at least ``w (mk + kn + mn) >= 3 w n²`` bytes (equality for a square
    one), so ``w_max = bytes / (3 n²)`` bounds the task's element size from above, and the rate
    is scaled by ``measured itemsize / w_max``, clipped to ``[1, measured itemsize / 4]``: never
    slower than the measured dtype, never faster than float32, and only for what the bound
    proves (a rectangular float32 product is credited less than 2x, a float64 one nothing).
    GPUs were measured in float32 and are not scaled. A task without ``bytes`` gets the curve's rate.

    A ``"lapack"`` task (a factorisation or solver) gets the rate of the device's Cholesky curve
    (``Device.factor_rate_at``) at the side of a factorisation of its ``flops``:
    ``n = (3 flops) ** (1/3)`` (``n³/3`` FLOP each).

    A ``"gram"`` task multiplies an array by its own transpose (``l @ l.T``): its clause counts
    the symmetric update's ``n² k`` (BLAS ``syrk``), but NumPy runs the full product, ``2 n² k``
    FLOP, so the task runs at half the GEMM curve's rate read at the full product's side
    ``n = flops ** (1/3)``, scaled for the element size as a ``"blas"`` task is.
    ``"random"`` and ``"transcendental"`` tasks get the device's ``random_compute_rate`` and
    ``transcendental_compute_rate``, ``"mixed"`` tasks (both in one body) the mix's
    ``other_compute_rate`` (``gram``, ``random``, ``transcendental``, ``mixed``: masks like the
    others; ``None``, no such task).

    An ``"fft"`` task runs at the device's FFT curve read at its ``working_set`` (bytes of its
    inputs and output, ``CostModel.mem``; ``Device.fft_rate_at``): a transform whose arrays stay in
    the core's cache runs 2-3x faster per counted FLOP than one that spills out of it. Without
    ``working_set`` (or without a curve) every FFT task gets ``fft_compute_rate``. An ``"rfft"``
    task (``rfft``, a mask; its FFTs are all real) reads the real transforms' curve the same way
    (``Device.rfft_rate_at``). A ``"scan"`` task (``scan``, a mask) gets ``scan_compute_rate``.
    """
    none = np.zeros(flops.shape, dtype=bool)
    gram = none if gram is None else gram
    random = none if random is None else random
    transcendental = none if transcendental is None else transcendental
    mixed = none if mixed is None else mixed
    scan = none if scan is None else scan
    rfft = none if rfft is None else rfft
    # The square-equivalent side of the product each task's flops describe: 2 n³ for a product,
    # 2 n³ executed for a Gram product whose clause counts n³.
    side = np.where(gram, np.cbrt(np.maximum(flops, 1.0)), np.cbrt(np.maximum(flops, 1.0) / 2.0))
    w_max = np.where(nbytes > 0, nbytes / (3.0 * side ** 2), np.inf)
    cols = []
    for d in devices:
        ref = GEMM_ITEMSIZE.get(d.kind, DEFAULT_GEMM_ITEMSIZE)
        product = d.gemm_rate_at(side) * np.clip(ref / w_max, 1.0, ref / 4.0)
        rate = np.where(blas, product, d.compute_rate)
        rate = np.where(gram, product / 2.0, rate)
        rate = np.where(lapack, d.factor_rate_at(np.cbrt(3.0 * np.maximum(flops, 1.0))), rate)
        rate = np.where(random, d.random_compute_rate, np.where(transcendental, d.transcendental_compute_rate, rate))
        rate = np.where(mixed, d.other_compute_rate, np.where(scan, d.scan_compute_rate, rate))
        if working_set is None:
            rate = np.where(fft | rfft, d.fft_compute_rate, rate)
        else:
            rate = np.where(fft, d.fft_rate_at(working_set), np.where(rfft, d.rfft_rate_at(working_set), rate))
        cols.append(np.where(other, d.elementwise_compute_rate, rate))
    return np.stack(cols, axis=1) if cols else np.zeros((flops.size, 0))


def _class_time(times: Mapping, model: str | None, kind: str, runtime) -> float:
    """A task's ``times`` entry for a device class: by model, else by kind; else ``inf`` (it
    cannot run there) when it has no ``runtime`` either, ``nan`` (decided by the runtime) when it has."""
    v = times.get(model) if model is not None else None
    if v is None:
        v = times.get(kind)
    if v is not None:
        return float(v)
    return math.inf if runtime is None else math.nan


def concat_ranges(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """``np.concatenate([np.arange(a, b) for a, b in zip(starts, ends)])``, without the loop.

    One range alone (a level of one task: a chain's every level) is a single ``arange``: the
    level-by-level passes call this once per level, so on a 100,000-call chain the general
    path's five array operations per call were seconds.
    """
    if starts.size == 1:
        return np.arange(starts[0], ends[0], dtype=np.int64)
    lengths = ends - starts
    total = int(lengths.sum())
    if total == 0:
        return np.empty(0, dtype=np.int64)
    offsets = np.cumsum(lengths) - lengths
    return np.repeat(starts - offsets, lengths) + np.arange(total, dtype=np.int64)


def segment_max(values: np.ndarray, ptr: np.ndarray, rows: np.ndarray, empty: float = 0.0) -> np.ndarray:
    """For each row r in ``rows``, the max of ``values`` over the CSR segment of r.

    ``values`` holds the concatenated segments of ``rows`` (as :func:`concat_ranges` makes them).
    Rows with an empty segment get ``empty``.
    """
    if rows.size == 1:                  # one segment: all of ``values`` (see concat_ranges)
        return np.array([values.max()]) if values.size else np.full(1, empty)
    lengths = ptr[rows + 1] - ptr[rows]
    out = np.full(rows.size, empty)
    nz = lengths > 0
    if values.size:
        offsets = (np.cumsum(lengths) - lengths)[nz]
        out[nz] = np.maximum.reduceat(values, offsets)
    return out


class ClassRows:
    """Rows of the time matrix on demand: ``rows[t]`` is task t's time on every device.

    Gathers the task's class times (``class_time[t, device_class]``): a new array of D floats per
    row, which is what a list scheduler reads per task, without the T x D matrix.
    """

    __slots__ = ("class_time", "device_class")

    def __init__(self, class_time: np.ndarray, device_class: np.ndarray):
        self.class_time = class_time
        self.device_class = device_class

    def __getitem__(self, t) -> np.ndarray:
        return self.class_time[t].take(self.device_class)


class CostModel:
    """Times, sizes and link costs of a task graph on a cluster, as NumPy arrays.

    Parameters
    ----------
    graph : networkx.DiGraph
        The task graph, in the IR of :mod:`streammap.ir`.
    cluster : Cluster
        The devices and links.
    history : callable, optional
        ``history(kernel, device_model, task_attrs) -> seconds or None``: a measured time for the
        task's kernel on a device model (``Device.model``, or its kind when the device has no
        model), e.g. from a performance-history database. Called once per task and distinct
        device model; ``None`` means "no measurement", and the next source in the order of
        preference is used. ``task_attrs`` is the node's attribute mapping (do not modify it).

    Raises
    ------
    StreamMapError
        If the graph has a cycle.

    See the module docstring for the arrays it holds and how every number is chosen.
    """

    def __init__(self, graph: nx.DiGraph, cluster: Cluster, history: History | None = None):
        self.graph = graph
        self.cluster = cluster
        self.devices: list[Device] = list(cluster.devices)
        self.tasks: list[str] = list(graph.nodes)
        self.pos: dict[str, int] = {t: i for i, t in enumerate(self.tasks)}
        self.kind = graph.graph.get("kind", "program")
        T, D = len(self.tasks), len(self.devices)
        self.n_tasks, self.n_devices = T, D

        self._build_edges()
        self._build_levels()

        # Devices and links.
        self.capacity = np.array([d.memory for d in self.devices], dtype=np.float64) * cluster.oversubscription
        bw, lat = cluster.link_matrices()
        self.bw = np.asarray(bw, dtype=np.float64)
        self.lat = np.asarray(lat, dtype=np.float64)
        with np.errstate(divide="ignore"):
            self.inv_bw = np.where(np.isinf(self.bw), 0.0, 1.0 / self.bw)
        nodes = {}
        self.node_of = np.array([nodes.setdefault(d.node, len(nodes)) for d in self.devices], dtype=np.int64)

        # A few Python objects per task, no cycles (streammap.io.bulk): the collector is paused,
        # unless a history hook runs, which may be anyone's code.
        with gc_paused() if history is None else contextlib.nullcontext():
            self._build_sizes()
            self._build_times(history)

    # ------------------------------------------------------------------ construction

    def _build_edges(self):
        T, pos = self.n_tasks, self.pos
        E = self.graph.number_of_edges()
        src = np.empty(E, dtype=np.int64)
        dst = np.empty(E, dtype=np.int64)
        nbytes = np.empty(E, dtype=np.float64)
        for k, (u, v, b) in enumerate(self.graph.edges(data="bytes")):
            src[k], dst[k] = pos[u], pos[v]
            nbytes[k] = 0.0 if b is None else float(b)
        self.n_edges = E
        o = np.lexsort((src, dst))
        self.pred_idx, self.pred_bytes = src[o], nbytes[o]
        self.pred_dst = dst[o]
        self.pred_ptr = np.zeros(T + 1, dtype=np.int64)
        np.cumsum(np.bincount(dst, minlength=T), out=self.pred_ptr[1:])
        o = np.lexsort((dst, src))
        self.succ_idx, self.succ_bytes = dst[o], nbytes[o]
        self.succ_ptr = np.zeros(T + 1, dtype=np.int64)
        np.cumsum(np.bincount(src, minlength=T), out=self.succ_ptr[1:])
        self.n_pred = np.diff(self.pred_ptr)
        self.n_succ = np.diff(self.succ_ptr)

    def _build_levels(self):
        """Depth levels by peeling sources (Kahn's algorithm, one NumPy step per level)."""
        T = self.n_tasks
        indeg = self.n_pred.copy()
        frontier = np.flatnonzero(indeg == 0)
        levels, seen = [], 0
        while frontier.size:
            levels.append(frontier)
            seen += frontier.size
            children = self.succ_idx[concat_ranges(self.succ_ptr[frontier], self.succ_ptr[frontier + 1])]
            if not children.size:
                break
            uniq, counts = np.unique(children, return_counts=True)
            indeg[uniq] -= counts
            frontier = uniq[indeg[uniq] == 0]
        if seen != T:
            left = [self.tasks[i] for i in np.flatnonzero(indeg > 0)[:3]]
            raise StreamMapError(f"the task graph has a cycle (through {', '.join(left)})",
                                 path=self.graph.graph.get("source"),
                                 hint="a task graph must be acyclic: remove the edge that closes the cycle")
        self.levels: list[np.ndarray] = levels
        self.topo = np.concatenate(levels) if levels else np.empty(0, dtype=np.int64)
        self.topo_index = np.empty(T, dtype=np.int64)
        self.topo_index[self.topo] = np.arange(T)

    def _build_sizes(self):
        T = self.n_tasks
        in_bytes = np.bincount(self.pred_dst, weights=self.pred_bytes, minlength=T).astype(np.float64) \
            if self.n_edges else np.zeros(T)
        has_succ = self.n_succ > 0
        max_out = np.zeros(T)
        rows = np.flatnonzero(has_succ)
        if rows.size:
            max_out[rows] = np.maximum.reduceat(self.succ_bytes, self.succ_ptr[rows])
        attr_out = np.array([_num(self.graph.nodes[t].get("out")) for t in self.tasks], dtype=np.float64)
        attr_mem = np.array([_num(self.graph.nodes[t].get("mem")) for t in self.tasks], dtype=np.float64)
        output = np.where(np.isnan(attr_out), max_out, attr_out)
        #: Bytes held while running.
        self.mem = np.where(np.isnan(attr_mem), in_bytes + output, attr_mem)
        #: Bytes kept after finishing while consumers remain.
        self.out = np.where(has_succ, output, 0.0)
        self.in_bytes = in_bytes
        #: Fraction of its device's compute each task needs (``share`` clause; 1 = the whole device).
        self.share = np.array([float(self.graph.nodes[t].get("share") or 1.0) for t in self.tasks], dtype=np.float64)
        #: Devices whose compute tasks can share by fraction (not CPUs: see the module docstring).
        self.shareable = np.array([d.kind != "cpu" for d in self.devices], dtype=bool)

    def share_on(self, t: int, d: int) -> float:
        """The share task ``t`` takes of device ``d``: its clause on a shareable device, else 1."""
        return float(self.share[t]) if self.shareable[d] else 1.0

    def _build_times(self, history):
        T, D = self.n_tasks, self.n_devices
        devs = self.devices
        # Devices that look alike to every estimate share a column ("class").
        keys, cls_of = {}, np.empty(D, dtype=np.int64)
        for j, d in enumerate(devs):
            key = (d.kind, d.vendor, d.model, d.speed, d.compute_rate, d.other_compute_rate,
                   d.elementwise_compute_rate, d.fft_compute_rate,
                   d.random_compute_rate, d.transcendental_compute_rate, d.scan_compute_rate,
                   d.memory_rate, d.fft_curve, d.rfft_curve,
                   d.bandwidth_curve, d.gemm_curve, d.factor_curve,
                   launch_overhead(d))
            cls_of[j] = keys.setdefault(key, len(keys))
        reps = [devs[int(np.flatnonzero(cls_of == c)[0])] for c in range(len(keys))]
        C = len(reps)
        c_speed = np.array([d.speed for d in reps])
        c_launch = np.array([launch_overhead(d) for d in reps])
        c_model = [d.model if d.model else d.kind for d in reps]

        ct = np.full((T, C), np.nan)           # per class; nan = not decided yet
        src = np.full(T, 4, dtype=np.int8)     # index into SOURCES
        flops = np.zeros(T)
        nbytes = np.zeros(T)
        roof = np.zeros(T, dtype=bool)
        other = np.zeros(T, dtype=bool)        # compute_class "other": flops at the non-GEMM rate
        fft = np.zeros(T, dtype=bool)          # compute_class "fft": flops at the FFT rate
        blas = np.zeros(T, dtype=bool)         # compute_class "blas": flops at the GEMM rate of their size
        lapack = np.zeros(T, dtype=bool)       # compute_class "lapack": at the factorisation rate of their size
        cls = np.full(T, None, dtype=object)   # every task's compute_class, for the classes masked below
        runtime = np.full(T, np.nan)
        allowed_cache: dict[str, np.ndarray] = {}
        allowed_rows: list[tuple[int, np.ndarray]] = []
        model_cache: dict[str, list[int]] = {}
        for c, m in enumerate(c_model):
            model_cache.setdefault(m, []).append(c)
        class_keys = [(d.model, d.kind) for d in reps]
        times_rows: list[int] = []             # tasks with a times mapping, and their time per class
        times_vals: list[float] = []           # flat (floats are not tracked by the collector)

        for i, t in enumerate(self.tasks):
            a = self.graph.nodes[t]
            cons = a.get("device") or "any"
            if cons != "any":
                mask = allowed_cache.get(cons)
                if mask is None:
                    mask = allowed_cache[cons] = np.array([r.matches(cons) for r in reps])
                if not mask.all():
                    allowed_rows.append((i, mask))
            if history is not None:
                got = False
                for m, cs in model_cache.items():
                    h = history(a.get("kernel"), m, a)
                    if h is not None:
                        ct[i, cs] = float(h)
                        got = True
                if got:
                    src[i] = 0
            f, b = a.get("flops"), a.get("bytes")
            if f is not None or b is not None:
                flops[i] = _num0(f)
                nbytes[i] = _num0(b)
                roof[i] = True
                other[i] = a.get("compute_class") == OTHER_CLASS
                fft[i] = a.get("compute_class") == FFT_CLASS
                blas[i] = a.get("compute_class") == BLAS_CLASS
                lapack[i] = a.get("compute_class") == LAPACK_CLASS
                cls[i] = a.get("compute_class")
                src[i] = min(src[i], 1)
                continue
            times = a.get("times")
            rt = a.get("runtime")
            if rt is not None:
                runtime[i] = float(rt)
            if times:
                # Gathered as plain rows and written in one block after the loop (see below).
                times_rows.append(i)
                times_vals.extend([_class_time(times, m, k, rt) for m, k in class_keys])
                src[i] = min(src[i], 2)
            elif rt is not None:
                src[i] = min(src[i], 3)

        # A times mapping fills the classes a measurement (history) left undecided.
        if times_rows:
            r = np.array(times_rows, dtype=np.int64)
            blk = ct[r]
            ct[r] = np.where(np.isnan(blk), np.array(times_vals, dtype=np.float64).reshape(r.size, C), blk)
        # Fill what the loop left undecided, a whole column block at a time.
        if roof.any():
            r = np.flatnonzero(roof)
            mbw = np.stack([d.memory_rate_at(self.mem[r]) for d in reps], axis=1)    # (tasks, classes)
            rate = compute_rates(reps, flops[r], nbytes[r], blas[r], other[r], fft[r], lapack[r],          # (tasks, classes)
                                 gram=cls[r] == GRAM_CLASS, random=cls[r] == RANDOM_CLASS,
                                 transcendental=cls[r] == TRANSCENDENTAL_CLASS, mixed=cls[r] == MIXED_CLASS,
                                 scan=cls[r] == SCAN_CLASS, rfft=cls[r] == RFFT_CLASS, working_set=self.mem[r])
            est = np.maximum(flops[r, None] / rate, nbytes[r, None] / mbw) + c_launch[None, :]
            blk = ct[r]
            ct[r] = np.where(np.isnan(blk), est, blk)
        has_rt = ~np.isnan(runtime)
        if has_rt.any():
            r = np.flatnonzero(has_rt)
            est = runtime[r, None] / c_speed[None, :]
            blk = ct[r]
            ct[r] = np.where(np.isnan(blk), est, blk)
        ct = np.where(np.isnan(ct), c_launch[None, :], ct)
        for i, mask in allowed_rows:
            ct[i, ~mask] = math.inf
        self._time = None                      # the dense view, built on demand (see time)
        self.source: list[str] = [SOURCES[k] for k in src]
        #: Devices that every estimate treats alike form a class: ``time[:, d] ==
        #: class_time[:, device_class[d]]``; ``class_count[c]`` devices are in class c.
        self.device_class = cls_of
        self.class_time = ct
        self.class_count = np.bincount(cls_of, minlength=C)

    @property
    def time(self) -> np.ndarray:
        """``float[T, D]``: seconds of each task on each device (``class_time[:, device_class]``).

        Built on first access and kept: T x D floats (8 GiB for a million tasks on 1,024
        devices), so code meant for large graphs reads :meth:`time_rows`, :meth:`times_on` or
        ``class_time`` instead.
        """
        if self._time is None:
            self._time = np.ascontiguousarray(self.class_time[:, self.device_class])
        return self._time

    def time_rows(self):
        """Task rows of :attr:`time`: ``time_rows()[t]`` is task t's time on every device.

        The dense matrix when the model holds one (a view of :meth:`with_times`, or once
        :attr:`time` was read), else a :class:`ClassRows` that gathers each row from the task's
        class times.
        """
        if self._time is not None:
            return self._time
        return ClassRows(self.class_time, self.device_class)

    def times_on(self, device) -> np.ndarray:
        """``time[t, device[t]]`` for every task t: the times of an assignment (device positions)."""
        device = np.asarray(device, dtype=np.int64)
        rows = np.arange(self.n_tasks)
        if self._time is not None:
            return self._time[rows, device]
        return self.class_time[rows, self.device_class[device]]

    def allowed_anywhere(self, need: np.ndarray) -> np.ndarray:
        """``float[D]``: ``need @ allowed()``, the sum of ``need`` over the tasks each device may run.

        Summed per class, then spread to the class's devices.
        """
        if self._time is not None:
            return need @ np.isfinite(self._time)
        return (need @ np.isfinite(self.class_time))[self.device_class]

    # ------------------------------------------------------------------ derived views

    def restrict(self, devices) -> CostModel:
        """The same graph on a subset of the devices.

        Parameters
        ----------
        devices : sequence of int
            Device positions of this model; the view's device ``i`` is ``devices[i]``.

        Returns
        -------
        CostModel
            A shallow copy with every attribute of :data:`DEVICE_AXES` sliced on its device axes
            (times, capacities, shareability, nodes, links), ``devices`` and ``n_devices`` to
            match, and the device classes renumbered ``0..C'-1`` over the classes that remain
            (``class_time`` and ``class_count`` with them), so that the mean transfer cost of the
            ranks and the bounds are the subset's own. Tasks, edges and sizes are shared with
            this model.

        See Also
        --------
        streammap.mappers.auto.lift : a schedule on the view, back on this model's devices.
        """
        devs = np.asarray(devices, dtype=np.int64)
        view = copy.copy(self)
        view.devices = [self.devices[i] for i in devs]
        view.n_devices = int(devs.size)
        for name, axes in DEVICE_AXES.items():
            values = getattr(self, name)
            for axis in axes:
                values = np.take(values, devs, axis=axis)
            setattr(view, name, values)
        if self._time is not None:
            view._time = np.ascontiguousarray(self._time[:, devs])
        kept, renumbered = np.unique(view.device_class, return_inverse=True)
        view.device_class = renumbered.reshape(-1)
        view.class_time = self.class_time[:, kept]
        view.class_count = np.bincount(view.device_class, minlength=kept.size)
        return view

    def with_times(self, time: np.ndarray, class_time: np.ndarray | None = None) -> CostModel:
        """The same graph and devices with other task times.

        Parameters
        ----------
        time : ndarray, shape (n_tasks, n_devices)
            Seconds of each task on each device (``inf``: cannot run there). Used as given (not
            copied).
        class_time : ndarray, shape (n_tasks, C), optional
            The times per device class of this model, when ``time`` keeps every class's devices
            alike (``time[:, d] == class_time[:, device_class[d]]``). Without it every device
            becomes its own class (``class_time`` is ``time``): the safe choice when ``time``
            treats two devices of one class differently (a task pinned to one of them, a slowed
            or lost device), since the bounds read ``class_time``.

        Returns
        -------
        CostModel
            A shallow copy sharing everything else with this model.

        Raises
        ------
        ValueError
            If an array's shape does not match the model.
        """
        T, D = self.n_tasks, self.n_devices
        if np.shape(time) != (T, D):
            raise ValueError(f"time has shape {np.shape(time)}, expected {(T, D)}")
        view = copy.copy(self)
        view._time = time
        if class_time is None:
            view.device_class = np.arange(D)
            view.class_time = time
            view.class_count = np.ones(D, dtype=np.int64)
        else:
            if np.shape(class_time) != self.class_time.shape:
                raise ValueError(f"class_time has shape {np.shape(class_time)}, expected {self.class_time.shape}")
            view.class_time = class_time
        return view

    # ------------------------------------------------------------------ queries

    def comm(self, nbytes, a, b):
        """Seconds to move ``nbytes`` from device ``a`` to device ``b`` (0 when ``a == b``).

        Works element-wise on arrays (``a`` and ``b`` device positions).
        """
        a = np.asarray(a)
        b = np.asarray(b)
        cost = self.lat[a, b] + np.asarray(nbytes, dtype=np.float64) * self.inv_bw[a, b]
        cost = np.where(a == b, 0.0, cost)
        return float(cost) if cost.ndim == 0 else cost

    def allowed(self) -> np.ndarray:
        """``bool[T, D]``: where each task can run (finite time)."""
        return np.isfinite(self.class_time)[:, self.device_class]

    def mean_time(self) -> np.ndarray:
        """Mean time of each task over the devices where it can run (``inf`` where none).

        Over the classes, each weighted by its number of devices; when every device is its own
        class (a view of :meth:`with_times`), the plain sum over the devices.
        """
        ct, count = self.class_time, self.class_count
        fin = np.isfinite(ct)
        kept = np.where(fin, ct, 0.0)
        if (count == 1).all():
            n, s = fin.sum(axis=1), kept.sum(axis=1)
        else:
            n, s = fin @ count, kept @ count.astype(np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(n > 0, s / np.maximum(n, 1), math.inf)

    def min_time(self) -> np.ndarray:
        """Fastest time of each task over all devices (the fastest over the classes)."""
        if self.n_devices == 0:
            return np.full(self.n_tasks, math.inf)
        return self.class_time.min(axis=1)

    def mean_link(self) -> tuple[float, float]:
        """``(mean latency, mean 1/bandwidth)`` over ordered pairs of distinct devices."""
        D = self.n_devices
        if D < 2:
            return 0.0, 0.0
        off = ~np.eye(D, dtype=bool)
        return float(self.lat[off].mean()), float(self.inv_bw[off].mean())

    def mean_comm(self, nbytes) -> np.ndarray:
        """Mean transfer time of ``nbytes`` over ordered pairs of distinct devices (the ``c̄`` of HEFT)."""
        ml, mi = self.mean_link()
        return ml + np.asarray(nbytes, dtype=np.float64) * mi

    def site_line(self, i: int) -> tuple[str | None, int | None]:
        """``(path, line)`` of task position ``i`` for error messages (from the node's ``site``)."""
        node = self.graph.nodes[self.tasks[i]]
        path = self.graph.graph.get("source")
        site = node.get("site")
        line = None
        if isinstance(site, str) and ":" in site:
            tail = site.rsplit(":", 1)[1]
            if tail.isdigit():
                line = int(tail)
        return path, line


def _num(v) -> float:
    return math.nan if v is None else float(v)


def _num0(v) -> float:
    return 0.0 if v is None else float(v)


# ---------------------------------------------------------------------- lower bound

def critical_path_bound(cost: CostModel) -> float:
    """Longest path where every task takes its fastest time and transfers are free.

    Computed level by level (sources first) over the predecessor arrays.
    """
    if cost.n_tasks == 0:
        return 0.0
    tmin = cost.min_time()
    finish = np.zeros(cost.n_tasks)
    for lev in cost.levels:
        e = concat_ranges(cost.pred_ptr[lev], cost.pred_ptr[lev + 1])
        ready = segment_max(finish[cost.pred_idx[e]], cost.pred_ptr, lev)
        finish[lev] = ready + tmin[lev]
    return float(finish.max())


def area_bound(cost: CostModel, iterations: int | None = None, weights: bool = False):
    """Least time in which the devices could absorb all the work if it were perfectly divisible.

    This is the optimum of the linear program (fractional assignment of tasks to devices)::

        min T  s.t.  sum_d x[t, d] = 1,  sum_t time[t, d] x[t, d] <= T,  x >= 0,

    bounded from below through its dual, which needs no LP solver: for *any* weights ``y`` on the
    simplex (``y >= 0``, ``sum y = 1``),

        f(y) = sum_t min_d y[d] * time[t, d]

    is a valid lower bound on the makespan of every schedule. Proof: in a schedule of makespan M
    with task t on device a(t), each device is busy at most M, so
    ``M = sum_d y[d] M >= sum_d y[d] sum_{t: a(t)=d} time[t, d] >= sum_t min_d y[d] time[t, d]``.

    We evaluate ``f`` at ``y`` uniform (giving ``sum_t min_d time / D``), at ``y[d]`` inversely
    proportional to device d's total time (exact for speed-scaled times ``w_t / s_d``, where it
    gives total reference work / total speed, the README's bound), then improve ``y`` by a few
    steps of multiplicative supergradient ascent (the supergradient of ``f`` is the per-device load
    of the argmin assignment), and return the best value seen. Every value is a valid bound, so
    the ascent only has to help, never to converge.

    Parameters
    ----------
    iterations : int, optional
        Ascent steps (default: up to 100, fewer for very large graphs). The work is done on
        device classes (devices with identical time columns), so it costs O(T * classes) per
        step, not O(T * D).
    weights : bool
        Also return the best dual weights found, per device class (0 for classes no task can
        use), for bounds on subsets of the tasks (:func:`fork_join_bound`).
    """
    T = cost.n_tasks
    if T == 0 or cost.n_devices == 0 or not np.isfinite(cost.class_time).any(axis=1).all():
        value = 0.0 if T == 0 else math.inf
        return (value, np.zeros(cost.class_time.shape[1])) if weights else value
    # Devices of one class have identical columns, and by symmetry and concavity of f the best y
    # is equal on them: work on classes, with y[c] the weight of each of the n[c] devices.
    p, n = cost.class_time, cost.class_count.astype(np.float64)
    fin = np.isfinite(p)
    usable = fin.any(axis=0)                   # classes some task can use; the others get y = 0
    p, n = p[:, usable], n[usable]
    C = p.shape[1]
    rows = np.arange(T)
    colsum = np.where(np.isfinite(p), p, 0.0).sum(axis=0)

    def normal(y):                             # sum_c n[c] y[c] = 1, y > 0 (0 * inf would be nan)
        y = y / (n @ y)
        y = np.maximum(y, 1e-12 * y.max())
        return y / (n @ y)

    def f(y):
        yp = p * y[None, :]
        arg = yp.argmin(axis=1)
        return float(yp[rows, arg].sum()), arg

    cands = [np.ones(C)]
    if (colsum > 0).all():
        cands.append(1.0 / colsum)
    best, y = -math.inf, None
    for c in cands:
        c = normal(c)
        v, _ = f(c)
        if v > best:
            best, y = v, c
    y_best = y
    if iterations is None:
        iterations = int(min(100, 2e8 // max(1, T * C)))
    with np.errstate(over="ignore"):
        for k in range(iterations):
            v, arg = f(y)
            if v > best:
                best, y_best = v, y
            # Supergradient of f per device: the load the argmin assignment puts on each device.
            load = np.bincount(arg, weights=p[rows, arg], minlength=C) / n
            top = load.max()
            if not top > 0:
                break
            y = normal(y * np.exp((load / top - 1.0) / math.sqrt(k + 1)))
        v = f(y)[0]
        if v > best:
            best, y_best = v, y
    if weights:
        w = np.zeros(cost.class_time.shape[1])
        w[usable] = y_best
        return best, w
    return best


def heads_and_tails(cost: CostModel, tmin: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(top, bottom)``: the longest path into each task and out of it, at fastest times, transfers free.

    ``top[t]`` is the longest chain of predecessors' fastest times before t starts (its *head*,
    or release time), ``bottom[t]`` the longest chain of successors' after t finishes (its
    *tail*, or delivery time); neither counts t itself. In every plan t starts no sooner than
    ``top[t]``, and the plan ends no sooner than ``bottom[t]`` after t finishes.
    """
    tmin = cost.min_time() if tmin is None else tmin
    T = cost.n_tasks
    top = np.zeros(T)
    for lev in cost.levels:
        e = concat_ranges(cost.pred_ptr[lev], cost.pred_ptr[lev + 1])
        src = cost.pred_idx[e]
        top[lev] = segment_max(top[src] + tmin[src], cost.pred_ptr, lev)
    bottom = np.zeros(T)
    for lev in reversed(cost.levels):
        e = concat_ranges(cost.succ_ptr[lev], cost.succ_ptr[lev + 1])
        dst = cost.succ_idx[e]
        bottom[lev] = segment_max(bottom[dst] + tmin[dst], cost.succ_ptr, lev)
    return top, bottom


def fork_join_bound(cost: CostModel, candidates: int = 64, area: tuple | None = None) -> float:
    """A lower bound for graphs that fan out from, or fan in to, one long task.

    For every task ``v``, all of ``v``'s descendants run after ``v`` finishes, which is no sooner
    than ``top(v) + tmin(v)`` (the longest path to ``v`` at fastest times, plus ``v`` at its
    fastest); and they need at least the area bound *of the descendants alone* to run. So::

        makespan >= top(v) + tmin(v) + area(descendants(v))
        makespan >= area(ancestors(v)) + tmin(v) + bottom(v)

    (the second by symmetry: ancestors all finish before ``v`` starts). The area of a subset S is
    ``sum_{t in S} min_d y[d] time[t, d]`` for dual weights ``y`` with ``sum_d y[d] = 1`` (the
    proof of :func:`area_bound` restricted to the window the subset runs in), for the weights of
    the whole graph's area bound and for the subset's own speed-proportional weights.

    Neither :func:`critical_path_bound` nor :func:`area_bound` sees that a fork-join graph whose
    root takes most of the critical path leaves the other devices idle meanwhile: on the BWA
    and SoyKB workflows of the shared benchmarks this bound is 1.3-1.6x theirs.

    Parameters
    ----------
    candidates : int
        Tasks ``v`` tried in each direction (the longest tasks, the widest forks and joins, the
        deepest ``top + tmin``); each costs O(edges). Every value is a valid bound, so fewer
        candidates only weaken it.
    area : tuple, optional
        ``area_bound(cost, weights=True)`` when the caller has it already: the whole graph's
        area bound and its per device-class dual weights.

    Returns
    -------
    float
        ``max`` of :func:`lower_bound` and both inequalities over the candidates.

    References
    ----------
    The area (load) bound and its LP dual: Shmoys, Tardos, "An approximation algorithm for the
    generalized assignment problem", Math. Programming 62 (1993); the head/tail ("release and
    delivery times") argument is the one of Carlier's one-machine bound, Carlier, "The
    one-machine sequencing problem", EJOR 11 (1982).
    """
    T = cost.n_tasks
    if T == 0 or cost.n_devices == 0:
        return lower_bound(cost)
    area, weights = area_bound(cost, weights=True) if area is None else area
    p, n = cost.class_time, cost.class_count.astype(np.float64)
    tmin = cost.min_time()
    with np.errstate(invalid="ignore"):
        m_global = np.where(weights > 0, p * weights[None, :], np.inf).min(axis=1)
    top, bottom = heads_and_tails(cost, tmin)
    best = max(float((top + tmin).max()), area)          # lower_bound: critical path, area

    def subset_area(mask):
        a = float(m_global[mask].sum())
        sub = p[mask]
        fin = np.isfinite(sub)
        colsum = np.where(fin, sub, 0.0).sum(axis=0)
        ok = fin.all(axis=0) & (colsum > 0)
        if ok.any():                  # the subset's own weights, on the classes every task can use
            y = np.where(ok, 1.0 / np.where(ok, colsum, 1.0), 0.0)
            y = y / (n @ y)
            # A class of weight 0 costs nothing to the tasks that can run there (the dual's
            # 0 * time): leaving it out would count them as if those devices did not exist.
            with np.errstate(invalid="ignore"):
                a = max(a, float(np.where(fin, sub * y[None, :], np.inf).min(axis=1).sum()))
        return a

    def closure(v, ptr, idx):
        seen = np.zeros(T, dtype=bool)
        frontier = np.array([v], dtype=np.int64)
        while frontier.size:
            nxt = idx[concat_ranges(ptr[frontier], ptr[frontier + 1])]
            nxt = np.unique(nxt[~seen[nxt]])
            seen[nxt] = True
            frontier = nxt
        return seen

    def pick(head, degree):
        k = max(1, candidates // 3)
        chosen = np.concatenate([np.argsort(-tmin, kind="stable")[:k], np.argsort(-degree, kind="stable")[:k],
                                 np.argsort(-(head + tmin), kind="stable")[:k]])
        return np.unique(chosen)

    for v in pick(top, cost.n_succ):
        if top[v] + tmin[v] + area <= best:      # no subset of the graph needs more than all of it
            continue
        desc = closure(v, cost.succ_ptr, cost.succ_idx)
        best = max(best, top[v] + tmin[v] + subset_area(desc))
    for v in pick(bottom, cost.n_pred):
        if bottom[v] + tmin[v] + area <= best:
            continue
        anc = closure(v, cost.pred_ptr, cost.pred_idx)
        best = max(best, subset_area(anc) + tmin[v] + bottom[v])
    return float(best)


def _link_floors(cost: CostModel, inbound: bool) -> tuple[np.ndarray, np.ndarray]:
    """``(lat[D, C], inv[D, C])``: the least latency and the least ``1 / bw`` between device d and
    any *other* device of class c (``inf`` latency where class c has no other device).

    Outbound (d sends) reads ``lat[d, d']``, inbound (d receives) ``lat[d', d]``. A transfer of b
    bytes between d and a device of class c takes at least ``lat + b * inv`` of these (each minimum
    taken on its own, so perhaps on two different devices: a floor, never more than the real cost).
    """
    lat, inv = (cost.lat.T, cost.inv_bw.T) if inbound else (cost.lat, cost.inv_bw)
    D, C = cost.n_devices, cost.class_time.shape[1]
    self_link = np.eye(D, dtype=bool)
    lat = np.where(self_link, math.inf, lat)
    inv = np.where(self_link, math.inf, inv)
    min_lat, min_inv = np.full((D, C), math.inf), np.zeros((D, C))
    for c in range(C):
        cols = np.flatnonzero(cost.device_class == c)
        if cols.size:
            min_lat[:, c] = lat[:, cols].min(axis=1)
            min_inv[:, c] = inv[:, cols].min(axis=1)
    min_inv[~np.isfinite(min_lat)] = 0.0      # no other device: the infinite latency says it
    return min_lat, min_inv


def _gate_values(gate_time, p_near, tails, w):
    """The fan-out bound of one gate on each device type, given the per-neighbour arrays.

    ``gate_time[R]``: head of the gate plus its time on the type's device; ``p_near[R, k]``: each
    neighbour's time on that device (its share of it); ``w[R, k]``: the least time from the gate's
    end to the plan's end when the neighbour runs elsewhere; ``tails[k]``: each neighbour's own
    tail (or head), for Carlier's term. Returns ``float[R]``.
    """
    R, k = w.shape
    order = np.argsort(-w, axis=1, kind="stable")
    ws = np.take_along_axis(w, order, axis=1)
    ps = np.take_along_axis(p_near, order, axis=1)
    qs = tails[order]
    # Prefix j (the j neighbours of largest w run near the gate): the near ones end no sooner than
    # their summed times plus the least tail among them (Carlier), and that only grows with j.
    near = np.cumsum(ps, axis=1) + np.minimum.accumulate(qs, axis=1)
    near = np.maximum.accumulate(near, axis=1)
    near = np.concatenate([np.zeros((R, 1)), near], axis=1)              # j = 0 .. k
    far = np.concatenate([ws, np.zeros((R, 1))], axis=1)                 # largest w left out
    return gate_time + np.maximum(near, far).min(axis=1)


def fan_out_bound(cost: CostModel, candidates: int = 48) -> float:
    """A lower bound that counts the transfers out of a gating task (and into a joining one).

    A task v of a fan-out (BWA's index, SoyKB's reference) runs on some device d and finishes no
    sooner than ``F_d = top(v) + time(v, d)``. Each child u then either runs on d too, after v,
    or elsewhere, where it starts no sooner than ``F_d`` plus the transfer of edge (v, u) from d::

        w_d(u) = min over eligible d' != d of (comm(v -> u, d, d') + time(u, d')) + bottom(u)

    and the plan ends no sooner than ``F_d + w_d(u)``. The children S on d run one at a time (a
    device runs one task at a time; under sharing, their shares of it), all after ``F_d``, so the
    plan ends no sooner than ``F_d + sum_{u in S} time(u, d) + min_{u in S} bottom(u)`` (the
    head/tail argument). Whatever S the plan picks::

        makespan >= min_d [ F_d + min_S max( near(S), max_{u not in S} w_d(u) ) ]

    Given the first child not in S in the order of w_d descending, S holds every child of larger
    w_d, and ``near`` only grows with S; so the inner minimum is reached on a prefix of that
    order (``near`` of a prefix taken as the largest over its own prefixes, each a subset of S),
    and costs one sort, O(k log k) for k children.

    That alone lets every far child have a device of its own. The children also share the
    devices' time: on device e they start no sooner than ``F_d + r_e`` (``r_d = 0``; elsewhere
    the link's latency plus the fewest bytes any child receives over it) and end by
    ``makespan - min_u bottom(u)``, so with ``T = makespan - F_d - min_u bottom(u)`` the
    area bound with release times holds, by its dual, for any weights y >= 0 on the devices::

        sum_e y_e (T - r_e)^+  >=  sum_u min_e y_e time(u, e)

    The left side grows with T; its least solution, for the children's own speed-proportional
    weights and for equal ones, bounds the plan too (``F_d + min bottom + T``), and the larger
    of the two arguments counts for d. On BWA, whose index gates 100 equal alignments, this is the
    one that binds: the index's output must reach a device before an alignment starts there.

    The join mirrors it all: parents u of v either run on v's device before it, or send their
    output to it; v then runs and ``bottom(v)`` follows.

    Valid for every graph and cluster of the cost model: children ineligible on d cannot be in S
    (their time is infinite), children eligible only on d must be (their w is infinite), one
    device puts them all in S, a zero-byte edge still pays the link's latency, devices where v
    cannot run are skipped. The transfer floor is the least latency plus bytes times the least
    inverse bandwidth from d to another device of the child's class (:func:`_link_floors`);
    devices of one class that see the same links to the others (in some order) give the same
    value and are computed once (:func:`_device_types`). None of :func:`critical_path_bound`, :func:`area_bound` or :func:`fork_join_bound` sees a
    transfer: on the generated BWA workflows at CCR 10 this bound is within a few tenths of a
    percent of HEFT's plan, where theirs were 1.5-1.7x below it (the shared BWA trace: within
    0.0-0.2% at CCR 0.1, 1 and 10 on all three clusters).

    Parameters
    ----------
    cost : CostModel
    candidates : int
        Gating tasks tried in each direction: the widest fan-outs (fan-ins), the longest tasks and
        the ones that send (receive) the most bytes, a third each. Each costs
        O(device types x (k x classes + devices log devices)) for its k neighbours, after an
        O(devices^2 log devices) grouping of the devices into types. Every value is a valid
        bound, so fewer candidates only weaken it.

    Returns
    -------
    float
        The largest bound over the candidates in both directions (0 when no task has a neighbour);
        combine it with the others by ``max`` (:func:`combined_bound`).

    References
    ----------
    Heads and tails ("release and delivery times") on one machine: Carlier, "The one-machine
    sequencing problem", EJOR 11 (1982). The area (load) bound's LP dual, here over windows that
    open at the release times: Shmoys, Tardos, Math. Programming 62 (1993), as in
    :func:`fork_join_bound`. Communication delays on the edges out of a task that
    its children avoid only by sharing its processor: the setting of Hwang, Chow, Anger, Lee,
    "Scheduling precedence graphs in systems with interprocessor communication times", SIAM J.
    Computing 18(2) (1989).
    """
    T, D = cost.n_tasks, cost.n_devices
    if T == 0 or D == 0 or cost.n_edges == 0:
        return 0.0
    tmin = cost.min_time()
    top, bottom = heads_and_tails(cost, tmin)
    best = 0.0
    for inbound in (False, True):
        if inbound:
            ptr, idx, nbytes, head, tail = cost.pred_ptr, cost.pred_idx, cost.pred_bytes, bottom, top
            degree = cost.n_pred
        else:
            ptr, idx, nbytes, head, tail = cost.succ_ptr, cost.succ_idx, cost.succ_bytes, top, bottom
            degree = cost.n_succ
        moved = np.bincount(cost.pred_dst if inbound else cost.pred_idx, weights=cost.pred_bytes, minlength=T)
        types = _device_types(cost, inbound)
        for v in _gates(tmin, degree, moved, candidates):
            best = max(best, _gate_bound(cost, int(v), ptr, idx, nbytes, head, tail, types))
    return float(best)


def _gates(tmin: np.ndarray, degree: np.ndarray, moved: np.ndarray, candidates: int) -> np.ndarray:
    """The candidate gates of :func:`fan_out_bound`: tasks with neighbours, widest, longest, heaviest."""
    k = max(1, candidates // 3)
    has = np.flatnonzero(degree > 0)
    if has.size <= k:
        return has
    # The k largest of each key, ties to the earlier task (a stable sort's first k), without
    # sorting all the tasks.
    chosen = []
    for key in (degree, tmin, moved):
        values = -key[has]
        kth = np.partition(values, k - 1)[k - 1]
        above = np.flatnonzero(values < kth)
        ties = np.flatnonzero(values == kth)[:k - above.size]
        chosen.append(has[np.concatenate([above, ties])])
    return np.unique(np.concatenate(chosen))


#: Largest ``device types x neighbours x classes`` block :func:`_gate_bound` holds at once.
_GATE_BLOCK = 1 << 22


def _gate_bound(cost: CostModel, v: int, ptr, idx, nbytes, head, tail, types) -> float:
    """:func:`fan_out_bound` for one gate ``v`` over its neighbours ``idx[ptr[v]:ptr[v + 1]]``
    (children or parents), on the device ``types`` of :func:`_device_types`."""
    rep, min_lat, min_inv, lat_rows, inv_rows = types
    nbr = idx[ptr[v]:ptr[v + 1]]
    b = nbytes[ptr[v]:ptr[v + 1]]
    cls = cost.device_class[rep]
    gate = cost.class_time[v, cls]
    ok = np.isfinite(gate)
    if not ok.any():
        return math.inf
    rep, cls, gate = rep[ok], cls[ok], gate[ok]
    min_lat, min_inv, lat_rows, inv_rows = min_lat[ok], min_inv[ok], lat_rows[ok], inv_rows[ok]
    p = cost.class_time[nbr]                                   # (k, C)
    share = np.where(cost.shareable[rep][:, None], cost.share[nbr][None, :], 1.0)
    p_near = p[:, cls].T * share                               # (R, k)
    q = tail[nbr]
    values = np.empty(rep.size)
    step = max(1, _GATE_BLOCK // max(1, nbr.size * p.shape[1], cost.n_devices))
    sent = b > 0
    for s in range(0, rep.size, step):
        r = slice(s, s + step)
        lat, inv = min_lat[r], min_inv[r]                       # (R, C)
        with np.errstate(invalid="ignore"):                     # 0 bytes over a dead link: latency only
            by_bytes = np.where(sent[None, :, None], b[None, :, None] * inv[:, None, :], 0.0)
        comm = lat[:, None, :] + by_bytes
        w = (comm + p[None, :, :]).min(axis=2) + q[None, :]     # (R, k)
        values[r] = _gate_values(head[v] + gate[r], p_near[r], q, w)
        release = _releases(rep[r], lat_rows[r], inv_rows[r], float(b.min()))
        window = _window_area(cost, nbr, release)
        values[r] = np.maximum(values[r], head[v] + gate[r] + float(q.min()) + window)
    return float(values.min())


def _releases(rep: np.ndarray, lat_rows: np.ndarray, inv_rows: np.ndarray, nbytes: float) -> np.ndarray:
    """``float[R, D]``: the least time after the gate ends before a neighbour can start on each
    device (its own device: 0; another: the link's latency plus the fewest bytes any neighbour
    moves)."""
    with np.errstate(invalid="ignore"):
        release = lat_rows + (inv_rows * nbytes if nbytes > 0 else 0.0)
    release[np.arange(rep.size), rep] = 0.0
    return release


def _window_area(cost: CostModel, nbr: np.ndarray, release: np.ndarray) -> float:
    """``float[R]``: the least T such that the neighbours' work fits on the devices in windows
    ``[release[e], T]`` (the area bound with release times, by its dual; see :func:`fan_out_bound`).

    For weights y per device class, ``sum_e y_e (T - release_e)^+ >= sum_u min_e y_e time(u, e)``
    must hold; tried with the neighbours' own speed-proportional weights and with equal ones, and
    the larger T kept (both valid).
    """
    p = cost.class_time[nbr]
    fin = np.isfinite(p)
    shareable = np.zeros(p.shape[1], dtype=bool)
    shareable[cost.device_class] = cost.shareable
    p = np.where(shareable[None, :], p * cost.share[nbr][:, None], p)
    colsum = np.where(fin, p, 0.0).sum(axis=0)
    every = fin.all(axis=0) & (colsum > 0)
    weights = [np.ones(p.shape[1])]
    if every.any():
        weights.append(np.where(every, 1.0 / np.where(every, colsum, 1.0), 0.0))
    best = np.zeros(release.shape[0])
    order = np.argsort(release, axis=1, kind="stable")
    rs = np.take_along_axis(release, order, axis=1)
    nxt = np.concatenate([rs[:, 1:], np.full((rs.shape[0], 1), math.inf)], axis=1)
    for y in weights:
        with np.errstate(invalid="ignore"):
            work = float(np.where(fin, p * y[None, :], math.inf).min(axis=1).sum())
        if not work > 0:
            continue
        ys = y[cost.device_class][order]                        # (R, D) weight of each device, by release
        slope = np.cumsum(ys, axis=1)
        with np.errstate(invalid="ignore"):
            offset = np.cumsum(np.where(ys > 0, ys * rs, 0.0), axis=1)
            reach = np.where(slope > 0, slope * nxt - offset, 0.0)   # capacity by the next release
        j = np.argmax(reach >= work, axis=1)
        found = reach[np.arange(j.size), j] >= work
        rows = np.arange(j.size)
        with np.errstate(divide="ignore", invalid="ignore"):
            t = np.where(found, (work + offset[rows, j]) / slope[rows, j], math.inf)
        best = np.maximum(best, t)
    return best


def _device_types(cost: CostModel, inbound: bool):
    """Devices that :func:`_gate_bound` cannot tell apart, once each: the same class, and the same
    (class, latency, 1/bw) to the other devices in some order. Returns ``(representatives,
    min_lat[R, C], min_inv[R, C], lat[R, D], inv[R, D])``, links oriented as ``inbound`` says."""
    lat, inv = (cost.lat.T, cost.inv_bw.T) if inbound else (cost.lat, cost.inv_bw)
    min_lat, min_inv = _link_floors(cost, inbound)
    D = cost.n_devices
    self_link = np.eye(D, dtype=bool)
    others = np.broadcast_to(cost.device_class.astype(np.float64), (D, D))
    marked_lat, marked_inv = np.where(self_link, -1.0, lat), np.where(self_link, -1.0, inv)
    order = np.lexsort((marked_inv, marked_lat, others), axis=-1)
    key = np.concatenate([cost.device_class[:, None].astype(np.float64)]
                         + [np.take_along_axis(a, order, axis=1) for a in (others, marked_lat, marked_inv)], axis=1)
    # Rows of D x 3D floats: group by the short rows (class, floors) first, which usually settles
    # it, and compare the long ones only inside a group.
    short = np.concatenate([cost.device_class[:, None].astype(np.float64), min_lat, min_inv], axis=1)
    _, group = np.unique(short, axis=0, return_inverse=True)
    first = []
    for g in np.unique(group):
        members = np.flatnonzero(group.reshape(-1) == g)
        rows = key[members]
        if (rows == rows[0]).all():
            first.append(members[:1])
        else:
            first.append(members[np.unique(rows, axis=0, return_index=True)[1]])
    first = np.sort(np.concatenate(first))
    return first, min_lat[first], min_inv[first], lat[first], inv[first]


def _class_link_floors(cost: CostModel) -> tuple[np.ndarray, np.ndarray]:
    """``(lat[C, C], inv[C, C])``: the least latency and the least ``1 / bw`` from any device of class
    a to any *other* device of class c (``inf`` latency, 0 inverse bandwidth, where there is no such
    pair: a class of one device to itself).

    Each minimum is taken on its own (perhaps on two different links), so ``lat + bytes * inv`` is a
    floor on every transfer between two distinct devices of those classes, never more.
    """
    D, C = cost.n_devices, cost.class_time.shape[1]
    other = ~np.eye(D, dtype=bool)
    lat = np.where(other, cost.lat, math.inf)
    inv = np.where(other, cost.inv_bw, math.inf)
    members = [np.flatnonzero(cost.device_class == c) for c in range(C)]
    min_lat, min_inv = np.full((C, C), math.inf), np.full((C, C), math.inf)
    for a in range(C):
        if members[a].size == 0:
            continue
        rows_lat, rows_inv = lat[members[a]].min(axis=0), inv[members[a]].min(axis=0)
        for c in range(C):
            if members[c].size:
                min_lat[a, c] = rows_lat[members[c]].min()
                min_inv[a, c] = rows_inv[members[c]].min()
    min_inv[~np.isfinite(min_lat)] = 0.0      # no such pair: the infinite latency says it
    return min_lat, min_inv


def _far_arrival(done: np.ndarray, nbytes: np.ndarray, link_lat: np.ndarray, link_inv: np.ndarray) -> np.ndarray:
    """``float[E, C]``: for each edge, the least time at which its data can reach (or leave) a device
    of class c from (to) a *different* device, given ``done[E, C']``, the bound on the other end's
    finish (or on its start-to-end time) per class of that device: ``min over c' of done[e, c'] +
    link_lat[c', c] + bytes * link_inv[c', c]``. A zero-byte edge pays the latency alone."""
    with np.errstate(invalid="ignore"):
        by_bytes = np.where((nbytes > 0)[:, None, None], nbytes[:, None, None] * link_inv[None, :, :], 0.0)
    return (done[:, :, None] + link_lat[None, :, :] + by_bytes).min(axis=1)


def _split_bound(degree: np.ndarray, far: np.ndarray, end: np.ndarray, occupy: np.ndarray,
                 release: np.ndarray) -> np.ndarray:
    """``float[n, C]``: the join (fork) rule of :func:`comm_path_bound` for n tasks at once.

    ``degree[n]`` neighbours each, their edges consecutive in the ``[E, C]`` arrays: ``far`` (when
    the data crosses a link), ``end`` (the neighbour's finish on the task's own device, or its
    start-to-end time there), ``occupy`` (the time it holds that device) and ``release`` (its own
    release there). Returns, per task and class, ``min over the neighbour subsets S kept on the
    task's device of max(near(S), max_{u not in S} far(u))``, the minimum taken over the prefixes of
    the neighbours sorted by ``far`` descending (see :func:`comm_path_bound` for why that suffices).

    Tasks are grouped by degree into powers of two, so that each group is one padded
    ``[n_k, K, C]`` block whose running sums and maxima go along one axis (at most twice the edges
    in all).
    """
    n, C = degree.size, far.shape[1]
    out = np.zeros((n, C))
    first = np.cumsum(degree) - degree
    width = np.ones(n, dtype=np.int64) << np.ceil(np.log2(np.maximum(degree, 1))).astype(np.int64)
    for K in np.unique(width).tolist():
        rows = np.flatnonzero(width == K)
        slot = np.arange(K)[None, :]
        real = slot < degree[rows, None]                                  # (n_k, K)
        idx = np.where(real, first[rows, None] + slot, 0)
        pad = ~real[:, :, None]
        f = np.where(pad, -math.inf, far[idx])                            # (n_k, K, C)
        order = np.argsort(-f, axis=1, kind="stable")
        f = np.take_along_axis(f, order, axis=1)
        e = np.take_along_axis(np.where(pad, -math.inf, end[idx]), order, axis=1)
        o = np.take_along_axis(np.where(pad, 0.0, occupy[idx]), order, axis=1)
        r = np.take_along_axis(np.where(pad, math.inf, release[idx]), order, axis=1)
        # near(prefix): the last of them ends no sooner than any one's own end, nor than the
        # earliest release among them plus all their times (one device, one at a time); taken as
        # the largest over its own prefixes, each a subset.
        near = np.maximum(np.maximum.accumulate(e, axis=1),
                          np.minimum.accumulate(r, axis=1) + np.cumsum(o, axis=1))
        near = np.maximum.accumulate(near, axis=1)
        near = np.concatenate([np.zeros((rows.size, 1, C)), near], axis=1)          # j = 0 .. K
        f = np.concatenate([f, np.full((rows.size, 1, C), -math.inf)], axis=1)   # first left out
        out[rows] = np.maximum(np.maximum(near, f).min(axis=1), 0.0)
    return out


def _comm_pass(cost: CostModel, p: np.ndarray, occupy: np.ndarray, link_lat: np.ndarray, link_inv: np.ndarray,
               forward: bool) -> np.ndarray:
    """Heads (``forward``: the least start of each task on a device of each class) or tails (the
    least time from its end to the plan's end), ``float[T, C]``, by :func:`_split_bound` level by
    level (sources first, or sinks first)."""
    T, C = p.shape
    head = np.zeros((T, C))
    if forward:
        ptr, idx, nbytes, levels, lat, inv = (cost.pred_ptr, cost.pred_idx, cost.pred_bytes, cost.levels,
                                              link_lat, link_inv)
    else:
        ptr, idx, nbytes, levels, lat, inv = (cost.succ_ptr, cost.succ_idx, cost.succ_bytes, cost.levels[::-1],
                                              link_lat.T, link_inv.T)
    span = p.copy()                  # head + own time: finish (forward), start-to-end (backward)
    for lev in levels:
        degree = ptr[lev + 1] - ptr[lev]
        has = degree > 0
        if has.any():
            rows = lev[has]
            e = concat_ranges(ptr[rows], ptr[rows + 1])
            other = idx[e]
            far = _far_arrival(span[other], nbytes[e], lat, inv)
            head[rows] = _split_bound(degree[has], far, span[other], occupy[other], head[other])
        span[lev] = head[lev] + p[lev]
    return head


def comm_path_bound(cost: CostModel, paths: tuple | None = None) -> float:
    """A communication-aware critical path: transfers that no plan avoids, on every path.

    Each task v runs on one device d, of class c. A parent u of v either runs on d too, and then
    before v, or elsewhere, and then its output crosses a link to d. So, with ``head[u, c]`` a
    bound on u's start on a device of class c and ``finish[u, c] = head[u, c] + time(u, c)``::

        near: u on d        ends no sooner than finish[u, c]
        far:  u on a != d   its data reaches d no sooner than
                            far(u, c) = min over classes c' of finish[u, c'] + lat(c', c) + bytes * inv(c', c)

    with ``lat(c', c)`` and ``inv(c', c)`` the least latency and ``1 / bw`` from a device of class
    c' to a *different* device of class c (:func:`_class_link_floors`). The parents S kept on d run
    there one at a time (under sharing, their shares of it), so the last of them ends no sooner
    than ``near(S) = max(max_{u in S} finish[u, c], min_{u in S} head[u, c] + sum_{u in S}
    time(u, c))`` (the head/tail argument of Carlier's one-machine bound). Whatever S the plan
    picks, v starts no sooner than ``max(near(S), max_{u not in S} far(u, c))``, hence::

        head[v, c] = min over S of max(near(S), max_{u not in S} far(u, c))       (join rule)

    Given the parent of largest ``far`` left out of S, S holds every parent of larger ``far``,
    and ``near`` only grows with S (each term is taken as the largest over the prefixes, each a
    subset of S); so the minimum is reached on a prefix of the parents sorted by ``far``
    descending, one sort per task: O(k log k) for k parents. A task with one parent gets
    ``min(finish[u, c], far(u, c))``; with parents on two or more devices it must wait for a
    transfer, with all of them on its own it waits for their summed times.

    The fork rule is the mirror image on the reversed graph: ``tail[v, c]``, the least time from
    v's end to the plan's end when v runs on class c, is the same minimum over the children kept
    on v's device (each adds its time after v; they serialise) and the ones sent elsewhere (each
    pays the link from v, then its own ``time + tail`` on the best class). Both hold in any one
    plan, for v's own device, so::

        makespan >= max over v of min over c of head[v, c] + time(v, c) + tail[v, c]

    Every term is at least the transfer-free one, so this is never below
    :func:`critical_path_bound`. Valid for every graph and cluster of the cost model: a parent
    that cannot run on c must be far (``time = inf``), one that can run nowhere else must be near
    (``far = inf``), a zero-byte edge still pays the latency, a class of one device cannot send to
    itself (``lat = inf``). Other tasks on d, memory and link contention only delay a plan. The
    link floors per class pair are a relaxation of the per-device-pair costs, and of the device
    a parent takes: every plan is a choice of S per task, so the bound is a relaxation of the
    plan, never above it.

    Cost: two passes over the levels (:func:`comm_paths`), O(E (C² + log k)) for C device
    classes; the ``[E, C, C]`` transfer block of a level is the largest array.

    Parameters
    ----------
    cost : CostModel
    paths : tuple, optional
        ``comm_paths(cost)`` when the caller has it (:func:`combined_bound` shares it with
        :func:`crossing_bound`).

    Returns
    -------
    float
        The bound (0 for an empty graph, ``inf`` when a task can run nowhere); combine it with
        the others by ``max`` (:func:`combined_bound`).

    References
    ----------
    The "parallel time" of a clustering, where an edge inside a cluster costs nothing and its
    tasks serialise: T. Yang, A. Gerasoulis, "DSC: scheduling parallel tasks on an unbounded
    number of processors", IEEE TPDS 5(9), 1994. Bounds with communication delays that a child
    escapes only by sharing its parent's processor: C. Hanen, A. Munier, "An approximation
    algorithm for scheduling dependent tasks on m processors with small communication delays",
    Discrete Applied Math. 108 (2001); J.-J. Hwang, Y.-C. Chow, F. D. Anger, C.-Y. Lee,
    SIAM J. Computing 18(2) (1989). Heads and tails on one machine: Carlier, EJOR 11 (1982).
    """
    if cost.n_tasks == 0:
        return 0.0
    if cost.n_devices == 0:
        return math.inf
    head, tail = comm_paths(cost) if paths is None else paths
    return float((head + cost.class_time + tail).min(axis=1).max())


def comm_paths(cost: CostModel) -> tuple[np.ndarray, np.ndarray]:
    """``(head[T, C], tail[T, C])`` of :func:`comm_path_bound`: per task and device class, the least
    start of the task on a device of that class, and the least time from its end there to the
    plan's end, transfers counted by the join and fork rules. Each is at least the transfer-free
    head and tail of :func:`heads_and_tails` (for the task's time on that class)."""
    p = cost.class_time
    shareable = np.zeros(p.shape[1], dtype=bool)
    shareable[cost.device_class] = cost.shareable
    occupy = np.where(shareable[None, :], p * cost.share[:, None], p)
    link_lat, link_inv = _class_link_floors(cost)
    head = _comm_pass(cost, p, occupy, link_lat, link_inv, forward=True)
    tail = _comm_pass(cost, p, occupy, link_lat, link_inv, forward=False)
    return head, tail


def _crossing_floors(cost: CostModel) -> tuple[tuple[float, float], tuple[float, float]]:
    """``((lat, inv) between distinct devices, (lat, inv) between devices of different nodes)``: the
    least latency and the least ``1 / bw`` of any such link, each taken on its own (a floor on every
    transfer of that kind: ``lat + bytes * inv``). ``inf`` latency where there is no such pair."""
    D = cost.n_devices
    other_device = ~np.eye(D, dtype=bool)
    other_node = cost.node_of[:, None] != cost.node_of[None, :]
    floors = []
    for mask in (other_device, other_node):
        if mask.any():
            floors.append((float(cost.lat[mask].min()), float(cost.inv_bw[mask].min())))
        else:
            floors.append((math.inf, 0.0))
    return floors[0], floors[1]


class _Groups:
    """Union-find over tasks that keeps, per group, what :func:`crossing_bound` needs of it: the
    least head and tail of its tasks and its work per device class or node, additive under union.

    ``work[t, k]``: task t's time on place k (a device class: its whole time, the group running
    on one device; a node: its least time there over the node's device count, the group's area
    there). The bound of a group is ``min head + min over places of its work + min tail``.
    """

    def __init__(self, head: np.ndarray, tail: np.ndarray, work: np.ndarray):
        self.parent = list(range(head.size))
        self.head, self.tail = head.tolist(), tail.tolist()
        self.work = [row for row in work]

    def find(self, t: int) -> int:
        root = t
        while self.parent[root] != root:
            root = self.parent[root]
        while self.parent[t] != root:                      # path compression
            self.parent[t], t = root, self.parent[t]
        return root

    def union(self, a: int, b: int) -> float:
        """Join the groups of a and b; return the merged group's bound (0 when already one)."""
        a, b = self.find(a), self.find(b)
        if a == b:
            return 0.0
        if b < a:
            a, b = b, a                                    # the root is the smaller position
        self.parent[b] = a
        self.head[a] = min(self.head[a], self.head[b])
        self.tail[a] = min(self.tail[a], self.tail[b])
        self.work[a] = self.work[a] + self.work[b]
        return self.head[a] + float(self.work[a].min()) + self.tail[a]


def crossing_bound(cost: CostModel, paths: tuple | None = None) -> float:
    """A lower bound from the edges too dear to cross: their ends must share a device, or a node.

    Suppose a plan ends by M. An edge u -> v of b bytes whose ends run on two different devices
    makes v start no sooner than u's end plus a transfer, so::

        M >= finish(u) + comm + rest(v),   finish(u) = min_c head[u, c] + time(u, c),
                                           rest(v) = min_c time(v, c) + tail[v, c]

    (``head``, ``tail``: the transfer-aware heads and tails of :func:`comm_paths`, at least the
    longest paths into u and out of v at fastest times). The transfer costs at least ``lat + b * inv`` of the cheapest
    latency and inverse bandwidth between any two distinct devices (between devices of two
    different nodes, if the ends are on two nodes; :func:`_crossing_floors`). So an edge whose
    ``need = finish(u) + floor + rest(v)`` exceeds M cannot cross: its ends share a device (a
    node). Joined along such edges, the tasks form groups that each run on one device (one node),
    and a group K then needs, with h and q the least head and tail over its tasks and classes::

        one device:  M >= h + min over classes c of sum_{t in K} time(t, c) + q
        one node:    M >= h + min over nodes n of sum_{t in K} min_{e in n} time(t, e) / |n| + q

    (all of K runs between h and M - q, one at a time on the device; on the node, the area
    bound with equal weights on its devices). Call the largest of these over the groups
    ``implied(M)``: every plan of makespan M has ``implied(M) <= M``. Fewer edges are forced as
    M grows, so ``implied`` does not increase with M, and no plan ends before

        M* = min over M of max(M, implied(M)) ... precisely inf { M : implied(M) <= M },

    found by one sweep over the edges in order of ``need`` descending, joining groups as M falls
    below each ``need`` (union-find), and stopping once ``implied`` reaches the next ``need``.
    Under sharing a task counts its share of the device (``share`` on shareable devices).

    On Montage at CCR 10 on two nodes, almost every edge costs more to cross the network than any
    plan of the fast node takes: the whole workflow is one group, which the fast node alone must
    run, where :func:`area_bound` spread it over both.

    Parameters
    ----------
    cost : CostModel
    paths : tuple, optional
        ``comm_paths(cost)`` when the caller has it.

    Returns
    -------
    float
        ``M*`` (0 without edges, ``inf`` when a task can run nowhere); combine it with the others
        by ``max`` (:func:`combined_bound`).

    Cost: O(T x (C + nodes)) for the work rows, a sort of the edges, and a union per edge up to
    the stopping point (Python, a few microseconds each).

    References
    ----------
    The same reasoning, forced co-location of the ends of an edge whose delay exceeds a deadline,
    underlies the clustering bounds of Gerasoulis and Yang ("On the granularity and clustering of
    directed acyclic task graphs", IEEE TPDS 4(6), 1993) and the deadline-driven fixing of
    variables in branch-and-bound for scheduling with communication delays (Hanen, Munier,
    Discrete Applied Math. 108, 2001); the group bounds are Carlier's head/tail bound on one
    machine (EJOR 11, 1982) and the area bound of :func:`area_bound`.
    """
    T, D = cost.n_tasks, cost.n_devices
    if T == 0 or cost.n_edges == 0:
        return 0.0
    if D == 0 or not np.isfinite(cost.class_time).any(axis=1).all():
        return math.inf
    p = cost.class_time
    head, tail = comm_paths(cost) if paths is None else paths
    finish, rest = (head + p).min(axis=1), (p + tail).min(axis=1)
    shareable = np.zeros(p.shape[1], dtype=bool)
    shareable[cost.device_class] = cost.shareable
    occupy = np.where(shareable[None, :], p * cost.share[:, None], p)
    nodes = np.unique(cost.node_of)
    node_area = np.empty((T, nodes.size))
    for k, n in enumerate(nodes.tolist()):
        classes = np.unique(cost.device_class[cost.node_of == n])
        node_area[:, k] = occupy[:, classes].min(axis=1) / np.count_nonzero(cost.node_of == n)
    head, tail = head.min(axis=1), tail.min(axis=1)
    on_device = _Groups(head, tail, occupy)
    on_node = _Groups(head, tail, node_area)

    (dev_lat, dev_inv), (node_lat, node_inv) = _crossing_floors(cost)
    u, v, b = cost.pred_idx, cost.pred_dst, cost.pred_bytes
    base = finish[u] + rest[v]
    with np.errstate(invalid="ignore"):
        need = np.concatenate([base + dev_lat + np.where(b > 0, b * dev_inv, 0.0),
                               base + node_lat + np.where(b > 0, b * node_inv, 0.0)])
    E = cost.n_edges
    order = np.argsort(-need, kind="stable")              # ties: device edges first, by position
    need_sorted = np.append(need[order], 0.0)
    best = float(need_sorted[0])                          # no edge forced: implied = 0
    implied = 0.0
    for k, e in enumerate(order.tolist()):
        groups = on_device if e < E else on_node
        edge = e % E
        implied = max(implied, groups.union(int(u[edge]), int(v[edge])))
        nxt = float(need_sorted[k + 1])
        best = min(best, max(implied, nxt))
        if implied >= nxt:
            break
    return best


def combined_bound(cost: CostModel, area: tuple | None = None) -> float:
    """The best analytic lower bound on every plan's makespan: the largest of
    :func:`lower_bound` (critical path, area), :func:`fork_join_bound`, :func:`fan_out_bound`,
    and the transfer-aware :func:`comm_path_bound` and :func:`crossing_bound` (which share one
    :func:`comm_paths`).

    ``area``: ``area_bound(cost, weights=True)`` when the caller has it already.
    """
    area = area_bound(cost, weights=True) if area is None else area
    return max(lower_bound(cost, area=area[0]), fork_join_bound(cost, area=area), fan_out_bound(cost),
               transfer_bound(cost))


def transfer_bound(cost: CostModel) -> float:
    """The larger of :func:`comm_path_bound` and :func:`crossing_bound`, from one :func:`comm_paths`:
    the bounds that see transfers no plan avoids (0 for an empty graph)."""
    if cost.n_tasks == 0 or cost.n_devices == 0:
        return comm_path_bound(cost)
    paths = comm_paths(cost)
    return max(comm_path_bound(cost, paths), crossing_bound(cost, paths))


def lower_bound(cost: CostModel, area: float | None = None) -> float:
    """The lower bound mappers are reported against (``design.md``, benchmark README).

    ``max(critical_path_bound(cost), area_bound(cost))``: no schedule of the graph on the cluster
    (ignoring memory, and with free transfers) can finish sooner. ``area``: the area bound, when
    the caller has computed it already.
    """
    return max(critical_path_bound(cost), area_bound(cost) if area is None else area)
