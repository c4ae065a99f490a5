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
For each splittable task the cost model (:class:`~streammap.cost.CostModel`, so measured times
and device constraints count) estimates a shard of 1/k of the clauses on every device, for k = 1
.. D. With the scatter and gather on the task's fastest device ("home"), k shards take

    T(k) = scatter + max over the k chosen devices of (send 1/k input + shard + return 1/k output)
           + gather,

the k devices being those with the least such time (transfers: ``lat + bytes / bw`` of the
links; no contention). T(1) is the unsplit task on its fastest device. The shard count is the k
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

from ..cluster import Cluster
from ..cost import CostModel
from ..ir import add_task, new_graph

SCATTER = "streammap.scatter"
GATHER = "streammap.gather"


@dataclass
class ShardChoice:
    """The shard count of one task and the estimates behind it."""

    task: str
    k: int
    time: dict[int, float]        # k -> estimated T(k)

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


def _scaled(attrs: dict, k: int, out_bytes: float) -> dict:
    """Clause attributes of a shard of 1/k of a task."""
    keep = {key: attrs.get(key) for key in ("device", "share", "retries", "site")}
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


def shard_times(graph: nx.DiGraph, task: str, cluster: Cluster, history=None, k_max: int | None = None) -> dict[int, float]:
    """T(k) of the module docstring for k = 1 .. k_max (default: the number of devices)."""
    D = len(cluster.devices)
    k_max = D if k_max is None else max(1, min(k_max, D))
    attrs = graph.nodes[task]
    out_b, in_b = _out_bytes(graph, task), _in_bytes(graph, task)
    mini = new_graph("shards", graph.graph.get("kind", "program"))
    for k in range(1, k_max + 1):
        add_task(mini, f"k{k}", attrs["kernel"], **_scaled(attrs, k, out_b))
    add_task(mini, "scatter", SCATTER, flops=0.0, bytes=0.0, out=in_b)
    add_task(mini, "gather", GATHER, flops=0.0, bytes=2.0 * out_b, out=out_b)
    cost = CostModel(mini, cluster, history=history)
    t1 = cost.time[cost.pos["k1"]]
    home = int(np.argmin(t1))
    times = {1: float(t1[home])}
    scatter = cost.time[cost.pos["scatter"], home]
    gather = cost.time[cost.pos["gather"], home]
    for k in range(2, k_max + 1):
        shard = cost.time[cost.pos[f"k{k}"]]
        send = np.where(np.arange(D) == home, 0.0, cost.lat[home] + in_b / k * cost.inv_bw[home])
        back = np.where(np.arange(D) == home, 0.0, cost.lat[:, home] + out_b / k * cost.inv_bw[:, home])
        each = np.sort(send + shard + back)
        times[k] = float(scatter + each[k - 1] + gather) if np.isfinite(each[k - 1]) else math.inf
    return times


def choose_shards(graph: nx.DiGraph, cluster: Cluster, history=None, force: bool = False) -> list[ShardChoice]:
    """The shard count of every splittable task (k = 1 when splitting does not pay).

    With ``force``, every splittable task gets its best k >= 2 (``--strategy data``).
    """
    D = len(cluster.devices)
    width = level_widths(graph)
    out = []
    for t in splittable(graph):
        limit = D if force else max(1, D // max(1, width[t]))
        times = shard_times(graph, t, cluster, history, k_max=max(limit, 2) if force else limit)
        pool = {k: v for k, v in times.items() if k >= 2} if force and D >= 2 else times
        k = min(pool, key=lambda k: (pool[k], k))
        out.append(ShardChoice(t, k, times))
    return out


def split_graph(graph: nx.DiGraph, splits: dict[str, int]) -> nx.DiGraph:
    """A copy of ``graph`` with each task of ``splits`` (id -> k >= 2) split into k shards.

    New task ids: ``ID~scatter`` and ``ID~shard0`` .. ``ID~shard{k-1}``; the gather keeps ``ID``.
    """
    g = graph.copy()
    for t, k in splits.items():
        if k < 2:
            continue
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
        add_task(g, scatter, SCATTER, site=site, flops=0.0, bytes=0.0, out=in_b,
                 args=[split_spec, {"value": k}, {"value": axis}])
        g.add_edge(producer, scatter, bytes=in_b)
        shards = []
        for i in range(k):
            sid = f"{t}~shard{i}"
            args = list(a["args"])
            args[j] = {"ref": scatter, "index": i}
            add_task(g, sid, a["kernel"], args=args, kwargs=dict(a.get("kwargs") or {}),
                     **_scaled(a, k, out_b))
            g.add_edge(scatter, sid, bytes=in_b / k)
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
        for s in shards:
            g.add_edge(s, t, bytes=out_b / k)
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
