"""The directive language does bounded work: values are measured in all (nested tuples count),
nesting is measured before anything recurses, and every evaluator has a step budget."""

import pytest

from streammap.directives import parse_program
from streammap.directives import safe_eval as se
from streammap.directives.safe_eval import Evaluator, Locator, parse_expr, safe_eval
from streammap.directives.scan import scan
from streammap.errors import DirectiveError


def ev(text, env=None):
    return safe_eval(text, env or {}, Locator("<expr>", [text]))


def test_tuples_are_measured_with_the_tuples_inside_them():
    assert len(ev("((1,)*100,)*99")) == 99                  # 99 * 101 items: within the limit
    with pytest.raises(DirectiveError, match="limit: 10000 items in all"):
        ev("((1,)*1000,)*1000")                              # short tuples, a million items
    with pytest.raises(DirectiveError, match="limit: 10000 items in all"):
        ev("((1,)*100, (2,)*100) * 60")


def test_comparing_two_tuple_bombs_is_refused_before_comparing():
    bomb = "(((1,)*10000,)*10000,)*10000"
    with pytest.raises(DirectiveError, match="limit: 10000 items in all") as exc:
        ev(f"0*({bomb} == {bomb})")
    assert exc.value.col == 5                # at the first tuple that is too large


def test_an_evaluator_stops_at_its_step_budget(monkeypatch):
    monkeypatch.setattr(Evaluator, "max_work", 50)
    assert ev("+".join(["1"] * 20)) == 20
    with pytest.raises(DirectiveError, match="needs more than 50 steps"):
        ev("('x'*40, 'y'*40)")


def test_nesting_is_refused_before_evaluation_recurses():
    deep = "-" * (se.MAX_DEPTH + 10) + "1"
    with pytest.raises(DirectiveError, match="nested more than 100 levels deep"):
        parse_expr(deep, Locator("<expr>", [deep]))
    node = parse_expr("-" * 50 + "1", Locator("<expr>", ["x"]))
    assert Evaluator({}, Locator("<expr>", ["x"])).eval(node) == 1


def test_expression_text_is_bounded():
    text = "1+" * 6000 + "1"
    with pytest.raises(DirectiveError, match="limit: 10000"):
        parse_expr(text, Locator("<expr>", [text]))


@pytest.mark.parametrize("expr", ["2 ** 4096", "1 << 5000", "10 ** 10 ** 10", "'a' * 10**9"])
def test_huge_values_are_refused_before_they_are_computed(expr):
    with pytest.raises(DirectiveError, match="too large|too long"):
        ev(expr)


# -- module-level code far from any directive ------------------------------------------------------

MANY_STATEMENTS = '''\
# @stream param
N = 4
{filler}
# @stream kernel(flops=N)
def k(x=0):
    return x
{filler}
# @stream graph
def main():
    return k()
{filler}
'''


def test_module_level_code_far_from_directives_costs_the_directive_reader_nothing(tmp_path, monkeypatch):
    """A file of 100,000 module-level statements (a generated table, a pasted log) with three
    directives took minutes: libcst, which decides which statement a comment belongs to, read every
    statement. Runs of statements with no directive in or above them reach it as one line each
    (shown here on runs of 4,000 statements, 10,000 lines each)."""
    import libcst

    seen = []
    parse = libcst.parse_module
    monkeypatch.setattr(libcst, "parse_module", lambda text: seen.append(text) or parse(text))
    filler = "".join(f"X{i} = {i}\nif X{i}:\n    pass\n# a comment\n\n" for i in range(2_000))
    path = tmp_path / "p.py"
    path.write_text(MANY_STATEMENTS.format(filler=filler))
    graph = parse_program(path)
    assert [(d.name, d.target.lineno) for d in scan(path).directives] == [
        ("param", 2), ("kernel", 10_005), ("graph", 20_009)]
    assert [kernel for _, kernel in graph.nodes(data="kernel")] == ["k"]
    assert max(len(text.splitlines()) for text in seen) < 50


@pytest.mark.parametrize("filler", ["A = 1; B = 2", "C = (1,\n     2)", "D = '''\n# @stream kernel(flops=1)\n'''"])
def test_a_directive_below_any_statement_still_belongs_to_the_def_under_it(tmp_path, filler):
    path = tmp_path / "p.py"
    path.write_text(f"{filler}\n{filler}\n# @stream kernel(flops=1)\ndef k():\n    return 0\n{filler}\n")
    [directive] = scan(path).directives
    assert directive.name == "kernel" and directive.target.name == "k"


def test_a_misplaced_directive_among_many_statements_is_still_an_error_at_its_line(tmp_path):
    path = tmp_path / "p.py"
    path.write_text("A = 1\n" * 1000 + "# @stream kernel(flops=1)\n\ndef k():\n    return 0\n" + "B = 2\n" * 1000)
    with pytest.raises(DirectiveError, match="line 1002 is blank") as exc:
        scan(path)
    assert exc.value.line == 1001


def test_a_program_of_more_module_level_statements_than_the_limit_is_refused_at_the_first_past_it(tmp_path):
    path = tmp_path / "p.py"
    path.write_text("# @stream kernel(flops=1)\ndef k():\n    return 0\n" + "".join(f"X{i} = {i}\n" for i in range(100_000)))
    with pytest.raises(DirectiveError, match="100001 module-level statements .limit: 100000.") as exc:
        scan(path)
    assert exc.value.line == 100_003 and exc.value.source_line == "X99999 = 99999"
    assert "read it from a file" in exc.value.hint


def test_a_file_of_thousands_of_kernels_is_read_in_one_pass_over_its_names(tmp_path, monkeypatch):
    """5,000 kernels took 20 s and 50,000 hours: each kernel's clauses recomputed the names of the
    whole file. The names are computed once (counted here on 300 kernels), and a hint lists at
    most 20 derived values."""
    from streammap.directives import program as front

    calls = []
    static_names = front._static_names
    monkeypatch.setattr(front, "_static_names", lambda prog: calls.append(1) or static_names(prog))
    kernels = "".join(f"A{i} = {i}\n# @stream kernel(flops=A{i})\ndef k{i}():\n    return 0\n" for i in range(300))
    path = tmp_path / "p.py"
    path.write_text(kernels + "# @stream kernel(flops=NOPE)\ndef bad():\n    return 0\n")
    with pytest.raises(DirectiveError, match="NOPE") as exc:
        parse_program(path)
    assert exc.value.line == 1_201
    assert "values derived from them (A0, A1, A2," in exc.value.hint and "A19 and 280 more)" in exc.value.hint
    assert len(calls) == 1
