"""Prometheus metrics: names and labels, DCGM names, serving on 127.0.0.1 during and after a run."""

from __future__ import annotations

import socket
import threading
import time
import urllib.error
import urllib.request

import pytest

from streammap.errors import StreamMapError
from streammap.monitoring.metrics import RunMetrics
from streammap.monitoring.telemetry import DeviceInfo, Reading
from streammap.runtime import run_plan
from tests.helpers.telemetry import ScriptedSampler, scrape, value
from tests.helpers.telemetry import sleepy_plan as _sleepy_plan

GPU = DeviceInfo(id="gpu0", kind="gpu", source="nvml", model="NVIDIA H200", uuid="GPU-abc", index=0,
                 memory_total=141 * 2**30)


def test_names_follow_prometheus_conventions():
    m = RunMetrics()
    m.observe_task("scale", "node0/gpu0", 0.002)
    m.observe_task("scale", "node0/gpu0", 0.004)
    m.set_tasks(3, 1, 5, 0)
    m.set_device_info(GPU, ["node0/gpu0"])
    m.set_reading(Reading("gpu0", utilization=0.42, memory_used=2**30, memory_total=141 * 2**30, power=300.0,
                          temperature=60.0))
    m.alert("memory", "warning")
    m.remapped()
    text = m.render()
    assert value(text, "streammap_task_duration_seconds_count", kernel="scale", device="node0/gpu0") == 2
    assert value(text, "streammap_task_duration_seconds_sum", kernel="scale", device="node0/gpu0") == pytest.approx(0.006)
    assert value(text, "streammap_task_duration_seconds_bucket", kernel="scale", device="node0/gpu0", le="0.003") == 1
    assert value(text, "streammap_tasks", state="pending") == 3
    assert value(text, "streammap_tasks", state="done") == 5
    assert value(text, "streammap_device_utilization_ratio", device="gpu0") == pytest.approx(0.42)
    assert value(text, "streammap_device_memory_used_bytes", device="gpu0") == 2**30
    assert value(text, "streammap_device_memory_total_bytes", device="gpu0") == 141 * 2**30
    assert value(text, "streammap_device_power_watts", device="gpu0") == 300.0
    assert value(text, "streammap_device_temperature_celsius", device="gpu0") == 60.0
    assert value(text, "streammap_device_info", device="gpu0", plan_devices="node0/gpu0", uuid="GPU-abc") == 1
    assert value(text, "streammap_alerts_total", kind="memory", severity="warning") == 1
    assert value(text, "streammap_remaps_total") == 1
    assert "DCGM_FI_DEV_GPU_UTIL" not in text


def test_dcgm_names_and_labels():
    m = RunMetrics(dcgm_names=True, hostname="box")
    m.set_device_info(GPU)
    m.set_reading(Reading("gpu0", utilization=0.42, memory_used=2 * 2**30, memory_total=141 * 2**30, power=300.5,
                          temperature=60.0))
    m.set_device_info(DeviceInfo(id="cpu", kind="cpu", source="cpu"))
    m.set_reading(Reading("cpu", utilization=0.5))
    text = m.render()
    lab = dict(gpu="0", UUID="GPU-abc", device="nvidia0", modelName="NVIDIA H200", Hostname="box")
    assert value(text, "DCGM_FI_DEV_GPU_UTIL", **lab) == 42
    assert value(text, "DCGM_FI_DEV_FB_USED", **lab) == 2048
    assert value(text, "DCGM_FI_DEV_FB_FREE", **lab) == 139 * 1024
    assert value(text, "DCGM_FI_DEV_POWER_USAGE", **lab) == 300.5
    assert value(text, "DCGM_FI_DEV_GPU_TEMP", **lab) == 60
    assert text.count("DCGM_FI_DEV_GPU_UTIL{") == 1           # the CPU has no DCGM series


def test_private_registries_do_not_mix():
    a, b = RunMetrics(), RunMetrics()
    a.observe_task("k", "d", 1.0)
    with pytest.raises(KeyError):
        value(b.render(), "streammap_task_duration_seconds_count", kernel="k")


def test_serves_on_loopback_and_port_in_use_is_an_error():
    m = RunMetrics()
    port = m.serve(0)
    try:
        assert m.addr == "127.0.0.1" and port > 0
        assert "streammap_tasks" in scrape(port)
        other = RunMetrics()
        with pytest.raises(StreamMapError, match="cannot serve metrics"):
            other.serve(port)
    finally:
        m.close()
    with pytest.raises(urllib.error.URLError):
        scrape(port)


def sleepy_plan(tmp_path, n=10):
    return _sleepy_plan(tmp_path, n, nap_seconds=0.02)


def test_scrape_during_and_after_a_run(tmp_path):
    plan = sleepy_plan(tmp_path)
    m = RunMetrics(dcgm_names=True)
    port = m.serve(0)
    gpu_sampler = ScriptedSampler([GPU], [[Reading("gpu0", utilization=0.75, memory_used=3 * 2**30,
                                                    memory_total=141 * 2**30, power=250.0, temperature=50.0)]])
    during: list[str] = []

    def scraper():
        time.sleep(0.06)
        during.append(scrape(port))

    th = threading.Thread(target=scraper)
    th.start()
    try:
        run_plan(plan, progress=False, metrics=m, interval=0.01, samplers=[gpu_sampler])
        th.join()
        after = scrape(port)
    finally:
        m.close()
    mid = during[0]
    assert value(mid, "streammap_device_utilization_ratio", device="gpu0") == 0.75
    assert value(mid, "streammap_tasks", state="done") < 11
    assert value(after, "streammap_tasks", state="done") == 11
    assert value(after, "streammap_tasks", state="pending") == 0
    assert value(after, "streammap_task_duration_seconds_count", kernel="nap", device="node0/cpu0") == 5
    assert value(after, "streammap_task_duration_seconds_count", kernel="nap", device="node0/cpu1") == 5
    assert value(after, "streammap_device_memory_used_bytes", device="gpu0") == 3 * 2**30
    assert value(after, "DCGM_FI_DEV_GPU_UTIL", gpu="0", UUID="GPU-abc") == 75
    assert value(after, "streammap_run_elapsed_seconds") > 0.05


def test_metrics_port_given_to_run_plan_is_closed_after(tmp_path):
    plan = sleepy_plan(tmp_path, n=2)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    run_plan(plan, progress=False, metrics=port, interval=0.01)
    with pytest.raises(urllib.error.URLError):
        scrape(port)


def test_batched_task_durations_match_one_by_one():
    one, batch = RunMetrics(), RunMetrics()
    items = [("scale", "node0/cpu0", v) for v in (1e-6, 1e-5, 2e-3, 2e-3, 0.05, 1e3)] + \
            [("add", "node0/cpu1", 0.5), ("scale", "node0/cpu1", 3e-4)]
    for k, d, v in items:
        one.observe_task(k, d, v)
    batch.observe_tasks(items)
    batch.observe_tasks([])
    lines = lambda m: sorted(l for l in m.render().splitlines() if l.startswith("streammap_task_duration_seconds")  # noqa: E731, E741
                             and "_created" not in l)
    assert lines(one) == lines(batch)


def test_device_fields_never_read_are_not_exported():
    m = RunMetrics()
    for _ in range(2):
        m.set_reading(Reading("cpu", utilization=0.5, memory_used=1e9, memory_total=8e9))
    text = m.render()
    assert value(text, "streammap_device_utilization_ratio", device="cpu") == 0.5
    assert 'streammap_device_power_watts{device="cpu"}' not in text
    assert 'streammap_device_temperature_celsius{device="cpu"}' not in text
    m.set_reading(Reading("cpu", power=42.0))
    assert value(m.render(), "streammap_device_power_watts", device="cpu") == 42.0


def test_device_info_declared_again_only_when_it_changes():
    m = RunMetrics()
    m.set_device_info(GPU, ["node0/gpu0"])
    m.set_device_info(GPU, ["node0/gpu0"])
    m.set_device_info(GPU, ["node0/gpu1"])
    text = m.render()
    assert value(text, "streammap_device_info", device="gpu0", plan_devices="node0/gpu0") == 1
    assert value(text, "streammap_device_info", device="gpu0", plan_devices="node0/gpu1") == 1
