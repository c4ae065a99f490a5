"""The program's local modules: the files beside it that it imports, found without running it.

A program may import modules of its own folder (``import helpers``, ``from mypkg import util``):
``python prog.py`` puts the program's folder first on ``sys.path``, so they are importable there.
Everything that runs the program elsewhere (a Ray worker on another node, a job of the service, a
Kubernetes pod) needs those files too, and ``streammap run`` must notice when one of them changed
after compiling. So the compiler records them in the plan (``source.modules``: path relative to the
program's folder, sha256), and this module finds them.

Policy
------
* **Static.** Every ``import`` statement of the file, wherever it is (module level, inside a
  kernel's body, under ``if``), is read with :mod:`ast`; nothing is executed. An import done by
  computing a name (``importlib.import_module(name)``, ``__import__``) is not seen.
* **Local** means: the dotted name resolves, from the program's folder as the first entry of
  ``sys.path``, to a file under that folder: ``NAME.py``, or a package ``NAME/__init__.py``
  (and its submodules ``NAME/SUB.py``, ``NAME/SUB/__init__.py``; a folder without
  ``__init__.py`` is a namespace package whose modules are found the same way). ``import a.b.c`` imports
  ``a``, ``a.b`` and ``a.b.c``, and ``from a import b`` imports ``b`` too when ``b`` is a
  submodule, so each of those that is a file is recorded. A name of the standard library is never
  local (the interpreter has imported most of them before a program runs, whatever lies beside
  it), and neither are installed packages (they are not files of the folder).
* **Transitive.** Each local module is read in turn, with its own imports; inside a local package,
  relative imports (``from . import x``, ``from ..sub import y``) resolve against the package as
  Python resolves them. In the program itself (a top-level script, not a package) a relative
  import is an error of Python's, so it is not followed.
* **Confined.** A candidate whose real path (links resolved) lies outside the program's folder
  is not local, so a link to ``/elsewhere`` or a relative import climbing above the folder's
  top-level packages records nothing: nothing outside the folder ever travels with a plan.
* **Bounded.** At most :data:`MAX_LOCAL_MODULES` modules, each at most
  :data:`~streammap.directives.scan.MAX_SOURCE_BYTES`; a local module that is not valid Python
  is a :class:`~streammap.errors.DirectiveError` at its own file, line and column.

:func:`local_modules` returns them sorted by path, each once; paths use ``/`` whatever the
platform, so a plan reads the same everywhere.
"""

from __future__ import annotations

import ast
import hashlib
import io
import sys
import tokenize
from dataclasses import dataclass
from pathlib import Path

from streammap.directives.scan import MAX_SOURCE_BYTES, import_statements, last_scanned_imports
from streammap.errors import DirectiveError

#: Most local modules one program may import (a program is a few files, not a source tree).
MAX_LOCAL_MODULES = 256


@dataclass(frozen=True)
class LocalModule:
    """One file of the program's folder that the program imports."""

    path: str           #: relative to the program's folder, ``/``-separated
    sha256: str


@dataclass(frozen=True)
class _Found:
    """A local module being read: its file and the package its relative imports resolve against."""

    file: Path          #: as Python would open it (under the folder, links not resolved)
    package: str        #: dotted package of the module ('' for a top-level module)


def local_modules(program) -> list[LocalModule]:
    """The local modules the program at ``program`` imports, directly or not (see the module docstring).

    Raises
    ------
    DirectiveError
        A local module that cannot be read or parsed (its file, line, column), or more than
        :data:`MAX_LOCAL_MODULES` of them.
    """
    program = Path(program)
    folder = program.parent
    root = folder.resolve()
    found: dict[str, _Found] = {}               # path relative to the folder -> module
    queue = [(program, "", _program_imports(program, folder))]
    while queue:
        path, package, statements = queue.pop()
        for name in _imported_names(statements, package):
            for module in _resolve(name, folder, root):
                rel = module.file.relative_to(folder).as_posix()
                if rel in found or module.file.resolve() == program.resolve():
                    continue
                found[rel] = module
                if len(found) > MAX_LOCAL_MODULES:
                    raise DirectiveError(f"the program imports more than {MAX_LOCAL_MODULES} local modules",
                                         path=program, hint="a program's folder holds a few modules; install "
                                                            "a larger code base as a package instead")
                queue.append((module.file, module.package, import_statements(_tree(module.file, folder))))
    return [LocalModule(rel, hashlib.sha256(found[rel].file.read_bytes()).hexdigest()) for rel in sorted(found)]


def _program_imports(program: Path, folder: Path) -> list[ast.stmt]:
    """The program's import statements: those the front end found when it parsed this very text
    (:func:`~streammap.directives.scan.last_scanned_imports`), else from a parse of its own."""
    try:
        raw = program.read_bytes()
        encoding, _ = tokenize.detect_encoding(io.BytesIO(raw).readline)
        text = io.TextIOWrapper(io.BytesIO(raw), encoding).read()    # as the front end read it
    except (OSError, SyntaxError, UnicodeError, LookupError):
        text = None                  # _tree gives the error
    found = last_scanned_imports(text) if text is not None else None
    return found if found is not None else import_statements(_tree(program, folder, is_program=True))


def _tree(path: Path, folder: Path, is_program: bool = False) -> ast.Module:
    """The syntax tree of ``path``; a bad local module is an error at its own position."""
    shown = path if is_program else _shown(path, folder)
    try:
        size = path.stat().st_size
        if size > MAX_SOURCE_BYTES:
            raise DirectiveError(f"local module is too large: {size} bytes (limit: {MAX_SOURCE_BYTES})",
                                 path=shown, hint="is this the right file?")
        text = path.read_bytes()
    except OSError as exc:
        raise DirectiveError(f"cannot read local module: {exc.strerror or exc}", path=shown) from None
    try:
        return ast.parse(text, filename=str(shown))
    except SyntaxError as exc:
        lines = text.decode("utf-8", errors="replace").splitlines()
        line = exc.lineno
        source_line = lines[line - 1] if line and 0 < line <= len(lines) else None
        raise DirectiveError(f"invalid Python syntax in a module the program imports: {exc.msg}",
                             path=shown, line=line, col=exc.offset or None, source_line=source_line,
                             hint="every local module the program imports must be valid Python") from None
    except (ValueError, RecursionError, MemoryError) as exc:
        raise DirectiveError(f"cannot parse local module: {exc or type(exc).__name__}", path=shown) from None


def _shown(path: Path, folder: Path) -> Path:
    # Errors name a local module as the user wrote the program's path: prog's folder / module.
    try:
        return folder / path.relative_to(folder)
    except ValueError:
        return path


def _imported_names(statements: list[ast.stmt], package: str) -> list[str]:
    """Every absolute dotted name the import ``statements`` of a module may load, in their order.

    ``package`` is the module's package for relative imports ('' in a top-level module, where a
    relative import is Python's error and is skipped)."""
    names: list[str] = []
    for node in statements:
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node.module, node.level, package)
            if base is None:
                continue
            names.append(base)
            names += [f"{base}.{a.name}" for a in node.names if a.name != "*"]
    return names


def _absolute(module: str | None, level: int, package: str) -> str | None:
    """The absolute name ``from <level dots><module> import`` means inside ``package``, or None
    where Python refuses it (beyond the top-level package, or in a top-level module)."""
    if level == 0:
        return module
    parts = package.split(".") if package else []
    if level > len(parts):
        return None
    base = parts[: len(parts) - level + 1]
    if module:
        base += module.split(".")
    return ".".join(base) or None


def _resolve(name: str, folder: Path, root: Path) -> list[_Found]:
    """The local files importing ``name`` runs: one per prefix (``a``, ``a.b``, ``a.b.c``) that is
    a file under the folder, stopping at the first that is not (Python would stop there too)."""
    parts = name.split(".")
    if parts[0] in sys.stdlib_module_names or parts[0] in sys.builtin_module_names:
        return []
    out: list[_Found] = []
    here = folder
    for i, part in enumerate(parts):
        if not part.isidentifier():
            break
        package = here / part
        init = package / "__init__.py"
        if _inside(init, root):
            out.append(_Found(init, ".".join(parts[: i + 1])))
            here = package
            continue
        module = here / f"{part}.py"
        if _inside(module, root):
            out.append(_Found(module, ".".join(parts[:i])))
        elif _inside_folder(package, root):     # a namespace package: a folder without __init__.py
            here = package
            continue
        break
    return out


def _inside_folder(path: Path, root: Path) -> bool:
    try:
        return path.is_dir() and path.resolve().is_relative_to(root)
    except (OSError, RuntimeError):
        return False


def _inside(path: Path, root: Path) -> bool:
    """``path`` is a file whose real location is under ``root`` (links followed, then compared)."""
    try:
        return path.is_file() and path.resolve().is_relative_to(root)
    except (OSError, RuntimeError):         # a link loop
        return False
