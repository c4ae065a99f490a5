"""Re-mapping the rest of a plan while it runs: slow devices, lost devices.

Executor-neutral: the local executor uses it by "drain and re-plan" (stop dispatching, let the
running tasks finish, re-map, continue with the results it holds); a Ray executor can call the
same two pieces with what its actors report.

:class:`SlowDeviceDetector`
    Fed one ``(device, estimated, measured)`` per finished task; says when a device runs
    *consistently* slower than its model: its last ``window`` tasks (of at least ``min_task_time``)
    all took ``>= factor`` times their estimate times the *calibration* of the run, the median
    measured/estimated ratio of the other devices' tasks. Relative, so that a run that is slower
    than the cost model everywhere (a plan for GPUs emulated on a CPU; a cost model that is off by
    the same factor for every device) re-maps nothing: only a device slow *compared to the
    others* is worth moving work off. The slowdown factor it reports is that relative ratio (the
    window's median).
:func:`remap_plan`
    Given the plan (which carries ``cluster.spec``), the finished tasks with the devices their
    outputs live on, the time now, slowdown factors and lost devices, a new plan in which the
    finished tasks keep their device and times and the unfinished ones are mapped again:

    1. the IR is rebuilt from the program (``parse_program(source, params, entry)``), or, when the
       source is not a directives program or does not give the plan's tasks (hand-made plans), from
       the plan itself (each task's estimated duration on its planned device, scaled by device
       speed, and only devices of the same kind allowed);
    2. the cluster from ``plan.cluster.spec`` (or, without it, from the plan's device list);
    3. a :class:`~streammap.cost.model.CostModel`, then: the slow devices' time columns multiplied by
       their factors; lost (and ``exclude``d) devices get time ``inf``; each finished task is
       pinned to the device that holds its output with zero duration (``inf`` elsewhere), so that
       where the outputs live counts for transfers and memory;
    4. finished tasks whose output is gone (on a lost device, or freed and needed again) are run
       again, with whatever they need in turn;
    5. the memory-aware HEFT (``streammap.mappers.get_mapper(mapper)``) maps everything, and the
       unfinished tasks get the new device and times shifted by ``now``. When tasks share devices
       (``share < 1``) the share-aware scheduler does (:func:`streammap.placement.sharing.map_shared`: HEFT's
       order, earliest finish, co-location by share, the runtime's FIFO admission), so the
       re-mapped estimates stay as true as the first plan's; the tasks keep their shares. Under
       memory oversubscription the schedule is re-timed with the spills it implies
       (:func:`streammap.placement.spilling.estimate_spills`), as the compiler does.

    Finished tasks keep their device and times, except that on a device that shares, a finished
    task's estimated times are clipped at ``now`` (it is done by then): the plan's share check
    (:func:`streammap.plan.check_plan_shares`) then sees the finished tasks before ``now`` and
    the new ones after it, never an estimate of the past overlapping the future.

    The result's plan lists the finished tasks first (plan order), then the rest by new start, except
    that a finished task whose dep is run again follows that dep: a topological order, so any
    executor can run it with the finished results carried over.
"""

from __future__ import annotations

import heapq
import math
import statistics
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Optional

import networkx as nx
import numpy as np

from streammap.cluster.model import Cluster, ClusterSpec, cluster_from_dict
from streammap.cost.model import CostModel, lower_bound
from streammap.directives import parse_program
from streammap.errors import MappingError, StreamMapError
from streammap.ir import add_task, new_graph, spec_refs
from streammap.mappers import get_mapper
from streammap.placement.colocate import colocate_stateful
from streammap.placement.sharing import SHARE_EPS, map_shared, uses_sharing
from streammap.placement.spilling import estimate_spills
from streammap.plan import MapperInfo, Plan, validate_plan


class RemapError(StreamMapError):
    """The rest of the plan cannot be re-mapped (no device left for a task, unreadable program)."""


# -- detection ---------------------------------------------------------------------------------

@dataclass
class SlowDevice:
    """A detector's finding: ``device`` runs ``factor`` times slower than the others, relative to
    the model (median of its last ``window`` tasks), over ``evidence`` (task ids)."""

    device: str
    factor: float
    evidence: list = field(default_factory=list)
    baseline: float = 1.0


class SlowDeviceDetector:
    """Decides when a device runs consistently slower than its model (see the module docstring).

    Parameters
    ----------
    factor : float
        A task counts as slow at ``measured >= factor x estimated x calibration``.
    window : int
        That many slow tasks in a row on one device make it a slow device.
    min_task_time : float
        Tasks measured shorter than this (seconds) are ignored: timer and dispatch noise.
    history : int
        Ratios kept per device for the calibration.
    """

    def __init__(self, factor: float = 2.0, window: int = 3, min_task_time: float = 1e-3, history: int = 64):
        self.factor = float(factor)
        self.window = int(window)
        self.min_task_time = float(min_task_time)
        self._ratios: dict[str, deque] = {}
        self._recent: dict[str, deque] = {}
        self._history = history

    def calibration(self, exclude: str | None = None) -> Optional[float]:
        """Median measured/estimated ratio over the devices other than ``exclude`` (``None``
        while they have fewer than ``window`` tasks together)."""
        vals = [r for d, rs in self._ratios.items() if d != exclude for r in rs]
        if len(vals) < self.window:
            return None
        return statistics.median(vals)

    def reset(self, device: str | None = None) -> None:
        """Forget the recent tasks (of one device): after a re-mapping the estimates change."""
        for d, q in self._recent.items():
            if device is None or d == device:
                q.clear()

    def observe(self, device: str, estimated: float, measured: float, task: str | None = None) -> Optional[SlowDevice]:
        if estimated <= 0 or measured < self.min_task_time or not math.isfinite(measured):
            return None
        ratio = measured / estimated
        recent = self._recent.get(device)
        if recent is None:
            recent = self._recent[device] = deque(maxlen=self.window)
            self._ratios[device] = deque(maxlen=self._history)
        base = self.calibration(exclude=device)
        self._ratios[device].append(ratio)
        if base is None or base <= 0:
            recent.clear()
            return None
        if ratio >= self.factor * base:
            recent.append((task, ratio))
        else:
            recent.clear()
        if len(recent) < self.window:
            return None
        rel = statistics.median(r for _, r in recent) / base
        found = SlowDevice(device=device, factor=rel, evidence=[t for t, _ in recent], baseline=base)
        recent.clear()
        return found


# -- re-mapping --------------------------------------------------------------------------------

@dataclass
class RemapResult:
    """A new plan for the rest of a run, and what changed."""

    plan: Plan
    unfinished: list[str]           # tasks left to run (including reruns), in the new plan's order
    moved: list[str]                # unfinished tasks whose device changed
    rerun: list[str]                # finished tasks to run again (their outputs are gone)
    mapping_time: float
    estimated_makespan: float
    ir: str = "program"             # where the IR came from: program or plan


def _graph_from_program(plan: Plan) -> Optional[nx.DiGraph]:
    if plan.source.kind != "program" or not str(plan.source.path).endswith(".py"):
        return None
    try:
        g = parse_program(plan.source.path, overrides=dict(plan.params), entry=plan.source.entry)
    except Exception:                  # noqa: BLE001 -- not a directives program (hand-made plan)
        return None
    ids = {t.id: t.kernel for t in plan.tasks}
    if set(g.nodes) != set(ids) or any(g.nodes[t].get("kernel") != k for t, k in ids.items()):
        return None
    return g


def _check_state_kept(plan: Plan, need, fin: dict, exclude: set) -> None:
    """A stateful kernel whose finished calls ran on a device that is now gone or excluded cannot
    go on elsewhere: its state lives on that device (``streammap.placement.colocate``), and running its
    finished calls again would not rebuild it where the state survives (the local executor)."""
    home = {t.kernel: fin[t.id] for t in plan.tasks if t.stateful and t.id in fin}
    for t in plan.tasks:
        if t.stateful and t.id in need and home.get(t.kernel) in exclude:
            raise RemapError(f"stateful kernel {t.kernel!r} kept its state on {home[t.kernel]}, which is lost or "
                             f"excluded; its remaining calls (task {t.id!r}) cannot run elsewhere",
                             hint="run the program again from the start")


def _graph_from_plan(plan: Plan, cluster) -> nx.DiGraph:
    """An IR with what the plan knows: estimated durations scaled by speed, same-kind devices."""

    speed = {d.id: d.speed for d in cluster.devices}
    kind = {d.id: d.kind for d in cluster.devices}
    g = new_graph(plan.source.path, plan.source.kind, source=plan.source.path, entry=plan.source.entry,
                  params=plan.params)
    g.graph["outputs"] = plan.outputs
    for t in plan.tasks:
        add_task(g, t.id, t.kernel, site=t.site, retries=t.retries, timeout=t.timeout, args=t.args, kwargs=t.kwargs,
                 runtime=max(t.finish - t.start, 0.0) * speed.get(t.device, 1.0),
                 device=kind.get(t.device, "any"), share=t.share, out=t.out, stateful=t.stateful)
        for dep in t.deps:
            g.add_edge(dep, t.id, bytes=0.0)
    return g


def cluster_from_plan(plan: Plan):
    """A :class:`~streammap.cluster.model.Cluster` of the plan's devices, when it carries no spec:
    one node per id prefix, 10 GB/s links, 10 GB/s network."""

    nodes: dict[str, list] = {}
    for d in plan.devices:
        node, _, name = d.id.rpartition("/")
        dev = {"name": name, "kind": d.kind}
        for key in ("vendor", "model", "memory", "index"):
            v = getattr(d, key)
            if v is not None:
                dev[key] = v
        nodes.setdefault(node or "node", []).append(dev)
    link = {"bandwidth": 10e9, "latency": 10e-6}
    spec = {"name": plan.cluster.name or "plan", "nodes": [
        {"name": n, "devices": ds, **({"link": link} if len(ds) > 1 else {})} for n, ds in nodes.items()]}
    if len(nodes) > 1:
        spec["network"] = link
    return Cluster(ClusterSpec.model_validate(spec))


def _cluster(plan: Plan):

    if plan.cluster.spec:
        try:
            c = cluster_from_dict(plan.cluster.spec, name_for_errors="plan cluster.spec")
            if {t.device for t in plan.tasks} <= set(c.index):
                return c
        except StreamMapError:
            pass
    return cluster_from_plan(plan)


def _deps_first(rows: list) -> list:
    """``rows`` in their order, except that a row waits until its deps are listed (a stable
    topological sort). The order is topological already unless a finished task kept its output
    while a task it depends on is run again (that task's output was lost): the finished task then
    moves after it. Finished tasks are carried, not run, so where they are listed changes nothing."""
    pos = {t.id: i for i, t in enumerate(rows)}
    waiting = {t.id: sum(1 for d in t.deps if d in pos) for t in rows}
    consumers: dict[str, list[int]] = {}
    for i, t in enumerate(rows):
        for d in t.deps:
            if d in pos:
                consumers.setdefault(d, []).append(i)
    ready = [i for i, t in enumerate(rows) if waiting[t.id] == 0]
    heapq.heapify(ready)
    out = []
    while ready:
        i = heapq.heappop(ready)
        out.append(rows[i])
        for j in consumers.get(rows[i].id, ()):
            waiting[rows[j].id] -= 1
            if waiting[rows[j].id] == 0:
                heapq.heappush(ready, j)
    return out if len(out) == len(rows) else rows       # a cycle: let validate_plan name it


def remap_plan(plan: Plan, finished: Mapping[str, str] | Iterable[str], now: float, *,
               slowdown: Mapping[str, float] | None = None, lost: Iterable[str] = (),
               exclude: Iterable[str] = (), available: Iterable[str] | None = None,
               mapper: str = "heft", history=None) -> RemapResult:
    """A new plan for the unfinished tasks of ``plan`` (see the module docstring).

    Parameters
    ----------
    plan : Plan
        The plan being run (the original, or the latest re-mapped one).
    finished : mapping task id -> device, or iterable of task ids
        Finished tasks and the device that holds each output (default: the plan's device).
    now : float
        Seconds since the run started; the new times of unfinished tasks start there.
    slowdown : mapping device id -> factor, optional
        Each slow device's time column is multiplied by its factor (> 0).
    lost : iterable of device ids
        Devices gone, with the outputs they held: nothing is mapped there, and finished tasks
        whose outputs are needed again are run again.
    exclude : iterable of device ids
        Devices the executor cannot use (nothing new is mapped there; their outputs stay valid).
    available : iterable of task ids, optional
        Finished tasks whose outputs the executor still holds (default: all finished ones). A
        finished task needed again whose output is not available is run again.
    mapper : str
        Mapper name (default ``heft``, the memory-aware insertion HEFT).
    history : callable, optional
        Passed to the cost model (measured times).

    Raises
    ------
    RemapError
        No device is left for some unfinished task, or the plan's devices are unknown.
    """

    t0 = time.perf_counter()
    by_id = {t.id: t for t in plan.tasks}
    if isinstance(finished, Mapping):
        fin = {k: v for k, v in finished.items()}
    else:
        fin = {k: by_id[k].device for k in finished}
    unknown = [k for k in fin if k not in by_id]
    if unknown:
        raise RemapError(f"finished task {unknown[0]!r} is not a task of the plan")
    lost = set(lost)
    exclude = set(exclude) | lost
    avail = set(fin) if available is None else set(available) & set(fin)
    slowdown = dict(slowdown or {})

    # Finished tasks to run again: needed (by an unfinished task or as an output) but gone.
    outputs = set()
    if plan.outputs is not None:
        outputs = set(spec_refs(plan.outputs))
    todo = [t.id for t in plan.tasks if t.id not in fin]
    need = set(todo)
    stack = list(todo) + [o for o in outputs if o in fin]
    rerun: set[str] = set()

    def gone(k):
        return fin[k] in lost or k not in avail

    for o in outputs:
        if o in fin and gone(o):
            rerun.add(o)
            need.add(o)
    while stack:
        k = stack.pop()
        if k not in need and k not in rerun:
            continue
        for dep in by_id[k].deps:
            if dep in fin and dep not in rerun and gone(dep):
                rerun.add(dep)
                need.add(dep)
                stack.append(dep)
    done = {k: d for k, d in fin.items() if k not in rerun}
    _check_state_kept(plan, need, fin, exclude)

    cluster = _cluster(plan)
    graph = _graph_from_program(plan)
    ir = "program"
    if graph is None:
        graph = _graph_from_plan(plan, cluster)
        ir = "plan"
    cost = CostModel(graph, cluster, history=history)
    col = cluster.index
    T = cost.time.copy()
    pending_rows = np.array([cost.pos[k] for k in need], dtype=np.int64)
    if pending_rows.size:
        for dev, f in slowdown.items():
            if dev in col and f > 0:
                T[pending_rows, col[dev]] *= f
        for dev in exclude:
            if dev in col:
                T[pending_rows, col[dev]] = math.inf
    for k, dev in done.items():
        if dev not in col:
            raise RemapError(f"finished task {k!r} is on {dev!r}, which is not a device of the plan's cluster")
        i = cost.pos[k]
        T[i, :] = math.inf
        T[i, col[dev]] = 0.0
    # every device its own class: the bounds read class_time, and a slowed or lost device breaks its class
    cost = cost.with_times(T)
    try:
        # a stateful kernel's pending calls follow its finished ones (pinned where they ran)
        def map_fn(c):
            return map_shared(c, mapper, get_mapper(mapper)) if uses_sharing(c) else get_mapper(mapper)(c)
        schedule = colocate_stateful(cost, map_fn)
    except MappingError as exc:
        raise RemapError(f"cannot re-map the rest of the plan: {exc.message}", hint=exc.hint) from None
    if getattr(cluster, "oversubscription", 1.0) > 1.0:
        schedule = estimate_spills(cost, schedule).schedule

    shares = {t.device for t in plan.tasks if t.share < 1.0 - SHARE_EPS}
    rows_done = [t if t.device not in shares or t.finish <= now else
                 t.model_copy(update={"start": min(t.start, now), "finish": now})
                 for t in plan.tasks if t.id in done]
    new_rows = []
    moved = []
    plan_pos = {t.id: i for i, t in enumerate(plan.tasks)}
    for k in need:
        i = cost.pos[k]
        t = by_id[k]
        dev = cluster.devices[int(schedule.device[i])].id
        if dev != t.device:
            moved.append(k)
        new_rows.append(t.model_copy(update={
            "device": dev, "start": float(now + schedule.start[i]), "finish": float(now + schedule.finish[i]),
            "estimate": cost.source[i], "share": cost.share_on(i, int(schedule.device[i]))}))
    new_rows.sort(key=lambda t: (t.start, t.finish, plan_pos[t.id]))
    makespan = max([t.finish for t in new_rows] + [now])
    try:
        lb = float(lower_bound(cost)) + now
    except Exception:                  # noqa: BLE001
        lb = plan.mapper.lower_bound
    info = MapperInfo(name=plan.mapper.name if plan.mapper.name.endswith("+remap") else f"{plan.mapper.name}+remap",
                      estimated_makespan=float(makespan), lower_bound=float(min(lb, makespan)),
                      heft_makespan=None)
    # A re-mapped pipeline plan runs as a DAG: its stages' replicas no longer hold.
    new_plan = plan.model_copy(update={"tasks": _deps_first(rows_done + new_rows), "mapper": info, "pipeline": None})
    validate_plan(new_plan)
    order = {t.id: i for i, t in enumerate(new_plan.tasks)}
    return RemapResult(plan=new_plan, unfinished=sorted(need, key=order.__getitem__),
                       moved=sorted(moved, key=order.__getitem__), rerun=sorted(rerun, key=order.__getitem__),
                       mapping_time=time.perf_counter() - t0, estimated_makespan=float(makespan), ir=ir)
