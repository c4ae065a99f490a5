"""Importers: task graphs from JSON files that nobody wrote for StreamMAP.

:func:`load_graph` reads a file, recognises its format by content, and builds the IR of
:mod:`streammap.ir` (``kind="workflow"``: mapped and scored, not runnable). Two formats:

**WfCommons JSON, schema 1.5** (WfInstances traces of Pegasus, Makeflow, Nextflow runs)
    Tasks are ``workflow.specification.tasks`` (``id``, ``name``, ``parents``, ``children``,
    ``inputFiles``, ``outputFiles``), file sizes ``workflow.specification.files``
    (``sizeInBytes``), measured ``runtimeInSeconds`` and ``memoryInBytes`` in
    ``workflow.execution.tasks``. Following the benchmark model (``shared/benchmarks/README.md``):

    * an edge u → v for each parent/child link; its ``bytes`` are the sizes of the files that are
      both outputs of u and inputs of v;
    * ``runtime`` is the measured runtime (seconds on a speed-1.0 device);
    * ``mem`` is ``max(memoryInBytes, input bytes + output bytes)`` (all of the task's files);
    * ``out`` is the size of the union of the task's output files that some child consumes
      (0 when none: that output leaves the device at once);
    * ``kernel`` is the task's ``category`` when given, else its ``name`` without the trailing
      ``_ID000123`` that Pegasus appends.

**Node-link JSON** (what ``networkx.node_link_data`` writes)
    ``directed``, ``graph``, ``nodes``, and ``edges`` (or ``links``, as older networkx wrote).
    Node attributes: ``kernel``; ``runtime`` (seconds on a reference device of speed 1.0) and/or
    ``times`` (``{device model or kind: seconds}``); optional ``mem``, ``out`` and the other IR
    attributes (``flops``, ``bytes``, ``device``, ``compute_class``, ...). Edge attribute:
    ``bytes``. ``mem`` and ``out`` left out stay ``None`` and the cost model applies the README
    default (input plus output bytes). A graph whose ``graph.kind`` is ``program`` (what
    ``--emit-graph`` writes for a program) compiles back to the program's plan: a task with
    neither runtime nor clauses is estimated at its launch overhead, as in the program.

Bounds: a file of at most :data:`MAX_JSON_BYTES`, or :data:`JSON_BYTES_PER_TASK` per task allowed
when ``max_tasks`` asks for more (a million-task node-link graph with times for 8 device models is
about 480 MB), at most ``max_tasks`` tasks; ids are strings
or integers, lists are lists, attributes have the types of the clauses they stand for (a
``device`` is a string, ``retries`` an int >= 0, ...), and seconds and bytes are numbers from 0 to
:data:`~streammap.units.MAX_QUANTITY`: anything else is an error naming the file.

Tasks keep the ids of the file (node-link ids that are numbers become their decimal text), and
the graph keeps the file's task order. Every problem (unreadable file, bad JSON, unknown format,
missing runtime, an edge to an unknown task, a cycle) is a :class:`~streammap.errors.StreamMapError`
naming the file, with the line where one is known, and a hint.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import networkx as nx

from streammap.errors import StreamMapError, shown
from streammap.io.bulk import gc_paused
from streammap.io.files import read_text_bounded
from streammap.io.jsonfile import DuplicateKeyError, duplicate_key_error, loads_strict
from streammap.ir import MAX_RETRIES, MAX_TIMEOUT, MIN_SHARE, NODE_DEFAULTS, add_task, new_graph
from streammap.units import MAX_QUANTITY  # the largest seconds or bytes a workflow may give

__all__ = ["load_graph", "graph_from_wfcommons", "graph_from_node_link"]

_WF_HINT = ("a WfCommons file (schema 1.5) has workflow.specification.tasks/files and "
            "workflow.execution.tasks with runtimeInSeconds")
_NL_HINT = ("a node-link file has 'directed', 'nodes' and 'edges' (or 'links'); each node an 'id', a "
            "'kernel' and 'runtime' or 'times', each edge 'source', 'target' and 'bytes'")
_PEGASUS_ID = re.compile(r"_ID\d+$")
#: Node-link attributes copied into the IR (the others are ignored).
_PASS = ("site", "code", "flops", "bytes", "mem", "out", "device", "split", "share", "stateful", "retries",
         "timeout", "compute_class")
#: Largest workflow file read (the largest WfInstances trace is a few MB).
MAX_JSON_BYTES = 256 * 1024 * 1024
#: Bytes of workflow file allowed per task of ``max_tasks`` when that exceeds :data:`MAX_JSON_BYTES`.
JSON_BYTES_PER_TASK = 1024
#: Default most tasks a workflow may have (``max_tasks=`` of :func:`load_graph`).
MAX_TASKS = 200_000


def load_graph(path, max_tasks: int = MAX_TASKS) -> nx.DiGraph:
    """Read a WfCommons or node-link JSON file as a task graph (IR, ``kind="workflow"``).

    Parameters
    ----------
    path : str or Path
    max_tasks : int
        Refuse a workflow with more tasks than this.

    Returns
    -------
    networkx.DiGraph
        The IR of :mod:`streammap.ir`; ``graph.graph["source"]`` is ``str(path)``.

    Raises
    ------
    StreamMapError
        For a missing or malformed file, an unknown format, a task without a runtime, an edge to
        an unknown task, or a cycle.
    """
    path = Path(path)
    text = read_text_bounded(path, json_size_limit(max_tasks), what="workflow file")
    # A few objects per task and edge, no cycles, kept for the whole compile: see streammap.io.bulk.
    with gc_paused(freeze=True):
        return _graph_of_text(path, text, max_tasks)


def json_size_limit(max_tasks: int) -> int:
    """Largest workflow file :func:`load_graph` reads for a limit of ``max_tasks`` tasks: 256 MiB, or
    :data:`JSON_BYTES_PER_TASK` per task when that is more (raising ``--max-tasks`` raises both)."""
    return max(MAX_JSON_BYTES, int(max_tasks) * JSON_BYTES_PER_TASK)


def _graph_of_text(path: Path, text: str, max_tasks: int) -> nx.DiGraph:
    try:
        data = loads_strict(text)
    except DuplicateKeyError as exc:
        raise duplicate_key_error(exc, path, what="workflow file") from None
    except json.JSONDecodeError as exc:
        raise StreamMapError(f"not valid JSON: {exc.msg}", path=path, line=exc.lineno, col=exc.colno,
                             hint="the task graph must be WfCommons or node-link JSON") from None
    except RecursionError:
        raise StreamMapError("JSON nested too deeply", path=path,
                             hint="the task graph must be WfCommons or node-link JSON") from None
    except ValueError as exc:               # an integer of more than 4300 digits
        raise StreamMapError(f"not valid JSON: {exc}", path=path) from None
    if isinstance(data, dict) and isinstance(data.get("workflow"), dict):
        return graph_from_wfcommons(data, path, text, max_tasks)
    if isinstance(data, dict) and "nodes" in data and ("edges" in data or "links" in data):
        return graph_from_node_link(data, path, text, max_tasks)
    raise StreamMapError("unknown task-graph format: neither WfCommons nor node-link JSON", path=path, line=1,
                         hint=f"{_WF_HINT}; {_NL_HINT}")


# ---------------------------------------------------------------------- helpers

def _line_of(text: str | None, needle) -> int | None:
    """Line of the first occurrence of ``needle`` (JSON-encoded) in ``text``, if any."""
    if not text or not isinstance(needle, (str, int, float)):
        return None
    enc = json.dumps(needle)
    i = text.find(enc)
    if i < 0:
        return None
    return text.count("\n", 0, i) + 1


def _fail(msg, path, text=None, near=None, hint=None):
    raise StreamMapError(msg, path=path, line=_line_of(text, near), hint=hint)


def _plain_number(v) -> bool:
    """Whether ``v`` is already what :func:`_number` would return (a finite float >= 0): the common
    case, checked without building :func:`_number`'s message (an f-string per value, millions of
    them in a million-task file)."""
    return type(v) is float and 0.0 <= v <= MAX_QUANTITY


def _number(v, what, path, text, near, allow_none=False):
    if v is None and allow_none:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (isinstance(v, int) and v.bit_length() > 1000) \
            or not math.isfinite(v) or v < 0 or v > MAX_QUANTITY:
        _fail(f"{what} must be a finite non-negative number at most {MAX_QUANTITY:g}, got {shown(v)}", path, text,
              near, hint=f"give seconds or bytes as plain JSON numbers from 0 to {MAX_QUANTITY:g}")
    return float(v)


def _ident(v, what, path, text, near=None) -> str:
    """A task or file id: a JSON string or integer, as text."""
    if isinstance(v, bool) or not isinstance(v, (str, int)):
        _fail(f"{what} must be a string or an integer, got {shown(v)}", path, text, near,
              hint="ids are JSON strings (or integers)")
    return str(v)


def _ident_list(v, what, path, text, near) -> list[str]:
    if v is None:
        return []
    if not isinstance(v, list):
        _fail(f"{what} must be a list, got {shown(v)}", path, text, near, hint=_WF_HINT)
    return [_ident(x, f"an item of {what}", path, text, near) for x in v]


def _too_many(count: int, max_tasks: int, path):
    if count > max_tasks:
        raise StreamMapError(f"the workflow has {count} tasks, more than the limit of {max_tasks}", path=path,
                             hint="raise the limit with --max-tasks (max_tasks= in the API) if this is intended")


#: Node-link attributes that are clauses of the directive language: what each must be.
_ATTR_CHECKS = {
    "device": (lambda v: isinstance(v, str) and bool(v.strip()), "a non-empty string"),
    "split": (lambda v: isinstance(v, int) and not isinstance(v, bool), "an int axis"),
    "share": (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and MIN_SHARE <= v <= 1,
              f"a number from {MIN_SHARE:g} to 1"),
    "stateful": (lambda v: isinstance(v, bool), "true or false"),
    "retries": (lambda v: isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_RETRIES,
                f"an int in 0..{MAX_RETRIES}"),
    "timeout": (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v <= MAX_TIMEOUT,
                f"a number of seconds > 0 and at most {MAX_TIMEOUT:.0f}"),
    "site": (lambda v: isinstance(v, str), "a string"),
    "code": (lambda v: isinstance(v, str), "a string"),
    # the rate a task's flops run at (streammap.directives.kernel_class); a name the cost model does
    # not know counts as none, like a task without it
    "compute_class": (lambda v: isinstance(v, str), "a string"),
}


def _check_acyclic(g: nx.DiGraph, path, text):
    """Refuse a graph with a cycle, naming one cycle; linear in tasks plus edges.

    Kahn's topological sort peels off tasks whose producers are all peeled; what is left when it
    stops lies on a cycle or downstream of one. Only then is a cycle looked for, inside that rest
    (``networkx.find_cycle`` on the whole graph took minutes on 10,000 tasks).
    """
    rest = _unsortable(g)
    if not rest:
        return
    cycle = _a_cycle(g, rest)
    nodes = cycle + [cycle[0]]
    _fail(f"the task graph has a cycle: {' -> '.join(map(str, nodes))}", path, text, cycle[0],
          hint="a task graph must be acyclic; remove one of these dependencies")


def _unsortable(g: nx.DiGraph) -> set:
    """The tasks a topological sort cannot place (empty when ``g`` is acyclic)."""
    indegree = dict(g.in_degree())
    ready = [u for u, d in indegree.items() if d == 0]
    placed = 0
    while ready:
        u = ready.pop()
        placed += 1
        for v in g.successors(u):
            indegree[v] -= 1
            if indegree[v] == 0:
                ready.append(v)
    if placed == len(indegree):
        return set()
    return {u for u, d in indegree.items() if d > 0}


def _a_cycle(g: nx.DiGraph, rest: set) -> list:
    """One cycle among ``rest``, in edge order, starting at its task that comes first in the file.

    Every task of ``rest`` has a producer in ``rest`` (else the sort would have placed it), so
    walking from producer to producer inside ``rest`` must come back to a task already seen.
    """
    order = {u: i for i, u in enumerate(g)}
    u = min(rest, key=order.__getitem__)
    seen: dict = {}
    walk: list = []
    while u not in seen:
        seen[u] = len(walk)
        walk.append(u)
        u = next(p for p in g.predecessors(u) if p in rest)
    cycle = walk[seen[u]:][::-1]                  # producer walk reversed: edges run forward
    first = min(range(len(cycle)), key=lambda i: order[cycle[i]])
    return cycle[first:] + cycle[:first]


# ---------------------------------------------------------------------- WfCommons

def graph_from_wfcommons(data: dict, path, text: str | None = None, max_tasks: int = MAX_TASKS) -> nx.DiGraph:
    """Build the IR from parsed WfCommons JSON (schema 1.5); see the module docstring."""
    path = Path(path)
    wf = data["workflow"]
    spec, execu = wf.get("specification"), wf.get("execution")
    if not isinstance(spec, dict) or not isinstance(execu, dict):
        version = data.get("schemaVersion")
        _fail(f"WfCommons file without workflow.specification / workflow.execution"
              f"{f' (schemaVersion {version})' if version else ''}", path, text, "workflow",
              hint=f"{_WF_HINT}; convert older traces with wfcommons first")
    tasks = spec.get("tasks")
    files = spec.get("files", [])
    if not isinstance(tasks, list) or not isinstance(files, list):
        _fail("workflow.specification.tasks and .files must be lists", path, text, "specification", hint=_WF_HINT)
    _too_many(len(tasks), max_tasks, path)
    sizes: dict[str, float] = {}
    for f in files:
        if not isinstance(f, dict) or "id" not in f:
            _fail(f"file entry without an id: {shown(f)}", path, text, "files", hint=_WF_HINT)
        fid = _ident(f["id"], "a file id", path, text, "files")
        sizes[fid] = _number(f.get("sizeInBytes", 0), f"sizeInBytes of file {fid}", path, text, f["id"])
    runs: dict[str, dict] = {}
    exec_tasks = execu.get("tasks") or []
    if not isinstance(exec_tasks, list):
        _fail("workflow.execution.tasks must be a list", path, text, "execution", hint=_WF_HINT)
    for e in exec_tasks:
        if isinstance(e, dict) and "id" in e:
            runs[_ident(e["id"], "a task id in workflow.execution.tasks", path, text, "execution")] = e

    by_id: dict[str, dict] = {}
    for t in tasks:
        if not isinstance(t, dict) or "id" not in t:
            _fail(f"task entry without an id: {shown(t)}", path, text, "tasks", hint=_WF_HINT)
        tid = _ident(t["id"], "a task id", path, text, "tasks")
        if tid in by_id:
            _fail(f"task id {tid!r} appears twice", path, text, tid, hint="task ids must be unique")
        by_id[tid] = t

    def size(fid, tid):
        if fid not in sizes:
            _fail(f"task {tid} names file {fid!r}, which workflow.specification.files does not list",
                  path, text, fid, hint="every input and output file needs an entry with sizeInBytes")
        return sizes[fid]

    g = new_graph(str(data.get("name") or path.stem), kind="workflow", source=str(path))
    outs: dict[str, set] = {}
    ins: dict[str, set] = {}
    for tid, t in by_id.items():
        run = runs.get(tid)
        if run is None or run.get("runtimeInSeconds") is None:
            _fail(f"task {tid} has no runtimeInSeconds in workflow.execution.tasks", path, text, tid,
                  hint="every task needs a measured runtime to be mapped")
        if not isinstance(run, dict):
            _fail(f"task {tid}: its workflow.execution entry must be an object", path, text, tid, hint=_WF_HINT)
        runtime = _number(run["runtimeInSeconds"], f"runtimeInSeconds of task {tid}", path, text, tid)
        ins[tid] = set(_ident_list(t.get("inputFiles"), f"inputFiles of task {tid}", path, text, tid))
        outs[tid] = set(_ident_list(t.get("outputFiles"), f"outputFiles of task {tid}", path, text, tid))
        io = sum(size(f, tid) for f in ins[tid]) + sum(size(f, tid) for f in outs[tid])
        measured = _number(run.get("memoryInBytes"), f"memoryInBytes of task {tid}", path, text, tid, allow_none=True)
        kernel = t.get("category") or _PEGASUS_ID.sub("", str(t.get("name") or tid)) or tid
        add_task(g, tid, kernel, runtime=runtime, mem=max(measured or 0.0, io))

    for tid, t in by_id.items():
        for c in _ident_list(t.get("children"), f"children of task {tid}", path, text, tid):
            _add_wf_edge(g, tid, c, by_id, path, text)
        for p in _ident_list(t.get("parents"), f"parents of task {tid}", path, text, tid):
            _add_wf_edge(g, p, tid, by_id, path, text)
    for u, v, ed in g.edges(data=True):
        ed["bytes"] = float(sum(sizes[f] for f in outs[u] & ins[v]))
    for u in g.nodes:
        consumed = set()
        for v in g.successors(u):
            consumed |= outs[u] & ins[v]
        g.nodes[u]["out"] = float(sum(sizes[f] for f in consumed))
    _check_acyclic(g, path, text)
    return g


def _add_wf_edge(g, u, v, by_id, path, text):
    for x, other in ((u, v), (v, u)):
        if x not in by_id:
            _fail(f"task {other} lists {x!r} as parent or child, but there is no task with that id",
                  path, text, x, hint="parents and children must name task ids of workflow.specification.tasks")
    if not g.has_edge(u, v):
        g.add_edge(u, v, bytes=0.0)


# ---------------------------------------------------------------------- node-link

def graph_from_node_link(data: dict, path, text: str | None = None, max_tasks: int = MAX_TASKS) -> nx.DiGraph:
    """Build the IR from parsed node-link JSON; see the module docstring."""
    path = Path(path)
    if data.get("directed") is False:
        _fail("the node-link graph is undirected", path, text, "directed",
              hint="a task graph is directed: set \"directed\": true and list edges from producer to consumer")
    if data.get("multigraph"):
        _fail("the node-link graph is a multigraph", path, text, "multigraph",
              hint="give one edge per producer/consumer pair, with the total bytes")
    nodes = data["nodes"]
    edges = data["edges"] if "edges" in data else data["links"]
    if not isinstance(nodes, list) or not isinstance(edges, list):
        _fail("'nodes' and 'edges' must be lists", path, text, "nodes", hint=_NL_HINT)
    _too_many(len(nodes), max_tasks, path)
    meta = data.get("graph") if isinstance(data.get("graph"), dict) else {}
    g = new_graph(str(meta.get("name") or path.stem), kind="workflow", source=str(path))
    # A graph that --emit-graph wrote from a program: a kernel with no clause but out= is estimated
    # at its launch overhead alone, as when the program itself is compiled, so it needs no runtime.
    emitted = meta.get("kind") == "program"
    for n in nodes:
        if not isinstance(n, dict) or "id" not in n:
            _fail(f"node without an id: {shown(n)}", path, text, "nodes", hint=_NL_HINT)
        raw = n["id"]
        tid = _ident(raw, "a node id", path, text, "nodes")
        if tid in g:
            _fail(f"task id {tid!r} appears twice", path, text, raw, hint="node ids must be unique")
        runtime = n.get("runtime")
        if runtime is not None and not _plain_number(runtime):
            runtime = _number(runtime, f"runtime of task {tid}", path, text, raw)
        times = n.get("times")
        if times is not None:
            if not isinstance(times, dict) or not times:
                _fail(f"times of task {tid} must be a non-empty mapping of device model or kind to seconds",
                      path, text, raw, hint='e.g. "times": {"V100": 0.0012, "cpu": 0.02}')
            if all(map(_plain_number, times.values())):
                times = dict(times)           # JSON keys are strings: nothing to convert
            else:
                times = {str(k): _number(v, f"times[{k!r}] of task {tid}", path, text, raw) for k, v in times.items()}
        attrs = {k: n[k] for k in _PASS if n.get(k) is not None}
        for k in ("flops", "bytes", "mem", "out"):
            if k in attrs:
                attrs[k] = _number(attrs[k], f"{k} of task {tid}", path, text, raw)
        for k, (ok, what) in _ATTR_CHECKS.items():
            if k in attrs and not ok(attrs[k]):
                _fail(f"{k} of task {tid} must be {what}, got {shown(attrs[k])}", path, text, raw, hint=_NL_HINT)
        if runtime is None and times is None and "flops" not in attrs and "bytes" not in attrs and not emitted:
            _fail(f"task {tid} has no runtime", path, text, raw,
                  hint="give each node 'runtime' (seconds on a speed-1.0 device) or 'times' "
                       "({device model or kind: seconds})")
        kernel = n.get("kernel")
        if kernel is None or kernel == "":
            kernel = tid
        elif not isinstance(kernel, str) or not kernel.strip():
            # A kernel is a name users read in `show` and group history by: a number or a list
            # would be stringified into a name nobody wrote.
            _fail(f"kernel of task {tid} must be a non-empty string, got {shown(kernel)}", path, text, raw,
                  hint='name the kernel the task runs, e.g. "kernel": "mProject", or leave it out')
        add_task(g, tid, str(kernel), runtime=runtime, times=times, **attrs)
    for e in edges:
        if not isinstance(e, dict) or "source" not in e or "target" not in e:
            _fail(f"edge without source and target: {shown(e)}", path, text, "edges", hint=_NL_HINT)
        u = _ident(e["source"], "an edge's source", path, text, "edges")
        v = _ident(e["target"], "an edge's target", path, text, "edges")
        for x, raw in ((u, e["source"]), (v, e["target"])):
            if x not in g:
                _fail(f"edge {u} -> {v} names {x!r}, which is not a node", path, text, raw,
                      hint="every edge's source and target must be the id of a node")
        b = e.get("bytes", 0)
        if not _plain_number(b):
            b = _number(b, f"bytes of edge {u} -> {v}", path, text, e["source"])
        if g.has_edge(u, v):
            g.edges[u, v]["bytes"] += b
        else:
            g.add_edge(u, v, bytes=b)
    _check_acyclic(g, path, text)
    return g


assert set(_PASS) <= set(NODE_DEFAULTS)
