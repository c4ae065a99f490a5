"""Pipeline parallelism: map a stream program's stages onto devices for throughput.

A ``# @stream pipeline(items=N)`` body is one item's trip through the stages; the front end
unrolls it into N copies (task ``k[i]@f.py:L`` is stage ``k@f.py:L`` of item ``i``). For a stream
what counts is the **period**: the time between two finished items in the steady state (its
inverse is the throughput). This module turns the unrolled graph into a *stage problem*, maps the
stages, and deals the items to the stages' replicas.

State (plain data, :class:`StageProblem`)
-----------------------------------------
``time[S, D]``  seconds per item of stage s on device d (the mean over the items of the cost
                model's estimates; ``inf`` where the stage cannot run or does not fit in memory);
``stateful[S]`` stages that keep state between items: each runs on one device, items in order;
``edges``       ``(s, t, bytes)`` between stages (from item 0);
``lat``, ``inv_bw`` the cluster's links.

Policy
------
1. **Stage groups.** The stages are put in a topological order and cut into *groups*: every
   stateful stage is a group of its own, and each maximal run of stateless stages between two
   stateful ones is one group. An item visits the groups in order; all stages of a group run on
   one device for a given item, so a group needs no transfers inside itself. This is how DAG-shaped
   bodies (fan-out/fan-in inside an item) become a chain: a topological chain of stage groups.
2. **Replication.** A stateless group may be replicated: device d runs a share ``x[g, d]`` of the
   items. A stateful group has ``x[g, d] = 1`` on exactly one device. The period of a mapping,
   ignoring transfers, is ``max_d sum_g x[g, d] * time[g, d]``.
3. **Choosing the shares.** For fixed stateful placements, the best shares of the stateless
   groups are a linear program (minimise P subject to ``sum_d x[g, d] = 1`` and every device's
   load at most P), solved exactly with HiGHS (``scipy.optimize.linprog``). Stateful groups are
   placed greedily, heaviest first, each on the device that gives the smallest LP period
   (a list-scheduling step in the spirit of Benoit and Robert's heuristics [1]_, with the
   replicated intervals of their model relaxed to fractional shares, as the data-parallel
   replication of stateless filters in StreamIt does [2]_). The groups of one stateful kernel
   (called at several sites of the body) share its state and are placed as one unit. When there
   are at most :data:`MAX_SEARCHED_UNITS` stateful kernels, every placement of them up to device
   symmetry is also scored by the flow LP of step 5 (transfers included), and the mapping with
   the better dealt period is kept: with short stages and large items the compute-only LP cannot
   see where the state should live. :func:`period_floor` is the least flow-LP period over all
   those placements, the best this model can do (the benchmark prints it beside the bound).
4. **Dealing items.** Items are dealt to the replicas of each group by smooth weighted
   round-robin on the shares, preferring the device that ran the item's previous group (so an item
   that can stay on one device does). Dealing is deterministic: the same program and cluster give
   the same plan.
5. **Period estimate.** The steady-state period (the mean time per item of the dealing continued
   over :data:`STEADY_ITEMS` items, so that shares are met), under the *overlap* communication
   model of [1]_: every device computes, receives and sends at once, and its cycle time is the
   largest of its compute time, its incoming and its outgoing transfer time per item
   (``lat + bytes / bw`` for each item edge between different devices).

The **lower bound** on the period (the issue's definition): the larger of the total work spread
perfectly over the devices (the same LP without groups and without stateful constraints: for
speed-scaled times, total work / aggregate speed) and the heaviest stateful stage at its fastest
device (a stage that cannot be replicated).

References
----------
.. [1] A. Benoit, Y. Robert, "Mapping pipeline skeletons onto heterogeneous platforms", Journal of
   Parallel and Distributed Computing 68(6), 790-808, 2008.
.. [2] M. I. Gordon, W. Thies, S. Amarasinghe, "Exploiting coarse-grained task, data, and pipeline
   parallelism in stream programs", ASPLOS 2006.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import networkx as nx
import numpy as np

from streammap.cost.model import CostModel
from streammap.errors import StreamMapError
from streammap.mappers.schedule import Schedule, simulate
from streammap.strategies.model import depth_first_order

#: ``kernel[i,j]@file.py:L`` -> (``kernel[j]@file.py:L``, i): the item is the first index.
_ID = re.compile(r"^(?P<kernel>[^\[@]+)\[(?P<item>\d+)(?P<rest>(,[^\]]*)?)\](?P<site>@.*)$")


def stage_of(task_id: str) -> tuple[str, int] | None:
    """The stage key and item index of a task of an unrolled pipeline, or ``None``.

    The front end names a pipeline body's tasks with the item as their first loop index
    (``README``: *Task ids*), so removing it gives the stage: ``bandpass[3,2]@fm.py:40`` is stage
    ``bandpass[2]@fm.py:40`` of item 3.
    """
    m = _ID.match(task_id)
    if m is None:
        return None
    rest = m.group("rest")[1:] if m.group("rest") else ""
    key = m.group("kernel") + (f"[{rest}]" if rest else "") + m.group("site")
    return key, int(m.group("item"))


@dataclass
class StageProblem:
    """The stages of a stream program on a cluster (see the module docstring)."""

    names: list[str]
    kernels: list[str]
    time: np.ndarray
    stateful: np.ndarray
    edges: list[tuple[int, int, float]]
    lat: np.ndarray
    inv_bw: np.ndarray
    device_ids: list[str]
    node_of: np.ndarray | None = None                       # node index of each device
    tasks: list[list[str]] = field(default_factory=list)   # per stage, its task id per item

    @property
    def n_stages(self) -> int:
        return len(self.names)

    @property
    def n_devices(self) -> int:
        return self.time.shape[1]


@dataclass
class PipelineMapping:
    """Shares of the items per stage and device, the dealt items, and the period."""

    share: np.ndarray                 # [S, D]: share of stage s's items on device d (from the LP)
    groups: list[list[int]]
    device: np.ndarray                # [S, items]: device of each stage's task for each item
    period: float
    compute_period: float             # the period without transfers
    lower_bound: float
    bound_by: str


def stage_problem(cost: CostModel, items: int) -> StageProblem:
    """The stage problem of an unrolled pipeline graph.

    Raises
    ------
    StreamMapError
        When the tasks do not form ``items`` copies of one body (a task outside any item, or a
        stage that some item skips), so the program cannot be mapped as a pipeline.
    """
    stages: dict[str, list] = {}
    for i, tid in enumerate(cost.tasks):
        got = stage_of(tid)
        if got is None:
            raise StreamMapError(f"task {tid} is not part of a pipeline item")
        key, item = got
        row = stages.setdefault(key, [None] * items)
        if item >= items or row[item] is not None:
            raise StreamMapError(f"task {tid}: item {item} appears twice or is out of range")
        row[item] = i
    for key, row in stages.items():
        if any(r is None for r in row):
            raise StreamMapError(f"stage {key} does not run for every item (the body's tasks "
                                 "depend on the item index)")
    names = list(stages)
    idx = np.array([stages[k] for k in names], dtype=np.int64)          # [S, items]
    g = cost.graph
    time = cost.time[idx].mean(axis=1)
    too_big = cost.mem[idx].max(axis=1)[:, None] > cost.capacity[None, :]
    time = np.where(too_big, math.inf, time)
    stateful = np.array([bool(g.nodes[cost.tasks[idx[s, 0]]].get("stateful")) for s in range(len(names))])
    where = {int(t): s for s, t in enumerate(idx[:, 0])}
    edges = []
    for s, t0 in enumerate(idx[:, 0]):
        a, b = cost.succ_ptr[t0], cost.succ_ptr[t0 + 1]
        for c, nbytes in zip(cost.succ_idx[a:b], cost.succ_bytes[a:b]):
            if int(c) in where:
                edges.append((s, where[int(c)], float(nbytes)))
    return StageProblem(names=names, kernels=[g.nodes[cost.tasks[idx[s, 0]]]["kernel"] for s in range(len(names))],
                        time=time, stateful=stateful, edges=edges, lat=cost.lat, inv_bw=cost.inv_bw,
                        device_ids=[d.id for d in cost.devices], node_of=cost.node_of,
                        tasks=[[cost.tasks[int(t)] for t in row] for row in idx])


def stage_order(problem: StageProblem) -> list[int]:
    """A topological order of the stages (ties by first appearance, so it is deterministic)."""
    dag = nx.DiGraph()
    dag.add_nodes_from(range(problem.n_stages))
    dag.add_edges_from((s, t) for s, t, _ in problem.edges)
    return list(nx.lexicographical_topological_sort(dag))


def stage_groups(problem: StageProblem) -> list[list[int]]:
    """Cut the topological order into groups: each stateful stage alone, stateless runs together."""
    groups: list[list[int]] = []
    for s in stage_order(problem):
        if problem.stateful[s]:
            groups.append([s])
        elif groups and not problem.stateful[groups[-1][0]]:
            groups[-1].append(s)
        else:
            groups.append([s])
    return groups


def min_period_lp(time: np.ndarray, fixed_load: np.ndarray | None = None) -> tuple[float, np.ndarray]:
    """Least period of fractional shares: ``min P`` s.t. ``sum_d x[g, d] = 1``, loads <= P.

    Parameters
    ----------
    time : ndarray [G, D]
        Seconds per item of each (stateless) group on each device, ``inf`` where it cannot run.
    fixed_load : ndarray [D], optional
        Load already on each device (stateful stages placed there).

    Returns
    -------
    period : float
    share : ndarray [G, D]
        The optimal shares (a vertex of the LP, so few groups are split).
    """
    G, D = time.shape
    fixed = np.zeros(D) if fixed_load is None else np.asarray(fixed_load, dtype=np.float64)
    if G == 0:
        return float(fixed.max(initial=0.0)), np.zeros((0, D))
    from scipy.optimize import linprog  # noqa: PLC0415
    from scipy.sparse import coo_matrix  # noqa: PLC0415
    ok = np.isfinite(time)
    if not ok.any(axis=1).all():
        return math.inf, np.zeros((G, D))
    gi, di = np.nonzero(ok)
    V = gi.size
    # variables: x for each feasible (g, d), then P
    c = np.zeros(V + 1)
    c[-1] = 1.0
    a_eq = coo_matrix((np.ones(V), (gi, np.arange(V))), shape=(G, V + 1))
    rows = np.concatenate([di, np.arange(D)])
    cols = np.concatenate([np.arange(V), np.full(D, V)])
    vals = np.concatenate([time[gi, di], -np.ones(D)])
    a_ub = coo_matrix((vals, (rows, cols)), shape=(D, V + 1))
    res = linprog(c, A_ub=a_ub.tocsr(), b_ub=-fixed, A_eq=a_eq.tocsr(), b_eq=np.ones(G),
                  bounds=[(0, None)] * (V + 1), method="highs")
    if res.status != 0:
        raise StreamMapError(f"the pipeline's linear program failed: {res.message}")
    share = np.zeros((G, D))
    share[gi, di] = np.clip(res.x[:V], 0.0, 1.0)
    share /= share.sum(axis=1, keepdims=True)
    return float(res.x[-1]), share


def period_lower_bound(problem: StageProblem) -> tuple[float, str]:
    """The larger of perfectly spread work and the heaviest stateful stage; and which one binds."""
    work, _ = min_period_lp(problem.time)
    best_single = problem.time.min(axis=1)
    heavy = np.flatnonzero(problem.stateful)
    if heavy.size:
        s = int(heavy[np.argmax(best_single[heavy])])
        if best_single[s] > work:
            return float(best_single[s]), f"stateful stage {problem.names[s]}"
    return work, "total work over the devices' aggregate speed"


#: Items dealt to estimate the steady-state period (a short stream's dealing is uneven).
STEADY_ITEMS = 960

#: Most nodes whose every subset is tried (beyond it: the fastest 1, 2, ... nodes).
MAX_NODE_SUBSETS = 4


def map_pipeline(problem: StageProblem, items: int) -> PipelineMapping:
    """Map a stream program's stages for the least period (see the module docstring).

    The shares come from a compute-only LP, so transfers between nodes (slow links) are handled
    by trying the mapping on subsets of the nodes (every subset up to :data:`MAX_NODE_SUBSETS`
    nodes, else the fastest 1, 2, ... nodes) and keeping the least period with transfers.

    Returns
    -------
    PipelineMapping

    Raises
    ------
    StreamMapError
        A stage that can run on no device (constraint or memory).
    """
    bad = np.flatnonzero(~np.isfinite(problem.time).any(axis=1))
    if bad.size:
        raise StreamMapError(f"pipeline stage {problem.names[int(bad[0])]} can run on no device of the cluster",
                             hint="check its device clause, and that its mem fits a device")
    D = problem.n_devices
    node_of = problem.node_of if problem.node_of is not None else np.zeros(D, dtype=np.int64)
    nodes = sorted(set(node_of.tolist()))
    if len(nodes) <= MAX_NODE_SUBSETS:
        from itertools import combinations  # noqa: PLC0415
        subsets = [c for r in range(1, len(nodes) + 1) for c in combinations(nodes, r)]
    else:
        fast = np.where(np.isfinite(problem.time), 1.0 / np.maximum(problem.time, 1e-30), 0.0).sum(axis=0)
        ranked = sorted(nodes, key=lambda n: (-fast[node_of == n].sum(), n))
        subsets = [tuple(ranked[:r]) for r in range(1, len(ranked) + 1)]
    groups = stage_groups(problem)
    lower, bound_by = period_lower_bound(problem)
    best = None
    for subset in subsets:
        allowed = np.isin(node_of, subset)
        time = np.where(allowed[None, :], problem.time, math.inf)
        if not np.isfinite(time).any(axis=1).all():
            continue
        m = _map_on(problem, time, groups, items)
        if best is None or m.period < best.period * (1 - 1e-9):
            best = m
    best.lower_bound, best.bound_by = lower, bound_by
    return best


def _map_on(problem: StageProblem, time: np.ndarray, groups: list[list[int]], items: int) -> PipelineMapping:
    """Steps 2-5 of the module docstring with stage times ``time`` (``inf`` off the allowed devices).

    The stateful groups are placed greedily by the compute-only LP; when there are few of them
    (at most :data:`MAX_SEARCHED_UNITS` stateful kernels), every placement of them up to device
    symmetry is also scored by the flow LP (transfers included), and the better of the two
    mappings (dealt period) is kept: with microsecond stages and large items, where the state
    lives decides how many items cross slow links, which the compute-only LP cannot see."""
    D = time.shape[1]
    gtime = np.array([time[g].sum(axis=0) for g in groups]) if groups else np.zeros((0, D))
    is_stateful = np.array([bool(problem.stateful[g[0]]) for g in groups], dtype=bool)
    free = np.flatnonzero(~is_stateful)
    # the groups of one stateful kernel (called at several sites of the body) share its state, so
    # they are placed as one unit (streammap.placement.colocate)
    units: dict[str, list[int]] = {}
    for g in np.flatnonzero(is_stateful):
        units.setdefault(problem.kernels[groups[g][0]], []).append(int(g))
    unit_list = sorted(units.values(), key=lambda u: (-np.nanmin(gtime[u].sum(axis=0)), u[0]))
    for unit in unit_list:
        if not np.isfinite(gtime[unit].sum(axis=0)).any():
            raise StreamMapError(f"the stages of stateful kernel {problem.kernels[groups[unit[0]][0]]!r} "
                                 "have no device in common",
                                 hint="a stateful kernel keeps its state on one device: give its calls one device clause")
    cut = cut_bytes(problem, groups)
    places = [_place_greedy(gtime, free, unit_list)]
    if len(groups) > 1 and 0 < len(unit_list) <= MAX_SEARCHED_UNITS:
        searched = _place_by_flow(problem, gtime, unit_list, cut)
        if searched is not None and searched[1] != places[0]:
            places.append(searched[1])
    best = None
    for place in places:
        m = _mapping_for(problem, groups, gtime, free, place, cut, items)
        if best is None or m.period < best.period * (1 - 1e-9):
            best = m
    return best


#: Most stateful kernels whose every placement (up to device symmetry) is scored by the flow LP.
MAX_SEARCHED_UNITS = 3
#: Most placements scored that way (beyond: the greedy placement alone).
MAX_SEARCHED_PLACEMENTS = 96


def _place_greedy(gtime: np.ndarray, free: np.ndarray, unit_list: list[list[int]]) -> dict[int, int]:
    """Stateful units, heaviest first, each where the compute-only LP period of the rest is least."""
    D = gtime.shape[1]
    fixed = np.zeros(D)
    place: dict[int, int] = {}
    for unit in unit_list:
        utime = gtime[unit].sum(axis=0)
        best = None
        for d in np.flatnonzero(np.isfinite(utime)):
            trial = fixed.copy()
            trial[d] += utime[d]
            p, _ = min_period_lp(gtime[free], trial)
            key = (p, trial[d], d)
            if best is None or key < best:
                best = key
        for g in unit:
            place[g] = int(best[2])
        fixed[best[2]] += utime[best[2]]
    return place


def _place_by_flow(problem: StageProblem, gtime: np.ndarray, unit_list: list[list[int]],
                   cut: np.ndarray) -> tuple[float, dict[int, int]] | None:
    """The least flow-LP period and its placement of the stateful units, over every placement up
    to symmetry: a unit goes to a device already holding a unit, or to the first unused device of
    each kind of device (same node, same stage times). ``None`` when there are more than
    :data:`MAX_SEARCHED_PLACEMENTS` of them, or no LP succeeds."""
    D = gtime.shape[1]
    node_of = problem.node_of if problem.node_of is not None else np.zeros(D, dtype=np.int64)
    kind = [(int(node_of[d]), tuple(np.round(gtime[:, d], 15))) for d in range(D)]
    combos: list[tuple[int, ...]] = []

    def extend(prefix: tuple[int, ...]) -> bool:
        if len(combos) > MAX_SEARCHED_PLACEMENTS:
            return False
        k = len(prefix)
        if k == len(unit_list):
            combos.append(prefix)
            return True
        ok = np.isfinite(gtime[unit_list[k]].sum(axis=0))
        seen = set()
        cands = []
        for d in range(D):
            if not ok[d]:
                continue
            if d in prefix:
                cands.append(d)
            elif kind[d] not in seen:
                seen.add(kind[d])
                cands.append(d)
        return all(extend(prefix + (d,)) for d in cands)

    if not extend(()) or len(combos) > MAX_SEARCHED_PLACEMENTS:
        return None
    best = None
    for combo in combos:
        place = {g: d for unit, d in zip(unit_list, combo) for g in unit}
        got = flow_lp(gtime, place, cut, problem.lat, problem.inv_bw)
        if got is None:
            continue
        p = flow_period(gtime, got[0], got[1], cut, problem.lat, problem.inv_bw)
        if best is None or p < best[0] * (1 - 1e-9):
            best = (p, place)
    return best


def period_floor(problem: StageProblem) -> float | None:
    """The least period of any mapping of this module's model: the flow LP (fractional shares,
    transfers under the overlap model) minimised over every placement of the stateful kernels,
    on all devices. Unlike :func:`period_lower_bound` it counts transfers, so it shows how far
    the bound is out of reach when items are large and stages short. ``None`` when the stateful
    kernels are too many to enumerate (:data:`MAX_SEARCHED_UNITS`, :data:`MAX_SEARCHED_PLACEMENTS`)."""
    groups = stage_groups(problem)
    gtime = np.array([problem.time[g].sum(axis=0) for g in groups])
    units: dict[str, list[int]] = {}
    for g, members in enumerate(groups):
        if problem.stateful[members[0]]:
            units.setdefault(problem.kernels[members[0]], []).append(g)
    cut = cut_bytes(problem, groups)
    if not units:
        got = flow_lp(gtime, {}, cut, problem.lat, problem.inv_bw) if len(groups) > 1 else None
        if got is None:
            return min_period_lp(gtime)[0]
        return flow_period(gtime, got[0], got[1], cut, problem.lat, problem.inv_bw)
    if len(units) > MAX_SEARCHED_UNITS or len(groups) < 2:
        return None
    found = _place_by_flow(problem, gtime, list(units.values()), cut)
    return None if found is None else found[0]


def flow_period(gtime: np.ndarray, x: np.ndarray, y: np.ndarray, cut: np.ndarray, lat: np.ndarray,
                inv_bw: np.ndarray) -> float:
    """The period of fractional shares ``x`` and flows ``y`` (from :func:`flow_lp`) under the
    overlap model: the largest per-device compute, outgoing or incoming transfer time per item."""
    D = gtime.shape[1]
    compute = (x * np.where(np.isfinite(gtime), gtime, 0.0)).sum(axis=0)
    out, inbound = np.zeros(D), np.zeros(D)
    off = ~np.eye(D, dtype=bool)
    for g in range(y.shape[0]):
        c = np.where(off, lat + cut[g] * inv_bw, 0.0) * y[g]
        out += c.sum(axis=1)
        inbound += c.sum(axis=0)
    return float(max(compute.max(initial=0.0), out.max(initial=0.0), inbound.max(initial=0.0)))


def _mapping_for(problem: StageProblem, groups: list[list[int]], gtime: np.ndarray, free: np.ndarray,
                 place: dict[int, int], cut: np.ndarray, items: int) -> PipelineMapping:
    """Shares (flow LP, else compute-only LP), dealt items and period for one stateful placement."""
    S = problem.n_stages
    D = gtime.shape[1]
    fixed = np.zeros(D)
    for g, d in place.items():
        fixed[d] += gtime[g, d]
    compute_period, free_share = min_period_lp(gtime[free], fixed)
    gshare = np.zeros((len(groups), D))
    gshare[free] = free_share
    for g, d in place.items():
        gshare[g, d] = 1.0
    flows = None
    if len(groups) > 1:
        got = flow_lp(gtime, place, cut, problem.lat, problem.inv_bw)
        if got is not None:
            gshare, flows = got
    share = np.zeros((S, D))
    for g, members in enumerate(groups):
        share[members] = gshare[g]
    device = deal_items(groups, gshare, items, flows)
    # The steady state: the same dealing over a long stream (the first `items` of it are the plan's).
    long = deal_items(groups, gshare, STEADY_ITEMS, flows) if items < STEADY_ITEMS else device
    period = assignment_period(problem, long, long.shape[1])
    return PipelineMapping(share=share, groups=groups, device=device, period=period,
                           compute_period=compute_period, lower_bound=0.0, bound_by="")


def cut_bytes(problem: StageProblem, groups: list[list[int]]) -> np.ndarray:
    """Bytes an item carries from group g to group g+1: each stage's result that a later group
    needs, counted once (one copy serves every consumer on the receiving device)."""
    group_of = np.empty(problem.n_stages, dtype=np.int64)
    for g, members in enumerate(groups):
        group_of[members] = g
    reach: dict[int, tuple[int, float]] = {}        # stage -> (last group that needs it, bytes)
    for s, t, nbytes in problem.edges:
        last, b = reach.get(s, (group_of[s], 0.0))
        reach[s] = (max(last, group_of[t]), max(b, nbytes))
    cut = np.zeros(max(0, len(groups) - 1))
    for s, (last, nbytes) in reach.items():
        cut[group_of[s]:last] += nbytes
    return cut


def flow_lp(gtime: np.ndarray, place: dict[int, int], cut: np.ndarray, lat: np.ndarray,
            inv_bw: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """Shares and item flows that minimise the period *with* transfers (overlap model).

    Variables: ``x[g, d]`` (share of group g's items on d; fixed for stateful groups),
    ``y[g, d, e]`` (share of the items that run group g on d and group g+1 on e) and P. Constraints:
    ``sum_d x[g, d] = 1``; ``sum_e y[g, d, e] = x[g, d]``; ``sum_d y[g, d, e] = x[g+1, e]``; per
    device, compute ``sum_g x[g, d] time[g, d]``, outgoing ``sum y[g, d, e] c_g(d, e)`` and incoming
    ``sum y[g, d, e] c_g(d, e)`` each at most P, with ``c_g(d, e) = lat + cut[g] / bw`` (0 when
    d = e). Returns ``(x, y)`` with ``y`` as a ``[G-1, D, D]`` array, or ``None`` if HiGHS fails.
    """
    from scipy.optimize import linprog  # noqa: PLC0415
    from scipy.sparse import coo_matrix  # noqa: PLC0415
    G, D = gtime.shape
    ok = np.isfinite(gtime)
    for g, d in place.items():
        ok[g] = False
        ok[g, d] = True
    xg, xd = np.nonzero(ok)
    nx_ = xg.size
    xvar = -np.ones((G, D), dtype=np.int64)
    xvar[xg, xd] = np.arange(nx_)
    ys = []
    for g in range(G - 1):
        d_ok, e_ok = np.flatnonzero(ok[g]), np.flatnonzero(ok[g + 1])
        dd, ee = np.meshgrid(d_ok, e_ok, indexing="ij")
        ys.append(np.stack([np.full(dd.size, g), dd.ravel(), ee.ravel()], axis=1))
    yv = np.concatenate(ys) if ys else np.zeros((0, 3), dtype=np.int64)
    ny = yv.shape[0]
    P = nx_ + ny
    rows, cols, vals, b_eq = [], [], [], []
    r = 0
    for g in range(G):                                   # sum_d x = 1
        idx = xvar[g][xvar[g] >= 0]
        rows += [r] * idx.size; cols += idx.tolist(); vals += [1.0] * idx.size  # noqa: E702
        b_eq.append(1.0); r += 1  # noqa: E702
    yg, yd, ye = yv[:, 0], yv[:, 1], yv[:, 2]
    for g in range(G - 1):
        sel = np.flatnonzero(yg == g)
        for d in np.flatnonzero(ok[g]):                  # out of (g, d)
            k = sel[yd[sel] == d]
            rows += [r] * (k.size + 1); cols += (nx_ + k).tolist() + [int(xvar[g, d])]  # noqa: E702
            vals += [1.0] * k.size + [-1.0]; b_eq.append(0.0); r += 1  # noqa: E702
        for e in np.flatnonzero(ok[g + 1]):              # into (g+1, e)
            k = sel[ye[sel] == e]
            rows += [r] * (k.size + 1); cols += (nx_ + k).tolist() + [int(xvar[g + 1, e])]  # noqa: E702
            vals += [1.0] * k.size + [-1.0]; b_eq.append(0.0); r += 1  # noqa: E702
    a_eq = coo_matrix((vals, (rows, cols)), shape=(r, P + 1)).tocsr()
    c = np.where(yd == ye, 0.0, lat[yd, ye] + cut[yg] * inv_bw[yd, ye]) if ny else np.zeros(0)
    ur = np.concatenate([xd, D + yd, 2 * D + ye, np.arange(3 * D)])
    uc = np.concatenate([np.arange(nx_), nx_ + np.arange(ny), nx_ + np.arange(ny), np.full(3 * D, P)])
    uv = np.concatenate([gtime[xg, xd], c, c, -np.ones(3 * D)])
    a_ub = coo_matrix((uv, (ur, uc)), shape=(3 * D, P + 1)).tocsr()
    cost = np.zeros(P + 1)
    cost[-1] = 1.0
    cost[nx_:P] = 1e-6 * c          # among equal periods, the one that moves the least
    res = linprog(cost, A_ub=a_ub, b_ub=np.zeros(3 * D), A_eq=a_eq, b_eq=np.array(b_eq),
                  bounds=[(0, None)] * (P + 1), method="highs")
    if res.status != 0:
        return None
    x = np.zeros((G, D))
    x[xg, xd] = np.clip(res.x[:nx_], 0.0, None)
    x /= x.sum(axis=1, keepdims=True)
    y = np.zeros((max(0, G - 1), D, D))
    if ny:
        y[yg, yd, ye] = np.clip(res.x[nx_:P], 0.0, None)
    return x, y


def deal_items(groups: list[list[int]], gshare: np.ndarray, items: int, flows: np.ndarray | None = None) -> np.ndarray:
    """Device of every (stage, item) by smooth weighted round-robin (deterministic).

    The first group's device follows the shares ``gshare[0]``; each next group's device follows
    the flows out of the device the item is on (``flows[g, d, :]``), or, without flows, the
    group's shares with a preference for the item's current device.
    """
    S = sum(len(g) for g in groups)
    G, D = gshare.shape
    device = np.zeros((S, items), dtype=np.int64)
    credit = np.zeros((G, D))
    pair_credit = np.zeros((max(0, G - 1), D, D))
    for i in range(items):
        prev = -1
        for g, members in enumerate(groups):
            if flows is not None and g > 0 and flows[g - 1, prev].sum() > 1e-12:
                w = flows[g - 1, prev] / flows[g - 1, prev].sum()
                pc = pair_credit[g - 1, prev]
                pc += w
                d = int(np.argmax(np.where(w > 0, pc, -np.inf)))
                pc[d] -= 1.0
            else:
                w = gshare[g]
                credit[g] += w
                cand = credit[g] + np.where((np.arange(D) == prev) & (w > 0), 0.5, 0.0)
                d = int(np.argmax(np.where(w > 0, cand, -np.inf)))
                credit[g, d] -= 1.0
            device[members, i] = d
            prev = d
    return device


def assignment_period(problem: StageProblem, device: np.ndarray, items: int) -> float:
    """Period of a dealt assignment under the overlap model: per device, the largest of compute,
    incoming and outgoing transfer time, averaged per item."""
    D = problem.n_devices
    if items == 0:
        return 0.0
    compute = np.zeros(D)
    for s in range(problem.n_stages):
        np.add.at(compute, device[s], problem.time[s, device[s]])
    inbound = np.zeros(D)
    outbound = np.zeros(D)
    consumers: dict[int, list[tuple[int, float]]] = {}
    for s, t, nbytes in problem.edges:
        consumers.setdefault(s, []).append((t, nbytes))
    for s, outs in consumers.items():
        src = device[s]
        for e in range(D):
            # one copy of stage s's result to device e per item that has a consumer there
            nbytes = np.zeros(items)
            for t, b in outs:
                nbytes = np.where(device[t] == e, np.maximum(nbytes, b), nbytes)
            moved = (src != e) & (nbytes > 0)
            if not moved.any():
                continue
            c = problem.lat[src[moved], e] + nbytes[moved] * problem.inv_bw[src[moved], e]
            np.add.at(outbound, src[moved], c)
            inbound[e] += c.sum()
    return float(np.maximum(compute, np.maximum(inbound, outbound)).max() / items)


def stage_offsets(problem: StageProblem, mapping: PipelineMapping) -> np.ndarray:
    """Earliest start of each stage within one item, at the share-weighted mean times: the
    per-device order of the plan runs task (s, i) around ``offset[s] + i * period``."""
    mean = np.where(mapping.share > 0, problem.time, 0.0)
    mean = (mean * mapping.share).sum(axis=1)
    preds: dict[int, list[int]] = {}
    for s, t, _ in problem.edges:
        preds.setdefault(t, []).append(s)
    offset = np.zeros(problem.n_stages)
    for s in stage_order(problem):
        offset[s] = max((offset[p] + mean[p] for p in preds.get(s, ())), default=0.0)
    return offset


def deal_earliest_finish(cost: CostModel, problem: StageProblem, mapping: PipelineMapping,
                         items: int) -> tuple[np.ndarray, list[np.ndarray]]:
    """Deal a finite stream's items by earliest finish: item by item, group by group, each group
    of an item goes to the device where it would finish first, given what is already placed (a
    list scheduler at the granularity of stage groups, HEFT's rule without insertion); stateful
    groups stay on their one device, and stateless groups keep off those devices when others can
    run them (without insertion, stateless work there would hold up the next item's stateful
    stage). Returns the device of every (stage, item) and each device's
    task order."""
    D = cost.n_devices
    order = stage_order(problem)
    rank = {s: k for k, s in enumerate(order)}
    device = np.zeros((problem.n_stages, items), dtype=np.int64)
    pos = np.array([[cost.pos[t] for t in row] for row in problem.tasks], dtype=np.int64)
    where = np.full(cost.n_tasks, -1, dtype=np.int64)
    finish = np.zeros(cost.n_tasks)
    free = np.zeros(D)
    seq: list[list[int]] = [[] for _ in range(D)]
    pp, pi, pb = cost.pred_ptr, cost.pred_idx, cost.pred_bytes
    keep = np.zeros(D, dtype=bool)          # devices of stateful stages
    for members in mapping.groups:
        if problem.stateful[members[0]]:
            keep |= mapping.share[members[0]] > 0
    for i in range(items):
        for members in mapping.groups:
            members = sorted(members, key=rank.__getitem__)
            best = None
            if problem.stateful[members[0]]:
                candidates = np.flatnonzero(mapping.share[members[0]] > 0)
            else:                     # a stateless group may go to any device it can run on,
                ok = np.isfinite(problem.time[members].sum(axis=0))
                spare = ok & ~keep    # but not one a stateful stage needs again for the next item
                candidates = np.flatnonzero(spare if spare.any() else ok)
            for d in candidates:
                t, local = free[d], {}
                for st in members:
                    p = pos[st, i]
                    ready = 0.0
                    for k in range(pp[p], pp[p + 1]):
                        q = pi[k]
                        if q in local:
                            ready = max(ready, local[q])
                        elif where[q] >= 0:
                            e = where[q]
                            ready = max(ready, finish[q] if e == d else finish[q] + cost.lat[e, d] + pb[k] * cost.inv_bw[e, d])
                    t = max(t, ready) + cost.time[p, d]
                    local[p] = t
                if best is None or t < best[0]:
                    best = (t, int(d), local)
            t, d, local = best
            for st in members:
                p = pos[st, i]
                where[p], finish[p] = d, local[p]
                device[st, i] = d
                seq[d].append(int(p))
            free[d] = t
    return device, [np.array(o, dtype=np.int64) for o in seq]


def pipeline_schedule(cost: CostModel, problem: StageProblem, items: int) -> tuple[Schedule, dict]:
    """Map the stages, deal the items, and schedule the unrolled graph accordingly.

    Three schedules of this stream are simulated under the cost model's (no-contention) makespan
    model, like every other strategy, so that estimates compare, and the shortest is the plan's:
    the steady-state dealing with each device running its tasks in the order of
    ``offset[stage] + item * period``, the same dealing in list-scheduling order
    (:func:`streammap.strategies.model.depth_first_order`), and the earliest-finish dealing of
    :func:`deal_earliest_finish` (a finite stream fills and drains: spreading its first and last
    items by finish time beats keeping the long-run shares). The period and its bound describe
    the steady state of the mapping. Returns the schedule and the plan's ``pipeline`` block.
    """
    m = map_pipeline(problem, items)
    device = np.empty(cost.n_tasks, dtype=np.int64)
    when = np.empty(cost.n_tasks)
    offset = stage_offsets(problem, m)
    for s, row in enumerate(problem.tasks):
        for i, tid in enumerate(row):
            p = cost.pos[tid]
            device[p] = m.device[s, i]
            when[p] = offset[s] + i * m.period
    key = np.lexsort((cost.topo_index, when))
    try:
        steady = simulate(cost, device, [key[device[key] == d] for d in range(cost.n_devices)], mapper="pipeline")
    except ValueError:      # a stateful kernel at two sites of the body: its chain crosses the offsets
        steady = None
    listed = simulate(cost, device, depth_first_order(cost, device), mapper="pipeline")
    dealt, seq = deal_earliest_finish(cost, problem, m, items)
    flat = np.empty(cost.n_tasks, dtype=np.int64)
    for s, row in enumerate(problem.tasks):
        for i, tid in enumerate(row):
            flat[cost.pos[tid]] = dealt[s, i]
    eft = simulate(cost, flat, seq, mapper="pipeline")
    sched = min((s for s in (steady, listed, eft) if s is not None), key=lambda s: s.makespan)
    per_item = dealt if sched is eft else m.device
    stages = []
    for s in range(problem.n_stages):
        used, counts = np.unique(per_item[s], return_counts=True)
        stages.append({"name": problem.names[s], "kernel": problem.kernels[s],
                       "stateful": bool(problem.stateful[s]),
                       "replicas": {problem.device_ids[int(d)]: round(float(c) / items, 6) for d, c in zip(used, counts)},
                       "tasks": list(problem.tasks[s])})
    info = {"items": items, "period": m.period, "lower_bound": m.lower_bound,
            "items_per_second": (1.0 / m.period) if m.period > 0 else 0.0,
            "bound_by": m.bound_by, "stages": stages}
    return sched, info
