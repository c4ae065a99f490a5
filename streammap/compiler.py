"""Compile: source → IR → cost model → mapping → plan.

Each stage hands plain data to the next (``design.md``): the front end or an importer gives the
IR (a networkx graph), :class:`~streammap.cost.model.CostModel` turns it and the cluster into arrays of
times, sizes and link costs, a mapper turns those into a :class:`~streammap.mappers.schedule.Schedule`,
and :func:`build_plan` writes the schedule down as a :class:`~streammap.plan.Plan`. This module
only wires the stages together; it never reaches into their internals.
"""

from __future__ import annotations

import hashlib
import heapq
from pathlib import Path

import networkx as nx
import numpy as np

from streammap.cluster.discover import discover_local
from streammap.cluster.model import Cluster, cluster_from_dict, dump_cluster_spec, load_cluster
from streammap.cost.history import resolve_history_hook
from streammap.cost.model import CostModel, combined_bound, lower_bound
from streammap.directives import MAX_TASKS, parse_program
from streammap.directives.imports import local_modules
from streammap.errors import StreamMapError
from streammap.io.bulk import gc_paused
from streammap.io.importers import load_graph
from streammap.ir import write_graph
from streammap.mappers import get_mapper
from streammap.mappers.auto import large_graph_passes
from streammap.mappers.schedule import Schedule
from streammap.placement.colocate import stateful_groups, whole_device_heft
from streammap.placement.sharing import map_shared, shared_lower_bound, uses_sharing
from streammap.placement.spilling import check_plan_memory, estimate_spills
from streammap.plan import (
    PLAN_VERSION,
    ClusterInfo,
    MapperInfo,
    ModuleInfo,
    PipelineInfo,
    Plan,
    PlanDevice,
    PlanTask,
    SourceInfo,
    StrategyInfo,
    sha256_file,
)
from streammap.strategies import Mapped, check_strategy, choose_strategy


def resolve_cluster(cluster) -> Cluster:
    """A :class:`Cluster` from a Cluster, a dict, a file path, or ``"local"`` (discover now)."""
    if isinstance(cluster, Cluster):
        return cluster
    if isinstance(cluster, dict):
        return cluster_from_dict(cluster)
    if cluster is None:
        raise StreamMapError("no cluster given", hint="pass --cluster cluster.yaml, or --cluster local to discover this machine")
    if str(cluster) == "local":
        spec = discover_local()
        return Cluster(spec, sha256=hashlib.sha256(dump_cluster_spec(spec).encode()).hexdigest(), path="local")
    return load_cluster(cluster)


def load_source_graph(path, params: dict | None = None, entry: str | None = None,
                      max_tasks: int = MAX_TASKS) -> nx.DiGraph:
    """The IR of a program (``.py`` with directives) or an imported workflow (JSON), of at most
    ``max_tasks`` tasks."""
    path = Path(path)
    if path.suffix == ".py":
        return parse_program(path, overrides=params or {}, entry=entry, max_tasks=max_tasks)
    if path.suffix == ".json":
        if params:
            raise StreamMapError(f"-D {next(iter(params))}=...: an imported workflow has no params", path=path,
                                 hint="params (-D) apply to .py programs with # @stream param directives")
        return load_graph(path, max_tasks=max_tasks)
    if not path.exists():
        raise StreamMapError(f"file not found: {path}")
    raise StreamMapError(f"cannot compile {path}: expected a .py program with # @stream directives, "
                         "or a .json workflow (WfCommons or node-link)", path=path)


def compile(path, cluster, params: dict | None = None, mapper: str = "auto", entry: str | None = None,
            emit_graph=None, history=None, strategy: str = "auto", max_tasks: int = MAX_TASKS) -> Plan:
    """Compile a program or workflow into a placement plan for ``cluster``.

    Parameters
    ----------
    path : str or Path
        A ``.py`` file with ``# @stream`` directives, or a workflow JSON (WfCommons, node-link).
    cluster : Cluster, dict, str or Path
        The cluster: an object, a dict in the cluster format, a ``cluster.yaml`` path, or
        ``"local"`` to discover this machine now.
    params : dict, optional
        Param overrides, ``{"N": 4096}`` (values may be expression strings such as ``"1<<12"``).
    mapper : str
        Mapper name (``auto`` by default; see ``streammap.mappers.MAPPERS``).
    entry : str, optional
        The ``# @stream graph`` function to compile when the file has several.
    emit_graph : str or Path, optional
        Also write the IR as node-link JSON there.
    history : None, bool, str, Path, History or callable
        Measured times to prefer over clause estimates (:mod:`streammap.cost.history`): ``None`` or
        ``True`` the default history folder (if it exists), ``False`` none, a path that folder, a
        :class:`~streammap.cost.history.History` or a ``(kernel, device_model, task_attrs)`` callable.
    strategy : str
        ``auto`` (default: the parallel strategy with the least estimate), or ``none``, ``data``,
        ``model``, ``pipeline`` to force one (:mod:`streammap.strategies`).
    max_tasks : int
        Refuse a program or workflow of more tasks than this (200,000 by default; a budget that
        keeps a hostile or mistaken program from exhausting memory at compile time).

    Returns
    -------
    Plan
        The validated plan (write it with :func:`streammap.plan.write_plan`).
    """
    map_fn = get_mapper(mapper)
    check_strategy(strategy)
    clus = resolve_cluster(cluster)
    graph = load_source_graph(path, params, entry, max_tasks=max_tasks)
    modules = program_modules(path, graph)          # a bad local module fails before any mapping
    hook = resolve_history_hook(history)
    choice = choose_strategy(graph, clus, map_fn=lambda cost: _map(cost, mapper, map_fn), strategy=strategy,
                             history=hook)
    kept = choice.chosen
    # auto ran HEFT on this cost model as its first candidate and says what it gave (or its plan
    # is HEFT's own): no second HEFT pass; nor a second analytic bound where auto computed one. Not with stateful kernels: there the plan may come from
    # a view pinned for the plan's own mapper, and the reference is HEFT's own pinning.
    reuse = kept.name in ("none", "data") and not stateful_groups(kept.cost)
    if reuse and kept.schedule.heft_makespan is not None:
        heft_makespan = kept.schedule.heft_makespan
    elif reuse and kept.schedule.mapper in ("heft", "auto(heft)"):
        heft_makespan = kept.schedule.makespan
    else:
        try:
            heft_makespan = whole_device_heft(kept.cost).makespan
        except StreamMapError:            # HEFT finds no memory-valid placement (another strategy did)
            heft_makespan = None
    sharing = uses_sharing(kept.cost)
    if sharing:
        lower = shared_lower_bound(kept.cost)
    elif reuse and kept.schedule.analytic_bound is not None:
        lower = kept.schedule.analytic_bound          # auto computed combined_bound of this cost model
    elif large_graph_passes(kept.cost.n_tasks, kept.cost.n_devices) is None:     # auto's small-graph path
        # the transfer-aware fan-out and the fork-join bounds too: a plan's gap is only as honest
        # as its bound (a BWA-like fan-out reads 1.7x its plain bound and 1.00x this one)
        lower = combined_bound(kept.cost)
    else:
        lower = lower_bound(kept.cost)     # the large-graph path: the bound in O(edges)
    # The exact solver's bound holds for whole-device plans of this cost model: not under sharing.
    solver_bound = None if sharing else kept.schedule.bound
    if solver_bound is not None:
        lower = max(lower, solver_bound)
    plan = build_plan(kept.graph, clus, kept.cost, kept.schedule, source_path=path, modules=modules,
                      lower=lower, heft_makespan=heft_makespan,
                      strategy=choice.info(), pipeline=kept.pipeline)
    plan.mapper.solver_bound = solver_bound
    if clus.oversubscription > 1 and kept.spills is not None:
        plan.mapper.spill_bytes = kept.spills.spilled_bytes + kept.spills.restored_bytes
    if emit_graph is not None:
        write_graph(graph, emit_graph)
    return plan


def program_modules(path, graph: nx.DiGraph) -> list[ModuleInfo]:
    """The local modules a program imports (:func:`streammap.directives.imports.local_modules`),
    as the plan records them; none for an imported workflow."""
    if graph.graph.get("kind", "program") != "program" or Path(path).suffix != ".py":
        return []
    return [ModuleInfo(path=m.path, sha256=m.sha256) for m in local_modules(path)]


def _map(cost: CostModel, mapper: str, map_fn) -> Mapped:
    """The mapper's schedule; share-aware when tasks share devices (:mod:`streammap.placement.sharing`),
    refused when it holds more than F x capacity somewhere, and re-timed with the spill traffic it
    implies under oversubscription; returned with that
    :class:`~streammap.placement.spilling.SpillEstimate`."""
    if uses_sharing(cost):
        schedule = map_shared(cost, mapper, map_fn)
        if schedule is not None:           # HEFT on shared devices is not the plan's whole-device HEFT
            schedule.heft_makespan = None
    else:
        schedule = map_fn(cost)
    check_plan_memory(cost, schedule)
    spills = estimate_spills(cost, schedule)
    if spills.schedule is not schedule:
        # Spill traffic only lengthens a plan: the mapper's proven bound still holds, and HEFT's
        # makespan (the plan's reference) is HEFT's plan without spills, as a second pass gives.
        spills.schedule.bound = schedule.bound
        spills.schedule.heft_makespan = schedule.heft_makespan
    return Mapped(spills.schedule, spills)


def build_plan(graph: nx.DiGraph, cluster: Cluster, cost: CostModel, schedule: Schedule, *, source_path,
               lower: float, heft_makespan: float | None, strategy: StrategyInfo | None = None,
               pipeline: dict | None = None, modules: list[ModuleInfo] | None = None) -> Plan:
    """Write a schedule down as a plan: tasks in start order (a topological order), each with its deps.

    ``modules`` are the program's local modules (found here when not given: :func:`program_modules`).

    ``strategy`` and ``pipeline`` are the plan's optional blocks of the same names (the parallel
    strategy chosen; a pipeline's steady state, as :class:`~streammap.plan.PipelineInfo` fields);
    a pipeline plan's objective is ``throughput``."""
    with gc_paused():        # a few objects per task, no cycles: see streammap.io.bulk
        tasks = _plan_tasks(graph, cluster, cost, schedule)
    g = graph.graph
    if modules is None:
        modules = program_modules(source_path, graph)
    devices = [PlanDevice(id=d.id, kind=d.kind, vendor=d.vendor, model=d.model,
                          index=_local_index(cluster, d), memory=None if d.memory == float("inf") else d.memory)
               for d in cluster.devices]
    return Plan(
        streammap_plan=PLAN_VERSION,
        source=SourceInfo(path=str(source_path), sha256=sha256_file(source_path), entry=g.get("entry"),
                          kind=g.get("kind", "program"), modules=modules),
        params=dict(g.get("params") or {}),
        cluster=ClusterInfo(name=cluster.name, sha256=cluster.sha256,
                            spec=cluster.spec.model_dump(mode="json", exclude_none=True)),
        mapper=MapperInfo(name=schedule.mapper, estimated_makespan=float(schedule.makespan), lower_bound=float(lower),
                          heft_makespan=None if heft_makespan is None else float(heft_makespan)),
        devices=devices, outputs=g.get("outputs"), tasks=tasks,
        objective="throughput" if pipeline is not None else "makespan",
        strategy=strategy,
        pipeline=PipelineInfo(**pipeline) if pipeline is not None else None)


def least_position_topological_order(cost: CostModel) -> np.ndarray:
    """The topological order that always takes the ready task of least position next.

    The same order as ``networkx.lexicographical_topological_sort(graph, key=cost.pos.__getitem__)``
    (it is unique: positions are distinct), computed on the cost model's edge arrays with a heap
    of positions: no graph lookups or key calls per task, which took most of the plan build on
    100,000 tasks.
    """
    waiting = cost.n_pred.tolist()
    heap = np.flatnonzero(cost.n_pred == 0).tolist()           # ascending: already a heap
    ptr, succ = cost.succ_ptr.tolist(), cost.succ_idx.tolist()
    order = []
    pop, push, append = heapq.heappop, heapq.heappush, order.append
    while heap:
        t = pop(heap)
        append(t)
        for c in succ[ptr[t]:ptr[t + 1]]:
            waiting[c] -= 1
            if not waiting[c]:
                push(heap, c)
    return np.array(order, dtype=np.int64)


def _plan_tasks(graph: nx.DiGraph, cluster: Cluster, cost: CostModel, schedule: Schedule) -> list[PlanTask]:
    """The plan's tasks in start order (ties: finish, then a lexicographic topological order)."""
    topo_of = np.empty(cost.n_tasks, dtype=np.int64)
    topo_of[least_position_topological_order(cost)] = np.arange(cost.n_tasks)
    # Task positions by (start, finish, topological index): the last key is unique, so no ties are left.
    order = np.lexsort((topo_of, schedule.finish, schedule.start)).tolist()
    # Each task's producers in topological order: the edges sorted by (consumer, producer's index).
    by_consumer = np.lexsort((topo_of[cost.pred_idx], cost.pred_dst))
    producers = cost.pred_idx[by_consumer].tolist()
    ptr = cost.pred_ptr.tolist()
    ids, nodes = cost.tasks, graph.nodes
    device_ids = [d.id for d in cluster.devices]
    # Python numbers once for all tasks (not a NumPy scalar per task and field).
    device, start, finish = schedule.device.tolist(), schedule.start.tolist(), schedule.finish.tolist()
    out = cost.out.tolist() if cluster.oversubscription > 1 else None
    tasks = []
    for i in order:
        tid = ids[i]
        node = nodes[tid]
        d = device[i]
        tasks.append(PlanTask(
            id=tid, kernel=node["kernel"], device=device_ids[d],
            deps=[ids[p] for p in producers[ptr[i]:ptr[i + 1]]],
            start=start[i], finish=finish[i],
            site=node.get("site"), estimate=cost.source[i], retries=int(node.get("retries") or 0),
            timeout=node.get("timeout"),
            share=cost.share_on(i, d), out=None if out is None else out[i],
            stateful=bool(node.get("stateful")),
            args=node.get("args") or [], kwargs=node.get("kwargs") or {}))
    return tasks


def _local_index(cluster: Cluster, device) -> int | None:
    """The device's local ordinal among its node's devices of the same kind (GPU 0, 1, ...)."""
    if device.index is not None:
        return device.index
    same = [d for d in cluster.devices if d.node == device.node and d.kind == device.kind]
    return same.index(device)
