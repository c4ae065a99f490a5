"""The optimum of a tiny graph by enumeration: every assignment x every topological order.

For checking exact mappers and lower bounds on graphs of a handful of tasks (D^T assignments, each
with every distinct set of device run orders that some topological order gives).
"""

import itertools

import networkx as nx
import numpy as np

from streammap.mappers.schedule import fits, peak_memory, simulate


def exhaustive_optimum(cost, memory: bool = True) -> float:
    """The least makespan of any plan of ``cost`` (memory-valid ones only when ``memory``)."""
    T, D = cost.n_tasks, cost.n_devices
    dag = nx.DiGraph()
    dag.add_nodes_from(range(T))
    dag.add_edges_from(zip(cost.pred_idx.tolist(), cost.pred_dst.tolist()))
    orders = list(nx.all_topological_sorts(dag))
    best = np.inf
    for dev in itertools.product(range(D), repeat=T):
        dev = np.array(dev)
        if not np.isfinite(cost.time[np.arange(T), dev]).all():
            continue
        # A plan is the devices' run orders, and many topological orders give the same ones (tasks
        # on different devices interleaved differently): each distinct plan is simulated once.
        plans = {tuple(tuple(t for t in o if dev[t] == d) for d in range(D)) for o in orders}
        for plan in sorted(plans):
            s = simulate(cost, dev, [list(seq) for seq in plan])
            if s.makespan < best and (not memory or fits(peak_memory(cost, s.device, s.start, s.finish),
                                                          cost.capacity).all()):
                best = s.makespan
    return best
