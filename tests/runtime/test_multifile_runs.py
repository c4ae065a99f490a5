"""Running multi-file programs: a plan runs its program with the local modules it was compiled
with, gives what plain Python gives, and refuses to run when one of them changed or is gone."""

from __future__ import annotations

import shutil
import sys

import numpy as np
import pytest

import streammap
from streammap.cli import main
from streammap.errors import PlanError
from streammap.plan import read_plan, write_plan
from streammap.runtime import run_plan
from streammap.runtime.loader import ProgramFiles, load_program
from tests.helpers.multifile import ONE_CPU, plain_python, write_package, write_two_file


@pytest.mark.parametrize("write", [write_two_file, write_package], ids=["two-file", "package"])
def test_a_multi_file_program_runs_and_equals_plain_python(tmp_path, write):
    prog = write(tmp_path)
    plan = streammap.compile(prog, cluster=ONE_CPU, history=False)
    out = run_plan(plan, progress=False, telemetry=False)
    np.testing.assert_array_equal(out["result"], plain_python(prog))


def test_streammap_run_of_a_plan_file_imports_the_modules_beside_its_program(tmp_path):
    prog = write_package(tmp_path / "project")
    assert main(["compile", str(prog), "--cluster", "local", "-o", str(tmp_path / "plan.yaml")]) == 0
    assert main(["run", str(tmp_path / "plan.yaml"), "-o", str(tmp_path / "out.npz"), "--no-progress"]) == 0
    np.testing.assert_array_equal(np.load(tmp_path / "out.npz")["result"], plain_python(prog))


def test_run_refuses_a_plan_whose_local_module_changed(tmp_path, capsys):
    prog = write_package(tmp_path)
    write_plan(streammap.compile(prog, cluster=ONE_CPU, history=False), tmp_path / "plan.yaml")
    with open(tmp_path / "mypkg" / "consts.py", "a") as f:
        f.write("FACTOR = 4.0\n")
    with pytest.raises(PlanError, match=r"consts.py \(imported by pkgprog.py\) has changed since this plan was compiled"):
        run_plan(read_plan(tmp_path / "plan.yaml"), progress=False, telemetry=False)
    assert main(["run", str(tmp_path / "plan.yaml"), "-o", str(tmp_path / "out.npz")]) == 2
    err = capsys.readouterr().err
    assert "mypkg/consts.py (imported by pkgprog.py) has changed" in err and "hint: compile it again" in err
    assert "Traceback" not in err and not (tmp_path / "out.npz").exists()


def test_run_refuses_a_plan_whose_local_module_is_missing(tmp_path, capsys):
    prog = write_two_file(tmp_path)
    write_plan(streammap.compile(prog, cluster=ONE_CPU, history=False), tmp_path / "plan.yaml")
    (tmp_path / "helpers.py").unlink()
    assert main(["run", str(tmp_path / "plan.yaml"), "-o", str(tmp_path / "out.npz")]) == 2
    err = capsys.readouterr().err
    assert "error: the local module" in err and "helpers.py that prog.py imports does not exist" in err


def test_two_programs_with_a_helpers_module_each_get_their_own(tmp_path):
    """Python caches modules by name: the second program must not get the first one's helpers."""
    first, second = write_two_file(tmp_path / "a"), write_two_file(tmp_path / "b")
    (tmp_path / "b" / "helpers.py").write_text((tmp_path / "b" / "helpers.py").read_text()
                                               .replace("WEIGHT = 0.25", "WEIGHT = 0.5"))
    outs = [run_plan(streammap.compile(p, cluster=ONE_CPU, history=False), progress=False, telemetry=False)
            for p in (first, second)]
    np.testing.assert_array_equal(outs[0]["result"], plain_python(first))
    np.testing.assert_array_equal(outs[1]["result"], plain_python(second))
    assert "helpers" not in sys.modules and str(tmp_path / "b") not in sys.path    # forgotten after the run


def test_a_copy_of_the_program_files_runs_where_the_folder_is_absent(tmp_path):
    """What a Ray worker on another machine does: write the shipped files into a folder of its own."""
    prog = write_package(tmp_path / "project")
    plan = streammap.compile(prog, cluster=ONE_CPU, history=False)
    files = ProgramFiles.of(plan)
    assert files.present(plan) and set(files.modules) == {m.path for m in plan.source.modules}
    shutil.rmtree(tmp_path / "project")
    assert not files.present(plan)
    copy = files.materialize(plan, tmp_path / "worker")
    program = load_program(copy)
    try:
        assert program.module.util.__file__ == str(tmp_path / "worker" / "mypkg" / "util.py")
        a = program.kernels["make"](1)
        assert program.kernels["total"](a, a).shape == (1,)
    finally:
        program.unload()
