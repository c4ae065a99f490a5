"""The expression language of directives, evaluated without ``eval``.

Param values, clause values (``flops=16*N``), ``range(...)`` bounds and ``if`` conditions of a graph
body are all expressions of one small language: Python's expression syntax, parsed by :mod:`ast`,
restricted to a whitelist, and interpreted here node by node.

Policy
------
* **Whitelist, never blacklist.** Allowed: constants (int, float, str, bool, None), names from the
  environment, arithmetic (``+ - * / // % ** << >> & | ^``), unary ``- + ~ not``, comparisons,
  ``and``/``or``, ``a if c else b``, tuples, and calls to :data:`FUNCTIONS`. Every other node (an
  attribute, a subscript, a lambda, a call to anything else, ...) is a :class:`DirectiveError`
  pointing at that sub-expression. There is no way to reach a Python object that the environment
  did not put there, so there is nothing to escape from.
* **Bounded work.** An expression is short, but ``10**10**10``, ``1 << 10**9`` or ``"a" * 10**9``
  would still hang or exhaust memory. Powers and shifts are checked *before* they are computed,
  and every int result is limited to :data:`MAX_INT_BITS` bits, every str/tuple to
  :data:`MAX_SEQ_LEN` items *in all*: a tuple's size counts the items of the tuples inside it
  (``((1,)*10000,)*10000`` is 10**8 items, though each tuple is short), and repetition is
  checked on that size before it is done. Nesting is measured before anything recurses
  (:data:`MAX_DEPTH` levels, by :meth:`Evaluator.check` and :func:`parse_expr`), and one evaluator
  does at most ``max_work`` steps (a node evaluated, or an item of a value built), so the total
  work of an expression is bounded, not only each of its values.
* **Positions are file positions.** An expression may come from the file itself (a graph body) or
  from a snippet cut out of a comment (a clause). A :class:`Locator` maps the ``ast`` positions of
  the snippet (line within the snippet, UTF-8 byte offset) back to 1-based file line and character
  column, so every error carets the exact sub-expression in the original line.

State
-----
:class:`Evaluator` holds only its environment (a read-only mapping) and its locator. The graph
builder (``build.py``) subclasses it to add lists, subscripts and kernel calls; ``eval_<Node>``
methods are found by name, so a subclass extends the language by adding methods.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Mapping

from streammap.errors import DirectiveError

#: Largest int (in bits) an expression may produce; sizes of real programs are far below this.
MAX_INT_BITS = 4096
#: Largest str or tuple an expression may produce.
MAX_SEQ_LEN = 10_000
#: ``round(x, n)`` with a huge ``n`` computes ``10**n``; real code never needs more than this.
MAX_ROUND_DIGITS = 100
#: Deepest nesting of an expression (``-(-(-...))``, a long ``a + b + ...`` nests one level a term).
MAX_DEPTH = 100
#: Longest expression text parsed (a clause, a param override).
MAX_EXPR_CHARS = 10_000
#: Most steps one evaluator takes (nodes evaluated plus items of the values built).
MAX_WORK = 1_000_000


def _round(x, ndigits=None):
    if ndigits is not None and abs(ndigits) > MAX_ROUND_DIGITS:
        raise ValueError(f"round() digits must be within ±{MAX_ROUND_DIGITS}")
    return round(x) if ndigits is None else round(x, ndigits)


#: Functions an expression may call, by the name it calls them with.
FUNCTIONS = {
    "min": min, "max": max, "abs": abs, "int": int, "float": float, "round": _round,
    "ceil": math.ceil, "floor": math.floor, "log2": math.log2, "sqrt": math.sqrt, "len": len,
}
FUNCTION_LIST = ", ".join(FUNCTIONS)

#: Types an operator or a function may be applied to.
STATIC_TYPES = (int, float, str, bool, type(None), tuple)
_CONST_TYPES = (int, float, str, bool, type(None))

_BINOPS = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
    ast.Pow: operator.pow, ast.LShift: operator.lshift, ast.RShift: operator.rshift,
    ast.BitAnd: operator.and_, ast.BitOr: operator.or_, ast.BitXor: operator.xor,
}
_UNARYOPS = {ast.UAdd: operator.pos, ast.USub: operator.neg, ast.Invert: operator.invert,
             ast.Not: operator.not_}
_CMPOPS = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
    ast.Gt: operator.gt, ast.GtE: operator.ge, ast.Is: operator.is_, ast.IsNot: operator.is_not,
    ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b,
}
#: Expression node classes :meth:`Evaluator.check` lets through.
ALLOWED_NODES = frozenset({
    ast.Constant, ast.Name, ast.BinOp, ast.UnaryOp, ast.Compare, ast.BoolOp, ast.IfExp,
    ast.Tuple, ast.Call, ast.Subscript,
})

#: Readable names for constructs that are refused.
_DESCRIBE = {
    ast.Attribute: "attribute access", ast.Subscript: "subscripting", ast.Lambda: "a lambda",
    ast.ListComp: "a list comprehension", ast.SetComp: "a set comprehension",
    ast.DictComp: "a dict comprehension", ast.GeneratorExp: "a generator expression",
    ast.List: "a list", ast.Dict: "a dict", ast.Set: "a set", ast.Starred: "a starred expression",
    ast.NamedExpr: "an assignment expression (:=)", ast.JoinedStr: "an f-string",
    ast.Await: "await", ast.Yield: "yield", ast.YieldFrom: "yield", ast.Slice: "a slice",
    ast.MatMult: "the @ operator", ast.FormattedValue: "an f-string",
}


def describe(node: ast.AST) -> str:
    """A readable name for a construct, for 'X is not allowed' messages."""
    return _DESCRIBE.get(type(node), type(node).__name__)



def _repeat_count(n, other):
    """``n`` as a repeat count of the sequence ``other``: at least 0 (Python's ``seq * -5`` is
    empty, but ``seq * -10**100`` does not fit an index and raises instead)."""
    if isinstance(other, (str, tuple)) and isinstance(n, int) and not isinstance(n, bool) and n < 0:
        return 0
    return n

class Locator:
    """Maps positions of an ``ast`` tree back into the file it came from.

    ``segments[k]`` is ``(file_line, file_col0, text)`` for line ``k + 1`` of the parsed snippet:
    the file line it sits on, the 0-based character column where it starts there, and its text
    (needed to turn the byte offsets of ``ast`` into characters). ``segments=None`` means the
    snippet *is* the file.
    """

    __slots__ = ("path", "lines", "segments")

    def __init__(self, path: str, lines: list[str], segments=None):
        self.path = path
        self.lines = lines
        self.segments = segments

    def position(self, lineno: int, col_offset: int, *, chars: bool = False) -> tuple[int, int]:
        """1-based ``(line, col)`` in the file of an ast position (``chars``: offset in chars)."""
        if self.segments is None:
            line, col0, text = lineno, 0, self._line(lineno)
        else:
            line, col0, text = self.segments[min(lineno, len(self.segments)) - 1]
        if not chars and not text.isascii():
            col_offset = len(text.encode("utf-8")[:col_offset].decode("utf-8", "ignore"))
        return line, col0 + col_offset + 1

    def _line(self, line: int) -> str:
        return self.lines[line - 1] if 0 < line <= len(self.lines) else ""

    def error(self, node, message: str, hint: str | None = None) -> DirectiveError:
        """A DirectiveError at ``node`` (an ast node, or an already mapped ``(line, col)``)."""
        if isinstance(node, tuple):
            line, col = node
        else:
            line, col = self.position(node.lineno, node.col_offset)
        return DirectiveError(message, path=self.path, line=line, col=col,
                              source_line=self._line(line), hint=hint)

    def syntax_error(self, exc: SyntaxError, what: str, hint: str | None = None) -> DirectiveError:
        """A DirectiveError for a SyntaxError raised while parsing the snippet."""
        pos = self.position(exc.lineno or 1, max((exc.offset or 1) - 1, 0), chars=True)
        return self.error(pos, f"{what}: {exc.msg}", hint)


class Unavailable:
    """An environment entry that exists but has no static value.

    Looking it up raises its error: an argument that is a task result, a name used before it is
    assigned, a module global that is not a param. ``where`` is a ``(locator, node)`` pair when the
    error belongs somewhere else than the name (a kernel's call site rather than its clause).
    """

    __slots__ = ("message", "hint", "where")

    def __init__(self, message: str, hint: str | None = None, where=None):
        self.message, self.hint, self.where = message, hint, where

    def __repr__(self) -> str:
        return "<no static value>"


def _preorder(node: ast.AST):
    """``(node, depth)`` in source order (parents before children), so the first error is the
    leftmost; iterative, so that a deep tree is measured without recursing."""
    stack = [(node, 0)]
    while stack:
        sub, depth = stack.pop()
        yield sub, depth
        stack.extend((child, depth + 1) for child in reversed(list(ast.iter_child_nodes(sub))))


def deepest(node: ast.AST, limit: int = MAX_DEPTH):
    """The first node nested more than ``limit`` levels below ``node`` (with a position), or None."""
    last_positioned = node
    for sub, depth in _preorder(node):
        if hasattr(sub, "lineno"):
            last_positioned = sub
        if depth > limit:
            return last_positioned
    return None


def too_deep(loc: Locator, node: ast.AST, what: str = "expression") -> DirectiveError:
    return loc.error(node, f"{what} is nested more than {MAX_DEPTH} levels deep (limit: {MAX_DEPTH})",
                     "split it into smaller expressions (a param for a part, a sum in a kernel)")


def parse_expr(text: str, loc: Locator, what: str = "invalid expression", hint=None) -> ast.expr:
    """Parse ``text`` as one expression; errors at its file position (also for a text longer
    than :data:`MAX_EXPR_CHARS` or nested deeper than :data:`MAX_DEPTH`)."""
    if len(text) > MAX_EXPR_CHARS:
        raise loc.error(loc.position(1, 0), f"{what}: expression is {len(text)} characters long "
                        f"(limit: {MAX_EXPR_CHARS})", hint)
    try:
        node = ast.parse(text, mode="eval").body
    except SyntaxError as exc:
        raise loc.syntax_error(exc, what, hint) from None
    except (RecursionError, MemoryError, ValueError, OverflowError) as exc:
        raise loc.error(loc.position(1, 0), f"{what}: {exc or type(exc).__name__}", hint) from None
    deep = deepest(node)
    if deep is not None:
        raise too_deep(loc, deep)
    return node


class Evaluator:
    """Evaluates whitelisted expressions over an environment.

    Parameters
    ----------
    env : Mapping
        Name -> value. A missing name is an "unknown name" error; an :class:`Unavailable` value
        raises its own error.
    loc : Locator
        Where the expressions lie in the file.
    context : str
        Where the expression is, for messages ("a clause", "a param value", ...).
    names_hint : str
        Hint for an unknown name (what names are in scope).
    hint : str
        Hint for a construct that is not allowed.
    """

    functions = FUNCTIONS
    #: Most steps this evaluator takes (see the module docstring).
    max_work = MAX_WORK

    def __init__(self, env: Mapping, loc: Locator, *, context: str = "an expression",
                 names_hint: str | None = None, hint: str | None = None):
        self.env = env
        self.loc = loc
        self.context = context
        self.names_hint = names_hint
        self.work = 0
        self._sizes: dict[int, tuple] = {}       # id(tuple) -> (tuple, its size in items)
        self.hint = hint or (
            "expressions may use constants, params, arithmetic, comparisons, `and`/`or`, "
            f"`x if c else y`, tuples and their items (`TILE[0]`) and the functions {FUNCTION_LIST}")

    # -- entry points -------------------------------------------------------------------------

    def eval(self, node: ast.AST):
        method = getattr(self, "eval_" + type(node).__name__, None)
        if method is None:
            raise self.refuse(node)
        self.spend(node, 1)
        try:
            return method(node)
        except RecursionError:
            raise too_deep(self.loc, node) from None

    def spend(self, node, steps: int) -> None:
        """Count ``steps`` of work; an error at ``node`` once the budget is spent."""
        self.work += steps
        if self.work > self.max_work:
            raise self.loc.error(node, f"{self.context} needs more than {self.max_work} steps to "
                                 f"evaluate (limit: {self.max_work})", self.budget_hint())

    def budget_hint(self) -> str:
        return "simplify the expression: it builds or compares values that are too large"

    def check(self, node: ast.AST, names=None) -> set[str]:
        """Check ``node`` without evaluating it; return the names it uses.

        Unlike :meth:`eval`, this also visits branches that evaluation would skip (``a or b``,
        ``x if c else y``), so a directive is refused for what it says, not for what it happens to
        compute today. With ``names``, a name outside it is an "unknown name" error.
        """
        used: set[str] = set()
        last = node
        for sub, depth in _preorder(node):
            if not hasattr(sub, "lineno"):   # operators and contexts: checked with their node
                continue
            if depth > MAX_DEPTH:
                raise too_deep(self.loc, last)
            last = sub
            kind = type(sub)
            if kind not in ALLOWED_NODES:
                raise self.refuse(sub)
            if kind is ast.BinOp and type(sub.op) not in _BINOPS:
                raise self.loc.error(sub, f"{describe(sub.op)} is not allowed in {self.context}",
                                     self.hint)
            if kind is ast.Constant and not isinstance(sub.value, _CONST_TYPES):
                raise self.refuse(sub)
            if kind is ast.Call:
                self._check_call(sub)
            elif kind is ast.Name:
                if names is not None and sub.id not in names:
                    raise self.unknown(sub)
                used.add(sub.id)
        return used

    # -- errors --------------------------------------------------------------------------------

    def refuse(self, node: ast.AST) -> DirectiveError:
        if isinstance(node, ast.Constant):
            what = f"a constant of type {type(node.value).__name__}"
        else:
            what = describe(node)
        return self.loc.error(node, f"{what} is not allowed in {self.context}", self.hint)

    def unknown(self, node: ast.Name) -> DirectiveError:
        return self.loc.error(node, f"unknown name '{node.id}' in {self.context}", self.names_hint)

    def not_static(self, node: ast.AST, value) -> DirectiveError:
        """An operator or function was applied to something that is not a static value."""
        return self.loc.error(node, f"{type(value).__name__} value cannot be used in "
                                    f"{self.context}", self.hint)

    def failed(self, node: ast.AST, exc: Exception) -> DirectiveError:
        return self.loc.error(node, f"cannot evaluate {self.context}: {exc}")

    # -- nodes ---------------------------------------------------------------------------------

    def eval_Constant(self, node):
        if not isinstance(node.value, _CONST_TYPES):
            raise self.refuse(node)
        return node.value

    def eval_Name(self, node):
        try:
            value = self.env[node.id]
        except KeyError:
            raise self.unknown(node) from None
        if isinstance(value, Unavailable):
            raise self.unavailable(node, value)
        return value

    def unavailable(self, node, value: Unavailable) -> DirectiveError:
        if value.where is not None:
            loc, at = value.where
            return loc.error(at, value.message, value.hint)
        return self.loc.error(node, value.message, value.hint)

    def eval_Tuple(self, node):
        if not isinstance(node.ctx, ast.Load):
            raise self.refuse(node)
        items = []
        for elt in node.elts:
            if isinstance(elt, ast.Starred):
                raise self.refuse(elt)
            items.append(self.eval(elt))
        return self.limit(node, tuple(items))

    def eval_Subscript(self, node):
        """An item of a static tuple (``TILE[0]``, ``SHAPE[-1]``): a derived value or param that is
        a tuple is as usable in a clause as the numbers it holds. Slices are not."""
        if not isinstance(node.ctx, ast.Load):
            raise self.refuse(node)
        base = self.eval(node.value)
        if not isinstance(base, tuple):
            raise self.loc.error(node, f"'{ast.unparse(node.value)}' is {type(base).__name__}, "
                                       f"only tuples can be indexed in {self.context}", self.hint)
        index = self.eval(node.slice)
        if not isinstance(index, int) or isinstance(index, bool):
            raise self.loc.error(node.slice, f"a tuple index must be an integer in {self.context}, "
                                             f"not {type(index).__name__}", self.hint)
        if not -len(base) <= index < len(base):
            raise self.loc.error(node.slice, f"index {index} is out of range for "
                                             f"'{ast.unparse(node.value)}' (a tuple of {len(base)} "
                                             f"items) in {self.context}")
        return base[index]

    def eval_BinOp(self, node):
        return self.binop(node, self.eval(node.left), self.eval(node.right))

    def binop(self, node, left, right):
        fn = _BINOPS.get(type(node.op))
        if fn is None:
            raise self.loc.error(node, f"{describe(node.op)} is not allowed in {self.context}",
                                 self.hint)
        self.operand(node.left, left)
        self.operand(node.right, right)
        self._guard(node, type(node.op), left, right)
        if fn is operator.mul:              # a sequence repeated n < 0 times is empty, however large
            left, right = _repeat_count(left, right), _repeat_count(right, left)
        try:
            result = fn(left, right)
        except (TypeError, ValueError, ArithmeticError) as exc:
            raise self.failed(node, exc) from None
        return self.limit(node, result)

    def eval_UnaryOp(self, node):
        value = self.eval(node.operand)
        self.operand(node.operand, value)
        try:
            return self.limit(node, _UNARYOPS[type(node.op)](value))
        except (TypeError, ValueError, ArithmeticError) as exc:
            raise self.failed(node, exc) from None

    def eval_Compare(self, node):
        left = self.eval(node.left)
        self.operand(node.left, left)
        for op, right_node in zip(node.ops, node.comparators):
            right = self.eval(right_node)
            self.operand(right_node, right)
            try:
                ok = _CMPOPS[type(op)](left, right)
            except (TypeError, ValueError, ArithmeticError) as exc:
                raise self.failed(node, exc) from None
            if not ok:
                return False
            left = right
        return True

    def eval_BoolOp(self, node):
        is_and = isinstance(node.op, ast.And)
        value = None
        for sub in node.values:
            value = self.eval(sub)
            if bool(self.truth(sub, value)) != is_and:
                return value
        return value

    def eval_IfExp(self, node):
        test = self.eval(node.test)
        return self.eval(node.body if self.truth(node.test, test) else node.orelse)

    def truth(self, node, value) -> bool:
        """Truth of a condition; only static values have one at compile time."""
        self.operand(node, value)
        return bool(value)

    def eval_Call(self, node):
        self._check_call(node)
        fn = self.functions[node.func.id]
        args = [self.eval(a) for a in node.args]
        for arg_node, value in zip(node.args, args):
            if node.func.id == "len" and hasattr(value, "__len__"):
                continue
            self.operand(arg_node, value)
        try:
            result = fn(*args)
        except (TypeError, ValueError, ArithmeticError) as exc:
            raise self.failed(node, exc) from None
        return self.limit(node, result)

    # -- helpers -------------------------------------------------------------------------------

    def _check_call(self, node: ast.Call) -> None:
        if not isinstance(node.func, ast.Name) or node.func.id not in self.functions:
            name = ast.unparse(node.func)
            raise self.loc.error(node, f"call to '{name}' is not allowed in {self.context}",
                                 f"functions allowed in expressions: {FUNCTION_LIST}")
        for arg in node.args:
            if isinstance(arg, ast.Starred):
                raise self.refuse(arg)
        if node.keywords:
            raise self.loc.error(node.keywords[0], f"keyword arguments are not allowed in a "
                                 f"call to {node.func.id}() in {self.context}", self.hint)

    def operand(self, node, value) -> None:
        if not isinstance(value, STATIC_TYPES):
            raise self.not_static(node, value)

    def _guard(self, node, op, left, right) -> None:
        """Refuse operations whose result would be huge, before computing them."""
        ints = isinstance(left, int) and isinstance(right, int)
        if op is ast.Pow and ints and right > 0 and abs(left) > 1:
            # |left| >= 2, so a right beyond the limit is too large, and comparing first keeps a
            # 1,000-digit right from overflowing the float product.
            if right > MAX_INT_BITS + 1 or right * math.log2(abs(left)) > MAX_INT_BITS + 1:
                raise self.loc.error(node, f"{left} ** {right} is too large "
                                           f"(limit: {MAX_INT_BITS}-bit integers)")
        elif op is ast.Mod and isinstance(left, str):    # '%0999999999d' % 1
            raise self.loc.error(node, f"string formatting with % is not allowed in "
                                       f"{self.context}", self.hint)
        elif op is ast.LShift and ints and right > MAX_INT_BITS:
            raise self.loc.error(node, f"shift by {right} is too large "
                                       f"(limit: {MAX_INT_BITS}-bit integers)")
        elif op is ast.Mult:
            for seq, n in ((left, right), (right, left)):
                if isinstance(seq, (str, tuple)) and isinstance(n, int) and \
                        self.size(seq) * n > MAX_SEQ_LEN:
                    raise self.loc.error(node, f"repetition is too long (limit: {MAX_SEQ_LEN} "
                                               "items in all)")

    def size(self, value) -> int:
        """Items of a value in all: a str its length, a tuple the sizes of its items (+1 each)."""
        if isinstance(value, str):
            return len(value)
        if not isinstance(value, tuple):
            return 1
        known = self._sizes.get(id(value))
        if known is not None and known[0] is value:
            return known[1]
        total = len(value)
        for item in value:
            if isinstance(item, (str, tuple)):
                total += self.size(item)
            if total > MAX_SEQ_LEN:
                break                       # too large already; no need to count further
        self._sizes[id(value)] = (value, total)   # the value is kept, so its id stays its own
        return total

    def limit(self, node, value):
        if isinstance(value, complex):   # (-2) ** 0.5
            raise self.loc.error(node, f"{self.context} gives a complex number")
        if isinstance(value, int) and value.bit_length() > MAX_INT_BITS:
            raise self.loc.error(node, f"integer too large in {self.context} "
                                       f"(limit: {MAX_INT_BITS} bits)")
        if isinstance(value, (str, tuple)):
            size = self.size(value)
            if size > MAX_SEQ_LEN:
                raise self.loc.error(node, f"value too long in {self.context} "
                                           f"(limit: {MAX_SEQ_LEN} items in all)")
            self.spend(node, size)
        return value


def safe_eval(text_or_node, env: Mapping, loc: Locator, **kwargs):
    """Check and evaluate one expression (text is parsed first)."""
    node = parse_expr(text_or_node, loc) if isinstance(text_or_node, str) else text_or_node
    ev = Evaluator(env, loc, **kwargs)
    ev.check(node)
    return ev.eval(node)
