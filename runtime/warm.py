"""What a process does once, after loading a plan's program and before its clock starts.

Task estimates price a kernel's own work at the rates discovery measured
(:mod:`streammap.cluster.microbench`), in a process whose libraries are loaded and whose C
allocator has settled: discovery imports what it measures before it times it, and it allocates
and frees :data:`~streammap.cluster.microbench.SETTLE_BYTES` first, as a running program has long
since done. ``streammap run`` (and each Ray actor) is a fresh process, and without this module its
first tasks paid two costs of being first that no estimate models, and that each process pays
only once:

- **lazy imports.** NumPy 2 imports ``numpy.random``, ``numpy.fft`` and several other
  submodules on the first access of ``np.random`` etc., inside whichever task touches it first.
  In fresh runs of ``samples/fm_radio.py`` at N=65536 on a 2-core EPYC VM (median of 7, thread
  CPU time), ``source``'s first call took 25.2 ms of CPU against 13.3 ms in a second pass, of
  which ``np.random.default_rng`` alone took 23.5 ms against 0.2 (an import of ~20 modules);
  ``lowpass`` 14.2 against 6.0, its first FFT 3.4 ms more than its second.
- **page faults.** Until the process frees a block of more than 128 KiB, glibc maps every such
  result array from the kernel afresh and faults in each 4 KiB page (~2.5-3.5 us each): ~3,000
  faults in the first two tasks of the same runs, ~10 ms of CPU over the run's first pass.

So the run does what discovery did before measuring: :func:`import_named_submodules` imports the
submodules the program's code names that are not imported yet (found statically, below), and
:func:`streammap.cluster.microbench.settle_allocator` settles the allocator. Both happen while
the program is loaded, outside the run's clock, as the program's own ``import numpy`` already
does: the run's task times then measure the kernels' work, which is what estimates, history and
``streammap profile`` (whose runs follow a warm-up) all mean by a task's time. Both backends load
programs through :func:`streammap.runtime.loader.load_program`, which calls :func:`warm_up`.

Which submodules
----------------
A submodule ``P.s`` is imported when a function of the program or of its local modules (or a
function nested in one) reads the attribute ``s`` (``np.random``, ``xp.fft``, ``from numpy
import fft``: :func:`code_names`), ``P`` is an installed package the program holds at module
level (``import scipy``) or an array library loaded in the process (NumPy; CuPy once a GPU plan
imported it), ``P`` loads submodules lazily (a module ``__getattr__``, PEP 562, as NumPy 2 and SciPy
have), ``s`` is not yet an attribute of ``P``, and ``P.s`` exists
(:func:`importlib.util.find_spec`); it is then read as the kernel will read it, ``getattr(P, s)``,
so that ``P``'s own rule decides. A package without that rule is left alone: a kernel reading a
submodule it never imported fails under StreamMAP as it does in plain Python. The array module a kernel gets at run time is unknown
statically (``xp = array_module(x)``), hence the attribute names alone: a name that only looks
like a submodule (an attribute ``random`` of some other object) costs an import the run did not
need, never an error; a submodule that fails to import is left for the kernel's own first call to
raise. The program's own packages (its local modules) are not warmed: a submodule it imports in a
kernel's body is imported when the program says.

What it leaves
--------------
The first touch of the memory a run's working set needs (the heap grows once, then is reused):
in the runs above, ``source`` and ``lowpass`` still took ~1,100 and ~500 faults, 12.0 and 5.5 ms of
CPU against 8.3 and 3.2 ms in a second pass, and the whole first pass 35.2 ms of task CPU against
27.4 (61.7 before this module). Pre-faulting a heap of the plan's size would move that too, at
the cost of memory the run may never use; it is the program's own work, and left in its tasks.
"""

from __future__ import annotations

import dis
import functools
import importlib.util
import sys
from types import CodeType, FunctionType, ModuleType
from typing import Iterable

from streammap.cluster.microbench import settle_allocator

#: Array libraries whose lazily loaded submodules a kernel may reach through a variable
#: (``xp = array_module(x)``) rather than through a module-level name of the program.
ARRAY_LIBRARIES = ("numpy", "cupy")


def warm_up(namespaces: Iterable[ModuleType], local: frozenset = frozenset()) -> list[str]:
    """Import the submodules the code of ``namespaces`` (the program and its local modules) names,
    then settle the allocator; return the names of the submodules imported, in order. ``local``:
    the top-level names of the program's local modules, never warmed."""
    imported = import_named_submodules(namespaces, local)
    settle_allocator()
    return imported


def import_named_submodules(namespaces: Iterable[ModuleType], local: frozenset = frozenset()) -> list[str]:
    """Import every submodule named by the functions of ``namespaces`` (module docstring), not yet
    imported, of packages outside ``local``; return their names."""
    names = set()
    packages = {id(p): p for p in (sys.modules.get(lib) for lib in ARRAY_LIBRARIES) if p is not None}
    for ns in namespaces:
        for value in list(vars(ns).values()):
            if isinstance(value, ModuleType) and hasattr(value, "__path__"):
                if value.__name__.split(".", 1)[0] not in local:
                    packages.setdefault(id(value), value)
            elif isinstance(value, FunctionType) and value.__module__ == ns.__name__:
                names |= code_names(value.__code__)
    imported = []
    for package in packages.values():
        attrs = vars(package)
        if "__getattr__" not in attrs:          # no lazy loading: a kernel reading P.s fails as in Python
            continue
        for name in sorted(names):
            full = f"{package.__name__}.{name}"
            if name in attrs or full in sys.modules or not _exists(full):
                continue
            try:
                getattr(package, name)           # what the kernel's first read does: P's own __getattr__
            except Exception:  # noqa: BLE001 -- the kernel's own first call raises it, where it belongs
                continue
            if full in sys.modules:
                imported.append(full)
    return imported


#: The instructions that read an attribute by name (``xp.fft``, ``np.random.default_rng``) or
#: take a name from a module (``from numpy import fft`` in a function's body).
ATTRIBUTE_OPS = frozenset({"LOAD_ATTR", "LOAD_METHOD", "IMPORT_FROM"})


@functools.lru_cache(maxsize=4096)
def code_names(code: CodeType) -> frozenset[str]:
    """The attribute names a code object and the code objects nested in it read (kept per code
    object: a program run again reuses its compiled code, :func:`~streammap.runtime.loader.cached_program_code`).

    Attributes only, not global names: a kernel that calls a global function named ``fft`` or
    ``random`` of its own does not cost the run NumPy's submodule of that name."""
    names = {ins.argval for ins in dis.get_instructions(code) if ins.opname in ATTRIBUTE_OPS}
    for const in code.co_consts:
        if isinstance(const, CodeType):
            names |= code_names(const)
    return frozenset(names)


@functools.lru_cache(maxsize=4096)
def _exists(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False
