"""``streammap profile``: runs a program's tasks on this machine, records them, and compile uses them."""

from __future__ import annotations

import json

import pytest

from streammap.cli import build_parser
from streammap.cluster.model import ClusterSpec, DeviceSpec, Node, cluster_from_dict
from streammap.cost.calibrate import profile
from streammap.cost.history import History, estimate_sources_summary, history_file
from streammap.cost.model import CostModel
from streammap.directives import parse_program
from streammap.errors import StreamMapError

CPU = "Profile Test CPU"

PROGRAM = """
import numpy as np

# @stream param
N = 256

# @stream kernel(flops=N, out=8*N)
def make(seed):
    return np.random.default_rng(seed).standard_normal(N)

# @stream kernel(flops=N*N, bytes=8*N, out=8*N)
def smooth(x):
    return np.convolve(x, np.ones(N) / N, mode="same")

# @stream kernel(flops=N, out=8*N, device="gpu")
def gpu_only(x):
    return x * 2

# @stream kernel(flops=2*N, bytes=16*N, out=8*N)
def add(a, b):
    return a + b

# @stream graph
def main():
    xs = [smooth(make(s)) for s in range(3)]
    return add(add(xs[0], xs[1]), gpu_only(xs[2]))
"""


def machine(extra=()):
    """This machine as discovery would describe it, with a fixed CPU model (and maybe other devices)."""
    devices = [DeviceSpec(name="cpu", kind="cpu", model=CPU, flops=1e11, mem_bandwidth=2e10), *extra]
    link = {"bandwidth": 1e10} if len(devices) > 1 else None
    return ClusterSpec(name="local", nodes=[Node(name="box", link=link, devices=devices)])


@pytest.fixture
def program(tmp_path):
    path = tmp_path / "tiny.py"
    path.write_text(PROGRAM)
    return path


def test_profile_writes_history_and_compile_uses_it(tmp_path, program):
    hist = tmp_path / "hist"
    rep = profile(program, params={"N": 128}, repeats=2, history_dir=hist, spec=machine())
    assert rep.devices == ["box/cpu"] and rep.notes == []
    kernels = {r.kernel for r in rep.rows}
    assert kernels == {"make", "smooth", "add"}                 # gpu_only ran but is not a CPU kernel
    assert rep.records == 3 + 3 + 2
    assert not history_file(hist, "tiny", "gpu_only").exists()
    row = next(r for r in rep.rows if r.kernel == "smooth")
    assert row.tasks == 3 and row.measured > 0 and row.estimate > 0 and row.ratio > 0

    line = json.loads(history_file(hist, "tiny", "smooth").read_text().splitlines()[0])
    assert line["device_model"] == CPU and line["origin"] == "profile" and line["repeats"] == 2
    assert line["params"] == {"N": 128}

    # compile at the same params: every CPU estimate comes from the history, exactly.
    g = parse_program(program, overrides={"N": 128})
    clus = cluster_from_dict({"name": "c", "nodes": [{"name": "box", "devices": [
        {"name": "cpu", "kind": "cpu", "model": CPU},
    ]}]})
    h = History.load(hist)
    cost = CostModel(g, clus, history=h.as_hook())
    by_kernel = {g.nodes[t]["kernel"]: s for t, s in zip(cost.tasks, cost.source)}
    assert by_kernel == {"make": "history", "smooth": "history", "add": "history", "gpu_only": "clauses"}
    assert h.lookups["exact"] == 8
    assert estimate_sources_summary(cost) == "estimates: 8 tasks from history, 1 from clauses"
    i = cost.pos[next(t for t in cost.tasks if g.nodes[t]["kernel"] == "smooth")]
    assert cost.time[i, 0] == pytest.approx(h.estimate("smooth", CPU, g.nodes[cost.tasks[i]]))


def test_profile_skips_devices_it_cannot_drive(tmp_path, program, monkeypatch):
    import streammap.cost.calibrate as calibrate
    monkeypatch.setattr(calibrate, "import_cupy", lambda: None)         # a machine without CuPy
    spec = machine(extra=[DeviceSpec(name="gpu0", kind="gpu", vendor="nvidia", model="H200", index=0),
                          DeviceSpec(name="mlu0", kind="mlu", vendor="cambricon")])
    rep = profile(program, repeats=1, history_dir=tmp_path / "h", spec=spec)
    assert rep.devices == ["box/cpu"]
    assert any("gpu0" in n and "CuPy" in n for n in rep.notes)
    assert any("mlu0" in n for n in rep.notes)
    assert History.load(tmp_path / "h").kernel_models("tiny", "make").keys() == {CPU}


def test_profile_device_filter_and_errors(tmp_path, program):
    with pytest.raises(StreamMapError, match="--device gpu: no device of this machine") as err:
        profile(program, repeats=1, devices=["gpu"], history_dir=tmp_path / "h", spec=machine())
    assert "box/cpu (cpu, Profile Test CPU)" in err.value.hint
    assert not (tmp_path / "h").exists()
    with pytest.raises(StreamMapError):
        profile(tmp_path / "flow.json", history_dir=tmp_path / "h", spec=machine())
    with pytest.raises(StreamMapError):
        profile(program, repeats=0, history_dir=tmp_path / "h", spec=machine())


def test_profile_command_prints_a_table(tmp_path, program, monkeypatch, capsys):
    import streammap.cli.profile as command
    monkeypatch.setattr(command, "profile", lambda *a, **k: profile(*a, spec=machine(), **k))
    parser = build_parser("profile")
    args = parser.parse_args(["profile", str(program), "-D", "N=64", "--repeats", "1",
                              "--history", str(tmp_path / "h")])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert "smooth" in out and "clause estimate" in out and "recorded 8 measurement(s)" in out
    assert History.load(tmp_path / "h").kernel_models("tiny", "smooth")[CPU].by_size


CPU_PROGRAM = PROGRAM.replace(', device="gpu"', "")


def test_compile_names_kernels_whose_code_changed_since_they_were_measured(tmp_path, capsys):
    from streammap.cli import main
    from streammap.plan import read_plan
    program, hist = tmp_path / "tiny.py", tmp_path / "hist"
    program.write_text(CPU_PROGRAM)
    profile(program, params={"N": 64}, repeats=1, history_dir=hist, spec=machine())
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(f"name: c\nnodes:\n  - name: box\n    devices:\n      - {{name: cpu, kind: cpu, model: {CPU}}}\n")

    def compile_it():
        code = main(["compile", str(program), "--cluster", str(cluster), "-D", "N=64", "--history", str(hist),
                     "-o", str(tmp_path / "plan.yaml")])
        assert code == 0
        plan = read_plan(tmp_path / "plan.yaml")
        return capsys.readouterr().out, {t.kernel: t.estimate for t in plan.tasks}

    out, sources = compile_it()
    assert set(sources.values()) == {"history"} and "not used" not in out

    program.write_text(CPU_PROGRAM.replace('mode="same")', 'mode="same") * 1.0'))    # smooth's code changes
    out, sources = compile_it()
    assert sources == {"make": "history", "smooth": "clauses", "gpu_only": "history", "add": "history"}
    assert "history: not used for tiny.smooth, whose code changed since it was measured" in out

    profile(program, params={"N": 64}, repeats=1, history_dir=hist, spec=machine())   # measured again
    out, sources = compile_it()
    assert set(sources.values()) == {"history"} and "not used" not in out
