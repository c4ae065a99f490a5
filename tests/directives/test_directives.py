"""The directive front end: what a valid annotated program compiles to.

Each test writes a small program into ``tmp_path`` and states what the IR (``streammap.ir``) must
be. Errors are in ``test_directive_errors.py``.
"""

from __future__ import annotations

import json
import runpy
import textwrap

import networkx as nx
import pytest

from streammap.directives import param_values, parse_program, read_program
from streammap.ir import NODE_DEFAULTS, to_node_link


def write(tmp_path, text: str, name: str = "prog.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


FM_RADIO = '''
import numpy as np

# @stream param
N = 1 << 10
# @stream param
BANDS = 4

# @stream kernel(out=4*N)
def source():
    return np.ones(N, dtype=np.float32)

# @stream kernel(flops=16*N, bytes=8*N, out=4*N)
def bandpass(x, k):
    return x * (k + 1)

# @stream kernel(flops=2*N*len(bands), out=4*N, device="gpu")
def combine(*bands):
    return sum(bands)

# @stream graph
def fm_radio():
    x = source()
    ys = [bandpass(x, k) for k in range(BANDS)]   # static fan-out
    return combine(*ys)                           # fan-in

if __name__ == "__main__":
    RESULT = fm_radio()
'''


# -- the IR of a fan-out / fan-in program ----------------------------------------------------------

def test_fan_out_fan_in_ir(tmp_path):
    path = write(tmp_path, FM_RADIO, "fm_radio.py")
    g = parse_program(path)

    assert g.graph == {"name": "fm_radio", "kind": "program", "source": str(path),
                       "entry": "fm_radio", "params": {"N": 1024, "BANDS": 4},
                       "outputs": {"ref": "combine@fm_radio.py:24"}}
    assert list(g.nodes) == ["source@fm_radio.py:22"] + \
        [f"bandpass[{k}]@fm_radio.py:23" for k in range(4)] + ["combine@fm_radio.py:24"]

    band = g.nodes["bandpass[3]@fm_radio.py:23"]
    assert len(band["code"]) == 16                            # the kernel's code fingerprint
    assert band == {**NODE_DEFAULTS, "kernel": "bandpass", "site": "fm_radio.py:23", "code": band["code"],
                    "flops": 16 * 1024.0, "bytes": 8 * 1024.0, "out": 4 * 1024.0, "compute_class": "other",
                    "args": [{"ref": "source@fm_radio.py:22"}, {"value": 3}], "kwargs": {}}
    combine = g.nodes["combine@fm_radio.py:24"]
    assert combine["device"] == "gpu"
    assert combine["flops"] == 2 * 1024 * 4          # len(bands) of the *ys fan-in
    assert combine["args"] == [{"ref": f"bandpass[{k}]@fm_radio.py:23"} for k in range(4)]

    # Edges carry the producer's out, one per (producer, consumer).
    assert sorted(g.in_edges("combine@fm_radio.py:24")) == \
        [(f"bandpass[{k}]@fm_radio.py:23", "combine@fm_radio.py:24") for k in range(4)]
    assert all(d["bytes"] == 4096.0 for _, _, d in g.edges(data=True))
    assert nx.is_directed_acyclic_graph(g)


SCALE = """
# @stream kernel(flops=N)
def scale(x, k=2):
    \"\"\"Multiply.\"\"\"
    return x * k
"""
#: Edits of the kernel above, and whether they keep its code fingerprint.
SCALE_EDITS = {
    "original": (SCALE, True),
    "moved down the file": ("\n\n" + SCALE, True),
    "layout, comments, docstring and clauses edited": (
        SCALE.replace("flops=N", "flops=2 * N").replace("x, k=2", "x,   k=2")
             .replace('\"\"\"Multiply.\"\"\"', "# a comment").replace("x * k", "(x * k)   # the same code"), True),
    "body changed": (SCALE.replace("x * k", "x * k + 0"), False),
    "default changed": (SCALE.replace("k=2", "k=3"), False),
}


def test_a_kernels_code_fingerprint_follows_its_code_not_its_layout(tmp_path):
    """The performance history keys measurements by the kernel's code: edits that cannot change
    its times keep the fingerprint; edits of what it computes change it."""
    codes = {}
    for what, (kernel, _) in SCALE_EDITS.items():
        assert (kernel == SCALE) == (what == "original")       # every edit edits something
        path = tmp_path / "prog.py"
        path.write_text("# @stream param\nN = 8\n" + kernel + "\n# @stream graph\ndef main():\n    return scale(1.0)\n",
                        encoding="utf-8")
        (node,) = parse_program(path).nodes.values()
        codes[what] = node["code"]
    assert {w for w, c in codes.items() if c == codes["original"]} == {w for w, (_, kept) in SCALE_EDITS.items() if kept}
    assert len(set(codes.values())) == 3


def test_every_node_has_every_ir_attribute_with_the_right_types(tmp_path):
    g = parse_program(write(tmp_path, FM_RADIO, "fm_radio.py"))
    for _, data in g.nodes(data=True):
        assert set(data) == set(NODE_DEFAULTS)
        for key in ("flops", "bytes", "mem", "out"):
            assert data[key] is None or type(data[key]) is float
        assert type(data["share"]) is float and type(data["retries"]) is int
    for _, _, data in g.edges(data=True):
        assert set(data) == {"bytes"} and type(data["bytes"]) is float


def test_the_ir_is_plain_data_and_deterministic(tmp_path):
    path = write(tmp_path, FM_RADIO, "fm_radio.py")
    first = json.dumps(to_node_link(parse_program(path)), sort_keys=True)
    second = json.dumps(to_node_link(parse_program(path)), sort_keys=True)
    assert first == second


def test_an_annotated_program_is_still_plain_python(tmp_path):
    path = write(tmp_path, FM_RADIO, "fm_radio.py")
    result = runpy.run_path(str(path), run_name="__main__")["RESULT"]
    assert result.shape == (1024,) and float(result[0]) == 1 + 2 + 3 + 4


# -- params ----------------------------------------------------------------------------------------

PARAMS = '''
# @stream param
N = 1 << 10
# @stream param
HALF = N // 2
# @stream param
NAME: str = "fm"
# @stream param
FAST = N > 100 and NAME == "fm"
LOCAL = 3          # not a param

# @stream kernel(flops=N + HALF)
def k():
    return 0

# @stream graph
def main():
    return k()
'''


def test_params_are_evaluated_in_file_order(tmp_path):
    path = write(tmp_path, PARAMS)
    assert param_values(path) == {"N": 1024, "HALF": 512, "NAME": "fm", "FAST": True}


def test_an_override_recomputes_the_params_that_depend_on_it(tmp_path):
    path = write(tmp_path, PARAMS)
    assert param_values(path, {"N": 64}) == {"N": 64, "HALF": 32, "NAME": "fm", "FAST": False}
    g = parse_program(path, overrides={"N": 64})
    assert g.graph["params"]["HALF"] == 32
    assert g.nodes["k@prog.py:17"]["flops"] == 96.0


def test_a_string_override_is_an_expression_over_earlier_params(tmp_path):
    path = write(tmp_path, PARAMS)
    values = param_values(path, {"N": "1<<12", "HALF": "N - 1", "NAME": "'x'"})
    assert values["N"] == 4096 and values["HALF"] == 4095 and values["NAME"] == "x"


def test_read_program_describes_params_kernels_and_graphs(tmp_path):
    path = write(tmp_path, '''
        # @stream param
        N = 8

        # @stream kernel(flops=n * N, share=0.5)
        @staticmethod
        def scale(x, /, n=2, *rest, axis=0, **opts):
            return x

        # @stream graph
        def main():
            return scale(1)
        ''')
    prog = read_program(path)
    assert list(prog.params) == ["N"]
    assert (prog.params["N"].line, prog.params["N"].col, prog.params["N"].text) == (2, 1, "8")
    kernel = prog.kernels["scale"]
    assert (kernel.line, kernel.directive_line, kernel.site) == (6, 4, "prog.py:6")
    assert sorted(kernel.clauses) == ["flops", "share"]
    assert kernel.dynamic == ("flops",)          # uses an argument: evaluated per call
    sig = kernel.signature
    assert (sig.positional, sig.posonly, sig.vararg, sig.kwonly, sig.kwarg) == \
        (("x", "n"), 1, "rest", ("axis",), "opts")
    assert list(prog.graphs) == ["main"] and prog.graphs["main"].kind == "graph"


# -- the graph language ----------------------------------------------------------------------------

CHOLESKY = '''
"""Tiled Cholesky factorisation (right-looking)."""
import numpy as np

# @stream param
T = 4
# @stream param
NB = 128

# @stream kernel(out=8*NB*NB)
def tile(i, j):
    return np.eye(NB) * (1 + (i == j))

# @stream kernel(flops=NB**3 / 3, out=8*NB*NB, device="gpu")
def potrf(a):
    return np.linalg.cholesky(a)

# @stream kernel(flops=NB**3, out=8*NB*NB)
def trsm(l, a):
    return a

# @stream kernel(flops=NB**3, out=8*NB*NB)
def syrk(a, l):
    return a

# @stream kernel(flops=2*NB**3, out=8*NB*NB)
def gemm(c, a, b):
    return c

# @stream graph
def cholesky():
    A = [[tile(i, j) for j in range(T)] for i in range(T)]
    for k in range(T):
        A[k][k] = potrf(A[k][k])
        for i in range(k + 1, T):
            A[i][k] = trsm(A[k][k], A[i][k])
        for i in range(k + 1, T):
            A[i][i] = syrk(A[i][i], A[i][k])
            for j in range(k + 1, i):
                A[i][j] = gemm(A[i][j], A[i][k], A[j][k])
    return [A[i][j] for i in range(T) for j in range(i + 1)]
'''


def _cholesky_reference(t: int):
    """The tasks and data dependencies of tiled Cholesky, traced in plain Python."""
    writer = {(i, j): f"tile[{i},{j}]@chol.py:31" for i in range(t) for j in range(t)}
    edges = set()

    def task(tid, reads, out):
        edges.update((writer[r], tid) for r in reads)
        writer[out] = tid
    for k in range(t):
        task(f"potrf[{k}]@chol.py:33", [(k, k)], (k, k))
        for i in range(k + 1, t):
            task(f"trsm[{k},{i}]@chol.py:35", [(k, k), (i, k)], (i, k))
        for i in range(k + 1, t):
            task(f"syrk[{k},{i}]@chol.py:37", [(i, i), (i, k)], (i, i))
            for j in range(k + 1, i):
                task(f"gemm[{k},{i},{j}]@chol.py:39", [(i, j), (i, k), (j, k)], (i, j))
    return edges, writer


@pytest.mark.parametrize("t", [1, 3, 4, 6])
def test_tiled_cholesky_has_exactly_the_data_dependencies(tmp_path, t):
    g = parse_program(write(tmp_path, CHOLESKY, "chol.py"), overrides={"T": t})
    edges, writer = _cholesky_reference(t)
    assert set(g.edges) == edges
    n_tasks = t * t + t + 2 * (t * (t - 1) // 2) + t * (t - 1) * (t - 2) // 6
    assert g.number_of_nodes() == n_tasks
    assert g.graph["outputs"] == {"list": [{"ref": writer[(i, j)]}
                                           for i in range(t) for j in range(i + 1)]}
    assert g.nodes[f"potrf[{t - 1}]@chol.py:33"]["flops"] == 128 ** 3 / 3
    assert g.edges["tile[0,0]@chol.py:31", "potrf[0]@chol.py:33"]["bytes"] == 8 * 128 * 128


TUPLES = '''
# @stream param
N = 10

# @stream kernel(out=8*n)
def load(n, offset=0):
    return list(range(offset, offset + n))

# @stream kernel(flops=N * parts, out=16 * N)
def halves(x, parts=2):
    return x[: len(x) // 2], x[len(x) // 2:]

# @stream kernel(flops=N, out=8, share=0.25, retries=2, stateful=True, split=0)
def mix(a, b, *, weight=1.0):
    return sum(a) + weight * sum(b)

# @stream kernel
def sink(x):
    pass

# @stream graph
def main():
    """Unpacking, nested calls, keyword arguments and a dict result."""
    lo, hi = halves(load(N), parts=4)
    both = mix(lo, hi, weight=N / 2)
    twice = mix(mix(lo, hi), mix(hi, lo))
    sink(twice)
    return {"both": both, "pair": (lo, hi), "n": N}
'''


def test_tuple_unpacking_nested_calls_keywords_and_dict_return(tmp_path):
    g = parse_program(write(tmp_path, TUPLES))
    assert list(g.nodes) == ["load@prog.py:23", "halves@prog.py:23", "mix@prog.py:24",
                             "mix@prog.py:25:17", "mix@prog.py:25:30", "mix@prog.py:25:13",
                             "sink@prog.py:26"]
    # Defaults of the def feed clauses: load's n is bound from the call, parts from the keyword.
    assert g.nodes["load@prog.py:23"]["out"] == 80.0
    assert g.nodes["halves@prog.py:23"]["flops"] == 40.0
    assert g.nodes["halves@prog.py:23"]["kwargs"] == {"parts": {"value": 4}}
    both = g.nodes["mix@prog.py:24"]
    assert both["args"] == [{"ref": "halves@prog.py:23", "index": 0},
                            {"ref": "halves@prog.py:23", "index": 1}]
    assert both["kwargs"] == {"weight": {"value": 5.0}}
    assert (both["share"], both["retries"], both["stateful"], both["split"]) == (0.25, 2, True, 0)
    # One edge for the two items of one producer.
    assert list(g.in_edges("mix@prog.py:24", data=True)) == \
        [("halves@prog.py:23", "mix@prog.py:24", {"bytes": 160.0})]
    # Nested calls become their own tasks; a line with several calls of one kernel adds columns.
    assert sorted(g.predecessors("mix@prog.py:25:13")) == ["mix@prog.py:25:17", "mix@prog.py:25:30"]
    assert g.nodes["sink@prog.py:26"]["out"] is None
    assert g.edges["mix@prog.py:25:13", "sink@prog.py:26"]["bytes"] == 8.0
    assert g.graph["outputs"] == {"dict": {
        "both": {"ref": "mix@prog.py:24"},
        "pair": {"tuple": [{"ref": "halves@prog.py:23", "index": 0},
                           {"ref": "halves@prog.py:23", "index": 1}]},
        "n": {"value": 10}}}


def test_if_on_loop_variables_append_and_static_list_operations(tmp_path):
    g = parse_program(write(tmp_path, '''
        # @stream param
        N = 6
        # @stream param
        MODE = "even"

        # @stream kernel(flops=abs(i))
        def step(x, i):
            return x

        # @stream kernel
        def start():
            return 0

        # @stream graph
        def main():
            acc = []
            x = start()
            for i in range(N):
                if i % 2 == 0 and MODE == "even":
                    x = step(x, i)
                elif i == 5:
                    continue
                else:
                    acc.append(step(x, -i))
                if len(acc) >= 2:
                    break
            tail = (acc + [x]) * 1
            return tail[-1], tail[:2], len(acc)
        '''))
    assert list(g.nodes) == ["start@prog.py:17", "step[0]@prog.py:20", "step[1]@prog.py:24",
                             "step[2]@prog.py:20", "step[3]@prog.py:24"]
    assert g.nodes["step[3]@prog.py:24"]["args"] == [{"ref": "step[2]@prog.py:20"},
                                                    {"value": -3}]
    assert g.graph["outputs"] == {"tuple": [
        {"ref": "step[2]@prog.py:20"},
        {"list": [{"ref": "step[1]@prog.py:24"}, {"ref": "step[3]@prog.py:24"}]},
        {"value": 2}]}


def test_comprehension_with_condition_and_static_list_items(tmp_path):
    g = parse_program(write(tmp_path, '''
        # @stream param
        K = 4

        # @stream kernel
        def f(*xs):
            return 0

        # @stream graph
        def main():
            ys = [f(i, j) for i in range(K) for j in range(i) if (i + j) % 2 == 1]
            grid = [[f(ys[a]) for a in range(len(ys))]]
            last = grid[0][len(ys) - 1]
            return f(*ys, last, *grid[0][:1])
        '''))
    ids = [n for n in g.nodes if n.startswith("f[") and ":10" in n]
    assert ids == ["f[1,0]@prog.py:10", "f[2,1]@prog.py:10", "f[3,0]@prog.py:10",
                   "f[3,2]@prog.py:10"]
    final = g.nodes["f@prog.py:13"]
    assert [a["ref"] for a in final["args"]] == ids + ["f[3]@prog.py:11", "f[0]@prog.py:11"]
    assert g.in_degree("f@prog.py:13") == 6


def test_static_lists_alias_like_python(tmp_path):
    g = parse_program(write(tmp_path, '''
        # @stream kernel
        def f(x=0):
            return x

        # @stream graph
        def main():
            a = [f(), f(1)]
            b = a
            b[0] = f(2)
            return a[0]
        '''))
    assert g.graph["outputs"] == {"ref": "f@prog.py:9"}


def test_range_bounds_are_static_expressions_over_params_and_loop_variables(tmp_path):
    g = parse_program(write(tmp_path, '''
        # @stream param
        N = 5

        # @stream kernel
        def f(i, j):
            return 0

        # @stream graph
        def main():
            for i in range(1, max(N - 2, 0) + 1, 2):
                for j in range(i, N, i + 1):
                    f(i, j)
        '''))
    assert list(g.nodes) == ["f[1,1]@prog.py:12", "f[1,3]@prog.py:12", "f[3,3]@prog.py:12"]
    assert g.graph["outputs"] is None


def test_directive_forms_comments_decorators_and_continuation_lines(tmp_path):
    g = parse_program(write(tmp_path, '''
        # @stream param
        N = 2
        import functools

        # @stream kernel(flops=2*N,      # clauses may continue
        #                bytes=3*N,
        #                device="cpu")
        # an ordinary comment may stand between
        @functools.lru_cache(maxsize=None)
        # a comment between decorators
        def f(x=0):
            return x

        #@stream graph
        def main():
            return f()
        '''))
    node = g.nodes["f@prog.py:16"]
    assert (node["flops"], node["bytes"], node["device"]) == (4.0, 6.0, "cpu")


def test_kernel_without_clauses_and_graph_with_parentheses(tmp_path):
    g = parse_program(write(tmp_path, '''
        # @stream kernel()
        def f():
            return 0
        # @stream kernel
        def g(x):
            return x
        # @stream graph()
        def main():
            return g(f())
        '''))
    assert [g.nodes[n]["flops"] for n in g] == [None, None]


def test_choosing_the_entry_point(tmp_path):
    path = write(tmp_path, '''
        # @stream kernel
        def f(x=0):
            return x
        # @stream graph
        def first():
            return f()
        # @stream graph
        def second(n=3):
            return [f(i) for i in range(n)]
        ''')
    g = parse_program(path, entry="second")
    assert (g.graph["name"], g.graph["entry"], g.number_of_nodes()) == ("second", "second", 3)
    assert parse_program(path, entry="first").graph["outputs"] == {"ref": "f@prog.py:6"}


def test_a_pipeline_is_its_items_unrolled(tmp_path):
    g = parse_program(write(tmp_path, '''
        # @stream param
        ITEMS = 3

        # @stream kernel(out=8)
        def read(i):
            return i
        # @stream kernel(flops=100)
        def work(x):
            return x

        # @stream pipeline(items=ITEMS)
        def stream(i):
            return work(read(i))
        '''))
    assert g.graph["pipeline"] == {"items": 3}
    assert sorted(g.edges) == [(f"read[{i}]@prog.py:13", f"work[{i}]@prog.py:13")
                               for i in range(3)]
    assert g.graph["outputs"] == {"list": [{"ref": f"work[{i}]@prog.py:13"} for i in range(3)]}


def test_columns_count_characters_not_bytes(tmp_path):
    g = parse_program(write(tmp_path, '''
        # @stream kernel(device="Ascend-910B", flops=1)
        def f(s):
            return s
        # @stream graph
        def main():
            return f("héllo") , f("wörld")
        '''))
    assert list(g.nodes) == ["f@prog.py:6:12", "f@prog.py:6:25"]


# -- performance -----------------------------------------------------------------------------------

HEADER = '''
# @stream param
N = 1000
# @stream kernel(flops=10 * i, out=8)
def f(x, i=0):
    return x
# @stream kernel(out=8)
def src():
    return 0
'''


# How fast the front end builds these (at most 1 s) is measured by benchmarks/compile_time.py.

def test_a_loop_of_1000_calls_unrolls_into_a_chain_of_1001_tasks(tmp_path):
    path = write(tmp_path, HEADER + '''
# @stream graph
def main():
    x = src()
    for i in range(N):
        x = f(x, i)
    return x
''')
    g = parse_program(path)
    assert g.number_of_nodes() == 1001 and g.number_of_edges() == 1000


def test_1000_explicit_call_lines_build_a_chain_of_1001_tasks(tmp_path):
    lines = "\n".join(f"    y{i + 1} = f(y{i}, {i})" for i in range(1000))
    path = write(tmp_path, HEADER + "\n# @stream graph\ndef main():\n    y0 = src()\n" + lines +
                 "\n    return y1000\n")
    g = parse_program(path)
    assert g.number_of_nodes() == 1001 and nx.dag_longest_path_length(g) == 1000


def test_list_and_tuple_copy_static_lists_and_loops_may_count_down(tmp_path):
    g = parse_program(write(tmp_path, '''
        # @stream kernel
        def f(i=0):
            return i

        # @stream graph
        def main():
            ys = [f(i) for i in range(3)]
            zs = list(ys)
            zs.append(f())
            for k in range(len(ys) - 1, -1, -1):
                ys[k] = f(ys[k])
            return tuple(zs), ys[0]
        '''))
    assert list(g.nodes)[-3:] == ["f[2]@prog.py:11", "f[1]@prog.py:11", "f[0]@prog.py:11"]
    copied, first = g.graph["outputs"]["tuple"]
    assert copied == {"tuple": [{"ref": f"f[{i}]@prog.py:7"} for i in range(3)] +
                      [{"ref": "f@prog.py:9"}]}
    assert first == {"ref": "f[0]@prog.py:11"}
