"""Every reproduction of issue 15 (a fuzzer's and a hostile tenant's inputs) is a clean refusal:
exit status 2, a message naming the file, the line where there is one, and the limit that was
hit; never a traceback, a hang or a memory blow-up."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml

import streammap
from streammap.cli import main
from streammap.directives.safe_eval import Locator, safe_eval
from streammap.errors import DirectiveError, PlanError, StreamMapError
from streammap.strategies.kernels import gather, scatter
from tests.helpers.cli import refused

ROOT = Path(__file__).resolve().parents[2]
FM = ROOT / "samples" / "fm_radio.py"
CLUSTER = ROOT / "samples" / "clusters" / "tiny-gpus.yaml"

KERNEL = '''
# @stream kernel({clause})
def k(x=0):
    return x

# @stream graph
def main():
{body}
'''


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    shutil.copy(CLUSTER, tmp_path / "cluster.yaml")
    return tmp_path


def program(folder: Path, clause="flops=1", body="    return k()", head="", name="p.py") -> Path:
    path = folder / name
    path.write_text(head + KERNEL.format(clause=clause, body=body))
    return path


def compile_args(path, *extra):
    return ["compile", path, "--cluster", "cluster.yaml", "-o", "plan.yaml", "--no-history", *extra]


# -- the directive language: bounded work ----------------------------------------------------------

def test_a_tuple_bomb_in_a_clause_is_refused_at_its_line(workdir, capsys):
    bomb = "(((1,)*10000,)*10000,)*10000"
    path = program(workdir, clause=f"flops=0*({bomb} == {bomb}), out=8")
    refused(compile_args(path), capsys, "p.py:2:", "limit: 10000 items in all")
    assert not (workdir / "plan.yaml").exists()


def test_doubling_a_list_in_a_loop_is_refused_at_the_list_limit(workdir, capsys):
    body = "    a = [1]\n    for i in range(40):\n        a = a + a\n    return k()"
    path = program(workdir, body=body)
    refused(compile_args(path), capsys, "p.py:10:", "longer than the limit of 1000000")



@pytest.mark.parametrize("repeat", ["[1] * -10**100", "-10**100 * [1]", "'ab' * -10**100", "(1,) * -10**100"])
def test_a_sequence_repeated_a_negative_googol_times_is_empty_as_in_python(workdir, repeat):
    """A repeat count past the machine's index size crashed the graph builder with an OverflowError."""
    body = f"    a = {repeat}\n    return [k(i) for i in range(len(a) + 1)]"
    path = program(workdir, body=body)
    plan = streammap.compile(path, cluster=CLUSTER, history=False)
    assert len(plan.tasks) == 1

def test_a_program_of_more_tasks_than_max_tasks_is_refused(workdir, capsys):
    body = "    ys = [k(i) for i in range(50)]\n    return ys"
    path = program(workdir, body=body)
    refused(compile_args(path, "--max-tasks", "20"), capsys, "p.py:8:", "limit: max_tasks=20")
    assert main([str(a) for a in compile_args(path, "--max-tasks", "50")]) == 0


def test_the_default_task_budget_is_sized_for_real_programs(workdir):
    path = program(workdir, body="    ys = [k(i) for i in range(300)]\n    return ys")
    plan = streammap.compile(path, cluster=CLUSTER, history=False)
    assert len(plan.tasks) == 300
    with pytest.raises(DirectiveError, match="limit: max_tasks=100"):
        streammap.compile(path, cluster=CLUSTER, history=False, max_tasks=100)


def test_a_clause_too_large_for_a_float_is_refused(workdir, capsys):
    path = program(workdir, clause="flops=10**400")
    refused(compile_args(path), capsys, "p.py:2:", "must be finite and at most 1e+30")


@pytest.mark.parametrize("clause, defines", [
    ("mem=1e308*2", []), ("out=1e308", []), ("flops=1e31, out=8", []), ("bytes=A*B", ["-D", "A=1e200", "-D", "B=1e200"]),
    ("mem=A*B", ["-D", "A=1e20", "-D", "B=1e20"]), ("out=A", ["-D", "A=1e300"])],
    ids=["inf", "near-the-float-end", "just-past-the-bound", "defines-overflowing", "defines-past-the-bound",
         "define-near-the-float-end"])
def test_a_size_clause_past_the_quantity_bound_is_refused_at_its_clause(workdir, capsys, clause, defines):
    """Sizes are at most MAX_QUANTITY (1e30), as a workflow's: finite numbers near 1e308 added up
    past the float range in the estimates and the mappers (overflow warnings on the terminal, a
    task "needing 9.31e+298 GiB")."""
    path = program(workdir, clause=clause, head="# @stream param\nA = 1.0\n# @stream param\nB = 1.0\n")
    err = refused(compile_args(path, *defines), capsys, "p.py:6:", "at most 1e+30")
    assert "RuntimeWarning" not in err and not (workdir / "plan.yaml").exists()


def test_a_huge_override_is_refused(workdir, capsys):
    head = "# @stream param\nN = 4\n"
    path = program(workdir, head=head, body="    ys = [k(i) for i in range(N)]\n    return ys")
    refused(compile_args(path, "-D", "N=10**1000"), capsys, "p.py", "loop iterations")
    refused(compile_args(path, "-D", "N=10**10000"), capsys, "p.py", "N")


def test_an_int_override_given_as_a_number_is_held_to_the_int_limit_as_its_text_is(workdir, capsys):
    """``-D N=10**2000`` is refused at 4,096 bits; the same number handed over as an int (the Python
    API, a jobs file, the job service's JSON) went through unchecked."""
    path = program(workdir, head="# @stream param\nN = 4\n")
    with pytest.raises(DirectiveError, match="integer too large .* param 'N' .*4096 bits"):
        streammap.compile(path, "cluster.yaml", params={"N": 10**2000})
    (workdir / "jobs.yaml").write_text(f"- {{program: p.py, tenant: a, arrival: 0, defines: {{N: {10**2000}}}}}\n")
    refused(["simulate", "--jobs", "jobs.yaml", "--cluster", "cluster.yaml", "--policy", "fifo", "--out", "o"],
            capsys, "param 'N'", "4096 bits")


def test_an_override_past_the_expression_limit_is_refused_in_a_few_lines_even_as_a_bare_word(workdir, capsys):
    """10,000 characters is the limit of an override, also of a bare word taken as a string
    param's value (100,000 went into the plan); the error quotes the start of the value only."""
    head = "# @stream param\nMODE = 'fast'\n# @stream param\nN = 4\n"
    path = program(workdir, head=head)
    err = refused(compile_args(path, "-D", "MODE=" + "y" * 100_000), capsys, "for param 'MODE'",
                  "longer than 10000 characters", "... (100002 characters)")
    assert len(err) < 1000
    err = refused(compile_args(path, "-D", "N=" + "1+" * 50_000 + "1"), capsys, "for param 'N'")
    assert len(err) < 1000
    assert main([str(a) for a in compile_args(path, "-D", "MODE=" + "y" * 10_000)]) == 0


@pytest.mark.parametrize("expr", ["-" * 500 + "1", "+".join(["1"] * 1000)])
def test_deeply_nested_code_anywhere_in_a_file_with_a_directive_is_refused(workdir, capsys, expr):
    path = program(workdir, head=f"X = {expr}\n")
    refused(compile_args(path), capsys, "p.py:1:", "nested more than 100 levels deep")


@pytest.mark.parametrize("expr", ["2 ** (10**400)", "(-3) ** 10**1000", "1 << 10**400"])
def test_powers_and_shifts_by_huge_exponents_are_refused_before_computing(expr):
    """Found by benchmarks/fuzz.py: the size check itself overflowed a float."""
    with pytest.raises(DirectiveError, match="too large"):
        safe_eval(expr, {}, Locator("<expr>", [expr]))


def test_deeply_nested_directive_clauses_are_refused(workdir, capsys):
    path = program(workdir, clause="flops=" + "-" * 300 + "1")
    refused(compile_args(path), capsys, "p.py:2:", "nested more than 100 levels")



def test_a_kernel_retried_a_billion_times_is_refused_at_its_clause(workdir, capsys):
    """A kernel that always fails would be called again for days: retries are bounded, as in workflows."""
    path = program(workdir, clause="flops=1, retries=10**9")
    refused(compile_args(path), capsys, "p.py:2:", "retries must be an int in 0..1000, got 1000000000")
    assert main([str(a) for a in compile_args(program(workdir, clause="flops=1, retries=1000"))]) == 0

@pytest.mark.parametrize("timeout", ["1e300", "10**400"])
def test_a_timeout_longer_than_a_year_is_refused_at_its_clause(workdir, capsys, timeout):
    """The runtime waits on a call for its timeout: 1e300 seconds overflowed the clock of the wait,
    failing every call of the kernel after compile had accepted it."""
    path = program(workdir, clause=f"flops=1, timeout={timeout}")
    refused(compile_args(path), capsys, "p.py:2:", "timeout must be a number of seconds > 0 and at most 31536000")
    assert main([str(a) for a in compile_args(program(workdir, clause="flops=1, timeout=31536000"))]) == 0


@pytest.mark.parametrize("cookie", ["utf-16", "utf-32"])
def test_a_coding_cookie_the_file_cannot_be_read_in_is_refused(workdir, capsys, cookie):
    """A cookie naming a codec that needs a byte-order mark the file lacks raised a UnicodeError
    that is not a UnicodeDecodeError: a traceback."""
    for pad in ("", "\n", "\n\n", "\n\n\n"):      # every length modulo 4: each codec fails its own way
        path = program(workdir, head=f"# -*- coding: {cookie} -*-\n{pad}")
        refused(compile_args(path), capsys, "p.py: error: cannot read program")


def test_output_names_must_be_identifiers(workdir, capsys):
    path = program(workdir, body='    return {"../../x": k()}')
    refused(compile_args(path), capsys, "p.py:8:", "output name '../../x' is not an identifier")


# -- YAML: cluster and plan files ---------------------------------------------------------------------

ALIAS_BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{c}: &{c} [{', '.join(['*' + p] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi"))


@pytest.mark.parametrize("text, needle", [
    (ALIAS_BOMB, "aliases (*name) are not allowed"),
    ("name: &x [*x]\n", "aliases (*name) are not allowed"),
    ("name: lab\nnodes:\n  - name: n\n    devices:\n      - {name: g, kind: gpu, memory: " + "9" * 401 + "}\n",
     "cluster.yaml:5"),
    ("name: lab\x00\n", "not valid YAML"),
    ("[" * 10000 + "]" * 10000, "cluster.yaml"),
])
def test_hostile_cluster_files_are_refused(workdir, capsys, text, needle):
    (workdir / "cluster.yaml").write_text(text)
    refused(compile_args(FM), capsys, needle)


@pytest.mark.parametrize("share", ["1e-320", "5e-324", "1e-7"])
def test_a_share_below_a_millionth_of_a_device_is_refused_at_its_clause_and_in_a_plan(workdir, capsys, compiled, share):
    """share=1e-320 compiled, then every run failed with an OverflowError traceback: the executor
    counts how many such tasks fit a device (1 / share). MIN_SHARE is a millionth."""
    refused(compile_args(program(workdir, clause=f"flops=1, share={share}")), capsys, "p.py:2:", "share must be a number with 1e-06 <= share <= 1")
    assert not (workdir / "plan.yaml").exists() or "share" not in (workdir / "plan.yaml").read_text()
    compiled["tasks"][0]["share"] = float(share)
    bad = write_plan_data(workdir, compiled)
    refused(["run", bad, "-o", "o.npz", "--emulate", "--no-progress"], capsys, "tasks[0].share")
    assert not (workdir / "o.npz").exists()


@pytest.mark.parametrize("old, new, needle", [
    ("memory: 6MiB", "memory: .inf", "memory"), ("memory: 6MiB", "memory: 1.0e+400", "memory"),
    ("memory: 6MiB", "memory: 1e400 GiB", "memory"), ("memory: 6MiB", "memory: 1.0e+31", "memory"),
    ("flops: 10 TFLOP/s", "flops: 1.0e-320", "flops"), ("flops: 10 TFLOP/s", "flops: 1e-300 FLOP/s", "flops"),
    ("mem_bandwidth: 500 GB/s", "mem_bandwidth: .inf", "mem_bandwidth"),
    ("bandwidth: 50 GB/s", "bandwidth: 1e-310 B/s", "bandwidth"), ("latency: 5us", "latency: .inf", "latency"),
    ("memory: 6MiB", "memory: 6MiB, speed: .inf", "speed"), ("memory: 6MiB", "memory: 6MiB, speed: 1.0e-320", "speed"),
    ("memory: 6MiB", "memory: 6MiB, gemm_curve: [[.nan, 1 TFLOP/s]]", "gemm_curve"),
    ("memory: 6MiB", "memory: 6MiB, gemm_curve: [[.inf, 1 TFLOP/s]]", "gemm_curve"),
    ("name: tiny-gpus", "name: tiny-gpus\nmemory_oversubscription: .inf", "memory_oversubscription"),
], ids=["memory-inf", "memory-1e400", "memory-1e400-GiB", "memory-past-the-bound", "flops-denormal", "flops-tiny",
        "mem-bandwidth-inf", "link-denormal", "latency-inf", "speed-inf", "speed-denormal", "curve-nan", "curve-inf",
        "oversubscription-inf"])
def test_a_cluster_quantity_that_is_not_finite_or_past_the_bound_is_refused_at_its_line(workdir, capsys, old, new,
                                                                                        needle):
    """inf, a number past the float range and one past MAX_QUANTITY (1e30) read as an unlimited or
    infinitely fast device (``2MiB of infPiB``), and a rate below 1/MAX_QUANTITY as one whose
    times overflow: each is the cluster file's error at its line."""
    text = (workdir / "cluster.yaml").read_text()
    assert old in text
    (workdir / "cluster.yaml").write_text(text.replace(old, new, 1))
    refused(compile_args(program(workdir)), capsys, "cluster.yaml:", needle)
    assert not (workdir / "plan.yaml").exists()



def many_devices(n: int) -> str:
    devices = "".join(f"      - {{name: g{i}, kind: gpu, memory: 1GiB}}\n" for i in range(n))
    return f"name: big\nnodes:\n  - name: n\n    link: {{bandwidth: 10 GB/s}}\n    devices:\n{devices}"


def test_a_cluster_of_more_devices_than_the_limit_is_refused_before_any_matrix_is_built(workdir, capsys):
    """20,000 devices: the device-pair link matrices alone asked for 6 GB (a MemoryError traceback)."""
    (workdir / "cluster.yaml").write_text(many_devices(4097))
    refused(compile_args(FM), capsys, "cluster.yaml", "4097 devices (limit for one plan: 4096)")
    (workdir / "cluster.yaml").write_text(many_devices(300))
    assert main([str(a) for a in compile_args(FM)]) == 0


def test_a_cluster_file_past_the_file_limit_is_refused_at_load():
    """The job service's clusters may be larger than a plan's, but not without bound."""
    from streammap.cluster.model import MAX_DEVICES, cluster_from_dict
    from streammap.errors import ClusterError
    n = MAX_DEVICES + 1
    spec = {"name": "huge", "nodes": [{"name": "n", "link": {"bandwidth": "10 GB/s"},
                                       "devices": [{"name": f"g{i}", "kind": "gpu", "memory": "1GiB"}
                                                   for i in range(n)]}]}
    with pytest.raises(ClusterError, match=f"{n} devices"):
        cluster_from_dict(spec)


@pytest.mark.parametrize("field", ["latency", "bandwidth"])
def test_a_quantity_of_a_hundred_thousand_digits_and_a_typo_is_refused_at_once(workdir, capsys, field):
    """The number pattern read digits two ways (``\\d+\\.?\\d*``): refusing 100,000 digits and
    a typo backtracked for minutes (past this suite's 300 s timeout)."""
    text = (workdir / "cluster.yaml").read_text().replace(
        "latency: 5us" if field == "latency" else "bandwidth: 50 GB/s", f"{field}: {'1' * 100_000}q", 1)
    (workdir / "bad.yaml").write_text(text)
    refused(["compile", program(workdir), "--cluster", "bad.yaml", "-o", "plan.yaml"], capsys, "bad.yaml:", field)


def test_a_cluster_file_that_is_not_utf8_is_refused(workdir, capsys):
    (workdir / "cluster.yaml").write_bytes(b"name: lab\xff\n")
    refused(compile_args(FM), capsys, "cluster.yaml", "not UTF-8")


def test_an_alias_bomb_as_a_plan_is_refused_by_show(workdir, capsys):
    (workdir / "bomb.yaml").write_text("streammap_plan: 1\n" + ALIAS_BOMB)
    refused(["show", "bomb.yaml"], capsys, "bomb.yaml:3", "aliases")


# -- plans ----------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def compiled_folder(tmp_path_factory):
    """fm_radio.py as fm.py and the plan the CLI compiled for it (plan.yaml, its source path relative:
    ``fm.py``), once for this module: every test edits its own copy."""
    folder = tmp_path_factory.mktemp("compiled")
    shutil.copy(FM, folder / "fm.py")
    shutil.copy(CLUSTER, folder / "cluster.yaml")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(folder)
        assert main(["compile", "fm.py", "--cluster", "cluster.yaml", "-D", "N=4096", "-o", "plan.yaml",
                     "--no-history"]) == 0
    return folder


@pytest.fixture
def compiled(workdir, compiled_folder):
    """A plan compiled next to its program (a copy of fm_radio.py), as text."""
    for name in ("fm.py", "plan.yaml"):
        shutil.copy(compiled_folder / name, workdir / name)
    return yaml.safe_load((workdir / "plan.yaml").read_text())


def write_plan_data(workdir, data, name="bad.yaml") -> Path:
    path = workdir / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.mark.parametrize("edit, needle", [
    (lambda d: d["params"].update(N=[1, 2]), "params.N"),
    (lambda d: d["source"].update(path="."), "not a file"),
    (lambda d: d["source"].update(path="fm\0.py"), "source.path: a path has no NUL"),
    (lambda d: d["source"].update(path="x" * 300 + ".py"), "longer than a file name"),
    (lambda d: d["source"].update(path="x/" * 3000), "source.path"),
    (lambda d: d["devices"][0].update(index=-1), "devices[0].index"),
    (lambda d: d["devices"][0].update(memory=-1.0), "devices[0].memory"),       # the spill logic's capacity
    (lambda d: d["devices"][0].update(memory=float("nan")), "devices[0].memory"),
    (lambda d: d.update(outputs={"dict": {"../../x": d["outputs"]}}), "output name '../../x'"),
])
def test_hostile_plans_are_refused_before_anything_runs(workdir, capsys, compiled, edit, needle):
    edit(compiled)
    bad = write_plan_data(workdir, compiled)
    refused(["run", bad, "-o", "o.npz", "--emulate", "--no-progress"], capsys, needle)
    assert not (workdir / "o.npz").exists()



@pytest.mark.parametrize("edit, needle", [
    (lambda d: d.update(outputs=5), "the plan's outputs: an argument spec is a mapping"),
    (lambda d: d.update(outputs={"ref": []}), "'ref' must name a task"),
    (lambda d: d.update(outputs={"list": 3}), "'list' must be a list"),
    (lambda d: d["tasks"][1].update(args=[None]), "an argument spec is a mapping"),
    (lambda d: d["tasks"][1].update(args=[{"ref": d["tasks"][0]["id"], "index": "x"}]), "'index' must be an integer"),
    (lambda d: d["tasks"][1].update(args=[{"tuple": [{"dict": {"a": 7}}]}]), "not int"),
    (lambda d: d["tasks"][1].update(args=[{"value": 1, "list": []}]), "unknown argument spec"),
])
def test_a_plan_whose_arguments_are_not_arg_specs_is_refused_by_every_reader(workdir, capsys, compiled, edit, needle):
    edit(compiled)
    bad = write_plan_data(workdir, compiled)
    refused(["show", bad], capsys, needle, "bad.yaml:", "hint: an argument")
    refused(["run", bad, "-o", "o.npz", "--emulate", "--no-progress"], capsys, needle)
    assert not (workdir / "o.npz").exists()


@pytest.mark.parametrize("edit, needle", [
    (lambda s: s.update(nodes=5), "cluster.spec: nodes:"),
    (lambda s: s["nodes"].__setitem__(0, "node"), "cluster.spec: nodes[0]:"),
    (lambda s: s.update(memory_oversubscription=10**400), "cluster.spec: memory_oversubscription:"),
    (lambda s: s.update(memory_oversubscription="lots"), "cluster.spec: memory_oversubscription:"),
    (lambda s: s.update(max_tasks_per_device=[1]), "cluster.spec: max_tasks_per_device:"),
    (lambda s: s["nodes"][0]["devices"][0].update(memory=-1), "cluster.spec: nodes[0].devices[0].memory:"),
])
def test_a_plan_whose_cluster_spec_is_not_a_cluster_is_refused_by_every_reader(workdir, capsys, compiled, edit, needle):
    """The cluster a plan carries (re-mapping, k8s export and the runtime's spilling read it) is
    checked as a cluster file is."""
    edit(compiled["cluster"]["spec"])
    bad = write_plan_data(workdir, compiled)
    refused(["show", bad], capsys, needle, "bad.yaml:")
    refused(["run", bad, "-o", "o.npz", "--emulate", "--no-progress"], capsys, needle)
    refused(["export", "k8s", bad, "-o", "k8s", "--image", "streammap:1"], capsys, needle)
    assert not (workdir / "o.npz").exists() and not (workdir / "k8s").exists()


@pytest.mark.parametrize("edit, needle", [
    (lambda d: d["tasks"][0].update(finish=float("inf")), "tasks[0].finish"),
    (lambda d: d["tasks"][0].update(start=1e400), "tasks[0].start"),
    (lambda d: d["tasks"][0].update(out=float("inf")), "tasks[0].out"),
    (lambda d: d["tasks"][0].update(out=1e308), "tasks[0].out"),
    (lambda d: d["mapper"].update(estimated_makespan=float("inf")), "mapper.estimated_makespan"),
    (lambda d: d["mapper"].update(lower_bound=float("inf")), "mapper.lower_bound"),
])
def test_a_plan_with_infinite_times_is_refused_before_anything_runs(workdir, capsys, compiled, edit, needle):
    """An infinite time ran, then left a run record no view could read (or failed writing it,
    with a traceback): a plan's times are finite."""
    edit(compiled)
    bad = write_plan_data(workdir, compiled)
    refused(["show", bad], capsys, "bad.yaml:", needle)
    refused(["run", bad, "-o", "o.npz", "--emulate", "--no-progress"], capsys, needle)
    assert not (workdir / "o.npz").exists() and not (workdir / "o.run.json").exists()


def test_a_plan_task_with_a_timeout_past_a_year_is_refused_before_anything_runs(workdir, capsys, compiled):
    compiled["tasks"][0]["timeout"] = 1e300
    bad = write_plan_data(workdir, compiled)
    refused(["run", bad, "-o", "o.npz", "--emulate", "--no-progress"], capsys, "bad.yaml:", "tasks[0].timeout")
    assert not (workdir / "o.npz").exists()


def test_a_plan_task_retried_a_billion_times_is_refused_before_anything_runs(workdir, capsys, compiled):
    compiled["tasks"][0]["retries"] = 10**9
    bad = write_plan_data(workdir, compiled)
    refused(["run", bad, "-o", "o.npz", "--emulate", "--no-progress"], capsys, "bad.yaml:", "tasks[0].retries")
    assert not (workdir / "o.npz").exists()

def test_a_plan_runs_only_a_source_inside_its_own_folder_or_the_current_one(workdir, capsys, compiled, monkeypatch):
    (workdir / "elsewhere").mkdir()
    inside = workdir / "elsewhere" / "plan.yaml"
    compiled["source"]["path"] = "../fm.py"
    write_plan_data(workdir / "elsewhere", compiled, "plan.yaml")
    monkeypatch.chdir(workdir / "elsewhere")          # ../fm.py: outside the plan's folder and this one
    err = refused(["run", "plan.yaml", "-o", "o.npz", "--emulate", "--no-progress"], capsys,
                  "lies outside the plan's folder", "compile again next to the program")
    assert "fm.py" in err
    refused(["export", "k8s", "plan.yaml", "-o", "k8s", "--image", "streammap:1"], capsys, "outside the plan's folder")
    assert main(["show", "plan.yaml"]) == 0          # reading it is harmless; running it is not
    # Run from the project folder that holds the program (as make demo runs .demo/plan.yaml), it runs.
    monkeypatch.chdir(workdir)
    assert main(["run", str(inside), "-o", "o.npz", "--emulate", "--no-progress"]) == 0


def test_output_paths_that_cannot_be_written_are_refused_up_front(workdir, capsys, compiled):
    refused(["run", "plan.yaml", "-o", "/etc/passwd/x.npz", "--emulate", "--no-progress"], capsys,
            "/etc/passwd is not a folder")
    refused(["run", "plan.yaml", "-o", ".", "--emulate", "--no-progress"], capsys, "it is a folder")
    refused(["run", "plan.yaml", "-o", "missing/o.npz", "--emulate", "--no-progress"], capsys,
            "the folder missing does not exist", "mkdir -p missing")
    refused(["compile", "fm.py", "--cluster", "cluster.yaml", "-o", "missing/p.yaml"], capsys,
            "the folder missing does not exist")
    refused(["compile", "fm.py", "--cluster", "cluster.yaml", "-o", "."], capsys, "it is a folder")


def test_show_refuses_a_file_that_is_neither_a_plan_nor_a_record(workdir, capsys):
    np.savez(workdir / "out.npz", a=np.zeros(3))
    refused(["show", "out.npz"], capsys, "out.npz", "plan (.yaml) or a run record")
    (workdir / "fake.yaml").write_bytes(b"PK\x03\x04\x00\xff")
    refused(["show", "fake.yaml"], capsys, "fake.yaml")
    (workdir / "deep.run.json").write_text("[" * 100000)
    refused(["show", "deep.run.json"], capsys, "deep.run.json")



@pytest.mark.parametrize("field, value", [("finish", float("inf")), ("start", float("nan")),
                                          ("finish", -1e300), ("estimated_finish", float("inf")),
                                          ("attempts", 10**19), ("attempts", 10**400)],
                         ids=["finish-inf", "start-nan", "finish-negative", "estimated-finish-inf",
                              "attempts-past-64-bits", "attempts-of-400-digits"])
def test_a_run_record_with_impossible_task_times_is_refused_by_every_view(workdir, capsys, compiled, field, value):
    """A record's finish of Infinity ended the Gantt chart in a ZeroDivisionError traceback, and
    attempts past 64 bits in an OverflowError one."""
    assert main(["run", "plan.yaml", "-o", "o.npz", "--emulate", "--no-progress", "--no-telemetry"]) == 0
    record = json.loads((workdir / "o.run.json").read_text())
    record["tasks"][0][field] = value
    (workdir / "bad.run.json").write_text(json.dumps(record))
    for extra in ([], ["--gantt", "g.png"], ["--html", "r.html"]):
        refused(["show", "bad.run.json", *extra], capsys, "bad.run.json", f"tasks.0.{field}")
    assert not (workdir / "g.png").exists() and not (workdir / "r.html").exists()

# -- imported workflows -----------------------------------------------------------------------------------

def node_link(**node):
    return {"directed": True, "nodes": [{"id": "a", "kernel": "k", "runtime": 1.0, **node}], "edges": []}


def wfcommons(task):
    return {"workflow": {"specification": {"tasks": [task], "files": []},
                         "execution": {"tasks": [{"id": "t", "runtimeInSeconds": 1.0}]}}}


@pytest.mark.parametrize("data, needle", [
    (node_link(device=5), "device of task a must be a non-empty string"),
    (node_link(retries=-1), "retries of task a"),
    (node_link(share=1e-320), "share of task a must be a number from 1e-06 to 1"),
    (node_link(timeout="abc"), "timeout of task a must be a number of seconds > 0"),
    (node_link(timeout=-5), "timeout of task a must be a number of seconds > 0"),
    (node_link(timeout=1e300), "timeout of task a must be a number of seconds > 0 and at most 31536000"),
    (node_link(id=["a"]), "a node id must be a string or an integer"),
    (node_link(id={"a": 1}), "a node id must be a string or an integer"),
    (wfcommons({"id": "t", "children": 5}), "children of task t must be a list"),
    (wfcommons({"id": ["t"]}), "a task id must be a string or an integer"),
    (wfcommons({"id": "t", "inputFiles": [{"x": 1}]}), "inputFiles of task t"),
    # numbers near the float range's end add up past it in the mappers (ranks, memory levels)
    (node_link(runtime=1e307), "runtime of task a must be a finite non-negative number at most 1e+30"),
    (node_link(times={"A100": 1e300}), "times['A100'] of task a must be a finite non-negative number at most 1e+30"),
    (node_link(mem=1e308), "mem of task a must be a finite non-negative number at most 1e+30"),
    ({"directed": True, "nodes": [{"id": "a", "kernel": "k", "runtime": 1.0}, {"id": "b", "kernel": "k", "runtime": 1.0}],
      "edges": [{"source": "a", "target": "b", "bytes": 1e308}]},
     "bytes of edge a -> b must be a finite non-negative number at most 1e+30"),
])
def test_hostile_workflow_files_are_refused(workdir, capsys, data, needle):
    (workdir / "wf.json").write_text(json.dumps(data))
    refused(compile_args("wf.json"), capsys, "wf.json", needle)


def test_deeply_nested_json_is_refused(workdir, capsys):
    (workdir / "wf.json").write_text("[" * 100000)
    refused(compile_args("wf.json"), capsys, "wf.json")


# -- the fission kernels ------------------------------------------------------------------------------------

def test_split_along_an_axis_the_array_lacks_is_a_clear_error():
    with pytest.raises(StreamMapError, match="split=1 cuts along axis 1, but the argument has 1 dimension"):
        scatter(np.arange(6.0), 2, 1)
    with pytest.raises(StreamMapError, match="has 1 dimension"):
        gather([np.arange(3.0), np.arange(3.0)], 1)
    assert [p.tolist() for p in scatter(np.arange(4.0), 2, -1)] == [[0.0, 1.0], [2.0, 3.0]]


def test_plan_errors_are_plan_errors(workdir, compiled):
    compiled["params"]["N"] = {"nested": 1}
    with pytest.raises(PlanError, match="params.N"):
        streammap.read_plan(write_plan_data(workdir, compiled))


# -- error messages stay short ----------------------------------------------------------------------------

def test_an_error_on_a_megabyte_line_quotes_a_window_with_the_caret_on_the_culprit(workdir, capsys):
    (workdir / "long.yaml").write_text("streammap_plan: 1\n" + "9" * 1_000_000 + ": 1\n")
    err = refused(["show", "long.yaml"], capsys, "long.yaml:2:1000001:")
    assert len(err) < 2000
    quoted, caret = err.splitlines()[1:3]
    assert quoted.startswith("    ...999") and quoted.endswith(": 1")
    assert quoted[caret.index("^")] == ":"


def test_an_error_at_the_start_of_a_long_line_quotes_its_beginning(workdir, capsys):
    path = program(workdir, clause="flops=1, flopz=" + "1" * 1_000_000)
    err = refused(compile_args(path), capsys, "p.py:2:")
    assert len(err) < 2000
    assert "# @stream kernel(flops=1, flopz=111" in err and "111..." in err


# -- what the plan records ----------------------------------------------------------------------------------

@pytest.mark.parametrize("body, line", [
    ("    a = [0] * 1000000\n    return [k(a) for i in range(100)]", 9),      # one list, a copy per call: 5 GB
    ("    return [k() for i in range(10)] * 100000", 8),                       # a million outputs: 1.7 GB
    ("    a = [(0, 0)] * 100000\n    return k(a)", 9),                          # tuples inside count too
])
def test_static_values_a_plan_would_copy_past_the_limit_are_refused_at_their_line(workdir, capsys, body, line):
    path = program(workdir, body=body)
    refused(compile_args(path), capsys, f"p.py:{line}:", "more than 250000 items of static lists",
            "pass a kernel the size")
    assert not (workdir / "plan.yaml").exists()


def test_a_fan_in_of_every_task_is_within_what_a_plan_records(workdir):
    body = "    ys = [k(i) for i in range(2000)]\n    return k(ys), ys"
    plan = streammap.compile(program(workdir, body=body), cluster=CLUSTER, history=False)
    assert len(plan.tasks) == 2001


# -- command-line numbers -----------------------------------------------------------------------------------

@pytest.mark.parametrize("argv, needle", [
    (["run", "plan.yaml", "-o", "o.npz", "--emulate", "--metrics-port", "-1"], "--metrics-port: -1 is not a port"),
    (["run", "plan.yaml", "-o", "o.npz", "--emulate", "--metrics-port", "99999999"], "is not a port (0 to 65535)"),
    (["run", "plan.yaml", "-o", "o.npz", "--emulate", "--sample-interval", "1e400"], "--sample-interval: "),
    (["run", "plan.yaml", "-o", "o.npz", "--emulate", "--sample-interval", "-1"], "a number of seconds > 0"),
    (["monitor", "--interval", "-1", "--count", "2"], "--interval: -1 is not a number of seconds > 0"),
    (["monitor", "--interval", "nan", "--count", "2"], "--interval: nan"),
    (["monitor", "--interval", "1e300", "--count", "2"], "at most 86400"),
    (["doctor", "--no-calibrate", "--size", "100000000"], "--size: 100000000 is not a size in MiB (1 to 65536)"),
])
def test_numbers_on_the_command_line_out_of_range_are_usage_errors(workdir, capsys, compiled, argv, needle):
    """Each of these was a traceback (bind(): port must be 0-65535; sleep length must be
    non-negative; timestamp out of range) or, for --size, a 100 TB file written to /tmp."""
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err
    assert not (workdir / "o.npz").exists()


@pytest.mark.parametrize("option", ["--gantt", "--graph"])
def test_a_picture_that_cannot_be_written_is_refused_and_a_missing_folder_is_made(workdir, capsys, compiled, option):
    """``--gantt /etc/passwd/g.png`` ended in a FileExistsError traceback."""
    refused(["show", "plan.yaml", option, "/etc/passwd/g.png"], capsys, "/etc/passwd", "not a folder")
    assert main(["show", "plan.yaml", option, "pictures/g.png"]) == 0
    assert (workdir / "pictures" / "g.png").stat().st_size > 0


@pytest.mark.parametrize("version", ["9.99", "../../../etc", "1.30; rm -rf /"])
def test_an_unknown_kubernetes_version_is_refused_naming_the_option(workdir, capsys, compiled, version):
    """Each ended in a traceback from the schema library (VersionNotSupportedError, IndexError)."""
    refused(["export", "k8s", "plan.yaml", "-o", "k8s", "--k8s-version", version], capsys,
            f"--k8s-version {version}", "1.30")
    assert not (workdir / "k8s").exists()


def test_a_run_record_path_that_cannot_be_written_is_refused_before_the_run(workdir, capsys, compiled):
    """The outputs were written first, and the run then failed on the record: half a result."""
    refused(["run", "plan.yaml", "-o", "o.npz", "--emulate", "--no-progress", "--record", "missing/r.run.json"],
            capsys, "the folder missing does not exist")
    refused(["run", "plan.yaml", "-o", "o.npz", "--emulate", "--no-progress", "--record", "."], capsys, "it is a folder")
    assert not (workdir / "o.npz").exists()


@pytest.mark.parametrize("repeats", ["0", "-1", "1000000000"])
def test_profile_repeats_out_of_range_are_usage_errors(workdir, capsys, repeats):
    """--repeats 1000000000 ran the program's kernels a billion times."""
    shutil.copy(FM, workdir / "fm.py")
    with pytest.raises(SystemExit) as exc:
        main(["profile", "fm.py", "-D", "N=64", "--repeats", repeats])
    assert exc.value.code == 2 and "--repeats: " in capsys.readouterr().err


# -- numbers echoed in errors -----------------------------------------------------------------------

#: A user's number of 300 digits: an error that echoes it whole is a 300-character line.
BIG = "9" * 300
#: The longest line an error may print: a quoted source line is clipped to 200 characters
#: (errors.MAX_QUOTED_LINE), and the longest fixed hint is about 290.
SANE_LINE = 300


def bounded(err: str) -> str:
    assert BIG not in err, err
    assert max(len(line) for line in err.splitlines()) <= SANE_LINE, err
    return err


@pytest.mark.parametrize("old, new, needle", [
    ("memory: 6MiB", f"memory: -{BIG}", "got -9.99e+299 (a 300-digit number)"),
    ("flops: 10 TFLOP/s", f"flops: -{BIG}", "got -9.99e+299 (a 300-digit number)"),
    ("memory: 6MiB", f"memory: {BIG}x", "... (303 characters) as a size"),
    ("memory: 6MiB", f"memory: {BIG}", "a size must be finite and at most 1e+30, got 9.99e+299 (a 300-digit number)"),
])
def test_a_cluster_file_value_of_300_digits_is_echoed_bounded(workdir, capsys, old, new, needle):
    (workdir / "bad.yaml").write_text((workdir / "cluster.yaml").read_text().replace(old, new, 1))
    bounded(refused(["compile", program(workdir), "--cluster", "bad.yaml", "-o", "plan.yaml"], capsys,
                    "bad.yaml:8:", needle))


@pytest.mark.parametrize("clause, define, needle", [
    ("flops=N", f"N=-{BIG}", "flops must be a non-negative number, got -9.99e+299 (a 300-digit number)"),
    ("mem=N", f"N={BIG}", "mem must be finite and at most 1e+30, got 9.99e+299 (a 300-digit number)"),
])
def test_a_define_of_300_digits_is_echoed_bounded(workdir, capsys, clause, define, needle):
    path = program(workdir, clause=clause, head="# @stream param\nN = 4\n")
    bounded(refused(compile_args(path, "-D", define), capsys, "p.py:", needle))


def test_a_pipeline_of_300_digits_of_items_is_echoed_bounded(workdir, capsys):
    path = workdir / "pipe.py"
    path.write_text("# @stream param\nN = 4\n\n# @stream kernel(flops=1)\ndef k(x):\n    return x\n\n"
                    "# @stream pipeline(items=N)\ndef main(x):\n    return k(x)\n")
    bounded(refused(compile_args(path, "-D", f"N={BIG}"), capsys, "pipe.py:8:",
                    "items=9.99e+299 (a 300-digit number) is more than 1000000"))


@pytest.mark.parametrize("old, new, needle", [
    ("streammap_plan: 1", f"streammap_plan: {BIG}", "plan version 9.99e+299 (a 300-digit number) is not supported"),
    ("params: {N: 4}", f"params: {{N: {BIG}}}", "-D N=VALUE (the plan's value: 9.99e+299 (a 300-digit number))"),
])
def test_a_plan_field_of_300_digits_is_echoed_bounded(workdir, capsys, old, new, needle):
    path = program(workdir, head="# @stream param\nN = 4\n")
    assert main([str(a) for a in compile_args(path)]) == 0
    (workdir / "bad.yaml").write_text((workdir / "plan.yaml").read_text().replace(old, new, 1))
    bounded(refused(["show", "bad.yaml"], capsys, "bad.yaml:", needle))


# -- auto's join-first restart (streammap.mappers.join_first) on hostile graphs -------------
# Built in Python: a workflow file refuses seconds and bytes above 1e30 (the cases above).

@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_join_first_ranks_near_the_float_range_end_stay_finite_and_auto_stays_valid():
    """Times of 1e307 s: raising the joins' inputs above every rank would pass the float range
    (infinite ranks tie and lose the join order); the join-first order is then not built, and
    ``auto`` still returns a valid plan of a finite makespan."""
    from streammap.mappers.auto import auto
    from streammap.mappers.heft import upward_rank
    from streammap.mappers.join_first import join_first_rank
    from streammap.mappers.schedule import evaluate
    from tests.mappers.test_join_first import two_joins
    cost = two_joins(1e307)
    base = upward_rank(cost)
    assert np.isfinite(base).all()
    for k in (1, 2):
        jr = join_first_rank(cost, base, k)
        assert np.isfinite(jr).all() and np.array_equal(jr, base)
    sane = two_joins()
    assert not np.array_equal(join_first_rank(sane, upward_rank(sane), 1), upward_rank(sane))   # raised there
    s = auto(cost)
    makespan, valid, _ = evaluate(cost, s)
    assert valid and np.isfinite(s.makespan) and makespan == pytest.approx(s.makespan)


def test_times_past_the_float_range_are_a_task_that_runs_nowhere():
    """Times of 1e308 x 8 are infinite: a MappingError naming the task (exit 2 from the CLI), not
    a plan of infinite makespan."""
    from streammap.errors import MappingError
    from streammap.mappers.auto import auto
    from tests.mappers.test_join_first import two_joins
    with pytest.raises(MappingError, match="cannot run on any device"):
        auto(two_joins(1e308))


def test_a_join_with_a_hundred_thousand_parents_maps_in_bounded_time_without_the_restart():
    """100,000 inputs of one join on two devices: a large graph, so ``auto`` maps it with its
    full-cluster passes alone (no restart); asked directly, the restart sees one join, not two
    independent groups, and returns the plan it was given."""
    from streammap.cost.model import CostModel
    from streammap.ir import add_task, new_graph
    from streammap.mappers.auto import auto
    from streammap.mappers.heft import upward_rank
    from streammap.mappers.join_first import join_first_search
    from streammap.mappers.schedule import evaluate
    from tests.helpers.graphs import node_cluster
    g = new_graph("wide", kind="workflow", source="<t>")
    add_task(g, "j", "merge", times={"F": 4.0, "S": 8.0})
    for i in range(100_000):
        add_task(g, f"i{i}", "in", times={"F": 1.0, "S": 2.0})
        g.add_edge(f"i{i}", "j", bytes=1.0)
    cost = CostModel(g, node_cluster([(["F", "S"], 1.0, 0.0)]))
    s = auto(cost)
    assert s.mapper == "auto(heft)" and evaluate(cost, s)[1]
    assert join_first_search(cost, s, lower=s.makespan / 2, rank=upward_rank(cost), runs=8,
                             memory_aware=False) is s


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_sizes_that_add_up_past_the_float_range_are_named_so_not_unlimited():
    """Two inputs of 1e308 bytes: the reader's default memory (its inputs and outputs together) is
    past the float range; the refusal says so, where it said the task needed "unlimited memory"."""
    from streammap.cluster.model import cluster_from_dict
    from streammap.cost.model import CostModel
    from streammap.errors import MappingError
    from streammap.ir import add_task, new_graph
    from streammap.mappers.auto import auto
    g = new_graph("big", kind="workflow", source="<t>")
    add_task(g, "r", "read", times={"F": 1.0})
    for i in range(2):
        add_task(g, f"i{i}", "in", times={"F": 1.0})
        g.add_edge(f"i{i}", "r", bytes=1e308)
    with pytest.raises(MappingError, match="needs more bytes than a float holds") as info:
        auto(CostModel(g, cluster_from_dict({"name": "c", "nodes": [{"name": "n", "devices": [
            {"name": "g0", "kind": "gpu", "model": "F", "memory": "80GiB"}]}]})))
    assert "unlimited" not in info.value.message
