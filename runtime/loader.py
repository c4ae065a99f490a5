"""Load the program a plan runs: its kernels, with the plan's params in place.

The program is imported as a fresh module under a unique name (never ``__main__``, so its
``if __name__ == "__main__":`` block does not run), after checking that the file still matches the
plan's sha256. It runs as if the file had been written with the plan's params: the value of each
``# @stream param`` assignment is replaced by the plan's (``-D N=...``) in the syntax tree before
the module is executed, so module-level values computed from a param at import (``M = 2 * N``)
agree with it too. Only names the program declares as params are set (a plan that names another,
such as a kernel or ``np``, is refused: :func:`check_declared`); that the values are the ones the
plan was compiled for is checked when the plan is read (:func:`streammap.plan.check_params_digest`).
Line numbers are kept, so tracebacks point at the file as it is. The code is
compiled once per (file content, params) in a process (:func:`cached_program_code`), so runs after
the first skip compiling altogether.

Local modules (``import helpers`` of a ``helpers.py`` beside the program; the plan's
``source.modules``, checked unchanged with the program). As under ``python prog.py``, the
program's folder is first on ``sys.path`` while the program is loaded, and stays there until
:meth:`Program.unload` (a kernel may import a module in its body, at run time). Python keeps
imported modules in ``sys.modules`` by name, so a second program with a ``helpers.py`` of its own,
or the same program after an edit, would get the first one's module: before the program runs,
every module of ``sys.modules`` named like one of its local modules (``helpers``, ``mypkg`` and
``mypkg.*``) is set aside, so its own files are imported afresh, and every module it imported from
its folder is forgotten when it is unloaded: the recorded ones, and those the plan does not know
of (a package's submodule a kernel imported lazily during the run, a package imported by name
with ``importlib.import_module``), which the next program would otherwise get in place of its own.

Once loaded, the process is warmed (:func:`streammap.runtime.warm.warm_up`): the library
submodules the program's code names that load lazily (``np.random``, ``np.fft``) are imported and
the C allocator is settled, as discovery did before it measured the rates the estimates use, so
that the first tasks of a fresh process do not pay for them inside the run's clock.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import inspect
import itertools
import logging
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Callable

from streammap.errors import PlanError, StreamMapError, shown
from streammap.plan import Plan, read_plan, task_line
from streammap.runtime.warm import warm_up
from streammap.strategies.kernels import BUILTIN_KERNELS

log = logging.getLogger("streammap.runtime")

_counter = itertools.count()


@dataclass
class Program:
    """A loaded program: its module and the kernels the plan calls, by name."""

    path: Path
    module: ModuleType
    kernels: dict[str, Callable] = field(default_factory=dict)
    #: ``sys.modules`` names of the local modules it imported (forgotten on unload)
    local_names: list[str] = field(default_factory=list)
    #: the program's folder, when loading put it on ``sys.path`` (taken off on unload)
    path_entry: str | None = None
    #: the names ``sys.modules`` held before the program ran: a module added since from the
    #: program's folder (a submodule a kernel imported during the run) is forgotten on unload too
    modules_before: frozenset = frozenset()

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
        for name in self.local_names + _loaded_from(self.path.parent, self.modules_before):
            sys.modules.pop(name, None)
        self.local_names = []
        if self.path_entry is not None:
            _remove_path(self.path_entry)
            self.path_entry = None


_PARAM = re.compile(r"#\s*@stream\s*param\b")


def program_code(path: Path, params: dict):
    """``(code, declared)``: the code object of the program at ``path`` with its params' values
    replaced by ``params`` (see the module docstring), and the names of its params.

    The value of every module-level ``NAME = EXPR`` (or ``NAME: T = EXPR``) that a
    ``# @stream param`` comment is attached to (in the comment lines directly above it) and
    whose name ``params`` has becomes that constant; ``declared`` holds every such ``NAME``."""
    text = path.read_text(encoding="utf-8")
    tree = ast.parse(text, filename=str(path))
    lines = text.splitlines()
    declared = set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target = node.target
        else:
            continue
        if isinstance(target, ast.Name) and _param_directive_above(lines, node):
            declared.add(target.id)
            if target.id in params:
                node.value = ast.copy_location(ast.Constant(params[target.id]), node.value)
    return compile(tree, str(path), "exec"), frozenset(declared)


@functools.lru_cache(maxsize=32)
def cached_program_code(path: str, sha256: str, params: tuple):
    """:func:`program_code` for a file whose content has ``sha256`` (checked by the caller), kept
    for the next run of the same program with the same ``params`` (``(name, value)`` pairs):
    parsing and compiling cost about a millisecond, more than a short run's whole overhead."""
    return program_code(Path(path), dict(params))


def check_declared(plan: Plan, path: Path, declared: frozenset) -> None:
    """Refuse a plan param that is not a ``# @stream param`` of the program: setting it would
    replace whatever the module calls so (a kernel, ``np``, ``__builtins__``)."""
    unknown = sorted(set(plan.params) - declared)
    if unknown:
        known = ", ".join(sorted(declared)) or "none"
        raise PlanError(f"the plan sets {unknown[0]!r}, which is not a # @stream param of {path.name}",
                        hint=f"its params: {known}; compile the plan again (streammap compile {path.name} "
                             "-D NAME=VALUE ...)")


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


def load_program(plan: Plan, source: Path | None = None, warm: bool = True) -> Program:
    """Import the plan's program and look up its kernels; ``warm``: then warm the process for its
    tasks (:func:`~streammap.runtime.warm.warm_up`; not for a process that runs none).

    ``source``: the program's file as :func:`runnable_plan` returned it, checked just before
    (its sha256 is not computed twice in a run); by default it is checked here.

    Raises
    ------
    StreamMapError
        The plan is an imported workflow, or a kernel the plan names is not a function of the file.
    PlanError
        The source file is missing or changed since the plan was compiled.
    """
    refuse_workflow(plan)
    path = (plan.check_source() if source is None else source).resolve()
    stem = re.sub(r"\W", "_", path.stem)
    name = f"_streammap_program_{stem}_{next(_counter)}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise StreamMapError(f"cannot import {path} as a Python module", path=path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module                      # dataclasses, pickling and typing need it there
    folder = str(path.parent)
    tops = local_top_names(plan)
    _forget_modules(tops)                           # this program's own files, not another's
    before = frozenset(sys.modules)
    added = folder not in sys.path
    if added:                                       # like `python prog.py`: siblings are importable
        sys.path.insert(0, folder)
    try:
        code, declared = cached_program_code(str(path), plan.source.sha256, tuple(sorted(plan.params.items())))
        check_declared(plan, path, declared)
        exec(code, module.__dict__)           # noqa: S102 -- the user's program, as Python would
    except BaseException:
        sys.modules.pop(name, None)
        _forget_modules(tops)
        for n in _loaded_from(path.parent, before):
            sys.modules.pop(n, None)
        if added:
            _remove_path(folder)
        raise
    for key, value in plan.params.items():
        setattr(module, key, value)
    # The local modules the plan records, and any other module the program imported from its
    # folder (by a name the compiler's static search does not see: importlib.import_module).
    local_names = list(dict.fromkeys(_modules_named(tops) + _loaded_from(path.parent, before)))
    tops |= {n.split(".", 1)[0] for n in local_names}
    program = Program(path=path, module=module, path_entry=folder if added else None,
                      local_names=local_names, modules_before=before)
    for kernel in dict.fromkeys(t.kernel for t in plan.tasks):
        fn = BUILTIN_KERNELS.get(kernel) or getattr(module, kernel, None)
        if fn is None or not callable(fn):
            program.unload()
            what = "is not defined" if fn is None else f"is a {type(fn).__name__}, not a function"
            raise StreamMapError(f"kernel {kernel!r} {what} in {path}", path=path,
                                 hint="the plan names kernels of its source file; compile the plan again")
        program.kernels[kernel] = fn
    try:
        check_arguments(plan, program.kernels)
    except PlanError:
        program.unload()
        raise
    if warm:
        warm_up([module, *(sys.modules[n] for n in program.local_names if n in sys.modules)], frozenset(tops))
    return program


def check_program(plan: Plan, source: Path | None = None) -> None:
    """The checks of :func:`load_program` (the kernels the plan names exist, each task's arguments
    fit its kernel: :func:`check_arguments`) for a process that runs no kernel itself: the Ray
    driver, before any actor starts. The program is loaded and unloaded at once.

    Each actor loads the program again and makes the same checks; from there a refusal reaches the
    driver only as an actor that could not start, after the run has begun. Here it is the local
    run's error (the plan file, the task's line, the kernel's signature; exit status 2) with
    nothing written. A program whose own code fails to import in this process (a module that only
    the workers have, such as CuPy on a head node without GPUs) is not refused for that: its
    checks are left to the actors, as before.

    Raises
    ------
    StreamMapError, PlanError
        As :func:`load_program` does.
    """
    try:
        program = load_program(plan, source, warm=False)
    except StreamMapError:
        raise
    except Exception as exc:  # noqa: BLE001 -- the program's own import, which the workers may pass
        log.info("the program cannot be imported on the driver (%s: %s); its kernels are checked by the actors",
                 type(exc).__name__, exc)
        return
    program.unload()


def check_arguments(plan: Plan, kernels: dict[str, Callable]) -> None:
    """Refuse a task whose arguments do not fit its kernel's parameters, before anything runs.

    A plan's ``args``/``kwargs`` are read as data (:func:`streammap.plan.read_plan` checks their
    shape and refs); whether they fit the kernel can only be known once the program is loaded.
    Without this check, a plan edited to pass one argument too many failed in the middle of the
    run, with exit status 1, as if the kernel had raised. Tasks are grouped by (kernel, number of
    positional arguments, keyword names), so each distinct call shape is bound once
    (:meth:`inspect.Signature.bind`) however many tasks share it; a kernel whose signature Python
    cannot inspect (a C function) is not checked.

    Raises
    ------
    PlanError
        For the first task whose call would not bind: the plan file, the task's line there, the
        kernel's parameters and why the call does not fit.
    """
    shapes: dict[tuple, int] = {}
    for i, t in enumerate(plan.tasks):
        shapes.setdefault((t.kernel, len(t.args), tuple(t.kwargs) if t.kwargs else ()), i)
    signatures: dict[str, inspect.Signature | None] = {}
    for (kernel, n_args, names), i in shapes.items():
        if kernel not in signatures:
            try:
                signatures[kernel] = inspect.signature(kernels[kernel])
            except (TypeError, ValueError):         # no signature to read: the call decides
                signatures[kernel] = None
        signature = signatures[kernel]
        if signature is None:
            continue
        try:
            signature.bind(*range(n_args), **dict.fromkeys(names))
        except TypeError as exc:
            t = plan.tasks[i]
            args = f"{n_args} positional argument{'s' if n_args != 1 else ''}" + \
                (f" and keyword{'s' if len(names) != 1 else ''} {', '.join(names)}" if names else "")
            raise PlanError(f"task {shown(t.id, 120)} calls kernel {kernel}{signature} with {args}: {exc}",
                            path=plan._file, line=task_line(plan, i),
                            hint=f"a task's args (and kwargs) are its call's arguments, one for each parameter of "
                                 f"its kernel: give {kernel} the arguments it takes, or compile the program "
                                 f"again for a valid plan") from None


def local_top_names(plan: Plan) -> set[str]:
    """The top-level import names of the plan's local modules (``helpers``, ``mypkg``)."""
    return {m.path.split("/", 1)[0].removesuffix(".py") for m in plan.source.modules}


def _modules_named(tops: set[str]) -> list[str]:
    """Names in ``sys.modules`` that are ``tops`` or inside them (``mypkg.util``)."""
    if not tops:                # a one-file program: no walk over every module of the process
        return []
    return [n for n in list(sys.modules) if n.split(".", 1)[0] in tops]


def _loaded_from(folder: Path, before: frozenset) -> list[str]:
    """Names added to ``sys.modules`` since ``before``, in a package that was not there before
    either, whose module was loaded from a file (or, a namespace package, a folder) inside
    ``folder``. Only the new names are looked at: a set difference, not a walk over every module
    of the process. A submodule of a package loaded before the program (StreamMAP's own, when the
    program sits in the repository that holds it) is the process's, never the program's."""
    inside = str(folder).rstrip("/") + "/"
    found = []
    for n in set(sys.modules) - before:
        if n.split(".", 1)[0] in before:
            continue
        module = sys.modules.get(n)
        where = [getattr(module, "__file__", None) or ""] + list(getattr(module, "__path__", None) or ())
        if any(isinstance(w, str) and w.startswith(inside) for w in where):
            found.append(n)
    return sorted(found)


def _forget_modules(tops: set[str]) -> None:
    for n in _modules_named(tops):
        sys.modules.pop(n, None)


def _remove_path(entry: str) -> None:
    try:
        sys.path.remove(entry)
    except ValueError:
        pass


@dataclass(frozen=True)
class ProgramFiles:
    """The bytes of a plan's program and its local modules: what a machine without the program's
    folder (a Ray worker on another node) needs to run the plan."""

    name: str                                       #: the program's file name
    text: bytes
    modules: dict[str, bytes] = field(default_factory=dict)     #: recorded path -> bytes

    @classmethod
    def of(cls, plan: Plan) -> "ProgramFiles":
        """Read the plan's files (call after :meth:`Plan.check_source`: they are the recorded ones)."""
        path = Path(plan.source.path)
        return cls(path.name, path.read_bytes(), {rel: f.read_bytes() for rel, f in plan.module_files().items()})

    def present(self, plan: Plan) -> bool:
        """Whether the plan's own paths hold exactly these files (a shared file system, one machine)."""
        path = Path(plan.source.path)
        wanted = {path: self.text, **{f: self.modules.get(rel) for rel, f in plan.module_files().items()}}
        return all(f.is_file() and f.read_bytes() == data for f, data in wanted.items())

    def materialize(self, plan: Plan, folder: Path) -> Plan:
        """Write the files into ``folder`` (the program at its top, modules at their recorded paths)
        and return the plan with its source there."""
        for rel, data in self.modules.items():
            target = folder / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        (folder / self.name).write_bytes(self.text)
        return plan.model_copy(update={"source": plan.source.model_copy(update={"path": str(folder / self.name)})})
