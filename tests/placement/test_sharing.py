"""GPU sharing as a user relies on it: tasks with ``share < 1`` run co-located, never more than a
whole device at once, with the same results as serial runs; memory oversubscription plans beyond a
device's memory and the runtime spills to keep within it, bit for bit."""

import textwrap

import numpy as np
import pytest
import yaml

import streammap
from streammap.cli import main
from streammap.cost.model import CostModel
from streammap.errors import MappingError, PlanError
from streammap.placement.sharing import share_schedule, simulate_shared, stack_offsets
from streammap.placement.spilling import SpillBook
from streammap.plan import read_plan, share_profile, write_plan
from streammap.runrecord import read_run_record
from tests.helpers.compiled import compiled
from tests.helpers.paths import SAMPLES
from tests.helpers.plans import FAN, make_plan, ref, task

SWEEP = SAMPLES / "small_kernels.py"
SMALL = {"JOBS": 16, "CELLS": 64, "STEPS": 4}


def cluster(gpus=2, memory="80GiB", **extra):
    return {"name": "lab", **extra, "nodes": [{
        "name": "n0", "link": {"bandwidth": "300 GB/s", "latency": "3us"},
        "devices": [{"name": f"gpu{i}", "kind": "gpu", "vendor": "nvidia", "model": "A100", "memory": memory,
                     "flops": "19.5 TFLOP/s", "mem_bandwidth": "2039 GB/s"} for i in range(gpus)]}]}


def peak_shares(plan):
    """Per device: the largest share in use at once, and the most tasks at once."""
    out = {}
    for d, ts in plan.tasks_by_device().items():
        steps = share_profile((t.start, t.finish, t.share) for t in ts)
        out[d] = (max((u for _, u, _ in steps), default=0.0), max((n for _, _, n in steps), default=0))
    return out


# -- the plan ----------------------------------------------------------------------------------

def test_quarter_share_kernels_run_four_at_a_time_and_the_plan_is_shorter():
    shared = compiled(SWEEP, cluster=cluster(), params=SMALL, history=False)
    whole = compiled(SWEEP, cluster=cluster(), params={**SMALL, "SHARE": 1}, history=False)
    peaks = peak_shares(shared)
    assert max(n for _, n in peaks.values()) == 4
    assert all(u <= 1.0 + 1e-9 for u, _ in peaks.values())
    assert all(n == 1 for _, n in peak_shares(whole).values())
    assert shared.mapper.estimated_makespan <= 0.5 * whole.mapper.estimated_makespan
    assert {t.share for t in shared.tasks if t.kernel == "rod"} == {0.25}


def test_a_cpu_device_runs_one_task_at_a_time_whatever_the_share(tmp_path):
    # NumPy kernels hold the GIL between calls: on a CPU, co-located tasks would take turns, so a
    # share there is the whole device, in the estimate, the plan and the run
    spec = cluster(gpus=1)
    spec["nodes"][0]["devices"].append({"name": "cpu", "kind": "cpu", "memory": "64GiB",
                                        "flops": "1 TFLOP/s", "mem_bandwidth": "100 GB/s"})
    plan = compiled(SWEEP, cluster=spec, params=SMALL, history=False, mapper="least-loaded")
    on = {d: {t.share for t in ts if t.kernel == "rod"} for d, ts in plan.tasks_by_device().items()}
    assert on["n0/cpu"] == {1.0} and on["n0/gpu0"] == {0.25}
    assert peak_shares(plan)["n0/cpu"][1] == 1
    cpu_only = {"name": "host", "nodes": [{"name": "n0", "devices": [
        {"name": "cpu", "kind": "cpu", "memory": "64GiB", "flops": "1 TFLOP/s", "mem_bandwidth": "100 GB/s"}]}]}
    serial = compiled(SWEEP, cluster=cpu_only, params=SMALL, history=False)
    assert all(t.share == 1.0 for t in serial.tasks) and peak_shares(serial)["n0/cpu"][1] == 1
    path = tmp_path / "p.yaml"
    write_plan(serial, path)
    from streammap.runtime import run_plan
    out = run_plan(read_plan(path), progress=False, telemetry=False)
    assert out["result"].shape == (SMALL["JOBS"], SMALL["CELLS"])


def test_tasks_without_share_are_placed_exactly_as_before(tmp_path):
    plan = compiled(SWEEP, cluster=cluster(), params={**SMALL, "SHARE": 1}, history=False)
    heft = compiled(SWEEP, cluster=cluster(), params={**SMALL, "SHARE": 1}, history=False, mapper="heft")
    assert plan.mapper.name.startswith("auto") and "+share" not in plan.mapper.name
    assert heft.mapper.heft_makespan == heft.mapper.estimated_makespan
    write_plan(plan, tmp_path / "p.yaml")
    text = (tmp_path / "p.yaml").read_text()
    assert "share:" not in text and "out:" not in text       # old plans and new ones read the same


def test_max_tasks_per_device_bounds_how_many_run_at_once():
    plan = compiled(SWEEP, cluster=cluster(max_tasks_per_device=2), params=SMALL, history=False)
    assert max(n for _, n in peak_shares(plan).values()) == 2


def test_binpack_piles_fractional_tasks_onto_few_devices_and_spread_spreads_them():
    params = {**SMALL, "JOBS": 4}
    packed = compiled(SWEEP, cluster=cluster(gpus=4), params=params, history=False, mapper="binpack")
    spread = compiled(SWEEP, cluster=cluster(gpus=4), params=params, history=False, mapper="spread")
    rods = lambda p: {t.device for t in p.tasks if t.kernel == "rod"}      # noqa: E731
    assert len(rods(packed)) == 1 and len(rods(spread)) == 4
    assert packed.mapper.name == "binpack+share" and spread.mapper.name == "spread+share"


def test_the_share_aware_schedule_is_what_the_runtime_admission_reproduces():
    from streammap.compiler import load_source_graph, resolve_cluster
    graph = load_source_graph(SWEEP, {**SMALL, "JOBS": 11})
    cost = CostModel(graph, resolve_cluster(cluster(gpus=3, max_tasks_per_device=3)))
    s = share_schedule(cost, policy="eft")
    again = simulate_shared(cost, s.device, s.order())
    np.testing.assert_array_equal(again.start, s.start)
    np.testing.assert_array_equal(again.finish, s.finish)


class LastDevice:
    """A custom placement policy (used by class path below): always the last feasible device."""

    def choose(self, task, feasible, state):
        return int(feasible[-1])


@pytest.mark.parametrize("mapper", ["least-loaded", "fastest", "heft-plain", "tests.placement.test_sharing:LastDevice"])
def test_whole_device_mappers_keep_their_devices_and_are_timed_as_the_runtime_co_locates(mapper):
    from streammap.compiler import load_source_graph, resolve_cluster
    from streammap.mappers import get_mapper
    cost = CostModel(load_source_graph(SWEEP, SMALL), resolve_cluster(cluster()))
    own = get_mapper(mapper)(cost)                    # its own schedule: a device's tasks one at a time
    plan = compiled(SWEEP, cluster=cluster(), params=SMALL, history=False, mapper=mapper)
    assert plan.mapper.name.endswith("+share")
    assert {t.id: t.device for t in plan.tasks} == {cost.tasks[i]: cost.devices[int(own.device[i])].id
                                                    for i in range(cost.n_tasks)}
    assert max(n for _, n in peak_shares(plan).values()) == 4
    assert plan.mapper.estimated_makespan <= 0.5 * own.makespan
    # the runtime admits each device's tasks in plan order by share: replaying that gives the plan's times
    pos = {d.id: j for j, d in enumerate(cost.devices)}
    device = np.array([pos[{t.id: t.device for t in plan.tasks}[tid]] for tid in cost.tasks])
    order = [[cost.pos[t.id] for t in plan.tasks if t.device == d.id] for d in cost.devices]
    again = simulate_shared(cost, device, order)
    np.testing.assert_allclose(again.start, [{t.id: t.start for t in plan.tasks}[tid] for tid in cost.tasks],
                               rtol=1e-9, atol=1e-12)
    assert again.makespan == pytest.approx(plan.mapper.estimated_makespan)


@pytest.mark.parametrize("mapper, gpu_policy", [("binpack", "binpack"), ("least-loaded", "spread")])
def test_a_sharing_plan_exported_to_kubernetes_keeps_its_policys_hami_annotation(mapper, gpu_policy):
    from streammap.k8s.resources import device_groups
    plan = compiled(SWEEP, cluster=cluster(), params=SMALL, history=False, mapper=mapper)
    assert plan.mapper.name == f"{mapper}+share"
    assert {g.annotations.get("hami.io/gpu-scheduler-policy") for g in device_groups(plan)} == {gpu_policy}


def test_re_mapping_a_sharing_plan_keeps_shares_and_co_locates_the_rest(tmp_path):
    from streammap.plan import validate_plan
    from streammap.remap import remap_plan
    plan = compiled(SWEEP, cluster=cluster(), params=SMALL, history=False)
    first = [t for t in plan.tasks if t.kernel == "rod"][:6]
    rod_time = first[0].finish - first[0].start
    # the run is ahead of the plan: the finished rods' estimates reach past "now"
    now = 0.5 * rod_time
    res = remap_plan(plan, {t.id: t.device for t in first}, now=now, lost=["n0/gpu1"])
    validate_plan(res.plan)                               # the share check passes
    new = {t.id: t for t in res.plan.tasks}
    assert {t.share for t in res.plan.tasks if t.kernel == "rod"} == {0.25}
    kept = [t for t in first if t.id not in res.rerun]
    assert kept and all(new[t.id].finish <= now for t in kept)     # done by now
    assert all(t.device == "n0/gpu1" for t in first if t.id in res.rerun)
    rest = [new[k] for k in res.unfinished]
    assert all(t.device == "n0/gpu0" and t.start >= now for t in rest)
    rods_left = [t for t in rest if t.kernel == "rod"]
    assert max(n for _, _, n in share_profile((t.start, t.finish, t.share) for t in rods_left)) == 4
    # four at a time: the rest takes a quarter of running them one by one (plus the gather)
    serial = sum(t.finish - t.start for t in rest)
    assert res.estimated_makespan - now <= 0.5 * serial
    assert res.plan.mapper.name == f"{plan.mapper.name}+remap"


def test_a_sharing_run_re_mapped_off_a_slow_device_keeps_shares_and_gives_the_same_result(tmp_path):
    from collections import Counter

    from streammap.plan import validate_plan
    from streammap.runtime import run_plan
    from tests.runtime.test_remap import CLUSTER, PROGRAM
    src = PROGRAM.replace("# @stream kernel(flops=1e10, out=32)", "# @stream kernel(flops=1e10, out=32, share=0.5)")
    assert src != PROGRAM
    (tmp_path / "prog.py").write_text(textwrap.dedent(src))
    plan = streammap.compile(tmp_path / "prog.py", cluster=CLUSTER, params={"N": 64}, mapper="heft", history=False)
    assert Counter(t.device for t in plan.tasks)["node0/gpu1"] >= 5
    alerts = {"remap": {"enabled": True, "factor": 2.0, "window": 2, "min_task_time": 0.002}}
    out = run_plan(plan, emulate=True, progress=False, record_path=tmp_path / "r.json", interval=0.01,
                   alerts=alerts)
    np.testing.assert_allclose(out["result"], np.full(4, sum(range(64))))
    record = read_run_record(tmp_path / "r.json")
    assert record.status == "ok" and len(record.remaps) >= 1
    assert {t.share for t in record.tasks if t.kernel == "work"} == {0.5}
    # the final plan's estimates (the record's) keep to the shares: two work tasks at once, never more
    final = plan.model_copy(update={"tasks": [
        next(p for p in plan.tasks if p.id == t.id).model_copy(update={
            "device": t.device, "start": t.estimated_start, "finish": t.estimated_finish})
        for t in record.tasks]})
    validate_plan(final)
    planned = {t.id: t.start for t in plan.tasks}
    remapped = [t for t in final.tasks if t.kernel == "work" and t.start != planned[t.id]]
    assert len(remapped) >= 4
    for d in {t.device for t in remapped}:           # the re-mapped rest also runs two at a time
        on = [t for t in remapped if t.device == d]
        assert max(n for _, _, n in share_profile((t.start, t.finish, t.share) for t in on)) == min(2, len(on))


def test_re_mapping_a_hand_made_sharing_plan_keeps_its_shares(tmp_path):
    from streammap.plan import validate_plan
    from streammap.remap import remap_plan
    devices = [{"id": f"node0/gpu{i}", "kind": "gpu", "vendor": "nvidia"} for i in range(2)]
    tasks = [task("src", "source", "node0/gpu0")]
    tasks += [{**task(f"s{k}", "scale", f"node0/gpu{k % 2}", ref("src"), k), "share": 0.5} for k in range(6)]
    tasks.append(task("sum", "total", "node0/gpu1", *[ref(f"s{k}") for k in range(6)]))
    plan = make_plan(tmp_path, FAN, tasks, devices=devices, outputs=ref("sum"))
    res = remap_plan(plan, {"src": "node0/gpu0"}, now=0.0005, lost=["node0/gpu1"])
    assert res.ir == "plan"
    validate_plan(res.plan)
    scales = [t for t in res.plan.tasks if t.kernel == "scale"]
    assert {t.share for t in scales} == {0.5} and {t.device for t in scales} == {"node0/gpu0"}
    assert max(n for _, _, n in share_profile((t.start, t.finish, t.share) for t in scales)) == 2


def test_shares_above_one_on_a_device_are_refused_when_the_plan_is_read(tmp_path):
    plan = compiled(SWEEP, cluster=cluster(gpus=1), params=SMALL, history=False)
    write_plan(plan, tmp_path / "p.yaml")
    data = yaml.safe_load((tmp_path / "p.yaml").read_text())
    rods = [t for t in data["tasks"] if t["kernel"] == "rod"]
    rods[0]["share"] = 0.5                                  # with three others of 0.25 at once: 1.25
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(PlanError) as err:
        read_plan(tmp_path / "bad.yaml")
    msg = err.value.format()
    assert "n0/gpu0 is oversubscribed" in msg and "shares sum to 1.25 > 1" in msg and rods[0]["id"] in msg
    assert main(["run", str(tmp_path / "bad.yaml"), "--emulate", "-o", str(tmp_path / "o.npz")]) == 2
    assert not (tmp_path / "o.npz").exists()


def test_a_share_outside_zero_to_one_is_a_plan_error(tmp_path):
    plan = compiled(SWEEP, cluster=cluster(gpus=1), params=SMALL, history=False)
    write_plan(plan, tmp_path / "p.yaml")
    text = (tmp_path / "p.yaml").read_text().replace("share: 0.25", "share: 1.5", 1)
    (tmp_path / "bad.yaml").write_text(text)
    with pytest.raises(PlanError, match="share"):
        read_plan(tmp_path / "bad.yaml")


def test_the_gantt_chart_stacks_co_located_tasks(tmp_path):
    assert stack_offsets([(0, 1, 0.25), (0, 1, 0.25), (0, 2, 0.5), (1, 2, 0.25)]) == [0.0, 0.25, 0.5, 0.0]
    plan = compiled(SWEEP, cluster=cluster(), params=SMALL, history=False)
    write_plan(plan, tmp_path / "p.yaml")
    assert main(["show", str(tmp_path / "p.yaml"), "--gantt", str(tmp_path / "g.png")]) == 0
    assert (tmp_path / "g.png").stat().st_size > 0


def test_show_says_how_many_tasks_share_each_device(tmp_path, capsys):
    plan = compiled(SWEEP, cluster=cluster(), params=SMALL, history=False)
    write_plan(plan, tmp_path / "p.yaml")
    assert main(["show", str(tmp_path / "p.yaml")]) == 0
    assert "up to 4 at once, peak share 100%" in capsys.readouterr().out


# -- running co-located tasks ------------------------------------------------------------------

def test_co_located_tasks_give_the_same_results_as_serial_ones(tmp_path):
    shared = compiled(SWEEP, cluster=cluster(), params=SMALL, history=False)
    serial = compiled(SWEEP, cluster=cluster(), params={**SMALL, "SHARE": 1}, history=False)
    a = streammap.run(shared, emulate=True, outputs=tmp_path / "a.npz", progress=False, telemetry=False)
    b = streammap.run(serial, emulate=True, outputs=tmp_path / "b.npz", progress=False, telemetry=False)
    np.testing.assert_array_equal(a["result"], b["result"])


SLEEPY = """
import threading, time
import numpy as np

# @stream param
JOBS = 8
# @stream param
SHARE = 0.5

LOCK = threading.Lock()
NOW = [0.0]
PEAK = [0.0]


# @stream kernel(flops=1e12, out=8, share=SHARE)
def nap(j):
    with LOCK:
        NOW[0] += SHARE
        PEAK[0] = max(PEAK[0], NOW[0])
    time.sleep(0.05)
    with LOCK:
        NOW[0] -= SHARE
    return np.array([float(j)])


# @stream kernel(flops=1e3, out=8)
def peak(*xs):
    return np.array([PEAK[0], sum(float(x[0]) for x in xs)])


# @stream graph
def main():
    return peak(*[nap(j) for j in range(JOBS)])
"""


def test_the_executor_runs_co_located_tasks_at_once_but_never_beyond_a_whole_device(tmp_path):
    (tmp_path / "prog.py").write_text(textwrap.dedent(SLEEPY))
    one = {"name": "one", "nodes": [{"name": "n0", "devices": [{"name": "gpu0", "kind": "gpu", "flops": "20 TFLOP/s"}]}]}
    plan = streammap.compile(tmp_path / "prog.py", cluster=one, history=False)
    out = streammap.run(plan, emulate=True, outputs=tmp_path / "o.npz", progress=False, telemetry=False)
    assert out["result"][0] == pytest.approx(1.0)        # two at once (0.5 + 0.5), never three
    assert out["result"][1] == sum(range(8))
    rec = read_run_record(tmp_path / "o.run.json")
    naps = [t for t in rec.tasks if t.kernel == "nap"]
    assert {t.share for t in naps} == {0.5}
    # every nap ran beside another: rounds of two, not one at a time (the time this saves is
    # measured by benchmarks/sharing.py)
    assert all(any(o is not t and o.start < t.finish and t.start < o.finish for o in naps) for t in naps)


def test_a_failing_co_located_kernel_stops_the_run_with_its_task(tmp_path):
    src = textwrap.dedent(SLEEPY).replace("    time.sleep(0.05)\n", "    time.sleep(0.01)\n    if j == 5:\n        raise ValueError('bad rod')\n")
    (tmp_path / "prog.py").write_text(src)
    one = {"name": "one", "nodes": [{"name": "n0", "devices": [{"name": "gpu0", "kind": "gpu"}]}]}
    plan = streammap.compile(tmp_path / "prog.py", cluster=one, history=False)
    write_plan(plan, tmp_path / "p.yaml")
    assert main(["run", str(tmp_path / "p.yaml"), "--emulate", "-o", str(tmp_path / "o.npz"), "--no-progress"]) == 1
    assert not (tmp_path / "o.npz").exists()


# -- memory oversubscription and spilling ------------------------------------------------------

ACTIVATIONS = """
import numpy as np

# @stream param
N = 1 << 14
# @stream param
K = 12


# @stream kernel(flops=1e6, out=8*N)
def inp():
    return np.linspace(0.0, 1.0, N)


# @stream kernel(flops=1e6, out=8*N)
def fwd(h, i):
    return np.tanh(h * 1.01 + 0.001 * i)


# @stream kernel(flops=1e6, out=8*N)
def bwd(g, h):
    return g * (1.0 - h * h)


# @stream graph
def main():
    hs = [inp()]
    for i in range(K):
        hs.append(fwd(hs[i], i))
    g = hs[K]
    for i in range(K):
        g = bwd(g, hs[K - 1 - i])
    return g
"""

MIB8 = 8 * (1 << 14)          # one activation


def tiny(memory, F=None):
    c = {"name": "tiny", "nodes": [{"name": "n0", "devices": [
        {"name": "gpu0", "kind": "gpu", "memory": memory, "flops": "1 TFLOP/s", "mem_bandwidth": "100 GB/s"}]}]}
    if F is not None:
        c["memory_oversubscription"] = F
    return c


def direct_activations():
    ns = {}
    exec(textwrap.dedent(ACTIVATIONS), ns)
    return ns["main"]()


def test_a_program_that_does_not_fit_is_refused_at_compile_time_naming_task_and_device(tmp_path):
    (tmp_path / "prog.py").write_text(textwrap.dedent(ACTIVATIONS))
    with pytest.raises(MappingError) as err:
        streammap.compile(tmp_path / "prog.py", cluster=tiny(10 * MIB8), history=False)
    msg = err.value.format()
    assert "task fwd[" in msg and "n0/gpu0" in msg
    # plain HEFT ignores capacity: its plan is refused after mapping, with the task and device named
    with pytest.raises(MappingError) as err:
        streammap.compile(tmp_path / "prog.py", cluster=tiny(10 * MIB8, F=1.2), history=False, mapper="heft-plain")
    msg = err.value.format()
    assert "on device n0/gpu0" in msg and "x memory_oversubscription 1.2" in msg and "task " in msg


def test_with_oversubscription_it_compiles_runs_spills_and_gives_the_same_result(tmp_path):
    (tmp_path / "prog.py").write_text(textwrap.dedent(ACTIVATIONS))
    plan = streammap.compile(tmp_path / "prog.py", cluster=tiny(10 * MIB8, F=1.5), history=False)
    assert all(t.out is not None for t in plan.tasks)
    write_plan(plan, tmp_path / "p.yaml")
    assert main(["run", str(tmp_path / "p.yaml"), "--emulate", "-o", str(tmp_path / "o.npz"), "--no-progress"]) == 0
    np.testing.assert_array_equal(np.load(tmp_path / "o.npz")["result"], direct_activations())
    rec = read_run_record(tmp_path / "o.run.json")
    spill = rec.devices[0].spill
    assert spill["spilled_bytes"] > 0 and spill["restored_bytes"] == spill["spilled_bytes"]
    assert spill["overflow"] == 0.0 and spill["seconds"] > 0
    # the compiler replayed the same policy: it expected exactly this traffic, and says so
    assert plan.mapper.spill_bytes == spill["spilled_bytes"] + spill["restored_bytes"]
    assert main(["show", str(tmp_path / "p.yaml")]) == 0


def test_without_oversubscription_nothing_ever_spills(tmp_path):
    (tmp_path / "prog.py").write_text(textwrap.dedent(ACTIVATIONS))
    plan = streammap.compile(tmp_path / "prog.py", cluster=tiny(40 * MIB8), history=False)
    streammap.run(plan, emulate=True, outputs=tmp_path / "o.npz", progress=False, telemetry=False)
    rec = read_run_record(tmp_path / "o.run.json")
    assert rec.devices[0].spill is None


def test_the_estimate_charges_the_spills_on_the_host_link(tmp_path):
    (tmp_path / "prog.py").write_text(textwrap.dedent(ACTIVATIONS))
    roomy = streammap.compile(tmp_path / "prog.py", cluster=tiny(40 * MIB8), history=False)
    slow = tiny(10 * MIB8, F=1.5)
    slow["host_bandwidth"] = "1 GB/s"
    tight = streammap.compile(tmp_path / "prog.py", cluster=slow, history=False)
    # at least one activation goes out and comes back: 2 x 128 KiB at 1 GB/s
    assert tight.mapper.estimated_makespan >= roomy.mapper.estimated_makespan + 2 * MIB8 / 1e9


def test_re_mapping_an_oversubscribed_plan_still_charges_its_spills(tmp_path):
    from streammap.plan import validate_plan
    from streammap.remap import remap_plan
    (tmp_path / "prog.py").write_text(textwrap.dedent(ACTIVATIONS))
    slow = tiny(10 * MIB8, F=1.5)
    slow["host_bandwidth"] = "0.1 GB/s"                     # spill time dominates the makespan
    plan = streammap.compile(tmp_path / "prog.py", cluster=slow, history=False)
    done = plan.tasks[:5]
    res = remap_plan(plan, {t.id: t.device for t in done}, now=done[-1].finish)
    validate_plan(res.plan)
    # on schedule so far: the rest replays the same spills, and the estimate stays the plan's
    assert res.estimated_makespan == pytest.approx(plan.mapper.estimated_makespan, rel=1e-6)
    assert res.estimated_makespan - done[-1].finish >= plan.mapper.spill_bytes / 2 / 0.1e9


def test_a_spilled_array_comes_back_bit_identical(tmp_path):
    from runtime.spill import Spilled, Spiller
    rng = np.random.default_rng(7)
    a = rng.standard_normal(1000)
    a[3] = np.nan
    b = rng.integers(0, 255, size=333, dtype=np.uint8)
    results = [(a.copy(), {"b": b.copy()}), None, None]
    devices = {"d": type("Dev", (), {"is_gpu": False})()}
    sp = Spiller({"d": a.nbytes + b.nbytes}, {0: [2], 1: [2]}, {0: "d", 1: "d", 2: "d"}, results, [None] * 3,
                 devices)
    sp.finish(0, "d", (), True)                   # result 0 fills the device
    sp.admit(1, "d", (), float(a.nbytes))         # task 1's output needs room: result 0 goes out
    assert isinstance(results[0], Spilled)
    sp.finish(1, "d", (), False)
    sp.admit(2, "d", (0,), 0.0)                   # task 2 uses result 0: it comes back
    back = results[0]
    assert back[0].tobytes() == a.tobytes() and back[1]["b"].tobytes() == b.tobytes()
    assert back[0] is not a
    stats = sp.report()["d"]
    assert stats["spilled_bytes"] == stats["restored_bytes"] == a.nbytes + b.nbytes


def test_the_spill_policy_evicts_the_result_needed_last_and_never_a_pinned_one():
    book = SpillBook({"d": 3.0}, {0: [5], 1: [9], 2: [7], 3: [4]}, {i: "d" for i in range(4)})
    for i in range(3):
        book.finish(i, "d", (), 1.0)
    restores, spills = book.admit(3, 3, "d", (0, 2), 1.0)     # needs one byte of room
    assert spills == [(1, "d")] and restores == []             # 1 is needed last (position 9)
    restores, spills = book.admit(4, 4, "d", (1,), 1.0)       # 0 and 2 are pinned by task 3
    assert restores == [(1, "d")] and book.stats()["d"].overflow > 0


def test_gpu_path_co_locates_on_streams_and_spills_through_the_host_on_a_fake_cupy(tmp_path, fake_cupy):
    from streammap.runtime import run_plan

    cupy = fake_cupy(2)
    row = 64 * 8                                              # one result: N = 64 doubles
    devices = [{"id": f"node0/gpu{i}", "kind": "gpu", "vendor": "nvidia", "index": i, "memory": m}
               for i, m in enumerate((3 * row, 1e9))]
    tasks = [{**task("src", "source", "node0/gpu0"), "share": 0.5, "out": row}]
    tasks += [{**task(f"s{k}", "scale", "node0/gpu0", ref("src"), k), "share": 0.5, "out": row} for k in range(6)]
    tasks.append(task("sum", "total", "node0/gpu1", *[ref(f"s{k}") for k in range(6)]))
    plan = make_plan(tmp_path, FAN, tasks, devices=devices, outputs=ref("sum"))
    plan.cluster.spec = {"name": "test", "memory_oversubscription": 3.0}
    out = run_plan(plan, outputs_path=tmp_path / "g.npz", progress=False, telemetry=False)
    np.testing.assert_array_equal(out["result"], np.arange(64.0) * sum(range(1, 7)))
    rec = read_run_record(tmp_path / "g.run.json")
    spill = {d.id: d.spill for d in rec.devices}["node0/gpu0"]
    assert spill["spilled_bytes"] >= row and spill["overflow"] == 0.0
    assert cupy.fake_stats["downloads"] > 0 and cupy.fake_stats["waits"] > 0


def test_the_executor_keeps_to_max_tasks_per_device(tmp_path):
    (tmp_path / "prog.py").write_text(textwrap.dedent(SLEEPY).replace("SHARE = 0.5", "SHARE = 0.25"))
    one = {"name": "one", "max_tasks_per_device": 2,
           "nodes": [{"name": "n0", "devices": [{"name": "gpu0", "kind": "gpu", "flops": "20 TFLOP/s"}]}]}
    plan = streammap.compile(tmp_path / "prog.py", cluster=one, history=False)
    out = streammap.run(plan, emulate=True, progress=False, telemetry=False)
    assert out["result"][0] == pytest.approx(0.5)        # two tasks of 0.25 at once, not four


@pytest.mark.parametrize("field,value,says", [
    ("max_tasks_per_device", 0, "max_tasks_per_device"),
    ("memory_oversubscription", 0.5, "memory_oversubscription"),
    ("host_bandwidth", "fast", "host_bandwidth"),
])
def test_bad_sharing_fields_in_a_cluster_file_are_errors_naming_the_field(tmp_path, field, value, says):
    data = cluster(gpus=1)
    data[field] = value
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    assert main(["compile", str(SWEEP), "--cluster", str(tmp_path / "c.yaml"), "-o", str(tmp_path / "p.yaml"),
                 "--no-history"]) == 2
    assert not (tmp_path / "p.yaml").exists()
    from streammap.cluster.model import load_cluster
    from streammap.errors import ClusterError
    with pytest.raises(ClusterError, match=says):
        load_cluster(tmp_path / "c.yaml")
