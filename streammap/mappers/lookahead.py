"""HEFT with a one-level lookahead: choose a task's device by when its children could finish.

HEFT puts each task on the device where *it* finishes first. When transfers are expensive
(CCR 10) that is short-sighted: a branch of a fork-join finishes earliest on an idle remote device,
and then its output has to cross the network to the join. Bittencourt, Sakellariou and Madeira
[1]_ keep HEFT's order but choose the device that minimises the earliest finish time of the
task's *children*, each child placed on its best device given where its inputs placed so far
would come from.

Policy
------
Tasks are taken in HEFT's priority order (:func:`streammap.mappers.heft.priority_order`). For the
task ``t`` at hand and each device ``d`` it may run on:

* ``t`` starts on ``d`` at the later of its inputs' arrival and the end of ``d``'s last task
  (devices only append in this estimate), and finishes at ``eft(t, d)``;
* each child ``c`` could then start on each device ``d'`` at the latest of: the arrivals of its
  inputs already placed (kept per child and updated as tasks are placed, so the estimate costs
  ``O(D)`` per edge), the arrival of ``t``'s output from ``d``, and the end of ``d'``'s last task
  (``eft(t, d)`` itself on ``d``); it finishes at that plus its time on ``d'``, and its earliest
  finish is the best ``d'``;
* the score of ``d`` is the largest earliest finish over the children (``eft(t, d)`` for a sink).

``t`` goes to the device with the smallest score, ties to the smaller ``eft(t, d)``, then the lower
device position. The assignment is re-timed by :func:`streammap.mappers.heft.list_schedule`
(insertion, and memory when asked), so the plan is exact under the benchmark model.

State: per device the end of its last task; per task its device and estimated finish, and the
arrival vector (over devices) of its inputs placed so far. Deterministic: no randomness, ties by
position. Work ``O(E · D²)`` (one ``D × D`` block per edge), so ``auto`` runs it on graphs below
its large-graph threshold only.

References
----------
.. [1] L. F. Bittencourt, R. Sakellariou, E. R. M. Madeira, "DAG scheduling using a lookahead
   variant of the Heterogeneous Earliest Finish Time algorithm", 18th Euromicro Conference on
   Parallel, Distributed and Network-based Processing (PDP), 27-34, 2010.
"""

from __future__ import annotations

import numpy as np

from streammap.cost.model import CostModel
from streammap.mappers.heft import list_schedule, priority_order
from streammap.mappers.partition import GroupTimes
from streammap.mappers.schedule import Schedule

__all__ = ["lookahead_assignment", "lookahead_heft"]


def lookahead_assignment(cost: CostModel, order: np.ndarray | None = None,
                         devices: np.ndarray | None = None) -> np.ndarray:
    """Device of every task under the one-level lookahead (see the module docstring).

    Parameters
    ----------
    cost : CostModel
    order : ndarray of int, optional
        Topological priority order (default HEFT's).
    devices : ndarray of int, optional
        The devices tasks may use (default all; a task that can run on none of them may use any).

    Returns
    -------
    ndarray of int
        Device position of each task.
    """
    T, D = cost.n_tasks, cost.n_devices
    if order is None:
        order = priority_order(cost)
    time = cost.time
    if devices is not None:
        mask = np.zeros(D, dtype=bool)
        mask[np.asarray(devices, dtype=np.int64)] = True
        time = np.where(mask[None, :], time, np.inf)
        lost = ~np.isfinite(time).any(axis=1)
        time[lost] = cost.time[lost]
    lat, inv = cost.lat, cost.inv_bw
    same = np.eye(D, dtype=bool)
    sp, si, sb = cost.succ_ptr, cost.succ_idx, cost.succ_bytes
    ready = np.zeros((T, D))                 # arrival of the inputs placed so far, per device
    avail = np.zeros(D)
    dev = np.full(T, -1, dtype=np.int64)
    rows = np.arange(D)
    for t in np.asarray(order).tolist():
        w = time[t]
        eft = np.maximum(ready[t], avail) + w                        # (D,) inf where t cannot run
        a, b = sp[t], sp[t + 1]
        if b > a and np.isfinite(eft).sum() > 1:
            kids = si[a:b]
            # arr[k, d, d']: arrival of t's output at child k's device d' when t runs on d.
            arr = eft[None, :, None] + lat[None] + sb[a:b, None, None] * inv[None]
            arr = np.where(same[None], eft[None, :, None], arr)
            # The devices' ends if t runs on d: d's end becomes eft(t, d).
            ends = np.where(same, eft[:, None], avail[None, :])
            with np.errstate(invalid="ignore"):
                est = np.maximum(np.maximum(arr, ends[None]), ready[kids][:, None, :])
                kid_eft = (est + time[kids][:, None, :]).min(axis=2)   # (k, D)
            score = kid_eft.max(axis=0)
            score = np.where(np.isfinite(eft), score, np.inf)
            d = int(np.lexsort((rows, eft, score))[0])
        else:
            d = int(np.argmin(eft))
        f = float(eft[d])
        dev[t] = d
        avail[d] = f
        if b > a:
            kids = si[a:b]
            arrive = f + lat[d][None, :] + sb[a:b, None] * inv[d][None, :]
            arrive[:, d] = f
            np.maximum(ready[kids], arrive, out=arrive)
            ready[kids] = arrive
    return dev


def lookahead_heft(cost: CostModel, *, devices: np.ndarray | None = None, rank: np.ndarray | None = None,
                   memory_aware: bool = True, mapper: str = "lookahead") -> Schedule:
    """The lookahead assignment (:func:`lookahead_assignment`) re-timed by the insertion list
    scheduler in HEFT's order.

    Parameters
    ----------
    cost : CostModel
    devices : ndarray of int, optional
        Restrict the tasks to these devices.
    rank : ndarray, optional
        Priorities (default HEFT's upward rank), turned into an order by
        :func:`~streammap.mappers.heft.priority_order`.
    memory_aware : bool
        Keep every device within capacity when re-timing (raises
        :class:`~streammap.errors.MappingError` when the assignment cannot).
    mapper : str
        Name written in the schedule.

    Returns
    -------
    Schedule
    """
    order = priority_order(cost, rank)
    dev = lookahead_assignment(cost, order, devices)
    rows = GroupTimes(cost, [np.array([d]) for d in range(cost.n_devices)], dev)
    return list_schedule(cost, order, times=rows, memory_aware=memory_aware, mapper=mapper)
