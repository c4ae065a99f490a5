"""Task times are kept per device class: what every reader sees is still the time per device.

A cost model holds one column per class of devices that every estimate treats alike, and a
device -> class index. A user (and every mapper) relies on three things: the time of a task on a
device is what that device alone would give it; every way of reading times (the dense matrix,
a task's row, an assignment's times, the per-task mean and minimum) agrees with the others; and
mapping a graph with HEFT never builds the task x device matrix.
"""

import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streammap.bench.cases import random_cluster, random_dag
from streammap.cluster.model import cluster_from_dict
from streammap.cost.model import CostModel, lower_bound
from streammap.errors import MappingError
from streammap.ir import add_task, new_graph
from streammap.mappers.heft import check_placeable, heft

#: Devices a generated cluster draws from, with repeats: equal specs make a class.
DEVICE_POOL = [
    {"kind": "gpu", "vendor": "nvidia", "model": "A100", "memory": "80GiB", "flops": "10 TFLOP/s",
     "mem_bandwidth": "1000 GB/s", "speed": 2.0},
    {"kind": "gpu", "vendor": "nvidia", "model": "V100", "memory": "32GiB", "flops": "5 TFLOP/s",
     "mem_bandwidth": "500 GB/s", "speed": 1.0},
    {"kind": "gpu", "vendor": "amd", "model": "MI100", "memory": "32GiB", "flops": "5 TFLOP/s",
     "mem_bandwidth": "500 GB/s", "speed": 1.0},
    {"kind": "cpu", "memory": "64GiB", "flops": "1 TFLOP/s", "mem_bandwidth": "100 GB/s", "speed": 0.25},
    {"kind": "cpu", "memory": "16GiB", "flops": "1 TFLOP/s", "mem_bandwidth": "100 GB/s", "speed": 0.25},
]


def cluster_of(picks: list[int], per_node: int = 3):
    """A cluster of the pool's devices ``picks`` (repeats allowed), ``per_node`` to a node."""
    nodes = []
    for k in range(0, len(picks), per_node):
        devs = [dict(DEVICE_POOL[p], name=f"d{k + j}") for j, p in enumerate(picks[k:k + per_node])]
        nodes.append({"name": f"n{k}", "link": {"bandwidth": "100 GB/s", "latency": "2us"}, "devices": devs})
    return cluster_from_dict({"name": "gen", "network": {"bandwidth": "10 GB/s", "latency": "10us"},
                              "nodes": nodes})


def mixed_tasks(seed: int, n: int = 40):
    """Tasks of every kind of estimate: runtime, times by model or kind, roofline clauses, and
    device constraints (some tasks can only run on GPUs, or on CPUs)."""
    rng = np.random.default_rng(seed)
    g = new_graph("mixed", kind="workflow", source="mixed.json")
    for i in range(n):
        kind = i % 4
        device = ("any", "gpu", "cpu")[int(rng.integers(3))]
        if kind == 0:
            add_task(g, f"t{i}", "k", runtime=float(rng.uniform(0.1, 2.0)), device=device)
        elif kind == 1:
            add_task(g, f"t{i}", "k", times={"A100": float(rng.uniform(0.1, 1)), "cpu": float(rng.uniform(1, 3))},
                     runtime=float(rng.uniform(0.1, 2.0)), device=device)
        elif kind == 2:
            add_task(g, f"t{i}", "k", times={"V100": float(rng.uniform(0.1, 1))}, device=device)
        else:
            add_task(g, f"t{i}", "k", flops=float(rng.uniform(1e9, 1e12)), bytes=float(rng.uniform(1e6, 1e9)),
                     device=device)
        if i:
            g.add_edge(f"t{int(rng.integers(i))}", f"t{i}", bytes=float(rng.uniform(1e3, 1e8)))
    return g


@settings(max_examples=25, deadline=None)
@given(picks=st.lists(st.integers(0, len(DEVICE_POOL) - 1), min_size=1, max_size=10), seed=st.integers(0, 50))
def test_a_tasks_time_on_a_device_is_what_that_device_alone_gives_it(picks, seed):
    graph, cluster = mixed_tasks(seed), cluster_of(picks)
    cost = CostModel(graph, cluster)
    # One column per distinct device, memory aside (it changes no estimate).
    timed_alike = {tuple(sorted((k, v) for k, v in DEVICE_POOL[p].items() if k != "memory")) for p in picks}
    assert cost.class_time.shape[1] == len(timed_alike)
    rows = cost.time_rows()
    for d, device in enumerate(cluster.devices):
        alone = CostModel(graph, cluster_of([picks[d]])).time[:, 0]
        np.testing.assert_array_equal(cost.class_time[:, cost.device_class[d]], alone)
        np.testing.assert_array_equal([rows[t][d] for t in range(cost.n_tasks)], alone)
    np.testing.assert_array_equal(cost.time, np.stack([rows[t] for t in range(cost.n_tasks)]))


@pytest.mark.parametrize("devices, n_models", [(16, 3), (64, 8), (40, None)])
def test_every_reading_of_the_times_agrees_with_the_dense_matrix(devices, n_models):
    graph = random_dag(300, seed=devices, n_models=8)
    cost = CostModel(graph, random_cluster(devices, n_models=n_models))
    dense = cost.time_rows()
    assert not isinstance(dense, np.ndarray)                      # rows gathered from the classes
    time = cost.time                                              # built now, on demand
    assert cost.time_rows() is time
    assigned = np.random.default_rng(0).integers(devices, size=cost.n_tasks)
    np.testing.assert_array_equal(cost.times_on(assigned), time[np.arange(cost.n_tasks), assigned])
    np.testing.assert_array_equal(cost.min_time(), time.min(axis=1))
    allowed = np.isfinite(time)                                   # the mean is over allowed devices
    expected_mean = np.where(allowed, time, 0.0).sum(axis=1) / allowed.sum(axis=1)
    np.testing.assert_allclose(cost.mean_time(), expected_mean, rtol=1e-12)
    need = np.linspace(1.0, 2.0, cost.n_tasks)
    np.testing.assert_allclose(cost.allowed_anywhere(need), need @ np.isfinite(time), rtol=1e-12)


def test_a_view_with_its_own_times_reads_them_and_not_the_classes():
    cost = CostModel(random_dag(50, seed=1, n_models=4), random_cluster(8, n_models=4))
    slowed = cost.time.copy()
    slowed[:, 3] *= 10                                            # one device of a class is slower
    view = cost.with_times(slowed)
    np.testing.assert_array_equal(view.times_on(np.full(50, 3)), slowed[:, 3])
    assert view.time_rows() is slowed
    np.testing.assert_array_equal(view.min_time(), slowed.min(axis=1))
    np.testing.assert_array_equal(view.restrict([3, 0]).time, slowed[:, [3, 0]])


def test_a_task_too_big_for_every_device_of_its_classes_is_refused_by_name():
    graph = new_graph("big", kind="workflow", source="big.json")
    add_task(graph, "small", "k", runtime=1.0)
    add_task(graph, "huge", "k", runtime=1.0, mem=100 * 2**30, device="gpu")
    graph.add_edge("small", "huge", bytes=1.0)
    with pytest.raises(MappingError, match=r"task huge .* needs 100 GiB .* largest device it may run on, n0/d0, has 80 GiB"):
        check_placeable(CostModel(graph, cluster_of([0, 1, 3, 0])))


def test_heft_maps_a_graph_on_many_devices_without_a_task_by_device_matrix():
    # 6,000 tasks x 512 devices would be 23 MiB of float64 times; 8 classes are 375 KiB. (Before
    # the classes, HEFT and the bound allocated 27 MiB here; now about 2.)
    cost = CostModel(random_dag(6000, seed=2, n_models=8), random_cluster(512, n_models=8))
    dense_bytes = cost.n_tasks * cost.n_devices * 8
    tracemalloc.start()
    try:
        schedule = heft(cost)
        lower_bound(cost)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < dense_bytes / 4
    assert np.isfinite(schedule.makespan) and schedule.makespan >= lower_bound(cost)
