"""PEFT: Predict Earliest Finish Time, list scheduling with an optimistic cost table.

Policy (Arabnejad and Barbosa [1]_)
-----------------------------------
1. **Optimistic cost table.** For every task t and device p, ``OCT(t, p)`` is the length of the
   longest path from t's successors to a sink when t runs on p and every later task runs on the
   device best for it, ignoring device contention ([1]_ eq. 4)::

       OCT(t, p) = max over successors s of  min over devices q of
                   ( OCT(s, q) + w(s, q) + (c̄(t, s) if q != p else 0) ),

   with ``OCT = 0`` on sinks, ``w`` the task's time and ``c̄`` the mean transfer time of the edge
   over ordered pairs of distinct devices (as HEFT's rank). It depends on p only through p's
   device class (devices with identical time columns, :attr:`CostModel.device_class`), so the
   table is computed and kept as ``T × classes``, level by level from the sinks, in NumPy.
2. **Priorities.** ``rank_oct(t)`` is the mean of ``OCT(t, p)`` over the devices ([1]_ eq. 5);
   tasks are taken from a ready list by decreasing rank_oct (ties: topological order). When the
   rank order is itself topological the ready list is a plain sweep.
3. **Device choice.** The device minimising the *optimistic* EFT, ``EFT(t, p) + OCT(t, p)``
   ([1]_ eq. 6): an EFT that looks one step beyond the task, towards where its successors can
   go fast. ``EFT`` is insertion-based, and placement is memory-aware exactly as HEFT's
   (:func:`streammap.mappers.heft.list_schedule`, which PEFT reuses with the table as a bias).

The estimates written are the real start and finish times (not the optimistic ones), so
:func:`streammap.mappers.schedule.simulate` reproduces them and :func:`streammap.mappers.schedule.evaluate`
finds the plan memory-valid.

References
----------
.. [1] H. Arabnejad, J. G. Barbosa, "List scheduling algorithm for heterogeneous systems by an
   optimistic cost table", IEEE Transactions on Parallel and Distributed Systems 25(3),
   682-694, 2014.
"""

from __future__ import annotations

import numpy as np

from streammap.cost.model import CostModel, concat_ranges
from streammap.mappers.heft import check_placeable, list_schedule, priority_order
from streammap.mappers.schedule import Schedule

__all__ = ["peft", "optimistic_cost_table", "ClassRows"]


class ClassRows:
    """Rows of a per-class table read per device: ``rows[t]`` is ``table[t, device_class]``.

    Lets :func:`~streammap.mappers.heft.list_schedule` use a ``T × classes`` table as a
    ``T × D`` one without building the larger array.
    """

    __slots__ = ("table", "cls")

    def __init__(self, table: np.ndarray, device_class: np.ndarray):
        self.table = table
        self.cls = device_class

    def __getitem__(self, t):
        return self.table[t][self.cls]


def optimistic_cost_table(cost: CostModel, class_time: np.ndarray | None = None) -> np.ndarray:
    """``OCT[t, c]`` for every task t and device class c ([1]_ eq. 4; see the module docstring).

    Parameters
    ----------
    cost : CostModel
    class_time : ndarray, optional
        ``T × classes`` times to use instead of ``cost.class_time`` (``inf`` forbids a class).

    Returns
    -------
    ndarray, shape (T, classes)
    """
    ct = cost.class_time if class_time is None else class_time
    T, C = ct.shape
    cbar = cost.mean_comm(cost.succ_bytes)
    oct_ = np.zeros((T, C))
    best = np.zeros(T)                     # min over classes of OCT(s, q) + w(s, q)
    for lev in reversed(cost.levels):
        e = concat_ranges(cost.succ_ptr[lev], cost.succ_ptr[lev + 1])
        if e.size:
            s = cost.succ_idx[e]
            val = np.minimum(oct_[s] + ct[s], (best[s] + cbar[e])[:, None])
            has = cost.n_succ[lev] > 0
            rows = lev[has]
            offsets = (np.cumsum(cost.n_succ[rows]) - cost.n_succ[rows])
            oct_[rows] = np.maximum.reduceat(val, offsets, axis=0)
        best[lev] = (oct_[lev] + ct[lev]).min(axis=1)
    return oct_


def peft(cost: CostModel, *, memory_aware: bool = True, devices=None) -> Schedule:
    """Map a task graph with insertion-based, memory-aware PEFT ([1]_).

    Parameters
    ----------
    cost : CostModel
    memory_aware : bool, optional
        ``False`` ignores device capacities (like ``heft-plain``).
    devices : array of bool or int, optional
        Restrict the mapping to these devices (a mask of length D, or device positions).

    Returns
    -------
    Schedule
        ``mapper="peft"``; the real start and finish of every task, ``seq`` the placement order.

    Raises
    ------
    MappingError
        As :func:`streammap.mappers.heft.heft`: a task that fits on no device, or a memory stall
        that no ready task can break.

    Notes
    -----
    Deterministic. The table costs O(E · classes) NumPy work; the sweep is HEFT's.
    """
    times = None
    if devices is not None:
        mask = np.asarray(devices)
        if mask.dtype != bool:
            m = np.zeros(cost.n_devices, dtype=bool)
            m[mask] = True
            mask = m
        # Classes split by the restriction: a restricted copy of the table, per device.
        times = np.where(mask[None, :], cost.time, np.inf)
    check_placeable(cost, memory=memory_aware, times=times)
    if times is None:
        table = optimistic_cost_table(cost)
        bias = ClassRows(table, cost.device_class)
        counts = cost.class_count.astype(np.float64)
        rank = table @ counts / max(1, cost.n_devices)
    else:
        # Restricted classes: split each class into its kept and dropped devices.
        key = cost.device_class * 2 + mask.astype(np.int64)
        _, rep, cls = np.unique(key, return_index=True, return_inverse=True)
        cls = cls.reshape(-1)
        sub = times[:, rep]
        table = optimistic_cost_table(cost, sub)
        bias = ClassRows(table, cls)
        counts = np.bincount(cls, minlength=rep.size).astype(np.float64) * (mask[rep])
        rank = table @ counts / max(1.0, counts.sum())
    order = priority_order(cost, rank)
    return list_schedule(cost, order, times=times, bias=bias, memory_aware=memory_aware, mapper="peft")
