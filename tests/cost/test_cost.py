"""The cost model: times in the documented order of preference, sizes, transfers, lower bound."""

import itertools
import math

import numpy as np
import pytest

from streammap.cluster.model import cluster_from_dict, load_cluster
from streammap.cost.model import (
    DEFAULT_LAUNCH_OVERHEAD,
    DEVICE_AXES,
    LAUNCH_OVERHEAD,
    CostModel,
    area_bound,
    critical_path_bound,
    fork_join_bound,
    lower_bound,
)
from streammap.errors import StreamMapError
from streammap.io.importers import load_graph
from streammap.ir import add_task, new_graph

GPU = {"name": "gpu0", "kind": "gpu", "vendor": "nvidia", "model": "A100", "memory": "80GiB",
       "flops": "10 TFLOP/s", "mem_bandwidth": "1000 GB/s", "speed": 2.0}
CPU = {"name": "cpu", "kind": "cpu", "memory": "64GiB", "flops": "1 TFLOP/s", "mem_bandwidth": "100 GB/s"}


def two_nodes(oversub=1.0):
    return cluster_from_dict({
        "name": "t", "network": {"bandwidth": "10 GB/s", "latency": "10us"}, "memory_oversubscription": oversub,
        "nodes": [
            {"name": "a", "link": {"bandwidth": "100 GB/s", "latency": "2us"},
             "devices": [GPU, dict(GPU, name="gpu1"), CPU]},
            {"name": "b", "devices": [dict(GPU, name="gpu0", model="V100", speed=1.0, flops="5 TFLOP/s",
                                           mem_bandwidth="500 GB/s")]}]})


def program(*tasks, edges=()):
    g = new_graph("p", kind="program", source="p.py")
    for tid, attrs in tasks:
        add_task(g, tid, attrs.pop("kernel", tid), **attrs)
    for u, v, b in edges:
        g.add_edge(u, v, bytes=b)
    return g


def test_roofline_from_clauses_with_launch_overhead():
    g = program(("compute", {"flops": 1e12, "bytes": 1e9}), ("memory", {"bytes": 1e11}))
    cost = CostModel(g, two_nodes())
    gpu, cpu, v100 = 0, 2, 3
    launch_gpu, launch_cpu = DEFAULT_LAUNCH_OVERHEAD, LAUNCH_OVERHEAD["cpu"]
    assert cost.time[0, gpu] == pytest.approx(max(1e12 / 10e12, 1e9 / 1000e9) + launch_gpu)
    assert cost.time[0, cpu] == pytest.approx(max(1e12 / 1e12, 1e9 / 100e9) + launch_cpu)
    assert cost.time[0, v100] == pytest.approx(1e12 / 5e12 + launch_gpu)
    assert cost.time[1, gpu] == pytest.approx(1e11 / 1000e9 + launch_gpu)       # memory-bound
    assert cost.time[1, cpu] == pytest.approx(1e11 / 100e9 + launch_cpu)
    assert cost.source == ["clauses", "clauses"]


def test_times_by_model_then_kind_then_runtime_over_speed():
    g = program(("m", {"times": {"A100": 1.0, "gpu": 7.0}}),
                ("k", {"times": {"gpu": 3.0, "cpu": 9.0}}),
                ("r", {"runtime": 4.0}),
                ("mixed", {"times": {"V100": 5.0}, "runtime": 8.0}),
                ("missing", {"times": {"V100": 5.0}}),
                ("nothing", {}))
    cost = CostModel(g, two_nodes())
    # devices: a/gpu0 (A100, speed 2), a/gpu1 (A100, speed 2), a/cpu (speed 1), b/gpu0 (V100, speed 1)
    np.testing.assert_array_equal(cost.time[0], [1.0, 1.0, math.inf, 7.0])
    np.testing.assert_array_equal(cost.time[1], [3.0, 3.0, 9.0, 3.0])
    np.testing.assert_array_equal(cost.time[2], [2.0, 2.0, 4.0, 4.0])
    np.testing.assert_array_equal(cost.time[3], [4.0, 4.0, 8.0, 5.0])
    np.testing.assert_array_equal(cost.time[4], [math.inf, math.inf, math.inf, 5.0])
    assert cost.time[5, 2] == LAUNCH_OVERHEAD["cpu"] and cost.time[5, 0] == DEFAULT_LAUNCH_OVERHEAD
    assert cost.source == ["times", "times", "runtime", "times", "times", "default"]


def test_device_constraint_makes_other_devices_infinite():
    g = program(("g", {"runtime": 1.0, "device": "gpu"}), ("c", {"runtime": 1.0, "device": "cpu"}),
                ("v", {"flops": 1e9, "device": "V100"}), ("any", {"runtime": 1.0}))
    cost = CostModel(g, two_nodes())
    assert np.isinf(cost.time[0, 2]) and np.isfinite(cost.time[0, [0, 1, 3]]).all()
    assert np.isfinite(cost.time[1]).tolist() == [False, False, True, False]
    assert np.isfinite(cost.time[2]).tolist() == [False, False, False, True]
    assert np.isfinite(cost.time[3]).all()


def test_history_hook_comes_first_and_is_asked_per_device_model():
    calls = []

    def history(kernel, model, attrs):
        calls.append((kernel, model))
        return 0.5 if (kernel == "fft" and model == "A100") else None

    g = program(("x", {"kernel": "fft", "flops": 1e12}), ("y", {"kernel": "other", "runtime": 2.0}))
    cost = CostModel(g, two_nodes(), history=history)
    assert cost.time[0, 0] == cost.time[0, 1] == 0.5
    assert cost.time[0, 3] == pytest.approx(1e12 / 5e12 + DEFAULT_LAUNCH_OVERHEAD)      # falls back to clauses
    assert cost.source == ["history", "runtime"]
    assert sorted(set(calls)) == [("fft", "A100"), ("fft", "V100"), ("fft", "cpu"),
                                  ("other", "A100"), ("other", "V100"), ("other", "cpu")]
    assert len(calls) == 6                                       # once per task and model


def test_memory_defaults_and_outputs():
    g = program(("a", {"out": 100.0}), ("b", {"mem": 7.0}), ("c", {}), ("sink", {"out": 50.0}),
                edges=[("a", "b", 100.0), ("a", "c", 100.0), ("b", "sink", 30.0), ("c", "sink", 20.0)])
    cost = CostModel(g, two_nodes())
    i = cost.pos
    assert cost.mem[i["a"]] == 100.0                 # no inputs + out
    assert cost.mem[i["b"]] == 7.0                   # explicit
    assert cost.mem[i["c"]] == 100.0 + 20.0          # inputs + largest outgoing edge
    assert cost.mem[i["sink"]] == 50.0 + 50.0        # inputs 30 + 20, out 50
    assert cost.out[i["a"]] == 100.0 and cost.out[i["c"]] == 20.0
    assert cost.out[i["sink"]] == 0.0                # nobody consumes it: leaves at once


def test_capacity_and_csr_arrays():
    g = program(("a", {}), ("b", {}), ("c", {}), edges=[("a", "c", 3.0), ("b", "c", 4.0), ("a", "b", 1.0)])
    cost = CostModel(g, two_nodes(oversub=1.5))
    assert cost.capacity[0] == 80 * 2**30 * 1.5 and cost.capacity[2] == 64 * 2**30 * 1.5
    c = cost.pos["c"]
    preds = cost.pred_idx[cost.pred_ptr[c]:cost.pred_ptr[c + 1]]
    assert [cost.tasks[p] for p in preds] == ["a", "b"]
    assert cost.pred_bytes[cost.pred_ptr[c]:cost.pred_ptr[c + 1]].tolist() == [3.0, 4.0]
    a = cost.pos["a"]
    assert [cost.tasks[s] for s in cost.succ_idx[cost.succ_ptr[a]:cost.succ_ptr[a + 1]]] == ["b", "c"]
    assert [cost.tasks[t] for t in cost.topo] == ["a", "b", "c"]


def test_transfer_costs_same_device_same_node_and_across_nodes():
    cost = CostModel(program(("a", {})), two_nodes())
    b = 1e9
    assert cost.comm(b, 0, 0) == 0.0
    assert cost.comm(b, 0, 1) == pytest.approx(2e-6 + b / 100e9)        # node link
    assert cost.comm(b, 0, 3) == pytest.approx(10e-6 + b / 10e9)        # network
    assert cost.comm(b, 3, 2) == pytest.approx(10e-6 + b / 10e9)
    np.testing.assert_allclose(cost.comm(np.array([b, b]), np.array([0, 0]), np.array([0, 1])),
                               [0.0, 2e-6 + b / 100e9])


def test_a_cycle_is_reported():
    g = program(("a", {}), ("b", {}), edges=[("a", "b", 1.0), ("b", "a", 1.0)])
    with pytest.raises(StreamMapError, match="cycle"):
        CostModel(g, two_nodes())


def test_area_bound_for_speed_scaled_times_is_work_over_total_speed():
    g = program(*[(f"t{i}", {"runtime": float(i + 1)}) for i in range(20)])
    cl = two_nodes()
    cost = CostModel(g, cl)
    total_speed = sum(d.speed for d in cl.devices)
    assert area_bound(cost) == pytest.approx(sum(range(1, 21)) / total_speed, rel=1e-9)
    assert critical_path_bound(cost) == pytest.approx(20 / 2.0)
    assert lower_bound(cost) == pytest.approx(max(210 / total_speed, 10.0))


@pytest.mark.parametrize("seed", range(8))
def test_lower_bound_never_exceeds_the_optimum_on_small_unrelated_instances(seed):
    """Independent tasks with random per-device times: brute-force the optimal makespan."""
    rng = np.random.default_rng(seed)
    n, models = 7, ["M0", "M1", "M2"]
    tasks = []
    for i in range(n):
        times = {m: float(rng.uniform(0.1, 5.0)) for m in models if rng.random() < 0.85}
        if not times:
            times = {"M0": 1.0}
        tasks.append((f"t{i}", {"times": times}))
    cl = cluster_from_dict({"name": "u", "nodes": [{"name": "n", "link": {"bandwidth": 1e9},
                            "devices": [{"name": m.lower(), "kind": "cpu", "model": m} for m in models]}]})
    cost = CostModel(program(*tasks), cl)
    best = math.inf
    for assign in itertools.product(range(3), repeat=n):
        loads = np.zeros(3)
        for t, d in enumerate(assign):
            loads[d] += cost.time[t, d]
        best = min(best, loads.max())
    lb = lower_bound(cost)
    assert lb <= best * (1 + 1e-12)
    assert lb >= cost.min_time().sum() / 3 - 1e-12               # at least the simple bound


def _twins():
    return cluster_from_dict({"name": "twins", "nodes": [{"name": "n", "link": {"bandwidth": 1e12, "latency": 0},
                              "devices": [{"name": "c0", "kind": "cpu"}, {"name": "c1", "kind": "cpu"}]}]})


def test_fork_join_bound_sees_the_devices_idle_while_a_long_root_runs():
    # a 10 s root, then six 1 s children on two equal devices: the best plan takes 10 + 6/2 = 13 s;
    # the README's bound only sees the critical path (11 s) and the area (16/2 = 8 s)
    fork = program(("root", {"runtime": 10.0}), *[(f"c{i}", {"runtime": 1.0}) for i in range(6)],
                   edges=[("root", f"c{i}", 0) for i in range(6)])
    cost = CostModel(fork, _twins())
    assert lower_bound(cost) == pytest.approx(11.0)
    assert fork_join_bound(cost) == pytest.approx(13.0)
    # and its mirror image: six 1 s tasks feeding a 10 s sink
    join = program(("sink", {"runtime": 10.0}), *[(f"p{i}", {"runtime": 1.0}) for i in range(6)],
                   edges=[(f"p{i}", "sink", 0) for i in range(6)])
    assert fork_join_bound(CostModel(join, _twins())) == pytest.approx(13.0)


@pytest.mark.parametrize("seed", range(6))
def test_fork_join_bound_is_never_above_a_real_schedule(seed):
    from streammap.bench.cases import random_case
    from streammap.mappers import auto, heft
    from streammap.mappers.schedule import evaluate
    g, cl = random_case(40, alpha=[0.5, 1.0, 2.0][seed % 3], ccr=[0.1, 1.0, 10.0][seed % 3], seed=seed).load()
    cost = CostModel(g, cl)
    fj = fork_join_bound(cost)
    assert fj >= lower_bound(cost) - 1e-12
    for mapper in (heft, auto):
        makespan, _, _ = evaluate(cost, mapper(cost))
        assert fj <= makespan * (1 + 1e-9)


def test_fork_join_bound_on_the_bwa_workflow_is_the_index_then_the_alignments(shared):
    from streammap.bench.cases import shared_cases
    case = next(c for c in shared_cases(shared) if c.name == "bwa-chameleon-small-001/hetero-2x4/ccr0.1")
    cost = CostModel(*case.load())
    # bwa_index (80.65 s on an A100) feeds all 100 alignments (299.3 A100-seconds over 4 A100s and
    # 4 V100s at half speed: 49.9 s)
    assert fork_join_bound(cost) == pytest.approx(80.652465 + 299.284798 / 6, rel=1e-6)
    assert fork_join_bound(cost) / lower_bound(cost) > 1.4


def test_cholesky_times_come_from_the_v100_and_skylake_measurements(shared):
    g = load_graph(shared / "cholesky" / "cholesky-n8-nb128.json")
    cl = load_cluster(shared / "clusters" / "cholesky-node.yaml")
    cost = CostModel(g, cl)
    i = cost.pos["POTRF(0)"]
    assert cost.time[i, 0] == 0.000268746 and cost.time[i, 4] == 0.000447032
    assert cost.mem[i] == 131072 and cost.out[i] == 131072


# -- derived views: restrict, with_times ----------------------------------------------------------

def _six_tasks_on_two_nodes():
    """Six tasks, five edges, on four devices of three classes (two A100s, a CPU, a V100): no
    task-, edge- or class-sized array can be mistaken for a device-sized one."""
    g = program(*[(t, {"flops": 1e9 * (i + 1), "bytes": 1e6, "share": 0.5}) for i, t in enumerate("abcdef")],
                edges=[("a", "b", 1e6), ("a", "c", 2e6), ("b", "d", 3e6), ("c", "e", 4e6), ("d", "f", 5e6)])
    cost = CostModel(g, two_nodes(oversub=1.5))
    assert (cost.n_tasks, cost.n_edges, cost.class_time.shape[1], cost.n_devices) == (6, 5, 3, 4)
    return cost


def _device_axes(value, n_devices) -> tuple[int, ...]:
    return tuple(i for i, n in enumerate(np.shape(value)) if n == n_devices)


def test_every_per_device_array_of_the_model_is_one_that_restrict_slices():
    cost = _six_tasks_on_two_nodes()
    per_device = {name: _device_axes(v, cost.n_devices) for name, v in vars(cost).items()
                  if isinstance(v, np.ndarray) and _device_axes(v, cost.n_devices)}
    assert per_device == DEVICE_AXES


def test_a_restricted_model_holds_the_subset_in_every_per_device_array():
    cost = _six_tasks_on_two_nodes()
    devs = [2, 3, 0]                      # the CPU, the V100 on the other node, an A100
    sub = cost.restrict(devs)
    assert sub.n_devices == 3 and [d.id for d in sub.devices] == [cost.devices[d].id for d in devs]
    for name, axes in DEVICE_AXES.items():
        value = getattr(sub, name)
        assert _device_axes(value, 3) == axes, name
        if name != "device_class":        # renumbered, checked below
            expected = getattr(cost, name)
            for axis in axes:
                expected = np.take(expected, devs, axis=axis)
            np.testing.assert_array_equal(value, expected, err_msg=name)
    assert sub.shareable.tolist() == [False, True, True]        # a CPU is never shared by fraction
    assert [sub.share_on(0, d) for d in range(3)] == [1.0, 0.5, 0.5]
    # classes renumbered over the ones left, and still describing the times
    assert sorted(sub.device_class.tolist()) == [0, 1, 2] and sub.class_count.tolist() == [1, 1, 1]
    np.testing.assert_array_equal(sub.class_time[:, sub.device_class], sub.time)
    # tasks and edges are the parent's; the parent is unchanged
    assert sub.tasks is cost.tasks and sub.pred_idx is cost.pred_idx
    assert cost.n_devices == 4 and cost.time.shape == (6, 4) and cost.shareable.size == 4


def test_restricting_to_devices_of_one_class_keeps_one_class():
    cost = _six_tasks_on_two_nodes()
    sub = cost.restrict([0, 1])           # the two A100s
    assert sub.device_class.tolist() == [0, 0] and sub.class_count.tolist() == [2]
    np.testing.assert_array_equal(sub.class_time[:, 0], cost.time[:, 0])
    assert area_bound(sub) == pytest.approx(cost.time[:, 0].sum() / 2)


def test_with_times_makes_every_device_its_own_class_unless_class_times_are_given():
    cost = _six_tasks_on_two_nodes()
    pinned = cost.time.copy()
    pinned[0, 1:] = math.inf              # task a on the first A100 only: the A100 class splits
    view = cost.with_times(pinned)
    assert view.time is pinned and view.class_time is pinned
    assert view.device_class.tolist() == [0, 1, 2, 3] and view.class_count.tolist() == [1, 1, 1, 1]
    assert cost.time[0, 1] < math.inf and cost.device_class.tolist() == [0, 0, 1, 2]
    halved = cost.with_times(cost.time / 2, class_time=cost.class_time / 2)
    assert halved.device_class is cost.device_class
    assert area_bound(halved) == pytest.approx(area_bound(cost) / 2)
    with pytest.raises(ValueError, match="time has shape"):
        cost.with_times(cost.time[:, :2])
    with pytest.raises(ValueError, match="class_time has shape"):
        cost.with_times(cost.time, class_time=cost.time)
