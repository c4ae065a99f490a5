"""What the directives of a file declare: params, kernels and graph functions.

:func:`read_program` turns the directives found by :mod:`.scan` into a :class:`Program` and checks
everything that can be checked without running the graph body:

* a directive is on the right kind of statement (``param`` above ``NAME = EXPR``; ``kernel``,
  ``graph`` and ``pipeline`` above a ``def``), and no name is declared twice;
* every param value and clause is an expression of the safe language that uses only names it may
  (earlier params for a param; params and the kernel's own arguments for a clause);
* clauses that use no names at all (``share=2``) already have valid values.

Param values depend on ``-D`` overrides, so they are computed on demand by
:meth:`Program.param_values`, in file order: a param that depends on an overridden one is
recomputed from the override.

Derived values
--------------
Every other module-level statement that binds a name is a :class:`Derived` step, in file order.
``ROWS = H // TILES`` (or ``TILE: tuple = (N, N)``, ``ROWS += 1``) whose value the safe language
can compute from params and the derived values above it is usable in clauses and graph bodies
like a param, but is not overridable: :meth:`Program.derived_values` recomputes it, in file order,
from the params after their overrides, exactly as Python does when it imports the file (and as
the runtime does, which imports the file with the plan's params). A name's value is that of its
*last* module-level binding in the file, which is what the kernels and the graph function see
when they run after the import. A binding the front end does not evaluate (an import, a ``def``,
tuple unpacking, anything inside an ``if``/``for``/``try`` block, an expression outside the safe
language such as ``load()``) leaves the name without a compile-time value: it is an error only
where a directive or a graph body uses it, and that error says why and where it was bound. A
param must keep the one value its directive or ``-D`` gives it, so a module-level assignment to a
param later in the file is an error.

A :class:`Program` keeps ``ast`` nodes and :class:`~.safe_eval.Locator` objects, so later stages
(the graph builder, the runtime looking up kernels by name) can evaluate clauses and report errors
at their positions.
"""

from __future__ import annotations

import ast
import copy
import hashlib
import math
from dataclasses import dataclass, field

from streammap.directives.safe_eval import FUNCTION_LIST, MAX_EXPR_CHARS, MAX_INT_BITS, Evaluator, Locator, Unavailable
from streammap.directives.scan import Clause, Directive, Source, basename, scan
from streammap.errors import DirectiveError, shown
from streammap.ir import MAX_RETRIES, MAX_TIMEOUT, MIN_SHARE
from streammap.units import MAX_QUANTITY

PARAM_TYPES = (int, float, str, bool, type(None))
SIZE_CLAUSES = ("flops", "bytes", "mem", "out")


@dataclass
class Param:
    """``# @stream param`` above ``NAME = EXPR``."""
    name: str
    expr: ast.expr
    text: str               # the expression as written
    line: int               # position of NAME
    col: int


@dataclass
class Derived:
    """A module-level binding of ``name`` that no ``# @stream param`` is attached to.

    ``expr`` is the value to compute (``None`` for a binding the front end does not evaluate);
    ``problem`` says why the name has no compile-time value after this binding (``None``: it
    has one, computed by :meth:`Program.derived_values`); ``params`` are the params the value
    follows.
    """
    name: str
    expr: ast.expr | None
    line: int               # position of NAME (of the statement for other bindings)
    col: int
    text: str               # the statement as written (its first line), for messages
    problem: str | None = None
    params: frozenset = frozenset()


@dataclass
class Signature:
    """The parameters of a ``def``, enough to bind a call the way Python does."""
    positional: tuple[str, ...]         # positional-only first, then positional-or-keyword
    posonly: int                        # how many of ``positional`` are positional-only
    vararg: str | None
    kwonly: tuple[str, ...]
    kwarg: str | None
    defaults: dict[str, ast.expr]       # parameter -> its default expression

    @classmethod
    def of(cls, fn: ast.FunctionDef) -> "Signature":
        a = fn.args
        positional = tuple(x.arg for x in (*a.posonlyargs, *a.args))
        defaults = dict(zip(positional[len(positional) - len(a.defaults):], a.defaults))
        for arg, default in zip(a.kwonlyargs, a.kw_defaults):
            if default is not None:
                defaults[arg.arg] = default
        return cls(positional, len(a.posonlyargs), a.vararg.arg if a.vararg else None,
                   tuple(x.arg for x in a.kwonlyargs), a.kwarg.arg if a.kwarg else None, defaults)

    def names(self) -> tuple[str, ...]:
        extra = tuple(n for n in (self.vararg, self.kwarg) if n)
        return self.positional + self.kwonly + extra

    def bind(self, fname: str, args: list, kwargs: list[tuple[str, object, object]]):
        """Bind values like a Python call; ``kwargs`` is ``[(name, value, node)]``.

        Returns ``{parameter: value}`` for the parameters the call gives (``*args`` as a list,
        ``**kwargs`` as a dict). Raises :class:`BindError` with the node to blame.
        """
        bound: dict[str, object] = {}
        npos = len(self.positional)
        if len(args) > npos and self.vararg is None:
            raise BindError(f"kernel '{fname}' takes {_count(npos, 'positional argument')} "
                            f"but {len(args)} were given", None)
        for name, value in zip(self.positional, args):
            bound[name] = value
        if self.vararg is not None:
            bound[self.vararg] = list(args[npos:])
        by_keyword = set(self.positional[self.posonly:]) | set(self.kwonly)
        extra: dict[str, object] = {}
        for name, value, node in kwargs:
            if name in by_keyword:
                if name in bound:
                    raise BindError(f"kernel '{fname}' got multiple values for argument "
                                    f"'{name}'", node)
                bound[name] = value
            elif self.kwarg is not None:
                if name in extra:
                    raise BindError(f"kernel '{fname}' got multiple values for keyword "
                                    f"argument '{name}'", node)
                extra[name] = value
            elif name in self.positional:
                raise BindError(f"argument '{name}' of kernel '{fname}' is positional-only",
                                node)
            else:
                raise BindError(f"kernel '{fname}' got an unexpected keyword argument "
                                f"'{name}'", node)
        if self.kwarg is not None:
            bound[self.kwarg] = extra
        missing = [n for n in (*self.positional, *self.kwonly)
                   if n not in bound and n not in self.defaults]
        if missing:
            names = ", ".join(f"'{n}'" for n in missing)
            raise BindError(f"kernel '{fname}' is missing "
                            f"{'argument' if len(missing) == 1 else 'arguments'} {names}", None)
        return bound


class BindError(Exception):
    def __init__(self, message: str, node):
        super().__init__(message)
        self.message, self.node = message, node


@dataclass
class Kernel:
    """``# @stream kernel(...)`` above a ``def``."""
    name: str
    line: int               # the ``def`` line
    col: int
    directive_line: int
    clauses: dict[str, Clause]
    uses: dict[str, frozenset]      # clause -> the names its expression uses
    signature: Signature
    node: ast.FunctionDef
    site: str                       # ``file.py:LINE`` of the def
    code: str                       # :func:`code_fingerprint` of the def

    dynamic: tuple[str, ...] = ()   # clauses that use the kernel's arguments: one value per call


@dataclass
class GraphFunc:
    """``# @stream graph`` (or ``pipeline(items=...)``) above a ``def``."""
    name: str
    kind: str               # "graph" or "pipeline"
    line: int
    col: int
    directive_line: int
    node: ast.FunctionDef
    items: Clause | None = None     # pipelines: how many items


@dataclass
class Program:
    """The parsed directives of one file."""
    path: str
    source: Source
    params: dict[str, Param] = field(default_factory=dict)        # in file order
    kernels: dict[str, Kernel] = field(default_factory=dict)
    graphs: dict[str, GraphFunc] = field(default_factory=dict)
    module_names: dict[str, int] = field(default_factory=dict)    # module globals -> line
    declared: dict[str, int] = field(default_factory=dict)        # every param name -> line
    derived: list[Derived] = field(default_factory=list)          # in file order
    bindings: dict[str, Param | Derived] = field(default_factory=dict)   # name -> last binding

    @property
    def lines(self) -> list[str]:
        return self.source.lines

    def locator(self) -> Locator:
        return self.source.locator()

    # -- params --------------------------------------------------------------------------------

    def param_values(self, overrides: dict | None = None) -> dict:
        """Every param's value, in file order, after ``overrides`` (values or expression text)."""
        overrides = dict(overrides or {})
        unknown = [n for n in overrides if n not in self.params]
        if unknown:
            raise self._not_overridable(unknown[0])
        loc = self.locator()
        values: dict = {}
        for name, param in self.params.items():
            if name in overrides:
                value = self._override(name, overrides[name], values)
                where = None
                if isinstance(value, float) and not math.isfinite(value):
                    # NaN compares false with everything: it would pass every check of the
                    # program's and reach the plan, the estimates and a job's stored params.
                    raise DirectiveError(f"invalid value {shown(str(overrides[name]))} for param '{name}': it is "
                                         f"{value}, not a finite number", path=self.path,
                                         hint="a param's value is a finite number, a string, a bool or None")
            else:
                value = Evaluator(values, loc, context=f"the value of param '{name}'",
                                  names_hint=self._param_names_hint(name)).eval(param.expr)
                where = param
            if not isinstance(value, PARAM_TYPES):
                msg = (f"param '{name}' must be a number, a string, a bool or None "
                       f"(got {type(value).__name__})")
                if where is None:
                    raise DirectiveError(msg, path=self.path)
                raise loc.error(param.expr, msg)
            values[name] = value
        return values

    def _not_overridable(self, name: str) -> DirectiveError:
        """The error for ``-D name=...`` when ``name`` is not a param."""
        known = ", ".join(self.params) or "(none)"
        binding = self.bindings.get(name)
        if not isinstance(binding, Derived) or binding.expr is None:
            return DirectiveError(f"unknown param '{name}' in overrides", path=self.path,
                                  hint=f"params of this program: {known}")
        where = f"{basename(self.path)}:{binding.line}"
        if binding.params:
            follows = ", ".join(p for p in self.params if p in binding.params)
            message = (f"'{name}' cannot be overridden: it is derived from params ({where}: "
                       f"{binding.text}) and is recomputed from them")
            hint = f"set the params it is computed from instead: {follows}"
        else:
            message = (f"'{name}' cannot be overridden: it is a module-level value ({where}: "
                       f"{binding.text}), not a param")
            hint = "mark its assignment with `# @stream param` to make it overridable"
        return DirectiveError(message, path=self.path, line=binding.line, col=binding.col,
                              hint=f"{hint} (params of this program: {known})")

    def derived_values(self, params: dict) -> dict:
        """``params`` and every module-level value derived from them, in file order.

        A name without a compile-time value (see the module docstring) maps to an
        :class:`~.safe_eval.Unavailable` that raises, where it is used, why it has none.
        """
        values = dict(params)
        loc = self.locator()
        for step in self.derived:
            if step.problem is not None:
                values[step.name] = NoValue(step.name, step.problem)
                continue
            missing = next((n.id for n in _names_used(step.expr)
                            if isinstance(values.get(n.id), NoValue)), None)
            if missing is not None:     # a value above it failed for these params: say which
                values[step.name] = NoValue(step.name, f"its value ({basename(self.path)}:"
                                            f"{step.line}) uses '{missing}', which has none: "
                                            f"{values[missing].problem}")
                continue
            try:
                values[step.name] = Evaluator(values, loc, context=f"the value of '{step.name}'",
                                              hint=DERIVED_HINT).eval(step.expr)
            except DirectiveError as exc:
                # Only limits or a failing operation get here (the names were checked when the
                # file was read); it is an error where the value is used, not where it is bound.
                problem = f"its value ({basename(self.path)}:{step.line}) cannot be computed: " \
                          f"{exc.message}"
                values[step.name] = NoValue(step.name, problem)
        return values

    def _override(self, name: str, value, env: dict):
        if hasattr(value, "item") and not isinstance(value, PARAM_TYPES):
            value = value.item()            # numpy scalars
        if not isinstance(value, str):
            if isinstance(value, int) and value.bit_length() > MAX_INT_BITS:
                # as the text of the same number would be (the evaluator's limit)
                raise DirectiveError(f"invalid value for param '{name}': integer too large in the override of "
                                     f"param '{name}' (limit: {MAX_INT_BITS} bits)", path=self.path,
                                     hint="a param's value is a number of at most 4096 bits, a string, a bool or None")
            return value
        loc = Locator(self.path, [value], None)
        try:
            ev = Evaluator(env, loc, context=f"the override of param '{name}'",
                           names_hint=self._param_names_hint(name))
            if len(value) > MAX_EXPR_CHARS:
                raise DirectiveError(f"longer than {MAX_EXPR_CHARS} characters")
            node = ast.parse(value.strip(), mode="eval").body
            ev.check(node)
            return ev.eval(node)
        except SyntaxError as exc:
            msg = exc.msg
        except DirectiveError as exc:
            msg = exc.message
        except (ValueError, RecursionError, MemoryError, OverflowError) as exc:
            msg = str(exc) or type(exc).__name__
        if self._declared_as_string(name, env) and len(value) <= MAX_EXPR_CHARS:
            # `-D MODE=slow` for a string param: the shell already ate any quotes, so a value that
            # is not an expression is the string itself (within the limit of an expression).
            return value.strip()
        raise DirectiveError(f"invalid value {shown(value)} for param '{name}': {msg}",
                             path=self.path, hint="an override is a constant expression over "
                             "params defined above it, e.g. 4096, 1<<12, 2*N or '\"gpu\"'")

    def _declared_as_string(self, name: str, env: dict) -> bool:
        """Whether the file gives param ``name`` a string value."""
        try:
            return isinstance(Evaluator(env, self.locator(), context="").eval(self.params[name].expr), str)
        except DirectiveError:
            return False

    def _param_names_hint(self, name: str) -> str:
        earlier = []
        for other in self.params:
            if other == name:
                break
            earlier.append(other)
        return ("a param value may use constants, the functions " + FUNCTION_LIST +
                " and params defined above it" + (f" ({', '.join(earlier)})" if earlier else ""))

    # -- entry points --------------------------------------------------------------------------

    def entry_point(self, entry: str | None = None) -> GraphFunc:
        """The graph function ``entry`` (default: the only one)."""
        names = ", ".join(self.graphs)
        if not self.graphs:
            raise DirectiveError("no `# @stream graph` function in this file", path=self.path,
                                 hint="put `# @stream graph` above the function whose body is "
                                      "the dataflow (or `# @stream pipeline(items=...)`)")
        if entry is None:
            if len(self.graphs) > 1:
                raise DirectiveError(f"several graph functions ({names}): choose one as the "
                                     "entry point", path=self.path,
                                     hint=f"pass entry=NAME with NAME one of {names}")
            return next(iter(self.graphs.values()))
        if entry not in self.graphs:
            raise DirectiveError(f"no graph function '{entry}' in this file", path=self.path,
                                 hint=f"graph functions: {names}")
        return self.graphs[entry]


# -- reading -------------------------------------------------------------------------------------

def read_program(path) -> Program:
    """Scan ``path`` and check its directives; see the module docstring."""
    src = scan(path)
    prog = Program(str(path), src, module_names=_module_names(src.tree))
    # Every param the file declares, so that a use before the declaration says so.
    for d in src.directives:
        target = getattr(d.target, "targets", [getattr(d.target, "target", None)])[0]
        if d.name == "param" and isinstance(target, ast.Name):
            prog.declared.setdefault(target.id, target.lineno)
    seen_targets: dict[int, Directive] = {}
    for d in src.directives:
        first = seen_targets.get(d.target.lineno)
        if first is not None:
            raise src.error(d.line, d.col, f"a second directive ('{d.name}') on the statement "
                            f"that the '{first.name}' directive on line {first.line} applies to",
                            "one directive per statement")
        seen_targets[d.target.lineno] = d
        if d.name == "param":
            _read_param(prog, d)
        elif d.name == "kernel":
            _read_kernel(prog, d)
        else:
            _read_graph(prog, d)
    _read_derived(prog, {id(d.target): d for d in src.directives if d.name == "param"})
    static = _static_names(prog)                # once: a file may define thousands of kernels
    derived = [d for d in dict.fromkeys(d.name for d in prog.derived) if d in static]
    shown = ", ".join(derived[:MAX_HINT_NAMES]) + (f" and {len(derived) - MAX_HINT_NAMES} more"
                                                   if len(derived) > MAX_HINT_NAMES else "")
    derived_text = f"values derived from them ({shown}), " if derived else ""
    for k in prog.kernels.values():
        _check_clauses(prog, k, static, derived_text)
    for g in prog.graphs.values():
        if g.items is not None:
            ev = Evaluator({}, g.items.loc, context="the items clause",
                           names_hint="items may use constants, params and values derived "
                                      "from them")
            _check_names(prog, ev, g.items.expr, _static_names(prog), "the items clause",
                         derived=True)
    return prog


def _read_param(prog: Program, d: Directive) -> None:
    src, stmt = prog.source, d.target
    target = value = None
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
        target, value = stmt.targets[0], stmt.value
    elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
        target, value = stmt.target, stmt.value
    if not isinstance(target, ast.Name):
        raise src.error(d.line, d.col, f"param directive must be directly above an assignment "
                        f"`NAME = EXPR`, not {_what(stmt)}",
                        "write `# @stream param` on the line above `N = 1024`")
    name = target.id
    if name in prog.params:
        first = prog.params[name]
        raise src.error(target.lineno, target.col_offset + 1,
                        f"duplicate param '{name}' (first declared on line {first.line})",
                        "declare each param once")
    loc = prog.locator()
    ev = Evaluator({}, loc, context=f"the value of param '{name}'",
                   names_hint=prog._param_names_hint(name),
                   hint="a param value must be a constant expression: numbers, strings, "
                        f"arithmetic, params defined above it and the functions {FUNCTION_LIST}")
    _check_names(prog, ev, value, set(prog.params), f"the value of param '{name}'")
    text = _segment(src.lines, value) or ast.unparse(value)
    prog.params[name] = Param(name, value, text, target.lineno, target.col_offset + 1)


# -- derived values ------------------------------------------------------------------------------

DERIVED_HINT = ("clauses and graph bodies may use params and module-level values computed from "
                "them and from values assigned above them with constants, arithmetic, "
                f"comparisons, `x if c else y`, tuples and the functions {FUNCTION_LIST}; "
                "compute anything else inside a kernel")


class NoValue(Unavailable):
    """The value of a module global that has no compile-time value; ``problem`` says why."""

    __slots__ = ("problem",)

    def __init__(self, name: str, problem: str):
        super().__init__(f"'{name}' has no compile-time value: {problem}", DERIVED_HINT)
        self.problem = problem


def _read_derived(prog: Program, param_stmts: dict[int, Directive]) -> None:
    """Every module-level binding that is not a param, in file order (see the module docstring),
    each checked against the bindings above it; ``prog.bindings`` ends with the last of each."""
    for stmt in prog.source.tree.body:
        if id(stmt) in param_stmts:
            name = _assigned_name(stmt)
            prog.bindings[name] = prog.params[name]
            continue
        for step in _bindings_of(prog, stmt):
            param = prog.params.get(step.name)
            if param is not None:
                if isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)) \
                        and stmt.lineno > param.line:
                    raise prog.source.error(step.line, step.col,
                                            f"param '{step.name}' is assigned again after its "
                                            f"declaration (line {param.line})",
                                            "a param has the one value its `# @stream param` "
                                            "line or -D gives it: give a value computed from it "
                                            "a name of its own")
                continue            # rebound in a block (`if __name__ == "__main__":`): Python's
            if step.expr is not None:
                _check_derived(prog, step)
            prog.derived.append(step)
            prog.bindings[step.name] = step


def _assigned_name(stmt: ast.stmt) -> str:
    return (stmt.targets[0] if isinstance(stmt, ast.Assign) else stmt.target).id


def _bindings_of(prog: Program, stmt: ast.stmt) -> list[Derived]:
    """The names a module-level statement binds, as :class:`Derived` steps."""
    if isinstance(stmt, (ast.Pass, ast.Expr)):         # bind nothing; a file may hold 100,000 of them
        return []
    where = f"{basename(prog.path)}:{stmt.lineno}"
    text = prog.lines[stmt.lineno - 1].strip()
    text = text if len(text) <= 80 else text[:77] + "..."

    def value(target: ast.Name, expr: ast.expr) -> Derived:
        return Derived(target.id, expr, target.lineno, target.col_offset + 1, text)

    def opaque(names, problem: str) -> list[Derived]:
        return [Derived(n, None, stmt.lineno, stmt.col_offset + 1, text, problem.format(name=n))
                for n in names]

    if isinstance(stmt, ast.Assign):
        if all(isinstance(t, ast.Name) for t in stmt.targets):
            return [value(t, stmt.value) for t in stmt.targets]
        names = [n.id for t in stmt.targets for n in ast.walk(t)
                 if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)]
        return opaque(dict.fromkeys(names), f"it is assigned by unpacking ({where}); to use it "
                      "in directives, assign it on its own: `{name} = ...`")
    if isinstance(stmt, ast.AnnAssign):
        if stmt.value is not None and isinstance(stmt.target, ast.Name):
            return [value(stmt.target, stmt.value)]
        return []
    if isinstance(stmt, ast.AugAssign):
        if not isinstance(stmt.target, ast.Name):
            return []
        name = stmt.target
        current = ast.Name(name.id, ast.Load(), lineno=name.lineno, col_offset=name.col_offset,
                           end_lineno=name.end_lineno, end_col_offset=name.end_col_offset)
        expr = ast.BinOp(current, stmt.op, stmt.value, lineno=stmt.lineno,
                         col_offset=stmt.col_offset, end_lineno=stmt.end_lineno,
                         end_col_offset=stmt.end_col_offset)
        return [value(name, expr)]
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return opaque([stmt.name], f"it is a function ({where})")
    if isinstance(stmt, ast.ClassDef):
        return opaque([stmt.name], f"it is a class ({where})")
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        return opaque(_module_names(ast.Module([stmt], [])), f"it is bound by an import ({where})")
    keyword = _keyword_of(stmt)
    fix = " (write it as one expression: `{name} = A if CONDITION else B`)" \
        if isinstance(stmt, ast.If) else ""
    return opaque(_module_names(ast.Module([stmt], [])),
                  f"it is assigned inside a module-level '{keyword}' statement ({where}), which "
                  f"the front end does not run{fix}")


def _keyword_of(stmt: ast.stmt) -> str:
    name = type(stmt).__name__
    return {"AsyncFor": "async for", "AsyncWith": "async with", "TryStar": "try"}.get(name,
                                                                                    name.lower())


def _check_derived(prog: Program, step: Derived) -> None:
    """Whether ``step``'s value is in the safe language and uses only params and values with a
    compile-time value bound above it; sets ``step.problem`` (why not) or ``step.params``."""
    where = f"{basename(prog.path)}:{step.line}"
    ev = Evaluator({}, prog.locator(), context=f"the value of '{step.name}'", hint=DERIVED_HINT)
    try:
        ev.check(step.expr)
    except DirectiveError as exc:
        step.problem = f"its value ({where}) is not a compile-time expression: {exc.message}"
        return
    params: set[str] = set()
    for node in _names_used(step.expr):
        binding = prog.bindings.get(node.id)
        if binding is None:
            if node.id in prog.declared:
                step.problem = (f"its value ({where}) uses param '{node.id}', which is declared "
                                f"below it (line {prog.declared[node.id]})")
            else:
                step.problem = (f"its value ({where}) uses '{node.id}', which is not a param or "
                                "a value assigned above it")
            return
        if isinstance(binding, Param):
            params.add(node.id)
        elif binding.problem is not None:
            step.problem = f"its value ({where}) uses '{node.id}', which has none: " \
                           f"{binding.problem}"
            return
        else:
            params |= binding.params
    step.params = frozenset(params)


def _names_used(expr: ast.expr) -> list[ast.Name]:
    """The names ``expr`` reads (not the functions it calls), in source order."""
    called = {id(n.func) for n in ast.walk(expr) if isinstance(n, ast.Call)}
    return sorted((n for n in ast.walk(expr) if isinstance(n, ast.Name) and id(n) not in called),
                  key=lambda n: (n.lineno, n.col_offset))


def _static_names(prog: Program) -> set[str]:
    """Names with a compile-time value: the params and the derived values that have one."""
    return {name for name, b in prog.bindings.items()
            if isinstance(b, Param) or b.problem is None}


def _read_kernel(prog: Program, d: Directive) -> None:
    fn = _def_target(prog, d)
    _no_duplicate(prog, fn)
    clauses = {c.name: c for c in d.clauses}
    prog.kernels[fn.name] = Kernel(fn.name, fn.lineno, fn.col_offset + 1, d.line, clauses, {},
                                   Signature.of(fn), fn,
                                   f"{basename(prog.path)}:{fn.lineno}", code_fingerprint(fn))


def code_fingerprint(fn: ast.FunctionDef) -> str:
    """A short hash of what a kernel's ``def`` does, which the performance history keys its
    measurements by (a kernel's old times say nothing of its new code).

    Taken over the function's syntax tree written back as source (``ast.unparse``), without its
    docstring: moving the function, reformatting it, or editing its comments, docstring or
    directive clauses keeps the fingerprint; a change to its body, arguments, defaults,
    decorators or annotations changes it. Helpers the kernel calls are not part of it, and a
    Python version that writes some construct back differently changes it too (the measurements
    are then taken again, as after an edit).
    """
    bare = copy.copy(fn)                    # shallow: the program's own tree is left as it is
    body = fn.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        bare.body = body[1:] or [ast.Pass()]
    text = ast.unparse(bare)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _read_graph(prog: Program, d: Directive) -> None:
    fn = _def_target(prog, d)
    _no_duplicate(prog, fn)
    items = None
    if d.name == "pipeline":
        items = next((c for c in d.clauses if c.name == "items"), None)
        if items is None:
            raise prog.source.error(d.line, d.col, "pipeline directive needs an items clause",
                                    "write `# @stream pipeline(items=N)`")
        if not (fn.args.args or fn.args.posonlyargs):
            raise prog.source.error(fn.lineno, fn.col_offset + 1,
                                    f"pipeline function '{fn.name}' must take the item index "
                                    "as its first argument", f"write `def {fn.name}(i):`")
    prog.graphs[fn.name] = GraphFunc(fn.name, d.name, fn.lineno, fn.col_offset + 1, d.line, fn,
                                     items)


def _def_target(prog: Program, d: Directive) -> ast.FunctionDef:
    stmt = d.target
    if isinstance(stmt, ast.FunctionDef):
        return stmt
    what = "an async def" if isinstance(stmt, ast.AsyncFunctionDef) else _what(stmt)
    raise prog.source.error(d.line, d.col, f"{d.name} directive must be directly above a "
                            f"module-level def, not {what}",
                            f"put `# @stream {d.name}` on the line above `def NAME(...):` "
                            "(or above its decorators)")


def _no_duplicate(prog: Program, fn: ast.FunctionDef) -> None:
    for kind, table in (("kernel", prog.kernels), ("graph function", prog.graphs)):
        if fn.name in table:
            first = table[fn.name]
            raise prog.source.error(fn.lineno, fn.col_offset + 1,
                                    f"duplicate {kind} '{fn.name}' (first defined on line "
                                    f"{first.line})", "give each kernel and graph a unique name")
    if fn.name in prog.params:
        raise prog.source.error(fn.lineno, fn.col_offset + 1,
                                f"'{fn.name}' is both a param and a function name")


#: Derived values a hint names (a file may derive thousands).
MAX_HINT_NAMES = 20


class _AnyOf:
    """Membership in any of a few sets, without copying them (a union per kernel of a file of
    thousands of kernels and derived values made reading it quadratic)."""

    __slots__ = ("sets",)

    def __init__(self, *sets):
        self.sets = sets

    def __contains__(self, name) -> bool:
        return any(name in s for s in self.sets)


def _check_clauses(prog: Program, k: Kernel, static: set[str], derived_text: str) -> None:
    """Check kernel ``k``'s clauses: names they may use are ``static`` (params and values derived
    from them, :func:`_static_names`; ``derived_text`` names them for the hint) and its arguments."""
    args = k.signature.names()
    allowed = _AnyOf(static, set(args))
    params = ", ".join(prog.params) or "none"
    hint = (f"clauses may use params ({params}), {derived_text}the arguments of {k.name} "
            f"({', '.join(args) or 'none'}) and the functions {FUNCTION_LIST}")
    for name, clause in k.clauses.items():
        what = f"clause '{name}' of kernel '{k.name}'"
        ev = Evaluator({}, clause.loc, context=what, names_hint=hint)
        k.uses[name] = frozenset(_check_names(prog, ev, clause.expr, allowed, what, derived=True))
        if k.uses[name] & set(args):
            k.dynamic += (name,)
        if not k.uses[name]:        # a constant: check its value now, once
            value = ev.eval(clause.expr)
            problem = clause_problem(name, value)
            if problem:
                raise clause.loc.error(clause.expr, f"{what}: {problem}", CLAUSE_HINT)


def _check_names(prog: Program, ev: Evaluator, expr: ast.expr, allowed, what: str,
                 derived: bool = False) -> set:
    """``ev.check`` with messages that say why a name is not available (``derived``: values
    derived from params are allowed, so a module global is refused for having no value)."""
    used = ev.check(expr)
    for node in _names_used(expr):
        if node.id in allowed:
            continue
        binding = prog.bindings.get(node.id)
        if derived and isinstance(binding, Derived):
            raise ev.loc.error(node, f"'{node.id}' in {what} has no compile-time value: "
                               f"{binding.problem}", DERIVED_HINT)
        if node.id in prog.declared:
            raise ev.loc.error(node, f"param '{node.id}' is used in {what} before it is "
                               f"declared (line {prog.declared[node.id]})",
                               "params are evaluated in file order: declare it above")
        if node.id in prog.module_names:
            raise ev.loc.error(node, f"'{node.id}' in {what} is not a param",
                               f"mark its assignment with `# @stream param` to use it in "
                               f"directives (line {prog.module_names[node.id]})")
        raise ev.unknown(node)
    return used


# -- clause values -------------------------------------------------------------------------------

CLAUSE_HINT = (f"flops, bytes, mem and out are numbers from 0 to {MAX_QUANTITY:g}; device is a string (\"gpu\", "
                "\"cpu\", \"any\", or a model/vendor); split is an int axis; share is a number in "
                f"[{MIN_SHARE:g}, 1]; stateful is a bool; retries is an int in 0..{MAX_RETRIES}; timeout is a number of seconds > 0 "
                f"and at most {MAX_TIMEOUT:.0f} (a year), or None")


def clause_problem(name: str, value) -> str | None:
    """Why ``value`` is not valid for clause ``name`` (None when it is)."""
    def number(v):
        return isinstance(v, (int, float)) and not isinstance(v, bool)
    if name in SIZE_CLAUSES:
        # Compared as they are (an int of 400 digits does not fit a float); NaN compares false.
        if value is None or (number(value) and 0 <= value <= MAX_QUANTITY):
            return None
        if number(value) and not value < 0:        # inf, nan, or past the bound
            return f"{name} must be finite and at most {MAX_QUANTITY:g}, got {shown(value)}"
        return f"{name} must be a non-negative number, got {shown(value)}"
    if name == "device":
        return None if isinstance(value, str) and value.strip() else \
            f"device must be a non-empty string, got {shown(value)}"
    if name == "split":
        return None if value is None or (isinstance(value, int) and not isinstance(value, bool)) \
            else f"split must be an int axis, got {shown(value)}"
    if name == "share":
        return None if number(value) and MIN_SHARE <= value <= 1 else \
            f"share must be a number with {MIN_SHARE:g} <= share <= 1, got {shown(value)}"
    if name == "stateful":
        return None if isinstance(value, bool) else f"stateful must be True or False, got {shown(value)}"
    if name == "retries":
        return None if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_RETRIES \
            else f"retries must be an int in 0..{MAX_RETRIES}, got {shown(value)}"
    if name == "timeout":
        return None if value is None or (number(value) and 0 < value <= MAX_TIMEOUT) \
            else f"timeout must be a number of seconds > 0 and at most {MAX_TIMEOUT:.0f}, got {shown(value)}"
    if name == "items":
        return None if isinstance(value, int) and not isinstance(value, bool) and value >= 0 \
            else f"items must be an int >= 0, got {shown(value)}"
    return None


def clause_attr(name: str, value):
    """The IR attribute value of a valid clause value."""
    if name in SIZE_CLAUSES or name in ("share", "timeout"):
        return None if value is None else float(value)
    return value



# -- helpers -------------------------------------------------------------------------------------

def _what(stmt: ast.stmt) -> str:
    kind = type(stmt).__name__
    return {
        "ClassDef": "a class", "FunctionDef": "a def", "AsyncFunctionDef": "an async def",
        "Assign": "an assignment", "AnnAssign": "an annotated assignment",
        "AugAssign": "an augmented assignment", "Import": "an import", "ImportFrom": "an import",
        "Expr": "an expression", "If": "an if statement", "For": "a for loop",
        "While": "a while loop", "With": "a with statement", "Try": "a try statement",
    }.get(kind, f"a {kind.lower()} statement")


def _module_names(tree: ast.Module) -> dict[str, int]:
    """Names bound at module level (not inside functions or classes) -> first line."""
    names: dict[str, int] = {}

    def bind(target, line):
        for node in ast.walk(target):
            if isinstance(node, ast.Name):
                names.setdefault(node.id, line)

    def visit(stmts):
        for stmt in stmts:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.setdefault(stmt.name, stmt.lineno)
            elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
                for alias in stmt.names:
                    names.setdefault((alias.asname or alias.name).split(".")[0], stmt.lineno)
            elif isinstance(stmt, ast.Assign):
                for t in stmt.targets:
                    bind(t, stmt.lineno)
            elif isinstance(stmt, (ast.AnnAssign, ast.AugAssign, ast.For, ast.AsyncFor)):
                bind(stmt.target, stmt.lineno)
            for block in ("body", "orelse", "finalbody"):
                if not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    visit(getattr(stmt, block, []))
            for handler in getattr(stmt, "handlers", []):
                visit(handler.body)
    visit(tree.body)
    return names


def _segment(lines: list[str], node: ast.expr) -> str:
    """``ast.get_source_segment`` from the file's lines (that function splits the whole text
    again at every call: a cost per param that grows with the file)."""
    first, last = node.lineno, node.end_lineno
    if last is None or node.end_col_offset is None:
        return ""
    chunk = [line.encode("utf-8") for line in lines[first - 1:last]]
    if not chunk:
        return ""
    if len(chunk) == 1:
        return chunk[0][node.col_offset:node.end_col_offset].decode("utf-8", "replace")
    chunk[0], chunk[-1] = chunk[0][node.col_offset:], chunk[-1][:node.end_col_offset]
    return b"\n".join(chunk).decode("utf-8", "replace")


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"
