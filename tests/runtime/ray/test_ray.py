"""The Ray executor and Ray discovery, on the session's emulated 2-node Ray cluster.

The cluster (``ray_cluster``, :mod:`tests.helpers.ray_cluster`): a head node labelled ``node0`` (no
GPU) and a worker node labelled ``node1`` with 2 fake GPUs; a private temp dir, a small object
store, fast health checks (so a removed node is seen dead quickly), usage stats off. The node-loss
test removes ``node1`` and is therefore marked to run after every other test of that cluster.
"""

from __future__ import annotations

import textwrap
import threading
import time

import numpy as np
import pytest

ray = pytest.importorskip("ray")

from streammap.errors import KernelError, StreamMapError  # noqa: E402
from streammap.runrecord import read_run_record  # noqa: E402
from streammap.runtime import run_plan  # noqa: E402
from tests.helpers.paths import SAMPLES  # noqa: E402
from tests.helpers.plans import FAN, make_plan, ref, task  # noqa: E402


@pytest.fixture
def cluster(ray_cluster):
    """The session's cluster, this process its driver (again, if a test before disconnected it)."""
    ray_cluster.connect()
    return ray_cluster


def devices2x2():
    return [{"id": f"node{n}/gpu{i}", "kind": "gpu", "vendor": "nvidia", "model": "H200"}
            for n in range(2) for i in range(2)]


PROG = FAN + """
def split(x):
    return x[:N // 2], x[N // 2:]

def join(a, b):
    return np.concatenate([b, a])

def broken(x):
    raise ValueError("kernel says no")

FLAKY = {"n": 0}
def flaky(x):
    FLAKY["n"] += 1
    if FLAKY["n"] < 3:
        raise RuntimeError("transient")
    return x + 1
"""


def fan(tmp_path, width=8):
    devs = [d["id"] for d in devices2x2()]
    tasks = [task("src", "source", devs[0])]
    tasks += [task(f"s{k}", "scale", devs[k % 4], ref("src"), k) for k in range(width)]
    tasks.append(task("sp", "split", devs[3], ref("s1")))
    tasks.append(task("j", "join", devs[1], ref("sp", 0), ref("sp", 1)))
    tasks.append(task("sum", "total", devs[2], *[ref(f"s{k}") for k in range(width)]))
    return make_plan(tmp_path, PROG, tasks, devices=devices2x2(), outputs={"tuple": [ref("sum"), ref("j")]})


def test_fan_plan_matches_local_executor_and_writes_record(cluster, tmp_path):
    plan = fan(tmp_path)
    local = run_plan(plan, emulate=True, progress=False, telemetry=False)
    out = run_plan(plan, emulate=True, backend="ray", outputs_path=tmp_path / "r.npz", progress=True)
    assert set(out) == set(local) == {"result_0", "result_1"}
    for k in out:
        np.testing.assert_array_equal(out[k], local[k])
    rec = read_run_record(tmp_path / "r.run.json")
    assert rec.backend == "ray" and rec.status == "ok"
    assert all(t.start is not None and t.finish >= t.start and t.attempts == 1 for t in rec.tasks)
    execs = {d.id: d.executor for d in rec.devices}
    assert "on Ray node node1" in execs["node1/gpu0"] and "on Ray node node0" in execs["node0/gpu0"]
    # every node's devices were sampled (emulated GPUs run on, and report, their node's CPU)
    series = {d.id: d for d in rec.telemetry.devices}
    assert set(series) == {"node0/cpu", "node1/cpu"}
    assert set(series["node1/cpu"].plan_devices) == {d for d in execs if d.startswith("node1/")}
    assert all(len(d.t) >= 2 and d.memory_used is not None for d in series.values())


def test_a_ray_run_feeds_metrics_and_alerts_as_a_local_run_does(cluster, tmp_path):
    """The driver follows the actors' calls and their devices' readings: task durations and
    states, device gauges named by Ray node, and the alert rules, in the metrics and the record."""
    from streammap.monitoring.metrics import RunMetrics
    plan = fan(tmp_path)
    # estimates of 0.1 us: every task is "slow" by the model
    plan = plan.model_copy(update={"tasks": [t.model_copy(update={"finish": t.start + 1e-7}) for t in plan.tasks]})
    metrics = RunMetrics()
    alerts = {"slow_task": {"factor": 1.5, "baseline": "model", "min_time": 0}, "cooldown": 0}
    run_plan(plan, emulate=True, backend="ray", record_path=tmp_path / "r.run.json", progress=False,
             metrics=metrics, alerts=alerts, interval=0.05)
    text = metrics.render()
    n = len(plan.tasks)
    assert f'streammap_tasks{{state="done"}} {float(n)}' in text
    counts = [float(line.split()[-1]) for line in text.splitlines()
              if line.startswith("streammap_task_duration_seconds_count")]
    assert sum(counts) == n
    for node in ("node0", "node1"):          # readings the actors sent by way of the run's board
        assert f'streammap_device_memory_used_bytes{{device="{node}/cpu"}}' in text
        assert f'streammap_device_info{{device="{node}/cpu"' in text
    rec = read_run_record(tmp_path / "r.run.json")
    slow = [a for a in rec.alerts if a.kind == "slow_task"]
    assert {a.task for a in slow} == {t.id for t in plan.tasks}
    assert all(a.device in {d["id"] for d in devices2x2()} for a in slow)


def test_kernel_error_after_retries_names_task_and_traceback(cluster, tmp_path):
    devs = [d["id"] for d in devices2x2()]
    tasks = [task("src", "source", devs[0]), task("ok", "flaky", devs[2], ref("src"), retries=2),
             task("bad", "broken", devs[3], ref("ok"), retries=1, site="prog.py:42"),
             task("after", "scale", devs[1], ref("bad"), 2)]
    plan = make_plan(tmp_path, PROG, tasks, devices=devices2x2(), outputs=ref("after"))
    out = tmp_path / "o.npz"
    from streammap.monitoring.metrics import RunMetrics
    metrics = RunMetrics()
    with pytest.raises(KernelError) as ei:
        run_plan(plan, emulate=True, backend="ray", outputs_path=out, progress=False, metrics=metrics)
    assert 'streammap_tasks{state="failed"} 1.0' in metrics.render()
    assert 'streammap_tasks{state="done"} 2.0' in metrics.render()
    err = ei.value
    assert err.task_id == "bad" and err.site == "prog.py:42" and err.device == "node1/gpu1"
    assert "kernel says no" in err.traceback_text and "in broken" in err.traceback_text
    assert not out.exists()
    rec = read_run_record(tmp_path / "o.run.json")
    assert rec.status == "failed" and "bad" in rec.error
    by = {t.id: t for t in rec.tasks}
    assert by["ok"].attempts == 3 and by["bad"].attempts == 2 and by["after"].start is None


def test_unknown_nodes_refused_without_emulate_and_gpus_counted(cluster, tmp_path):
    devs = [{"id": f"nodeX/gpu{i}", "kind": "gpu"} for i in range(2)]
    plan = make_plan(tmp_path, PROG, [task("src", "source", "nodeX/gpu0")], devices=devs, outputs=ref("src"))
    with pytest.raises(StreamMapError, match="not nodes of the Ray cluster"):
        run_plan(plan, backend="ray", progress=False)
    devs = [{"id": f"node0/gpu{i}", "kind": "gpu"} for i in range(2)]
    plan = make_plan(tmp_path, PROG, [task("src", "source", "node0/gpu0")], devices=devs, outputs=ref("src"))
    with pytest.raises(StreamMapError, match="has 0 GPU"):
        run_plan(plan, backend="ray", progress=False)


def test_a_task_whose_arguments_do_not_fit_its_kernel_is_refused_on_the_driver(cluster, tmp_path, capsys,
                                                                              monkeypatch):
    """``--backend ray`` refuses the local test's misfit plans with the local run's message (the plan
    file, the task's line, the kernel's signature) and exit 2, before any actor starts and with
    nothing written; each actor's own check used to surface as "cannot start the actor of ...",
    with the run already begun."""
    from streammap.cli import main
    from streammap.runtime.ray import executor
    from tests.helpers.cli import refused
    from tests.runtime.test_runtime_local import misfit_plans
    actor_class, started = executor._actor_class, []
    monkeypatch.setattr(executor, "_actor_class", lambda ray: started.append(ray) or actor_class(ray))
    for path, needles in misfit_plans(tmp_path):
        err = refused(["run", path, "--no-progress", "--no-history", "--backend", "ray", "--address", cluster.address,
                       "-o", tmp_path / "o.npz"], capsys, *needles)
        assert "cannot start the actor" not in err
        assert not (tmp_path / "o.npz").exists() and not (tmp_path / "o.run.json").exists()
    assert started == []
    # the same plan, its arguments fitting, runs on the cluster (the refusal was the arguments')
    assert main(["run", str(tmp_path / "plan.yaml"), "--no-progress", "--no-history", "--backend", "ray",
                 "--address", cluster.address, "-o", str(tmp_path / "o.npz")]) == 0
    assert started and (tmp_path / "o.npz").exists()


def test_discover_ray_names_nodes_by_label(cluster, tmp_path):
    from streammap.cluster.discover import write_cluster
    from streammap.cluster.model import load_cluster
    from streammap.cluster.ray import discover_ray, ray_node_names
    found = discover_ray(None, cluster_name="emu")
    assert [n.name for n in found.spec.nodes] == ["node0", "node1"]
    assert found.spec.network is not None
    write_cluster(found.spec, tmp_path / "cluster.yaml", found.notes)
    assert len(load_cluster(tmp_path / "cluster.yaml").devices) >= 2
    fake = [{"NodeID": "abcdef01", "Alive": True, "NodeManagerHostname": "box", "Labels": {}},
            {"NodeID": "12345678", "Alive": True, "NodeManagerHostname": "box", "Labels": {}},
            {"NodeID": "99999999", "Alive": True, "NodeManagerHostname": "solo", "Labels": {}}]
    assert ray_node_names(fake) == {"abcdef01": "box-abcdef", "12345678": "box-123456", "99999999": "solo"}


def test_a_split_axis_the_data_lacks_is_bad_input_at_the_call_site_on_ray_too(cluster, tmp_path):
    import streammap
    from tests.strategies.test_strategies import SPLIT_A_VECTOR_ALONG_COLUMNS
    (tmp_path / "vec.py").write_text(SPLIT_A_VECTOR_ALONG_COLUMNS)
    plan = streammap.compile(tmp_path / "vec.py", cluster=one_per_node(), strategy="data", history=False)
    with pytest.raises(StreamMapError) as ei:
        run_plan(plan, emulate=True, backend="ray", progress=False)
    err = ei.value
    assert err.path == str(tmp_path / "vec.py") and err.line == 19
    assert "~scatter" in err.message and "split=1 cuts along axis 1, but the argument has 1 dimension" in err.message
    assert err.hint.startswith("the kernel's split clause must name an axis")

def one_per_node():
    """A GPU on each of the Ray nodes' names (``node0``, ``node1``): plans hand results across nodes
    as on the 8-GPU cluster, with two device actors (worker processes, 1-2 s each to start on a
    2-core machine) per run; the 8-GPU cluster's node names, mapped onto the Ray nodes round-robin,
    are the CLI test's below."""
    from tests.placement.test_stateful_placement import TWO_BY_TWO
    return {**TWO_BY_TWO, "name": "one-per-node", "nodes": [{**n, "devices": n["devices"][:1]} for n in TWO_BY_TWO["nodes"]]}


def test_samples_agree_between_ray_and_local(cluster, tmp_path):
    import streammap
    from tests.samples.test_samples import CASES  # every sample, at the sizes the sample tests use
    for sample, _, params in CASES:
        # HEFT, not auto: what is checked is the two backends on one plan, and HEFT's plans use both
        # nodes for every sample (auto kept small_kernels on one), in 0.1-4 s, where auto's exact step
        # spent 34-86 s on tiled_cholesky and mlp_batches (the shared 2-core machine, loaded)
        plan = streammap.compile(SAMPLES / sample, cluster=one_per_node(), params=params, mapper="heft")
        assert len({t.device for t in plan.tasks}) == 2
        local = run_plan(plan, emulate=True, progress=False, telemetry=False)
        got = run_plan(plan, emulate=True, backend="ray", progress=False)
        assert set(got) == set(local)
        for k in got:
            np.testing.assert_allclose(got[k], local[k], rtol=1e-12, atol=0)


def test_a_multi_file_program_runs_on_ray_with_its_local_package(cluster, tmp_path):
    """Every actor imports the program's local package; an actor that does not find the program's
    folder (another machine) gets the files through the object store and loads its own copy."""
    import streammap
    from streammap.runtime.loader import ProgramFiles
    from streammap.runtime.ray.executor import _actor_class
    from tests.helpers.multifile import TWO_GPUS, plain_python, write_package
    prog = write_package(tmp_path / "project")
    plan = streammap.compile(prog, cluster=TWO_GPUS)
    got = run_plan(plan, emulate=True, backend="ray", progress=False, telemetry=False)
    np.testing.assert_array_equal(got["result"], plain_python(prog))
    elsewhere = plan.model_copy(update={"source": plan.source.model_copy(
        update={"path": str(tmp_path / "not-on-this-node" / "pkgprog.py")})})
    actor = _actor_class(ray).remote(elsewhere, ray.put(ProgramFiles.of(plan)), plan.devices[-1].id, "numpy", False)
    try:
        assert ray.get(actor.ping.remote())          # loaded: its kernels and their package imported
    finally:
        ray.kill(actor)


def test_a_stateful_kernel_gives_the_sequential_result_on_ray_under_every_strategy(cluster, tmp_path):
    import streammap
    from tests.placement.test_stateful_placement import BATCHES, STREAM, assert_results, sequential, write
    batches, stream = write(tmp_path, BATCHES), write(tmp_path, STREAM, "stream.py")
    # model places by the same co-location step as none and data (test_stateful_placement runs it);
    # HEFT rather than auto, whose search spent 5-23 s per compile here: the co-location step is the
    # compiler's, whatever the mapper, and HEFT alone spreads the calls (test_stateful_placement), so
    # the first assertion below still sees that step at work
    for path, call, strategy in ((batches, "main", "none"), (batches, "main", "data"), (stream, "stream", "pipeline")):
        plan = streammap.compile(path, cluster=one_per_node(), strategy=strategy, mapper="heft")
        # the state on one device, the other calls on both nodes
        assert len({t.device for t in plan.tasks if t.stateful}) == 1 and len({t.device for t in plan.tasks}) == 2
        assert_results(run_plan(plan, emulate=True, backend="ray", progress=False), sequential(path, call))


def test_cli_runs_a_plan_on_ray_and_agrees_with_the_local_run(cluster, tmp_path, hetero_cluster):
    import yaml

    from streammap.cli import main
    # the shared 2-node cluster's node names (a100, v100: not the Ray nodes', mapped onto them
    # round-robin), one GPU each: two device actors to start
    spec = yaml.safe_load(hetero_cluster.read_text())
    for node in spec["nodes"]:
        node["devices"] = node["devices"][:1]
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump(spec))
    plan = tmp_path / "plan.yaml"
    assert main(["compile", str(SAMPLES / "fm_radio.py"), "--cluster", str(tmp_path / "cluster.yaml"), "-D", "N=2048",
                 "-o", str(plan), "--no-history"]) == 0
    assert main(["run", str(plan), "--emulate", "--no-progress", "--no-history", "-o", str(tmp_path / "local.npz")]) == 0
    assert main(["run", str(plan), "--emulate", "--no-progress", "--no-history", "--backend", "ray",
                 "--address", cluster.address, "-o", str(tmp_path / "ray.npz")]) == 0
    np.testing.assert_allclose(np.load(tmp_path / "ray.npz")["result"], np.load(tmp_path / "local.npz")["result"],
                               rtol=1e-12, atol=0)
    import json
    assert json.loads((tmp_path / "ray.run.json").read_text())["backend"] == "ray"


LOSS = """
import os
import time
import numpy as np

LOG = %r

def _note(tag):
    import ray
    with open(LOG, "a") as f:
        f.write(f"{tag} {ray.get_runtime_context().get_node_id()}\\n")

def leaf(k):
    time.sleep(0.05)
    _note(f"leaf{k}")
    return np.full(8, float(k))

def step(x, k):
    time.sleep(0.05)
    _note(f"step{k}")
    return x * 2 + k

def total(*xs):
    _note("total")
    return sum(xs)
"""


SHARED_NAPS = """
import threading, time
import numpy as np

LOCK = threading.Lock()
NOW = [0.0]
PEAK = [0.0]

def nap(j):
    with LOCK:
        NOW[0] += 0.5
        PEAK[0] = max(PEAK[0], NOW[0])
    time.sleep(0.05)
    with LOCK:
        NOW[0] -= 0.5
    return np.array([float(j)])

def twice(x):
    return x * 2

def peak(*xs):
    return np.array([PEAK[0], sum(float(x[0]) for x in xs)])
"""


def test_co_located_tasks_run_at_once_in_one_actor_within_a_whole_device(cluster, tmp_path):
    naps = [{**task(f"n{j}", "nap", "node0/gpu0", j), "share": 0.5} for j in range(6)]
    doubled = [{**task(f"d{j}", "twice", "node0/gpu0", ref(f"n{j}")), "share": 0.5} for j in range(6)]
    plan = make_plan(tmp_path, SHARED_NAPS, naps + doubled + [task("p", "peak", "node0/gpu0",
                                                                   *[ref(f"d{j}") for j in range(6)])],
                     devices=devices2x2(), outputs=ref("p"))
    out = run_plan(plan, emulate=True, backend="ray", outputs_path=tmp_path / "r.npz", progress=False)
    assert out["result"][0] == pytest.approx(1.0)            # two naps at once, never three
    assert out["result"][1] == 2 * sum(range(6))
    rec = read_run_record(tmp_path / "r.run.json")
    naps_run = sorted((t.start, t.finish) for t in rec.tasks if t.kernel == "nap")
    overlap = max(sum(1 for s, f in naps_run if s <= a < f) for a, _ in naps_run)
    assert overlap == 2


def test_an_oversubscribed_plan_spills_on_ray_exactly_as_locally(cluster, tmp_path):
    import streammap
    from tests.placement.test_sharing import ACTIVATIONS, MIB8, direct_activations, tiny

    (tmp_path / "prog.py").write_text(textwrap.dedent(ACTIVATIONS))
    plan = streammap.compile(tmp_path / "prog.py", cluster=tiny(10 * MIB8, F=1.5), history=False)
    from streammap.cli import main
    from streammap.plan import write_plan
    write_plan(plan, tmp_path / "p.yaml")
    run_plan(plan, emulate=True, outputs_path=tmp_path / "l.npz", progress=False, telemetry=False)
    assert main(["run", str(tmp_path / "p.yaml"), "--emulate", "--no-progress", "--backend", "ray",
                 "--address", cluster.address, "-o", str(tmp_path / "r.npz")]) == 0
    np.testing.assert_array_equal(np.load(tmp_path / "r.npz")["result"], direct_activations())
    local = read_run_record(tmp_path / "l.run.json").devices[0].spill
    ray_ = read_run_record(tmp_path / "r.run.json").devices[0].spill
    assert ray_["spilled_bytes"] > 0 and ray_["seconds"] > 0 and ray_["overflow"] == 0.0
    for key in ("spilled_bytes", "restored_bytes", "spills", "restores"):
        assert ray_[key] == local[key]
    assert plan.mapper.spill_bytes == ray_["spilled_bytes"] + ray_["restored_bytes"]


def test_results_exported_to_another_node_stay_right_when_their_device_copy_spills(cluster, tmp_path):
    row = 64 * 8                                              # one result: N = 64 doubles
    devices = [{"id": "node0/gpu0", "kind": "gpu", "vendor": "nvidia", "memory": 3 * row},
               {"id": "node1/gpu0", "kind": "gpu", "vendor": "nvidia", "memory": 1e9}]
    tasks = [{**task("src", "source", "node0/gpu0"), "out": row}]
    # co-located (threaded actor, admission by share) and spilling at once
    tasks += [{**task(f"s{k}", "scale", "node0/gpu0", ref("src"), k), "out": row, "share": 0.5} for k in range(6)]
    tasks.append(task("there", "total", "node1/gpu0", *[ref(f"s{k}") for k in range(6)]))
    chain = "s5"
    for k in range(4, -1, -1):                                # needs them back one by one, on node0
        tasks.append({**task(f"c{k}", "total", "node0/gpu0", ref(chain), ref(f"s{k}")), "out": row})
        chain = f"c{k}"
    plan = make_plan(tmp_path, FAN, tasks, devices=devices, outputs={"tuple": [ref("there"), ref(chain)]})
    plan.cluster.spec = {"name": "test", "memory_oversubscription": 3.0}
    out = run_plan(plan, emulate=True, backend="ray", outputs_path=tmp_path / "r.npz", progress=False,
                   telemetry=False)
    want = np.arange(64.0) * sum(range(1, 7))
    np.testing.assert_array_equal(out["result_0"], want)
    np.testing.assert_array_equal(out["result_1"], want)
    spill = {d.id: d.spill for d in read_run_record(tmp_path / "r.run.json").devices}
    assert spill["node0/gpu0"]["spilled_bytes"] >= row and spill["node0/gpu0"]["restored_bytes"] >= row
    assert spill["node0/gpu0"]["overflow"] == 0.0 and spill["node1/gpu0"]["spilled_bytes"] == 0


def test_monitor_shows_every_node_of_the_ray_cluster(cluster, capsys):
    """``streammap monitor --ray``: each node's devices, sampled there, named by node."""
    from streammap.cli import main
    assert main(["monitor", "--ray", "--once", "--interval", "0.1"]) == 0
    out = capsys.readouterr().out
    assert "devices of the Ray cluster at auto" in out
    rows = {line.split()[1]: line for line in out.splitlines() if "/cpu" in line}
    assert set(rows) == {"node0/cpu", "node1/cpu"}
    assert all("Ray node" in r and "ok" in r for r in rows.values())
    assert main(["monitor", "--ray", "--cluster", "c.yaml", "--once"]) == 2      # one or the other


GUARDED = FAN + """
import time

def bump(x):
    x += 1
    return x

def sneaky(x):
    x.setflags(write=True)
    x[0] = -1.0
    return x.sum()

# @stream kernel(timeout=0.3)
def hang(x):
    time.sleep(3)
    return x
"""


@pytest.mark.parametrize("producer", ["node1/gpu0", "node0/gpu0"])     # same actor; another node's
def test_a_kernel_writing_its_input_on_ray_fails_naming_the_argument(cluster, tmp_path, producer):
    tasks = [task("src", "source", producer), task("w", "bump", "node1/gpu0", ref("src")),
             task("r", "total", "node1/gpu1", ref("src"))]
    plan = make_plan(tmp_path, GUARDED, tasks, devices=devices2x2(), outputs={"tuple": [ref("w"), ref("r")]})
    with pytest.raises(KernelError) as ei:
        run_plan(plan, emulate=True, backend="ray", progress=False, telemetry=False)
    assert ei.value.task_id == "w"
    assert "kernel 'bump' wrote into its argument 'x' in place, in task w" in ei.value.traceback_text
    assert "copy first: x = x.copy()" in ei.value.traceback_text


def test_a_task_past_its_timeout_on_ray_is_retried_then_fails(cluster, tmp_path):
    tasks = [task("src", "source", "node0/gpu0"), {**task("h", "hang", "node1/gpu0", ref("src"), retries=1),
                                                   "timeout": 0.3}]
    plan = make_plan(tmp_path, GUARDED, tasks, devices=devices2x2(), outputs=ref("h"))
    with pytest.raises(KernelError) as ei:
        run_plan(plan, emulate=True, backend="ray", progress=False, telemetry=False, record_path=tmp_path / "r.run.json")
    text = ei.value.traceback_text
    assert "kernel 'hang' ran past its timeout of 0.3 s (timeout= at prog.py:" in text and "in task h" in text
    assert {t.id: t.attempts for t in read_run_record(tmp_path / "r.run.json").tasks}["h"] == 2


def test_check_inputs_on_ray(cluster, tmp_path):
    # on the same actor: a read-only view of a writable array, which the kernel can flip back
    tasks = [task("src", "source", "node1/gpu0"), task("s", "sneaky", "node1/gpu0", ref("src"))]
    plan = make_plan(tmp_path, GUARDED, tasks, devices=devices2x2(), outputs=ref("s"))
    with pytest.raises(KernelError) as ei:
        run_plan(plan, emulate=True, backend="ray", progress=False, telemetry=False, check_inputs=True)
    assert "kernel 'sneaky' changed its argument 'x' in place" in ei.value.traceback_text


@pytest.mark.removes_a_ray_node
def test_node_loss_mid_run_recovers_and_reruns_only_what_was_lost(cluster, tmp_path):
    """Runs last of the Ray tests: removes node1 (a node the fixture started) while its tasks run."""
    log_file = tmp_path / "calls.log"
    devs = [d["id"] for d in devices2x2()]
    tasks, finals = [], []
    for k in range(8):                   # 8 chains of 6 steps, each chain on one device
        d = devs[k % 4]
        tasks.append(task(f"leaf{k}", "leaf", d, k))
        prev = f"leaf{k}"
        for s in range(6):
            tid = f"step{k * 10 + s}"
            tasks.append(task(tid, "step", d, ref(prev), k * 10 + s))
            prev = tid
        finals.append(prev)
    tasks.append(task("total", "total", devs[0], *[ref(f) for f in finals]))
    plan = make_plan(tmp_path, LOSS % str(log_file), tasks, devices=devices2x2(), outputs=ref("total"))
    expected = sum(_chain(k) for k in range(8))
    victim = cluster.worker.node_id
    box = {}

    def go():
        try:
            box["out"] = run_plan(plan, emulate=True, backend="ray", outputs_path=tmp_path / "o.npz",
                                  progress=False, max_recoveries=1)
        except BaseException as exc:      # noqa: BLE001
            box["err"] = exc

    th = threading.Thread(target=go)
    th.start()
    deadline = time.time() + 60
    while time.time() < deadline:         # kill once node1 has finished a few tasks
        lines = log_file.read_text().splitlines() if log_file.exists() else []
        if sum(1 for x in lines if x.split()[1] == victim) >= 4:
            break
        time.sleep(0.02)
    cluster.remove_worker()
    th.join(120)
    assert not th.is_alive()
    assert "err" not in box, box.get("err")
    np.testing.assert_allclose(box["out"]["result"], expected)
    rec = read_run_record(tmp_path / "o.run.json")
    assert rec.status == "ok" and len(rec.remaps) == 1
    r = rec.remaps[0]
    assert set(r.lost) == {"node1/gpu0", "node1/gpu1"} and "recovered in" in r.reason
    runs: dict[str, list[str]] = {}
    for line in log_file.read_text().splitlines():
        tag, node = line.split()
        runs.setdefault(tag, []).append(node)
    assert set(runs) == {t["kernel"] if t["kernel"] == "total" else t["id"] for t in tasks}
    for tag, nodes in runs.items():
        if len(nodes) > 1:                # only tasks that had run on the lost node run again
            assert nodes[0] == victim and all(n != victim for n in nodes[1:]), (tag, nodes)
        if nodes[0] != victim:
            assert len(nodes) == 1, (tag, nodes)
    assert all(t.device.startswith("node0/") for t in rec.tasks if t.id in runs and len(runs[t.id]) > 1)


def _chain(k):
    x = np.full(8, float(k))
    for s in range(6):
        x = x * 2 + (k * 10 + s)
    return x
