"""The StreamMAP front end: ``# @stream`` directives in a Python file -> the task graph (IR).

Pipeline of this package, one module per step::

    scan.py       tokenize + libcst: find every directive, attach it to the module-level
                  statement below it, parse its clauses (errors for misplaced ones)
    program.py    what the directives declare: params, kernels (clauses, signatures), graph
                  functions; param values with -D overrides
    build.py      run the graph function's body at compile time; kernel calls become tasks
    safe_eval.py  the expression language of param values, clauses, bounds and conditions

Public API:

* :func:`parse_program` -- the IR (``networkx.DiGraph``, see :mod:`streammap.ir`) of one graph
  function of a file;
* :func:`read_program` -- the parsed directives (:class:`Program`), for stages that need kernel
  names, signatures or params without building a graph;
* :func:`param_values` -- the params of a file after overrides.

Every problem with the input is a :class:`~streammap.errors.DirectiveError` carrying the file,
line, column and a hint.
"""

from __future__ import annotations

import contextlib
import gc

import networkx as nx

from streammap.directives.build import MAX_TASKS, build_graph
from streammap.directives.program import GraphFunc, Kernel, Param, Program, Signature, read_program
from streammap.errors import DirectiveError

__all__ = ["parse_program", "read_program", "param_values", "gc_paused", "Program", "Param",
           "Kernel", "GraphFunc", "Signature", "DirectiveError"]


def parse_program(path, overrides: dict | None = None, entry: str | None = None,
                  max_tasks: int = MAX_TASKS) -> nx.DiGraph:
    """The IR of graph function ``entry`` of the file at ``path``.

    Parameters
    ----------
    path : str or Path
        A Python file with ``# @stream`` directives.
    overrides : dict, optional
        ``{param: value}``; a ``str`` value is an expression over the params above it
        (``{"N": "1<<12"}``), other values are used as they are.
    entry : str, optional
        The ``# @stream graph`` function to build; may be omitted when the file has one.
    max_tasks : int
        Refuse a graph of more tasks than this (:data:`~.build.MAX_TASKS` by default).
    """
    with gc_paused():
        prog = read_program(path)
        params = prog.param_values(overrides)
        return build_graph(prog, params, prog.entry_point(entry), max_tasks=max_tasks)


@contextlib.contextmanager
def gc_paused():
    """Python's cyclic garbage collector off for the duration, as it was afterwards.

    The front end allocates an object per syntax node and per task and frees almost nothing
    until it returns, and none of it is a reference cycle. With the collector on, every 700
    allocations start a collection, and the older generations it scans grow with the program,
    so a file of 100,000 calls took twice as long to parse and build as with it off
    (``benchmarks/frontend_scale.py``). Reference counting still frees what is dropped.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def param_values(path, overrides: dict | None = None) -> dict:
    """``{name: value}`` of every ``# @stream param`` of ``path``, after ``overrides``."""
    return read_program(path).param_values(overrides)
