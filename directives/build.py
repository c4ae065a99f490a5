"""Static execution of a graph function: its body, run at compile time, becomes the task graph.

A ``# @stream graph`` body is ordinary Python that the builder *executes symbolically*: statements
run in order, but a kernel call does not compute anything, it adds a task to the graph and yields
a :class:`TaskRef` standing for its result. Everything else must be known at compile time, so the
body is restricted to code whose control flow does not depend on task results.

Values during execution
-----------------------
* a **static** value: int, float, str, bool or None (constants, params, loop variables, and what
  the safe expression language computes from them);
* a :class:`TaskRef`: the result of a task, or item ``index`` of it (tuple unpacking);
* an :class:`SList`: a static list or tuple whose items are any of these (``[k(x) for i in
  range(N)]``, ``[]`` then ``append``, ``A[i][j] = ...``). Python's aliasing is kept: two names
  bound to one list see each other's updates.

State
-----
``frames`` (function locals, then one frame per active comprehension), ``indices`` (the index
values of the enclosing loops and comprehensions, outermost first: they name tasks), ``env`` (the
params and the module-level values derived from them, :meth:`.Program.derived_values`: what a
name that is not local means), and the graph being built. Nothing else; one
:class:`GraphBuilder` builds one graph.

Policy
------
* Before executing, :class:`_Validator` walks the *whole* body, including branches that this
  configuration of params does not take, so that a construct the language does not allow (a
  ``while``, ``np.zeros(3)``, a lambda) is an error whatever the params are.
* Then the body runs. Loops are unrolled, ``if`` takes the branch its static condition picks,
  ``return`` ends the body. A use of a task result where a static value is needed (a loop bound,
  a condition, a clause argument) is an error at that use.
* Task ids: ``kernel[i,j]@file.py:LINE``, indices from ``indices``; when one line holds several
  calls of one kernel, the column is appended (``f@file.py:12:9``). Ids depend only on the source
  and the params, so they are deterministic.
* Calls of a ``stateful`` kernel see each other's state, so each depends on the kernel's previous
  call (an edge that carries no data): they run in program order, whatever the mapping.
* Every error is a :class:`DirectiveError` at the file, line and column of the offending node.

Budgets
-------
A body is a program, so it can ask for unbounded work (``for i in range(40): a = a + a``). Three
budgets bound what one build may do, each an error at the statement that goes over it:

* ``max_tasks`` kernel calls (default :data:`MAX_TASKS`; ``--max-tasks`` on the command line);
* :data:`MAX_UNROLL` loop and comprehension iterations in all;
* :data:`MAX_LIST_LEN` items in one static list, and :data:`MAX_GRAPH_WORK` steps in all, where
  a step is a node evaluated or an item copied into a static list;
* :data:`MAX_RECORDED_ITEMS` items of static lists, tuples and dicts recorded in the plan in all
  (kernel arguments and outputs): the plan holds one copy per call, so a list within
  :data:`MAX_LIST_LEN` passed to many calls would otherwise take gigabytes.
"""

from __future__ import annotations

import ast
from collections import Counter

import networkx as nx

from streammap.directives.kernel_class import compute_class
from streammap.directives.program import (
    CLAUSE_HINT,
    BindError,
    GraphFunc,
    Kernel,
    NoValue,
    Program,
    clause_attr,
    clause_problem,
)
from streammap.directives.safe_eval import (
    _BINOPS,
    FUNCTION_LIST,
    FUNCTIONS,
    MAX_SEQ_LEN,
    Evaluator,
    Unavailable,
    describe,
)
from streammap.directives.scan import basename
from streammap.errors import DirectiveError, shown
from streammap.ir import add_task, new_graph, spec_refs

#: Most loop/comprehension iterations one graph may unroll to.
MAX_UNROLL = 1_000_000
#: Default most tasks (kernel calls) one graph may have; real programs have far fewer.
MAX_TASKS = 200_000
#: Most items in one static list or tuple of a graph body.
MAX_LIST_LEN = 1_000_000
#: Most items of static lists, tuples and dicts that the task arguments and outputs of one graph
#: hold in all (a real program passes tasks' results, not long constant lists, to its kernels).
MAX_RECORDED_ITEMS = 250_000
#: Most steps (nodes evaluated, items copied into lists) one graph build may take.
MAX_GRAPH_WORK = 20_000_000

GRAPH_HINT = ("a graph body may contain: assignments of kernel calls, names, static lists and "
              "constant expressions; `for NAME in range(...)` loops; `if` on static conditions; "
              "`LIST.append(...)`; `pass`; and `return` of a value, a tuple, a list or a dict")
_STATIC_HINT = ("static values are constants, params, loop variables, len() of static lists and "
                f"arithmetic or the functions {FUNCTION_LIST} over them; work on task results "
                "belongs inside a kernel")


_MISSING = object()


class TaskRef:
    """The result of a task (``index``: item of its tuple result, from unpacking)."""
    __slots__ = ("id", "index")

    def __init__(self, task_id: str, index: int | None = None):
        self.id, self.index = task_id, index

    def spec(self) -> dict:
        return {"ref": self.id} if self.index is None else {"ref": self.id, "index": self.index}


class SList:
    """A list or tuple known at compile time; items are static values, TaskRefs or SLists."""
    __slots__ = ("items", "kind")

    def __init__(self, items: list, kind: str = "list"):
        self.items, self.kind = items, kind

    def __len__(self) -> int:
        return len(self.items)


class SDict(dict):
    """A returned dict (constant string keys -> values)."""


class _Return(Exception):
    def __init__(self, value):
        self.value = value


class _Break(Exception):
    pass


class _Continue(Exception):
    pass


def spec(value) -> dict:
    """The IR arg spec of a value."""
    if isinstance(value, TaskRef):
        return value.spec()
    if isinstance(value, SList):
        return {value.kind: [spec(v) for v in value.items]}
    if isinstance(value, SDict):
        return {"dict": {k: spec(v) for k, v in value.items()}}
    if isinstance(value, tuple):
        return {"tuple": [spec(v) for v in value]}
    return {"value": value}


def static_items(value) -> int:
    """Items of the static lists, tuples and dicts in ``value``, counted as :func:`spec` records them."""
    if isinstance(value, SList):
        return len(value.items) + sum(static_items(v) for v in value.items if not isinstance(v, TaskRef))
    if isinstance(value, SDict):
        return len(value) + sum(static_items(v) for v in value.values() if not isinstance(v, TaskRef))
    if isinstance(value, tuple):
        return len(value) + sum(static_items(v) for v in value if isinstance(v, (SList, SDict, tuple)))
    return 0


def build_graph(prog: Program, params: dict, entry: GraphFunc, max_tasks: int = MAX_TASKS) -> nx.DiGraph:
    """The IR of graph function ``entry`` with param values ``params`` (at most ``max_tasks``)."""
    return GraphBuilder(prog, params, entry, max_tasks=max_tasks).build()


class GraphBuilder(Evaluator):
    """Executes one graph function; expressions are the safe language plus lists and kernels."""

    max_work = MAX_GRAPH_WORK

    def __init__(self, prog: Program, params: dict, entry: GraphFunc, max_tasks: int = MAX_TASKS):
        super().__init__({}, prog.locator(), context="a graph body", hint=GRAPH_HINT,
                         names_hint=None)
        self.prog, self.params, self.entry = prog, params, entry
        self.env = prog.derived_values(params)
        self._globals: dict[str, object] = {}      # env values as graph-body values (tuples)
        self.max_tasks = max_tasks
        self.recorded = 0                          # items of static values recorded so far
        self.kernels = prog.kernels
        self.file = basename(prog.path)
        self.g = new_graph(entry.name, "program", source=prog.path, entry=entry.name,
                           params=params)
        self.frames: list[dict] = [{}]
        self.indices: list[int] = []
        self.steps = 0
        checked = _Validator(self, entry).run()
        self.assigned: set[str] = checked.assigned
        self.shared_lines: set[tuple[str, int]] = {k for k, n in checked.calls.items() if n > 1}
        self._fixed: dict[str, dict] = {}
        self._defaults: dict[tuple[str, str], object] = {}
        self._last_call: dict[str, str] = {}       # stateful kernel -> its latest task

    # -- driver --------------------------------------------------------------------------------

    def build(self) -> nx.DiGraph:
        fn = self.entry.node
        if self.entry.kind == "pipeline":
            items = self._item_count()
            results = [self._run(fn, item=i) for i in range(items)]
            outputs = None if all(r is None for r in results) else \
                {"list": [spec(r) for r in results]}
            self.g.graph["pipeline"] = {"items": items}
        else:
            result = self._run(fn)
            outputs = None if result is None else spec(result)
        if self.g.number_of_nodes() == 0:
            kernels = ", ".join(self.kernels) or "none in this file"
            raise self.loc.error((self.entry.line, self.entry.col),
                                 f"graph function '{fn.name}' calls no kernel",
                                 f"a graph body calls `# @stream kernel` functions "
                                 f"(kernels: {kernels})")
        self.g.graph["outputs"] = outputs
        return self.g

    def _run(self, fn: ast.FunctionDef, item: int | None = None):
        frame = self._arguments(fn, item)
        self.frames = [frame]
        self.indices = [] if item is None else [item]
        try:
            self.exec_block(fn.body)
        except _Return as ret:
            return ret.value
        return None

    def _arguments(self, fn: ast.FunctionDef, item: int | None) -> dict:
        """Bind the graph function's own parameters: the item index, then static defaults."""
        a = fn.args
        names = [x.arg for x in (*a.posonlyargs, *a.args)]
        defaults = dict(zip(names[len(names) - len(a.defaults):], a.defaults))
        defaults.update((x.arg, d) for x, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None)
        frame: dict = {}
        if item is not None:
            frame[names.pop(0)] = item
        if a.vararg or a.kwarg:
            raise self.loc.error(a.vararg or a.kwarg, f"graph function '{fn.name}' cannot take "
                                 "*args or **kwargs", "a graph function takes no arguments, or "
                                 "only arguments with constant defaults")
        for name in (*names, *(x.arg for x in a.kwonlyargs)):
            if name not in defaults:
                raise self.loc.error((fn.lineno, fn.col_offset + 1),
                                     f"argument '{name}' of graph function '{fn.name}' has no "
                                     "default", "a graph function takes no arguments, or only "
                                     "arguments with constant defaults")
            frame[name] = self._static(defaults[name], "the default of a graph argument",
                                       Evaluator(self.env, self.loc))
        return frame

    def _item_count(self) -> int:
        clause = self.entry.items
        ev = Evaluator(self.env, clause.loc, context="the items clause")
        value = ev.eval(clause.expr)
        problem = clause_problem("items", value)
        if problem:
            raise clause.loc.error(clause.expr, problem)
        if value > MAX_UNROLL:
            raise clause.loc.error(clause.expr, f"items={shown(value)} is more than {MAX_UNROLL}")
        return value

    # -- statements ----------------------------------------------------------------------------

    def exec_block(self, stmts: list[ast.stmt]) -> None:
        for stmt in stmts:
            getattr(self, "exec_" + type(stmt).__name__)(stmt)

    def exec_Assign(self, stmt: ast.Assign) -> None:
        value = self.eval(stmt.value)
        for target in stmt.targets:
            self.assign(target, value)

    def exec_AnnAssign(self, stmt: ast.AnnAssign) -> None:
        self.assign(stmt.target, self.eval(stmt.value))

    def exec_AugAssign(self, stmt: ast.AugAssign) -> None:
        current = self.eval_Name(stmt.target)
        value = self.binop(ast.BinOp(stmt.target, stmt.op, stmt.value, lineno=stmt.lineno,
                                     col_offset=stmt.col_offset), current, self.eval(stmt.value))
        self.assign(stmt.target, value)

    def exec_Expr(self, stmt: ast.Expr) -> None:
        value = stmt.value
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute):
            self._list_method(value)
        elif not isinstance(value, ast.Constant):       # docstrings and `...` do nothing
            self.eval(value)

    def exec_For(self, stmt: ast.For) -> None:
        name = stmt.target.id
        for i in self._range(stmt.iter, stmt):
            self.frames[0][name] = i
            self.indices.append(i)
            try:
                self.exec_block(stmt.body)
            except _Continue:
                pass
            except _Break:
                break
            finally:
                self.indices.pop()

    def exec_If(self, stmt: ast.If) -> None:
        test = self._condition(stmt.test, "an if condition")
        self.exec_block(stmt.body if test else stmt.orelse)

    def exec_Return(self, stmt: ast.Return) -> None:
        if stmt.value is None:
            raise _Return(None)
        if isinstance(stmt.value, ast.Dict):
            keys, values = stmt.value.keys, stmt.value.values
            value = SDict({k.value: self.eval(v) for k, v in zip(keys, values)})
        else:
            value = self.eval(stmt.value)
        self.record(stmt, [value])                  # the plan records the outputs
        raise _Return(value)

    def exec_Pass(self, stmt) -> None:
        pass

    def exec_Break(self, stmt) -> None:
        raise _Break

    def exec_Continue(self, stmt) -> None:
        raise _Continue

    def assign(self, target: ast.expr, value) -> None:
        if isinstance(target, ast.Name):
            self.frames[0][target.id] = value
        elif isinstance(target, (ast.Tuple, ast.List)):
            items = self._unpack(target, value)
            for sub, item in zip(target.elts, items):
                self.assign(sub, item)
        else:   # ast.Subscript (the validator allows nothing else)
            container = self.eval(target.value)
            items = self._list_of(target.value, container, "assigned into")
            items[self._index(target, container)] = value

    def _unpack(self, target, value) -> list:
        n = len(target.elts)
        if isinstance(value, TaskRef):
            if value.index is not None:
                raise self.loc.error(target, "an item of a task result cannot be unpacked again",
                                     "unpack the task's result in one step: `a, b = k(...)`")
            return [TaskRef(value.id, i) for i in range(n)]
        if isinstance(value, SList):
            if len(value.items) != n:
                raise self.loc.error(target, f"cannot unpack {len(value.items)} values into "
                                             f"{n} names", GRAPH_HINT)
            return list(value.items)
        raise self.loc.error(target, f"cannot unpack {_kind(value)}",
                             "unpack a kernel's tuple result or a static list")

    def _list_method(self, call: ast.Call) -> None:
        """``ys.append(v)`` / ``ys.extend(vs)`` on a static list."""
        method = call.func.attr
        container = self.eval(call.func.value)
        items = self._list_of(call.func.value, container, f"used with .{method}()")
        value = self.eval(call.args[0])
        if method == "append":
            self.built(call, len(items) + 1, 1)
            items.append(value)
        elif isinstance(value, SList):
            self.built(call, len(items) + len(value.items), len(value.items))
            items.extend(value.items)
        else:
            raise self.loc.error(call.args[0], f".extend() needs a static list, not "
                                 f"{_kind(value)}", GRAPH_HINT)

    def _list_of(self, node, value, what: str) -> list:
        if isinstance(value, SList) and value.kind == "list":
            return value.items
        raise self.loc.error(node, f"'{ast.unparse(node)}' is {_kind(value)}; only a static "
                             f"list can be {what}", GRAPH_HINT)

    # -- budgets -------------------------------------------------------------------------------

    def budget_hint(self) -> str:
        return ("the graph body does too much work at compile time: use smaller params, or "
                "describe repetition with a pipeline")

    def record(self, node, values: list) -> None:
        """``values`` are about to be recorded in the plan (a call's arguments, the outputs):
        count their static items against :data:`MAX_RECORDED_ITEMS` first."""
        self.recorded += sum(static_items(v) for v in values)
        if self.recorded > MAX_RECORDED_ITEMS:
            raise self.loc.error(node, f"the plan would record more than {MAX_RECORDED_ITEMS} items of static "
                                 "lists, tuples and dicts in kernel arguments and outputs",
                                 "pass a kernel the size (an int) and let it build the list, or pass a task's "
                                 "result; the plan keeps a copy of a static argument for every call")

    def built(self, node, items: int, added: int | None = None) -> None:
        """A static list of ``items`` items is being built at ``node``, ``added`` of them copied
        or computed now (default: all): check its length, and count the work."""
        if items > MAX_LIST_LEN:
            raise self.loc.error(node, f"a static list of {items} items is longer than the limit "
                                 f"of {MAX_LIST_LEN}", "use smaller params")
        self.spend(node, items if added is None else added)

    # -- expressions ---------------------------------------------------------------------------

    def eval_Name(self, node: ast.Name):
        name = node.id
        for frame in reversed(self.frames):
            if name in frame:
                return frame[name]
        if name in self.assigned:
            raise self.loc.error(node, f"name '{name}' is used before it is assigned",
                                 "assign a name before using it; the graph body runs top to "
                                 "bottom at compile time")
        value = self.env.get(name, _MISSING)
        if value is not _MISSING and not isinstance(value, Unavailable):
            return self._global(name, value)
        if name in self.kernels:
            raise self.loc.error(node, f"kernel '{name}' is used without being called",
                                 f"call it: {name}(...)")
        if isinstance(value, NoValue):
            raise self.loc.error(node, f"'{name}' is a module global without a compile-time "
                                 f"value: {value.problem}", value.hint)
        if name in self.prog.module_names:
            raise self.loc.error(node, f"'{name}' is a module global, not a param or a name "
                                 "assigned in the graph body",
                                 "a graph body may use params (`# @stream param`), its own "
                                 "names and kernel calls; other globals belong inside kernels")
        raise self.loc.error(node, f"unknown name '{name}'", GRAPH_HINT)

    def _global(self, name: str, value):
        """A param or derived value as the graph body sees it: a tuple is a static tuple."""
        if not isinstance(value, tuple):
            return value
        converted = self._globals.get(name)
        if converted is None:
            converted = self._globals[name] = _static_tuple(value)
        return converted

    def eval_Call(self, node: ast.Call):
        func = node.func
        if isinstance(func, ast.Name) and not any(func.id in f for f in self.frames):
            kernel = self.kernels.get(func.id)
            if kernel is not None:
                return self.call_kernel(node, kernel)
            if func.id in _CONVERSIONS:     # list(ys), tuple(ys): a copy of a static list
                items = self.eval(node.args[0]) if node.args else SList([])
                if not isinstance(items, SList):
                    raise self.loc.error(node.args[0], f"{func.id}() takes a static list here, "
                                         f"not {_kind(items)}", GRAPH_HINT)
                self.built(node, len(items.items))
                return SList(list(items.items), func.id)
            if func.id in FUNCTIONS:
                return super().eval_Call(node)
        raise _not_a_kernel(self, node)     # the validator catches these first

    def eval_Tuple(self, node: ast.Tuple):
        return SList(self._items(node), "tuple")

    def eval_List(self, node: ast.List):
        return SList(self._items(node), "list")

    def eval_ListComp(self, node: ast.ListComp):
        out: list = []
        self.frames.append({})
        try:
            self._comprehension(node, 0, out)
        finally:
            self.frames.pop()
        return SList(out, "list")

    def _comprehension(self, node: ast.ListComp, level: int, out: list) -> None:
        if level == len(node.generators):
            self.built(node, len(out) + 1, 1)
            out.append(self.eval(node.elt))
            return
        gen = node.generators[level]
        frame = self.frames[-1]
        for i in self._range(gen.iter, gen.iter):
            frame[gen.target.id] = i
            self.indices.append(i)
            try:
                if all(self._condition(cond, "a comprehension condition") for cond in gen.ifs):
                    self._comprehension(node, level + 1, out)
            finally:
                self.indices.pop()

    def eval_Subscript(self, node: ast.Subscript):
        base = self.eval(node.value)
        if isinstance(node.slice, ast.Slice):
            if not isinstance(base, SList):
                raise self._not_indexable(node, base)
            s = node.slice
            bounds = [None if b is None else self._int(b, "a slice bound")
                      for b in (s.lower, s.upper, s.step)]
            if bounds[2] == 0:
                raise self.loc.error(s.step, "slice step cannot be zero")
            items = base.items[slice(*bounds)]
            self.built(node, len(items))
            return SList(items, base.kind)
        if not isinstance(base, SList):
            raise self._not_indexable(node, base)
        return base.items[self._index(node, base)]

    def _index(self, node: ast.Subscript, container: SList) -> int:
        index = self._int(node.slice, "an index")
        n = len(container.items)
        if not -n <= index < n:
            raise self.loc.error(node.slice, f"index {index} is out of range for "
                                 f"'{ast.unparse(node.value)}' (a static {container.kind} of "
                                 f"{_count(n, 'item')})", "static indices must lie inside the "
                                 "list, which has its length at compile time")
        return index

    def _not_indexable(self, node, base) -> DirectiveError:
        if isinstance(base, TaskRef):
            return self.loc.error(node, f"'{ast.unparse(node.value)}' is a task result and "
                                  "cannot be indexed in a graph body",
                                  "unpack a tuple result (`a, b = k(...)`), or index inside a "
                                  "kernel")
        return self.loc.error(node, f"'{ast.unparse(node.value)}' is {_kind(base)}; only static "
                              "lists can be indexed in a graph body", GRAPH_HINT)

    def _items(self, node, elts: list[ast.expr] | None = None) -> list:
        """The values of ``elts`` (default: ``node.elts``), ``*xs`` unpacked; counted at ``node``."""
        items: list = []
        for elt in node.elts if elts is None else elts:
            if isinstance(elt, ast.Starred):
                items.extend(self._starred(elt))
            else:
                items.append(self.eval(elt))
        self.built(node, len(items))
        return items

    def _starred(self, node: ast.Starred) -> list:
        value = self.eval(node.value)
        if isinstance(value, SList):
            self.built(node, len(value.items))
            return list(value.items)
        if isinstance(value, TaskRef):
            raise self.loc.error(node, f"'*{ast.unparse(node.value)}' unpacks a task result, "
                                 "whose length is not known at compile time",
                                 "fan-in takes a static list: `ys = [k(x) for i in range(N)]` "
                                 "then `combine(*ys)`")
        raise self.loc.error(node, f"cannot unpack {_kind(value)} with *", GRAPH_HINT)

    def binop(self, node, left, right):
        if isinstance(left, SList) or isinstance(right, SList):
            op = type(node.op)
            if op is ast.Add and isinstance(left, SList) and isinstance(right, SList) \
                    and left.kind == right.kind:
                self.built(node, len(left.items) + len(right.items))
                return SList(left.items + right.items, left.kind)
            if op is ast.Mult:
                seq, n = (left, right) if isinstance(left, SList) else (right, left)
                if isinstance(n, int) and not isinstance(n, (bool, SList)):
                    self.built(node, len(seq.items) * max(n, 0))
                    return SList(seq.items * max(n, 0), seq.kind)     # n < -2**63 overflows
            raise self.loc.error(node, "unsupported operation on a static list",
                                 "static lists support + (concatenation) and * int (repetition)")
        return super().binop(node, left, right)

    def truth(self, node, value) -> bool:
        if isinstance(value, SList):
            return bool(value.items)
        return super().truth(node, value)

    def not_static(self, node, value) -> DirectiveError:
        if isinstance(value, TaskRef):
            return self.loc.error(node, f"'{ast.unparse(node)}' is a task result, known only "
                                  f"when the graph runs; it cannot be used in {self.context}",
                                  _STATIC_HINT)
        return self.loc.error(node, f"'{ast.unparse(node)}' is {_kind(value)}; it cannot be "
                              f"used in {self.context}", _STATIC_HINT)

    def _static(self, node, context: str, ev: Evaluator | None = None):
        """A value that must be known now (a bound, an index, a default)."""
        ev = ev or self
        saved, ev.context = ev.context, context
        try:
            value = ev.eval(node)
            ev.operand(node, value)
            return value
        finally:
            ev.context = saved

    def _condition(self, node, context: str) -> bool:
        """The truth of a condition, which must be known now."""
        saved, self.context = self.context, context
        try:
            return self.truth(node, self.eval(node))
        finally:
            self.context = saved

    def _int(self, node, context: str) -> int:
        value = self._static(node, context)
        if not isinstance(value, int) or isinstance(value, bool):
            raise self.loc.error(node, f"{context} must be an int, got {shown(value)}", _STATIC_HINT)
        return value

    def _range(self, call: ast.Call, where) -> range:
        bounds = [self._int(arg, "a range() bound") for arg in call.args]
        try:
            r = range(*bounds)
            self.steps += len(r)
        except ValueError as exc:
            raise self.loc.error(call, f"invalid range: {exc}") from None
        except OverflowError:           # len() of a range of more than 2**63 items
            self.steps = MAX_UNROLL + 1
        if self.steps > MAX_UNROLL:
            raise self.loc.error(where, f"the graph unrolls to more than {MAX_UNROLL} loop "
                                 "iterations", "use smaller params, or describe repetition "
                                 "with a pipeline")
        return r

    # -- kernel calls --------------------------------------------------------------------------

    def call_kernel(self, node: ast.Call, kernel: Kernel) -> TaskRef:
        if self.g.number_of_nodes() >= self.max_tasks:
            raise self.loc.error(node, f"the graph has more than {self.max_tasks} tasks "
                                 f"(limit: max_tasks={self.max_tasks})",
                                 "use smaller params, or raise the limit with --max-tasks "
                                 "(max_tasks= in the API) if the program really has that many")
        args = self._items(node, node.args)
        kwargs = [(kw.arg, self.eval(kw.value), kw) for kw in node.keywords]
        try:
            bound = kernel.signature.bind(kernel.name, args, kwargs)
        except BindError as exc:
            raise self.loc.error(exc.node or node, exc.message,
                                 f"kernel '{kernel.name}' is defined on line {kernel.line} as "
                                 f"def {kernel.name}({ast.unparse(kernel.node.args)})") from None
        attrs = dict(self._fixed_attrs(kernel))
        for name in kernel.dynamic:
            attrs[name] = self._clause(kernel, name, bound, node)

        task_id = self._task_id(kernel.name, node)
        self.record(node, [*args, *(v for _, v, _ in kwargs)])
        args_spec = [spec(a) for a in args]
        kwargs_spec = {name: spec(v) for name, v, _ in kwargs}
        add_task(self.g, task_id, kernel.name, site=f"{self.file}:{node.lineno}", code=kernel.code,
                 args=args_spec, kwargs=kwargs_spec, **attrs)
        for producer in spec_refs({"list": args_spec}) + spec_refs({"dict": kwargs_spec}):
            if not self.g.has_edge(producer, task_id):
                out = self.g.nodes[producer]["out"]
                self.g.add_edge(producer, task_id, bytes=float(out or 0.0))
        if attrs.get("stateful"):
            # A stateful kernel's calls see each other's state: they run in program order (an
            # ordering edge that carries no data).
            prev = self._last_call.get(kernel.name)
            if prev is not None and not self.g.has_edge(prev, task_id):
                self.g.add_edge(prev, task_id, bytes=0.0)
            self._last_call[kernel.name] = task_id
        return TaskRef(task_id)

    def _task_id(self, kernel: str, node: ast.Call) -> str:
        index = f"[{','.join(map(str, self.indices))}]" if self.indices else ""
        task_id = f"{kernel}{index}@{self.file}:{node.lineno}"
        if (kernel, node.lineno) in self.shared_lines:
            task_id += f":{self.loc.position(node.lineno, node.col_offset)[1]}"
        if task_id in self.g:     # cannot happen with range loops; keep ids unique regardless
            n = 2
            while f"{task_id}#{n}" in self.g:
                n += 1
            task_id = f"{task_id}#{n}"
        return task_id

    def _fixed_attrs(self, kernel: Kernel) -> dict:
        """Attributes from clauses that use no kernel argument: evaluated once per kernel."""
        attrs = self._fixed.get(kernel.name)
        if attrs is None:
            attrs = {}
            dynamic = set(kernel.dynamic)
            for name, clause in kernel.clauses.items():
                if name in dynamic:
                    continue
                what = f"clause '{name}' of kernel '{kernel.name}'"
                value = Evaluator(self.env, clause.loc, context=what).eval(clause.expr)
                problem = clause_problem(name, value)
                if problem:
                    raise clause.loc.error(clause.expr, f"{what}: {problem}", CLAUSE_HINT)
                attrs[name] = clause_attr(name, value)
            attrs["compute_class"] = compute_class(kernel.node)   # the rate its flops run at
            self._fixed[kernel.name] = attrs
        return attrs

    def _clause(self, kernel: Kernel, name: str, bound: dict, call: ast.Call):
        clause = kernel.clauses[name]
        env = _CallEnv(self, kernel, name, bound, call)
        try:
            value = Evaluator(env, clause.loc,
                              context=f"clause '{name}' of kernel '{kernel.name}'"
                              ).eval(clause.expr)
        except DirectiveError as exc:
            if exc.line in {seg[0] for seg in clause.loc.segments or ()}:
                # The clause failed for these argument values: say which call gave them.
                line, col = self.loc.position(call.lineno, call.col_offset)
                exc.hint = (f"{exc.hint}; " if exc.hint else "") + \
                    f"evaluated for the call at {self.file}:{line}:{col}"
            raise
        problem = clause_problem(name, value)
        if problem:
            text = ast.unparse(clause.expr)
            raise self.loc.error(call, f"kernel '{kernel.name}': {problem} for this call "
                                 f"(clause {name}={text} on line {clause.line})", CLAUSE_HINT)
        return clause_attr(name, value)

    def default_value(self, kernel: Kernel, name: str):
        key = (kernel.name, name)
        if key not in self._defaults:
            node = kernel.signature.defaults[name]
            ev = Evaluator(self.env, self.loc,
                           context=f"the default of argument '{name}' of kernel '{kernel.name}'")
            try:
                ev.check(node)
                value = ev.eval(node)
            except DirectiveError as exc:
                value = Unavailable(f"a clause of kernel '{kernel.name}' uses argument '{name}', "
                                    f"whose default is not static: {exc.message}",
                                    _STATIC_HINT, where=(self.loc, node))
            self._defaults[key] = value
        return self._defaults[key]


class _CallEnv:
    """Names a clause sees at one call: the bound arguments, defaults, then params."""

    def __init__(self, builder: GraphBuilder, kernel: Kernel, clause: str, bound: dict, call):
        self.builder, self.kernel, self.clause, self.bound, self.call = \
            builder, kernel, clause, bound, call

    def __getitem__(self, name: str):
        if name in self.bound:
            return self._static(name, self.bound[name])
        if name in self.kernel.signature.defaults:
            return self.builder.default_value(self.kernel, name)
        return self.builder.env[name]

    def _static(self, name: str, value):
        if isinstance(value, TaskRef):
            return Unavailable(
                f"kernel '{self.kernel.name}': clause '{self.clause}' uses argument '{name}', "
                "which is a task result (an array) at this call",
                "clauses may use params and scalar arguments (constants, params, loop "
                "variables); express array sizes with params",
                where=(self.builder.loc, self.call))
        if isinstance(value, (SList, list)):
            items = value.items if isinstance(value, SList) else value
            # A clause sees a list argument as a tuple: bounded like any value of a clause.
            self.builder.built(self.call, len(items))
            if len(items) > MAX_SEQ_LEN:
                return Unavailable(f"kernel '{self.kernel.name}': clause '{self.clause}' uses "
                                   f"argument '{name}', a list of more than {MAX_SEQ_LEN} items",
                                   _STATIC_HINT, where=(self.builder.loc, self.call))
            return tuple(self._static(name, v) for v in items)
        if isinstance(value, dict):
            return Unavailable(f"kernel '{self.kernel.name}': clause '{self.clause}' uses "
                               f"'**{name}', which has no static value", _STATIC_HINT,
                               where=(self.builder.loc, self.call))
        return value


# -- the structural check ------------------------------------------------------------------------

_STMT_ERRORS = {
    ast.While: ("'while' loops are not allowed in a graph body",
                "loops must be `for NAME in range(...)` with static bounds; they are unrolled "
                "at compile time"),
    ast.AsyncFor: ("'async for' is not allowed in a graph body", GRAPH_HINT),
    ast.With: ("'with' statements are not allowed in a graph body", GRAPH_HINT),
    ast.AsyncWith: ("'async with' is not allowed in a graph body", GRAPH_HINT),
    ast.Import: ("imports are not allowed in a graph body",
                 "import at module level and use the module inside a kernel"),
    ast.ImportFrom: ("imports are not allowed in a graph body",
                     "import at module level and use the module inside a kernel"),
    ast.Try: ("'try' is not allowed in a graph body",
              "a failing kernel can be retried: use its retries clause"),
    ast.Global: ("'global' is not allowed in a graph body", GRAPH_HINT),
    ast.Nonlocal: ("'nonlocal' is not allowed in a graph body", GRAPH_HINT),
    ast.Delete: ("'del' is not allowed in a graph body", GRAPH_HINT),
    ast.Raise: ("'raise' is not allowed in a graph body", GRAPH_HINT),
    ast.Assert: ("'assert' is not allowed in a graph body", GRAPH_HINT),
    ast.FunctionDef: ("a nested def is not allowed in a graph body",
                      "define kernels at module level, with `# @stream kernel` above them"),
    ast.AsyncFunctionDef: ("a nested def is not allowed in a graph body",
                           "define kernels at module level, with `# @stream kernel` above them"),
    ast.ClassDef: ("a class is not allowed in a graph body", GRAPH_HINT),
}
if hasattr(ast, "TryStar"):
    _STMT_ERRORS[ast.TryStar] = _STMT_ERRORS[ast.Try]
if hasattr(ast, "Match"):
    _STMT_ERRORS[ast.Match] = ("'match' is not allowed in a graph body",
                               "use `if`/`elif` on static conditions")

_EXPR_HINTS = {
    ast.Attribute: "a graph body cannot access attributes; do that inside a kernel",
    ast.Lambda: "define a kernel with `# @stream kernel` instead",
    ast.NamedExpr: "assign with a plain `=` statement",
    ast.GeneratorExp: "use a list comprehension over range(...)",
    ast.SetComp: "use a list comprehension over range(...)",
    ast.DictComp: "use a list comprehension over range(...)",
    ast.Dict: "a dict is allowed only as the returned value: `return {\"name\": value}`",
}

_RANGE_HINT = ("loops and comprehensions iterate over range(...) with static bounds (count down "
               "with range(N - 1, -1, -1)); to visit a static list ys, loop over "
               "range(len(ys)) and use ys[i]")
#: Calls that copy a static list.
_CONVERSIONS = ("list", "tuple")


def _not_a_kernel(builder: GraphBuilder, node: ast.Call) -> DirectiveError:
    name = ast.unparse(node.func)
    kernels = ", ".join(builder.kernels) or "none in this file"
    return builder.loc.error(node, f"call to '{name}' is not a kernel call",
                             f"a graph body may call `# @stream kernel` functions (kernels: "
                             f"{kernels}) and, on static values, {FUNCTION_LIST}; move other "
                             "work inside a kernel")


class _Validator:
    """Checks that the whole body uses only the graph language, before anything runs.

    Also records what the builder needs up front: the names the body assigns (to tell "used
    before assignment" from "unknown") and how many calls of each kernel share a line.
    """

    def __init__(self, builder: GraphBuilder, entry: GraphFunc):
        self.b, self.entry = builder, entry
        self.assigned: set[str] = set()
        self.calls: Counter = Counter()

    def run(self) -> "_Validator":
        for stmt in self.entry.node.body:
            self.stmt(stmt, loop=0)
        return self

    def error(self, node, message: str, hint: str = GRAPH_HINT) -> DirectiveError:
        return self.b.loc.error(node, message, hint)

    # statements

    def stmt(self, s: ast.stmt, loop: int) -> None:
        kind = type(s)
        if kind is ast.Assign:
            for t in s.targets:
                self.target(t)
            self.expr(s.value)
        elif kind is ast.AnnAssign:
            if s.value is None:
                raise self.error(s, "an annotation without a value does nothing in a graph body")
            self.target(s.target)
            self.expr(s.value)
        elif kind is ast.AugAssign:
            if not isinstance(s.target, ast.Name):
                raise self.error(s.target, "augmented assignment only to a name in a graph body")
            if type(s.op) not in _BINOPS:
                raise self.error(s, f"{describe(s.op)} is not allowed in a graph body")
            self.assigned.add(s.target.id)
            self.expr(s.value)
        elif kind is ast.Expr:
            self.expr_stmt(s.value)
        elif kind is ast.For:
            self.range_call(s.iter)
            if not isinstance(s.target, ast.Name):
                raise self.error(s.target, "a for loop in a graph body binds one name",
                                 _RANGE_HINT)
            if s.orelse:
                raise self.error(s, "'for ... else' is not allowed in a graph body")
            self.assigned.add(s.target.id)
            for sub in s.body:
                self.stmt(sub, loop + 1)
        elif kind is ast.If:
            self.expr(s.test)
            for sub in (*s.body, *s.orelse):
                self.stmt(sub, loop)
        elif kind is ast.Return:
            if isinstance(s.value, ast.Dict):
                for key, value in zip(s.value.keys, s.value.values):
                    if key is None:
                        raise self.error(value, "'**' is not allowed in a returned dict")
                    if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
                        raise self.error(key, "keys of a returned dict must be constant strings")
                    if not key.value.isidentifier():
                        raise self.error(key, f"output name {key.value!r} is not an identifier",
                                         "a returned dict's keys name the outputs (.npz members): "
                                         "letters, digits and _, not starting with a digit")
                    self.expr(value)
            elif s.value is not None:
                self.expr(s.value)
        elif kind in (ast.Break, ast.Continue):
            if not loop:
                raise self.error(s, f"'{kind.__name__.lower()}' outside a loop")
        elif kind is not ast.Pass:
            message, hint = _STMT_ERRORS.get(
                kind, (f"'{type(s).__name__.lower()}' statements are not allowed in a graph "
                       "body", GRAPH_HINT))
            raise self.error(s, message, hint)

    def expr_stmt(self, value: ast.expr) -> None:
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) \
                and value.func.attr in ("append", "extend") \
                and isinstance(value.func.value, (ast.Name, ast.Subscript)):
            if len(value.args) != 1 or value.keywords or isinstance(value.args[0], ast.Starred):
                raise self.error(value, f".{value.func.attr}() takes exactly one argument")
            self.expr(value.func.value)
            self.expr(value.args[0])
        elif isinstance(value, ast.Constant):
            pass        # docstring, `...`
        else:
            self.expr(value)

    def target(self, t: ast.expr) -> None:
        if isinstance(t, ast.Name):
            self.assigned.add(t.id)
        elif isinstance(t, (ast.Tuple, ast.List)):
            for elt in t.elts:
                if isinstance(elt, ast.Starred):
                    raise self.error(elt, "starred assignment is not allowed in a graph body",
                                     "unpack into a fixed number of names: `a, b = k(...)`")
                self.target(elt)
        elif isinstance(t, ast.Subscript):
            if isinstance(t.slice, ast.Slice):
                raise self.error(t, "slice assignment is not allowed in a graph body")
            self.expr(t.value)
            self.expr(t.slice)
        else:
            raise self.error(t, f"cannot assign to {describe(t)} in a graph body",
                             "assign to a name, a tuple of names or a static list item "
                             "(`ys[i] = ...`)")

    # expressions

    def expr(self, e: ast.expr) -> None:
        kind = type(e)
        if kind is ast.Name:
            return
        if kind is ast.Constant:
            if not isinstance(e.value, (int, float, str, bool, type(None))):
                raise self.error(e, f"a constant of type {type(e.value).__name__} is not allowed "
                                    "in a graph body")
        elif kind is ast.Call:
            self.call(e)
        elif kind in (ast.BinOp, ast.UnaryOp, ast.Compare, ast.BoolOp, ast.IfExp):
            if kind is ast.BinOp and type(e.op) not in _BINOPS:
                raise self.error(e, f"{describe(e.op)} is not allowed in a graph body")
            for child in ast.iter_child_nodes(e):
                if isinstance(child, ast.expr):
                    self.expr(child)
        elif kind in (ast.Tuple, ast.List):
            for elt in e.elts:
                self.expr(elt.value if isinstance(elt, ast.Starred) else elt)
        elif kind is ast.ListComp:
            for gen in e.generators:
                if gen.is_async:
                    raise self.error(e, "async comprehensions are not allowed in a graph body")
                self.range_call(gen.iter)
                if not isinstance(gen.target, ast.Name):
                    raise self.error(gen.target, "a comprehension in a graph body binds one "
                                     "name", _RANGE_HINT)
                for cond in gen.ifs:
                    self.expr(cond)
            self.expr(e.elt)
        elif kind is ast.Subscript:
            self.expr(e.value)
            if isinstance(e.slice, ast.Slice):
                for part in (e.slice.lower, e.slice.upper, e.slice.step):
                    if part is not None:
                        self.expr(part)
            else:
                self.expr(e.slice)
        else:
            raise self.error(e, f"{describe(e)} is not allowed in a graph body",
                             _EXPR_HINTS.get(kind, GRAPH_HINT))

    def call(self, e: ast.Call) -> None:
        func = e.func
        name = func.id if isinstance(func, ast.Name) else None
        if name in self.b.kernels:
            self.calls[(name, e.lineno)] += 1
            for arg in e.args:
                self.expr(arg.value if isinstance(arg, ast.Starred) else arg)
            for kw in e.keywords:
                if kw.arg is None:
                    raise self.error(kw, "'**' is not allowed in a kernel call in a graph body",
                                     "pass keyword arguments by name: k(x, axis=0)")
                self.expr(kw.value)
        elif name == "range":
            raise self.error(e, "range(...) is allowed only as the iterable of a for loop or "
                                "a comprehension", _RANGE_HINT)
        elif name in _CONVERSIONS:
            if e.keywords or len(e.args) > 1 or any(isinstance(a, ast.Starred) for a in e.args):
                raise self.error(e, f"{name}() takes at most one positional argument here")
            for arg in e.args:
                self.expr(arg)
        elif name in FUNCTIONS:
            if e.keywords or any(isinstance(a, ast.Starred) for a in e.args):
                raise self.error(e, f"{name}() takes plain positional arguments here")
            for arg in e.args:
                self.expr(arg)
        elif isinstance(func, ast.Attribute) and func.attr in ("append", "extend"):
            raise self.error(e, f".{func.attr}() is allowed only as a statement: "
                                f"`ys.{func.attr}(...)`")
        else:
            raise _not_a_kernel(self.b, e)

    def range_call(self, it: ast.expr) -> None:
        if not (isinstance(it, ast.Call) and isinstance(it.func, ast.Name)
                and it.func.id == "range"):
            what = f"'{ast.unparse(it)}'"
            raise self.error(it, f"loops in a graph body iterate over range(...), not {what}",
                             _RANGE_HINT)
        if it.keywords or not 1 <= len(it.args) <= 3 or \
                any(isinstance(a, ast.Starred) for a in it.args):
            raise self.error(it, "range() takes 1 to 3 positional arguments", _RANGE_HINT)
        for arg in it.args:
            self.expr(arg)


# -- helpers -------------------------------------------------------------------------------------

def _static_tuple(value: tuple) -> SList:
    """A tuple value (of a derived module global) as a static tuple of the graph body."""
    return SList([_static_tuple(v) if isinstance(v, tuple) else v for v in value], "tuple")


def _kind(value) -> str:
    if isinstance(value, TaskRef):
        return "a task result"
    if isinstance(value, SList):
        return f"a static {value.kind}"
    return f"the static value {shown(value)}"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"

