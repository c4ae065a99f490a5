"""Data parallelism by fission: split a ``split=AXIS`` kernel call into k shards on k devices.

A kernel declared ``split=AXIS`` promises that its result along that axis depends only on the
same slice of its first array argument (row-wise work), so the call ``y = f(x, w)`` can become::

    parts = streammap.scatter(x, k, AXIS)        # k views of x, cut along AXIS (numpy.array_split)
    y_j   = f(parts[j], w)          j = 0..k-1   # the shards: same kernel, 1/k of the work each
    y     = streammap.gather([y_0, ..., y_k-1], AXIS)   # numpy.concatenate along AXIS

and ``y`` is identical to the unsplit result. The other arguments (``w``) go whole to every
shard. The gather task keeps the original task's id, so its consumers and the program's outputs
are unchanged. A ``stateful`` kernel is never split (its calls must see each other's state).

Policy: how many shards
-----------------------
For each splittable task the cost model (:class:`~streammap.cost.model.CostModel`, so measured times
and device constraints count) estimates the whole task on every device. With the scatter and
gather on the task's fastest device ("home"), a shard of a fraction f on device d takes
``a_d + f * b_d`` (launch and link latencies; then its share of the work, of sending its input and
of returning its output: ``lat + bytes / bw`` of the links, no contention), and k shards take

    T(k) = scatter + max over the k shards of (a_d + f_d * b_d) + gather,

on the k devices with the least ``b_d``, with the fractions that make every shard finish at once
(shards sized by speed on unequal devices: :func:`shard_plans`), or equal ones when that is no
better. T(1) is the unsplit task on its fastest device. Unequal shards are pinned to the device
model they were sized for (a ``device`` constraint on the shard), so the mapper keeps the big
shard on the fast device. The shard count is the k
with the least T(k), limited to ``D // width`` where ``width`` is how many tasks share the task's
topological level (they compete for the same devices: splitting each of 8 parallel batches 8 ways
on 8 devices would only add transfers). This is the fission of StreamIt's stateless filters
(Gordon, Thies, Amarasinghe, ASPLOS 2006), with the fission factor picked from the cost model.
The scatter and gather are real tasks in the plan, and the mapper places them like any other.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import networkx as nx
import numpy as np

from streammap.cluster.model import Cluster
from streammap.cost.model import CostModel, launch_overhead
from streammap.ir import add_task, new_graph

SCATTER = "streammap.scatter"
GATHER = "streammap.gather"


@dataclass
class ShardChoice:
    """The shard count of one task and the estimates behind it."""

    task: str
    k: int
    time: dict[int, float]        # k -> estimated T(k)
    fractions: list[float] = None  # share of the split axis per shard (None: equal)
    pins: list[str | None] = None  # device constraint per shard (None: the task's own)

    @property
    def speedup(self) -> float:
        return self.time[1] / self.time[self.k] if self.time.get(self.k) else 1.0


def splittable(graph: nx.DiGraph) -> list[str]:
    """Tasks that may be split: a ``split`` axis, not stateful, an array (task result) argument."""
    out = []
    for t, a in graph.nodes(data=True):
        if a.get("split") is None or a.get("stateful"):
            continue
        if _split_arg(a) is not None:
            out.append(t)
    return out


def _split_arg(attrs) -> int | None:
    """Position of the first positional argument that is a task result."""
    for j, spec in enumerate(attrs.get("args") or []):
        if isinstance(spec, dict) and "ref" in spec:
            return j
    return None


def _scaled(attrs: dict, k: float, out_bytes: float) -> dict:
    """Clause attributes of a shard of 1/k of a task."""
    keep = {key: attrs.get(key) for key in ("device", "share", "retries", "timeout", "site", "code")}
    for key in ("flops", "bytes", "mem"):
        v = attrs.get(key)
        keep[key] = None if v is None else float(v) / k
    keep["out"] = out_bytes / k
    if attrs.get("runtime") is not None:
        keep["runtime"] = float(attrs["runtime"]) / k
    if attrs.get("times"):
        keep["times"] = {m: float(v) / k for m, v in attrs["times"].items()}
    return keep


def _out_bytes(graph: nx.DiGraph, t: str) -> float:
    a = graph.nodes[t]
    if a.get("out") is not None:
        return float(a["out"])
    return max((float(b or 0.0) for _, _, b in graph.out_edges(t, data="bytes")), default=0.0)


def _in_bytes(graph: nx.DiGraph, t: str) -> float:
    spec = graph.nodes[t]["args"][_split_arg(graph.nodes[t])]
    return float(graph.edges[spec["ref"], t].get("bytes") or 0.0)


def level_widths(graph: nx.DiGraph) -> dict[str, int]:
    """For each task, how many tasks share its topological generation."""
    width = {}
    for gen in nx.topological_generations(graph):
        for t in gen:
            width[t] = len(gen)
    return width


@dataclass
class ShardPlan:
    """How k shards of one task would run: estimated time, shares of the axis, target devices."""

    time: float
    fractions: list[float]
    devices: list[int]            # device positions, one per shard


def shard_plans(graph: nx.DiGraph, task: str, cluster: Cluster, history=None,
                k_max: int | None = None) -> dict[int, ShardPlan]:
    """The best way to run ``task`` as k shards, for k = 1 .. k_max (default: every device).

    A shard of a fraction f of the task takes ``a_d + f * b_d`` on device d: ``a_d`` its launch
    overhead and the two link latencies, ``b_d`` the rest of the whole task's time there plus
    sending its input and returning its output (from and to the task's fastest device, where the
    scatter and gather run). For k shards the k devices with the least ``b_d`` are used and the
    fractions are set so that all shards finish together (``f_j = (T - a_j) / b_j``, summing to
    1): on equal devices equal shards, on a device twice as fast a shard twice as large (equal
    shards when that is no better, e.g. when overheads dominate).
    """
    D = len(cluster.devices)
    k_max = D if k_max is None else max(1, min(k_max, D))
    t1, home, a, b, fixed = shard_costs(graph, task, cluster, history)
    plans = {1: ShardPlan(float(t1[home]), [1.0], [home])}
    rank = [d for d in np.lexsort((np.arange(D), a, b)) if np.isfinite(b[d])]
    for k in range(2, min(k_max, len(rank)) + 1):
        use = np.array(rank[:k])
        equal = float((a[use] + b[use] / k).max())
        plans[k] = ShardPlan(float(fixed + equal), [1.0 / k] * k, [int(d) for d in use])
        T = (1.0 + (a[use] / b[use]).sum()) / (1.0 / b[use]).sum()
        f = (T - a[use]) / b[use]
        if (f > 0).all() and T < equal:
            plans[k] = ShardPlan(float(fixed + T), [float(x) for x in f / f.sum()], [int(d) for d in use])
    return plans


def shard_costs(graph: nx.DiGraph, task: str, cluster: Cluster, history=None):
    """The terms of :func:`shard_plans`: ``(t1, home, a, b, fixed)`` with ``t1[d]`` the whole
    task's time on device d, ``home`` its fastest device (where scatter and gather run), a shard of
    fraction f taking ``a[d] + f * b[d]`` on d, and ``fixed`` the scatter and gather time. So
    ``t1[home] * sum(1 / b[d])`` over k devices is the most k shards can speed the task up,
    transfers included (every shard's input and output cross the link to ``home``)."""
    D = len(cluster.devices)
    attrs = graph.nodes[task]
    out_b, in_b = _out_bytes(graph, task), _in_bytes(graph, task)
    mini = new_graph("shards", graph.graph.get("kind", "program"))
    add_task(mini, "whole", attrs["kernel"], **_scaled(attrs, 1, out_b))
    add_task(mini, "scatter", SCATTER, flops=0.0, bytes=0.0, out=in_b)
    add_task(mini, "gather", GATHER, flops=0.0, bytes=2.0 * out_b, out=out_b)
    cost = CostModel(mini, cluster, history=history)
    t1 = cost.time[cost.pos["whole"]]
    home = int(np.argmin(t1))
    launch = np.array([launch_overhead(d) for d in cluster.devices])
    here = np.arange(D) == home
    a = launch + np.where(here, 0.0, cost.lat[home] + cost.lat[:, home])
    b = np.maximum(t1 - launch, 1e-15) + np.where(here, 0.0, in_b * cost.inv_bw[home] + out_b * cost.inv_bw[:, home])
    fixed = cost.time[cost.pos["scatter"], home] + cost.time[cost.pos["gather"], home]
    return t1, home, a, b, fixed


def shard_times(graph: nx.DiGraph, task: str, cluster: Cluster, history=None, k_max: int | None = None) -> dict[int, float]:
    """T(k) of the module docstring for k = 1 .. k_max."""
    plans = shard_plans(graph, task, cluster, history, k_max)
    top = len(cluster.devices) if k_max is None else max(1, min(k_max, len(cluster.devices)))
    return {k: plans[k].time if k in plans else math.inf for k in range(1, top + 1)}


def _pins(cluster: Cluster, attrs: dict, plan: ShardPlan) -> tuple[list[float], list[str | None]]:
    """Fractions and per-shard device constraints that keep each shard on the kind of device it was
    sized for; equal fractions where that cannot be said (an own device clause, devices without a
    model)."""
    devs = [cluster.devices[d] for d in plan.devices]
    classes = {(d.kind, d.vendor, d.model, d.flops, d.mem_bandwidth) for d in devs}
    if len(classes) == 1:
        return [1.0 / len(devs)] * len(devs), [None] * len(devs)
    if (attrs.get("device") or "any") != "any" or any(not d.model for d in devs) or \
            len({d.model for d in devs}) != len(classes):
        return [1.0 / len(devs)] * len(devs), [None] * len(devs)
    return list(plan.fractions), [d.model for d in devs]


def choose_shards(graph: nx.DiGraph, cluster: Cluster, history=None, force: bool = False) -> list[ShardChoice]:
    """The shard count of every splittable task (k = 1 when splitting does not pay).

    With ``force``, every splittable task gets its best k >= 2 (``--strategy data``).
    """
    D = len(cluster.devices)
    width = level_widths(graph)
    out = []
    for t in splittable(graph):
        limit = D if force else max(1, D // max(1, width[t]))
        plans = shard_plans(graph, t, cluster, history, k_max=max(limit, 2) if force else limit)
        pool = {k: p for k, p in plans.items() if k >= 2} if force and len(plans) > 1 else plans
        k = min(pool, key=lambda k: (pool[k].time, k))
        fractions, pins = _pins(cluster, graph.nodes[t], plans[k])
        out.append(ShardChoice(t, k, {k: p.time for k, p in plans.items()}, fractions, pins))
    return out


def split_graph(graph: nx.DiGraph, splits: dict, pins: dict | None = None) -> nx.DiGraph:
    """A copy of ``graph`` with each task of ``splits`` split into shards.

    ``splits`` maps a task id to k (k equal shards) or to a list of fractions (one shard each, of
    that share of the split axis); ``pins`` optionally maps it to a device constraint per shard.
    New task ids: ``ID~scatter`` and ``ID~shard0`` .. ``ID~shard{k-1}``; the gather keeps ``ID``.
    """
    g = graph.copy()
    pins = pins or {}
    for t, parts in splits.items():
        fractions = [1.0 / parts] * parts if isinstance(parts, int) else [float(x) for x in parts]
        k = len(fractions)
        if k < 2:
            continue
        pin = pins.get(t) or [None] * k
        a = dict(graph.nodes[t])
        j = _split_arg(a)
        axis = int(a["split"])
        split_spec = a["args"][j]
        producer = split_spec["ref"]
        in_b, out_b = _in_bytes(graph, t), _out_bytes(graph, t)
        site = a.get("site")
        in_edges = {u: d for u, _, d in graph.in_edges(t, data=True)}
        g.remove_edges_from(list(g.in_edges(t)))
        scatter = f"{t}~scatter"
        equal = all(abs(f - 1.0 / k) < 1e-12 for f in fractions)
        how = {"value": k} if equal else {"list": [{"value": round(f, 9)} for f in fractions]}
        add_task(g, scatter, SCATTER, site=site, flops=0.0, bytes=0.0, out=in_b,
                 args=[split_spec, how, {"value": axis}])
        g.add_edge(producer, scatter, bytes=in_b)
        shards = []
        for i in range(k):
            sid = f"{t}~shard{i}"
            args = list(a["args"])
            args[j] = {"ref": scatter, "index": i}
            attrs = _scaled(a, 1.0 / fractions[i], out_b)
            if pin[i] is not None:
                attrs["device"] = pin[i]
            add_task(g, sid, a["kernel"], args=args, kwargs=dict(a.get("kwargs") or {}), **attrs)
            g.add_edge(scatter, sid, bytes=in_b * fractions[i])
            others = {s["ref"] for s in _refs([*args, *(a.get("kwargs") or {}).values()]) if s["ref"] != scatter}
            for u in sorted(others):
                g.add_edge(u, sid, bytes=float(in_edges.get(u, {}).get("bytes") or 0.0))
            shards.append(sid)
        for u, d in in_edges.items():                    # ordering-only deps (stateful chains)
            if u != producer and not any(g.has_edge(u, s) for s in shards):
                g.add_edge(u, shards[0], **d)
        # The original task becomes the gather (same id: consumers and outputs are unchanged).
        node = g.nodes[t]
        node.update(kernel=GATHER, flops=0.0, bytes=2.0 * out_b, mem=None, out=out_b, device="any",
                    split=None, share=1.0, runtime=None, times=None,
                    args=[{"list": [{"ref": s} for s in shards]}, {"value": axis}], kwargs={})
        for s, f in zip(shards, fractions):
            g.add_edge(s, t, bytes=out_b * f)
    return g


def _refs(specs) -> list[dict]:
    out = []

    def walk(s):
        if not isinstance(s, dict):
            return
        if "ref" in s:
            out.append(s)
        for key in ("list", "tuple"):
            for x in s.get(key, ()):
                walk(x)
        for x in (s.get("dict") or {}).values():
            walk(x)
    for s in specs:
        walk(s)
    return out
