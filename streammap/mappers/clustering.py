"""Communication-aware clustering: cut the graph into chains, then map whole chains onto devices.

When communication dominates (CCR 10), a list scheduler that picks each task's device alone
accepts a transfer whenever the next device is free a little earlier, and pays for it on every
later edge of the same path. Clustering decides first which tasks share a device, with the heavy
edges inside clusters, and only then where each cluster runs.

Policy
------
1. **Linear clustering** (:func:`linear_chains`), after Kim and Browne [1]_: the longest path
   of the graph (task times plus transfer times, both averaged over the devices) becomes one
   cluster, then the longest path through the tasks left, and so on. Tasks of one chain depend on
   each other, so putting a chain on one device loses no parallelism, and every edge along it
   costs nothing. The exact method re-computes the longest path after each chain (``O(T·(T+E))``);
   here each chain is grown once from the unclustered task with the largest ``tlevel + blevel``
   (the longest path through it), downward along the successor that continues the longest path
   and upward along the predecessor that led to it, among tasks not yet clustered, so the whole
   decomposition costs ``O(T log T + E)``.
2. **Mapping the chains** (:func:`map_chains`), HEFT-style: tasks are taken in HEFT's priority
   order; the first task of a chain picks the device for the whole chain, the one where that task
   could start earliest plus the chain's total time there is smallest (an estimate of when the
   chain would finish if it ran back to back), over the devices where every task of the chain can
   run; later tasks of the chain follow it. The resulting assignment is re-timed by
   :func:`streammap.mappers.heft.list_schedule` (insertion, and memory when asked), so the plan
   is exact under the benchmark model and memory-valid by construction when memory-aware.

State: the chain of each task, per device the end of its last task (the estimate of step 2 only
appends), the device chosen for each chain. Deterministic: every tie goes to the lower task or
device position; nothing is random.

References
----------
.. [1] S. J. Kim, J. C. Browne, "A general approach to mapping of parallel computations upon
   multiprocessor architectures", International Conference on Parallel Processing, vol. 3,
   1-8, 1988.
"""

from __future__ import annotations

import heapq

import numpy as np

from streammap.cost.model import CostModel
from streammap.mappers.heft import list_schedule, priority_order, upward_rank
from streammap.mappers.partition import GroupTimes
from streammap.mappers.schedule import Schedule

__all__ = ["linear_chains", "map_chains", "chain_schedule", "cluster_schedule"]


def _levels(cost: CostModel) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(w, tlevel, blevel)``: mean task times and the longest-path lengths into and out of each
    task, with mean transfer times on the edges (``blevel`` is HEFT's upward rank)."""
    w = cost.mean_time()
    blevel = upward_rank(cost)
    cin = cost.mean_comm(cost.pred_bytes)
    tlevel = np.zeros(cost.n_tasks)
    pp, pi = cost.pred_ptr, cost.pred_idx
    for t in cost.topo.tolist():
        a, b = pp[t], pp[t + 1]
        if b > a:
            p = pi[a:b]
            tlevel[t] = float((tlevel[p] + w[p] + cin[a:b]).max())
    return w, tlevel, blevel


def linear_chains(cost: CostModel) -> np.ndarray:
    """Chain (cluster) number of every task, by linear clustering (see the module docstring).

    Parameters
    ----------
    cost : CostModel

    Returns
    -------
    ndarray of int
        ``chain[t]``; chains are numbered in the order they were formed (the longest first), and
        the tasks of one chain form a path of the graph.

    Examples
    --------
    A chain ``a -> b -> c`` with heavy edges and a side task ``d`` that also reads ``a``: the
    chain stays together and ``d`` is a cluster of its own (see ``tests/mappers``).
    """
    T = cost.n_tasks
    chain = np.full(T, -1, dtype=np.int64)
    if T == 0:
        return chain
    w, tlevel, blevel = _levels(cost)
    cout = cost.mean_comm(cost.succ_bytes)
    cin = cost.mean_comm(cost.pred_bytes)
    sp, si = cost.succ_ptr, cost.succ_idx
    pp, pi = cost.pred_ptr, cost.pred_idx
    through = tlevel + blevel
    # Longest path through a task first; ties by topological place (deterministic).
    heap = [(-float(through[t]), int(cost.topo_index[t]), t) for t in range(T)]
    heapq.heapify(heap)
    n = 0
    while heap:
        _, _, t = heapq.heappop(heap)
        if chain[t] >= 0:
            continue
        chain[t] = n
        u = t
        while True:                                   # down along the longest continuation
            a, b = sp[u], sp[u + 1]
            s = si[a:b]
            free = chain[s] < 0
            if not free.any():
                break
            score = np.where(free, cout[a:b] + blevel[s], -np.inf)
            u = int(s[int(np.argmax(score))])
            chain[u] = n
        u = t
        while True:                                   # up along the predecessor that leads here
            a, b = pp[u], pp[u + 1]
            p = pi[a:b]
            free = chain[p] < 0
            if not free.any():
                break
            score = np.where(free, tlevel[p] + w[p] + cin[a:b], -np.inf)
            u = int(p[int(np.argmax(score))])
            chain[u] = n
        n += 1
    return chain


def map_chains(cost: CostModel, chain: np.ndarray, order: np.ndarray | None = None,
               devices: np.ndarray | None = None) -> np.ndarray:
    """A device for every task such that each chain runs on one device (see the module docstring).

    Parameters
    ----------
    cost : CostModel
    chain : ndarray of int
        Chain number per task (:func:`linear_chains`).
    order : ndarray of int, optional
        Topological priority order (default HEFT's, :func:`~streammap.mappers.heft.priority_order`).
    devices : ndarray of int, optional
        The devices chains may use (default all); a chain that cannot run on any of them as a
        whole is split, its tasks placed one by one by earliest finish on any device.

    Returns
    -------
    ndarray of int
        Device position of each task.
    """
    T, D = cost.n_tasks, cost.n_devices
    if order is None:
        order = priority_order(cost)
    time = cost.time
    n_chains = int(chain.max()) + 1 if T else 0
    # Total time of each chain on each device (inf where one of its tasks cannot run).
    chain_time = np.zeros((n_chains, D))
    np.add.at(chain_time, chain, time)
    if devices is not None:
        mask = np.zeros(D, dtype=bool)
        mask[np.asarray(devices, dtype=np.int64)] = True
        chain_time[:, ~mask] = np.inf
    where = np.full(n_chains, -1, dtype=np.int64)
    dev = np.full(T, -1, dtype=np.int64)
    finish = np.zeros(T)
    avail = np.zeros(D)
    pp, pi, pb = cost.pred_ptr, cost.pred_idx, cost.pred_bytes
    lat, inv = cost.lat, cost.inv_bw
    for t in np.asarray(order).tolist():
        a, b = pp[t], pp[t + 1]
        if b > a:
            p = pi[a:b]
            dp = dev[p]
            arr = finish[p][:, None] + lat[dp] + pb[a:b, None] * inv[dp]
            arr[np.arange(b - a), dp] = finish[p]
            ready = arr.max(axis=0)
        else:
            ready = np.zeros(D)
        est = np.maximum(ready, avail)
        k = chain[t]
        d = where[k]
        if d < 0:
            score = est + chain_time[k]
            if np.isfinite(score).any():
                d = where[k] = int(np.argmin(score))
            else:                                      # the chain cannot stay together: this task alone
                d = int(np.argmin(est + time[t]))
        elif not np.isfinite(time[t, d]):
            d = int(np.argmin(est + time[t]))
        dev[t] = d
        finish[t] = est[d] + time[t, d]
        avail[d] = finish[t]
    return dev


def chain_schedule(cost: CostModel, *, devices: np.ndarray | None = None, memory_aware: bool = True,
                   mapper: str = "chains") -> Schedule:
    """Linear clustering, chains mapped HEFT-style, re-timed by the insertion list scheduler.

    Parameters
    ----------
    cost : CostModel
    devices, memory_aware, mapper
        As for :func:`cluster_schedule`, which maps the chains whole and re-times them.

    Returns
    -------
    Schedule
    """
    return cluster_schedule(cost, linear_chains(cost), devices=devices, memory_aware=memory_aware, mapper=mapper)


def cluster_schedule(cost: CostModel, cluster: np.ndarray, *, devices: np.ndarray | None = None,
                     scope: str = "device", memory_aware: bool = True, mapper: str) -> Schedule:
    """Clusters mapped whole (:func:`map_chains`), re-timed by the insertion list scheduler.

    The step every clustering mapper ends with (linear chains, heavy-edge groups, DSC).

    Parameters
    ----------
    cost : CostModel
    cluster : ndarray of int
        Cluster number of every task.
    devices : ndarray of int, optional
        The devices clusters may use (default all; see :func:`map_chains`).
    scope : {"device", "node"}
        Keep each task on its cluster's device, or only on that device's node (the list scheduler
        then places it among the node's devices, within ``devices``).
    memory_aware : bool
        Keep every device within capacity when re-timing (a task whose device cannot hold it
        raises :class:`~streammap.errors.MappingError`).
    mapper : str
        Name written in the schedule.

    Returns
    -------
    Schedule
    """
    order = priority_order(cost)
    dev = map_chains(cost, cluster, order, devices)
    if scope == "node":
        nodes = np.unique(cost.node_of)
        units = [np.flatnonzero(cost.node_of == n) for n in nodes]
        if devices is not None:
            keep = np.zeros(cost.n_devices, dtype=bool)
            keep[np.asarray(devices, dtype=np.int64)] = True
            units = [u[keep[u]] for u in units]
        rows = GroupTimes(cost, units, np.searchsorted(nodes, cost.node_of[dev]))
    else:
        rows = GroupTimes(cost, [np.array([d]) for d in range(cost.n_devices)], dev)
    return list_schedule(cost, order, times=rows, memory_aware=memory_aware, mapper=mapper)
