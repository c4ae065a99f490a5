"""What a job asks of the cluster: how many devices, of which models, for how long.

A job is a program or a task graph. Its **demand** is a gang width ``k`` (devices it needs at
once, all of one model) and, for every device model of the cluster that can run it, an
**option**: the estimated duration on ``k`` devices of that model and its peak memory per device.
Both come from the compiler itself: the graph is mapped (``streammap.mappers``) onto a
*shape cluster* of ``k`` devices of that model, and the mapping's estimated makespan is the
duration. Only the shape matters, not which devices, so each (graph, model, k) is mapped once and
cached: a stream of 10,000 jobs over 20 distinct graphs costs a few hundred mappings.

Gang width. A job may state its width (``gpus:``); otherwise it is the widest of
:data:`WIDTHS` whose parallel efficiency on the job's fastest model,
``T(1) / (k * T(k))``, is at least :data:`EFFICIENCY`: a job gets more devices only while they
pay for themselves (a moldable job sized once at submission, as Tiresias and Gavel size theirs by
the user's request).

Shape clusters keep the real topology: nodes of at most as many devices of the model as the
cluster's largest node holds, that node's link inside a node, the cluster's network between nodes.
Estimates assume the granted devices sit on as few nodes as possible (the admission core tries
hardest to grant exactly that).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from streammap.cluster.model import Cluster, cluster_from_dict
from streammap.cost.model import CostModel
from streammap.errors import MappingError, StreamMapError
from streammap.mappers import get_mapper
from streammap.mappers.schedule import peak_memory
from streammap.tenancy.packing import fractional_demand, job_share

#: Gang widths considered when a job does not state its own.
WIDTHS = (1, 2, 4, 8)
#: Least parallel efficiency T(1) / (k T(k)) for a wider gang to be chosen.
EFFICIENCY = 0.75


@dataclass(frozen=True)
class Option:
    """One way to run a job: ``gpus`` devices of ``model`` for ``duration`` seconds.

    ``share`` < 1 (only with ``gpus`` 1) is a *fractional* option: the job holds that fraction of
    one device's compute and ``memory`` bytes of its memory, and ``duration`` is its estimated
    time when held to that fraction (:mod:`.packing`); other jobs may hold the rest.
    """

    model: str
    gpus: int
    duration: float
    memory: float         # peak bytes on any one device of the gang
    share: float = 1.0    # fraction of one device held (1: whole devices)

    @property
    def held(self) -> float:
        """The GPUs this option holds: ``gpus``, or its fraction of one device."""
        return self.gpus if self.share >= 1.0 else self.share


@dataclass(frozen=True)
class Demand:
    """Everything admission needs to know about a job: its options, fastest first."""

    gpus: int
    options: tuple[Option, ...]
    #: For a fractional job (options with ``share`` < 1): the same job on whole devices, which a
    #: scheduler without joint placement runs instead (``None`` for a job of whole devices).
    whole: "Demand | None" = None

    @property
    def held(self) -> float:
        """The GPUs the job holds while it runs (its fraction of one device when fractional)."""
        return self.options[0].held

    def as_dict(self) -> dict:
        """Plain data (JSON): what the job service stores and its checker sends."""
        out = {"gpus": self.gpus, "options": [dict(o.__dict__) for o in self.options]}
        if self.whole is not None:
            out["whole"] = self.whole.as_dict()
        return out

    @classmethod
    def from_dict(cls, d: dict) -> "Demand":
        """The inverse of :meth:`as_dict` (rows stored before joint placement have no shares)."""
        whole = cls.from_dict(d["whole"]) if d.get("whole") else None
        return cls(gpus=d["gpus"], options=tuple(Option(**o) for o in d["options"]), whole=whole)

    def option(self, model: str) -> Option | None:
        for o in self.options:
            if o.model == model:
                return o
        return None

    @property
    def best(self) -> Option:
        return self.options[0]


def device_model(device) -> str:
    """The pool a device belongs to: its model, else its kind."""
    return device.model or device.kind


def accelerator_pools(cluster: Cluster) -> dict[str, list]:
    """Accelerator devices (every kind but ``cpu``) by model, in cluster order."""
    pools: dict[str, list] = {}
    for d in cluster.devices:
        if d.kind != "cpu":
            pools.setdefault(device_model(d), []).append(d)
    return pools


class Estimator:
    """Demands of jobs on one cluster, with every mapping cached by shape.

    Parameters
    ----------
    cluster : Cluster
    mapper : str
        The mapper that estimates durations (``heft`` is fast and within a few percent of
        ``auto`` on the shared graphs; the service uses ``auto``).
    """

    def __init__(self, cluster: Cluster, mapper: str = "heft"):
        self.cluster = cluster
        self.mapper = mapper
        self._map = get_mapper(mapper)
        self.pools = accelerator_pools(cluster)
        if not self.pools:
            raise StreamMapError(f"cluster '{cluster.name}' has no accelerator (non-CPU) devices to grant",
                                 path=cluster.path, hint="tenancy grants GPUs (or MLUs, DCUs...); list some in the cluster file")
        self._shapes: dict[tuple, Cluster] = {}
        self._runs: dict[tuple, tuple[float, float] | None] = {}
        self._busy: dict[tuple, tuple | None] = {}
        self._demands: dict[tuple, Demand] = {}

    def shape_cluster(self, model: str, k: int) -> Cluster:
        """``k`` devices of ``model`` laid out as the real cluster lays them out (cached)."""
        key = (model, k)
        if key not in self._shapes:
            self._shapes[key] = cluster_from_dict(shape_spec(self.cluster, model, k))
        return self._shapes[key]

    def run_estimate(self, key, graph, model: str, k: int) -> tuple[float, float] | None:
        """``(makespan, peak memory per device)`` of ``graph`` on ``k`` x ``model``, or ``None``
        when it cannot run there (a task no such device admits, or memory that does not fit)."""
        ck = (key, model, k)
        if ck not in self._runs:
            r = self._estimate(graph, model, k)
            self._runs[ck] = None if r is None else r[:2]
            self._busy[ck] = None if r is None else r[2]
        return self._runs[ck]

    def busy_seconds(self, key, graph, model: str, share: float = 1.0) -> float | None:
        """Share-weighted busy seconds of ``graph``'s schedule on one ``model`` device:
        ``sum(min(task share, share) x run time)`` over its tasks, the compute it uses when held
        to ``share`` of the device (None where it cannot run)."""
        self.run_estimate(key, graph, model, 1)
        b = self._busy[(key, model, 1)]
        return None if b is None else float((np.minimum(b[0], share) * b[1]).sum())

    def _estimate(self, graph, model, k):
        clus = self.shape_cluster(model, k)
        try:
            cost = CostModel(graph, clus)
            if not math.isfinite(cost.time.min(axis=1).max() if cost.time.size else 0.0):
                return None
            sched = self._map(cost)
        except MappingError:
            return None
        peak = peak_memory(cost, sched.device, sched.start, sched.finish)
        if (peak > cost.capacity * (1 + 1e-9)).any():
            return None
        busy = (cost.share, np.asarray(sched.finish) - np.asarray(sched.start))   # shares, run times
        return float(sched.makespan), float(peak.max() if peak.size else 0.0), busy

    def demand(self, key, graph, gpus: int | None = None, max_gpus: int | None = None,
               share: float | None = None) -> Demand:
        """The demand of ``graph`` (cached under ``key``, e.g. its path and params).

        ``gpus`` states the width; otherwise it is chosen, at most ``max_gpus`` (a tenant's quota).
        ``share`` (0 < share <= 1, the submit's ``--share``) states the fraction of one device the
        job needs (its tasks use at most that; a stated share below 1 sizes the job at width 1);
        without it, a job whose every task has a ``share`` clause below 1 needs the largest of
        them. A job of width 1 that needs less than a whole device gets *fractional* options
        (:func:`streammap.tenancy.packing.fractional_demand`); ``share`` 1 asks for whole
        devices whatever the clauses say.

        Raises
        ------
        StreamMapError
            When no device model of the cluster can run it, or ``gpus`` exceeds every pool.
        """
        dk = (key, gpus, max_gpus)
        if dk + (share,) in self._demands:
            return self._demands[dk + (share,)]
        sizes = {m: len(ds) for m, ds in self.pools.items()}
        if share is not None and not 0 < share <= 1:
            raise StreamMapError(f"a job's share must be in (0, 1], not {share}",
                                 hint="the fraction of one GPU the job needs, e.g. --share 0.25")
        if share is not None and share < 1 and gpus is None:
            gpus = 1                             # a fraction of one device
        if share is not None and share < 1 and gpus != 1:
            raise StreamMapError(f"a job with share {share} asks for {gpus} devices; a share is a fraction of one device",
                                 hint="leave --gpus out (or --gpus 1) with --share, or drop --share for a gang")
        if gpus is not None:
            largest = max(sizes.values())
            if gpus < 1 or gpus > largest:
                raise StreamMapError(f"a job asks for {gpus} devices; the largest pool has {largest}",
                                     hint=f"ask for 1 to {largest} (--gpus {largest} at most), or leave --gpus out "
                                          "to let the service size the gang")
            width = gpus
        else:
            singles = {m: self.run_estimate(key, graph, m, 1) for m in self.pools}
            feasible = {m: r for m, r in singles.items() if r is not None}
            if not feasible:
                raise StreamMapError("no device model of the cluster can run this job",
                                     hint="check its kernels' device clauses and memory against the cluster")
            fastest = min(feasible, key=lambda m: (feasible[m][0], m))
            t1 = feasible[fastest][0]
            width = 1
            for k in WIDTHS[1:]:
                if k > sizes[fastest] or (max_gpus is not None and k > max_gpus):
                    break
                r = self.run_estimate(key, graph, fastest, k)
                if r is not None and t1 > 0 and t1 / (k * r[0]) >= EFFICIENCY:
                    width = k
        options = []
        for m in self.pools:
            if sizes[m] < width:
                continue
            r = self.run_estimate(key, graph, m, width)
            if r is not None:
                options.append(Option(model=m, gpus=width, duration=r[0], memory=r[1]))
        if not options:
            raise StreamMapError(f"no device model of the cluster can run this job on {width} device(s)",
                                 hint="check its kernels' device clauses and memory against the cluster")
        options.sort(key=lambda o: (o.duration, o.model))
        d = Demand(gpus=width, options=tuple(options))
        fraction = job_share(graph, share)
        if width == 1 and fraction < 1.0:
            d = fractional_demand(d, fraction, {o.model: self.busy_seconds(key, graph, o.model, fraction)
                                                for o in options})
        self._demands[dk + (share,)] = d
        return d


def shape_spec(cluster: Cluster, model: str, k: int) -> dict:
    """A cluster-file dict of ``k`` devices of ``model``: as few nodes as the real cluster allows."""
    per_node: dict[str, list] = {}
    for d in cluster.devices:
        if d.kind != "cpu" and device_model(d) == model:
            per_node.setdefault(d.node, []).append(d)
    if not per_node:
        raise StreamMapError(f"no device of model '{model}' in cluster '{cluster.name}'")
    return sub_cluster_spec(cluster, _pack(per_node, k), name=f"{cluster.name}-{model}-x{k}")


def _pack(per_node: dict, k: int) -> list:
    """``k`` devices taken from the fullest nodes first."""
    chosen = []
    for node in sorted(per_node, key=lambda n: -len(per_node[n])):
        chosen.extend(per_node[node][: k - len(chosen)])
        if len(chosen) == k:
            break
    return chosen


def sub_cluster_spec(cluster: Cluster, devices, name: str | None = None) -> dict:
    """The cluster-file dict of ``devices`` (``Device`` records of ``cluster``) and their links.

    The job service compiles each admitted job against the sub-cluster of its granted devices.
    """
    wanted = {d.id if hasattr(d, "id") else d for d in devices}
    spec = cluster.spec.model_dump(mode="json", exclude_none=True)
    nodes = []
    for node in spec["nodes"]:
        # Keep each device's local ordinal (GPU 3 stays GPU 3 when it is the only one granted).
        kinds: dict[str, int] = {}
        for d in node["devices"]:
            pos = kinds.get(d["kind"], 0)
            kinds[d["kind"]] = pos + 1
            d.setdefault("index", pos)
        devs = [d for d in node["devices"] if f"{node['name']}/{d['name']}" in wanted]
        if devs:
            node = dict(node, devices=devs)
            if len(devs) == 1:
                node.pop("link", None)
            nodes.append(node)
    out = {"name": name or f"{cluster.name}-sub", "nodes": nodes}
    if len(nodes) > 1:
        out["network"] = spec.get("network") or {"bandwidth": 10e9, "latency": 20e-6}
    if "memory_oversubscription" in spec:
        out["memory_oversubscription"] = spec["memory_oversubscription"]
    return out


def graph_key(source, params: dict | None = None, entry: str | None = None) -> tuple:
    """A cache key for a job's graph: resolved path, params, entry."""
    return (str(Path(source).resolve()), tuple(sorted((str(k), str(v)) for k, v in (params or {}).items())), entry)
