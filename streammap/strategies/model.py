"""Model parallelism: cut a graph that does not fit one device into consecutive pieces, by memory
and by speed, one piece per device.

When the weights or working sets of a program exceed one device's memory (a deep network whose
layers do not fit one GPU), the classic answer is to give each device a consecutive range of
layers and stream the batches through them (GPipe-style layer partitioning). This module does that
on any task graph.

State
-----
``units``   the graph's topological levels (depth from the sources), with every source task
            moved up to the level of its first consumer, so that a layer's weights travel with the
            layer that uses them: unit u is "layer u" of the program.
``time[U, D]`` seconds of each unit on each device (sum of its tasks); ``held[U]`` the bytes of
            the outputs its tasks keep and ``run[U]`` its largest running task: a range of units
            needs, conservatively, the sum of their ``held`` plus the largest ``run``.

Policy
------
* The units are a chain; a partition gives each device (in a fixed order: nodes by aggregate
  speed, fastest first, and inside a node its devices fastest first, so that consecutive pieces
  share a node link) a consecutive range of units whose memory fits the device.
* Two partitions are tried: the *balanced* one, the least bottleneck ``B`` (largest device
  load) found by bisection on ``B`` with a greedy probe that fills each device up to ``B`` and its
  capacity, the chains-on-chains partitioning of Pinar and Aykanat [1]_ with heterogeneous
  processors; and the *compact* one (fill each device to its memory, using as few devices as
  possible, fewer transfers). Each is scored by simulating it
  (:func:`streammap.mappers.schedule.simulate`, each device's order from :func:`depth_first_order`, so
  batches pipeline through the pieces); the shorter wins.

References
----------
.. [1] A. Pinar, C. Aykanat, "Fast optimal load balancing algorithms for 1D partitioning", Journal
   of Parallel and Distributed Computing 64(8), 974-996, 2004.
.. [2] Y. Huang et al., "GPipe: efficient training of giant neural networks using pipeline
   parallelism", NeurIPS 2019.
"""

from __future__ import annotations

import math

import numpy as np

from streammap.cost.model import CostModel
from streammap.errors import StreamMapError
from streammap.mappers.schedule import Schedule, fits, peak_memory, simulate


def units_of(cost: CostModel) -> np.ndarray:
    """The unit (anchored topological level) of every task."""
    level = np.empty(cost.n_tasks, dtype=np.int64)
    for k, lev in enumerate(cost.levels):
        level[lev] = k
    unit = level.copy()
    for t in np.flatnonzero(cost.n_pred == 0):
        succ = cost.succ_idx[cost.succ_ptr[t]:cost.succ_ptr[t + 1]]
        if succ.size:
            unit[t] = level[succ].min()
    # renumber densely
    _, unit = np.unique(unit, return_inverse=True)
    return unit


def single_device_fit(cost: CostModel) -> tuple[bool, float, float]:
    """Whether the whole graph fits the largest device when run there alone, in topological order.

    Returns ``(fits, peak bytes, capacity)``. Times are each task's fastest (only the order of
    events matters to memory, not their length).
    """
    d = int(np.argmax(cost.capacity))
    T = cost.n_tasks
    device = np.full(T, d, dtype=np.int64)
    ct = cost.class_time                                   # per device class: the same minimum
    w = np.where(np.isfinite(ct), ct, 0.0).min(axis=1)[cost.topo]
    finish = np.empty(T)
    finish[cost.topo] = np.cumsum(w)
    start = np.empty(T)
    start[cost.topo] = np.cumsum(w) - w
    peak = peak_memory(cost, device, start, finish)[d]
    return bool(fits(peak, cost.capacity[d])), float(peak), float(cost.capacity[d])


def device_order(cost: CostModel, unit_time: np.ndarray) -> list[int]:
    """Nodes by aggregate speed (fastest first), and each node's devices fastest first."""
    total = np.where(np.isfinite(unit_time), unit_time, np.nan)
    per_dev = np.nansum(total, axis=0)
    per_dev = np.where(per_dev > 0, per_dev, math.inf)
    speed = 1.0 / per_dev
    nodes = sorted(set(cost.node_of.tolist()), key=lambda n: (-speed[cost.node_of == n].sum(), n))
    out = []
    for n in nodes:
        devs = np.flatnonzero(cost.node_of == n)
        out.extend(int(d) for d in sorted(devs, key=lambda d: (-speed[d], d)))
    return out


def probe(unit_time: np.ndarray, unit_held: np.ndarray, unit_run: np.ndarray, capacity: np.ndarray,
          order: list[int], bottleneck: float) -> np.ndarray | None:
    """Greedy chain partition: each device in ``order`` takes units while its load stays within
    ``bottleneck`` and its memory (every output its units keep, plus their largest running task)
    within capacity. The device of each unit, or ``None``."""
    U = unit_time.shape[0]
    place = np.full(U, -1, dtype=np.int64)
    u = 0
    for d in order:
        load = held = run = 0.0
        while u < U:
            t = unit_time[u, d]
            mem = held + unit_held[u] + max(run, unit_run[u])
            if not np.isfinite(t) or load + t > bottleneck or not fits(mem, capacity[d]):
                break
            load += t
            held += unit_held[u]
            run = max(run, unit_run[u])
            place[u] = d
            u += 1
        if u == U:
            return place
    return None


def map_model(cost: CostModel) -> Schedule:
    """Partition the graph by memory and speed (see the module docstring) and schedule it.

    Raises
    ------
    StreamMapError
        When no partition fits the devices' memory.
    """
    unit = units_of(cost)
    U = int(unit.max()) + 1 if cost.n_tasks else 0
    D = cost.n_devices
    unit_time = np.zeros((U, D))
    np.add.at(unit_time, unit, cost.time)
    held = np.zeros(U)
    np.add.at(held, unit, cost.out)
    run = np.zeros(U)
    np.maximum.at(run, unit, cost.mem)
    order = device_order(cost, unit_time)
    candidates = []
    compact = probe(unit_time, held, run, cost.capacity, order, math.inf)
    if compact is not None:
        candidates.append(compact)
        lo = float(np.min(np.where(np.isfinite(unit_time), unit_time, math.inf), axis=1).max())
        hi = float(sum(unit_time[u, compact[u]] for u in range(U)))
        best = compact
        for _ in range(60):
            if hi - lo <= 1e-9 * max(hi, 1e-12):
                break
            mid = (lo + hi) / 2
            got = probe(unit_time, held, run, cost.capacity, order, mid)
            if got is None:
                lo = mid
            else:
                hi, best = mid, got
        candidates.append(best)
    if not candidates:
        raise StreamMapError("the program does not fit the cluster's memory even split across all devices",
                             hint="add devices with more memory, or reduce the program's sizes")
    scheduled = []
    for place in candidates:
        device = place[unit]
        sched = simulate(cost, device, depth_first_order(cost, device), mapper="model-partition")
        scheduled.append(sched)
    return min(scheduled, key=lambda s: s.makespan)


def depth_first_order(cost: CostModel, device: np.ndarray) -> list[np.ndarray]:
    """Each device's task order for a fixed assignment: list scheduling that runs, at every step,
    the ready task that can start first, and among equals the deepest one (so a batch goes on
    through its layers before the next batch starts: GPipe's order, which lets the devices work
    on different batches at once)."""
    T, D = cost.n_tasks, cost.n_devices
    level = np.empty(T, dtype=np.int64)
    for k, lev in enumerate(cost.levels):
        level[lev] = k
    w = cost.time[np.arange(T), device]
    waiting = cost.n_pred.copy()
    arrive = np.zeros(T)
    free = np.zeros(D)
    ready = set(np.flatnonzero(waiting == 0).tolist())
    order: list[list[int]] = [[] for _ in range(D)]
    while ready:
        t = min(ready, key=lambda t: (max(free[device[t]], arrive[t]), -level[t], cost.topo_index[t]))
        ready.discard(t)
        d = device[t]
        finish = max(free[d], arrive[t]) + w[t]
        free[d] = finish
        order[d].append(t)
        for k in range(cost.succ_ptr[t], cost.succ_ptr[t + 1]):
            c = int(cost.succ_idx[k])
            e = device[c]
            at = finish if e == d else finish + cost.lat[d, e] + cost.succ_bytes[k] * cost.inv_bw[d, e]
            arrive[c] = max(arrive[c], at)
            waiting[c] -= 1
            if waiting[c] == 0:
                ready.add(c)
    return [np.array(o, dtype=np.int64) for o in order]
