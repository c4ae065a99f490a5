"""Large plans run as small ones do: a plan read from its columnar sidecar runs like its YAML twin,
and the run record streamed from task columns is the record a reader always got.

What a user relies on: ``streammap run`` of a plan of 100,000 tasks (whose task list sits in a
``.tasks.npz`` beside it) gives the same outputs and the same record, task for task, as the same
plan written as YAML; ``show`` and :func:`~streammap.runrecord.read_run_record` read the record
whatever its size.
"""

import json
import math

import numpy as np
import pytest

from streammap.plan import PlanTask, read_plan, tasks_file_name, write_plan
from streammap.runrecord import TASK_FIELDS, RunRecord, read_run_record, write_run_record
from streammap.runtime.lifecycle import build_run_record, run_record_parts
from streammap.runtime.local import Outcome
from streammap.runtime.run import run_plan
from tests.helpers.plans import FAN, gpu_devices, make_plan, ref, task, value


def _fan_plan(folder, n_scaled: int = 40):
    """The FAN program: a source, ``n_scaled`` scaled copies spread over 4 GPUs, their sum (a fan-in
    of more refs than a call shape holds: :data:`streammap.runtime.local.MAX_SHAPE`)."""
    devices = gpu_devices(4)
    tasks = [task("src", "source", devices[0]["id"])]
    for k in range(n_scaled):
        tasks.append(task(f"s{k}", "scale", devices[k % 4]["id"], ref("src"), value(k)))
    tasks.append(task("sum", "total", devices[1]["id"], *[ref(f"s{k}") for k in range(n_scaled)]))
    return make_plan(folder, FAN, tasks, devices=devices, outputs=ref("sum"))


@pytest.fixture
def twins(tmp_path):
    """The same plan written as YAML and with a columnar sidecar, each in its own folder."""
    paths = {}
    for form, columnar_above in (("yaml", 10**9), ("sidecar", 1)):
        folder = tmp_path / form
        folder.mkdir()
        path = folder / "fan.plan.yaml"
        write_plan(_fan_plan(folder), path, columnar_above=columnar_above)
        paths[form] = path
    assert (paths["sidecar"].parent / tasks_file_name(paths["sidecar"])).is_file()
    assert not (paths["yaml"].parent / tasks_file_name(paths["yaml"])).exists()
    return paths


def test_a_sidecar_plan_reads_into_the_tasks_of_its_yaml_twin(twins):
    yaml_tasks, sidecar_tasks = read_plan(twins["yaml"]).tasks, read_plan(twins["sidecar"]).tasks
    assert sidecar_tasks == yaml_tasks
    # built without per-object validation, yet the same objects pydantic would build
    assert [PlanTask.model_validate(t.model_dump()) for t in sidecar_tasks] == sidecar_tasks
    assert [t.model_dump() for t in sidecar_tasks] == [t.model_dump() for t in yaml_tasks]


def test_a_sidecar_task_owns_its_lists(twins):
    tasks = read_plan(twins["sidecar"]).tasks
    tasks[1].kwargs["extra"] = value(1)
    tasks[1].deps.append("src")
    assert tasks[2].kwargs == {} and tasks[2].deps == ["src"]


def test_a_sidecar_plan_runs_to_the_outputs_and_record_of_its_yaml_twin(twins):
    runs = {}
    for form, path in twins.items():
        out = path.with_name("out.npz")
        outputs = run_plan(read_plan(path), emulate=True, outputs_path=out, progress=False, plan_path=path,
                           telemetry=False)
        runs[form] = outputs, read_run_record(path.with_name("out.run.json"))
    (yaml_out, yaml_rec), (sidecar_out, sidecar_rec) = runs["yaml"], runs["sidecar"]
    np.testing.assert_array_equal(sidecar_out["result"], yaml_out["result"])
    np.testing.assert_array_equal(yaml_out["result"], np.arange(64.0) * sum(k + 1 for k in range(40)))

    def planned(rec: RunRecord) -> list[tuple]:
        return [(t.id, t.kernel, t.device, t.site, t.estimated_start, t.estimated_finish, t.attempts, t.share)
                for t in rec.tasks]
    assert sidecar_rec.status == yaml_rec.status == "ok"
    assert planned(sidecar_rec) == planned(yaml_rec)
    assert len(sidecar_rec.tasks) == 42
    assert all(t.measured is not None and t.measured >= 0 for rec in (yaml_rec, sidecar_rec) for t in rec.tasks)


def _outcome(n: int) -> Outcome:
    return Outcome(outputs={}, error=None, wall_time=1.5, starts=[k * 1e-3 for k in range(n)],
                   finishes=[k * 1e-3 + 5e-4 for k in range(n)], attempts=[1] * n)


def test_a_record_streamed_from_columns_reads_back_as_the_record_built_whole(tmp_path):
    plan = _fan_plan(tmp_path)
    n = len(plan.tasks)
    whole = build_run_record(plan, _outcome(n), emulate=True, started="2026-01-01T00:00:00+00:00")
    header, columns = run_record_parts(plan, _outcome(n), emulate=True, started="2026-01-01T00:00:00+00:00")
    assert header.tasks == [] and set(columns) == set(TASK_FIELDS)
    write_run_record(header, tmp_path / "streamed.run.json", columns)
    write_run_record(whole, tmp_path / "whole.run.json")
    assert read_run_record(tmp_path / "streamed.run.json") == read_run_record(tmp_path / "whole.run.json") == whole


def test_a_streamed_record_writes_what_json_cannot_hold_as_null(tmp_path):
    header, columns = run_record_parts(_fan_plan(tmp_path), _outcome(42), emulate=True, started="x")
    columns["start"] = [math.inf, math.nan, *columns["start"][2:]]
    columns["site"] = ['quote " and newline \n and é', *columns["site"][1:]]
    write_run_record(header, tmp_path / "r.run.json", columns)
    rec = read_run_record(tmp_path / "r.run.json")
    assert rec.tasks[0].start is None and rec.tasks[1].start is None and rec.tasks[2].start == columns["start"][2]
    assert rec.tasks[0].site == 'quote " and newline \n and é'


def test_a_record_streamed_in_several_chunks_keeps_every_task_in_order(tmp_path, monkeypatch):
    import streammap.runrecord as runrecord
    monkeypatch.setattr(runrecord, "ROWS_PER_CHUNK", 5)
    plan = _fan_plan(tmp_path)
    header, columns = run_record_parts(plan, _outcome(42), emulate=True, started="x")
    write_run_record(header, tmp_path / "r.run.json", columns)
    assert [t.id for t in read_run_record(tmp_path / "r.run.json").tasks] == [t.id for t in plan.tasks]


def test_an_empty_plan_record_streams_to_an_empty_task_list(tmp_path):
    header, _ = run_record_parts(_fan_plan(tmp_path), _outcome(42), emulate=True, started="x")
    write_run_record(header, tmp_path / "r.run.json", {name: [] for name in TASK_FIELDS})
    assert read_run_record(tmp_path / "r.run.json").tasks == []


def test_columns_of_unequal_length_are_refused_before_anything_is_written(tmp_path):
    header, columns = run_record_parts(_fan_plan(tmp_path), _outcome(42), emulate=True, started="x")
    columns["attempts"] = columns["attempts"][:-1]
    with pytest.raises(ValueError, match="differ in length"):
        write_run_record(header, tmp_path / "r.run.json", columns)
    assert not (tmp_path / "r.run.json").exists()


def test_a_streamed_record_writes_repeated_numbers_as_each_would_be_written_alone(tmp_path):
    """Columns that repeat (estimates, attempts) are encoded once per distinct number; the text
    is still each number's own: -0.0 stays -0.0 beside 0.0, NaN is null, an int stays an int."""
    header, columns = run_record_parts(_fan_plan(tmp_path), _outcome(42), emulate=True, started="x")
    columns["estimated_start"] = [0.0] * 20 + [-0.0] * 20 + [1e-6, 1e-6]
    columns["estimated_finish"] = [2.5e-6] * 30 + [math.nan] * 12
    columns["attempts"] = [1] * 40 + [3, 0]
    write_run_record(header, tmp_path / "r.run.json", columns)
    data = json.loads((tmp_path / "r.run.json").read_text())
    for name in ("estimated_start", "estimated_finish", "attempts"):
        written = [t[name] for t in data["tasks"]]
        expected = [None if isinstance(v, float) and math.isnan(v) else v for v in columns[name]]
        assert json.dumps(written) == json.dumps(expected)
