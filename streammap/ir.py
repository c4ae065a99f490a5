"""The task graph (IR): a ``networkx.DiGraph`` that every stage after the front end reads.

Both front ends build it: the directive compiler (``streammap.directives``) from a ``.py`` file,
and the importers (``streammap.io.importers``) from WfCommons or node-link JSON. Nothing after this
point knows which one made the graph.

Graph attributes (``g.graph``)
------------------------------
``name``      the entry point (graph function) or workflow name.
``kind``      ``"program"`` (from directives: runnable) or ``"workflow"`` (imported: mapped and
              scored, not runnable).
``source``    path of the file the graph came from.
``entry``     name of the ``# @stream graph`` function (programs only).
``params``    ``{name: value}`` of every ``# @stream param`` after ``-D`` overrides (programs).
``outputs``   what the graph returns, as an *arg spec* (below), or ``None``.

Node attributes (one node per task; the node key is the task id)
----------------------------------------------------------------
``kernel``    kernel name (``str``).
``site``      call site ``"file.py:LINE"`` (programs) or ``None``.
``code``      fingerprint of the kernel's code (programs: ``directives.program.code_fingerprint``,
              what the performance history keys measurements by) or ``None``.
``flops``     operations per call, ``float`` or ``None`` when unknown.
``bytes``     device-memory traffic per call, ``float`` or ``None``.
``mem``       peak device memory while running, ``float`` or ``None`` (cost model then uses
              inputs + output).
``out``       bytes of the result, ``float`` or ``None``.
``device``    device constraint string: ``"any"`` (default), a kind, vendor or model filter.
``split``     data-parallel axis (``int``) or ``None``.
``share``     fraction of one device's compute, :data:`MIN_SHARE` ``<= share <= 1`` (default 1.0).
``stateful``  ``bool``; ``retries``: ``int`` in 0..:data:`MAX_RETRIES` (default 0).
``timeout``   seconds a call may run before it is abandoned and counts as failed (``float``), or
              ``None`` (default: no limit).
``compute_class`` what kind of arithmetic the kernel does, for the rate its ``flops`` run at:
              ``"lapack"`` (its body calls a factorisation or solver: ``cholesky``, ``solve``, ``linalg.*``),
              ``"blas"`` (a matrix product: ``@``, ``matmul``, ``einsum``, ...), ``"fft"`` (an FFT), ``"rfft"`` (real FFTs only),
              ``"gram"``, ``"random"``, ``"transcendental"``, ``"mixed"`` (random numbers and
              transcendental functions), ``"scan"`` (``cumsum``, ``cumprod``, ``accumulate``), ``"other"`` (element-wise arithmetic, reductions), or ``None``
              (unknown: imported workflows; the cost model uses the matrix-product rate, as it did
              before the classes existed). Set by :mod:`streammap.directives.kernel_class`.
``runtime``   reference runtime in seconds on a speed-1.0 device (imported), or ``None``.
``times``     ``{model or kind: seconds}`` measured times (imported), or ``None``.
``args``      positional arguments, a list of arg specs (programs; ``[]`` for workflows).
``kwargs``    keyword arguments, ``{name: arg spec}``.

Edge attributes
---------------
``bytes``     bytes carried from producer to consumer (``float``).

Arg specs (plain data, YAML-safe)
---------------------------------
``{"ref": TASK_ID}``                 the result of another task;
``{"ref": TASK_ID, "index": I}``     item I of a task's tuple result (tuple unpacking);
``{"value": V}``                     a constant (int, float, str, bool, None);
``{"list": [SPEC, ...]}``            a list of specs; ``{"tuple": [...]}`` a tuple;
``{"dict": {KEY: SPEC, ...}}``       a dict of specs (used for dict-valued ``return``).
"""

from __future__ import annotations

import json

import networkx as nx

from streammap.errors import PlanError
from streammap.io.files import atomic_write_text

#: The most times a failed call is retried (a kernel's ``retries``, in a program, a workflow or a plan):
#: a kernel that always fails, retried a billion times, would hold a run (or a tenant's devices) for days.
MAX_RETRIES = 1000
#: The longest a call's ``timeout`` may be, in seconds (a year): the runtime waits on a call with it,
#: and a longer wait (``1e300``) overflows the clock the wait is measured on.
MAX_TIMEOUT = 365 * 86400.0
#: The smallest ``share`` of a device a task may ask for (a kernel's clause, a workflow, a plan, a
#: job): a millionth. The executors count how many tasks fit a device (1 / share): a share of
#: 1e-320 made that infinite, an OverflowError in every run of a plan compile had accepted.
MIN_SHARE = 1e-6
#: The deepest an arg spec nests (as deep as a plan's YAML may nest: ``MAX_YAML_DEPTH``).
MAX_SPEC_DEPTH = 100

#: Node attributes with their defaults; importers and the front end fill every one of them.
NODE_DEFAULTS = {
    "kernel": None, "site": None, "code": None, "flops": None, "bytes": None, "mem": None, "out": None,
    "device": "any", "split": None, "share": 1.0, "stateful": False, "retries": 0,
    "timeout": None, "compute_class": None, "runtime": None, "times": None, "args": [], "kwargs": {},
}


def new_graph(name: str, kind: str, source: str | None = None, entry: str | None = None,
              params: dict | None = None) -> nx.DiGraph:
    """An empty IR graph with its graph attributes set."""
    g = nx.DiGraph()
    g.graph.update(name=name, kind=kind, source=source, entry=entry, params=dict(params or {}),
                   outputs=None)
    return g


def add_task(g: nx.DiGraph, task_id: str, kernel: str, **attrs) -> None:
    """Add a task node with every attribute of :data:`NODE_DEFAULTS` present."""
    unknown = set(attrs) - set(NODE_DEFAULTS)
    if unknown:
        raise TypeError(f"unknown task attribute(s): {sorted(unknown)}")
    data = {k: (v.copy() if isinstance(v, (list, dict)) else v) for k, v in NODE_DEFAULTS.items()}
    data.update(attrs, kernel=kernel)
    g.add_node(task_id, **data)


def resolve_spec(spec, ref):
    """The value an arg (or outputs) spec denotes.

    ``ref(task_id, index)`` gives a referenced task's result (``index`` is ``None``, or the item
    of a tuple/list result to take): each executor looks results up, and moves them, its own way.
    """
    if "ref" in spec:
        return ref(spec["ref"], spec.get("index"))
    if "value" in spec:
        return spec["value"]
    if "list" in spec:
        return [resolve_spec(s, ref) for s in spec["list"]]
    if "tuple" in spec:
        return tuple(resolve_spec(s, ref) for s in spec["tuple"])
    if "dict" in spec:
        return {key: resolve_spec(s, ref) for key, s in spec["dict"].items()}
    raise PlanError(f"unknown argument spec {spec!r}",
                    hint="an argument is one of ref (with index), value, list, tuple, dict")


def item(value, index):
    """``value[index]``, or ``value`` itself when ``index`` is ``None`` (a ref spec's index)."""
    return value if index is None else value[index]


def spec_problem(spec, depth: int = 0) -> str | None:
    """What makes ``spec`` not an arg spec (a plan from someone else may hold anything), or ``None``.

    Walks nested specs, at most :data:`MAX_SPEC_DEPTH` levels (the walks that use a spec recurse
    once per level). A ``value``'s content is not constrained: it is handed to the kernel as it is.

    Examples
    --------
    >>> spec_problem({"list": [{"ref": "a", "index": 1}, {"value": [1, 2]}]}) is None
    True
    >>> spec_problem({"ref": ["a"]})
    "'ref' must name a task (a string), not list"
    >>> spec_problem(5)
    'an argument spec is a mapping such as {ref: TASK} or {value: 3}, not int'
    """
    if depth > MAX_SPEC_DEPTH:
        return f"an argument is nested more than {MAX_SPEC_DEPTH} levels"
    if type(spec) is not dict:
        return f"an argument spec is a mapping such as {{ref: TASK}} or {{value: 3}}, not {type(spec).__name__}"
    keys = set(spec)
    if "ref" in keys:
        if not keys <= {"ref", "index"}:
            return f"a ref spec has only 'ref' and 'index', not {sorted(map(str, keys - {'ref', 'index'}))}"
        if type(spec["ref"]) is not str:
            return f"'ref' must name a task (a string), not {type(spec['ref']).__name__}"
        index = spec.get("index")
        if index is not None and type(index) is not int:
            return f"'index' must be an integer, not {type(index).__name__}"
        return None
    if len(keys) != 1 or not keys <= {"value", "list", "tuple", "dict"}:
        return f"unknown argument spec with keys {sorted(map(str, keys))}"
    if "value" in keys:
        return None
    kind = next(iter(keys))
    items = spec[kind]
    if kind == "dict":
        if type(items) is not dict or not all(type(k) is str for k in items):
            return "'dict' must map names to argument specs"
        items = items.values()
    elif type(items) is not list:
        return f"'{kind}' must be a list of argument specs, not {type(items).__name__}"
    return next(filter(None, (spec_problem(item, depth + 1) for item in items)), None)


def spec_refs(spec) -> list[str]:
    """Task ids an arg spec refers to, in order of appearance."""
    out: list[str] = []
    if spec is not None:
        _collect_refs(spec, out)
    return out


def _collect_refs(spec, out: list) -> None:
    # a module-level function, not a closure that calls itself: such a closure is a reference
    # cycle, left for the garbage collector once per kernel call the runtime resolves
    if "ref" in spec:
        out.append(spec["ref"])
    elif "list" in spec or "tuple" in spec:
        for s in spec.get("list", spec.get("tuple")):
            _collect_refs(s, out)
    elif "dict" in spec:
        for s in spec["dict"].values():
            _collect_refs(s, out)


def to_node_link(g: nx.DiGraph) -> dict:
    """The graph as node-link data (``networkx.node_link_data`` with ``edges``)."""
    return nx.node_link_data(g, edges="edges")


def write_graph(g: nx.DiGraph, path) -> None:
    """Write the IR as node-link JSON (``--emit-graph``)."""
    text = json.dumps(to_node_link(g), indent=1, default=_json_default)
    atomic_write_text(path, text + "\n", what="task graph")


def _json_default(o):
    if hasattr(o, "item"):   # numpy scalars
        return o.item()
    raise TypeError(f"cannot write {type(o).__name__} to JSON")
