"""Heavy-edge grouping: tasks joined by dear edges share a node (or a device), then HEFT maps the rest.

Linear clustering (:mod:`streammap.mappers.clustering`) keeps one *path* together. Scientific
workflows are made of fork-join groups instead: 1000genome's ``sifting`` task feeds sixteen
``mutation_overlap`` and ``frequency`` tasks half a megabyte each, and twenty-odd ``individuals``
feed one ``individuals_merge``; at CCR 10 one such edge across the network costs minutes, many
times the task it feeds. A list scheduler places one task at a time, so it spreads a group over
every idle device and pays for each crossing; a path-clustering keeps only one child of a fork
beside its parent. Grouping decides first which tasks must share a node (or a device) because the
edges between them are dear, and only then where each group runs.

Policy
------
1. **Edge cost at a scope** (:func:`scope_edge_cost`): the transfer time of each edge's bytes,
   averaged over the device pairs of the scope: pairs on *different nodes* (``"node"``) or
   distinct devices of *one node* (``"device"``; the network where no node has two devices).
2. **Grouping** (:func:`heavy_edge_groups`), after the edge-zeroing of Sarkar [1]_ and the
   coarsening of METIS: edges are taken from the dearest down, and the groups at their two ends
   are merged when the edge costs at least ``theta`` times the work of the smaller group (the
   parallelism the merge may lose, in fastest time) and the merged work stays within ``cap``
   (:data:`CAP_SLACK` times a node's or a device's share of the work, so that one group cannot
   swallow the graph). Union-find, ``O(E log E)``.
3. **Mapping** (:func:`group_nodes`, :func:`grouped_schedule`). At scope ``"node"`` every group
   of two or more tasks gets one node, largest group first, on the node where it would end the
   soonest at the node's summed speed (longest-processing-time load balancing); single tasks stay
   free. HEFT's insertion list scheduler (:func:`streammap.mappers.heft.list_schedule`) then
   places every task, a grouped one only on its node's devices, so a group is spread over the
   devices of one node where the node's links are cheap. At scope ``"device"`` the groups are
   mapped whole onto single devices HEFT-style (:func:`streammap.mappers.clustering.map_chains`)
   and re-timed by the same list scheduler. Either way the plan is exact under the benchmark's
   model and memory-valid when built memory-aware.

State: the group of each task (a union-find forest, flattened), each group's work and node. No
randomness; every tie goes to the lower edge, group, node or device position, so the same inputs
give the same plan.

References
----------
.. [1] V. Sarkar, *Partitioning and Scheduling Parallel Programs for Multiprocessors*, MIT Press,
   1989 (edge zeroing).
.. [2] T. Yang, A. Gerasoulis, "DSC: scheduling parallel tasks on an unbounded number of
   processors", IEEE TPDS 5(9), 951-967, 1994.
"""

from __future__ import annotations

import numpy as np

from streammap.cost.model import CostModel
from streammap.mappers.clustering import cluster_schedule
from streammap.mappers.heft import list_schedule, priority_order
from streammap.mappers.partition import GroupTimes, device_speed
from streammap.mappers.schedule import Schedule

__all__ = ["SCOPES", "scope_edge_cost", "heavy_edge_groups", "group_nodes", "grouped_schedule"]

#: Where a group is kept: on one node, or on one device.
SCOPES = ("node", "device")
#: The default largest work of a group, as a multiple of the work the largest unit (node or
#: device) would get in proportion to its speed: room for a whole graph that must stay on one
#: node (every edge dear) without letting one group take far more than a unit's share.
CAP_SLACK = 2.0


def _scope_pairs(cost: CostModel, scope: str) -> np.ndarray:
    """Boolean ``D x D`` mask of the device pairs whose links a transfer at ``scope`` crosses."""
    if scope not in SCOPES:
        raise ValueError(f"scope must be one of {SCOPES}, not {scope!r}")
    same = cost.node_of[:, None] == cost.node_of[None, :]
    distinct = ~np.eye(cost.n_devices, dtype=bool)
    pairs = (~same) if scope == "node" else (same & distinct)
    return pairs if pairs.any() else distinct


def scope_edge_cost(cost: CostModel, scope: str) -> np.ndarray:
    """Transfer time of every edge (in ``succ`` order) averaged over the device pairs of ``scope``.

    Parameters
    ----------
    cost : CostModel
    scope : {"node", "device"}
        ``"node"``: pairs of devices on different nodes; ``"device"``: distinct devices of one
        node. Where the cluster has no such pair, every distinct pair.

    Returns
    -------
    ndarray of float
        One entry per edge, aligned with ``cost.succ_idx``; zeros on a one-device cluster.
    """
    if cost.n_devices < 2:
        return np.zeros(cost.n_edges)
    pairs = _scope_pairs(cost, scope)
    return float(cost.lat[pairs].mean()) + cost.succ_bytes * float(cost.inv_bw[pairs].mean())


def find_root(parent, x: int) -> int:
    """The root of ``x`` in the union-find forest ``parent`` (a list or array), compressing the path."""
    root = x
    while parent[root] != root:
        root = parent[root]
    while parent[x] != root:                     # path compression
        parent[x], x = root, parent[x]
    return root


def heavy_edge_groups(cost: CostModel, scope: str, theta: float = 1.0, cap: float | None = None) -> np.ndarray:
    """Group of every task: the ends of dear edges merged, dearest edge first (module docstring).

    Parameters
    ----------
    cost : CostModel
    scope : {"node", "device"}
        Which transfer cost decides (:func:`scope_edge_cost`).
    theta : float
        An edge joins its two groups when it costs at least ``theta`` times the smaller group's
        work (sum of the fastest task times).
    cap : float, optional
        Largest work of a group (default: :data:`CAP_SLACK` times the total work times the
        largest share of the speed one unit of the scope holds, a node or a device; at most the
        total work).

    Returns
    -------
    ndarray of int
        ``group[t]``, numbered 0, 1, ... by each group's first task position.

    Examples
    --------
    A fork ``s -> a, b, c`` whose edges cost far more than the children: one group; with cheap
    edges, four (see ``tests/mappers/test_grouping.py``).
    """
    T = cost.n_tasks
    work = cost.min_time().astype(np.float64).copy()
    if cap is None:
        cap = float(work.sum()) * min(1.0, CAP_SLACK * _largest_unit_share(cost, scope))
    parent = np.arange(T)
    if T and cost.n_edges:
        c = scope_edge_cost(cost, scope)
        src = np.repeat(np.arange(T), np.diff(cost.succ_ptr))
        dst = cost.succ_idx
        for e in np.lexsort((np.arange(c.size), -c)).tolist():
            a, b = find_root(parent, int(src[e])), find_root(parent, int(dst[e]))
            if a == b:
                continue
            wa, wb = work[a], work[b]
            if c[e] >= theta * min(wa, wb) and wa + wb <= cap:
                lo, hi = (a, b) if a < b else (b, a)
                parent[hi] = lo
                work[lo] = wa + wb
    roots = np.array([find_root(parent, t) for t in range(T)], dtype=np.int64)
    _, group = np.unique(roots, return_inverse=True)
    return group.astype(np.int64)


def _units(cost: CostModel, scope: str) -> list[np.ndarray]:
    """The devices of each unit of ``scope``: every node, or every device."""
    if scope == "node":
        return [np.flatnonzero(cost.node_of == n) for n in np.unique(cost.node_of)]
    return [np.array([d]) for d in range(cost.n_devices)]


def _largest_unit_share(cost: CostModel, scope: str) -> float:
    speed = device_speed(cost)
    total = float(speed.sum())
    if total <= 0:
        return 1.0
    return max(float(speed[u].sum()) for u in _units(cost, scope)) / total


def group_nodes(cost: CostModel, group: np.ndarray) -> np.ndarray:
    """Node index (into ``np.unique(cost.node_of)``) of every task's group; -1 for a lone task.

    Groups of two or more tasks are placed largest work first (ties: lower group number), each on
    the node whose load plus the group's work, both divided by the node's summed speed, is least
    (ties: lower node), among the nodes where every task of the group can run.
    """
    T = cost.n_tasks
    units = _units(cost, "node")
    speed = device_speed(cost)
    node_speed = np.array([float(speed[u].sum()) for u in units])
    n_groups = int(group.max()) + 1 if T else 0
    size = np.bincount(group, minlength=n_groups)
    work = np.bincount(group, weights=cost.min_time(), minlength=n_groups)
    # Whether each group can run whole on each node (every task has a device there).
    runs = np.ones((n_groups, len(units)), dtype=bool)
    for j, u in enumerate(units):
        ok = np.isfinite(cost.time[:, u]).any(axis=1)
        runs[:, j] = np.bincount(group, weights=(~ok).astype(np.float64), minlength=n_groups) == 0
    load = np.zeros(len(units))
    where = np.full(n_groups, -1, dtype=np.int64)
    for g in np.lexsort((np.arange(n_groups), -work)).tolist():
        if size[g] < 2 or not runs[g].any():
            continue
        with np.errstate(divide="ignore", invalid="ignore"):
            end = np.where(runs[g] & (node_speed > 0), (load + work[g]) / node_speed, np.inf)
        j = int(np.argmin(end))
        where[g] = j
        load[j] += work[g]
    return where[group]


def grouped_schedule(cost: CostModel, scope: str, *, theta: float = 1.0, devices: np.ndarray | None = None,
                     memory_aware: bool = True, mapper: str | None = None) -> Schedule:
    """Heavy-edge grouping at ``scope``, the groups mapped, re-timed by the insertion list scheduler.

    Parameters
    ----------
    cost : CostModel
    scope : {"node", "device"}
        Keep each group on one node (HEFT places its tasks among that node's devices) or on one
        device (the group mapped whole, HEFT-style).
    theta : float
        The grouping threshold of :func:`heavy_edge_groups`.
    devices : ndarray of int, optional
        Scope ``"device"`` only: the devices groups may use (default all).
    memory_aware : bool
        Keep every device within capacity (a task that fits nowhere raises
        :class:`~streammap.errors.MappingError`).
    mapper : str, optional
        Name written in the schedule (default ``"group-<scope>"``).

    Returns
    -------
    Schedule
    """
    mapper = mapper or f"group-{scope}"
    group = heavy_edge_groups(cost, scope, theta)
    if scope != "node":
        return cluster_schedule(cost, group, devices=devices, memory_aware=memory_aware, mapper=mapper)
    rows = GroupTimes(cost, _units(cost, "node"), group_nodes(cost, group))
    return list_schedule(cost, priority_order(cost), times=rows, memory_aware=memory_aware, mapper=mapper)
