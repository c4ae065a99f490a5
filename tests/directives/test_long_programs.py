"""Long programs: what the front end's shortcuts for large files must not change.

The front end reads only where a directive can be (candidate ``# @stream`` texts, and libcst on
a skeleton of the file whose def and class bodies are cut to ``pass``) and skips the inside of
short one-line statements when it measures nesting. These tests state that a long graph body is
read exactly as a short one: directives attach to the same statements, misplaced ones are refused
at their line, quoted ones are ignored, and deep nesting is found wherever it is. Timings are in
``benchmarks/frontend_scale.py``.
"""

from __future__ import annotations

import ast
import gc
import textwrap

import pytest

from streammap.directives import parse_program, read_program
from streammap.directives.safe_eval import deepest
from streammap.directives.scan import _deepest_code
from streammap.errors import DirectiveError

HEAD = '''\
"""A long program. Quoting a directive in a docstring, # @stream kernel(flops=1), is no directive."""
# @stream param
N = 8


# @stream kernel(out=8*N)
def start():
    """Not a directive either:
    # @stream graph
    """
    return 0


# @stream kernel(flops=N, out=8*N)
def step(x, k):
    return x + k


# @stream kernel(flops=2*N, out=8*N)
def pair(a, b):
    return a - b


# @stream graph
def main():
    x0 = start()
'''


def calls(n: int) -> str:
    """``n - 1`` call lines after ``x0``: a chain in which every tenth call is a fan-in."""
    lines = []
    for i in range(1, n):
        if i % 10 == 0:
            lines.append(f"    x{i} = pair(x{i - 1}, x{i - 5})\n")
        else:
            lines.append(f"    x{i} = step(x{i - 1}, {i})\n")
    return "".join(lines)


def write(tmp_path, text: str):
    path = tmp_path / "long.py"
    path.write_text(text, encoding="utf-8")
    return path


def line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def test_a_long_graph_body_is_one_task_per_call_with_its_fan_outs(tmp_path):
    n = 3000
    g = parse_program(write(tmp_path, HEAD + calls(n) + f"    return x{n - 1}\n"))
    assert g.number_of_nodes() == n
    pairs = [t for t in g if t.startswith("pair@")]
    assert len(pairs) == (n - 1) // 10
    first_pair = min(pairs, key=lambda t: int(t.rsplit(":", 1)[1]))
    assert sorted(g.predecessors(first_pair)) == sorted(
        [f"step@long.py:{line_of(HEAD, 'x0 = start()') + 9}",
         f"step@long.py:{line_of(HEAD, 'x0 = start()') + 5}"])
    assert g.number_of_edges() == (n - 1) + len(pairs)      # one per call, one more per pair


def test_directives_below_a_long_body_attach_to_the_statement_under_them(tmp_path):
    tail = '''    return x2999


# @stream param
M = 3
# a comment line may stand between a directive and its def
# @stream kernel(flops=M)
@staticmethod
# @stream graph
def other():
    return 0
'''
    text = HEAD + calls(3000) + tail
    err = pytest.raises(DirectiveError, read_program, write(tmp_path, text)).value
    # Both directives are attached (to the decorated def): the second is refused as a second
    # directive on one statement, at its own line, which proves the skeleton kept the lines.
    assert err.message.startswith("a second directive ('graph') on the statement")
    assert err.line == text.splitlines().index("# @stream graph", line_of(HEAD, "def main")) + 1

    fixed = text.replace("# @stream graph\ndef other", "def other")
    prog = read_program(write(tmp_path, fixed))
    assert prog.params["M"].line == line_of(fixed, "M = 3")
    assert prog.kernels["other"].line == line_of(fixed, "def other")


def test_a_comment_trailing_a_long_body_still_belongs_to_that_body(tmp_path):
    text = HEAD + calls(2000) + "    return x1999\n    # @stream param\nM = 3\n"
    err = pytest.raises(DirectiveError, read_program, write(tmp_path, text)).value
    assert err.message == "directive inside the body of function 'main'"
    assert err.line == line_of(text, "    # @stream param")


def test_a_misplaced_directive_deep_in_a_long_body_is_refused_at_its_line(tmp_path):
    body = calls(2000).splitlines(keepends=True)
    body.insert(1500, "    # @stream kernel\n")
    text = HEAD + "".join(body) + "    return x1999\n"
    err = pytest.raises(DirectiveError, read_program, write(tmp_path, text)).value
    assert err.message == "directive inside the body of function 'main'"
    assert err.line == line_of(text, "    # @stream kernel")


def test_directives_quoted_in_strings_are_not_directives(tmp_path):
    text = HEAD + calls(500) + '    s = "# @stream kernel"\n    return x499\n'
    g = parse_program(write(tmp_path, text))
    assert g.number_of_nodes() == 500


def test_deep_nesting_is_found_deep_in_a_long_body(tmp_path):
    body = calls(2000).splitlines(keepends=True)
    body.insert(1200, "    y = " + "-" * 300 + "1\n")
    text = HEAD + "".join(body) + "    return x1999\n"
    err = pytest.raises(DirectiveError, read_program, write(tmp_path, text)).value
    assert "nested more than 100 levels deep" in err.message
    assert err.line == line_of(text, "    y = ---")


@pytest.mark.parametrize("make", [
    lambda k: "-" * k + "1",                       # one level a character
    lambda k: "a" + "+a" * k,                      # one level every two
    lambda k: "f(" * k + ")" * k,
    lambda k: "[" * k + "]" * k,
    lambda k: "x" + ".y" * k,
    lambda k: "not " * k + "x",
    lambda k: "(lambda: " * k + "0" + ")" * k,
    lambda k: "[" + "-" * k + "i for i in r]",
])
def test_skipping_short_lines_finds_the_same_too_deep_node_as_a_full_walk(make):
    """The nesting check skips one-line statements too short to be deep; at a small limit,
    where lines near it are skipped or walked, it blames the node a walk of every node blames."""
    limit = 30
    for k in range(1, 40):
        tree = ast.parse(f"def main():\n    y = {make(k)}\n    return y\n")
        full, fast = deepest(tree, limit), _deepest_code(tree, limit)
        assert (fast is None) == (full is None), k
        if full is not None:
            assert (type(fast), fast.lineno, fast.col_offset) == \
                (type(full), full.lineno, full.col_offset), k


@pytest.mark.parametrize("enabled", [True, False])
def test_the_front_end_leaves_the_garbage_collector_as_it_found_it(tmp_path, enabled):
    good = write(tmp_path, HEAD + calls(20) + "    return x19\n")
    bad = tmp_path / "bad.py"
    bad.write_text(textwrap.dedent(HEAD + "    return missing\n"))
    was = gc.isenabled()
    try:
        if not enabled:
            gc.disable()
        parse_program(good)
        assert gc.isenabled() is enabled
        with pytest.raises(DirectiveError):
            parse_program(bad)
        assert gc.isenabled() is enabled
    finally:
        if was:
            gc.enable()
