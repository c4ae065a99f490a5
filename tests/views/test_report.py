"""The HTML run report: one self-contained page plus its pictures."""

from __future__ import annotations

import base64
import json
import re

from streammap.runrecord import read_run_record
from streammap.runtime import run_plan
from streammap.views.report import default_report_path, furthest_off, write_report
from tests.helpers.plans import cpu_devices, make_plan, ref, task

PROG = """
import time
import numpy as np

def source():
    return np.arange(4.0)

def nap(x, k):
    time.sleep(0.002 if k != 3 else 0.03)
    return x + k
"""


def record_of(tmp_path):
    devs = cpu_devices(2)
    ids = [d["id"] for d in devs]
    tasks = [task("src", "source", ids[0])] + [task(f"nap{k}", "nap", ids[k % 2], ref("src"), k) for k in range(8)]
    plan = make_plan(tmp_path, PROG, tasks, devices=devs, outputs=ref("nap7"))
    path = tmp_path / "out.run.json"
    run_plan(plan, progress=False, record_path=path, interval=0.01, alerts={"slow_task": 3})
    return path


def test_report_page_and_pictures(tmp_path):
    path = record_of(tmp_path)
    files = write_report(path, record_path=path, path=None)
    assert files.html == tmp_path / "out.report.html" == default_report_path(path)
    assert [p.name for p in files.images] == ["out.report.gantt.png", "out.report.utilisation.png"]
    for p in files.images:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = files.html.read_text()
    assert text.startswith("<!doctype html>")
    imgs = re.findall(r"src='data:image/png;base64,([A-Za-z0-9+/=]+)'", text)
    assert len(imgs) == 2 and all(base64.b64decode(i)[:4] == b"\x89PNG" for i in imgs)
    assert "src='http" not in text and "<script" not in text          # self-contained
    assert "Tasks whose estimates were furthest off" in text
    # the slow task is among the furthest off (the µs-short source, estimated at 1 ms, is too)
    record = read_run_record(path)
    top = furthest_off(record, 3)
    assert "nap3" in [r["task"] for r in top]
    assert max(top, key=lambda r: r["relative"])["task"] == "nap3"
    assert text.index("nap3") < text.index("Alerts")
    assert "slow_task" in text


def test_report_of_an_old_record_without_telemetry(tmp_path):
    old = {"streammap_run": 1, "plan": "p.yaml", "started": "2024-01-01T00:00:00+00:00", "wall_time": 1.0,
           "estimated_makespan": 1.0, "status": "ok", "devices": [{"id": "node0/cpu", "executor": "numpy"}],
           "tasks": [{"id": "a", "kernel": "k", "device": "node0/cpu", "estimated_start": 0.0,
                      "estimated_finish": 0.5, "start": 0.0, "finish": 1.0, "attempts": 1}]}
    p = tmp_path / "old.run.json"
    p.write_text(json.dumps(old))
    files = write_report(p, tmp_path / "rep" / "page.html")
    assert files.html.exists() and (tmp_path / "rep" / "page.gantt.png").exists()
    assert "None." in files.html.read_text()
