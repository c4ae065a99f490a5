"""The run side's named interfaces: the executors' step records, what the supervisor reads of an
executor (:class:`ExecutorView`), the monitoring options (:class:`MonitorOptions`) and the run
set-up and tear-down both backends share (:class:`RunSession`)."""

from __future__ import annotations

import dataclasses
import socket
import sys
import textwrap
import urllib.error
import urllib.request

import numpy as np
import pytest

import streammap
from streammap.cluster.model import cluster_from_dict
from streammap.monitoring.alerts import AlertConfigError, AlertManager, alert_config
from streammap.monitoring.metrics import RunMetrics
from streammap.monitoring.options import MonitorOptions, monitor_options
from streammap.monitoring.telemetry import DeviceInfo, Reading
from streammap.runrecord import read_run_record
from streammap.runtime import run_plan
from streammap.runtime.devices import check_devices, make_devices
from streammap.runtime.lifecycle import RunSession
from streammap.runtime.loader import load_program
from streammap.runtime.local import GpuStep, HostStep, LocalExecutor, SharedFree, Wait
from streammap.runtime.pipeline import PipelineExecutor
from streammap.runtime.ray.monitor import SegmentState
from streammap.runtime.shared import SharingExecutor
from streammap.runtime.supervisor import RunSupervisor, Trigger
from streammap.runtime.view import ExecutorView
from tests.helpers.fake_cupy import make_fake_cupy
from tests.helpers.plans import cpu_devices, make_plan, ref, task
from tests.helpers.telemetry import ScriptedSampler

FAN = """
import time

import numpy as np

def source():
    return np.arange(4.0)

def scale(x, k):
    time.sleep(0.005)                  # 5x its estimate (1 ms): a slow task
    return x * (k + 1)

def total(*xs):
    return sum(xs)
"""

STREAM = textwrap.dedent('''
    import time

    import numpy as np

    # @stream param
    ITEMS = 4

    # @stream kernel(flops=1e9, out=8)
    def produce(i):
        return np.array([float(i)])

    # @stream kernel(flops=1e9, out=8)
    def double(x):
        time.sleep(0.005)              # 50x its estimate (0.1 ms): a slow task
        return 2 * x

    # @stream pipeline(items=ITEMS)
    def stream(i):
        return double(produce(i))
    ''')

GPUS = {"name": "two", "nodes": [{"name": "n0", "link": {"bandwidth": "300 GB/s", "latency": "3us"},
        "devices": [{"name": f"gpu{i}", "kind": "gpu", "memory": "80GiB", "flops": "10 TFLOP/s",
                     "mem_bandwidth": "1000 GB/s"} for i in range(2)]}]}


def fan_plan(tmp_path, width=4):
    """``src`` on the first of two CPU devices, ``s0..`` alternating between them, ``sum`` on the second."""
    ids = [d["id"] for d in cpu_devices(2)]
    tasks = [task("src", "source", ids[0])]
    tasks += [task(f"s{k}", "scale", ids[k % 2], ref("src"), k) for k in range(width)]
    tasks.append(task("sum", "total", ids[1], *[ref(f"s{k}") for k in range(width)]))
    return make_plan(tmp_path, FAN, tasks, devices=cpu_devices(2), outputs=ref("sum"))


def executor_for(plan, cls=LocalExecutor, **kw):
    return cls(plan, load_program(plan).kernels, make_devices(check_devices(plan, emulate=True)), **kw)


def pipeline_plan(tmp_path):
    path = tmp_path / "stream.py"
    path.write_text(STREAM)
    plan = streammap.compile(path, cluster=cluster_from_dict(GPUS), strategy="pipeline")
    assert plan.pipeline is not None
    return plan


# -- step records --------------------------------------------------------------------------------

def test_each_task_compiles_into_a_step_record_named_by_its_fields(tmp_path):
    plan = fan_plan(tmp_path)
    ex = executor_for(plan)
    idx = ex.index
    _, d1 = (d["id"] for d in cpu_devices(2))
    for d, steps in ex.steps.items():
        assert all(isinstance(s, HostStep) for s in steps)
        assert [s.index for s in steps] == ex.order[d]            # plan order, per device
    first_on_d1 = ex.steps[d1][0]
    assert first_on_d1.index == idx["s1"]
    # it waits for src on the other device: one count that src's step counts down when done
    assert ex.pending[idx["s1"]] == 1 and first_on_d1.gpu_waits == ()
    (src_step,) = [s for s in ex.steps[plan.tasks[0].device] if s.index == idx["src"]]
    assert src_step.wakes == ((idx["s1"], ex.host_order.index(d1)),)
    assert ex.parked[ex.host_order.index(d1)] == idx["s1"]          # d1 starts parked on it
    # src's last consumers are on both devices: whichever finishes last frees it
    last_uses = [s for steps in ex.steps.values() for s in steps if s.shared_frees]
    assert sorted(s.index for s in last_uses) == [idx["s2"], idx["s3"]]
    (a,), (b,) = (s.shared_frees for s in last_uses)
    assert isinstance(a, SharedFree) and a.producer == b.producer == idx["src"]
    assert a.counter is b.counter and a.last == b.last == 1
    # sum, the output, keeps its result and frees the s_k it was the last to use; nobody waits on it
    (sum_step,) = [s for s in ex.steps[d1] if s.index == idx["sum"]]
    assert sum_step.store and sum_step.frees == tuple(idx[f"s{k}"] for k in range(4))
    assert sum_step.signal is None and sum_step.wakes == ()
    assert all(s.retries == 0 for steps in ex.steps.values() for s in steps)
    np.testing.assert_allclose(ex.run().outputs["result"], np.arange(4.0) * 10)


def test_a_step_runs_its_call_on_the_results(tmp_path):
    plan = fan_plan(tmp_path)
    ex = executor_for(plan)
    (src_step,) = [s for s in ex.steps[plan.tasks[0].device] if s.index == 0]
    np.testing.assert_allclose(src_step.call(ex.results), np.arange(4.0))


@pytest.mark.parametrize("share", [1.0, 0.5])
def test_gpu_tasks_compile_into_gpu_steps_that_run_alone_or_sharing_the_gpu(tmp_path, monkeypatch, share):
    monkeypatch.setitem(sys.modules, "cupy", make_fake_cupy(2))
    devices = [{"id": f"node0/gpu{i}", "kind": "gpu", "vendor": "nvidia", "index": i} for i in range(2)]
    tasks = [task("src", "source", "node0/gpu0")]
    tasks += [{**task(f"s{k}", "scale", f"node0/gpu{k % 2}", ref("src"), k), "share": share} for k in range(4)]
    tasks.append(task("sum", "total", "node0/gpu1", *[ref(f"s{k}") for k in range(4)]))
    plan = make_plan(tmp_path, FAN, tasks, devices=devices, outputs=ref("sum"))
    cls = SharingExecutor if share < 1 else LocalExecutor
    ex = cls(plan, load_program(plan).kernels, make_devices(check_devices(plan)))
    steps = [s for d in ex.steps.values() for s in d]
    assert all(isinstance(s, GpuStep) for s in steps) and len(steps) == len(plan.tasks)
    (sum_step,) = [s for s in steps if s.index == ex.index["sum"]]
    assert len(sum_step.arg_getters) == 4 and sum_step.kwarg_getters == []
    # of its deps on gpu0 (s0, s2) it waits for the last only: the stream runs them in order
    s2 = ex.index["s2"]
    assert sum_step.waits == (Wait(producer=s2, signal=ex.signals[s2], on_gpu=True),)
    out = ex.run()
    assert out.error is None
    np.testing.assert_allclose(out.outputs["result"], np.arange(4.0) * 10)


# -- the executor view ---------------------------------------------------------------------------

VIEW_MEMBERS = set(ExecutorView.__annotations__) | {"request_drain"}


class OnlyTheView:
    """An executor seen through :class:`ExecutorView` alone: reading anything else is recorded
    (and fails, as it would on an executor without it)."""

    def __init__(self, executor):
        self._executor = executor
        self.foreign: list[str] = []

    def __getattr__(self, name):
        if name not in VIEW_MEMBERS:
            self.foreign.append(name)
            raise AttributeError(f"the supervisor read {name!r}, which ExecutorView does not name")
        return getattr(self._executor, name)


def test_every_executor_the_supervisor_follows_is_an_executor_view(tmp_path):
    plan = fan_plan(tmp_path)
    assert isinstance(executor_for(plan), ExecutorView)
    assert isinstance(executor_for(plan, SharingExecutor), ExecutorView)
    assert isinstance(SegmentState(plan, finished=set()), ExecutorView)
    (tmp_path / "stream").mkdir()
    assert isinstance(executor_for(pipeline_plan(tmp_path / "stream"), PipelineExecutor), ExecutorView)
    assert not isinstance(object(), ExecutorView)


def _supervisor(plan, alerts, metrics):
    config = alert_config(alerts)
    return RunSupervisor(plan, {}, telemetry=False, metrics=metrics, alerts=AlertManager(config, metrics=metrics),
                         remap=config.remap)


def _segment(plan, kind):
    """A fresh segment of ``kind`` over ``plan`` and the call that runs it."""
    if kind == "ray segment":
        state = SegmentState(plan, finished=set())

        def collect():                     # what the driver's collect loop does as calls complete
            for k in range(len(plan.tasks)):
                state.finish(k, 0.1 * k, 0.1 * k + 0.05, 1)
        return state, collect
    ex = executor_for(plan, {"local": LocalExecutor, "sharing": SharingExecutor, "pipeline": PipelineExecutor}[kind])
    return ex, ex.run


@pytest.mark.parametrize("kind", ["local", "sharing", "pipeline", "ray segment"])
def test_the_supervisor_reads_nothing_but_the_view(tmp_path, kind):
    plan = pipeline_plan(tmp_path) if kind == "pipeline" else fan_plan(tmp_path)
    metrics = RunMetrics()
    # harvests: a slow-task rule against the model judges every finished task
    sup = _supervisor(plan, {"slow_task": {"factor": 2, "baseline": "model", "min_time": 0.0}}, metrics)
    ex, run = _segment(plan, kind)
    view = OnlyTheView(ex)
    sup.attach(view)
    run()
    sup.tick()
    sup.detach()
    sup.stop()
    assert view.foreign == []
    assert any(a["kind"] == "slow_task" for a in sup.alert_list())     # it did read the tasks
    # the hand-over of a last segment to the metrics (no rule could fire on it)
    sup = _supervisor(plan, {"slow_task": None}, metrics)
    ex, run = _segment(plan, kind)
    view = OnlyTheView(ex)
    sup.attach(view)
    run()
    sup.detach()
    sup.stop()
    assert view.foreign == []
    # a re-mapping decided before the segment started: it is asked to drain at once
    sup = _supervisor(plan, {"slow_task": None}, metrics)
    sup.trigger = Trigger("slow", 0.0, "decided earlier", [])
    ex, run = _segment(plan, kind)
    view = OnlyTheView(ex)
    sup.attach(view)
    assert ex.draining == (kind in ("local", "sharing"))     # the others cannot re-map: they ignore it
    run()
    sup.detach()
    sup.stop()
    assert view.foreign == []


# -- monitoring options --------------------------------------------------------------------------

def test_monitoring_keywords_map_into_the_options_object():
    assert monitor_options() == MonitorOptions()
    assert monitor_options(telemetry=False, interval=0.5, metrics_addr="0.0.0.0") == \
        MonitorOptions(telemetry=False, interval=0.5, metrics_addr="0.0.0.0")
    given = MonitorOptions(dcgm_names=True)
    assert monitor_options(given) is given
    with pytest.raises(dataclasses.FrozenInstanceError):
        given.telemetry = False
    assert MonitorOptions(interval=None).sample_interval > 0 and MonitorOptions(interval=0.3).sample_interval == 0.3
    assert MonitorOptions().watching and not MonitorOptions(telemetry=False).watching
    assert MonitorOptions(telemetry=False, alerts={}).watching


def test_bad_monitoring_arguments_are_refused_like_a_bad_call():
    with pytest.raises(TypeError, match="unexpected keyword argument 'telemetri'"):
        monitor_options(telemetri=False)
    with pytest.raises(TypeError, match="not both"):
        monitor_options(MonitorOptions(), interval=0.5)
    with pytest.raises(TypeError, match="MonitorOptions"):
        monitor_options({"telemetry": False})


def _fake_gpu_sampler():
    info = DeviceInfo(id="gpu0", kind="gpu", source="nvml", model="H200", uuid="GPU-1", memory_total=1e9)
    return ScriptedSampler([info], [[Reading("gpu0", utilization=0.9, memory_used=5e8, memory_total=1e9)]])


def test_run_takes_the_options_object_or_the_keywords_alike(tmp_path):
    plan = fan_plan(tmp_path)
    by_kw = run_plan(plan, progress=False, record_path=tmp_path / "kw.json", samplers=[_fake_gpu_sampler()],
                     interval=0.01)
    by_obj = run_plan(plan, progress=False, record_path=tmp_path / "obj.json",
                      monitoring=MonitorOptions(samplers=[_fake_gpu_sampler()], interval=0.01))
    by_api = streammap.run(plan, record=tmp_path / "api.json",
                           monitoring=MonitorOptions(samplers=[_fake_gpu_sampler()], interval=0.01))
    for out in (by_kw, by_obj, by_api):
        np.testing.assert_allclose(out["result"], np.arange(4.0) * 10)
    for name in ("kw", "obj", "api"):
        (dev,) = read_run_record(tmp_path / f"{name}.json").telemetry.devices
        assert dev.id == "gpu0" and dev.utilization[0] == 0.9
    streammap.run(plan, record=tmp_path / "off.json", monitoring=MonitorOptions(telemetry=False))
    assert read_run_record(tmp_path / "off.json").telemetry is None


def test_both_forms_at_once_are_refused_before_anything_runs(tmp_path):
    plan = fan_plan(tmp_path)
    with pytest.raises(TypeError, match="not both"):
        run_plan(plan, progress=False, outputs_path=tmp_path / "o.npz", monitoring=MonitorOptions(), telemetry=False)
    assert not (tmp_path / "o.npz").exists() and not (tmp_path / "o.run.json").exists()


# -- the run session -----------------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serving(port: int) -> bool:
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read()
        return True
    except urllib.error.URLError:
        return False


def test_a_session_closes_what_it_opened_in_reverse_order_also_on_an_error(tmp_path):
    plan = fan_plan(tmp_path)
    port = _free_port()
    session = RunSession(plan, MonitorOptions(metrics=port, samplers=[_fake_gpu_sampler()], interval=0.01),
                         backend="local", emulate=False, outputs_path=tmp_path / "o.npz")
    assert session.record_path == tmp_path / "o.run.json"     # beside the outputs by default
    closed = []
    with pytest.raises(RuntimeError, match="mid-run"):
        with session:
            assert _serving(port)
            session.defer(closed.append, "opened first")
            session.defer(lambda: closed.append("supervisor stopped" if session.supervisor is None else "running"))
            session.supervise({})
            assert session.supervisor is not None
            raise RuntimeError("mid-run")
    assert closed == ["supervisor stopped", "opened first"]
    assert session.supervisor is None and not _serving(port)
    assert session.telemetry is not None and session.telemetry["devices"][0]["id"] == "gpu0"


def test_bad_alert_rules_are_refused_before_a_metrics_port_opens(tmp_path):
    plan = fan_plan(tmp_path)
    port = _free_port()
    session = RunSession(plan, MonitorOptions(metrics=port, alerts={"temperature": "hot"}), backend="local",
                         emulate=False)
    with pytest.raises(AlertConfigError):
        with session:
            pass
    assert session.metrics is None
    with socket.socket() as s:                       # never opened: the port is still free
        s.bind(("127.0.0.1", port))


def test_a_session_writes_the_record_of_its_backend(tmp_path):
    plan = fan_plan(tmp_path)
    session = RunSession(plan, MonitorOptions(telemetry=False), backend="ray", emulate=True,
                         record_path=tmp_path / "r.json")
    with session:
        session.begin()
        outcome = executor_for(session.plan).run()
    out = session.finish(outcome)
    np.testing.assert_allclose(out["result"], np.arange(4.0) * 10)
    record = read_run_record(tmp_path / "r.json")
    assert record.backend == "ray" and record.emulate and record.started == session.started
    assert record.status == "ok" and record.telemetry is None and record.alerts == []
