"""A first estimate adds the device's measured call overhead (``call_overhead``) to the roofline,
and reads the memory rate off the copy's ``bandwidth_curve`` at the task's working set; cluster
files without either (written before discovery measured them) keep the constant launch overhead
and one bandwidth for every size."""

from __future__ import annotations

import pytest

from streammap.cluster.model import cluster_from_dict
from streammap.cost.model import LAUNCH_OVERHEAD, CostModel
from streammap.ir import add_task, new_graph

CURVE = [[512 << 10, 100e9], [64 << 20, 25e9]]


def _one_task(flops=0, nbytes=0, mem=None):
    g = new_graph("t", "program")
    add_task(g, "k", kernel="k", flops=flops, bytes=nbytes, mem=mem)
    return g


def _cpu(**extra):
    return cluster_from_dict({"name": "c", "nodes": [{"name": "n", "devices": [
        {"name": "cpu", "kind": "cpu", "flops": 100e9, "mem_bandwidth": 20e9, **extra}]}]})


def test_every_task_pays_the_measured_call_overhead_once():
    g = _one_task(flops=1e6)
    assert CostModel(g, _cpu(call_overhead="40us")).time[0, 0] == pytest.approx(40e-6 + 1e6 / 100e9)


def test_a_tiny_task_costs_the_call_overhead_and_nothing_less():
    assert CostModel(_one_task(flops=1), _cpu(call_overhead=5e-6)).time[0, 0] == pytest.approx(5e-6, rel=1e-3)


def test_without_a_measured_overhead_the_constant_launch_overhead_is_added():
    assert CostModel(_one_task(flops=1e6), _cpu()).time[0, 0] == pytest.approx(LAUNCH_OVERHEAD["cpu"] + 1e-5)


def test_a_task_whose_working_set_stays_in_cache_gets_the_cache_rate():
    cluster = _cpu(achieved_bandwidth=25e9, bandwidth_curve=CURVE, call_overhead=0)
    small = CostModel(_one_task(nbytes=1e8, mem=256 << 10), cluster).time[0, 0]
    large = CostModel(_one_task(nbytes=1e8, mem=1 << 30), cluster).time[0, 0]
    assert small == pytest.approx(1e8 / 100e9)
    assert large == pytest.approx(1e8 / 25e9)


def test_between_two_measured_sizes_the_rate_is_interpolated_in_log_size():
    cluster = _cpu(bandwidth_curve=CURVE, call_overhead=0)
    middle = (512 << 10) * 2 ** 3.5                      # half-way between 2^19 and 2^26 in log size
    t = CostModel(_one_task(nbytes=1e9, mem=middle), cluster).time[0, 0]
    assert t == pytest.approx(1e9 / 62.5e9)


def test_compute_bound_tasks_ignore_the_curve():
    cluster = _cpu(achieved_flops=50e9, bandwidth_curve=CURVE, call_overhead=0)
    assert CostModel(_one_task(flops=1e9, nbytes=1e3, mem=1e3), cluster).time[0, 0] == pytest.approx(1e9 / 50e9)


def test_devices_with_different_overheads_are_different_classes():
    cluster = cluster_from_dict({"name": "c", "nodes": [{"name": "n", "link": {"bandwidth": 1e10}, "devices": [
        {"name": "g0", "kind": "gpu", "model": "H100", "call_overhead": "10us"},
        {"name": "g1", "kind": "gpu", "model": "H100", "call_overhead": "30us"}]}]})
    cost = CostModel(_one_task(flops=1e6), cluster)
    assert len(set(cost.device_class)) == 2
    assert cost.time[0, 1] - cost.time[0, 0] == pytest.approx(20e-6)
