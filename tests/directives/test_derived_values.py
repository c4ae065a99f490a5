"""Module-level values derived from params: usable in clauses and graph bodies, never overridable.

``ROWS = H // TILES`` at module level (no directive above it) follows ``H`` and ``TILES`` as Python
would compute it on import: a ``-D`` of a param changes it, a ``-D`` of it is refused, and a
module global the safe evaluator cannot compute is an error only where a directive uses it, saying
where it was assigned and why it has no value.
"""

from __future__ import annotations

import runpy
import textwrap

import numpy as np
import pytest

from streammap.api import compile as compile_plan
from streammap.api import run as run_plan
from streammap.cli import main
from streammap.directives import param_values, parse_program, read_program
from streammap.errors import DirectiveError


def write(tmp_path, text: str, name: str = "prog.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


def line_of(path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


TILED = '''
import numpy as np

# @stream param
H = 64
# @stream param
TILES = 4
ROWS = H // TILES                 # derived: not a param
TILE = (ROWS, 2 * ROWS)
HALF = H / 2
AREA = ROWS * 2 * ROWS


# @stream kernel(bytes=8*AREA, out=8*ROWS*2*ROWS)
def cut(i):
    return np.full(TILE, float(i))


# @stream kernel(flops=HALF * len(shape), out=8*H)
def stitch(shape, *parts):
    return np.concatenate([p.sum(axis=1) for p in parts])


# @stream graph
def main():
    parts = [cut(i) for i in range(TILES)]
    return stitch(TILE, *parts)


if __name__ == "__main__":
    RESULT = main()
'''


def test_a_clause_may_use_values_derived_from_params(tmp_path):
    path = write(tmp_path, TILED)
    g = parse_program(path)
    cut = g.nodes[f"cut[0]@prog.py:{line_of(path, 'parts = [cut')}"]
    assert cut["bytes"] == 8.0 * 16 * 32 and cut["out"] == 8.0 * 16 * 32
    stitch = g.nodes[f"stitch@prog.py:{line_of(path, 'return stitch')}"]
    assert stitch["flops"] == 32.0 * 2                   # HALF * len(shape), shape = TILE
    assert stitch["args"][0] == {"tuple": [{"value": 16}, {"value": 32}]}
    assert g.graph["params"] == {"H": 64, "TILES": 4}   # the plan's params stay the params


def test_a_graph_body_may_loop_over_a_derived_value_and_index_a_derived_tuple(tmp_path):
    path = write(tmp_path, '''
        # @stream param
        N = 12
        # @stream param
        PARTS = 3
        ROWS = N // PARTS
        SHAPE = (ROWS, N)

        # @stream kernel(out=8*rows*cols)
        def block(i, rows, cols):
            return i

        # @stream graph
        def main():
            return [block(i, SHAPE[0], SHAPE[1]) for i in range(ROWS)]
        ''')
    g = parse_program(path)
    assert g.number_of_nodes() == 4
    assert {g.nodes[t]["out"] for t in g} == {8.0 * 4 * 12}


def test_an_override_of_a_param_recomputes_the_values_derived_from_it(tmp_path):
    path = write(tmp_path, TILED)
    g = parse_program(path, overrides={"H": 128, "TILES": "2"})
    cuts = [t for t in g if t.startswith("cut[")]
    assert len(cuts) == 2                                 # range(TILES)
    assert g.nodes[cuts[0]]["out"] == 8.0 * 64 * 128      # ROWS = 128 // 2, TILE = (64, 128)


def test_a_name_takes_the_value_of_its_last_module_level_assignment(tmp_path):
    path = write(tmp_path, '''
        # @stream param
        N = 10
        STEPS = N
        STEPS = STEPS * 2          # reassigned: file order, as Python imports it
        STEPS += 1
        WIDE = STEPS > 20

        # @stream kernel(flops=STEPS, device="gpu" if WIDE else "cpu")
        def k():
            return 0

        # @stream graph
        def main():
            return k()
        ''')
    node = next(iter(parse_program(path).nodes.values()))
    assert node["flops"] == 21.0 and node["device"] == "gpu"
    node = next(iter(parse_program(path, overrides={"N": 5}).nodes.values()))
    assert node["flops"] == 11.0 and node["device"] == "cpu"


def test_overriding_a_derived_value_is_refused_naming_its_assignment_and_the_params(tmp_path):
    path = write(tmp_path, TILED)
    with pytest.raises(DirectiveError) as info:
        param_values(path, {"ROWS": 4})
    err = info.value
    assert "'ROWS' cannot be overridden: it is derived from params" in err.message
    assert "prog.py:7: ROWS = H // TILES" in err.message
    assert err.line == 7 and err.hint.startswith("set the params it is computed from instead: H, TILES")


def test_the_cli_refuses_d_of_a_derived_name_with_exit_status_2(tmp_path, monkeypatch, capsys):
    write(tmp_path, TILED)
    monkeypatch.chdir(tmp_path)
    assert main(["compile", "prog.py", "--cluster", "local", "-D", "ROWS=4", "-o", "plan.yaml"]) == 2
    err = capsys.readouterr().err
    assert "prog.py:7:1: error: 'ROWS' cannot be overridden: it is derived from params" in err
    assert "hint: set the params it is computed from instead: H, TILES" in err
    assert "Traceback" not in err and not (tmp_path / "plan.yaml").exists()


def test_a_constant_module_value_is_usable_but_not_overridable(tmp_path):
    path = write(tmp_path, '''
        SIZE = 8

        # @stream kernel(flops=SIZE)
        def k():
            return 0

        # @stream graph
        def main():
            return k()
        ''')
    assert next(iter(parse_program(path).nodes.values()))["flops"] == 8.0
    with pytest.raises(DirectiveError, match="it is a module-level value .*not a param") as info:
        param_values(path, {"SIZE": 4})
    assert "mark its assignment with `# @stream param`" in info.value.hint


@pytest.mark.parametrize("assignment, reason", [
    ("LIMIT = load()", "its value (prog.py:5) is not a compile-time expression: call to 'load' "
                       "is not allowed in the value of 'LIMIT'"),
    ("LIMIT = CONFIG['n']", "its value (prog.py:5) uses 'CONFIG', which has none: its value "
                            "(prog.py:2) is not a compile-time expression: a dict is not allowed"),
    ("LIMIT = N * LATER", "its value (prog.py:5) uses 'LATER', which is not a param or a value "
                          "assigned above it"),
    ("LIMIT = np", "its value (prog.py:5) uses 'np', which has none: it is bound by an import "
                   "(prog.py:1)"),
    ("LIMIT, OTHER = 1, 2", "it is assigned by unpacking (prog.py:5)"),
])
def test_a_clause_using_a_value_without_compile_time_value_says_where_and_why(
        tmp_path, assignment, reason):
    path = write(tmp_path, f'''
        import numpy as np
        CONFIG = {{"n": 3}}
        # @stream param
        N = 8
        {assignment}
        LATER = 2

        # @stream kernel(flops=N * LIMIT)
        def k():
            return 0

        # @stream graph
        def main():
            return k()
        ''')
    with pytest.raises(DirectiveError) as info:
        read_program(path)
    err = info.value
    assert err.message == f"'LIMIT' in clause 'flops' of kernel 'k' has no compile-time value: {reason}" \
        or err.message.startswith(f"'LIMIT' in clause 'flops' of kernel 'k' has no compile-time value: {reason}")
    assert (err.line, err.col) == (8, err.source_line.index("LIMIT") + 1)
    assert "compute anything else inside a kernel" in err.hint


def test_a_value_assigned_in_an_if_block_is_refused_with_the_expression_to_write(tmp_path):
    path = write(tmp_path, '''
        # @stream param
        GPU = True
        if GPU:
            BLOCK = 256
        else:
            BLOCK = 64

        # @stream kernel(flops=BLOCK)
        def k():
            return 0

        # @stream graph
        def main():
            return k()
        ''')
    with pytest.raises(DirectiveError) as info:
        parse_program(path)
    assert "it is assigned inside a module-level 'if' statement (prog.py:3)" in info.value.message
    assert "`BLOCK = A if CONDITION else B`" in info.value.message


def test_a_graph_body_using_a_global_without_value_says_why(tmp_path):
    path = write(tmp_path, '''
        import os
        # @stream param
        N = 4
        WORKERS = os.cpu_count()

        # @stream kernel
        def k(i):
            return i

        # @stream graph
        def main():
            return [k(i) for i in range(WORKERS)]
        ''')
    with pytest.raises(DirectiveError) as info:
        parse_program(path)
    err = info.value
    assert err.message == ("'WORKERS' is a module global without a compile-time value: its value "
                           "(prog.py:4) is not a compile-time expression: call to 'os.cpu_count' "
                           "is not allowed in the value of 'WORKERS'")
    assert err.line == 12 and err.source_line.index("WORKERS") + 1 == err.col


def test_a_derived_value_that_fails_for_the_given_params_is_an_error_where_it_is_used(tmp_path):
    path = write(tmp_path, TILED)
    with pytest.raises(DirectiveError) as info:
        parse_program(path, overrides={"TILES": 0})         # ROWS = H // 0; TILE uses ROWS
    err = info.value
    assert err.message == ("'TILE' is a module global without a compile-time value: its value "
                           "(prog.py:8) uses 'ROWS', which has none: its value (prog.py:7) cannot "
                           "be computed: cannot evaluate the value of 'ROWS': integer division or "
                           "modulo by zero")
    assert err.line == line_of(path, "return stitch(TILE")


def test_a_param_assigned_again_at_module_level_is_refused(tmp_path):
    path = write(tmp_path, '''
        # @stream param
        N = 4
        N = N * 2

        # @stream kernel
        def k():
            return 0
        ''')
    with pytest.raises(DirectiveError) as info:
        read_program(path)
    assert info.value.message == "param 'N' is assigned again after its declaration (line 2)"
    assert info.value.line == 3


def test_params_may_still_be_rebound_in_the_main_block_for_plain_python(tmp_path):
    path = write(tmp_path, '''
        # @stream param
        N = 4
        TWICE = 2 * N

        # @stream kernel(flops=TWICE)
        def k():
            return 0

        # @stream graph
        def main():
            return k()

        if __name__ == "__main__":
            N = 8
        ''')
    assert next(iter(parse_program(path).nodes.values()))["flops"] == 8.0


def test_plain_python_and_streammap_run_compute_the_same_result(tmp_path):
    path = write(tmp_path, TILED)
    expected = runpy.run_path(str(path), run_name="__main__")["RESULT"]
    plan = compile_plan(path, cluster="local")
    result = run_plan(plan, outputs=None)["result"]
    np.testing.assert_array_equal(result, expected)
    assert result.shape == (64,) and float(result[16]) == 1 * 32     # tile 1: 16 rows of 32 ones

    # At other params, the runtime's module recomputes ROWS and TILE as the compiler did.
    plan = compile_plan(path, cluster="local", params={"H": 32, "TILES": 4})
    result = run_plan(plan, outputs=None)["result"]
    assert result.shape == (32,) and float(result[8]) == 1 * 16      # tile 1: 8 rows of 16 ones


def test_a_clause_may_use_the_items_of_a_derived_tuple(tmp_path):
    prog = write(tmp_path, TILED.replace("# @stream kernel(bytes=8*AREA,", "# @stream kernel(bytes=8*TILE[0]*TILE[-1],"))
    g = parse_program(prog, {"H": "128"})
    cut = g.nodes[f"cut[0]@prog.py:{line_of(prog, 'parts = [cut')}"]
    assert cut["bytes"] == 8 * 32 * 64          # TILE follows H: (128 // 4, 2 * 32)


@pytest.mark.parametrize("index, message", [
    ("TILE[2]", "index 2 is out of range for 'TILE' (a tuple of 2 items)"),
    ("TILE[0:1]", "a slice is not allowed"),
    ("ROWS[0]", "'ROWS' is int, only tuples can be indexed"),
    ("TILE[HALF]", "a tuple index must be an integer"),
])
def test_a_bad_index_in_a_clause_names_the_clause_and_what_is_wrong(tmp_path, index, message):
    prog = write(tmp_path, TILED.replace("# @stream kernel(bytes=8*AREA,", f"# @stream kernel(bytes=8*{index},"))
    with pytest.raises(DirectiveError) as err:
        parse_program(prog)
    assert message in str(err.value)
    assert f"{prog.name}:{line_of(prog, index)}:" in str(err.value)
