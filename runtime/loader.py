"""Load the program a plan runs: its kernels, with the plan's params in place.

The program is imported as a fresh module under a unique name (never ``__main__``, so its
``if __name__ == "__main__":`` block does not run), after checking that the file still matches the
plan's sha256. It runs as if the file had been written with the plan's params: the value of each
``# @stream param`` assignment is replaced by the plan's (``-D N=...``) in the syntax tree before
the module is executed, so module-level values computed from a param at import (``M = 2 * N``)
agree with it too. Line numbers are kept, so tracebacks point at the file as it is. The code is
compiled once per (file content, params) in a process (:func:`cached_program_code`), so runs after
the first skip compiling altogether.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import itertools
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Callable

from streammap.errors import StreamMapError
from streammap.plan import Plan, read_plan
from streammap.strategies.kernels import BUILTIN_KERNELS

_counter = itertools.count()


@dataclass
class Program:
    """A loaded program: its module and the kernels the plan calls, by name."""

    path: Path
    module: ModuleType
    kernels: dict[str, Callable] = field(default_factory=dict)

    def unload(self) -> None:
        """Forget the module and empty its namespace, once the run is over.

        A module's functions refer to its namespace (``__globals__``) and the namespace to them:
        a reference cycle that reference counting never frees. Left to the cyclic garbage
        collector, every run's program would add to its next pass, which then lands inside a
        later run of a process that runs plan after plan. Emptying the namespace, as the
        interpreter does to modules at exit, frees it at once. So kernels and values of the
        module must not be used after the run."""
        if sys.modules.get(self.module.__name__) is self.module:
            del sys.modules[self.module.__name__]
        self.module.__dict__.clear()


_PARAM = re.compile(r"#\s*@stream\s*param\b")


def program_code(path: Path, params: dict):
    """The code object of the program at ``path`` with its params' values replaced by ``params``
    (see the module docstring): the value of every module-level ``NAME = EXPR`` (or
    ``NAME: T = EXPR``) that a ``# @stream param`` comment is attached to (in the comment lines
    directly above it) and whose name ``params`` has becomes that constant."""
    text = path.read_text(encoding="utf-8")
    tree = ast.parse(text, filename=str(path))
    lines = text.splitlines()
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target = node.target
        else:
            continue
        if isinstance(target, ast.Name) and target.id in params and _param_directive_above(lines, node):
            node.value = ast.copy_location(ast.Constant(params[target.id]), node.value)
    return compile(tree, str(path), "exec")


@functools.lru_cache(maxsize=32)
def cached_program_code(path: str, sha256: str, params: tuple):
    """:func:`program_code` for a file whose content has ``sha256`` (checked by the caller), kept
    for the next run of the same program with the same ``params`` (``(name, value)`` pairs):
    parsing and compiling cost about a millisecond, more than a short run's whole overhead."""
    return program_code(Path(path), dict(params))


def _param_directive_above(lines: list[str], node: ast.stmt) -> bool:
    # The front end's own reader (streammap.directives.read_program) knows the param lines too,
    # but the runtime reads plans, not directives (and it costs ~30 ms a file): the file is the
    # one the plan was compiled from (sha256 checked), so the attached comment is all there is.
    k = node.lineno - 2                    # the line above, 0-based
    while k >= 0 and lines[k].lstrip().startswith("#"):
        if _PARAM.match(lines[k].lstrip()):
            return True
        k -= 1
    return False


def refuse_workflow(plan: Plan) -> None:
    """Raise when the plan comes from an imported workflow (nothing to run)."""
    if plan.source.kind == "workflow":
        raise StreamMapError(
            f"{plan.source.path} is an imported workflow: it can be mapped and scored, "
            "but it has no kernels to run",
            hint="run plans compiled from a Python program with '# @stream' directives")


def runnable_plan(plan, plan_path=None):
    """``(plan, plan_path, source)`` for a plan or a plan file that can run: read (the path then
    names the plan), not an imported workflow, and its source file unchanged since compiling
    (``source``: that file's path). What every executor checks before anything runs."""
    import os  # noqa: PLC0415

    if isinstance(plan, (str, os.PathLike)):
        plan_path = plan_path or plan
        plan = read_plan(plan)
    if not isinstance(plan, Plan):
        raise TypeError(f"run_plan needs a Plan or a plan file, not {type(plan).__name__}")
    refuse_workflow(plan)
    return plan, plan_path, plan.check_source()


def load_program(plan: Plan) -> Program:
    """Import the plan's program and look up its kernels.

    Raises
    ------
    StreamMapError
        The plan is an imported workflow, or a kernel the plan names is not a function of the file.
    PlanError
        The source file is missing or changed since the plan was compiled.
    """
    refuse_workflow(plan)
    path = plan.check_source().resolve()
    stem = re.sub(r"\W", "_", path.stem)
    name = f"_streammap_program_{stem}_{next(_counter)}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise StreamMapError(f"cannot import {path} as a Python module", path=path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module                      # dataclasses, pickling and typing need it there
    folder = str(path.parent)
    added = folder not in sys.path
    if added:                                       # like `python prog.py`: siblings are importable
        sys.path.insert(0, folder)
    try:
        code = cached_program_code(str(path), plan.source.sha256, tuple(sorted(plan.params.items())))
        exec(code, module.__dict__)           # noqa: S102 -- the user's program, as Python would
    except BaseException:
        sys.modules.pop(name, None)
        raise
    finally:
        if added:
            try:
                sys.path.remove(folder)
            except ValueError:
                pass
    for key, value in plan.params.items():
        setattr(module, key, value)
    program = Program(path=path, module=module)
    for kernel in dict.fromkeys(t.kernel for t in plan.tasks):
        fn = BUILTIN_KERNELS.get(kernel) or getattr(module, kernel, None)
        if fn is None or not callable(fn):
            program.unload()
            what = "is not defined" if fn is None else f"is a {type(fn).__name__}, not a function"
            raise StreamMapError(f"kernel {kernel!r} {what} in {path}", path=path,
                                 hint="the plan names kernels of its source file; compile the plan again")
        program.kernels[kernel] = fn
    return program
