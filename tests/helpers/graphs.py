"""Random task graphs and a small mixed cluster shared by the mapper tests."""

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
