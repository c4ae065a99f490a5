"""Dominant Sequence Clustering, then the clusters merged onto the devices and list-scheduled.

When communication dominates (CCR 1 and 10), the question is less *where* each task runs than
*which tasks share a device*: every edge inside one device costs nothing. The clustering
literature answers it in two steps, which this module follows: cluster the graph as if there
were as many processors as needed, zeroing the edges whose transfer lies on the longest path;
then merge the clusters onto the real devices.

Policy
------
1. **DSC** (:func:`dsc_clusters`), Yang and Gerasoulis [1]_. Every task starts in a cluster of
   its own and the graph's parallel time is its *dominant sequence*, the longest path with task
   times and transfer times. Tasks are examined in topological order, always the *free* task
   (every predecessor examined) with the highest priority ``tlevel + blevel`` (the length of the
   longest path through it under the clustering so far). The examined task is appended to the
   cluster of one of its predecessors, zeroing that edge, when that makes it start earlier than
   in a cluster of its own; the clusters tried are those of its predecessors in the order their
   data would arrive, the dominant predecessor's first (at most :data:`DSC_TRIES` of them). A
   task appended to a cluster starts once the cluster's last task ends and the data from
   predecessors in other clusters has arrived. *Dominant sequence reduction warranty* (DSRW):
   while a partially free task (some predecessors examined) has a higher priority than the free
   task at hand, the free task is not appended to the cluster that the partially free task's
   dominant predecessor holds, so that a later zeroing on the dominant sequence is not spoilt.
   Task times are the mean (or the fastest) time over the devices, transfers their mean over the
   pairs of distinct devices (HEFT's ``c̄``), or over the pairs across nodes or inside a node.
   Cost ``O((T + E) log T)``.
2. **Merging** (:func:`merge_clusters`), after Sarkar [2]_: DSC assumes an unbounded number of
   processors and leaves about as many clusters as the graph is wide. The pairs of DSC's clusters
   are taken by the traffic between them (bytes summed over their edges), dearest first, and
   the two merged clusters that hold them are joined, until ``target`` clusters remain, as long
   as the merged work stays within
   :data:`MERGE_CAP` times the work a device of the fastest kind would get in proportion to its
   speed (so that one cluster cannot swallow the graph); clusters never joined by an edge are
   left for the mapping.
3. **Mapping** (:func:`dsc_schedule`): the clusters are mapped whole onto devices HEFT-style
   (:func:`streammap.mappers.clustering.map_chains`: in HEFT's priority order, the first task
   of a cluster picks the device where that task could start earliest plus the cluster's total
   time there is least). A cluster is then kept on that device, or (``scope="node"``) only on
   its node, HEFT placing its tasks among the node's devices, where links are cheap. The
   assignment is re-timed by the insertion list scheduler
   (:func:`streammap.mappers.heft.list_schedule`), so the plan is exact under the benchmark
   model and memory-valid when built memory-aware. ``auto`` then searches from it like from any
   other candidate.

State: per task its cluster and its finish in DSC's unbounded schedule; per cluster the
finish of its last task; a heap of free tasks and a lazily updated heap of partially free ones by
priority; for the merge, a union-find forest over the clusters. Deterministic: heaps break ties
by task position, the merge by cluster pair position; nothing is random.

References
----------
.. [1] T. Yang, A. Gerasoulis, "DSC: scheduling parallel tasks on an unbounded number of
   processors", IEEE Transactions on Parallel and Distributed Systems 5(9), 951-967, 1994.
.. [2] V. Sarkar, *Partitioning and Scheduling Parallel Programs for Multiprocessors*, MIT Press,
   1989 (internalisation: clusters merged by the communication they save).
"""

from __future__ import annotations

import heapq
import math

import numpy as np

from streammap.cost.model import CostModel
from streammap.mappers.clustering import cluster_schedule
from streammap.mappers.grouping import find_root, scope_edge_cost
from streammap.mappers.partition import device_speed
from streammap.mappers.schedule import Schedule

__all__ = ["DSC_TRIES", "MERGE_CAP", "dsc_clusters", "merge_clusters", "dsc_schedule"]

#: Most predecessor clusters DSC tries per task (the dominant predecessor's first), which bounds
#: its work by ``O(T · DSC_TRIES)`` beside the edge scans.
DSC_TRIES = 4
#: Largest work of a merged cluster, as a multiple of the share of the total work that the
#: fastest device would get in proportion to its speed.
MERGE_CAP = 2.0
#: Edge costs DSC may use: HEFT's mean over distinct device pairs, or the mean over the pairs of
#: a scope (:func:`streammap.mappers.grouping.scope_edge_cost`: across nodes, inside a node).
COMMS = ("mean", "node", "device")
#: Task weights DSC may use: the mean time over the devices (HEFT's), or the fastest.
WEIGHTS = ("mean", "min")


def _weights(cost: CostModel, weight: str) -> np.ndarray:
    if weight not in WEIGHTS:
        raise ValueError(f"weight must be one of {WEIGHTS}, not {weight!r}")
    w = cost.mean_time() if weight == "mean" else cost.min_time()
    return np.where(np.isfinite(w), w, 0.0).astype(np.float64)


def _blevel(cost: CostModel, w: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Longest path from each task to a sink, task times ``w`` and edge costs ``c`` (succ order)."""
    blevel = w.copy()
    sp, si = cost.succ_ptr, cost.succ_idx
    for t in cost.topo[::-1].tolist():
        a, b = sp[t], sp[t + 1]
        if b > a:
            blevel[t] = w[t] + float((c[a:b] + blevel[si[a:b]]).max())
    return blevel


def _edge_costs(cost: CostModel, comm: str) -> tuple[np.ndarray, np.ndarray]:
    """Transfer time of every edge, in ``succ`` and in ``pred`` order, at ``comm``'s scope."""
    if comm not in COMMS:
        raise ValueError(f"comm must be one of {COMMS}, not {comm!r}")
    if comm == "mean":
        return cost.mean_comm(cost.succ_bytes), cost.mean_comm(cost.pred_bytes)
    c_out = scope_edge_cost(cost, comm)
    # The same edges in pred order: pred entry k is the edge (pred_idx[k], pred_dst[k]); find it
    # among the succ entries by its (source, destination) key.
    T = cost.n_tasks
    succ_key = np.repeat(np.arange(T, dtype=np.int64), np.diff(cost.succ_ptr)) * T + cost.succ_idx
    by_key = np.argsort(succ_key, kind="stable")
    pred_key = cost.pred_idx.astype(np.int64) * T + cost.pred_dst
    return c_out, c_out[by_key[np.searchsorted(succ_key[by_key], pred_key)]]


def dsc_clusters(cost: CostModel, weight: str = "mean", comm: str = "mean") -> np.ndarray:
    """Cluster of every task by Dominant Sequence Clustering (step 1 of the module docstring).

    Parameters
    ----------
    cost : CostModel
    weight : {"mean", "min"}
        Task time DSC plans with: the mean over the devices where the task can run, or the
        fastest.
    comm : {"mean", "node", "device"}
        Transfer time DSC plans with: HEFT's mean over the pairs of distinct devices, or the
        mean over the pairs on different nodes, or inside one node
        (:func:`streammap.mappers.grouping.scope_edge_cost`).

    Returns
    -------
    ndarray of int
        ``cluster[t]``, numbered 0, 1, ... in the order the clusters were opened. The tasks of
        one cluster are ordered by their examination, which is topological.

    Examples
    --------
    A fork ``s -> a, b`` joined by ``j`` whose edges cost ten times the tasks: DSC appends ``a``,
    ``b`` and ``j`` to ``s``'s cluster, since every zeroing makes the task start earlier; with
    edges a tenth of the tasks, ``a`` joins ``s`` while ``b`` starts sooner in a cluster of its
    own, and ``j`` joins ``b``, whose data arrives last (see ``tests/mappers/test_dsc.py``).
    """
    T = cost.n_tasks
    cluster = np.full(T, -1, dtype=np.int64)
    if T == 0:
        return cluster
    w = _weights(cost, weight)
    c_out, c_in = _edge_costs(cost, comm)
    blevel = _blevel(cost, w, c_out)
    pp, pi = cost.pred_ptr, cost.pred_idx
    sp, si = cost.succ_ptr, cost.succ_idx
    finish = np.zeros(T)                              # in DSC's unbounded schedule
    examined = np.zeros(T, dtype=bool)
    waiting = np.diff(pp).astype(np.int64)            # predecessors not yet examined
    # The partially free task's best arrival so far (the tlevel it would have alone) and the
    # predecessor it comes from (its dominant examined predecessor).
    ptlevel = np.zeros(T)
    pdom = np.full(T, -1, dtype=np.int64)
    cl_end: list[float] = []
    free = [(-float(blevel[t]), t) for t in range(T) if waiting[t] == 0]
    heapq.heapify(free)
    partial: list[tuple[float, int]] = []             # lazy: an entry is valid while it matches

    def top_partial():
        """The partially free task of highest priority, ``(priority, task)``, or None."""
        while partial:
            negp, t = partial[0]
            if examined[t] or waiting[t] == 0 or -negp != ptlevel[t] + blevel[t]:
                heapq.heappop(partial)
                continue
            return -negp, t
        return None

    while free:
        negp, t = heapq.heappop(free)
        a, b = pp[t], pp[t + 1]
        if b > a:
            p = pi[a:b]
            arrive = finish[p] + c_in[a:b]
            alone = float(arrive.max())
            # Clusters of the predecessors, the one whose data arrives last first (ties: position).
            tried: list[int] = []
            for k in np.lexsort((p, -arrive)).tolist():
                cl = int(cluster[p[k]])
                if cl not in tried:
                    tried.append(cl)
                    if len(tried) == DSC_TRIES:
                        break
            blocked = -1
            guard = top_partial()
            if guard is not None and guard[0] > -negp and pdom[guard[1]] >= 0:
                blocked = int(cluster[pdom[guard[1]]])     # DSRW: keep the dominant sequence's cluster
            best_cl, best_st = -1, alone
            for cl in tried:
                if cl == blocked:
                    continue
                st = max(cl_end[cl], float(np.where(cluster[p] == cl, finish[p], arrive).max()))
                if st < best_st:
                    best_cl, best_st = cl, st
        else:
            best_cl, best_st = -1, 0.0
        if best_cl < 0:
            best_cl = len(cl_end)
            cl_end.append(0.0)
        cluster[t] = best_cl
        finish[t] = best_st + w[t]
        cl_end[best_cl] = float(finish[t])
        examined[t] = True
        # Successors: one predecessor fewer to wait for; free ones join the free heap with their
        # tlevel as if alone (the arrival of their latest input), partially free ones are ranked.
        for k in range(sp[t], sp[t + 1]):
            s = int(si[k])
            waiting[s] -= 1
            arr = float(finish[t] + c_out[k])
            if pdom[s] < 0 or arr > ptlevel[s]:
                ptlevel[s], pdom[s] = arr, t
            if waiting[s] == 0:
                heapq.heappush(free, (-float(ptlevel[s] + blevel[s]), s))
            else:
                heapq.heappush(partial, (-float(ptlevel[s] + blevel[s]), s))
    return cluster


def merge_clusters(cost: CostModel, cluster: np.ndarray, target: int, cap: float | None = None) -> np.ndarray:
    """Merge clusters along their dearest traffic until at most ``target`` remain (step 2).

    Parameters
    ----------
    cost : CostModel
    cluster : ndarray of int
        Cluster of every task (e.g. :func:`dsc_clusters`).
    target : int
        Stop once this many clusters remain (or no pair joined by an edge can merge).
    cap : float, optional
        Largest work (sum of fastest task times) of a merged cluster (default :data:`MERGE_CAP`
        times the fastest device's share of the total work, at most the total).

    Returns
    -------
    ndarray of int
        The merged cluster of every task, numbered 0, 1, ... by each cluster's first task.
    """
    T = cost.n_tasks
    if T == 0:
        return cluster.copy()
    n = int(cluster.max()) + 1
    work = np.bincount(cluster, weights=np.where(np.isfinite(cost.min_time()), cost.min_time(), 0.0),
                       minlength=n).tolist()
    if cap is None:
        speed = device_speed(cost)
        share = float(speed.max() / speed.sum()) if speed.sum() > 0 else 1.0
        cap = float(sum(work)) * min(1.0, MERGE_CAP * share)
    # Traffic between each pair of clusters, in bytes, summed over the edges that cross.
    src = cluster[np.repeat(np.arange(T), np.diff(cost.succ_ptr))]
    dst = cluster[cost.succ_idx]
    cross = src != dst
    lo, hi = np.minimum(src, dst)[cross], np.maximum(src, dst)[cross]
    pair = lo * n + hi
    keys, inv = np.unique(pair, return_inverse=True)
    traffic = np.bincount(inv, weights=cost.succ_bytes[cross], minlength=keys.size)
    parent = list(range(n))
    count = n
    for k in np.lexsort((keys, -traffic)).tolist():
        if count <= target:
            break
        x, y = find_root(parent, int(keys[k] // n)), find_root(parent, int(keys[k] % n))
        if x == y or work[x] + work[y] > cap:
            continue
        x, y = min(x, y), max(x, y)
        parent[y] = x
        work[x] += work[y]
        count -= 1
    roots = np.array([find_root(parent, int(g)) for g in cluster.tolist()], dtype=np.int64)
    _, first = np.unique(roots, return_index=True)
    rank = np.empty(first.size, dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(first.size)
    return rank[np.searchsorted(np.unique(roots), roots)]


def dsc_schedule(cost: CostModel, *, target: float | None = None, weight: str = "mean", comm: str = "mean",
                 scope: str = "device", devices: np.ndarray | None = None,
                 memory_aware: bool = True, mapper: str = "dsc") -> Schedule:
    """DSC, the clusters merged to ``target`` times the device count, mapped and list-scheduled.

    Parameters
    ----------
    cost : CostModel
    target : float, optional
        Merge until at most ``target x`` (number of devices used) clusters remain
        (:func:`merge_clusters`); ``None`` keeps DSC's clusters as they are.
    weight : {"mean", "min"}
        Task time DSC plans with (:func:`dsc_clusters`).
    comm : {"mean", "node", "device"}
        Transfer time DSC plans with (:func:`dsc_clusters`).
    scope, devices, memory_aware, mapper
        As for :func:`streammap.mappers.clustering.cluster_schedule`, which maps the clusters
        whole and re-times them.

    Returns
    -------
    Schedule
    """
    cluster = dsc_clusters(cost, weight, comm)
    if target is not None and cost.n_tasks:
        n_dev = cost.n_devices if devices is None else len(devices)
        cluster = merge_clusters(cost, cluster, max(1, math.ceil(target * n_dev)))
    return cluster_schedule(cost, cluster, devices=devices, scope=scope, memory_aware=memory_aware, mapper=mapper)
