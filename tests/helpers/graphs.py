"""Task graphs (random, Montage-shaped) and small clusters (mixed, equal processors, nodes of given models) shared by the mapper and bound tests."""

import numpy as np

from streammap.cluster.model import cluster_from_dict
from streammap.ir import add_task, new_graph


def random_graph(n=300, seed=0, gpu_only=0.3, cpu_only=0.1):
    """A random layered DAG; some tasks pinned to GPUs, some to CPUs."""
    rng = np.random.default_rng(seed)
    g = new_graph("rand", kind="workflow", source="rand.json")
    width = max(2, int(np.sqrt(n)))
    for i in range(n):
        r = rng.random()
        device = "gpu" if r < gpu_only else ("cpu" if r < gpu_only + cpu_only else "any")
        add_task(g, f"t{i}", "k", runtime=float(rng.uniform(0.1, 2.0)), device=device,
                 mem=float(rng.uniform(1, 3) * 2**30), out=float(rng.uniform(0.1, 1) * 2**30))
        if i >= width:
            for p in set(rng.integers(max(0, i - 3 * width), i - 1, size=int(rng.integers(1, 4))).tolist()):
                g.add_edge(f"t{p}", f"t{i}", bytes=float(rng.uniform(0.1, 1.0) * 2**30))
    return g


def mixed_cluster(memory="8GiB", network=("12.5 GB/s", "10us"), link=("100 GB/s", "3us")):
    """Two nodes of two GPUs (speed 1 on the first, 2 on the second) and a CPU (0.25);
    ``network`` and ``link``: (bandwidth, latency) between and inside the nodes."""
    return cluster_from_dict({
        "name": "mixed", "network": {"bandwidth": network[0], "latency": network[1]},
        "nodes": [{"name": f"n{k}", "link": {"bandwidth": link[0], "latency": link[1]},
                   "devices": [{"name": "gpu0", "kind": "gpu", "memory": memory, "speed": 1.0 + k},
                               {"name": "gpu1", "kind": "gpu", "memory": memory, "speed": 1.0 + k},
                               {"name": "cpu", "kind": "cpu", "memory": memory, "speed": 0.25}]}
                  for k in range(2)]})

def processors(n=2, bandwidth=1.0):
    """``n`` equal processors on one node, joined by ``bandwidth`` bytes/s, no latency."""
    return cluster_from_dict({
        "name": "procs", "network": {"bandwidth": bandwidth, "latency": 0},
        "nodes": [{"name": "n0", "link": {"bandwidth": bandwidth, "latency": 0},
                   "devices": [{"name": f"p{i}", "kind": "cpu", "model": "P"} for i in range(n)]}]})


def montage_like(n=6, nbytes=400.0, seed=0):
    """A small Montage: ``n`` projections (8-12 s), a difference fit (1 s) on each neighbouring
    pair, a concatenating fit and a background model (0.5 s each, small outputs), one background
    correction per projection (2 s, reading it and the model) and a co-add (1 s) of every corrected
    image; projections and corrected images are ``nbytes`` each."""
    rng = np.random.default_rng(seed)
    g = new_graph("montage", kind="workflow")
    add_task(g, "concat", "concat", times={"P": 0.5})
    add_task(g, "model", "model", times={"P": 0.5})
    add_task(g, "add", "add", times={"P": 1.0})
    g.add_edge("concat", "model", bytes=1.0)
    for i in range(n):
        add_task(g, f"proj{i}", "project", times={"P": float(rng.uniform(8.0, 12.0))})
        add_task(g, f"bg{i}", "background", times={"P": 2.0})
        g.add_edge(f"proj{i}", f"bg{i}", bytes=nbytes)
        g.add_edge("model", f"bg{i}", bytes=1.0)
        g.add_edge(f"bg{i}", "add", bytes=nbytes)
    for i in range(n - 1):
        add_task(g, f"diff{i}", "diff", times={"P": 1.0})
        g.add_edge(f"proj{i}", f"diff{i}", bytes=nbytes)
        g.add_edge(f"proj{i + 1}", f"diff{i}", bytes=nbytes)
        g.add_edge(f"diff{i}", "concat", bytes=1.0)
    return g


def node_cluster(nodes, network=(1.0, 0.0)):
    """``nodes``: one ``(models, bandwidth, latency)`` per node, its devices of those models;
    ``network``: (bandwidth, latency) between nodes."""
    return cluster_from_dict({
        "name": "c", "network": {"bandwidth": network[0], "latency": network[1]},
        "nodes": [{"name": f"n{k}", "link": {"bandwidth": bw, "latency": lat},
                   "devices": [{"name": f"d{j}", "kind": "gpu", "model": m} for j, m in enumerate(models)]}
                  for k, (models, bw, lat) in enumerate(nodes)]})


def timed_graph(times, edges, shares=None, mem=None):
    """Tasks t0, t1, ... with ``times[i] = {model: seconds}`` (a model left out: not eligible there);
    ``edges`` as ``(u, v, bytes)``; ``shares[i]``, the task's ``share`` clause (none: whole devices);
    ``mem[i]``, its ``mem`` clause in bytes (none: no footprint)."""
    g = new_graph("t", kind="workflow", source="<t>")
    for i, t in enumerate(times):
        clauses = {k: v[i] for k, v in (("share", shares), ("mem", mem)) if v is not None}
        add_task(g, f"t{i}", "k", times=t, **clauses)
    for u, v, b in edges:
        g.add_edge(f"t{u}", f"t{v}", bytes=b)
    return g


def random_model_times(rng):
    """A task's times on models A and B (0.5-3 s each); 15% of tasks run on B only, 15% on A only."""
    t = {"A": float(rng.uniform(0.5, 3.0)), "B": float(rng.uniform(0.5, 3.0))}
    r = rng.random()
    if r < 0.15:
        del t["A"]
    elif r < 0.3:
        del t["B"]
    return t
