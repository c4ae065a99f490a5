"""Property: whatever a user (or an attacker) feeds the front end, the outcome is clean.

Mutants of the samples' programs, random directive expressions, and mutants of cluster files,
plans and workflow JSON are read in-process; each must either succeed or raise a
:class:`~streammap.errors.StreamMapError` (the CLI's exit 2). Any other exception is a bug.

Hypothesis runs derandomized (a fixed seed: the same examples every run, no example database),
with example counts sized for about 30 s in all on a CI machine. ``benchmarks/fuzz.py`` runs the
same kinds of inputs by the ten thousand, each in a memory- and time-limited worker.
"""

import json
import shutil
import warnings
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, find, given, settings
from hypothesis import strategies as st

import streammap
from streammap.cluster.model import load_cluster
from streammap.directives import parse_program
from streammap.directives.safe_eval import Locator, safe_eval
from streammap.errors import StreamMapError
from streammap.io.importers import load_graph
from streammap.plan import read_plan

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = sorted((ROOT / "samples").glob("*.py"))
CLUSTER = ROOT / "samples" / "clusters" / "tiny-gpus.yaml"
CLUSTER_TEXT = CLUSTER.read_text()
SMALL_CLUSTER = {"name": "fuzz", "nodes": [{"name": "n", "link": {"bandwidth": "10 GB/s"}, "devices": [
    {"name": "gpu0", "kind": "gpu", "memory": "16GiB"}, {"name": "cpu", "kind": "cpu", "memory": "64GiB"}]}]}
NODE_LINK = json.dumps({"directed": True, "graph": {"name": "g"}, "nodes": [
    {"id": "a", "kernel": "k", "runtime": 1.0, "out": 8, "device": "gpu"},
    {"id": "b", "kernel": "k", "runtime": 2.0, "times": {"gpu": 0.5}, "retries": 1},
    {"id": 3, "kernel": "m", "flops": 1e9, "share": 0.5}],
    "edges": [{"source": "a", "target": "b", "bytes": 8}, {"source": "b", "target": 3}]}, indent=1)

#: Fragments a mutation inserts: syntax, huge and odd values, the attacks of issue 15.
TOKENS = ["(", ")", "[", "]", "{", "}", ",", ":", "=", "*", "**", "-", "+", "<<", " if ", " else ",
          "not ", "0", "1", "-1", "10**400", "1<<4096", "10**10**10", "'x'", "None", "True", "1e308*10",
          "N", "range(", "range(10**9)", "len(", "min(", "k(", "(1,)*10000", "\n", "    ", "#", " ",
          "# @stream kernel(flops=", "# @stream param\n", "# @stream graph\n", "return ", "for i in ",
          "&x ", "*x", "- ", "? ", "!!python/object ", "\x00", "\xff", "9" * 401, '"', "'", "\\",
          "../../", "-1e999", "nan", ".inf", "split=1", "device=5", "index: -1"]


def edits(text: str):
    """A strategy of mutants of ``text``: a few token inserts, deletes, replaces and line edits."""
    def apply(ops):
        out = text
        for kind, where, token in ops:
            if not out:
                out = token
                continue
            i = where % (len(out) + 1)
            if kind == "insert":
                out = out[:i] + token + out[i:]
            elif kind == "delete":
                out = out[:i] + out[i + 1 + where % 7:]
            elif kind == "replace":
                out = out[:i] + token + out[i + len(token):]
            else:                                          # a line deleted or doubled
                lines = out.split("\n")
                n = where % len(lines)
                lines[n:n + 1] = [] if kind == "drop-line" else [lines[n]] * 2
                out = "\n".join(lines)
        return out
    op = st.tuples(st.sampled_from(["insert", "delete", "replace", "drop-line", "double-line"]),
                   st.integers(0, 1 << 20), st.sampled_from(TOKENS))
    return st.lists(op, min_size=1, max_size=4).map(apply)


def clean(call) -> None:
    """Run ``call()``: success or a StreamMapError are clean; anything else fails the test."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SyntaxWarning)     # mutants like `1if x` warn when parsed
        try:
            call()
        except StreamMapError:
            pass


FUZZ = settings(derandomize=True, database=None, deadline=None, print_blob=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                       HealthCheck.function_scoped_fixture, HealthCheck.data_too_large])


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz")


# -- programs ---------------------------------------------------------------------------------------

@settings(FUZZ, max_examples=100)
@given(data=st.data())
def test_program_mutants_parse_cleanly(folder, data):
    sample = data.draw(st.sampled_from(SAMPLES), label="sample")
    text = data.draw(edits(sample.read_text()), label="mutant")
    path = folder / sample.name
    path.write_text(text, encoding="utf-8", errors="surrogateescape")
    clean(lambda: parse_program(path, max_tasks=5000))


@settings(FUZZ, max_examples=15)
@given(data=st.data())
def test_program_mutants_compile_cleanly(folder, data):
    sample = data.draw(st.sampled_from([s for s in SAMPLES if s.name in ("fm_radio.py", "tiled_cholesky.py",
                                                                          "small_kernels.py")]))
    text = data.draw(edits(sample.read_text()), label="mutant")
    path = folder / sample.name
    path.write_text(text, encoding="utf-8", errors="surrogateescape")
    clean(lambda: streammap.compile(path, cluster=SMALL_CLUSTER, history=False, max_tasks=2000))


# -- directive expressions ------------------------------------------------------------------------------

ATOMS = st.sampled_from(["0", "1", "-1", "2", "N", "M", "'s'", "None", "True", "1.5", "10**400", "(1,)",
                         "()", "4096", "1e308", "x", "len", "range"])
UNARY = st.sampled_from(["-", "+", "~", "not "])
BINARY = st.sampled_from(["+", "-", "*", "/", "//", "%", "**", "<<", ">>", "&", "|", "^", "==", "<",
                          " in ", " and ", " or ", ","])
CALLS = st.sampled_from(["min", "max", "abs", "int", "float", "round", "ceil", "floor", "log2", "sqrt",
                         "len", "open", "x.y", "range"])


def expressions():
    return st.recursive(ATOMS, lambda inner: st.one_of(
        st.builds(lambda op, a: f"{op}{a}", UNARY, inner),
        st.builds(lambda a, op, b: f"({a}{op}{b})", inner, BINARY, inner),
        st.builds(lambda f, args: f"{f}({', '.join(args)})", CALLS, st.lists(inner, max_size=3)),
        st.builds(lambda a, b, c: f"({a} if {b} else {c})", inner, inner, inner),
        st.builds(lambda a, n: f"(({a},)*{n})", inner, st.sampled_from(["0", "3", "10000", "N"])),
    ), max_leaves=25)


@settings(FUZZ, max_examples=400)
@given(expressions())
def test_random_expressions_evaluate_cleanly(expr):
    loc = Locator("<fuzz>", [expr])
    clean(lambda: safe_eval(expr, {"N": 1 << 20, "M": 3}, loc, context="a fuzzed expression"))


@settings(FUZZ, max_examples=60)
@given(expr=expressions())
def test_random_clauses_compile_cleanly(folder, expr):
    path = folder / "clause.py"
    path.write_text(f"# @stream param\nN = 8\n\n# @stream kernel(flops={expr}, out=8)\ndef k(x=0):\n"
                    f"    return x\n\n# @stream graph\ndef main():\n    return [k(i) for i in range(N)]\n")
    clean(lambda: parse_program(path))


# -- files: cluster, plan, workflow ------------------------------------------------------------------------

@settings(FUZZ, max_examples=80)
@given(text=edits(CLUSTER_TEXT))
def test_cluster_file_mutants_load_cleanly(folder, text):
    path = folder / "cluster.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogateescape")
    clean(lambda: load_cluster(path))


@pytest.fixture(scope="module")
def plan_text(folder):
    shutil.copy(ROOT / "samples" / "fm_radio.py", folder / "fm_radio.py")
    plan = streammap.compile(folder / "fm_radio.py", cluster=SMALL_CLUSTER, params={"N": 1024, "BANDS": 2},
                             history=False)
    streammap.write_plan(plan, folder / "plan.yaml")
    return (folder / "plan.yaml").read_text()


@settings(FUZZ, max_examples=80)
@given(data=st.data())
def test_plan_mutants_read_cleanly(folder, plan_text, data):
    text = data.draw(edits(plan_text), label="mutant")
    path = folder / "mutant.plan.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogateescape")

    def read_and_check():
        plan = read_plan(path)
        plan.check_source()
    clean(read_and_check)


@settings(FUZZ, max_examples=80)
@given(data=st.data())
def test_workflow_json_mutants_load_cleanly(folder, data):
    source = data.draw(st.sampled_from([NODE_LINK, _wfcommons_text()]))
    text = data.draw(edits(source), label="mutant")
    path = folder / "wf.json"
    path.write_text(text, encoding="utf-8", errors="surrogateescape")
    clean(lambda: load_graph(path))


@settings(FUZZ, max_examples=60)
@given(value=st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=5)),
                          lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                  st.dictionaries(st.text(max_size=5), inner, max_size=3)),
                          max_leaves=10),
       where=st.sampled_from(["id", "kernel", "runtime", "times", "device", "split", "share", "stateful",
                              "retries", "mem", "source", "children", "parents", "inputFiles"]))
def test_workflow_fields_of_any_json_type_load_cleanly(folder, value, where):
    node_link = json.loads(NODE_LINK)
    node_link["nodes"][0][where] = value
    wf = json.loads(_wfcommons_text())
    wf["workflow"]["specification"]["tasks"][0][where] = value
    for i, data in enumerate((node_link, wf)):
        path = folder / f"typed{i}.json"
        path.write_text(json.dumps(data))
        clean(lambda: load_graph(path))


def _wfcommons_text() -> str:
    return json.dumps({"name": "w", "schemaVersion": "1.5", "workflow": {
        "specification": {"tasks": [{"id": "t1", "name": "a_ID01", "children": ["t2"], "parents": [],
                                     "inputFiles": [], "outputFiles": ["f"]},
                                    {"id": "t2", "name": "b", "parents": ["t1"], "inputFiles": ["f"]}],
                          "files": [{"id": "f", "sizeInBytes": 10}]},
        "execution": {"tasks": [{"id": "t1", "runtimeInSeconds": 1.0, "memoryInBytes": 5},
                                {"id": "t2", "runtimeInSeconds": 2.0}]}}}, indent=1)


def test_the_mutators_do_mutate():
    """A fuzz test whose inputs never change would pass vacuously."""
    mutant = find(edits(CLUSTER_TEXT), lambda text: text != CLUSTER_TEXT, settings=FUZZ)
    assert yaml.safe_load(CLUSTER_TEXT)["name"] == "tiny-gpus" and mutant != CLUSTER_TEXT
