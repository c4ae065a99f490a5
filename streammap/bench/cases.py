"""Benchmark cases: the shared graphs and clusters at set CCRs, and a seeded random-DAG suite.

A :class:`Case` is a named, lazily built ``(graph, cluster)`` pair. Two sources:

:func:`shared_cases`
    Everything under ``shared/benchmarks`` (its ``README.md`` defines the model): every workflow
    on ``hetero-2x4``, ``mixed-vendors`` and ``small-memory``, every Cholesky graph on
    ``cholesky-node``, each at CCR 0.1, 1 and 10 (10 x 3 x 3 + 4 x 3 = 102 cases, group
    ``"shared"``), plus the HEFT paper's worked example on ``topcuoglu-3p`` as it is (group
    ``"classic"``, kept out of the 102 so their aggregate is the issue's).
:func:`random_cases`
    Random layered DAGs built as in Topcuoglu, Hariri and Wu [1]_, section 5.1 (:func:`random_dag`)
    on random heterogeneous clusters (:func:`random_cluster`), over the paper's parameters: tasks
    ``n``, CCR, shape ``alpha``, out-degree, and heterogeneity ``beta``.
:func:`shared_random_cases`
    The same random DAGs, small (10-50 tasks), on the shared clusters (:func:`shared_random_case`):
    the suite on which plans are compared with the proven optimum (``benchmarks/optimal_gap.py``).

The CCR of a case is :func:`ccr`, exactly as the README defines it; :func:`scale_cluster_for_ccr`
multiplies every bandwidth of a cluster (the network and every node's link) by the one factor
that makes it reach a target.

References
----------
.. [1] H. Topcuoglu, S. Hariri, M.-Y. Wu, "Performance-effective and low-complexity task
   scheduling for heterogeneous computing", IEEE TPDS 13(3), 260-274, 2002.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Sequence

import networkx as nx
import numpy as np

from streammap.cluster.model import Cluster, ClusterSpec, cluster_from_dict, dump_cluster_spec, load_cluster
from streammap.cost.model import CostModel
from streammap.errors import StreamMapError
from streammap.io.importers import load_graph
from streammap.ir import add_task, new_graph

__all__ = ["Case", "ccr", "scale_cluster_for_ccr", "shared_cases", "find_shared", "random_dag", "random_cluster",
           "random_case", "random_cases", "shared_random_case", "shared_random_cases", "WORKFLOW_CLUSTERS", "CHOLESKY_CLUSTERS", "CCRS"]

#: Clusters every workflow runs on, and the one for Cholesky graphs (README of the shared benchmarks).
WORKFLOW_CLUSTERS = ("hetero-2x4", "mixed-vendors", "small-memory")
CHOLESKY_CLUSTERS = ("cholesky-node",)
#: The CCRs of the README's sweep.
CCRS = (0.1, 1.0, 10.0)


@dataclass(eq=False)
class Case:
    """One benchmark case: a graph on a cluster, built when :meth:`load` is called.

    Attributes
    ----------
    name : str
        Unique, readable: ``graph/cluster/ccrX`` or ``rand-n100-a1-o3-b0.5-p8-ccr1-s7``.
    group : str
        ``"shared"``, ``"classic"`` or ``"random"``; the report aggregates per group and CCR.
    graph, cluster : str
        Labels of the graph and the (unscaled) cluster.
    ccr : float or None
        The target CCR (``None``: the graph and cluster as they are).
    params : dict
        Generator parameters (random cases).
    """

    name: str
    group: str
    graph: str
    cluster: str
    ccr: float | None
    loader: Callable[[], tuple[nx.DiGraph, Cluster]] = field(repr=False)
    params: dict = field(default_factory=dict)

    def load(self) -> tuple[nx.DiGraph, Cluster]:
        """``(graph, cluster)``, the cluster already scaled to :attr:`ccr`."""
        return self.loader()


# ---------------------------------------------------------------------- CCR

def _ccr_parts(cost: CostModel) -> tuple[float, float, float]:
    """``(mean edge bytes, mean bandwidth over distinct device pairs, mean task time)``."""
    mean_bytes = float(cost.pred_bytes.mean()) if cost.n_edges else 0.0
    D = cost.n_devices
    if D >= 2:
        off = ~np.eye(D, dtype=bool)
        mean_bw = float(cost.bw[off].mean())
    else:
        mean_bw = math.inf
    mt = cost.mean_time()
    mt = mt[np.isfinite(mt)]
    mean_time = float(mt.mean()) if mt.size else math.nan
    return mean_bytes, mean_bw, mean_time


def ccr(cost: CostModel) -> float:
    """Communication-to-computation ratio, as ``shared/benchmarks/README.md`` defines it.

    ``(mean over edges of bytes / mean bandwidth over distinct device pairs) / (mean over tasks of
    the mean time over devices)``. The pairs are the ordered pairs of distinct devices (the same
    mean as unordered pairs: links are symmetric); a task's mean time is over the devices where it
    can run. Latency does not enter. 0 for a graph without edges or a cluster with fewer than two
    devices (nothing is ever transferred).
    """
    mean_bytes, mean_bw, mean_time = _ccr_parts(cost)
    if mean_bytes == 0.0 or math.isinf(mean_bw):
        return 0.0
    return (mean_bytes / mean_bw) / mean_time


def _scaled_spec(spec: ClusterSpec, factor: float, name: str | None = None) -> ClusterSpec:
    data = spec.model_dump()
    if data.get("network"):
        data["network"]["bandwidth"] *= factor
    for node in data["nodes"]:
        if node.get("link"):
            node["link"]["bandwidth"] *= factor
    if name:
        data["name"] = name
    return ClusterSpec.model_validate(data)


def scale_cluster(cluster: Cluster, factor: float, name: str | None = None) -> Cluster:
    """A copy of ``cluster`` with every bandwidth (network and node links) times ``factor``."""
    spec = _scaled_spec(cluster.spec, factor, name)
    import hashlib  # noqa: PLC0415
    return Cluster(spec, sha256=hashlib.sha256(dump_cluster_spec(spec).encode()).hexdigest())


def scale_cluster_for_ccr(graph: nx.DiGraph, cluster: Cluster, target: float, cost: CostModel | None = None) -> Cluster:
    """The cluster with every bandwidth scaled by one factor so that :func:`ccr` equals ``target``.

    Parameters
    ----------
    graph : networkx.DiGraph
    cluster : Cluster
    target : float
        The CCR to reach (> 0).
    cost : CostModel, optional
        ``CostModel(graph, cluster)`` when the caller has it already.

    Returns
    -------
    Cluster
        Named ``<name>-ccr<target>``; its CCR equals ``target`` up to float rounding.

    Raises
    ------
    StreamMapError
        If the graph has no communication (no edges, all of zero bytes, or a single device), so
        no bandwidth can reach the target.
    """
    if not target > 0:
        raise StreamMapError(f"target CCR must be positive, got {target!r}")
    if cost is None:
        cost = CostModel(graph, cluster)
    now = ccr(cost)
    if not now > 0 or not math.isfinite(now):
        raise StreamMapError(f"cannot scale {cluster.name} to CCR {target:g}: the graph "
                             f"{graph.graph.get('name')} moves no data between devices (CCR {now:g})")
    # CCR is inversely proportional to the mean bandwidth, which one factor scales exactly.
    return scale_cluster(cluster, now / target, name=f"{cluster.name}-ccr{target:g}")


# ---------------------------------------------------------------------- shared benchmarks

def find_shared(path=None) -> Path | None:
    """The ``shared/benchmarks`` folder: ``path`` if given, else ``../shared/benchmarks`` from the
    current directory, else next to this checkout. ``None`` when none exists."""
    if path is not None:
        p = Path(path)
        return p if p.is_dir() else None
    for p in (Path.cwd().parent / "shared" / "benchmarks", Path.cwd() / "shared" / "benchmarks",
              Path(__file__).resolve().parents[2].parent / "shared" / "benchmarks"):
        if (p / "clusters").is_dir():
            return p
    return None


def shared_cases(root, ccrs: Sequence[float] = CCRS, classic: bool = True) -> list[Case]:
    """The cases of the shared benchmark set (see the module docstring).

    Parameters
    ----------
    root : str or Path
        The ``shared/benchmarks`` folder.
    ccrs : sequence of float
        Target CCRs (default 0.1, 1 and 10).
    classic : bool
        Also the HEFT paper's example on ``topcuoglu-3p``, unscaled (group ``"classic"``).

    Returns
    -------
    list of Case
        Workflows x clusters x CCRs, then Cholesky x ``cholesky-node`` x CCRs (group
        ``"shared"``), then the classic example. Graphs are read once and shared by their cases.
    """
    root = Path(root)
    graphs: dict[Path, nx.DiGraph] = {}
    clusters: dict[str, Cluster] = {}

    def graph(p: Path):
        if p not in graphs:
            graphs[p] = load_graph(p)
        return graphs[p]

    def cluster(name: str):
        if name not in clusters:
            clusters[name] = load_cluster(root / "clusters" / f"{name}.yaml")
        return clusters[name]

    def loader(p: Path, cname: str, target: float | None):
        def load():
            g, cl = graph(p), cluster(cname)
            if target is not None:
                cl = scale_cluster_for_ccr(g, cl, target)
            return g, cl
        return load

    out: list[Case] = []
    sets = [(sorted((root / "workflows").glob("*.json")), WORKFLOW_CLUSTERS),
            (sorted((root / "cholesky").glob("*.json")), CHOLESKY_CLUSTERS)]
    for files, cnames in sets:
        for c in ccrs:
            for p in files:
                for cname in cnames:
                    out.append(Case(f"{p.stem}/{cname}/ccr{c:g}", "shared", p.stem, cname, float(c), loader(p, cname, c)))
    ex = root / "classic" / "topcuoglu-10.json"
    if classic and ex.exists() and (root / "clusters" / "topcuoglu-3p.yaml").exists():
        out.append(Case(f"{ex.stem}/topcuoglu-3p", "classic", ex.stem, "topcuoglu-3p", None,
                        loader(ex, "topcuoglu-3p", None)))
    return out


# ---------------------------------------------------------------------- random DAGs

def _levels(n: int, alpha: float, rng: np.random.Generator) -> np.ndarray:
    """Level widths: height uniform with mean sqrt(n)/alpha (at least 2 levels when n >= 2), widths
    uniform with mean alpha*sqrt(n), rescaled to sum to n (every level non-empty)."""
    mean_h = math.sqrt(n) / alpha
    height = int(round(rng.uniform(0.5, 1.5) * mean_h)) if mean_h > 1 else 1
    height = min(max(2, height), n)           # at least two levels: a graph with edges
    raw = rng.uniform(0.5, 1.5, height) * alpha * math.sqrt(n)
    widths = np.maximum(1, np.floor(raw / raw.sum() * n)).astype(np.int64)
    while widths.sum() < n:                    # hand out the remainder to the widest shortfalls
        widths[int(np.argmax(raw / raw.sum() * n - widths))] += 1
    while widths.sum() > n:
        widths[int(np.argmax(widths))] -= 1
    return widths


def random_dag(n: int, alpha: float = 1.0, out_degree: int = 3, ccr: float = 1.0, beta: float = 0.5,
               seed: int = 0, n_models: int = 8, w_dag: float | None = None,
               bandwidth: float = 10e9) -> nx.DiGraph:
    """A random task graph built like the HEFT paper's generator ([1]_, section 5.1).

    * **Shape.** The height (number of levels) is drawn uniformly with mean ``sqrt(n) / alpha``
      and each level's width uniformly with mean ``alpha * sqrt(n)``; widths are rescaled so that
      the graph has exactly ``n`` tasks. Small ``alpha``: long and thin; large: short and wide.
    * **Edges.** Every task except those of the last level gets ``out_degree`` children (fewer when
      fewer tasks follow it), each from the next level with probability 3/4, else from any later
      level; a task of a later level left without a parent gets one from the level above. Edges
      only go to later levels, so the graph is acyclic.
    * **Computation.** The mean task time ``w_dag`` (drawn uniformly in [1 ms, 100 ms] when not
      given); each task's mean ``w_i`` uniform in ``[0, 2 w_dag]``; its time on device model j
      uniform in ``[w_i (1 - beta/2), w_i (1 + beta/2)]`` (``beta`` in [0, 2): heterogeneity).
      Times are node ``times`` keyed by the models ``"P0"`` ... ``"P{n_models-1}"`` that
      :func:`random_cluster` gives its devices.
    * **Communication.** Edge bytes uniform in ``[0, 2 ccr w_dag bandwidth]``, so the CCR is about
      ``ccr`` on links of ``bandwidth`` bytes/s; :func:`random_case` then scales the cluster so
      that :func:`ccr` is exactly ``ccr``. Task ``mem`` is the README default (inputs + output).

    Deterministic: the same arguments give the same graph.

    Returns
    -------
    networkx.DiGraph
        The IR (``kind="workflow"``), tasks ``t0`` ... ``t{n-1}`` in level order.
    """
    if n < 1:
        raise ValueError("n must be at least 1")
    rng = np.random.default_rng([seed, n, int(round(alpha * 1000)), int(out_degree),
                                 int(round(ccr * 1000)), int(round(beta * 1000))])
    widths = _levels(n, alpha, rng)
    starts = np.concatenate(([0], np.cumsum(widths)))
    H = widths.size
    if w_dag is None:
        w_dag = float(rng.uniform(1e-3, 100e-3))
    w = rng.uniform(0.0, 2.0 * w_dag, n)
    lo = np.maximum(0.0, 1.0 - beta / 2.0)
    times = rng.uniform(w[:, None] * lo, w[:, None] * (1.0 + beta / 2.0), (n, n_models))
    models = [f"P{j}" for j in range(n_models)]

    src_l, dst_l = [], []
    has_parent = np.zeros(n, dtype=bool)
    for lev in range(H - 1):
        a, b = starts[lev], starts[lev + 1]
        nxt_a, nxt_b = starts[lev + 1], starts[lev + 2]
        later = n - nxt_a
        k = min(int(out_degree), later)
        if k <= 0:
            continue
        for t in range(a, b):
            near = rng.random(k) < 0.75
            cand = np.where(near, rng.integers(nxt_a, nxt_b, k), rng.integers(nxt_a, n, k))
            cand = np.unique(cand)
            # Top up duplicates from all later tasks so that the out-degree is k.
            while cand.size < k:
                cand = np.unique(np.concatenate((cand, rng.integers(nxt_a, n, k - cand.size))))
            src_l.append(np.full(cand.size, t))
            dst_l.append(cand)
            has_parent[cand] = True
    for lev in range(1, H):                    # every task past the first level has a parent
        a, b = starts[lev], starts[lev + 1]
        orphans = np.flatnonzero(~has_parent[a:b]) + a
        if orphans.size:
            src_l.append(rng.integers(starts[lev - 1], a, orphans.size))
            dst_l.append(orphans)
    src = np.concatenate(src_l) if src_l else np.empty(0, dtype=np.int64)
    dst = np.concatenate(dst_l) if dst_l else np.empty(0, dtype=np.int64)
    nbytes = rng.uniform(0.0, 2.0 * ccr * w_dag * bandwidth, src.size)

    name = f"rand-n{n}-a{alpha:g}-o{out_degree}-b{beta:g}-s{seed}"
    g = new_graph(name, kind="workflow", source=f"<{name}>")
    for i in range(n):
        add_task(g, f"t{i}", "k", times=dict(zip(models, times[i].tolist())))
    g.add_edges_from((f"t{s}", f"t{d}", {"bytes": b}) for s, d, b in zip(src.tolist(), dst.tolist(), nbytes.tolist()))
    g.graph.update(alpha=alpha, out_degree=out_degree, beta=beta, ccr=ccr, seed=seed, w_dag=w_dag)
    return g


def random_cluster(n_devices: int, n_models: int | None = None, per_node: int = 4, memory=None,
                   link_bandwidth: float = 40e9, network_bandwidth: float = 10e9, latency: float = 0.0,
                   name: str | None = None) -> Cluster:
    """``n_devices`` heterogeneous devices on nodes of ``per_node``, for :func:`random_dag` graphs.

    Device i has model ``P{i mod n_models}`` (``n_models`` defaults to ``n_devices``: every device
    different, as the HEFT paper's processors). Devices of one node share a link of
    ``link_bandwidth``; nodes talk over a network of ``network_bandwidth``. ``memory`` (bytes or a
    string such as ``"16GiB"``) is unlimited when ``None``.
    """
    n_models = n_devices if n_models is None else n_models
    nodes = []
    for k in range(math.ceil(n_devices / per_node)):
        devs = []
        for i in range(k * per_node, min(n_devices, (k + 1) * per_node)):
            d = {"name": f"d{i}", "kind": "gpu", "model": f"P{i % n_models}"}
            if memory is not None:
                d["memory"] = memory
            devs.append(d)
        node = {"name": f"node{k}", "devices": devs}
        if len(devs) > 1:
            node["link"] = {"bandwidth": link_bandwidth, "latency": latency}
        nodes.append(node)
    spec = {"name": name or f"rand-p{n_devices}", "nodes": nodes}
    if len(nodes) > 1:
        spec["network"] = {"bandwidth": network_bandwidth, "latency": latency}
    return cluster_from_dict(spec)


def random_case(n: int, alpha: float = 1.0, out_degree: int = 3, ccr: float = 1.0, beta: float = 0.5,
                devices: int = 8, seed: int = 0, n_models: int | None = None, memory=None) -> Case:
    """A :class:`Case` of a :func:`random_dag` on a :func:`random_cluster`, scaled to CCR ``ccr``."""
    models = devices if n_models is None else n_models

    def load():
        g = random_dag(n, alpha, out_degree, ccr, beta, seed, n_models=models)
        cl = random_cluster(devices, models, memory=memory)
        return g, scale_cluster_for_ccr(g, cl, ccr)

    name = f"rand-n{n}-a{alpha:g}-o{out_degree}-b{beta:g}-p{devices}-ccr{ccr:g}-s{seed}"
    return Case(name, "random", f"rand-n{n}", f"rand-p{devices}", float(ccr), load,
                params=dict(n=n, alpha=alpha, out_degree=out_degree, beta=beta, devices=devices, seed=seed))


def random_cases(seed: int = 0, quick: bool = False, sizes: Sequence[int] | None = None,
                 large: Sequence[int] | None = None, ccrs: Sequence[float] = CCRS) -> list[Case]:
    """The seeded random suite.

    Full: ``n`` in 20, 40, 60, 80, 100 x CCR x ``alpha`` in 0.5, 1, 2 x ``beta`` in 0.1, 0.5, 1.0
    (135 cases), each with an out-degree in 1..5 and 4, 8 or 16 devices drawn from ``seed``; plus
    ``n`` = 1000 and 5000 x CCR (``alpha`` 1, out-degree 3, ``beta`` 0.5, 16 devices).
    Quick (``quick=True``): ``n`` in 20, 60, 100 x CCR x ``alpha`` 0.5, 2 x ``beta`` 0.1, 1.0
    (36 cases) and ``n`` = 1000 x CCR.

    Parameters
    ----------
    seed : int
        Seeds the drawn parameters and every graph (case k gets graph seed ``seed * 100003 + k``).
    sizes, large : sequence of int, optional
        Override the small and the large task counts.
    """
    rng = np.random.default_rng(seed)
    if quick:
        sizes = (20, 60, 100) if sizes is None else sizes
        alphas, betas = (0.5, 2.0), (0.1, 1.0)
        large = (1000,) if large is None else large
    else:
        sizes = (20, 40, 60, 80, 100) if sizes is None else sizes
        alphas, betas = (0.5, 1.0, 2.0), (0.1, 0.5, 1.0)
        large = (1000, 5000) if large is None else large
    out: list[Case] = []
    k = 0
    for c in ccrs:
        for n in sizes:
            for a in alphas:
                for b in betas:
                    od = int(rng.integers(1, 6))
                    p = int(rng.choice([4, 8, 16]))
                    out.append(random_case(n, a, od, c, b, devices=p, seed=seed * 100003 + k))
                    k += 1
        for n in large:
            out.append(random_case(n, 1.0, 3, c, 0.5, devices=16, seed=seed * 100003 + k))
            k += 1
    return out


def shared_random_case(n: int, cluster: Cluster, ccr: float = 1.0, seed: int = 0, alpha: float = 1.0,
                       out_degree: int = 3, beta: float = 0.5, cluster_label: str | None = None) -> Case:
    """A :class:`Case` of a :func:`random_dag` on one of the shared clusters, scaled to CCR ``ccr``.

    The DAG's device models ``P0``, ``P1``, ... become the cluster's models in the order their
    devices come, and each model's times are divided by its ``speed`` (so a faster device model
    is faster, by its speed, up to the ``beta`` heterogeneity). Edge bytes are drawn so that the
    mean edge is a sixty-fourth of the smallest finite device memory (10 GB/s x mean task time x CCR
    on clusters without memory sizes): every task fits anywhere, and memory binds only where many
    outputs wait on one device at once.
    """
    models: dict[str, float] = {}
    for d in cluster.devices:
        models.setdefault(d.model or d.kind, d.speed)
    label = cluster_label or cluster.name

    def load():
        rng = np.random.default_rng([seed, n, int(round(ccr * 1000)), 17])
        w_dag = float(rng.uniform(1e-3, 100e-3))
        caps = [d.memory for d in cluster.devices if math.isfinite(d.memory)]
        bw = (min(caps) / 64) / (ccr * w_dag) if caps else 10e9
        g = random_dag(n, alpha, out_degree, ccr, beta, seed, n_models=len(models), w_dag=w_dag, bandwidth=bw)
        names = list(models)
        for t in g.nodes:
            times = g.nodes[t]["times"]
            g.nodes[t]["times"] = {names[j]: times[f"P{j}"] / models[names[j]] for j in range(len(names))}
        return g, scale_cluster_for_ccr(g, cluster, ccr)

    name = f"rand-n{n}-a{alpha:g}-o{out_degree}-b{beta:g}/{label}/ccr{ccr:g}-s{seed}"
    return Case(name, "random-shared", f"rand-n{n}", label, float(ccr), load,
                params=dict(n=n, alpha=alpha, out_degree=out_degree, beta=beta, seed=seed))


def shared_random_cases(root, sizes: Sequence[int] = (10, 20, 30, 40, 50), ccrs: Sequence[float] = CCRS,
                        seeds: Sequence[int] = (0,), clusters: Sequence[str] = WORKFLOW_CLUSTERS) -> list[Case]:
    """:func:`shared_random_case` for every size x CCR x seed x shared cluster (``alpha`` 1,
    out-degree 3, ``beta`` 0.5, the HEFT paper's middle values).

    Parameters
    ----------
    root : str or Path
        The ``shared/benchmarks`` folder (its ``clusters/``).
    """
    root = Path(root)
    loaded = {c: load_cluster(root / "clusters" / f"{c}.yaml") for c in clusters}
    return [shared_random_case(n, loaded[c], ccr, seed, cluster_label=c)
            for ccr in ccrs for n in sizes for seed in seeds for c in clusters]


def iter_loaded(cases: Sequence[Case]) -> Iterator[tuple[Case, nx.DiGraph, Cluster]]:
    """``(case, graph, cluster)`` for each case, loading one at a time."""
    for c in cases:
        g, cl = c.load()
        yield c, g, cl
