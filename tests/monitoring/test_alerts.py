"""Alerts: the config file (validated, file:line errors), the rules, the metric, the webhook."""

from __future__ import annotations

import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from streammap.monitoring.alerts import AlertConfig, AlertConfigError, AlertManager, alert_config, load_alert_config
from streammap.monitoring.metrics import RunMetrics
from streammap.monitoring.telemetry import DeviceInfo, Reading, XidEvent
from streammap.runrecord import read_run_record
from streammap.runtime import run_plan
from tests.helpers.plans import cpu_devices, make_plan, ref, task
from tests.helpers.telemetry import ScriptedSampler


def write(tmp_path, text):
    p = tmp_path / "alerts.yaml"
    p.write_text(text)
    return p


def test_config_file_with_every_rule(tmp_path):
    c = load_alert_config(write(tmp_path, """
memory_share: 0.8
temperature: 80
slow_task: {factor: 3, baseline: model, min_time: 5ms}
device_lost: true
ecc: false
cooldown: 2s
webhook: {url: "http://127.0.0.1:9/hook", timeout: 500ms, headers: {X-Token: abc}}
remap: {enabled: true, factor: 2.5, window: 4, min_task_time: 2ms, max_remaps: 1}
"""))
    assert c.memory_share == 0.8 and c.temperature == 80 and not c.ecc and c.cooldown == 2.0
    assert c.slow_task.factor == 3 and c.slow_task.baseline == "model" and c.slow_task.min_time == pytest.approx(0.005)
    assert c.webhook.timeout == pytest.approx(0.5) and c.webhook.headers == {"X-Token": "abc"}
    assert c.remap.enabled is True and c.remap.window == 4 and c.remap.min_task_time == pytest.approx(0.002)
    assert c.remap.active(emulate=True)


def test_shorthands_and_defaults(tmp_path):
    c = load_alert_config(write(tmp_path, "slow_task: 4\nwebhook: https://example.invalid/x\n"))
    assert c.slow_task.factor == 4 and c.webhook.url == "https://example.invalid/x"
    assert c.memory_share == 0.95 and c.remap.enabled == "auto"
    assert not c.remap.active(emulate=True) and c.remap.active(emulate=False)
    assert load_alert_config(write(tmp_path, "")) == AlertConfig()
    assert alert_config(None).memory_share == 0.95
    assert alert_config({"temperature": 70}).temperature == 70
    assert load_alert_config(write(tmp_path, "slow_task: false\n")).slow_task is None


@pytest.mark.parametrize("text, line, what", [
    ("memory_share: 0.9\ntemprature: 80\n", 2, "unknown field 'temprature'"),
    ("memory_share: 1.5\n", 1, "memory_share"),
    ("remap:\n  factor: 2\n  window: zero\n", 3, "remap.window"),
    ("webhook: {url: ftp://x}\n", 1, "http:// or https://"),
    ("cooldown: 5 parsecs\n", 1, "cooldown"),
    ("memory_share: 0.9\ntemperature: [80\n", 3, "not valid YAML"),
])
def test_config_errors_name_file_and_line(tmp_path, text, line, what):
    p = write(tmp_path, text)
    with pytest.raises(AlertConfigError) as e:
        load_alert_config(p)
    assert e.value.path == str(p) and e.value.line == line and what in e.value.message


def test_missing_file_is_an_error(tmp_path):
    with pytest.raises(AlertConfigError, match="file not found"):
        load_alert_config(tmp_path / "nope.yaml")


def test_memory_and_temperature_fire_once_until_cleared(caplog):
    m = RunMetrics()
    a = AlertManager(AlertConfig(memory_share=0.9, temperature=80, cooldown=0), metrics=m)
    high = Reading("gpu0", memory_used=95.0, memory_total=100.0, temperature=85.0)
    with caplog.at_level(logging.WARNING, logger="streammap.monitoring.alerts"):
        a.check_reading(1.0, high, " (node0/gpu0)")
        a.check_reading(1.2, high)
    kinds = [x["kind"] for x in a.alerts]
    assert kinds == ["memory", "temperature"]
    assert "gpu0 (node0/gpu0) uses 95% of its memory" in a.alerts[0]["message"]
    assert any(r.getMessage().startswith("alert [warning] memory") for r in caplog.records)
    a.check_reading(2.0, Reading("gpu0", memory_used=50.0, memory_total=100.0, temperature=60.0))
    a.check_reading(3.0, high)
    assert [x["kind"] for x in a.alerts] == ["memory", "temperature", "memory", "temperature"]
    assert "streammap_alerts_total{kind=\"memory\",severity=\"warning\"} 2.0" in m.render()


def test_lost_ecc_and_xid_are_critical():
    a = AlertManager(AlertConfig(cooldown=0))
    a.check_reading(0.0, Reading("gpu1", ecc_uncorrected=3))
    a.check_reading(0.5, Reading("gpu1", ecc_uncorrected=5))
    a.check_reading(1.0, Reading("gpu1", lost=True))
    a.check_reading(1.5, Reading("gpu1", lost=True))
    a.check_xid(2.0, XidEvent("gpu0", 79))
    assert [(x["kind"], x["severity"]) for x in a.alerts] == [("ecc", "critical"), ("device_lost", "critical"),
                                                              ("xid", "critical")]
    assert a.alerts[0]["value"] == 2 and "Xid 79" in a.alerts[2]["message"]


def test_slow_task_relative_to_the_run_or_to_the_model():
    a = AlertManager(AlertConfig(slow_task={"factor": 3}, cooldown=0))
    assert not a.check_task(1.0, "t1", "d", 0.01, 0.2, baseline=None)      # calibration unknown yet
    assert not a.check_task(1.0, "t1", "d", 0.01, 0.2, baseline=10.0)      # 20x, but the run is 10x
    assert a.check_task(1.0, "t2", "d", 0.01, 0.4, baseline=10.0)          # 40x: 4x the run's ratio
    a = AlertManager(AlertConfig(slow_task={"factor": 3, "baseline": "model", "min_time": 0.05}))
    assert not a.check_task(1.0, "t1", "d", 0.001, 0.04, baseline=None)    # under min_time
    assert a.check_task(1.0, "t1", "d", 0.01, 0.06, baseline=None)


def test_cooldown_limits_repeats():
    a = AlertManager(AlertConfig(cooldown=10))
    assert a.fire("x", "one", t=0.0, device="d")
    assert not a.fire("x", "two", t=5.0, device="d")
    assert a.fire("x", "three", t=5.0, device="e")
    assert a.fire("x", "four", t=10.5, device="d")


class Hook(BaseHTTPRequestHandler):
    received: list = []

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        Hook.received.append((self.headers.get("X-Token"), json.loads(body)))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *a):
        pass


def test_webhook_posts_json_to_loopback():
    Hook.received = []
    server = HTTPServer(("127.0.0.1", 0), Hook)
    th = threading.Thread(target=server.serve_forever, daemon=True)
    th.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/hook"
        a = AlertManager(AlertConfig(webhook={"url": url, "headers": {"X-Token": "s3cret"}}),
                         context={"plan": "p.yaml"})
        a.fire("temperature", "gpu0 is hot", t=1.5, device="gpu0", value=91.0, threshold=90.0)
        a.close()
    finally:
        server.shutdown()
        server.server_close()
    (token, payload), = Hook.received
    assert token == "s3cret"
    assert payload["kind"] == "temperature" and payload["device"] == "gpu0" and payload["plan"] == "p.yaml"
    assert payload["source"] == "streammap" and payload["text"].startswith("streammap alert [warning] temperature")
    assert a.webhook.sent == 1


def test_failing_webhook_never_fails_or_blocks(caplog, monkeypatch):
    import socket
    import urllib.request
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]                    # closed again: connection refused
    fired, answered_after_fire = threading.Event(), []
    refuse = urllib.request.urlopen

    def endpoint_that_answers_once_every_alert_was_fired(req, timeout):
        answered_after_fire.append(fired.wait(10))
        return refuse(req, timeout=timeout)

    monkeypatch.setattr(urllib.request, "urlopen", endpoint_that_answers_once_every_alert_was_fired)
    a = AlertManager(AlertConfig(webhook={"url": f"http://127.0.0.1:{port}/x", "timeout": 0.2}, cooldown=0))
    with caplog.at_level(logging.WARNING, logger="streammap.monitoring.alerts"):
        for k in range(3):
            assert a.fire("x", f"alert {k}", t=float(k))
        fired.set()                                  # had fire() waited for the endpoint, it would be waiting still
        a.close()
    assert answered_after_fire and all(answered_after_fire)
    assert a.webhook.sent == 0
    assert sum("webhook" in r.getMessage() for r in caplog.records) == 1


MEMORY = """
import time
import numpy as np

def source():
    return np.arange(4.0)

def nap(x):
    time.sleep(0.05)
    return x + 1
"""


def test_alerts_in_a_run_end_up_in_the_record(tmp_path):
    devs = cpu_devices(1)
    plan = make_plan(tmp_path, MEMORY, [task("src", "source", devs[0]["id"]), task("n", "nap", devs[0]["id"], ref("src"))],
                     devices=devs, outputs=ref("n"))
    info = DeviceInfo(id="gpu0", kind="gpu", source="nvml", memory_total=100.0)
    sampler = ScriptedSampler([info], [[Reading("gpu0", memory_used=99.0, memory_total=100.0, temperature=95.0)]])
    cfg = write(tmp_path, "memory_share: 0.9\ntemperature: 90\n")
    run_plan(plan, progress=False, record_path=tmp_path / "r.json", alerts=cfg, samplers=[sampler], interval=0.01)
    record = read_run_record(tmp_path / "r.json")
    assert sorted(a.kind for a in record.alerts) == ["memory", "temperature"]
    assert all(a.device == "gpu0" and a.t >= 0 for a in record.alerts)
