"""One admitted job, run by the job service in its own process: ``python -P -m streammap.tenancy.worker DIR``.

``DIR/job.json`` says what to run: the program (a file in ``DIR``), its params and entry, the
sub-cluster of the devices the job was granted (a cluster-file dict), the mapper, and how to run
(``emulate``, ``backend``, ``address``), and for a job granted a fraction of its GPU, ``share``
(joint placement: the worker holds the job to it, :func:`hold_to_share`). The worker compiles the program against that
sub-cluster, so the plan is re-mapped onto exactly the granted devices (the program's local
modules, kept beside it in ``DIR``, are recorded in the plan and imported from ``DIR``), writes ``plan.yaml``,
runs it with :func:`streammap.runtime.run_plan` (the local executor, or Ray), and leaves
``exit.json`` (``{"status": "done"}`` or ``{"status": "failed", "error": ...}``) as its last act.
Its own process (and session) means a cancelled or preempted job is a signal away, and a job
outlives a service that is killed: the restarted service finds the worker again by its pid.

Imports (the job fills its folder: its program, its local modules, whatever it writes as it runs)
-------------------------------------------------------------------------------------------------
* The worker is started with ``python -P`` (:func:`.sandbox.worker_argv`): its folder is not on
  ``sys.path``, so a ``json.py``, ``yaml.py`` or ``streammap/`` of the job's is never imported in
  place of a module the worker runs on, and the exit note is written by the worker's own code.
* While the program runs, the runtime puts its folder on ``sys.path`` (a kernel may import its
  local modules late, as under ``python prog.py``). :class:`FolderLast` keeps the folder last for
  every top-level name: a module found anywhere else (Python's, an installed package's) comes
  from there, and the folder serves only what exists nowhere else, the program's own modules.
* A program that imports a module its folder holds a file of, named like a module of Python, of
  StreamMAP or of an installed package (``import json`` beside a ``json.py``; a local ``yaml.py``
  the compiler records as the program's), fails before it is compiled, its exit note saying which
  file to rename (:func:`refuse_shadowing`): in a job such a file would not be what it imports.

The service does not start it itself: the sandbox launcher (:mod:`.sandbox`) starts it inside the
job's namespaces, under the job's limits, with ``DIR`` as working directory and the only folder
it may write (besides a private ``/tmp``). A worker that dies before its exit note (a signal, a
limit, ``os._exit``) is failed by the service from the launcher's exit status.
"""

from __future__ import annotations

import ast
import importlib.abc
import importlib.machinery
import json
import os
import sys
import traceback
from pathlib import Path

from streammap.compiler import compile as compile_plan
from streammap.directives.imports import local_modules
from streammap.directives.scan import import_statements
from streammap.errors import KernelError, StreamMapError
from streammap.io.files import atomic_write_text
from streammap.plan import write_plan
from streammap.runtime import run_plan
from streammap.runtime.shared import DEVICE_SHARE_ENV
from streammap.tenancy import sandbox


def run_job(folder) -> int:
    folder = Path(folder)
    FolderLast.install(folder)
    job = json.loads((folder / "job.json").read_text())
    if job.get("share") is not None:
        hold_to_share(float(job["share"]))
    try:
        refuse_shadowing(folder, folder / job["source"])
        plan = compile_plan(folder / job["source"], job["cluster"], params=job.get("params") or {},
                            mapper=job.get("mapper", "auto"), entry=job.get("entry"), history=False)
        write_plan(plan, folder / "plan.yaml")
        print(f"compiled onto {', '.join(d.id for d in plan.devices)}: {len(plan.tasks)} tasks, "
              f"estimated makespan {plan.mapper.estimated_makespan:.4g} s", flush=True)
        outputs = run_plan(plan, emulate=job.get("emulate", False), outputs_path=folder / "result.npz",
                           record_path=folder / "result.run.json", plan_path=folder / "plan.yaml", progress=False,
                           backend=job.get("backend", "local"), address=job.get("address"))
        print(f"done: {', '.join(outputs)}", flush=True)
        status = {"status": "done"}
    except (StreamMapError, KernelError) as exc:
        print(exc.format(), file=sys.stderr, flush=True)
        status = {"status": "failed", "error": exc.format()}
    except Exception as exc:  # noqa: BLE001 - the service must learn of any failure
        traceback.print_exc()
        status = {"status": "failed", "error": f"{type(exc).__name__}: {exc}"}
    atomic_write_text(folder / "exit.json", json.dumps(status), what="exit note")
    return 0 if status["status"] == "done" else 1


class FolderLast(importlib.abc.MetaPathFinder):
    """A finder that keeps the job's ``folder`` last among the entries of ``sys.path`` for
    top-level modules, wherever the folder stands in it (see the module docstring).

    Placed just before Python's path finder: for a top-level name it looks on ``sys.path``
    without the folder, and only where that finds nothing (or a bare namespace folder) does the
    path finder that follows look in the folder too. Submodules are found in their package's
    own folder, as always.
    """

    def __init__(self, folder):
        self.folder = os.path.realpath(folder)
        self._real: dict[str, str] = {}          # sys.path entry -> its real path (entries are few)

    @classmethod
    def install(cls, folder) -> FolderLast:
        finder = cls(folder)
        at = next((i for i, f in enumerate(sys.meta_path) if f is importlib.machinery.PathFinder), len(sys.meta_path))
        sys.meta_path.insert(at, finder)
        return finder

    def find_spec(self, name, path=None, target=None):
        if path is not None:
            return None
        others = [p for p in sys.path if not self._is_folder(p)]
        if len(others) == len(sys.path):
            return None                          # the folder is not on the path: nothing to keep last
        spec = importlib.machinery.PathFinder.find_spec(name, others, target)
        if spec is None or spec.origin in (None, "namespace"):
            return None                          # the folder's own module (or package) wins over a bare folder
        return spec

    def _is_folder(self, entry) -> bool:
        if not isinstance(entry, str):
            return False
        if entry not in self._real:
            self._real[entry] = os.path.realpath(entry or os.getcwd())     # '': the working folder
        return self._real[entry] == self.folder


def refuse_shadowing(folder: Path, program: Path) -> None:
    """Refuse a program that imports a module its folder holds a file of, named like a module of
    Python, of StreamMAP or of an installed package (see the module docstring).

    Raises
    ------
    StreamMapError
        At the import statement, naming the file to rename.
    """
    files = [program] + [folder / m.path for m in local_modules(program)]
    for file in files:
        for top, line, col in _imported_tops(file):
            spec = importlib.machinery.PathFinder.find_spec(top, [str(folder)])
            if spec is None or spec.origin in (None, "namespace"):
                continue
            what = sandbox.shadows(top, exclude=(folder,))
            if what is None:
                continue
            rel = os.path.relpath(spec.origin, folder)
            raise StreamMapError(
                f"the job's folder holds {rel}, named like the module {top!r} of {what}, which this file imports",
                path=file, line=line, col=col,
                hint=f"in a job, a file of its folder never stands in for a module of {what}: rename {rel} "
                     "(and the imports of it)")


def _imported_tops(file: Path) -> list[tuple[str, int, int]]:
    """``(top-level name, line, column)`` of each absolute import in ``file`` (none if it does not
    parse: compiling it says why)."""
    try:
        tree = ast.parse(file.read_bytes(), filename=str(file))
    except (OSError, SyntaxError, ValueError, RecursionError):
        return []
    out = []
    for node in import_statements(tree):
        if isinstance(node, ast.Import):
            out += [(a.name.split(".", 1)[0], node.lineno, node.col_offset + 1) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append((node.module.split(".", 1)[0], node.lineno, node.col_offset + 1))
    return out


def hold_to_share(share: float) -> None:
    """A job granted a fraction of its GPU (joint placement) is held to it: the runtime admits its
    tasks within the fraction (``STREAMMAP_DEVICE_SHARE``), and where CUDA MPS runs, MPS caps its
    kernels at that share of the GPU's SMs (``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE``). Set before
    anything touches CUDA."""
    os.environ[DEVICE_SHARE_ENV] = f"{share:g}"
    os.environ["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(max(1, round(100 * share)))


if __name__ == "__main__":
    sys.exit(run_job(sys.argv[1]))
