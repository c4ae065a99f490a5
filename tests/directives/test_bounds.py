"""The directive language does bounded work: values are measured in all (nested tuples count),
nesting is measured before anything recurses, and every evaluator has a step budget."""

import pytest

from streammap.directives import safe_eval as se
from streammap.directives.safe_eval import Evaluator, Locator, parse_expr, safe_eval
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
