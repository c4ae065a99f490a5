"""``streammap show``: tables, summaries, Gantt charts and task-graph pictures."""

from __future__ import annotations

import random

import pytest
from rich.console import Console

from streammap.cluster.model import ClusterSpec
from streammap.errors import StreamMapError
from streammap.plan import Plan, validate_plan
from streammap.runrecord import RunRecord
from streammap.views import show
from tests.helpers.plans import big_plan

PNG = b"\x89PNG\r\n\x1a\n"
DEVICES = [
    {"id": "node0/gpu0", "kind": "gpu", "vendor": "nvidia", "model": "A100-SXM4-80GB", "index": 0},
    {"id": "node0/gpu1", "kind": "gpu", "vendor": "nvidia", "model": "A100-SXM4-80GB", "index": 1},
    {"id": "node0/cpu", "kind": "cpu"},
]


def fm_radio_plan() -> Plan:
    """source on the CPU, 8 bandpasses over two GPUs, combine on gpu0 (times in ms)."""
    ms = 1e-3
    tasks = [dict(id="source@fm_radio.py:20", kernel="source", device="node0/cpu", deps=[],
                  start=0.0, finish=1.0 * ms)]
    free = {"node0/gpu0": 1.2 * ms, "node0/gpu1": 1.3 * ms}
    for k in range(8):
        dev = f"node0/gpu{k % 2}"
        start = free[dev]
        finish = start + (1.5 + 0.1 * k) * ms
        free[dev] = finish
        tasks.append(dict(id=f"bandpass[{k}]@fm_radio.py:21", kernel="bandpass", device=dev,
                          deps=["source@fm_radio.py:20"], start=start, finish=finish))
    end = max(free.values()) + 0.1 * ms
    tasks.append(dict(id="combine@fm_radio.py:22", kernel="combine", device="node0/gpu0",
                      deps=[t["id"] for t in tasks[1:]], start=end, finish=end + 0.8 * ms))
    plan = Plan.model_validate(dict(
        streammap_plan=1, source=dict(path="samples/fm_radio.py", sha256="0" * 64, entry="fm_radio"),
        params={"N": 4096, "BANDS": 8}, cluster=dict(name="lab"),
        mapper=dict(name="heft", estimated_makespan=end + 0.8 * ms, lower_bound=6.0 * ms,
                    heft_makespan=end + 0.8 * ms),
        devices=DEVICES, tasks=tasks))
    validate_plan(plan)
    return plan


def fm_radio_run(plan: Plan) -> RunRecord:
    rnd = random.Random(1)
    tasks = []
    for t in plan.tasks:
        factor = 3.0 if t.kernel == "combine" else rnd.uniform(0.8, 1.4)
        start = t.start * 1.1
        tasks.append(dict(id=t.id, kernel=t.kernel, device=t.device, estimated_start=t.start,
                          estimated_finish=t.finish, start=start, finish=start + (t.finish - t.start) * factor,
                          attempts=1))
    tasks[-1]["attempts"] = 2
    wall = max(t["finish"] for t in tasks)
    return RunRecord.model_validate(dict(
        plan="plan.yaml", started="2024-05-01T12:00:00+00:00", wall_time=wall,
        estimated_makespan=plan.mapper.estimated_makespan, status="ok", outputs="out.npz",
        devices=[dict(id="node0/gpu0", executor="numpy (emulating node0/gpu0)", busy=0.008, utilisation=0.7,
                      peak_memory=3 * 2**30),
                 dict(id="node0/gpu1", executor="numpy (emulating node0/gpu1)", busy=0.006, utilisation=0.5),
                 dict(id="node0/cpu", executor="numpy", busy=0.001, utilisation=0.1)],
        tasks=tasks))


def render(table) -> str:
    console = Console(width=200, record=True, color_system=None)
    console.print(table)
    return console.export_text()


def assert_png(path):
    data = path.read_bytes()
    assert len(data) > 1000 and data[:8] == PNG


# -- text ---------------------------------------------------------------------------------------

def test_plan_table_sorted_by_start():
    plan = fm_radio_plan()
    table = show.plan_table(plan)
    assert [c.header for c in table.columns] == ["task", "kernel", "device", "start", "finish", "duration", "deps"]
    assert table.row_count == 10
    ids = list(table.columns[0].cells)
    assert ids[0] == "source@fm_radio.py:20" and ids[-1] == "combine@fm_radio.py:22"
    starts = [t.start for t in sorted(plan.tasks, key=lambda t: t.start)]
    assert list(table.columns[3].cells) == [show.format_time(s) for s in starts]
    assert list(table.columns[6].cells)[-1] == "8"
    text = render(table)
    assert "bandpass[3]@fm_radio.py:21" in text and "1.5 ms" in text

    short = show.plan_table(plan, limit=3)
    assert short.row_count == 3 and "7 more of 10" in short.caption


def test_plan_summary():
    plan = fm_radio_plan()
    s = show.plan_summary(plan)
    assert "mapper: heft" in s
    assert f"estimated makespan: {show.format_time(plan.mapper.estimated_makespan)}" in s
    assert "lower bound: 6 ms" in s and "HEFT makespan" in s and "as long" in s
    assert "tasks: 10 (3 kernels); devices used: 3 of 3" in s
    assert "node0/gpu0" in s and "%" in s and "N=4096" in s


def test_run_table_and_summary():
    plan = fm_radio_plan()
    rec = fm_radio_run(plan)
    table = show.run_table(rec)
    headers = [c.header for c in table.columns]
    assert headers == ["task", "kernel", "device", "est. start", "estimated", "start", "measured", "ratio", "attempts"]
    assert table.row_count == 10
    text = render(table)
    assert "3.00x" in text                     # combine took three times its estimate
    s = show.run_summary(rec)
    assert s.startswith("run of plan.yaml: ok")
    assert "tasks: 10 of 10 ran, 1 retried" in s
    assert "furthest off 3x (combine@fm_radio.py:22)" in s
    assert "peak memory 3GiB" in s and "numpy (emulating node0/gpu0)" in s


def test_run_table_with_unrun_tasks():
    rec = fm_radio_run(fm_radio_plan())
    data = rec.model_dump()
    data["status"], data["error"] = "failed", "combine raised ValueError"
    data["tasks"][-1].update(start=None, finish=None, attempts=0)
    rec = RunRecord.model_validate(data)
    text = render(show.run_table(rec))
    assert "not run" in text
    assert "error: combine raised ValueError" in show.run_summary(rec)


def test_cluster_table():
    spec = ClusterSpec.model_validate({"name": "lab", "nodes": [{"name": "n0", "link": {"bandwidth": "300 GB/s"},
        "devices": [{"name": "gpu0", "kind": "gpu", "model": "A100", "memory": "80GiB", "flops": "19.5 TFLOP/s"},
                    {"name": "cpu", "kind": "cpu"}]}]})
    text = render(show.cluster_table(spec))
    assert "n0/gpu0" in text and "80GiB" in text and "19.5 TFLOP/s" in text and "300 GB/s" in text


# -- pictures -----------------------------------------------------------------------------------

def test_gantt_plan_and_run(tmp_path):
    plan = fm_radio_plan()
    assert_png(show.gantt(plan, tmp_path / "plan.png"))
    assert_png(show.gantt(fm_radio_run(plan), tmp_path / "run.png"))
    svg = show.gantt(plan, tmp_path / "plan.svg").read_text()
    assert svg.lstrip().startswith("<?xml") and "<svg" in svg
    assert show.gantt(plan, tmp_path / "sub" / "plan.pdf").read_bytes()[:5] == b"%PDF-"


def test_graph_picture(tmp_path):
    assert_png(show.graph_picture(fm_radio_plan(), tmp_path / "graph.png"))


def test_bad_extension(tmp_path):
    with pytest.raises(StreamMapError, match="picture format"):
        show.gantt(fm_radio_plan(), tmp_path / "plan.jpg")
    assert not (tmp_path / "plan.jpg").exists()


def test_empty_plan(tmp_path):
    data = fm_radio_plan().model_dump()
    data["tasks"] = []
    plan = Plan.model_validate(data)
    assert_png(show.gantt(plan, tmp_path / "g.png"))
    assert_png(show.graph_picture(plan, tmp_path / "t.png"))
    assert show.plan_table(plan).row_count == 0
    assert "tasks: 0" in show.plan_summary(plan)


def test_a_2000_task_plan_renders_its_gantt_chart_and_graph(tmp_path):
    # how long it takes (target: under 30 s) is measured by benchmarks/render_time.py
    plan = big_plan(2000)
    validate_plan(plan)
    assert_png(show.gantt(plan, tmp_path / "big.png"))
    assert_png(show.graph_picture(plan, tmp_path / "big_graph.png"))


def test_plan_verdict_states_the_gain_over_heft_and_the_gap_to_the_bound_in_words():
    plan = fm_radio_plan()
    plan.mapper.name = "auto"
    plan.mapper.heft_makespan = plan.mapper.estimated_makespan / 0.8
    plan.mapper.lower_bound = plan.mapper.estimated_makespan / 1.25
    plan.mapper.solver_bound = None
    verdict = show.plan_verdict(plan)
    assert verdict.startswith("The auto plan is 20.0% shorter than whole-device HEFT under the same constraints")
    assert "at most 25.0% from optimal" in verdict and "proven" not in verdict
    assert verdict in show.plan_summary(plan)
    plan.mapper.lower_bound = plan.mapper.estimated_makespan
    assert "optimal: it reaches the lower bound" in show.plan_verdict(plan)


def test_plan_verdict_says_proven_only_when_the_bound_is_the_exact_solvers():
    plan = fm_radio_plan()
    plan.mapper.lower_bound = plan.mapper.solver_bound = plan.mapper.estimated_makespan / 1.02
    assert "within 2.0% of optimal (proven" in show.plan_verdict(plan)
    plan.mapper.lower_bound = plan.mapper.solver_bound = plan.mapper.estimated_makespan
    assert "optimal (proven)" in show.plan_verdict(plan)
    plan.mapper.solver_bound = plan.mapper.estimated_makespan / 2      # weaker than the analytic bound
    plan.mapper.lower_bound = plan.mapper.estimated_makespan / 1.02
    assert "at most 2.0% from optimal" in show.plan_verdict(plan)


def _task(tid, est=(0.0, 1.0), ran=None, attempts=1):
    start, finish = ran if ran is not None else (None, None)
    return dict(id=tid, kernel="k", device="node0/gpu0", estimated_start=est[0], estimated_finish=est[1],
                start=start, finish=finish, attempts=attempts if ran is not None else 0)


def test_run_table_orders_by_measured_start_then_never_run_by_estimate_ties_in_record_order():
    rec = RunRecord.model_validate(dict(
        plan="p.yaml", started="2026-01-01T00:00:00", wall_time=3.0, estimated_makespan=2.0, status="failed",
        devices=[], tasks=[_task("late", ran=(2.0, 3.0)), _task("unrun-b", est=(1.5, 2.0)),
                           _task("first", ran=(0.0, 0.5)), _task("unrun-a", est=(0.5, 1.0)),
                           _task("tie", ran=(2.0, 2.5)), _task("zero-estimate", est=(1.0, 1.0), ran=(1.0, 1.2))]))
    order = [row.split("│")[1].strip() for row in render(show.run_table(rec)).splitlines()
             if row.startswith("│")]
    assert order == ["first", "zero-estimate", "late", "tie", "unrun-a", "unrun-b"]
    assert [row for row in render(show.run_table(rec, limit=2)).splitlines() if "4 more of 6" in row]
    summary = show.run_summary(rec)
    assert "tasks: 4 of 6 ran" in summary
    # Ratios of the tasks with an estimate, in record order: late 1, first 0.5, tie 0.5 -> median 0.5;
    # furthest off 0.5x, and of the two that far off, the first in the record.
    assert "median 0.5x; furthest off 0.5x (first)" in summary


def test_a_task_measured_at_zero_is_the_furthest_off():
    rec = RunRecord.model_validate(dict(
        plan="p.yaml", started="2026-01-01T00:00:00", wall_time=3.0, estimated_makespan=2.0, status="ok",
        devices=[], tasks=[_task("slow", ran=(0.0, 100.0)), _task("instant", ran=(1.0, 1.0))]))
    assert "furthest off 0x (instant)" in show.run_summary(rec)
