"""A job's files never replace the modules its worker runs on.

The worker of a job runs in the job's folder, which the job itself fills (its program, its local
modules, whatever it writes while it runs). A file there named like a module of Python, of an
installed package or of StreamMAP (``json.py``, ``yaml.py``, ``streammap/``) must not be imported
in place of that module by the worker: the worker compiles, runs and writes its exit note with the
real ones. A program's own local modules (those the plan records) still import from the folder;
a program that imports a module of Python while its folder holds a file of that name fails with
an error in its exit note that says so.

The jobs here are started as the service starts them: by the sandbox launcher
(:func:`streammap.tenancy.sandbox.command`) in the job's folder, with ``isolation: none`` on any
machine, and in namespaces where the machine has them (skipped, saying why, where it has not).
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from streammap.tenancy import sandbox
from streammap.tenancy.worker import FolderLast
from tests.helpers.multifile import TWO_GPUS, plain_python, write_files, write_two_file

#: A module of the job's folder that must never be imported by the worker.
RAISES = 'raise RuntimeError("the job\'s own {name} was imported")\n'

#: Files named like modules the worker and StreamMAP import (the programs here import none of
#: them), each raising if imported.
DECOYS = {"json.py": RAISES.format(name="json.py"), "yaml.py": RAISES.format(name="yaml.py"),
          "pydantic.py": RAISES.format(name="pydantic.py"), "runpy.py": RAISES.format(name="runpy.py"),
          "streammap/__init__.py": RAISES.format(name="streammap package")}

PROGRAM = '''\
import numpy as np
{imports}

# @stream param
N = 4


# @stream kernel(flops=N, out=8*N)
def fill():
    return np.full(N, 2.0)


# @stream graph
def main():
    return fill()
'''


def isolations():
    """``none`` everywhere; ``namespaces`` where this machine can contain a job."""
    ok, why = sandbox.available()
    return ["none", pytest.param("namespaces", marks=pytest.mark.skipif(
        not ok, reason=f"jobs cannot be contained on this machine: {why}"))]


def run_job(tmp_path, folder, source: str, isolation: str = "none") -> dict:
    """Run the job in ``folder`` as the service does; returns its exit note (the log on failure to find one)."""
    job = {"source": source, "params": {}, "entry": None, "mapper": "heft", "cluster": TWO_GPUS,
           "emulate": True, "backend": "local", "address": None}
    (folder / "job.json").write_text(json.dumps(job))
    state = tmp_path / "state"
    state.mkdir(exist_ok=True)
    policy = sandbox.policy(isolation, state_dir=state)
    with open(folder / "log.txt", "wb") as log:
        subprocess.run(sandbox.command(folder, policy), stdout=log, stderr=subprocess.STDOUT,
                       stdin=subprocess.DEVNULL, cwd=folder, timeout=300, check=False)
    note = folder / "exit.json"
    assert note.exists(), f"the worker left no exit note; its log:\n{(folder / 'log.txt').read_text()}"
    return json.loads(note.read_text())


@pytest.mark.parametrize("isolation", isolations())
def test_files_named_like_the_workers_modules_are_not_imported_in_their_place(tmp_path, isolation):
    folder = tmp_path / "job"
    write_files(folder, {"prog.py": PROGRAM.format(imports=""), **DECOYS})
    note = run_job(tmp_path, folder, "prog.py", isolation)
    log = (folder / "log.txt").read_text()
    assert note == {"status": "done"}, log
    assert "was imported" not in log
    np.testing.assert_array_equal(np.load(folder / "result.npz")["result"], np.full(4, 2.0))
    assert (folder / "plan.yaml").is_file() and (folder / "result.run.json").is_file()


@pytest.mark.parametrize("isolation", isolations())
def test_a_programs_own_helper_module_still_imports_from_its_folder(tmp_path, isolation):
    folder = tmp_path / "job"
    prog = write_two_file(folder)
    write_files(folder, DECOYS)
    note = run_job(tmp_path, folder, prog.name, isolation)
    assert note == {"status": "done"}, (folder / "log.txt").read_text()
    np.testing.assert_array_equal(np.load(folder / "result.npz")["result"], plain_python(prog))


@pytest.mark.parametrize(("module", "what"), [("json", "Python's standard library"),
                                             ("yaml", "an installed package")])
def test_a_program_importing_a_module_its_folder_shadows_fails_saying_so(tmp_path, module, what):
    folder = tmp_path / "job"
    write_files(folder, {"prog.py": PROGRAM.format(imports=f"import {module}"),
                         f"{module}.py": RAISES.format(name=f"{module}.py")})
    note = run_job(tmp_path, folder, "prog.py")
    assert note["status"] == "failed"
    assert f"{module}.py" in note["error"] and what in note["error"] and "rename" in note["error"]
    assert "Traceback" not in (folder / "log.txt").read_text()
    assert not (folder / "result.npz").exists()


def test_the_job_folder_serves_only_names_found_nowhere_else(tmp_path, monkeypatch):
    """While a program runs, its folder is on ``sys.path`` (its kernels may import its modules
    late): a module of Python the worker imports only then still comes from Python."""
    write_files(tmp_path, {"tabnanny.py": RAISES.format(name="tabnanny.py"), "jobhelper_xyz.py": "VALUE = 7\n"})
    for name in ("tabnanny", "jobhelper_xyz"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    FolderLast.install(tmp_path)
    try:
        assert Path(importlib.import_module("tabnanny").__file__).parent != tmp_path
        assert importlib.import_module("jobhelper_xyz").VALUE == 7
    finally:
        for name in ("tabnanny", "jobhelper_xyz"):
            sys.modules.pop(name, None)
