"""`streammap monitor`: the live device table (--once), cluster files, and the CLI helpers."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from streammap.cli import build_parser
from streammap.cli.run import monitoring_options
from streammap.cluster.model import cluster_from_dict
from streammap.monitoring.alerts import AlertConfig, AlertConfigError
from streammap.monitoring.live import DeviceMonitor, monitor
from streammap.monitoring.telemetry import NvmlSampler
from tests.helpers.telemetry import fake_nvml, gpu


def console():
    return Console(file=io.StringIO(), width=200, highlight=False, color_system=None)


def test_once_shows_this_machines_devices():
    c = console()
    nvml = fake_nvml([gpu(), gpu(uuid="GPU-2", util=5, temp="unsupported")])
    assert monitor(once=True, console=c, nvml=nvml, interval=0.01) == 0
    out = c.file.getvalue()
    assert "devices of this machine" in out
    for word in ("gpu0", "gpu1", "cpu", "NVIDIA H200", "57%", "350 W", "61 °C", "ok"):
        assert word in out


def test_cluster_file_marks_local_and_remote_devices():
    cluster = cluster_from_dict({
        "name": "lab", "network": {"bandwidth": "25 GB/s"},
        "nodes": [{"name": "here", "link": {"bandwidth": "300 GB/s"},
                   "devices": [{"name": "gpu0", "kind": "gpu"}, {"name": "gpu1", "kind": "gpu", "index": 5},
                               {"name": "cpu", "kind": "cpu"}]},
                  {"name": "there", "devices": [{"name": "gpu0", "kind": "gpu"}]}]})
    mon = DeviceMonitor(cluster, node="here", samplers=[NvmlSampler(fake_nvml([gpu(), gpu()]))])
    rows = {r["id"]: r for r in mon.rows(mon.sample())}
    assert rows["here/gpu0"]["where"] == "local" and rows["here/gpu0"]["observed"] == "gpu0"
    assert rows["here/gpu1"]["observed"] is None                    # index 5: NVML has no such GPU
    assert rows["here/cpu"]["observed"] is None                     # no CPU sampler given
    assert rows["there/gpu0"]["where"] == "remote" and rows["there/gpu0"]["observed"] is None
    c = console()
    c.print(mon.table())
    out = c.file.getvalue()
    assert "this machine is here" in out and "remote: not observable here" in out


def test_monitor_parser_and_run_options(tmp_path):
    p = build_parser()
    a = p.parse_args(["monitor", "--once", "--cluster", "c.yaml", "--interval", "0.5"])
    assert a.once and a.cluster == "c.yaml" and a.interval == 0.5 and callable(a.func)
    cfg = tmp_path / "a.yaml"
    cfg.write_text("temperature: 70\n")
    a = p.parse_args(["run", "p.yaml", "--alerts", str(cfg), "--no-telemetry", "--sample-interval", "0.5"])
    o = monitoring_options(a)
    assert o.telemetry is False and o.interval == 0.5 and isinstance(o.alerts, AlertConfig)
    assert o.alerts.temperature == 70 and o.metrics is None
    a = p.parse_args(["run", "p.yaml", "--metrics-port", "0", "--dcgm-names"])
    o = monitoring_options(a)
    try:
        assert o.metrics.dcgm_names and o.metrics.port > 0 and o.metrics.addr == "127.0.0.1"
    finally:
        o.metrics.close()
    cfg.write_text("temperature: hot\n")
    with pytest.raises(AlertConfigError):
        monitoring_options(p.parse_args(["run", "p.yaml", "--alerts", str(cfg)]))
