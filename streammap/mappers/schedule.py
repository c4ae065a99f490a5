"""Schedules, and the benchmark model that scores them.

A :class:`Schedule` is what every mapper returns: for each task (by position in the
:class:`~streammap.cost.model.CostModel`) a device, an estimated start and finish, and, through
:meth:`Schedule.order`, the order of the tasks on each device. The plan writer turns it into
``plan.yaml``.

:func:`simulate` and :func:`evaluate` re-score *any* assignment and per-device order under the
benchmark model of ``shared/benchmarks/README.md``, independently of the mapper that made it, so
tests (and future mappers) can check a schedule rather than trust it:

* a task starts when its device has finished the task before it in the device's order and every
  input has arrived (``finish[p] + lat + bytes / bw`` from another device, ``finish[p]`` from the
  same one); one task at a time per device, no preemption, no contention on links;
* memory, as half-open intervals: while t runs on d, over ``[start, finish)``, it holds
  ``mem[t]``; its output, ``out[t]`` bytes, stays on d over ``[finish, L)`` where ``L`` is the
  latest start among its consumers (an output nobody consumes leaves at once); at no instant may
  the sum on a device exceed its capacity. A zero-length interval holds nothing.

A schedule whose estimated times came from a mapper that follows the same model (HEFT here) is
reproduced exactly by :func:`simulate`; the tests rely on that.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from streammap.cost.model import CostModel

#: Relative slack allowed when comparing memory use with a capacity (float sums of byte counts).
MEM_RTOL = 1e-9


def fits(used, capacity):
    """Whether ``used`` bytes fit in ``capacity`` (element-wise; with :data:`MEM_RTOL` slack)."""
    return np.asarray(used) <= np.asarray(capacity) * (1.0 + MEM_RTOL)


@dataclass(eq=False)
class Schedule:
    """A mapping: device, start and finish per task position.

    Attributes
    ----------
    mapper : str
        Name of the mapper that made it (``"heft"``, ``"simulate"``, ...).
    device : ndarray of int
        Device position of each task.
    start, finish : ndarray of float
        Estimated start and finish of each task, in seconds from the start of the run.
    makespan : float
        ``finish.max()`` (0 for an empty graph).
    n_devices : int, optional
        Number of devices of the cluster (so that :meth:`order` also lists idle devices).
    seq : ndarray of int, optional
        The order in which the mapper placed the tasks; breaks ties between tasks that start and
        finish at the same instant on one device (zero-duration tasks), which must keep their
        dependency order.
    bound : float, optional
        A lower bound on the makespan of *every* plan of the graph that the mapper proved (the
        exact solver's, :mod:`streammap.mappers.exact`); ``None`` when it proved none.
    heft_makespan : float, optional
        The makespan of :func:`~streammap.mappers.heft.heft`'s plan of the same cost model, when
        the mapper ran HEFT on it (``auto`` does, as its first candidate): the plan's
        ``heft_makespan`` without a second HEFT pass. ``None`` when it did not (or HEFT failed).
    analytic_bound : float, optional
        :func:`~streammap.cost.model.combined_bound` of the same cost model, when the mapper
        computed it (``auto`` does before its exact step or search): the plan's lower bound
        without a second pass over the graph. ``None`` when it did not.
    """

    mapper: str
    device: np.ndarray
    start: np.ndarray
    finish: np.ndarray
    makespan: float
    n_devices: int | None = None
    seq: np.ndarray | None = field(default=None, repr=False)
    bound: float | None = None
    heft_makespan: float | None = None
    analytic_bound: float | None = None

    def order(self) -> list[np.ndarray]:
        """Task positions on each device, in the order the device runs them.

        Sorted by ``(start, finish, seq)`` (``seq`` defaults to the task position).
        """
        D = self.n_devices if self.n_devices is not None else (int(self.device.max()) + 1 if self.device.size else 0)
        seq = self.seq if self.seq is not None else np.arange(self.device.size)
        o = np.lexsort((seq, self.finish, self.start, self.device))
        bounds = np.searchsorted(self.device[o], np.arange(D + 1))
        return [o[bounds[d]:bounds[d + 1]] for d in range(D)]


def simulate(cost: CostModel, device: Sequence[int], order: Sequence[Sequence[int]], mapper: str = "simulate") -> Schedule:
    """Start and finish times of an assignment and per-device order under the benchmark model.

    Every task starts as soon as its device is free (the previous task in ``order[d]`` has
    finished) and all its inputs have arrived.

    Parameters
    ----------
    cost : CostModel
    device : sequence of int
        Device position of each task.
    order : sequence of sequences of int
        ``order[d]``: the task positions on device d, in run order.

    Returns
    -------
    Schedule

    Raises
    ------
    ValueError
        If the order does not list every task exactly once on its own device, if a task is on a
        device where it cannot run, or if the orders contradict the dependencies (deadlock).
    """
    T, D = cost.n_tasks, cost.n_devices
    device = np.asarray(device, dtype=np.int64)
    if device.shape != (T,):
        raise ValueError(f"device has shape {device.shape}, expected ({T},)")
    if T and (device.min() < 0 or device.max() >= D):
        raise ValueError("device positions out of range")
    prev = np.full(T, -1, dtype=np.int64)
    seen = np.zeros(T, dtype=np.int64)
    for d, seq in enumerate(order):
        seq = np.asarray(seq, dtype=np.int64)
        if seq.size == 0:
            continue
        if (device[seq] != d).any():
            bad = int(seq[device[seq] != d][0])
            raise ValueError(f"task {cost.tasks[bad]} is ordered on device {d} but assigned to {device[bad]}")
        seen[seq] += 1
        prev[seq[1:]] = seq[:-1]
    if (seen != 1).any():
        bad = int(np.flatnonzero(seen != 1)[0])
        raise ValueError(f"task {cost.tasks[bad]} appears {seen[bad]} times in the device orders")
    w = cost.times_on(device)
    if not np.isfinite(w).all():
        bad = int(np.flatnonzero(~np.isfinite(w))[0])
        raise ValueError(f"task {cost.tasks[bad]} cannot run on {cost.devices[device[bad]].id}")

    # Kahn over dependencies plus device-order edges.
    next_on_dev = np.full(T, -1, dtype=np.int64)
    has_prev = prev >= 0
    next_on_dev[prev[has_prev]] = np.flatnonzero(has_prev)
    waiting = cost.n_pred + has_prev
    start = np.zeros(T)
    finish = np.zeros(T)
    stack = list(np.flatnonzero(waiting == 0)[::-1])
    pp, pi, pb = cost.pred_ptr, cost.pred_idx, cost.pred_bytes
    sp, si = cost.succ_ptr, cost.succ_idx
    lat, inv = cost.lat, cost.inv_bw
    done = 0
    waiting = waiting.tolist()
    while stack:
        t = int(stack.pop())
        d = device[t]
        s = finish[prev[t]] if prev[t] >= 0 else 0.0
        a, b = pp[t], pp[t + 1]
        if b > a:
            P = pi[a:b]
            dp = device[P]
            arr = finish[P] + lat[dp, d] + pb[a:b] * inv[dp, d]
            s = max(s, float(arr.max()))
        start[t] = s
        finish[t] = s + w[t]
        done += 1
        for c in si[sp[t]:sp[t + 1]].tolist():
            waiting[c] -= 1
            if waiting[c] == 0:
                stack.append(c)
        n = next_on_dev[t]
        if n >= 0:
            waiting[n] -= 1
            if waiting[n] == 0:
                stack.append(n)
    if done != T:
        stuck = [cost.tasks[i] for i in range(T) if waiting[i] > 0][:3]
        raise ValueError(f"the device orders contradict the dependencies (deadlock at {', '.join(stuck)})")
    makespan = float(finish.max()) if T else 0.0
    seq = np.empty(T, dtype=np.int64)
    for d, o in enumerate(order):
        o = np.asarray(o, dtype=np.int64)
        seq[o] = np.arange(o.size)
    return Schedule(mapper, device, start, finish, makespan, n_devices=D, seq=seq)


def peak_memory(cost: CostModel, device, start, finish) -> np.ndarray:
    """Peak bytes held on each device under the memory model of the module docstring."""
    T, D = cost.n_tasks, cost.n_devices
    device = np.asarray(device, dtype=np.int64)
    start = np.asarray(start, dtype=np.float64)
    finish = np.asarray(finish, dtype=np.float64)
    # Output residency ends at the latest start of the consumers.
    last = np.full(T, -math.inf)
    rows = np.flatnonzero(cost.n_succ > 0)
    if rows.size:
        last[rows] = np.maximum.reduceat(start[cost.succ_idx], cost.succ_ptr[rows])
    run = (finish > start) & (cost.mem > 0)
    outk = (last > finish) & (cost.out > 0)
    ev_dev = np.concatenate([device[run], device[run], device[outk], device[outk]])
    ev_t = np.concatenate([start[run], finish[run], finish[outk], last[outk]])
    ev_d = np.concatenate([cost.mem[run], -cost.mem[run], cost.out[outk], -cost.out[outk]])
    peak = np.zeros(D)
    if ev_t.size == 0:
        return peak
    o = np.lexsort((ev_t, ev_dev))
    dv, tv, dl = ev_dev[o], ev_t[o], ev_d[o]
    level = np.cumsum(dl)
    first = np.r_[True, dv[1:] != dv[:-1]]
    base = np.maximum.accumulate(np.where(first, np.arange(dl.size), 0))
    level = level - (level[base] - dl[base])           # cumulative sum within each device
    last_of_instant = np.r_[(dv[1:] != dv[:-1]) | (tv[1:] != tv[:-1]), True]
    np.maximum.at(peak, dv[last_of_instant], level[last_of_instant])
    return peak


def evaluate(cost: CostModel, schedule: Schedule) -> tuple[float, bool, np.ndarray]:
    """Re-score a schedule's assignment and order under the benchmark model.

    Returns
    -------
    makespan : float
        Makespan of :func:`simulate` on ``schedule.device`` and ``schedule.order()``.
    memory_valid : bool
        Whether no device ever holds more than its capacity.
    peak_memory : ndarray
        Peak bytes held on each device.
    """
    sim = simulate(cost, schedule.device, schedule.order())
    peak = peak_memory(cost, sim.device, sim.start, sim.finish)
    return sim.makespan, bool(fits(peak, cost.capacity).all()), peak
