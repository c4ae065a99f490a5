"""Telemetry: the NVML sampler (fake NVML), the CPU sampler (/proc), recording into the run record."""

from __future__ import annotations

import json
import os
import time

import numpy as np
import pytest

from streammap.monitoring.telemetry import (
    CpuSampler,
    DeviceInfo,
    NvmlSampler,
    PeriodicThread,
    Reading,
    TelemetryRecorder,
    local_samplers,
)
from streammap.runrecord import read_run_record
from streammap.runtime import run_plan
from tests.helpers.telemetry import ScriptedSampler, fake_nvml, gpu
from tests.helpers.telemetry import sleepy_plan as _sleepy_plan


def test_nvml_sampler_reads_every_field():
    nvml = fake_nvml([gpu(), gpu(uuid="GPU-5678", used=20 * 2**30, util=100, temp=70, ecc=2)])
    s = NvmlSampler(nvml)
    assert [d.id for d in s.devices()] == ["gpu0", "gpu1"]
    info = s.devices()[1]
    assert info.model == "NVIDIA H200" and info.uuid == "GPU-5678" and info.memory_total == 141 * 2**30
    assert info.pci_bus_id == "00000000:01:00.0"
    r0, r1 = s.sample()
    assert r0.device == "gpu0" and r0.utilization == pytest.approx(0.57)
    assert r0.memory_used == 10 * 2**30 and r0.memory_share == pytest.approx(10 / 141)
    assert r0.power == pytest.approx(350.0) and r0.temperature == 61 and r0.ecc_uncorrected == 0
    assert r1.utilization == 1.0 and r1.ecc_uncorrected == 2 and not r1.lost


def test_nvml_sampler_indices_select_gpus():
    s = NvmlSampler(fake_nvml([gpu(), gpu(), gpu()]), indices=[2, 7])
    assert [d.id for d in s.devices()] == ["gpu2"]


def test_not_supported_queries_are_not_asked_again():
    nvml = fake_nvml([gpu(power_mw="unsupported", ecc="unsupported", temp="unsupported")])
    s = NvmlSampler(nvml)
    for _ in range(3):
        (r,) = s.sample()
        assert r.power is None and r.ecc_uncorrected is None and r.temperature is None
        assert r.utilization == pytest.approx(0.57)
    assert nvml.calls.count("power") == 1 and nvml.calls.count("ecc") == 1 and nvml.calls.count("temp") == 1
    assert nvml.calls.count("util") == 3


def test_lost_gpu_is_marked():
    gpus = [gpu(), gpu()]
    nvml = fake_nvml(gpus)
    s = NvmlSampler(nvml)
    gpus[1]["lost"] = True
    r0, r1 = s.sample()
    assert not r0.lost and r1.lost and r1.utilization is None


def test_xid_events_are_drained_without_blocking():
    nvml = fake_nvml([gpu(), gpu()], xids=[(1, 79), (0, 48)])
    s = NvmlSampler(nvml)
    events = s.events()
    assert [(e.device, e.xid) for e in events] == [("gpu1", 79), ("gpu0", 48)]
    assert s.events() == []


def test_no_event_api_means_no_events():
    s = NvmlSampler(fake_nvml([gpu()], no_events=True))
    assert s.events() == [] and len(s.sample()) == 1


def test_no_nvml_gives_no_gpu_sampler(monkeypatch):
    import types

    broken = types.ModuleType("pynvml")

    def init():
        raise RuntimeError("NVML Shared Library Not Found")

    broken.nvmlInit = init
    assert NvmlSampler(broken).devices() == []
    assert [type(s).__name__ for s in local_samplers(nvml=broken)] == ["CpuSampler"]


def _proc(tmp_path, busy, idle, avail_kb=3_000_000):
    (tmp_path / "stat").write_text(f"cpu  {busy} 0 0 {idle} 0 0 0 0 0 0\ncpu0 1 0 0 1 0 0 0 0 0 0\n")
    (tmp_path / "meminfo").write_text(f"MemTotal:       8000000 kB\nMemFree:  100 kB\nMemAvailable:   {avail_kb} kB\n")
    (tmp_path / "cpuinfo").write_text("model name\t: Test CPU @ 2.00GHz\n")


def test_cpu_sampler_from_proc(tmp_path):
    _proc(tmp_path, 100, 900)
    s = CpuSampler(proc=str(tmp_path), sys_root=str(tmp_path / "nosys"))
    assert s.devices()[0].model == "Test CPU @ 2.00GHz"
    assert s.devices()[0].memory_total == 8000000 * 1024
    _proc(tmp_path, 175, 925)                   # 75 busy of 100 jiffies
    (r,) = s.sample()
    assert r.device == "cpu" and r.utilization == pytest.approx(0.75)
    assert r.memory_used == (8000000 - 3000000) * 1024 and r.memory_total == 8000000 * 1024
    assert r.temperature is None and r.power is None


def test_cpu_sampler_reads_busy_time_from_uptime_where_the_kernel_has_it(tmp_path):
    # /proc/uptime: seconds since boot, idle seconds summed over the CPUs (cheaper than /proc/stat)
    _proc(tmp_path, 100, 900)
    (tmp_path / "uptime").write_text("100.00 150.00\n")
    s = CpuSampler(proc=str(tmp_path), sys_root=str(tmp_path / "nosys"))
    n = os.cpu_count() or 1
    (tmp_path / "uptime").write_text("101.00 150.50\n")       # one second: n CPU-seconds, 0.5 idle
    _proc(tmp_path, 100, 1000)                                 # /proc/stat says all idle: not read
    (r,) = s.sample()
    assert r.utilization == pytest.approx(1.0 - 0.5 / n)


def test_cpu_sampler_on_this_machine():
    s = CpuSampler()
    time.sleep(0.05)
    (r,) = s.sample()
    assert r.memory_used is None or 0 < r.memory_used <= r.memory_total
    assert r.utilization is None or 0.0 <= r.utilization <= 1.0


def test_recorder_series_and_dict():
    infos = [DeviceInfo(id="gpu0", kind="gpu", source="nvml", model="H200", memory_total=100.0)]
    rec = TelemetryRecorder([ScriptedSampler(infos, [[Reading("gpu0", utilization=0.5, memory_used=10.0)],
                                                     [Reading("gpu0", utilization=0.25, memory_used=20.0)]])], 0.1)
    rec.sample(0.0)
    rec.sample(0.1)
    d = rec.to_dict({"gpu0": ["node0/gpu0"]})
    (dev,) = d["devices"]
    assert dev["t"] == [0.0, 0.1] and dev["utilization"] == [0.5, 0.25] and dev["memory_used"] == [10.0, 20.0]
    assert dev["power"] is None and dev["plan_devices"] == ["node0/gpu0"] and d["interval"] == 0.1


def test_periodic_thread_stops_at_once():
    calls = []
    th = PeriodicThread(lambda: calls.append(1), 10.0).start()
    th.stop(timeout=5.0)
    # woken at once: ended within the join, which is shorter than the 10 s it would sleep otherwise
    assert not th._thread.is_alive() and calls == []
    th = PeriodicThread(lambda: calls.append(1), 0.005).start()
    time.sleep(0.1)
    th.stop()
    n = len(calls)
    time.sleep(0.03)
    assert n >= 3 and len(calls) == n


def sleepy_plan(tmp_path, n=12):
    return _sleepy_plan(tmp_path, n, nap_seconds=0.01)


def test_run_record_holds_telemetry_and_measured_vs_estimated(tmp_path):
    plan = sleepy_plan(tmp_path)
    rec_path = tmp_path / "r.run.json"
    run_plan(plan, progress=False, record_path=rec_path, interval=0.02)
    record = read_run_record(rec_path)
    assert record.telemetry is not None
    (cpu,) = record.telemetry.devices
    assert cpu.id == "cpu" and cpu.source == "cpu" and sorted(cpu.plan_devices) == ["node0/cpu0", "node0/cpu1"]
    assert len(cpu.t) >= 3 and cpu.t == sorted(cpu.t) and cpu.t[-1] <= record.wall_time + 0.05
    assert cpu.memory_used is not None and all(m is None or m > 0 for m in cpu.memory_used)
    for t in record.tasks:
        assert t.estimated > 0 and t.measured is not None
    naps = [t for t in record.tasks if t.kernel == "nap"]
    assert all(t.measured >= 0.009 for t in naps)


def test_run_with_fake_gpu_sampler_records_its_series(tmp_path):
    plan = sleepy_plan(tmp_path, n=4)
    info = DeviceInfo(id="gpu0", kind="gpu", source="nvml", model="H200", uuid="GPU-1", memory_total=1e9)
    sampler = ScriptedSampler([info], [[Reading("gpu0", utilization=0.9, memory_used=5e8, memory_total=1e9,
                                                 power=300.0, temperature=55.0)]])
    run_plan(plan, progress=False, record_path=tmp_path / "r.json", samplers=[sampler], interval=0.01)
    record = read_run_record(tmp_path / "r.json")
    (dev,) = record.telemetry.devices
    assert dev.id == "gpu0" and dev.utilization[0] == 0.9 and dev.power[0] == 300.0 and dev.temperature[0] == 55.0


def test_no_telemetry_leaves_it_out(tmp_path):
    plan = sleepy_plan(tmp_path, n=2)
    out = run_plan(plan, progress=False, record_path=tmp_path / "r.json", telemetry=False)
    np.testing.assert_allclose(out["result"], np.arange(4.0) + 1)
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["telemetry"] is None and data["alerts"] == [] and data["remaps"] == []


def test_old_run_records_stay_readable(tmp_path):
    old = {"streammap_run": 1, "plan": "p.yaml", "started": "2024-01-01T00:00:00+00:00", "wall_time": 1.0,
           "estimated_makespan": 1.0, "status": "ok", "devices": [{"id": "node0/cpu", "executor": "numpy"}],
           "tasks": [{"id": "a", "kernel": "k", "device": "node0/cpu", "estimated_start": 0.0,
                      "estimated_finish": 1.0, "start": 0.0, "finish": 1.0, "attempts": 1}]}
    path = tmp_path / "old.run.json"
    path.write_text(json.dumps(old))
    record = read_run_record(path)
    assert record.telemetry is None and record.alerts == [] and record.remaps == []
    assert record.tasks[0].planned_device is None


def _until(condition, limit: float = 10.0) -> None:
    """Wait until ``condition()`` holds (a thread has caught up), failing after ``limit`` seconds."""
    deadline = time.monotonic() + limit
    while not condition():
        assert time.monotonic() < deadline, "the condition never held"
        time.sleep(0.001)


def test_ticker_wakes_only_when_needed():
    from streammap.monitoring.telemetry import Ticker
    tk = Ticker("test ticker")
    calls = []
    h = tk.add(lambda: calls.append("a"), 0.01, first=True)
    time.sleep(0.05)
    assert calls and calls[0] == "a"
    tk.remove(h)
    n = len(calls)
    time.sleep(0.03)
    assert len(calls) <= n + 1                   # at most one already under way
    assert tk._wake_at == float("inf")           # nothing left: it sleeps until the next add
    before = time.perf_counter()
    tk.add(lambda: calls.append("b"), 10.0)      # wakes it (it slept forever) to sleep until then
    after = time.perf_counter()
    _until(lambda: tk._wake_at not in (float("inf"), float("-inf")))
    assert before + 10.0 <= tk._wake_at <= after + 10.0
    tk.add(lambda: calls.append("c"), 20.0)      # later than its wake-up: no need to wake it
    h = tk.add(lambda: calls.append("d"), 0.005)  # earlier: woken, runs it
    time.sleep(0.05)
    tk.remove(h)
    assert "d" in calls and "b" not in calls and "c" not in calls


def test_kernel_files_are_read_with_pread(tmp_path):
    from streammap.monitoring import telemetry
    first = telemetry._pread("/proc/meminfo")
    assert first is not None and first.startswith("MemTotal:") and "/proc/meminfo" in telemetry._fds
    assert telemetry._pread("/proc/meminfo").startswith("MemTotal:")      # read afresh from offset 0
    assert telemetry._pread("/proc/no-such-file") is None
    f = tmp_path / "x"
    f.write_text("1")
    assert telemetry._pread(str(f)) == "1" and str(f) not in telemetry._fds   # not a kernel file: not kept


def test_temperature_is_read_at_most_once_a_second(tmp_path, monkeypatch):
    from streammap.monitoring import telemetry
    zone = tmp_path / "thermal_zone0"
    zone.mkdir()
    (zone / "temp").write_text("50000\n")
    path = str(zone / "temp")
    assert telemetry._temperature(path) == 50.0
    (zone / "temp").write_text("60000\n")
    assert telemetry._temperature(path) == 50.0                 # within TEMPERATURE_EVERY
    monkeypatch.setattr(telemetry, "TEMPERATURE_EVERY", 0.0)
    assert telemetry._temperature(path) == 60.0


def test_run_shorter_than_the_interval_is_sampled_once_at_its_end(tmp_path):
    plan = sleepy_plan(tmp_path, n=2)
    run_plan(plan, progress=False, record_path=tmp_path / "r.json", interval=30.0)
    record = read_run_record(tmp_path / "r.json")
    (cpu,) = record.telemetry.devices
    # the one sample is taken at the end: after the last task finished (times are kept to the
    # microsecond, hence the 1 us)
    assert len(cpu.t) == 1 and cpu.t[0] >= max(t.finish for t in record.tasks) - 1e-6
    assert cpu.memory_used is not None
    assert 0 < record.telemetry.monitor_time < record.wall_time
