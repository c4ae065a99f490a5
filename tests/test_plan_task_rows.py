"""A plan's YAML task list reads into the tasks pydantic would make of it, whatever the rows say.

``read_plan`` builds the tasks of rows whose values are already of their fields' types without a
second validation; what a user relies on is that this changes nothing: the same tasks (an int
where a float goes is that float; defaults filled in), each owning its lists, and a row pydantic
refuses still refused with the same message and line.
"""

import pytest

from streammap.errors import PlanError
from streammap.plan import PlanTask, read_plan

HEAD = """streammap_plan: 1
source: {path: prog.py, sha256: '', entry: main}
cluster: {name: two}
mapper: {name: hand, estimated_makespan: 1.0, lower_bound: 0.0}
devices:
- {id: node0/gpu0, kind: gpu}
- {id: node0/gpu1, kind: gpu}
outputs: {ref: b}
tasks:
"""

ROWS = """- {id: a, kernel: k, device: node0/gpu0, start: 0, finish: 1}
- id: b
  kernel: k
  device: node0/gpu1
  deps: [a]
  args: [{ref: a}, {value: 3}]
  kwargs: {scale: {value: 2.5}}
  start: 1
  finish: 2.5
  share: 0.5
  retries: 2
  timeout: 3
  out: 1024
  site: prog.py:4
  estimate: fit
  stateful: true
- {id: c, kernel: k, device: node0/gpu0, deps: [a], args: [{ref: a}], start: 1.0, finish: 2.0}
"""


def _plan_file(tmp_path, rows: str):
    (tmp_path / "prog.py").write_text("def main():\n    pass\n")
    path = tmp_path / "plan.yaml"
    path.write_text(HEAD + rows)
    return path


def _as_pydantic_reads(path) -> list[PlanTask]:
    import yaml
    return [PlanTask.model_validate(row) for row in yaml.safe_load(path.read_text())["tasks"]]


def test_rows_read_into_the_tasks_pydantic_makes_of_them(tmp_path):
    path = _plan_file(tmp_path, ROWS)
    tasks = read_plan(path).tasks
    expected = _as_pydantic_reads(path)
    assert [t.model_dump() for t in tasks] == [t.model_dump() for t in expected]
    assert [type(t.start) for t in tasks] == [float] * 3 and type(tasks[1].timeout) is float


def test_each_task_owns_its_lists_even_when_rows_repeat_them(tmp_path):
    tasks = read_plan(_plan_file(tmp_path, ROWS)).tasks
    tasks[1].deps.append("z")
    tasks[1].args.append({"value": 9})
    assert tasks[2].deps == ["a"] and tasks[2].args == [{"ref": "a"}]


def test_a_row_of_strings_for_numbers_reads_as_pydantic_reads_it(tmp_path):
    path = _plan_file(tmp_path, ROWS.replace("finish: 2.5", "finish: '2.5'"))
    assert [t.model_dump() for t in read_plan(path).tasks] == [t.model_dump() for t in _as_pydantic_reads(path)]


@pytest.mark.parametrize("change, bad, message", [
    ("share: 0.5", "share: 2", "tasks[1].share: Input should be less than or equal to 1"),
    ("retries: 2", "retries: -1", "tasks[1].retries: Input should be greater than or equal to 0"),
    ("stateful: true", "stateful: maybe", "tasks[1].stateful: Input should be a valid boolean"),
    ("estimate: fit", "colour: red", "tasks[1].colour: unknown field 'colour'"),
    ("start: 1\n", "start: .nan\n", "tasks[1].start: Input should be a finite number"),
    ("start: 1\n", "start: .inf\n", "tasks[1].start: Input should be a finite number"),
])
def test_a_row_pydantic_refuses_is_refused_at_its_line(tmp_path, change, bad, message):
    rows = ROWS.replace(change, bad)
    with pytest.raises(PlanError) as err:
        read_plan(_plan_file(tmp_path, rows))
    line = 1 + (HEAD + rows).splitlines().index(f"  {bad.strip()}")
    assert f"plan.yaml:{line}: error: {message}" in str(err.value)
