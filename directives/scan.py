"""Find the ``# @stream`` directives of a file and the statements they belong to.

A directive is a comment, so the Python parser throws it away; this module finds it twice, on
purpose, and compares:

* :mod:`tokenize` sees **every** ``# @stream`` comment in the file, wherever it is.
* a libcst visitor sees only the comments that are **attached**: in the lines directly above a
  module-level statement (or among its decorators), with nothing but other comment lines between
  the directive and the code. libcst keeps comments in the tree (``leading_lines``, the module
  ``header`` for the first statement, ``lines_after_decorators``), and ``PositionProvider`` gives
  their lines.

Every comment the first finds and the second does not is an error, with the reason worked out
from where it is (inside a function body, at the end of the file, separated by a blank line, after
code on the same line). So a misplaced directive is never silently ignored.

Cost: linear in the file, and far below a full tokenize or libcst pass (a generated graph body of
100,000 call lines must compile in seconds; ``benchmarks/frontend_scale.py``). Both passes look
only where a directive can be:

* the first finds candidate ``# @stream`` texts with a regular expression; one on a line between
  module-level statements is a comment (only comments and blank lines lie there in valid Python);
  one inside a statement (a docstring that quotes a directive, a misplaced one) is classified by
  tokenizing that statement from its first line up to the candidate;
* the second gives libcst a *skeleton* of the file, in which the body of every module-level
  ``def`` and ``class`` is cut to one ``pass`` at the body's indentation (its header, decorators
  and everything after its last statement, such as a comment that still belongs to the body,
  stay as they are), and every run of module-level statements with no directive comment in or
  directly above any of them is cut to one ``pass`` too, with a map from skeleton lines back to
  file lines. libcst decides which comments belong to which module-level statement exactly as on
  the whole file, at a cost that grows with neither the bodies nor the module-level code between
  directives (a file of 200,000 module-level statements took libcst minutes).

The attached directives are then parsed: the text after ``@stream`` is a Python expression
(``kernel(flops=16*N)``), parsed with :mod:`ast` so that clause values are ``ast`` expressions
that :mod:`.safe_eval` can check and evaluate. A directive may continue on following comment lines
while its parenthesis is open. Positions inside the comment are mapped back to file columns by a
:class:`~.safe_eval.Locator`.

Bounds: a program file is at most :data:`MAX_SOURCE_BYTES` and :data:`MAX_MODULE_STATEMENTS`
module-level statements, and its syntax tree at most
:data:`~.safe_eval.MAX_DEPTH` levels deep below a statement's expression, checked on the ``ast``
tree before libcst (which recurses, and fails inside itself on deep input) sees the file.

This module checks the *form* of directives (known directive, known clauses, ``name=value``
syntax). What they mean (a param above an assignment, clause values) is checked in ``program.py``.
"""

from __future__ import annotations

import ast
import bisect
import difflib
import functools
import re
import tokenize
from dataclasses import dataclass, field
from pathlib import Path

from streammap.directives.safe_eval import MAX_DEPTH, MAX_EXPR_CHARS, Locator, deepest, too_deep
from streammap.errors import DirectiveError
from streammap.io.files import not_regular

#: Directive name -> the clauses it accepts.
DIRECTIVES = {
    "param": (),
    "kernel": ("flops", "bytes", "mem", "out", "device", "split", "share", "stateful", "retries", "timeout"),
    "graph": (),
    "pipeline": ("items",),
}
DIRECTIVES_HINT = "directives are: param, kernel(...), graph, pipeline(items=...)"

_PRAGMA = re.compile(r"#\s*@stream(\w*)")
#: Where a directive may start: the text of ``_PRAGMA`` anywhere (in code, strings or comments).
_CANDIDATE = re.compile(r"#[^\S\n]*@stream")
#: How many comment lines one directive may span.
_MAX_CONTINUATION = 50
#: Largest program file read.
MAX_SOURCE_BYTES = 16 * 1024 * 1024
#: Module-level statements allowed in a program file. Each costs the front end tens of
#: microseconds (its bindings are checked against those above it); real programs have hundreds,
#: and 16 MiB of one-line assignments would otherwise take minutes.
MAX_MODULE_STATEMENTS = 100_000
#: Nesting allowed in a file: statements (def, for, if, ...) above an expression of MAX_DEPTH.
MAX_FILE_DEPTH = MAX_DEPTH + 20


@dataclass(frozen=True)
class Clause:
    """``name=expr`` inside a directive's parentheses."""
    name: str
    expr: ast.expr
    loc: Locator            # maps positions in ``expr`` to the file
    line: int               # position of the clause name
    col: int


@dataclass(frozen=True)
class Directive:
    """One ``# @stream`` comment, parsed, with the module-level statement below it."""
    name: str
    clauses: tuple[Clause, ...]
    line: int               # position of the directive name (after ``@stream``)
    col: int
    target: ast.stmt        # the statement it is attached to
    end_line: int           # last comment line of the directive


@dataclass
class Source:
    """A parsed program file: text, ``ast`` tree and directives in file order."""
    path: str
    text: str
    lines: list[str]
    tree: ast.Module
    directives: list[Directive] = field(default_factory=list)

    def locator(self) -> Locator:
        return Locator(self.path, self.lines)

    def error(self, line: int, col: int | None, message: str, hint: str | None = None):
        text = self.lines[line - 1] if line and 0 < line <= len(self.lines) else None
        return DirectiveError(message, path=self.path, line=line, col=col, source_line=text,
                              hint=hint)


def scan(path) -> Source:
    """Read ``path``, parse it, and return its attached directives (errors for the rest)."""
    path = str(path)
    text = _read(path)
    lines = text.split("\n")
    tree = _parse_ast(path, text, lines)
    _LAST_IMPORTS[:] = [(text, import_statements(tree))]
    src = Source(path, text, lines, tree)

    comments = _directive_comments(src)
    if not comments:
        return src
    skeleton, origin = _skeleton(src, {line for line, *_ in comments})
    attached = _attached_lines(_parse_cst(path, skeleton, lines, origin), origin)
    by_line = {}
    for stmt in reversed(tree.body):
        by_line[stmt.lineno] = stmt
    consumed: set[int] = set()      # continuation lines of directives already read
    for line, col, comment, own_line in comments:
        if line in consumed:
            continue
        if not own_line:
            raise src.error(line, col + 1, "a directive must be on its own line",
                            "put it on the line directly above the statement it applies to")
        if line not in attached:
            raise _unattached(src, line, col)
        target = by_line.get(attached[line]) or \
            next(s for s in tree.body if s.lineno >= attached[line])
        directive = _parse_directive(src, line, col, comment, target)
        consumed.update(range(line, directive.end_line + 1))
        src.directives.append(directive)
    return src


# -- the program's import statements, for the local-module scan -----------------------------------

#: ``[(text, import statements)]`` of the program scanned last. The compiler looks for the
#: program's local modules (:func:`streammap.directives.imports.local_modules`) right after the
#: front end parsed it; on a program of 100,000 calls, parsing it a second time for its few
#: imports was a quarter of ``compile``. The entry is used only for the very same text.
_LAST_IMPORTS: list[tuple[str, list[ast.stmt]]] = []

_STATEMENT_CHILD = (ast.stmt, ast.excepthandler, ast.match_case)


def import_statements(tree: ast.Module) -> list[ast.stmt]:
    """Every ``import`` and ``from ... import`` statement of ``tree``, in :func:`ast.walk` order.

    Imports are statements, and statements sit only in the bodies of other statements (and of
    ``except`` handlers and ``case`` clauses), so the walk visits those alone, breadth first as
    :func:`ast.walk` does: the same statements in the same order, without visiting every
    expression of a long graph body.
    """
    found, todo = [], [tree]
    while todo:
        level, todo = todo, []
        for node in level:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                found.append(node)
            elif not isinstance(node, (ast.expr, ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Expr,
                                       ast.Return, ast.Pass)):
                todo.extend(c for c in ast.iter_child_nodes(node) if isinstance(c, _STATEMENT_CHILD))
    return found


def last_scanned_imports(text: str) -> list[ast.stmt] | None:
    """The import statements of the program last scanned, if its text was ``text``; else ``None``."""
    if _LAST_IMPORTS and _LAST_IMPORTS[0][0] == text:
        return _LAST_IMPORTS[0][1]
    return None


# -- reading and parsing the file ----------------------------------------------------------------

def _read(path: str) -> str:
    try:
        info = Path(path).stat()
        kind = not_regular(info.st_mode)
        if kind is not None:            # a FIFO blocks, /dev/zero never ends: refused before opening
            raise DirectiveError(f"{path} is {kind}, not a program file", path=path,
                                 hint="give the path of a .py file")
        size = info.st_size
        if size > MAX_SOURCE_BYTES:
            raise DirectiveError(f"program file is too large: {size} bytes (limit: {MAX_SOURCE_BYTES})",
                                 path=path, hint="is this the right file?")
        with tokenize.open(path) as fh:      # honours a coding cookie; universal newlines
            return fh.read()
    except (OSError, SyntaxError, UnicodeError, LookupError) as exc:   # UnicodeError: utf-16 without a BOM
        raise DirectiveError(f"cannot read program: {exc}", path=path) from None


def _parse_ast(path: str, text: str, lines: list[str]) -> ast.Module:
    tree = _parse_python(path, text, lines)
    if len(tree.body) > MAX_MODULE_STATEMENTS:
        line = tree.body[MAX_MODULE_STATEMENTS].lineno
        raise DirectiveError(f"the file has {len(tree.body)} module-level statements "
                             f"(limit: {MAX_MODULE_STATEMENTS}); this is the first past the limit",
                             path=path, line=line, source_line=lines[line - 1],
                             hint="keep data out of the program: kernels can read it from a file")
    deep = _deepest_code(tree, MAX_FILE_DEPTH)
    if deep is not None:
        raise too_deep(Locator(path, lines), deep, "code")
    return tree


def _parse_python(path: str, text: str, lines: list[str]) -> ast.Module:
    # The compiler's own parser first: its messages and positions are the ones users know.
    try:
        return ast.parse(text, filename=path)
    except SyntaxError as exc:
        line = exc.lineno
        src = lines[line - 1] if line and 0 < line <= len(lines) else None
        raise DirectiveError(f"invalid Python syntax: {exc.msg}", path=path, line=line,
                             col=exc.offset or None, source_line=src,
                             hint="the file must be valid Python before directives are read"
                             ) from None
    except (ValueError, RecursionError, MemoryError, OverflowError) as exc:
        raise DirectiveError(f"cannot parse program: {exc or type(exc).__name__}", path=path) from None


def _deepest_code(tree: ast.Module, limit: int):
    """:func:`~.safe_eval.deepest` of a whole file, without visiting the inside of simple
    one-line statements too short to be deep.

    Every level of an expression takes at least one character of its source, and the leaves
    below (a name's context, an operator) one more level, so a one-line simple statement of ``w``
    bytes at depth ``d`` has no node deeper than ``d + 2*w + 4``. A graph body of 100,000 short
    call lines is then checked in time proportional to its lines, not to its nodes.
    """
    last_positioned = tree
    stack = [(tree, 0)]
    while stack:
        node, depth = stack.pop()
        if hasattr(node, "lineno"):
            last_positioned = node
        if depth > limit:
            return last_positioned
        if isinstance(node, ast.stmt) and not hasattr(node, "body") \
                and node.lineno == node.end_lineno \
                and depth + 2 * (node.end_col_offset - node.col_offset) + 4 <= limit:
            continue
        stack.extend((child, depth + 1) for child in reversed(list(ast.iter_child_nodes(node))))
    return None


def _skeleton(src: Source, directive_lines: set[int]) -> tuple[str, list[int]]:
    """The file with the body of every module-level def and class cut to one ``pass``, and every
    run of module-level statements far from the directives (at ``directive_lines``) cut to one
    ``pass`` (see the module docstring); and ``origin[k]``: the file line of skeleton line ``k + 1``."""
    cuts: dict[int, tuple[int, str]] = _quiet_runs(src, directive_lines)   # first line -> (last, indentation)
    for stmt in src.tree.body:
        if not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        first = stmt.body[0]
        indent = src.lines[first.lineno - 1].encode("utf-8")[:first.col_offset].decode("utf-8", "replace")
        if first.lineno > stmt.lineno and not indent.strip():     # an indented block
            cuts[first.lineno] = (stmt.body[-1].end_lineno, indent)
    out: list[str] = []
    origin: list[int] = []
    line = 1
    while line <= len(src.lines):
        cut = cuts.get(line)
        out.append(src.lines[line - 1] if cut is None else cut[1] + "pass")
        origin.append(line)
        line = line + 1 if cut is None else cut[0] + 1
    return "\n".join(out), origin


def _quiet_runs(src: Source, directive_lines: set[int]) -> dict[int, tuple[int, str]]:
    """``{first line: (last line, "")}`` of each run of two or more module-level statements with
    no directive comment in them or in the lines between them and the statement before.

    No directive can belong to a statement of such a run, and the comments libcst attaches to the
    statements around it are outside it, so the run may reach libcst as one ``pass``. A run ends
    short of a line it shares with a statement outside it (``a = 1; b = 2``)."""
    body = src.tree.body
    marked = sorted(directive_lines)
    runs: dict[int, tuple[int, str]] = {}
    run: list[int] = []                         # indices of the statements of the current run
    for k, stmt in enumerate(body + [None]):
        if stmt is not None:
            above = body[k - 1].end_lineno + 1 if k else 1
            i = bisect.bisect_left(marked, above)
            quiet = i == len(marked) or marked[i] > stmt.end_lineno
            shares = (k and body[k - 1].end_lineno >= _first_line(stmt)) or \
                (k + 1 < len(body) and stmt.end_lineno >= _first_line(body[k + 1]))
            if quiet and not shares:
                run.append(k)
                continue
        if len(run) > 1:
            runs[_first_line(body[run[0]])] = (body[run[-1]].end_lineno, "")
        run = []
    return runs


def _parse_cst(path: str, text: str, lines: list[str], origin: list[int]):
    # libcst is imported here, not with this module: it is most of the import time of
    # ``streammap compile``, and a workflow (JSON) never reads directives.
    import libcst as cst  # noqa: PLC0415
    try:
        return cst.parse_module(text)
    except cst.ParserSyntaxError as exc:
        line = origin[exc.raw_line - 1] if 0 < exc.raw_line <= len(origin) else exc.raw_line
        src = lines[line - 1] if 0 < line <= len(lines) else None
        raise DirectiveError(f"invalid Python syntax: {exc.message}", path=path, line=line,
                             col=exc.raw_column + 1, source_line=src) from None
    except Exception as exc:   # noqa: BLE001 -- libcst fails inside itself on input ast accepted
        raise DirectiveError(f"cannot read the directives of this file: libcst failed "
                             f"({type(exc).__name__})", path=path,
                             hint="simplify the code around the directives (very long or deeply "
                                  "nested expressions)") from None


def _directive_comments(src: Source) -> list[tuple[int, int, str, bool]]:
    """Every ``# @stream`` comment: (line, 0-based col, text, alone on its line), in file order.

    The comments :mod:`tokenize` would give, found without tokenizing the whole file (see the
    module docstring).
    """
    spans = [(_first_line(stmt), stmt.end_lineno) for stmt in src.tree.body]
    starts = [first for first, _ in spans]
    inside: dict[int, list[tuple[int, int]]] = {}     # statement -> candidates within it
    found = []
    line, pos = 1, 0
    for m in _CANDIDATE.finditer(src.text):
        line += src.text.count("\n", pos, m.start())
        pos = m.start()
        col = pos - (src.text.rfind("\n", 0, pos) + 1)
        k = bisect.bisect_right(starts, line) - 1
        if k >= 0 and line <= spans[k][1]:
            inside.setdefault(k, []).append((line, col))
        elif col == src.lines[line - 1].index("#"):    # between statements: the line's comment
            found.append((line, col))
    for k, candidates in inside.items():
        found += _comments_at(src, spans[k][0], candidates)
    out = []
    for line, col in sorted(found):
        text = src.lines[line - 1]
        comment = text[col:]
        if _PRAGMA.match(comment):
            out.append((line, col, comment, not text[:col].strip()))
    return out


def _first_line(stmt: ast.stmt) -> int:
    decorators = getattr(stmt, "decorator_list", None)
    return min([stmt.lineno] + [d.lineno for d in decorators]) if decorators else stmt.lineno


def _comments_at(src: Source, first: int, candidates: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The ``candidates`` (line, col) that start a comment, tokenizing the module-level statement
    that holds them from its first line up to the last of them."""
    wanted = set(candidates)
    last = max(line for line, _ in candidates)
    readline = iter([text + "\n" for text in src.lines[first - 1:last]]).__next__
    found = []
    try:
        for tok in tokenize.generate_tokens(readline):     # StopIteration from readline: EOF
            if tok.start[0] + first - 1 > last:
                break
            if tok.type == tokenize.COMMENT:
                at = (tok.start[0] + first - 1, tok.start[1])
                if at in wanted:
                    found.append(at)
    except (tokenize.TokenError, SyntaxError):      # the statement goes on below the last line
        pass
    return found


# -- attachment (libcst) -------------------------------------------------------------------------

@functools.cache
def _visitor_class():
    """The libcst visitor class, defined on first use with libcst (see :func:`_parse_cst`)."""
    import libcst as cst  # noqa: PLC0415
    from libcst.metadata import PositionProvider  # noqa: PLC0415

    class _AttachedDirectives(cst.CSTVisitor):
        """Collects the ``# @stream`` comments directly above each module-level statement.

        Result: ``attached[comment_line] = statement_line`` where the statement line is the line
        ``ast`` gives the statement (the ``def`` line for a decorated function).
        """

        METADATA_DEPENDENCIES = (PositionProvider,)

        def __init__(self):
            super().__init__()
            self.attached: dict[int, int] = {}

        def visit_Module(self, node: cst.Module) -> bool:
            for i, stmt in enumerate(node.body):
                # Comment blocks that sit directly above a line of this statement: above its first
                # decorator (libcst keeps the first statement's in the module header), above each
                # further decorator, and between the decorators and the ``def``.
                above = (list(node.header) if i == 0 else []) + list(stmt.leading_lines)
                blocks = []
                for deco in getattr(stmt, "decorators", ()):
                    blocks.append(above + list(deco.leading_lines))
                    above = []
                blocks.append(above + list(getattr(stmt, "lines_after_decorators", ())))
                for block in blocks:
                    self._attach(self._directly_above(block), stmt)
            return False            # module-level only: nothing below needs visiting

        def _directly_above(self, lines) -> list[int]:
            """Lines of the directives in ``lines`` with no blank line between them and the code."""
            pending: list[int] = []
            for empty in lines:
                if empty.comment is None:
                    pending = []
                elif _PRAGMA.match(empty.comment.value):
                    pending.append(self.get_metadata(PositionProvider, empty.comment).start.line)
            return pending

        def _attach(self, pending: list[int], stmt) -> None:
            line = self.get_metadata(PositionProvider, stmt).start.line
            for comment_line in pending:
                self.attached[comment_line] = line

    return _AttachedDirectives


def _attached_lines(module, origin: list[int]) -> dict[int, int]:
    """``attached`` of the visitor (:func:`_visitor_class`) for the skeleton ``module``, in file lines."""
    from libcst.metadata import MetadataWrapper  # noqa: PLC0415
    visitor = _visitor_class()()
    MetadataWrapper(module, unsafe_skip_copy=True).visit(visitor)
    return {origin[comment - 1]: origin[stmt - 1] for comment, stmt in visitor.attached.items()}


def _unattached(src: Source, line: int, col: int) -> DirectiveError:
    """Explain why the directive at ``line`` belongs to no statement."""
    hint = ("a directive goes on the line directly above a module-level def or assignment "
            "(only other comment lines may stand between)")
    before = None
    for stmt in src.tree.body:
        if stmt.lineno <= line <= (stmt.end_lineno or stmt.lineno):
            return src.error(line, col + 1, f"directive inside {_describe_stmt(stmt)}", hint)
        if stmt.lineno < line:
            before = stmt
    if col > 0 and before is not None and hasattr(before, "body"):
        return src.error(line, col + 1, f"directive inside {_describe_stmt(before)}", hint)
    nxt = line + 1
    while nxt <= len(src.lines) and src.lines[nxt - 1].lstrip().startswith("#"):
        nxt += 1
    if nxt > len(src.lines) or not "".join(src.lines[nxt - 1:]).strip():
        return src.error(line, col + 1, "directive at the end of the file applies to nothing",
                         hint)
    if not src.lines[nxt - 1].strip():
        return src.error(line, col + 1, "directive is not directly above a statement "
                         f"(line {nxt} is blank)", hint)
    return src.error(line, col + 1, "directive is not attached to a module-level statement", hint)


def _describe_stmt(stmt: ast.stmt) -> str:
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return f"the body of function '{stmt.name}'"
    if isinstance(stmt, ast.ClassDef):
        return f"class '{stmt.name}'"
    return f"a module-level '{_keyword(stmt)}' statement"


def _keyword(stmt: ast.stmt) -> str:
    name = type(stmt).__name__
    return {"AsyncFor": "async for", "AsyncWith": "async with", "Expr": "expression",
            "Assign": "assignment", "AugAssign": "assignment", "AnnAssign": "assignment",
            "ImportFrom": "import"}.get(name, name.lower())


# -- directive text ------------------------------------------------------------------------------

def _parse_directive(src: Source, line: int, col: int, comment: str,
                     target: ast.stmt) -> Directive:
    m = _PRAGMA.match(comment)
    if m.group(1):
        raise src.error(line, col + 1, f"unknown pragma '@stream{m.group(1)}'",
                        "write '# @stream' followed by a space and a directive; "
                        + DIRECTIVES_HINT)
    rest = comment[m.end():]
    start = col + m.end() + len(rest) - len(rest.lstrip())
    segments = [(line, start, rest.strip())]
    while True:
        loc = Locator(src.path, src.lines, segments)
        body = "\n".join(seg[2] for seg in segments)
        if not body.strip():
            raise src.error(line, col + 1, "empty directive", DIRECTIVES_HINT)
        if len(body) > MAX_EXPR_CHARS:
            raise src.error(line, col + 1, f"directive is {len(body)} characters long "
                            f"(limit: {MAX_EXPR_CHARS})", DIRECTIVES_HINT)
        try:
            tree = ast.parse(body, mode="eval").body
            break
        except SyntaxError as exc:
            nxt = segments[-1][0] + 1
            text = src.lines[nxt - 1] if nxt <= len(src.lines) else ""
            # An open parenthesis continues on the next comment line.
            if "never closed" in exc.msg and text.lstrip().startswith("#") \
                    and len(segments) < _MAX_CONTINUATION and not _PRAGMA.match(text.lstrip()):
                hash_col = text.index("#")
                segments.append((nxt, hash_col + 1, text[hash_col + 1:]))
                continue
            raise loc.syntax_error(exc, "malformed directive",
                                   "write `# @stream NAME` or `# @stream NAME(clause=value, ...)`")
        except (ValueError, RecursionError, MemoryError, OverflowError) as exc:
            raise src.error(line, start + 1, f"malformed directive: {exc or type(exc).__name__}") from None
    deep = deepest(tree)
    if deep is not None:
        raise too_deep(loc, deep, "directive")

    if isinstance(tree, ast.Name):
        name_node, call = tree, None
    elif isinstance(tree, ast.Call) and isinstance(tree.func, ast.Name):
        name_node, call = tree.func, tree
    else:
        raise loc.error(tree, "malformed directive",
                        "write `# @stream NAME` or `# @stream NAME(clause=value, ...)`; "
                        + DIRECTIVES_HINT)
    name = name_node.id
    if name not in DIRECTIVES:
        close = difflib.get_close_matches(name, DIRECTIVES, n=1)
        hint = (f"did you mean '{close[0]}'? " if close else "") + DIRECTIVES_HINT
        raise loc.error(name_node, f"unknown directive '{name}'", hint)
    clauses = _clauses(name, call, loc) if call is not None else ()
    d_line, d_col = loc.position(name_node.lineno, name_node.col_offset)
    return Directive(name, clauses, d_line, d_col, target, segments[-1][0])


def _clauses(name: str, call: ast.Call, loc: Locator) -> tuple[Clause, ...]:
    allowed = DIRECTIVES[name]
    if allowed:
        hint = f"{name} clauses are {', '.join(allowed)}"
    else:
        hint = f"the {name} directive takes no clauses: write `# @stream {name}`"
    if call.args:
        arg = call.args[0]
        raise loc.error(arg, f"clauses of the {name} directive are written name=value", hint)
    seen: dict[str, int] = {}
    out = []
    for kw in call.keywords:
        if kw.arg is None:
            raise loc.error(kw, f"** is not allowed in a {name} directive", hint)
        line, col = loc.position(kw.lineno, kw.col_offset)
        if kw.arg not in allowed:
            close = difflib.get_close_matches(kw.arg, allowed, n=1)
            extra = f"did you mean '{close[0]}'? " if close else ""
            raise loc.error((line, col), f"unknown clause '{kw.arg}' in {name} directive",
                            extra + hint if allowed else hint)
        if kw.arg in seen:
            raise loc.error((line, col), f"clause '{kw.arg}' is given twice", hint)
        seen[kw.arg] = line
        out.append(Clause(kw.arg, kw.value, loc, line, col))
    return tuple(out)


@functools.lru_cache(maxsize=64)
def basename(path: str) -> str:
    """The file name used in task ids and sites (``fm_radio.py``); asked once per module-level
    statement, so remembered (a ``Path`` costs microseconds)."""
    return Path(path).name
