"""The command line as a user meets it: the documented session works, and bad input gets a
``file:line: error:`` message, exit status 2, and no output file."""

import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml

from streammap.cli import main
from tests.helpers.paths import SAMPLES

FM = SAMPLES / "fm_radio.py"



@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    shutil.copy(FM, tmp_path / "fm_radio.py")
    return tmp_path


def test_the_documented_session_discovers_compiles_shows_and_runs(workdir, capsys):
    assert main(["discover", "-o", "cluster.yaml"]) == 0
    assert main(["compile", "fm_radio.py", "--cluster", "cluster.yaml", "-D", "N=4096", "-o", "plan.yaml"]) == 0
    assert main(["show", "plan.yaml", "--gantt", "plan.png", "--graph", "graph.png"]) == 0
    assert main(["run", "plan.yaml", "-o", "out.npz", "--emulate", "--no-progress"]) == 0
    assert main(["show", "out.run.json", "--gantt", "run.png"]) == 0
    for f in ("cluster.yaml", "plan.yaml", "plan.png", "graph.png", "out.npz", "out.run.json", "run.png"):
        assert (workdir / f).stat().st_size > 0, f
    assert np.load("out.npz")["result"].shape == (4096,)
    out = capsys.readouterr().out
    assert "wrote plan.yaml" in out and "bandpass" in out


def test_compile_is_deterministic_byte_for_byte(workdir):
    for name in ("a.yaml", "b.yaml"):
        assert main(["compile", "fm_radio.py", "--cluster", "local", "-D", "N=1024", "-o", name]) == 0
    assert Path("a.yaml").read_bytes() == Path("b.yaml").read_bytes()


def test_param_override_reaches_the_plan_and_the_run(workdir):
    assert main(["compile", "fm_radio.py", "--cluster", "local", "-D", "N=1<<11", "-D", "BANDS=3", "-o", "p.yaml"]) == 0
    plan = yaml.safe_load(Path("p.yaml").read_text())
    assert plan["params"] == {"N": 2048, "BANDS": 3}
    assert sum(t["kernel"] == "bandpass" for t in plan["tasks"]) == 3
    assert main(["run", "p.yaml", "-o", "o.npz", "--no-progress"]) == 0
    assert np.load("o.npz")["result"].shape == (2048,)


def test_compile_error_names_file_line_column_and_writes_no_plan(workdir, capsys):
    src = Path("fm_radio.py").read_text().replace("# @stream kernel(flops=12*N", "# @stream kernel(flop=12*N")
    Path("fm_radio.py").write_text(src)
    assert main(["compile", "fm_radio.py", "--cluster", "local", "-o", "plan.yaml"]) == 2
    err = capsys.readouterr().err
    line = next(i for i, l in enumerate(src.splitlines(), 1) if "kernel(flop=" in l)  # noqa: E741
    assert f"fm_radio.py:{line}:" in err and "error:" in err and "flop" in err
    assert "^" in err and "hint:" in err
    assert not Path("plan.yaml").exists()


def test_unknown_param_in_define_is_refused(workdir, capsys):
    assert main(["compile", "fm_radio.py", "--cluster", "local", "-D", "M=3", "-o", "plan.yaml"]) == 2
    err = capsys.readouterr().err
    assert "M" in err and "N" in err and "BANDS" in err
    assert not Path("plan.yaml").exists()


def test_malformed_define_is_refused(workdir, capsys):
    assert main(["compile", "fm_radio.py", "--cluster", "local", "-D", "N", "-o", "plan.yaml"]) == 2
    assert "NAME=VALUE" in capsys.readouterr().err


def test_bad_cluster_file_names_the_line_and_field(workdir, capsys):
    Path("c.yaml").write_text("name: lab\nnodes:\n  - name: n0\n    devices:\n      - {name: g0, kind: gpu, memory: lots}\n")
    assert main(["compile", "fm_radio.py", "--cluster", "c.yaml", "-o", "plan.yaml"]) == 2
    err = capsys.readouterr().err
    assert "c.yaml:5:" in err and "nodes[0].devices[0].memory" in err and "80GiB" in err
    assert not Path("plan.yaml").exists()


def test_cluster_file_with_unknown_field_is_refused(workdir, capsys):
    Path("c.yaml").write_text("name: lab\nnodes:\n  - name: n0\n    devices:\n      - {name: c, kind: cpu, memroy: 1GiB}\n")
    assert main(["compile", "fm_radio.py", "--cluster", "c.yaml", "-o", "plan.yaml"]) == 2
    assert "unknown field 'memroy'" in capsys.readouterr().err


def test_kernel_that_fits_on_no_device_is_a_compile_error_at_its_call(workdir, capsys):
    src = Path("fm_radio.py").read_text().replace("# @stream kernel(flops=12*N,", "# @stream kernel(device=\"gpu\", flops=12*N,")
    Path("fm_radio.py").write_text(src)
    Path("c.yaml").write_text("name: cpuonly\nnodes:\n  - name: n0\n    devices:\n      - {name: cpu, kind: cpu}\n")
    assert main(["compile", "fm_radio.py", "--cluster", "c.yaml", "-o", "plan.yaml"]) == 2
    err = capsys.readouterr().err
    assert "fm_radio.py:" in err and "demodulate" in err
    assert not Path("plan.yaml").exists()


def test_run_refuses_a_plan_whose_source_changed(workdir, capsys):
    assert main(["compile", "fm_radio.py", "--cluster", "local", "-D", "N=1024", "-o", "plan.yaml"]) == 0
    with open("fm_radio.py", "a") as f:
        f.write("\n# edited\n")
    assert main(["run", "plan.yaml", "-o", "out.npz", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "changed since this plan was compiled" in err and "compile it again" in err
    assert not Path("out.npz").exists()


def test_run_refuses_an_invalid_plan_with_its_line(workdir, capsys):
    assert main(["compile", "fm_radio.py", "--cluster", "local", "-D", "N=1024", "-o", "plan.yaml"]) == 0
    text = Path("plan.yaml").read_text()
    first_device = yaml.safe_load(text)["tasks"][0]["device"]
    Path("plan.yaml").write_text(text.replace(f"device: {first_device}", "device: nowhere/gpu9", 1))
    assert main(["run", "plan.yaml", "-o", "out.npz", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "plan.yaml:" in err and "nowhere/gpu9" in err


def test_kernel_failure_exits_1_with_task_site_and_traceback(workdir, capsys):
    src = Path("fm_radio.py").read_text().replace('    """Sum the bands back into one audio signal."""\n',
                                                  '    """Sum the bands back into one audio signal."""\n    raise ValueError("boom in combine")\n')
    Path("fm_radio.py").write_text(src)
    assert main(["compile", "fm_radio.py", "--cluster", "local", "-D", "N=1024", "-o", "plan.yaml"]) == 0
    assert main(["run", "plan.yaml", "-o", "out.npz", "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert "combine@fm_radio.py:" in err and "boom in combine" in err and "Traceback" in err
    assert not Path("out.npz").exists()


def test_workflow_compiles_and_keeps_task_ids(workdir, shared):
    wf = shared / "workflows" / "blast-chameleon-small-001.json"
    assert main(["compile", str(wf), "--cluster", str(shared / "clusters" / "hetero-2x4.yaml"),
                 "-o", "wf.yaml", "--emit-graph", "g.json"]) == 0
    import json
    plan = yaml.safe_load(Path("wf.yaml").read_text())
    spec_ids = {t["id"] for t in json.loads(wf.read_text())["workflow"]["specification"]["tasks"]}
    assert {t["id"] for t in plan["tasks"]} == spec_ids
    assert plan["source"]["kind"] == "workflow"
    assert json.loads(Path("g.json").read_text())["directed"] is True


def test_topcuoglu_example_gives_the_papers_makespan(workdir, shared):
    assert main(["compile", str(shared / "classic" / "topcuoglu-10.json"),
                 "--cluster", str(shared / "clusters" / "topcuoglu-3p.yaml"), "--mapper", "heft", "-o", "t.yaml"]) == 0
    assert yaml.safe_load(Path("t.yaml").read_text())["mapper"]["estimated_makespan"] == 80


def test_unknown_mapper_is_refused(workdir, capsys):
    assert main(["compile", "fm_radio.py", "--cluster", "local", "--mapper", "magic", "-o", "plan.yaml"]) == 2
    assert "heft" in capsys.readouterr().err


def test_missing_source_file(workdir, capsys):
    assert main(["compile", "nope.py", "--cluster", "local", "-o", "plan.yaml"]) == 2
    assert "nope.py" in capsys.readouterr().err


def test_auto_plans_are_identical_across_processes_and_hash_seeds(tmp_path, shared):
    import os
    import subprocess
    import sys
    wf = shared / "workflows" / "montage-chameleon-2mass-01d-001.json"
    cluster = shared / "clusters" / "mixed-vendors.yaml"
    outs = []
    for seed in ("1", "4242"):
        out = tmp_path / f"plan{seed}.yaml"
        env = dict(os.environ, PYTHONHASHSEED=seed)
        subprocess.run([sys.executable, "-m", "streammap.cli", "compile", str(wf), "--cluster", str(cluster),
                        "-o", str(out), "--no-history"], check=True, env=env, capture_output=True, timeout=300)
        outs.append(out.read_bytes())
    assert outs[0] == outs[1]
    assert yaml.safe_load(outs[0])["mapper"]["name"].startswith("auto")


def test_a_string_param_takes_a_bare_word_from_the_shell(workdir):
    Path("modes.py").write_text(
        "# @stream param\nMODE = 'fast'\n# @stream param\nN = 8\n\n"
        "# @stream kernel(out=8*N)\ndef make(mode):\n    import numpy as np\n"
        "    return np.full(N, 2.0 if mode == 'fast' else 1.0)\n\n"
        "# @stream graph\ndef main():\n    return make(MODE)\n")
    assert main(["compile", "modes.py", "--cluster", "local", "-D", "MODE=slow", "-o", "m.yaml", "--no-history"]) == 0
    assert yaml.safe_load(Path("m.yaml").read_text())["params"]["MODE"] == "slow"
    # a numeric param still refuses a word
    assert main(["compile", "modes.py", "--cluster", "local", "-D", "N=eight", "-o", "n.yaml", "--no-history"]) == 2
    assert not Path("n.yaml").exists()


def test_errors_are_not_wrapped_so_the_caret_stays_under_the_column(workdir, capsys):
    long_name = "x" * 120
    Path("wide.py").write_text(
        f"# @stream kernel(flops=1)\ndef k(a):\n    return a\n\n# @stream graph\ndef main():\n"
        f"    {long_name} = k(1)\n    return print({long_name})\n")
    assert main(["compile", "wide.py", "--cluster", "local", "-o", "w.yaml"]) == 2
    lines = capsys.readouterr().err.splitlines()
    src = next(i for i, line in enumerate(lines) if "return print(" in line)
    caret = lines[src + 1]
    assert caret.strip() == "^"
    assert lines[src][caret.index("^"):].startswith("print")


def test_an_output_path_that_cannot_be_written_is_an_error_not_a_traceback(workdir, capsys):
    assert main(["compile", "fm_radio.py", "--cluster", "local", "-o", "missing/plan.yaml"]) == 2
    err = capsys.readouterr().err
    assert "missing/plan.yaml: error: cannot write the plan" in err and "Traceback" not in err
    assert main(["compile", "fm_radio.py", "--cluster", "local", "-D", "N=1024", "-o", "plan.yaml"]) == 0
    assert main(["run", "plan.yaml", "-o", "missing/out.npz", "--no-progress"]) == 2
    assert "cannot write the outputs" in capsys.readouterr().err
    assert not list(Path(".").glob(".*.tmp*"))
