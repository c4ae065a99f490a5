"""Graph partitioning for placement: keep heavy edges inside a device group.

:func:`partition_tasks` cuts the task graph (made undirected) into one part per device group with
METIS [1]_ through ``pymetis``: vertices weighted by the task's mean time, edges by the bytes they
carry, and each part's target weight proportional to the speed of its group (so a group twice as
fast gets twice the work). :class:`GroupTimes` then gives the list scheduler
(:func:`streammap.mappers.heft.list_schedule`) each task's times restricted to the devices of
its part, so that HEFT's insertion and memory checks decide the device and the order inside the
group while the cut decides which edges cross groups.

METIS is run with a fixed seed, so the parts, and the plans built on them, are deterministic.

References
----------
.. [1] G. Karypis, V. Kumar, "A fast and high quality multilevel scheme for partitioning
   irregular graphs", SIAM Journal on Scientific Computing 20(1), 359-392, 1998.
"""

from __future__ import annotations

import math

import numpy as np

from streammap.cost.model import CostModel

__all__ = ["partition_tasks", "device_speed", "GroupTimes", "available"]

try:                                            # pragma: no cover - depends on the environment
    import pymetis
except ImportError:                             # pragma: no cover
    pymetis = None


def available() -> bool:
    """Whether ``pymetis`` can be imported (the partition candidates are skipped otherwise)."""
    return pymetis is not None


def device_speed(cost: CostModel) -> np.ndarray:
    """Relative throughput of every device: the inverse of its total time over the tasks it can run,
    scaled by the share of tasks it can run (0 for a device that runs none)."""
    fin = np.isfinite(cost.class_time)
    tot = np.where(fin, cost.class_time, 0.0).sum(axis=0)
    share = fin.mean(axis=0) if cost.n_tasks else np.ones(cost.class_time.shape[1])
    with np.errstate(divide="ignore", invalid="ignore"):
        sp = np.where(tot > 0, share / tot, np.where(share > 0, math.inf, 0.0))
    if np.isinf(sp).any():                      # zero-time tasks only: all equal
        sp = np.where(share > 0, 1.0, 0.0)
    return sp[cost.device_class]


def partition_tasks(cost: CostModel, weights, seed: int = 0) -> np.ndarray:
    """Part of every task, for ``len(weights)`` parts with target shares proportional to ``weights``.

    Parameters
    ----------
    cost : CostModel
    weights : sequence of float
        Relative target weight of each part (e.g. the summed speed of a device group).
    seed : int
        METIS seed.

    Returns
    -------
    ndarray of int
        Part of each task position, in ``range(len(weights))``.
    """
    k = len(weights)
    T = cost.n_tasks
    if k <= 1 or T == 0 or pymetis is None:
        return np.zeros(T, dtype=np.int64)
    if T <= k:
        return np.arange(T, dtype=np.int64) % k
    # Undirected CSR: predecessors and successors of each task (a DAG has no 2-cycles).
    src = np.concatenate([cost.pred_dst, np.repeat(np.arange(T), cost.n_succ)])
    dst = np.concatenate([cost.pred_idx, cost.succ_idx])
    byt = np.concatenate([cost.pred_bytes, cost.succ_bytes])
    o = np.lexsort((dst, src))
    src, dst, byt = src[o], dst[o], byt[o]
    xadj = np.zeros(T + 1, dtype=np.int64)
    np.cumsum(np.bincount(src, minlength=T), out=xadj[1:])
    top = float(byt.max()) if byt.size else 0.0
    ew = (1 + np.rint(byt / top * 1e5)).astype(np.int64) if top > 0 else np.ones(byt.size, dtype=np.int64)
    mt = cost.mean_time()
    mt = np.where(np.isfinite(mt), mt, 0.0)
    tmax = float(mt.max()) if T else 0.0
    vw = (1 + np.rint(mt / tmax * 1e4)).astype(np.int64) if tmax > 0 else np.ones(T, dtype=np.int64)
    w = np.asarray(weights, dtype=np.float64)
    w = (w / w.sum()).tolist()
    w[-1] = max(0.0, 1.0 - math.fsum(w[:-1]))
    adjacency = pymetis.CSRAdjacency(xadj.tolist(), dst.tolist())
    res = pymetis.part_graph(k, adjacency, vweights=vw.tolist(), eweights=ew.tolist(), tpwgts=w,
                             options=pymetis.Options(seed=seed))
    return np.asarray(res.vertex_part, dtype=np.int64)


class GroupTimes:
    """Task times restricted to the devices of the task's group: ``rows[t]``.

    ``groups`` is a list of device-position arrays; ``part[t]`` the group of task t. A task that
    can run on no device of its group keeps its full row.
    """

    __slots__ = ("time", "part", "pen")

    def __init__(self, cost: CostModel, groups, part: np.ndarray):
        D = cost.n_devices
        self.pen = np.full((len(groups), D), math.inf)
        for g, devs in enumerate(groups):
            self.pen[g, np.asarray(devs, dtype=np.int64)] = 0.0
        self.time = cost.time
        part = np.asarray(part, dtype=np.int64).copy()
        for g, devs in enumerate(groups):
            rows = np.flatnonzero(part == g)
            if rows.size:
                ok = np.isfinite(self.time[np.ix_(rows, np.asarray(devs, dtype=np.int64))]).any(axis=1)
                part[rows[~ok]] = -1
        self.part = part.tolist()

    def __getitem__(self, t):
        g = self.part[t]
        return self.time[t] if g < 0 else self.time[t] + self.pen[g]
