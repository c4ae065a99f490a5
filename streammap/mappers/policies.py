"""Placement policies: simple rules for where each task goes, when makespan is not the point.

Cluster users know these from batch schedulers and Kubernetes: put each task on the device with the
fewest tasks, pack tasks onto as few devices (or nodes) as possible, or spread them over all of
them. A policy only *chooses a device* for one task at a time; the shared list scheduler
(:func:`list_schedule`) does everything else, so every policy gives a plan that is valid under the
benchmark model (``shared/benchmarks/README.md``; :mod:`streammap.mappers.schedule`).

Built-in policies (registered in :data:`streammap.mappers.MAPPERS`)
--------------------------------------------------------------------
``least-loaded`` (:class:`LeastLoaded`)
    The device with the fewest tasks so far; ties go to the lower device position.
``spread`` (:class:`Spread`)
    Round-robin over the devices: the first device that can take the task at or after the one
    following the last choice. Unlike ``least-loaded`` it never looks back: a device skipped
    because the task could not run or fit there does not catch up later.
``binpack`` (:class:`Binpack`)
    Fill one device before using the next: among the devices that already hold tasks, the one
    with the most (ties: more busy time, then lower position); when none of them can take the
    task (device constraint, or memory would overflow), the device where the task is fastest.
``binpack-node`` / ``spread-node`` (:class:`BinpackNode`, :class:`SpreadNode`)
    The same at node level: choose the node (the used node with the most tasks, else the node of
    the task's fastest device / the node with the fewest tasks, ties to the lower node), then the
    device of that node where the task finishes earliest (ties: lower position).
``fastest`` (:class:`Fastest`)
    Everything on the single fastest device. Devices are ranked once by their *slowdown*: the
    total time of the tasks that can run on the device, divided by the total of those tasks'
    fastest times anywhere (so among devices that can run every task, the least total time
    wins); ties go to the device that can run more tasks, then to the lower position. Every task
    goes to the best-ranked device that can take it: when that device can run every task and
    hold the memory the plan needs, all tasks are on it. A task it cannot take (its ``device``
    constraint excludes it, or its memory would overflow at that point of the plan) falls back to
    the next device in the ranking, so the plan stays valid and as close to single-device as the
    cluster allows (a few CPU-only tasks go to a CPU; the rest stay on the fastest GPU).

Writing a policy
----------------
A policy is any object with a ``choose`` method (an optional ``start`` method is called once
before the first task)::

    class PreferVendor:
        \"\"\"Devices of one vendor first (fewest tasks among them), else least-loaded.\"\"\"

        vendor = "nvidia"

        def choose(self, task, feasible, state):
            mine = [d for d in feasible if state.devices[d].vendor == self.vendor]
            pool = np.asarray(mine) if mine else feasible
            return int(pool[np.argmin(state.counts[pool])])

Use it by class path, ``streammap compile prog.py --cluster c.yaml --mapper mypkg.policies:PreferVendor``
(``streammap.compile(..., mapper="mypkg.policies:PreferVendor")``), or register it as an entry point
in the ``streammap.policies`` group of your package and use its name::

    [project.entry-points."streammap.policies"]
    prefer-nvidia = "mypkg.policies:PreferVendor"

A class is instantiated with no arguments once per mapping (so per-mapping state such as a
round-robin pointer starts afresh); an instance is used as it is. ``samples/custom_policy.py`` is a
complete example.

The list scheduler
------------------
Tasks are taken in HEFT's priority order (decreasing upward rank,
:func:`streammap.mappers.heft.priority_order`), which is a topological order. For each task the
scheduler computes, on every device, the data-ready time (inputs from other devices pay
``latency + bytes / bandwidth``), the earliest start ``est = max(ready, end of the device's last
task)`` (tasks are appended, never inserted into idle gaps) and ``eft = est + time``, and the set
of *feasible* devices: those where the task can run (finite time) and where, started at ``est``,
it fits in memory at every instant (its ``mem`` while it runs, its output until its consumers
start, plus what the device already holds: HEFT's memory model, with outputs whose consumers are
not all placed yet counted as held forever). The policy picks one of the feasible devices. When
no device is feasible (memory is held by outputs waiting for consumers), the task is put aside
and the next ready task by priority is tried; put-aside tasks are retried once the ready tasks
run out, and only a round that places nothing is a :class:`~streammap.errors.MappingError`.

The returned :class:`~streammap.mappers.schedule.Schedule` is :func:`streammap.mappers.schedule.simulate` of the
assignment and per-device placement order, so its times are exactly the benchmark model's, and
:func:`streammap.mappers.schedule.evaluate` finds it memory-valid.
"""

from __future__ import annotations

import heapq
import importlib
import importlib.metadata
import math
import os
import sys
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np

from streammap.cost.model import CostModel
from streammap.errors import MappingError, StreamMapError
from streammap.mappers.heft import MemoryProfile, check_placeable, priority_order, release_inputs
from streammap.mappers.schedule import MEM_RTOL, Schedule, simulate

__all__ = ["Policy", "PlacementState", "list_schedule", "PolicyMapper", "LeastLoaded", "Spread", "Binpack",
           "BinpackNode", "SpreadNode", "Fastest", "POLICIES", "POLICY_MAPPERS", "ENTRY_POINT_GROUP",
           "load_policy", "find_policy"]

#: Entry-point group where packages register policies by name.
ENTRY_POINT_GROUP = "streammap.policies"


@runtime_checkable
class Policy(Protocol):
    """What a placement policy provides.

    Methods
    -------
    choose(task, feasible, state) -> int
        ``task`` is the task position (``state.cost.tasks[task]`` is its id); ``feasible`` an
        ``ndarray`` of int, the device positions (ascending, never empty) where the task can run
        and fits in memory if started now; ``state`` the :class:`PlacementState`. Returns one
        element of ``feasible``.
    start(state) -> None, optional
        Called once before the first task (precompute rankings, reset counters).
    """

    def choose(self, task: int, feasible: np.ndarray, state: "PlacementState") -> int: ...


@dataclass(eq=False)
class PlacementState:
    """What a policy may look at when it chooses a device (read it, do not modify it).

    Attributes
    ----------
    cost : CostModel
        Times (``cost.time[t, d]``), sizes, links and the task graph (``cost.graph``).
    devices : list of Device
        ``cost.devices``: ``id``, ``node``, ``kind``, ``vendor``, ``model``, ``memory``, ...
    node_of : ndarray of int
        Node index of each device; ``n_nodes`` nodes.
    counts : ndarray of int
        Tasks placed on each device so far.
    busy : ndarray of float
        Seconds of work placed on each device so far.
    avail : ndarray of float
        When each device finishes the last task placed on it.
    mem_used : ndarray of float
        Bytes of outputs held on each device by placed tasks whose consumers are not all placed
        yet (what stays resident as the plan grows).
    capacity : ndarray of float
        Memory capacity of each device (``inf`` when unlimited).
    node_counts, node_busy : ndarray
        ``counts`` and ``busy`` summed per node.
    ready, est, eft : ndarray of float
        For the task being placed, per device: when its inputs can have arrived, its earliest
        start (``max(ready, avail)``) and its finish time there (``inf`` where it cannot run).
    device : ndarray of int
        Device of every task placed so far (-1 for the others).
    placed : int
        Number of tasks placed so far.
    """

    cost: CostModel
    devices: list
    node_of: np.ndarray
    n_nodes: int
    counts: np.ndarray
    busy: np.ndarray
    avail: np.ndarray
    mem_used: np.ndarray
    capacity: np.ndarray
    node_counts: np.ndarray
    node_busy: np.ndarray
    device: np.ndarray
    ready: np.ndarray = field(default=None)
    est: np.ndarray = field(default=None)
    eft: np.ndarray = field(default=None)
    placed: int = 0


# ---------------------------------------------------------------------- built-in policies

def _first_min(values: np.ndarray, pool: np.ndarray) -> int:
    """The element of ``pool`` (ascending) with the least ``values``; ties to the first."""
    return int(pool[int(np.argmin(values[pool]))])


class LeastLoaded:
    """Fewest tasks first: the feasible device with the fewest tasks; ties to the lower position."""

    name = "least-loaded"

    def choose(self, task, feasible, state):
        return _first_min(state.counts, feasible)


class Spread:
    """Round-robin: the first feasible device at or after the one after the previous choice."""

    name = "spread"

    def __init__(self):
        self._next = 0

    def start(self, state):
        self._next = 0

    def choose(self, task, feasible, state):
        i = int(np.searchsorted(feasible, self._next))
        d = int(feasible[i]) if i < feasible.size else int(feasible[0])
        self._next = (d + 1) % len(state.devices)
        return d


class Binpack:
    """Fill one device before the next (see the module docstring)."""

    name = "binpack"

    def choose(self, task, feasible, state):
        used = feasible[state.counts[feasible] > 0]
        if used.size:
            # Most tasks, then most busy time, then lower position.
            o = np.lexsort((used, -state.busy[used], -state.counts[used]))
            return int(used[o[0]])
        return _first_min(state.cost.time[task], feasible)


def _best_in_node(state, feasible, node):
    pool = feasible[state.node_of[feasible] == node]
    return _first_min(state.eft, pool)


class BinpackNode:
    """Fill one node before the next; inside the node, the device where the task finishes first."""

    name = "binpack-node"

    def choose(self, task, feasible, state):
        nodes = np.unique(state.node_of[feasible])
        used = nodes[state.node_counts[nodes] > 0]
        if used.size:
            o = np.lexsort((used, -state.node_busy[used], -state.node_counts[used]))
            node = int(used[o[0]])
        else:
            node = int(state.node_of[_first_min(state.cost.time[task], feasible)])
        return _best_in_node(state, feasible, node)


class SpreadNode:
    """The node with the fewest tasks (ties: lower node); inside it, the earliest-finishing device."""

    name = "spread-node"

    def choose(self, task, feasible, state):
        nodes = np.unique(state.node_of[feasible])
        node = int(nodes[int(np.argmin(state.node_counts[nodes]))])
        return _best_in_node(state, feasible, node)


class Fastest:
    """Everything on the single fastest device; the next-ranked device when it cannot take a task.

    Devices are ranked once (in :meth:`start`) by slowdown (total time of the tasks they can run
    over those tasks' total fastest time), then by how many tasks they can run (more first), then
    by position.
    """

    name = "fastest"

    def __init__(self):
        self.rank = None

    def start(self, state):
        t = state.cost.time
        fin = np.isfinite(t)
        total = np.where(fin, t, 0.0).sum(axis=0)
        best = np.where(fin, state.cost.min_time()[:, None], 0.0).sum(axis=0)
        with np.errstate(invalid="ignore", divide="ignore"):
            slowdown = np.where(best > 0, total / np.where(best > 0, best, 1.0), 1.0)
        slowdown = np.where(fin.any(axis=0), slowdown, np.inf)
        D = t.shape[1]
        order = np.lexsort((np.arange(D), -fin.sum(axis=0), slowdown))
        self.rank = np.empty(D, dtype=np.int64)
        self.rank[order] = np.arange(D)

    def choose(self, task, feasible, state):
        return _first_min(self.rank, feasible)


#: Built-in policy classes by registry name.
POLICIES = {cls.name: cls for cls in (LeastLoaded, Spread, Binpack, BinpackNode, SpreadNode, Fastest)}


# ---------------------------------------------------------------------- the list scheduler

def list_schedule(cost: CostModel, policy, name: str | None = None) -> Schedule:
    """Map a task graph by asking ``policy`` for each task's device (see the module docstring).

    Parameters
    ----------
    cost : CostModel
    policy : object with ``choose(task, feasible, state) -> int``
        Optionally ``start(state)``, called once before the first task.
    name : str, optional
        The schedule's ``mapper`` name (default: ``policy.name``, else its class name).

    Returns
    -------
    Schedule
        :func:`streammap.mappers.schedule.simulate` of the assignment and placement order.

    Raises
    ------
    MappingError
        If a task fits on no device at all, or memory deadlocks (every ready task's devices are
        kept full by outputs waiting for consumers).
    StreamMapError
        If the policy returns something that is not one of the feasible devices.
    """
    if name is None:
        name = getattr(policy, "name", None) or type(policy).__name__
    T, D = cost.n_tasks, cost.n_devices
    check_placeable(cost)
    order = priority_order(cost)
    prio = np.empty(T, dtype=np.int64)
    prio[order] = np.arange(T)

    W = cost.time
    lat, inv_bw = cost.lat, cost.inv_bw
    pp, pi, pb = cost.pred_ptr, cost.pred_idx, cost.pred_bytes
    sp, si = cost.succ_ptr, cost.succ_idx
    mem, out = cost.mem, cost.out
    cap = cost.capacity * (1.0 + MEM_RTOL)
    node_of = cost.node_of
    n_nodes = int(node_of.max()) + 1 if D else 0

    dev = np.full(T, -1, dtype=np.int64)
    start = np.zeros(T)
    finish = np.zeros(T)
    state = PlacementState(
        cost=cost, devices=cost.devices, node_of=node_of, n_nodes=n_nodes,
        counts=np.zeros(D, dtype=np.int64), busy=np.zeros(D), avail=np.zeros(D), mem_used=np.zeros(D),
        capacity=cost.capacity, node_counts=np.zeros(n_nodes, dtype=np.int64), node_busy=np.zeros(n_nodes),
        device=dev)
    if hasattr(policy, "start"):
        policy.start(state)

    # Memory can only bind on a device where every task's need together exceeds the capacity, and
    # there only once (largest mem placed) + (sum of outputs placed) could exceed it.
    need = np.maximum(mem, out)
    tracked = (need @ np.isfinite(W) > cap) if T else np.zeros(D, dtype=bool)
    any_tracked = bool(tracked.any())
    out_sum = np.zeros(D)
    mem_max = np.zeros(D)
    profiles: dict[int, MemoryProfile] = {}
    on_dev: list[list[int]] = [[] for _ in range(D)]
    pending = cost.n_succ.copy()
    last_use = np.full(T, -math.inf)
    zeros = np.zeros(D)

    def profile(d):
        prof = profiles.get(d)
        if prof is None:
            prof = profiles[d] = MemoryProfile.of_placed(on_dev[d], start, finish, mem, out, pending, last_use)
        return prof

    def try_place(t) -> bool:
        a, b = pp[t], pp[t + 1]
        if b == a:
            P = None
            ready = zeros
        else:
            P = pi[a:b]
            dp = dev[P]
            ready = (finish[P, None] + lat[dp] + pb[a:b, None] * inv_bw[dp]).max(axis=0)
        w = W[t]
        est = np.maximum(ready, state.avail)
        eft = est + w
        ok = np.isfinite(w)
        if any_tracked:
            tight = ok & tracked & (out_sum + out[t] + np.maximum(mem_max, mem[t]) > cap)
            for d in np.flatnonzero(tight).tolist():
                prof = profile(d)
                s = float(est[d])
                if P is not None:
                    sel = P[(dev[P] == d) & (pending[P] == 1) & (out[P] > 0)]
                    rel_a, rel_t = out[sel], np.maximum(last_use[sel], s)
                else:
                    rel_a = rel_t = np.empty(0)
                if prof.peak_with(s, s + float(w[d]), mem[t], out[t], rel_t, rel_a) > cap[d]:
                    ok[d] = False
        feasible = np.flatnonzero(ok)
        if not feasible.size:
            return False
        state.ready, state.est, state.eft = ready, est, np.where(ok, eft, math.inf)
        d = policy.choose(int(t), feasible, state)
        try:
            d = int(d)
        except (TypeError, ValueError):
            d = -1
        if d < 0 or d >= D or not ok[d]:
            raise StreamMapError(
                f"placement policy {name!r} chose {d!r} for task {cost.tasks[t]}, which is not one of the "
                f"feasible devices {feasible.tolist()}",
                hint="choose(task, feasible, state) must return an element of feasible (a device position)")
        s, f = float(est[d]), float(eft[d])
        dev[t], start[t], finish[t] = d, s, f
        state.avail[d] = f
        state.counts[d] += 1
        state.busy[d] += float(w[d])
        state.node_counts[node_of[d]] += 1
        state.node_busy[node_of[d]] += float(w[d])
        state.mem_used[d] += out[t]
        state.placed += 1
        seq_on[d].append(int(t))
        if any_tracked and tracked[d]:
            on_dev[d].append(int(t))
            out_sum[d] += out[t]
            mem_max[d] = max(mem_max[d], mem[t])
            prof = profiles.get(d)
            if prof is not None:
                prof.add_task(s, f, mem[t], out[t])
        if P is not None:
            release_inputs(P, s, last_use, pending, dev, out, finish, profiles, freed_out)
        return True

    def freed_out(dq, p):
        state.mem_used[dq] -= out[p]

    seq_on: list[list[int]] = [[] for _ in range(D)]
    # Ready list by priority; the static priority order when nothing is ever put aside.
    waiting = cost.n_pred.tolist()
    heap = [(int(prio[t]), int(t)) for t in np.flatnonzero(cost.n_pred == 0).tolist()]
    heapq.heapify(heap)
    deferred: list[tuple[int, int]] = []
    while True:
        before = state.placed
        while heap:
            item = heapq.heappop(heap)
            t = item[1]
            if not try_place(t):
                deferred.append(item)
                continue
            for c in si[sp[t]:sp[t + 1]].tolist():
                waiting[c] -= 1
                if waiting[c] == 0:
                    heapq.heappush(heap, (int(prio[c]), c))
        if not deferred:
            break
        if state.placed == before:
            _deadlock(cost, min(deferred)[1], name)
        for item in deferred:
            heapq.heappush(heap, item)
        deferred = []

    return simulate(cost, dev, seq_on, mapper=name)


def _deadlock(cost: CostModel, t: int, name: str):
    tid = cost.tasks[t]
    path, line = cost.site_line(t)
    raise MappingError(
        f"placement policy {name!r}: task {tid} (kernel {cost.graph.nodes[tid].get('kernel')}) fits on no device: "
        f"every device it may run on is kept full by outputs waiting for consumers placed later",
        path=path, line=line,
        hint="add device memory or memory_oversubscription to the cluster file, reduce mem=/out= of the "
             "kernels, or use a mapper that places by memory (heft)")


# ---------------------------------------------------------------------- mappers from policies

class PolicyMapper:
    """A mapper (``mapper(cost) -> Schedule``) that runs :func:`list_schedule` with a policy.

    Parameters
    ----------
    policy : class or object
        A class is instantiated with no arguments on every call (fresh per-mapping state); an
        object with ``choose`` is used as it is.
    name : str
        The name written into the schedule and the plan.
    """

    def __init__(self, policy, name: str):
        self.policy = policy
        self.name = name
        self.__doc__ = getattr(policy, "__doc__", None)

    def __call__(self, cost: CostModel) -> Schedule:
        pol = self.policy() if isinstance(self.policy, type) else self.policy
        return list_schedule(cost, pol, self.name)

    def __repr__(self):
        return f"PolicyMapper({self.name!r})"


#: Mappers of the built-in policies, by name (merged into :data:`streammap.mappers.MAPPERS`).
POLICY_MAPPERS = {name: PolicyMapper(cls, name) for name, cls in POLICIES.items()}

_HINT = ("give a policy as 'package.module:ClassName' (importable from the current directory or "
         f"PYTHONPATH), or the name of an entry point in the '{ENTRY_POINT_GROUP}' group; the class "
         "needs a method choose(task, feasible, state) -> device position")


def _validate(obj, spec: str) -> PolicyMapper:
    target = obj if isinstance(obj, type) else type(obj)
    if not callable(getattr(target, "choose", None)):
        what = f"class {obj.__name__}" if isinstance(obj, type) else f"{type(obj).__name__} object"
        raise StreamMapError(f"policy {spec!r}: {what} has no choose(task, feasible, state) method", hint=_HINT)
    if isinstance(obj, type):
        try:
            obj()
        except TypeError as exc:
            raise StreamMapError(f"policy {spec!r}: class {obj.__name__} cannot be created without arguments: {exc}",
                                 hint="a policy class must take no constructor arguments (give defaults)") from None
    return PolicyMapper(obj, spec)


def _import(spec: str):
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise StreamMapError(f"policy {spec!r}: expected 'package.module:ClassName'", hint=_HINT)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        cwd = os.getcwd()
        if exc.name and module_name.split(".")[0] == exc.name.split(".")[0] and cwd not in sys.path \
                and "" not in sys.path:
            # Like `python -m`, let a policy module in the current directory be found.
            sys.path.insert(0, cwd)
            try:
                module = importlib.import_module(module_name)
            except ModuleNotFoundError as exc2:
                raise StreamMapError(f"policy {spec!r}: cannot import module {module_name!r} ({exc2})",
                                     hint=_HINT) from None
        else:
            raise StreamMapError(f"policy {spec!r}: cannot import module {module_name!r} ({exc})", hint=_HINT) from None
    except Exception as exc:                       # the module itself failed to import  # noqa: BLE001
        raise StreamMapError(f"policy {spec!r}: importing {module_name!r} failed: {type(exc).__name__}: {exc}",
                             hint="fix the error in the policy module") from None
    obj = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise StreamMapError(f"policy {spec!r}: module {module_name!r} has no attribute {attr!r}",
                                 hint=_HINT) from None
    return obj


def _entry_point(name: str):
    try:
        eps = importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
    except TypeError:                              # Python < 3.10 API (not supported, but harmless)
        eps = importlib.metadata.entry_points().get(ENTRY_POINT_GROUP, [])
    for ep in eps:
        if ep.name == name:
            try:
                return ep.load()
            except Exception as exc:  # noqa: BLE001
                raise StreamMapError(f"policy {name!r}: entry point {ep.value!r} failed to load: "
                                     f"{type(exc).__name__}: {exc}", hint=_HINT) from None
    return None


def find_policy(spec: str) -> PolicyMapper | None:
    """A mapper for a custom policy, or ``None`` when ``spec`` names none.

    ``spec`` is a class path ``package.module:ClassName`` (an instance with ``choose`` also works)
    or the name of an entry point in the :data:`ENTRY_POINT_GROUP` group.

    Raises
    ------
    StreamMapError
        If the class path cannot be imported, the attribute is missing, or the object has no
        ``choose`` method (or the class cannot be created without arguments).
    """
    if ":" in spec:
        return _validate(_import(spec), spec)
    obj = _entry_point(spec)
    if obj is None:
        return None
    return _validate(obj, spec)


def load_policy(spec: str) -> PolicyMapper:
    """Like :func:`find_policy`, but a name that is neither a class path nor an entry point is an error."""
    m = find_policy(spec)
    if m is None:
        raise StreamMapError(f"unknown policy {spec!r}", hint=_HINT)
    return m
