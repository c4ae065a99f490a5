"""The leftovers of the first hardening round: each is a clean refusal (exit status 2, a message
naming the file and line where there is one, what to do), never a hang, a traceback or an input
read as something its author does not see."""

import json
import os
import re
import shutil
import socket
from pathlib import Path

import numpy as np
import pytest

import streammap.cost.calibrate as calibrate
from streammap.cli import main
from streammap.cluster.model import ClusterSpec, DeviceSpec, Node
from streammap.errors import StreamMapError
from streammap.io.jsonfile import DuplicateKeyError, loads_strict
from streammap.io.yamlfile import load_yaml
from streammap.plan import read_plan, write_plan
from tests.helpers.cli import refused
from tests.helpers.paths import SAMPLES

FM = SAMPLES / "fm_radio.py"
CLUSTER = SAMPLES / "clusters" / "tiny-gpus.yaml"


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    shutil.copy(CLUSTER, tmp_path / "cluster.yaml")
    shutil.copy(FM, tmp_path / "fm_radio.py")
    return tmp_path


# -- profile --device NAME that this machine does not have -----------------------------------------

def test_profile_of_a_device_this_machine_lacks_is_refused_listing_the_ones_it_has(workdir, capsys, monkeypatch):
    cpu = DeviceSpec(name="cpu", kind="cpu", model="Test CPU", flops=1e11, mem_bandwidth=2e10)
    monkeypatch.setattr(calibrate, "discover_local",
                        lambda: ClusterSpec(name="local", nodes=[Node(name="box", devices=[cpu])]))
    err = refused(["profile", "fm_radio.py", "--device", "tpu", "--history", "hist"], capsys,
                  "--device tpu", "box/cpu (cpu, Test CPU)")
    assert not (workdir / "hist").exists()              # nothing ran, nothing was recorded
    # One unknown name among known ones is refused too: profiling the rest would hide the typo.
    refused(["profile", "fm_radio.py", "--device", "cpu", "--device", "gpu7", "--history", "hist"], capsys,
            "--device gpu7")
    assert "hint:" in err


# -- duplicate keys --------------------------------------------------------------------------------

def test_a_key_repeated_in_a_yaml_mapping_is_refused_at_its_second_line(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("name: a\nnodes:\n  - name: n0\n    devices:\n      - name: cpu\n        kind: cpu\n"
                    "        memory: 8GiB\n        memory: 8TiB\n")
    with pytest.raises(StreamMapError) as err:
        load_yaml(path)
    assert (err.value.line, err.value.col) == (8, 9)
    assert "duplicate key 'memory' (first on line 7)" in err.value.message


def test_keys_that_differ_as_yaml_values_are_not_duplicates(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text("1: int\n'1': str\nx: {a: 1}\ny: {a: 2}\n")
    data, _ = load_yaml(path)
    assert data == {1: "int", "1": "str", "x": {"a": 1}, "y": {"a": 2}}


@pytest.mark.parametrize("command", [
    ["compile", "fm_radio.py", "--cluster", "dup.yaml", "-o", "plan.yaml", "--no-history"],
    ["simulate", "--jobs", "dup.yaml", "--cluster", "cluster.yaml"],
    ["show", "dup.yaml"],
])
def test_every_command_refuses_a_yaml_file_with_a_repeated_key(workdir, capsys, command):
    (workdir / "dup.yaml").write_text("- a: 1\n  b: 2\n  a: 3\n" if command[0] == "simulate"
                                      else "name: x\nstreammap_plan: 1\nname: y\n")
    refused(command, capsys, "dup.yaml:", "duplicate key")


def test_a_plan_whose_tasks_repeat_a_key_is_refused_not_read_on_the_fast_path(workdir, capsys):
    assert main(["compile", "fm_radio.py", "--cluster", "cluster.yaml", "-o", "plan.yaml", "--no-history"]) == 0
    text = (workdir / "plan.yaml").read_text()
    at = text.index("\n  device: ")
    line = text.count("\n", 0, at) + 2
    (workdir / "plan.yaml").write_text(text[:at] + "\n  device: node0/cpu" + text[at:])
    refused(["run", "plan.yaml", "--emulate", "-o", "out.npz"], capsys, f"plan.yaml:{line + 1}:", "duplicate key 'device'")


def test_a_key_repeated_in_a_json_object_is_refused_with_where_the_object_starts():
    assert loads_strict('{"a": {"b": 1}, "c": [{"b": 2}]}') == {"a": {"b": 1}, "c": [{"b": 2}]}
    with pytest.raises(DuplicateKeyError) as err:
        loads_strict('{"a": 1,\n "c": [\n  {"b": 2, "b": 3}]}')
    assert (err.value.key, err.value.line, err.value.col) == ("b", 3, 3)


def test_a_run_record_or_workflow_with_a_repeated_key_is_refused(workdir, capsys):
    (workdir / "r.run.json").write_text('{"streammap_run": 1,\n "status": "ok", "status": "failed"}')
    refused(["show", "r.run.json"], capsys, "r.run.json:1:1:", "duplicate key 'status'")
    (workdir / "g.json").write_text('{"nodes": [{"id": "a", "runtime": 1, "runtime": 1e9}], "edges": []}')
    refused(["compile", "g.json", "--cluster", "cluster.yaml", "-o", "p.yaml"], capsys, "g.json:1:", "'runtime'")


# -- inputs that are not regular files -------------------------------------------------------------

def special_files(folder: Path) -> dict[str, Path]:
    """A FIFO, a character device, a socket and a folder: each blocks, never ends, or is no file."""
    fifo = folder / "pipe.py"
    os.mkfifo(fifo)
    sock_path = folder / "sock.py"
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(sock_path))
    (folder / "dir.py").mkdir()
    return {"a named pipe (FIFO)": fifo, "a character device": Path("/dev/zero"), "a socket": sock_path,
            "a folder": folder / "dir.py"}


#: Per input role: the suffix its command reads by, and the command line with the input as {}.
ROLES = {
    "program": (".py", ["compile", "{}", "--cluster", "cluster.yaml", "-o", "p.yaml", "--no-history"]),
    "cluster": (".yaml", ["compile", "fm_radio.py", "--cluster", "{}", "-o", "p.yaml", "--no-history"]),
    "plan": (".yaml", ["run", "{}", "--emulate", "-o", "out.npz"]),
    "record": (".run.json", ["show", "{}"]),
    "jobs": (".yaml", ["simulate", "--jobs", "{}", "--cluster", "cluster.yaml"]),
    "tenants": (".yaml", ["simulate", "--jobs", "j.yaml", "--cluster", "cluster.yaml", "--tenants", "{}"]),
}


@pytest.mark.parametrize("role", ROLES)
def test_an_input_that_is_not_a_regular_file_is_refused_before_it_is_opened(workdir, capsys, role):
    (workdir / "j.yaml").write_text("- {program: fm_radio.py, tenant: a}\n")
    suffix, argv = ROLES[role]
    for kind, path in special_files(workdir).items():
        link = _with_suffix(path, suffix, workdir)
        refused([str(link) if a == "{}" else a for a in argv], capsys, kind)
    written = [p.name for p in workdir.iterdir() if p.name.startswith(("p.yaml", "out.npz", "simulate-out"))]
    assert written == []


def _with_suffix(path: Path, suffix: str, folder: Path) -> Path:
    """A link named ``*suffix`` to ``path`` (links are followed: what they name is checked)."""
    link = folder / ("input_" + path.name.replace(".", "_") + suffix)
    if not link.is_symlink():
        link.symlink_to(path)
    return link


def test_a_record_that_is_a_fifo_is_refused_by_the_reader_itself(tmp_path):
    from streammap.runrecord import read_run_record
    os.mkfifo(tmp_path / "r.run.json")
    with pytest.raises(StreamMapError, match="named pipe"):
        read_run_record(tmp_path / "r.run.json")


def test_a_json_body_is_still_read_with_its_numbers(tmp_path):
    # The strict reader reads what json.loads reads (no regression of big or exotic numbers).
    text = json.dumps({"a": [1, 2.5, -0.0, 10 ** 30, None, True, "x"]})
    assert loads_strict(text) == json.loads(text)


# -- params edited in a plan -------------------------------------------------------------------------

SIZED = '''
import numpy as np

# @stream param
N = 64


# @stream kernel(flops=N, out=8*N)
def make():
    return np.ones(N)


# @stream graph
def main():
    return make()
'''


@pytest.fixture
def sized_plan(workdir):
    (workdir / "sized.py").write_text(SIZED)
    assert main(["compile", "sized.py", "-D", "N=128", "--cluster", "cluster.yaml", "-o", "plan.yaml",
                 "--no-history"]) == 0
    return workdir / "plan.yaml"


def test_a_plan_runs_with_the_params_it_was_compiled_for(sized_plan, capsys):
    assert "params_sha256:" in sized_plan.read_text()
    assert main(["run", str(sized_plan), "--emulate", "-o", "out.npz"]) == 0
    assert np.load(sized_plan.parent / "out.npz")["result"].shape == (128,)


@pytest.mark.parametrize("edit, shown", [
    ("N: 1000000000000", "-D N=1000000000000"),       # a size never compiled: huge allocations
    ("N: '128'", """-D 'N="128"'"""),                 # a type the program never had (quoted for the shell)
    ("N: 128.0", "-D N=128.0"),
])
def test_params_edited_by_hand_are_refused_before_anything_runs(sized_plan, capsys, edit, shown):
    text = sized_plan.read_text()
    assert "\nparams: {N: 128}\n" in text
    sized_plan.write_text(text.replace("\nparams: {N: 128}\n", f"\nparams: {{{edit}}}\n"))
    err = refused(["run", sized_plan, "--emulate", "-o", "out.npz"], capsys, "plan.yaml:",
                  "not the ones it was compiled for", f"streammap compile sized.py {shown} --cluster")
    assert not (sized_plan.parent / "out.npz").exists()
    assert "hint:" in err


def test_a_plan_whose_params_digest_was_removed_is_refused(sized_plan, capsys):
    text = sized_plan.read_text()
    sized_plan.write_text(re.sub(r", params_sha256: [0-9a-f]{64}", "", text))
    refused(["run", sized_plan, "--emulate", "-o", "out.npz"], capsys, "carry no digest")


def test_a_plan_param_the_program_does_not_declare_is_refused_at_run(sized_plan, capsys):
    # Written in-process (the digest is then right): the runtime still sets only declared params,
    # never a kernel or a module of the program.
    plan = read_plan(sized_plan)
    plan.params["make"] = 3
    write_plan(plan, sized_plan)
    refused(["run", sized_plan, "--emulate", "-o", "out.npz"], capsys, "'make', which is not a # @stream param",
            "its params: N")


# -- the service's own flags -------------------------------------------------------------------------

@pytest.mark.parametrize("flag, value", [
    ("--header-timeout", "nan"), ("--header-timeout", "-1"), ("--body-timeout", "inf"), ("--check-timeout", "0"),
    ("--check-memory", "0"), ("--checks", "-3"), ("--max-requests", "0"), ("--port", "70000"),
])
def test_serve_refuses_a_bound_that_is_not_a_number_in_range_before_starting(tmp_path, capsys, flag, value):
    with pytest.raises(SystemExit) as stop:
        main(["serve", "--cluster", "c.yaml", "--state", str(tmp_path / "state"), flag, value])
    assert stop.value.code == 2
    assert f"argument {flag}: {value} is not" in capsys.readouterr().err
    assert not (tmp_path / "state").exists()
