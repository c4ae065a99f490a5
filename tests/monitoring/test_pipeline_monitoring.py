"""A pipeline plan's run is monitored like any other: telemetry in the run record, every task's
duration in the Prometheus metrics, slow tasks alerted; it is not re-mapped (it runs to its end)."""

import textwrap

import numpy as np

import streammap
from streammap.cluster.model import cluster_from_dict
from streammap.monitoring.metrics import RunMetrics
from streammap.monitoring.telemetry import DeviceInfo, Reading
from streammap.runrecord import read_run_record
from streammap.runtime import run_plan
from tests.helpers.telemetry import ScriptedSampler, scrape, value

STREAM = textwrap.dedent('''
    import time
    import numpy as np

    # @stream param
    ITEMS = 6

    # @stream kernel(flops=1e9, out=8)
    def produce(i):
        time.sleep(0.02)
        return np.array([float(i)])

    TOTAL = {"sum": 0.0}

    # @stream kernel(flops=1e9, out=8, stateful=True)
    def running(x):
        time.sleep(0.02)
        TOTAL["sum"] += float(x[0])
        return np.array([TOTAL["sum"]])

    # @stream pipeline(items=ITEMS)
    def stream(i):
        return running(produce(i))
    ''')

GPUS = {"name": "two", "nodes": [{"name": "n0", "link": {"bandwidth": "300 GB/s", "latency": "3us"},
        "devices": [{"name": f"gpu{i}", "kind": "gpu", "memory": "80GiB", "flops": "10 TFLOP/s",
                     "mem_bandwidth": "1000 GB/s"} for i in range(2)]}]}


def test_a_pipeline_run_has_telemetry_metrics_and_slow_task_alerts(tmp_path):
    path = tmp_path / "stream.py"
    path.write_text(STREAM)
    plan = streammap.compile(path, cluster=cluster_from_dict(GPUS), strategy="pipeline")
    assert plan.pipeline is not None
    sampler = ScriptedSampler([DeviceInfo(id="gpu0", kind="gpu", source="nvml", memory_total=100.0)],
                              [[Reading("gpu0", utilization=0.5, memory_used=10.0, memory_total=100.0)]])
    m = RunMetrics()
    port = m.serve(0)
    try:
        # each task sleeps 20 ms against an estimate of 0.1 ms: slow against the model
        out = run_plan(plan, emulate=True, progress=False, record_path=tmp_path / "r.json", metrics=m,
                       alerts={"slow_task": {"factor": 3, "baseline": "model", "min_time": 0.005}, "cooldown": 0},
                       samplers=[sampler], interval=0.01)
        text = scrape(port)
    finally:
        m.close()
    np.testing.assert_array_equal([out[f"result_{i}"][0] for i in range(6)], np.cumsum(np.arange(6.0)))
    record = read_run_record(tmp_path / "r.json")
    assert record.status == "ok" and record.telemetry is not None and record.telemetry.devices
    slow = [a for a in record.alerts if a.kind == "slow_task"]
    assert slow and {a.device for a in slow} <= {"n0/gpu0", "n0/gpu1"}
    for kernel in ("produce", "running"):
        assert sum(value(text, "streammap_task_duration_seconds_count", kernel=kernel, device=d)
                   for d in {t.device for t in plan.tasks if t.kernel == kernel}) == 6
    assert value(text, "streammap_tasks", state="done") == 12
    assert value(text, "streammap_tasks", state="pending") == 0
    assert not record.remaps


def test_streammap_run_of_a_pipeline_plan_records_telemetry_and_alerts(tmp_path):
    from streammap.cli import main
    from streammap.plan import write_plan
    path = tmp_path / "stream.py"
    path.write_text(STREAM)
    write_plan(streammap.compile(path, cluster=cluster_from_dict(GPUS), strategy="pipeline"), tmp_path / "plan.yaml")
    (tmp_path / "alerts.yaml").write_text("slow_task: {factor: 3, baseline: model, min_time: 5ms}\n"
                                          "remap: {enabled: true}\n")
    assert main(["run", str(tmp_path / "plan.yaml"), "--emulate", "--no-progress", "--no-history",
                 "--alerts", str(tmp_path / "alerts.yaml"), "--sample-interval", "0.01",
                 "-o", str(tmp_path / "out.npz")]) == 0
    record = read_run_record(tmp_path / "out.run.json")
    assert record.telemetry is not None and any(a.kind == "slow_task" for a in record.alerts)
    assert not record.remaps                    # remap enabled, but a pipeline runs to its end
    np.testing.assert_array_equal(np.load(tmp_path / "out.npz")["result_5"], [15.0])
