"""The roofline of a first estimate divides by what a device achieved in discovery's
micro-benchmarks (``achieved_flops``, ``achieved_bandwidth``) when the cluster file records it,
else by its peak figures."""

from __future__ import annotations

import math

import pytest

from streammap.cluster.model import cluster_from_dict
from streammap.cost.model import LAUNCH_OVERHEAD, CostModel
from streammap.ir import add_task, new_graph


def _one_task(flops, nbytes):
    g = new_graph("t", "program")
    add_task(g, "k", kernel="k", flops=flops, bytes=nbytes)
    return g


def _cpu(**extra):
    return cluster_from_dict({"name": "c", "nodes": [{"name": "n", "devices": [
        {"name": "cpu", "kind": "cpu", "flops": 100e9, "mem_bandwidth": 20e9, **extra}]}]})


def test_the_roofline_divides_by_the_achieved_rates_when_the_file_has_them():
    launch = LAUNCH_OVERHEAD["cpu"]
    compute, memory = _one_task(1e9, 0), _one_task(0, 1e9)
    assert CostModel(compute, _cpu()).time[0, 0] == pytest.approx(1e9 / 100e9 + launch)
    assert CostModel(compute, _cpu(achieved_flops=25e9)).time[0, 0] == pytest.approx(1e9 / 25e9 + launch)
    assert CostModel(memory, _cpu()).time[0, 0] == pytest.approx(1e9 / 20e9 + launch)
    assert CostModel(memory, _cpu(achieved_bandwidth=10e9)).time[0, 0] == pytest.approx(1e9 / 10e9 + launch)
    # one achieved figure alone: the other stays at its peak
    both = CostModel(memory, _cpu(achieved_flops=25e9)).time[0, 0]
    assert both == pytest.approx(1e9 / 20e9 + launch) and math.isfinite(both)


def test_devices_with_equal_achieved_figures_share_a_class_and_different_ones_do_not():
    def cluster(a, b):
        return cluster_from_dict({"name": "c", "nodes": [{"name": "n", "link": {"bandwidth": 1e10}, "devices": [
            {"name": "g0", "kind": "gpu", "model": "H100", "flops": 67e12, "achieved_flops": a},
            {"name": "g1", "kind": "gpu", "model": "H100", "flops": 67e12, "achieved_flops": b}]}]})
    g = _one_task(1e12, 0)
    assert len(set(CostModel(g, cluster(40e12, 40e12)).device_class)) == 1
    split = CostModel(g, cluster(40e12, 20e12))
    assert len(set(split.device_class)) == 2 and split.time[0, 1] > split.time[0, 0]
