"""Memory oversubscription: planning beyond a device's memory, and what spilling costs.

A cluster file may set ``memory_oversubscription: F`` (F >= 1). The mappers then plan up to
F x capacity per device (``CostModel.capacity``); at run time the device still has only its real
capacity, and the runtime (``streammap.runtime.spill``) keeps within it by moving resident arrays
that are not needed yet to host memory, and back before use. This module holds the policy both
sides share, and the compile-time parts: what the spills cost, and refusing a plan that does not
fit even in F x capacity.

State: :class:`SpillBook`
-------------------------
Per device the bytes *resident* (finished results, by producing task), *spilled* (on the host),
and *reserved* (the expected output of each running task), and per result a pin count (inputs of
running tasks) and its consumers in plan order. The runtime feeds it real array sizes as tasks are
admitted and finish; :func:`estimate_spills` feeds it the cost model's sizes in the schedule's
time order. Both then see the same decisions.

Policy
------
- **Admission** of task k on device d: k's inputs are pinned; its spilled inputs from d are
  restored to d (a spilled input from another device is read from the host copy, as any
  transfer between devices would carry it, and counted as ``host_reads``); k's expected output is
  reserved on d. Then, on every device touched,
  while resident + reserved bytes exceed the real capacity, the unpinned resident result whose
  next use (its first consumer not yet admitted, by plan position) is *furthest* away is spilled:
  Belady's rule [1]_, exact here because the plan fixes the future order. A result no remaining
  task needs (a plan output) goes first.
- **Finish** of k: the reservation becomes k's real output (when it is kept), inputs are unpinned,
  and the device is brought back within capacity the same way.
- **Release**: a result whose last consumer has finished leaves (resident or spilled).
- Without oversubscription (F = 1) no book is kept and nothing ever spills. When the pinned
  inputs and reservations alone exceed the capacity, nothing can be spilled: the overflow is
  counted (the plan's F x capacity bound still holds).

Cost: each spilled or restored byte crosses the host link once, at the cluster's
``host_bandwidth`` (default :data:`DEFAULT_HOST_BANDWIDTH`, PCIe 4.0 x16), charged to the task
whose admission or finish caused it; :func:`estimate_spills` replays the schedule and re-times it
with :func:`streammap.placement.sharing.simulate_shared`.

References
----------
.. [1] L. A. Belady, "A study of replacement algorithms for a virtual-storage computer", IBM
   Systems Journal 5(2), 1966.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from streammap.cost.model import CostModel
from streammap.errors import MappingError
from streammap.mappers.heft import _size as _gib
from streammap.mappers.schedule import MEM_RTOL, Schedule, fits, peak_memory
from streammap.placement.sharing import simulate_shared

#: Host link bandwidth (bytes/s) when the cluster file gives no ``host_bandwidth``: PCIe 4.0 x16.
DEFAULT_HOST_BANDWIDTH = 25e9


@dataclass
class SpillStats:
    """What one device spilled: bytes to the host and back, how many moves, overflow seen."""

    spilled_bytes: float = 0.0
    restored_bytes: float = 0.0
    spills: int = 0
    restores: int = 0
    overflow: float = 0.0        # largest excess over capacity that nothing could relieve
    host_reads: float = 0.0      # spilled bytes that tasks on other devices read from the host

    def as_dict(self) -> dict:
        return {"spilled_bytes": self.spilled_bytes, "restored_bytes": self.restored_bytes,
                "spills": self.spills, "restores": self.restores, "overflow": self.overflow,
                "host_reads": self.host_reads}


@dataclass
class _Dev:
    capacity: float
    resident: dict = field(default_factory=dict)      # result -> bytes
    spilled: dict = field(default_factory=dict)
    reserved: dict = field(default_factory=dict)      # running task -> bytes
    stats: SpillStats = field(default_factory=SpillStats)

    def used(self) -> float:
        return sum(self.resident.values()) + sum(self.reserved.values())


class SpillBook:
    """The spill policy's state for all devices (see the module docstring).

    Parameters
    ----------
    capacity : dict
        Real capacity in bytes per device key (``inf``: never spills).
    consumers : dict
        Result (task key) -> plan positions of the tasks that use it, ascending.
    owner : dict
        Result -> the device key that produced it.
    """

    def __init__(self, capacity: dict, consumers: dict, owner: dict):
        self.devs = {d: _Dev(float(c)) for d, c in capacity.items()}
        self.consumers = {i: list(c) for i, c in consumers.items()}
        self._ptr = {i: 0 for i in consumers}
        self.owner = owner
        self.started: set = set()
        self.pins: dict = {}

    # -- queries -------------------------------------------------------------------------
    def next_use(self, i) -> float:
        c = self.consumers.get(i)
        if not c:
            return math.inf
        p = self._ptr[i]
        while p < len(c) and c[p] in self.started:
            p += 1
        self._ptr[i] = p
        return c[p] if p < len(c) else math.inf

    def stats(self) -> dict:
        return {d: v.stats for d, v in self.devs.items()}

    # -- events --------------------------------------------------------------------------
    def admit(self, k, pos, dev, inputs, reserve: float):
        """Task ``k`` (plan position ``pos``) starts on ``dev`` with ``inputs`` (results).

        Returns ``(restores, spills)``: lists of ``(result, device)`` to move; the caller spills
        first (to make room), then restores.
        """
        self.started.add(pos)
        for i in inputs:
            self.pins[i] = self.pins.get(i, 0) + 1
        restores = []
        touched = {dev}
        for i in inputs:
            o = self.owner.get(i)
            book = self.devs.get(o)
            if book is not None and i in book.spilled:
                if o != dev:                  # read from the host by the other device, not restored
                    book.stats.host_reads += book.spilled[i]
                    continue
                b = book.spilled.pop(i)
                book.resident[i] = b
                book.stats.restored_bytes += b
                book.stats.restores += 1
                restores.append((i, o))
                touched.add(o)
        if dev in self.devs:
            self.devs[dev].reserved[k] = float(reserve)
        spills = []
        for d in sorted(touched, key=str):
            spills += self._make_room(d)
        return restores, spills

    def finish(self, k, dev, inputs, out_bytes):
        """Task ``k`` finished on ``dev``; ``out_bytes`` of its result stay (``None``: not kept).

        Returns the ``(result, device)`` spills that bring ``dev`` back within capacity.
        """
        for i in inputs:
            n = self.pins.get(i, 0) - 1
            if n > 0:
                self.pins[i] = n
            else:
                self.pins.pop(i, None)
        book = self.devs.get(dev)
        if book is None:
            return []
        book.reserved.pop(k, None)
        if out_bytes is not None:
            book.resident[k] = float(out_bytes)
        return self._make_room(dev)

    def hold(self, i, dev, nbytes: float, spilled: bool = False, pinned: bool = False):
        """``nbytes`` of ``i`` are on ``dev`` outside the task events: a result carried from an
        earlier run segment (resident, or ``spilled`` to the host), or, ``pinned``, bytes that
        must stay until :meth:`unpin` (a copy handed to another process). Returns the spills
        that bring ``dev`` back within capacity."""
        book = self.devs.get(dev)
        if book is None:
            return []
        self.owner[i] = dev
        if pinned:
            self.pins[i] = self.pins.get(i, 0) + 1
        (book.spilled if spilled else book.resident)[i] = float(nbytes)
        return [] if spilled else self._make_room(dev)

    def unpin(self, i) -> None:
        """Bytes held with ``pinned`` leave (see :meth:`hold`)."""
        self.pins.pop(i, None)
        self.release(i)

    def release(self, i) -> None:
        """Result ``i`` is no longer needed: it leaves its device (or the host)."""
        book = self.devs.get(self.owner.get(i))
        if book is not None:
            book.resident.pop(i, None)
            book.spilled.pop(i, None)

    def _make_room(self, d):
        book = self.devs[d]
        over = book.used() - book.capacity * (1.0 + MEM_RTOL)
        out = []
        if over <= 0:
            return out
        cands = [i for i in book.resident if i not in self.pins and book.resident[i] > 0]
        cands.sort(key=lambda i: (self.next_use(i), book.resident[i]), reverse=True)
        for i in cands:
            if over <= 0:
                break
            b = book.resident.pop(i)
            book.spilled[i] = b
            book.stats.spilled_bytes += b
            book.stats.spills += 1
            over -= b
            out.append((i, d))
        if over > book.stats.overflow:
            book.stats.overflow = over
        return out


@dataclass
class SpillEstimate:
    """The spill traffic a schedule implies, and its re-timed schedule."""

    schedule: Schedule
    extra: np.ndarray              # seconds of spill traffic charged to each task
    stats: dict                    # device position -> SpillStats
    host_bandwidth: float

    @property
    def spilled_bytes(self) -> float:
        return float(sum(s.spilled_bytes for s in self.stats.values()))

    @property
    def restored_bytes(self) -> float:
        return float(sum(s.restored_bytes for s in self.stats.values()))


def host_bandwidth(cost: CostModel) -> float:
    """The host link's bandwidth for spills (the cluster's ``host_bandwidth``, else the default)."""
    bw = getattr(cost.cluster, "host_bandwidth", None)
    return float(bw) if bw else DEFAULT_HOST_BANDWIDTH


def estimate_spills(cost: CostModel, schedule: Schedule) -> SpillEstimate:
    """Replay ``schedule`` through a :class:`SpillBook` at the devices' real capacities, charge
    each task the time its spills and restores take on the host link, and re-time the schedule
    (:func:`streammap.placement.sharing.simulate_shared`, the runtime's admission rule).

    Without oversubscription (every capacity already real) nothing spills and the schedule is
    returned as it is.
    """

    T, D = cost.n_tasks, cost.n_devices
    F = float(getattr(cost.cluster, "oversubscription", 1.0) or 1.0)
    bw = host_bandwidth(cost)
    if F <= 1.0 or T == 0:
        return SpillEstimate(schedule, np.zeros(T), {}, bw)
    real = {d: cost.devices[d].memory for d in range(D)}
    dev = schedule.device
    # Plan position = the order tasks are admitted in (start, then finish, then placement order).
    seq = schedule.seq if schedule.seq is not None else np.arange(T)
    order = np.lexsort((seq, schedule.finish, schedule.start))
    pos = np.empty(T, dtype=np.int64)
    pos[order] = np.arange(T)
    consumers, owner, inputs = {}, {}, {}
    for t in range(T):
        owner[t] = int(dev[t])
        succ = cost.succ_idx[cost.succ_ptr[t]:cost.succ_ptr[t + 1]]
        consumers[t] = sorted(int(pos[c]) for c in succ)
        preds = cost.pred_idx[cost.pred_ptr[t]:cost.pred_ptr[t + 1]]
        inputs[t] = [int(p) for p in preds if cost.out[p] > 0]
    book = SpillBook(real, consumers, owner)
    moved = np.zeros(T)                      # bytes each task moves
    size = {t: float(cost.out[t]) for t in range(T)}
    left = {t: len(consumers[t]) for t in range(T)}
    # Finish events in time order, processed before any admission at or after them.
    fin_order = sorted(range(T), key=lambda t: (schedule.finish[t], pos[t]))
    fi = 0

    def settle(t):
        spills = book.finish(t, int(dev[t]), inputs[t], size[t] if cost.out[t] > 0 else None)
        moved[t] += sum(size[i] for i, _ in spills)
        for p in inputs[t]:
            left[p] -= 1
            if left[p] == 0:
                book.release(p)

    for t in order.tolist():
        s = schedule.start[t]
        while fi < T and (schedule.finish[fin_order[fi]] < s or
                          (schedule.finish[fin_order[fi]] == s and pos[fin_order[fi]] < pos[t]
                           and schedule.finish[fin_order[fi]] > schedule.start[fin_order[fi]])):
            settle(fin_order[fi])
            fi += 1
        restores, spills = book.admit(t, int(pos[t]), int(dev[t]), inputs[t], float(cost.out[t]))
        moved[t] += sum(size[i] for i, _ in restores) + sum(size[i] for i, _ in spills)
    while fi < T:
        settle(fin_order[fi])
        fi += 1
    extra = moved / bw
    if not extra.any():
        return SpillEstimate(schedule, extra, book.stats(), bw)
    timed = simulate_shared(cost, schedule.device, schedule.order(), extra=extra, mapper=schedule.mapper)
    timed.seq = schedule.seq
    return SpillEstimate(timed, extra, book.stats(), bw)


def check_plan_memory(cost: CostModel, schedule: Schedule) -> None:
    """Refuse a schedule that holds more than F x capacity on some device at some instant.

    Raises
    ------
    MappingError
        Naming the device, the instant, its capacity (and F), and the task that starts or runs
        there holding the most memory, with that task's call site.
    """

    peak = peak_memory(cost, schedule.device, schedule.start, schedule.finish)
    bad = np.flatnonzero(~fits(peak, cost.capacity))
    if not bad.size:
        return
    d = int(bad[0])
    on = np.flatnonzero(schedule.device == d)
    # The first instant where the use exceeds the capacity, and the biggest task running then.
    times = sorted(set(schedule.start[on].tolist()) | set(schedule.finish[on].tolist()))
    t_bad, running = None, []
    for x in times:
        use = 0.0
        for t in on.tolist():
            if schedule.start[t] <= x < schedule.finish[t]:
                use += cost.mem[t]
        for t in on.tolist():
            succ = cost.succ_idx[cost.succ_ptr[t]:cost.succ_ptr[t + 1]]
            end = schedule.start[succ].max() if succ.size else -math.inf
            if schedule.finish[t] <= x < end:
                use += cost.out[t]
        if use > cost.capacity[d] * (1.0 + MEM_RTOL):
            t_bad = float(x)
            running = [t for t in on.tolist() if schedule.start[t] <= x < schedule.finish[t]] or \
                [t for t in on.tolist() if schedule.start[t] == x]
            break
    task = max(running, key=lambda t: (cost.mem[t], -t)) if running else int(on[0])
    tid = cost.tasks[task]
    path, line = cost.site_line(task)
    F = float(getattr(cost.cluster, "oversubscription", 1.0) or 1.0)
    real = cost.devices[d].memory
    when = f" at t={t_bad:.6g} s" if t_bad is not None else ""
    raise MappingError(
        f"the plan needs {_gib(peak[d])} on device {cost.devices[d].id}{when}, more than its "
        f"{_gib(real)} x memory_oversubscription {F:g} = {_gib(cost.capacity[d])}; task {tid} "
        f"(kernel {cost.graph.nodes[tid].get('kernel')}) holds {_gib(cost.mem[task])} there",
        path=path, line=line,
        hint="use a memory-aware mapper (auto, heft, peft), raise memory_oversubscription or add device "
             "memory in the cluster file, or reduce the kernels' mem=/out=")
