"""A new user's first hour with the CLI (issue 19), as the README walks it: each wrong turn a
first session takes ends with one clear message and exit status 2, before anything is printed
or written, and the right turns give what the README says they give."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

import streammap.cli.show as show_command
from streammap.cli import main
from streammap.views import show as show_views
from tests.helpers.paths import ROOT, SAMPLES

TINY = SAMPLES / "clusters" / "tiny-gpus.yaml"


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """``plan.yaml`` of the FM-radio sample and ``out.run.json`` of its emulated run, made once for
    this module in a folder of their own (with a history of their own); the tests only read them."""
    folder = tmp_path_factory.mktemp("first-plan")
    plan = folder / "plan.yaml"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("STREAMMAP_HISTORY", str(folder / "history"))
        assert main(["compile", str(SAMPLES / "fm_radio.py"), "--cluster", str(TINY), "-D", "N=1024",
                     "-o", str(plan)]) == 0
        assert main(["run", str(plan), "--emulate", "-o", str(folder / "out.npz"), "--no-progress"]) == 0
    return plan, folder / "out.run.json"


@pytest.mark.parametrize("kind,option,needle", [
    ("plan", "--html", "--html writes a run report; give it a run record"),
    ("record", "--graph", "--graph draws a plan's task graph; give it the plan file"),
])
def test_an_option_for_the_other_kind_of_file_is_refused_before_anything_is_shown_or_drawn(
        compiled, tmp_path, capsys, kind, option, needle):
    plan, record = compiled
    target = plan if kind == "plan" else record
    picture = tmp_path / "gantt.png"
    assert main(["show", str(target), "--gantt", str(picture), option, str(tmp_path / "x.out")]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith(f"{target}: error: {needle}")
    assert not picture.exists() and not (tmp_path / "x.out").exists()


ONLY_OUT = '''\
import numpy as np

# @stream param
N = 4096


# @stream kernel(out=8*N)
def make(i):
    return np.full(N, float(i))


# @stream kernel(flops=4*N, bytes=16*N, out=8*N)
def work(x):
    return x * 2


# @stream kernel(bytes=32*N, out=8*N)
def total(*xs):
    return sum(xs)


# @stream graph
def main():
    return total(*[work(make(i)) for i in range(4)])
'''


def _placements(plan_path) -> tuple[float, dict]:
    plan = yaml.safe_load(plan_path.read_text())
    return plan["mapper"]["estimated_makespan"], {t["id"]: (t["device"], t["start"], t["finish"]) for t in plan["tasks"]}


@pytest.mark.parametrize("program", ["only_out.py", "fm_radio.py"])
def test_an_emitted_graph_compiles_back_to_the_same_plan(tmp_path, capsys, program):
    source = tmp_path / program
    source.write_text(ONLY_OUT if program == "only_out.py" else (SAMPLES / program).read_text())
    graph, first, second = tmp_path / "g.json", tmp_path / "a.yaml", tmp_path / "b.yaml"
    assert main(["compile", str(source), "--cluster", str(TINY), "--emit-graph", str(graph), "-o", str(first)]) == 0
    assert main(["compile", str(graph), "--cluster", str(TINY), "-o", str(second)]) == 0, capsys.readouterr().err
    assert _placements(second) == _placements(first)


def test_a_hand_written_node_without_any_estimate_is_still_refused(tmp_path, capsys):
    graph = {"directed": True, "multigraph": False, "graph": {"name": "wf"},
             "nodes": [{"id": "a", "out": 8}], "edges": []}
    (tmp_path / "g.json").write_text(json.dumps(graph))
    assert main(["compile", str(tmp_path / "g.json"), "--cluster", str(TINY), "-o", str(tmp_path / "p.yaml")]) == 2
    assert "task a has no runtime" in capsys.readouterr().err


def test_the_record_of_a_failed_run_shows_its_error_with_one_prefix(tmp_path, capsys):
    source = tmp_path / "bad.py"
    source.write_text(ONLY_OUT.replace("    return sum(xs)\n", "    raise ValueError('boom in total')\n"))
    plan = tmp_path / "plan.yaml"
    assert main(["compile", str(source), "--cluster", str(TINY), "-o", str(plan)]) == 0
    assert main(["run", str(plan), "--emulate", "-o", str(tmp_path / "out.npz"), "--no-progress"]) == 1
    capsys.readouterr()
    assert main(["show", str(tmp_path / "out.run.json")]) == 0
    out = capsys.readouterr().out
    assert "error: task total@bad.py:" in out and "boom in total" in out
    assert "error: error" not in out


@pytest.mark.parametrize("recorded,shown", [
    ("error: task t failed on vm/cpu", "error: task t failed on vm/cpu"),
    ("prog.py:12: error: split=1 cuts along axis 1", "prog.py:12: error: split=1 cuts along axis 1"),
    ("ValueError: boom", "error: ValueError: boom"),
])
def test_a_recorded_error_reads_error_once(recorded, shown):
    assert show_views.error_line(recorded) == shown


# -- the README's "Your first program", followed literally -------------------------------------------

README = ROOT / "README.md"
ONE_CPU = {"name": "one", "nodes": [{"name": "n0", "devices": [{"name": "cpu", "kind": "cpu"}]}]}


def _readme_block(after: str, language: str) -> str:
    """The first fenced ``language`` block of the README after the line starting with ``after``."""
    text = README.read_text(encoding="utf-8")
    start = text.index("\n" + after)
    block = text.index(f"\n```{language}\n", start) + len(f"\n```{language}\n")
    return text[block:text.index("\n```\n", block) + 1]


def _said_to_print(command_start: str) -> str:
    """What the README's comment says the shell line starting with ``command_start`` prints."""
    for line in _readme_block("## Your first program", "sh").splitlines():
        if line.startswith(command_start):          # "... # what it is: prints X" or "... # what it is: X"
            return line.split("#", 1)[1].rsplit(": ", 1)[1].removeprefix("prints ")
    raise AssertionError(f"no README line starts with {command_start!r}")


@pytest.fixture
def first_program(tmp_path):
    """``blur.py`` as the README gives it, and a one-CPU ``cluster.yaml``, in ``tmp_path``."""
    (tmp_path / "blur.py").write_text(_readme_block("## Your first program", "python"))
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump(ONE_CPU))
    return tmp_path


def _plain_python(folder, *args) -> str:
    return subprocess.run([sys.executable, "blur.py", *args], cwd=folder, check=True, capture_output=True,
                          text=True).stdout.strip()


def _through_streammap(folder, monkeypatch, capsys) -> float:
    monkeypatch.chdir(folder)
    assert main(["compile", "blur.py", "--cluster", "cluster.yaml", "-D", "SIZE=64", "-o", "blur.yaml"]) == 0
    assert main(["run", "blur.yaml", "-o", "out.npz", "--no-progress"]) == 0
    capsys.readouterr()
    return float(np.load(folder / "out.npz")["result"].mean())


def test_the_first_program_prints_what_the_readme_says_in_plain_python_and_through_streammap(
        first_program, monkeypatch, capsys):
    assert _plain_python(first_program, "64") == _said_to_print("python blur.py 64")
    assert repr(_through_streammap(first_program, monkeypatch, capsys)) == _said_to_print("python -c")


def test_the_first_program_with_its_helper_module_gives_the_same_numbers_and_guards_the_module(
        first_program, monkeypatch, capsys):
    (first_program / "helpers.py").write_text(_readme_block("A second file works", "python"))
    program = (first_program / "blur.py").read_text()
    old = "    return (img + xp.roll(img, 1, 0) + xp.roll(img, -1, 0) + xp.roll(img, 1, 1) + xp.roll(img, -1, 1)) / 5\n"
    assert old in program
    program = program.replace("import streammap\n", "import streammap\nimport helpers\n", 1)
    (first_program / "blur.py").write_text(program.replace(old, "    return (img + helpers.neighbours(xp, img)) / 5\n"))
    assert _plain_python(first_program, "64") == _said_to_print("python blur.py 64")
    assert repr(_through_streammap(first_program, monkeypatch, capsys)) == _said_to_print("python -c")
    assert [m["path"] for m in yaml.safe_load(Path("blur.yaml").read_text())["source"]["modules"]] == ["helpers.py"]
    with Path("helpers.py").open("a") as f:
        f.write("# changed\n")
    assert main(["run", "blur.yaml", "-o", "out.npz", "--no-progress"]) == 2
    assert "helpers.py (imported by blur.py) has changed" in capsys.readouterr().err


# -- output into a pipe that closes early (`streammap show plan.yaml | head`) -----------------------

@pytest.mark.parametrize("command", [["show", "{plan}"], ["show", "{record}"],
                                     ["export", "k8s", "{plan}", "-o", "{folder}"]])
def test_a_reader_that_stops_early_ends_the_command_quietly(compiled, tmp_path, command):
    plan, record = compiled
    argv = [a.format(plan=plan, record=record, folder=tmp_path / "k8s") for a in command]
    child = subprocess.Popen([sys.executable, "-m", "streammap.cli", *argv], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
    child.stdout.close()                   # the reader is gone before the first line is written
    err = child.stderr.read().decode()
    assert child.wait() == 141, err        # as a command ended by SIGPIPE exits in a shell
    assert err == ""


def test_a_broken_pipe_that_is_not_standard_output_is_not_taken_for_a_reader_gone(compiled, monkeypatch):
    # Status 141 says "the reader of the output stopped early", which is no failure; a pipe to a
    # child process or a socket that breaks is one, and must not end the command quietly.
    def broken(args):
        raise BrokenPipeError(32, "Broken pipe (a worker's pipe)")

    monkeypatch.setattr(show_command, "run", broken)
    with pytest.raises(BrokenPipeError, match="a worker's pipe"):
        main(["show", str(compiled[0])])
