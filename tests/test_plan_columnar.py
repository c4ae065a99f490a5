"""Large plans keep their task list in a columnar sidecar; small plans stay the YAML they were.

``write_plan(plan, path, columnar_above=N)`` moves the tasks of a plan of more than N tasks to
``<plan>.tasks.npz`` beside it, named in the YAML with its sha256; ``read_plan`` reads either form
into the same plan. A sidecar is input like any plan file: it is checked before it is used.
"""

import io
import zipfile

import numpy as np
import pytest

from streammap.errors import PlanError
from streammap.io.columnar import decode_strings, encode_strings, read_columns, write_columns
from streammap.plan import COLUMNAR_TASKS, read_plan, sha256_file, tasks_file_name, write_plan
from tests.helpers.plans import big_plan, make_plan, ref, task, value


def test_a_plan_at_or_below_the_threshold_is_written_as_yaml_alone(tmp_path):
    plan = big_plan(200)
    write_plan(plan, tmp_path / "p.yaml", columnar_above=200)
    assert (tmp_path / "p.yaml").read_text() == plan.to_yaml(relative_to=tmp_path)
    assert not (tmp_path / tasks_file_name(tmp_path / "p.yaml")).exists()


def test_the_default_threshold_keeps_plans_of_thousands_of_tasks_in_yaml(tmp_path):
    assert COLUMNAR_TASKS >= 10_000
    plan = big_plan(300)
    write_plan(plan, tmp_path / "p.yaml")
    assert (tmp_path / "p.yaml").read_text() == plan.to_yaml(relative_to=tmp_path)


def test_a_large_plan_round_trips_through_its_sidecar(tmp_path):
    plan = big_plan(500)
    path = tmp_path / "g.plan.yaml"
    write_plan(plan, path, columnar_above=100)
    text = path.read_text()
    assert "tasks_file:" in text and "\ntasks:" not in text
    assert (tmp_path / "g.plan.tasks.npz").is_file()
    back = read_plan(path)
    assert back.tasks == plan.tasks
    assert back.to_yaml(relative_to=tmp_path) == plan.to_yaml(relative_to=tmp_path)
    assert len(text) < len(plan.to_yaml()) / 20          # the header only


def test_every_optional_task_field_survives_the_sidecar(tmp_path):
    (tmp_path / "prog.py").write_text("x = 1\n")
    tasks = [task("a", "k0", "node0/gpu0", value(2.5), retries=2),
             task("b", "k1", "node0/gpu1", ref("a"), kwargs={"scale": value(3)}, deps=["a"])]
    plan = make_plan(tmp_path, "prog.py", tasks)
    plan.tasks[0].site, plan.tasks[0].estimate, plan.tasks[0].timeout = "prog.py:3", "clauses", 4.0
    plan.tasks[1].share, plan.tasks[1].out, plan.tasks[1].stateful = 0.5, 1024.0, True
    write_plan(plan, tmp_path / "p.yaml", columnar_above=1)
    back = read_plan(tmp_path / "p.yaml")
    assert back.tasks == plan.tasks


def _sidecar_plan(tmp_path, n=50):
    path = tmp_path / "p.yaml"
    write_plan(big_plan(n), path, columnar_above=10)
    return path, tmp_path / "p.tasks.npz"


def test_a_sidecar_that_changed_since_the_plan_was_written_is_refused(tmp_path):
    path, sidecar = _sidecar_plan(tmp_path)
    cols = read_columns(sidecar)
    cols["start"] = cols["start"] + 1.0
    write_columns(sidecar, cols)
    with pytest.raises(PlanError, match="does not match the plan"):
        read_plan(path)


def test_a_missing_sidecar_is_a_clear_error(tmp_path):
    path, sidecar = _sidecar_plan(tmp_path)
    sidecar.unlink()
    with pytest.raises(PlanError, match="task columns .* do not exist"):
        read_plan(path)


def test_a_sidecar_outside_the_plan_s_folder_is_refused(tmp_path):
    path, _ = _sidecar_plan(tmp_path)
    path.write_text(path.read_text().replace("path: p.tasks.npz", "path: ../p.tasks.npz"))
    with pytest.raises(PlanError, match="not a file name in the plan's folder"):
        read_plan(path)


def _rewrite(path, sidecar, change):
    """Change the sidecar's columns and give the plan the new sha256 (a hand-made sidecar)."""
    cols = read_columns(sidecar)
    change(cols)
    old = sha256_file(sidecar)
    write_columns(sidecar, cols)
    path.write_text(path.read_text().replace(old, sha256_file(sidecar)))


@pytest.mark.parametrize("change, message", [
    (lambda c: c["dep_idx"].__setitem__(0, 10_000), "does not come before it"),
    (lambda c: c["device"].__setitem__(3, 99), "code outside"),
    (lambda c: c["finish"].__setitem__(2, -1.0), "finish must be >= 0"),
    (lambda c: c.pop("start"), "no column 'start'"),
    (lambda c: c.__setitem__("start", c["start"][:-1]), "has 49 values for 50 tasks"),
])
def test_a_sidecar_that_breaks_the_plan_contract_is_refused_with_what_is_wrong(tmp_path, change, message):
    path, sidecar = _sidecar_plan(tmp_path)
    _rewrite(path, sidecar, change)
    with pytest.raises(PlanError, match=message) as err:
        read_plan(path)
    assert "p.tasks.npz" in err.value.format()


def test_a_sidecar_with_pickled_objects_is_refused_without_unpickling(tmp_path):
    path, sidecar = _sidecar_plan(tmp_path)
    np.savez(sidecar, start=np.array([object()], dtype=object))
    text = path.read_text()
    old = text.split("sha256: ")[-1].split()[0].rstrip(",}")
    path.write_text(text.replace(old, sha256_file(sidecar)))
    with pytest.raises(PlanError, match="not a readable plan's task columns"):
        read_plan(path)


def test_a_plan_with_both_tasks_and_a_sidecar_is_refused(tmp_path):
    path, _ = _sidecar_plan(tmp_path)
    path.write_text(path.read_text() + "tasks: []\n")
    with pytest.raises(PlanError, match="both 'tasks' and 'tasks_file'"):
        read_plan(path)


def _replace_sidecar(path, sidecar, write):
    """Write the sidecar with ``write(sidecar)`` (a hostile file) and give the plan its sha256."""
    old = sha256_file(sidecar)
    write(sidecar)
    path.write_text(path.read_text().replace(old, sha256_file(sidecar)))


def _npz_with_member(sidecar, name, header_shape, data, compress=zipfile.ZIP_STORED):
    """The sidecar's columns, but ``name`` replaced by a member whose header declares
    ``header_shape`` bytes and whose data is ``data``."""
    cols = read_columns(sidecar)
    with zipfile.ZipFile(sidecar, "w") as z:
        for key, col in cols.items():
            if key != name:
                buf = io.BytesIO()
                np.save(buf, col)
                z.writestr(key + ".npy", buf.getvalue())
        head = io.BytesIO()
        np.lib.format.write_array_header_1_0(head, {"descr": "|u1", "fortran_order": False, "shape": header_shape})
        z.writestr(name + ".npy", head.getvalue() + data, compress_type=compress)


def test_a_sidecar_column_whose_header_claims_a_terabyte_is_refused_before_allocating_it(tmp_path):
    path, sidecar = _sidecar_plan(tmp_path)
    _replace_sidecar(path, sidecar, lambda s: _npz_with_member(s, "id_utf8", (1 << 40,), b"abc"))
    with pytest.raises(PlanError, match="column 'id_utf8' .* declares 1099511627776 bytes but holds 3"):
        read_plan(path)


def test_a_compressed_sidecar_column_is_refused_before_it_is_inflated(tmp_path):
    """A few megabytes of deflated zeros inflate to gigabytes: the sidecar is written uncompressed,
    so a compressed column is not one StreamMAP wrote."""
    path, sidecar = _sidecar_plan(tmp_path)
    _replace_sidecar(path, sidecar, lambda s: _npz_with_member(s, "id_utf8", (1 << 20,), bytes(1 << 20),
                                                               compress=zipfile.ZIP_DEFLATED))
    with pytest.raises(PlanError, match="column 'id_utf8' .* is compressed"):
        read_plan(path)


def test_a_sidecar_member_that_is_not_a_column_is_refused(tmp_path):
    path, sidecar = _sidecar_plan(tmp_path)

    def add_note(s):
        with zipfile.ZipFile(s, "a") as z:
            z.writestr("notes.txt", "hello")
    _replace_sidecar(path, sidecar, add_note)
    with pytest.raises(PlanError, match="member 'notes.txt' .* is not a .npy column"):
        read_plan(path)


@pytest.mark.parametrize("depth, message", [
    (100_000, "task #0: args is nested more than 100 levels"),
    (400, "an argument is nested more than 100 levels"),
])
def test_sidecar_arguments_nested_past_the_limit_are_refused(tmp_path, depth, message):
    """A plan's YAML is nested at most 100 levels; its sidecar's argument JSON is held to the same
    bound (100,000 brackets were a RecursionError in the JSON reader)."""
    path, sidecar = _sidecar_plan(tmp_path)

    def nest(cols):
        texts = decode_strings(cols["args_utf8"], cols["args_off"]) if "args_utf8" in cols else [""] * len(cols["start"])
        texts[0] = "[" + '{"list":[' * (depth // 2) + "]}" * (depth // 2) + "]"
        cols["args_utf8"], cols["args_off"] = encode_strings(texts)
    _rewrite(path, sidecar, nest)
    with pytest.raises(PlanError, match=message):
        read_plan(path)
