"""The plan: the contract between compile time and run time.

A plan says, for every task, which device runs it, after which tasks, and when the mapper expects
it to start and finish. It is YAML a person can read, diff and edit (``design.md``), and it is
*validated when read*: schema version, known devices, dependencies that name earlier tasks (so the
task list is a topological order, and each device runs its tasks in list order), no cycles, and a
source file that still matches its sha256 (checked by the runtime through :meth:`Plan.check_source`).

The structural rules that the placement policies obey are part of this contract too, and checked
here on any plan, whoever wrote it: on a device whose tasks share it, the shares of the tasks
running at once sum to at most 1 and their number stays within the cluster's
``max_tasks_per_device`` (:func:`check_plan_shares`, the rule of :mod:`streammap.placement.sharing`),
and every call of a stateful kernel runs on one device (:func:`check_plan_colocation`, the rule of
:mod:`streammap.placement.colocate`). This module depends on no placement code: the policies
import the rules from here.

Beyond the design's example, a plan carries what a machine needs to run it without the compiler:

``cluster.spec`` the cluster file's content, so a runtime can re-map without the original file;
``devices``  every device of the cluster (id, kind, vendor, model, local index, memory), so the
             runtime knows a GPU from a CPU and which local GPU ``node0/gpu1`` is;
``outputs``  the graph's return value as an arg spec (``streammap.ir``);
per task     ``site`` (call site), ``estimate`` (where its time estimate came from), ``args`` and
             ``kwargs`` (arg specs), ``retries``, ``timeout``.

Large plans: a plan of more than :data:`COLUMNAR_TASKS` tasks keeps its task list in a *columnar
sidecar* beside it, ``<plan>.tasks.npz`` (:func:`tasks_to_columns`: ids, kernels, devices, starts,
finishes and deps as arrays), and its YAML names that file in place of ``tasks``:
``tasks_file: {path: g.plan.tasks.npz, sha256: ..., tasks: 1000000}``. Smaller plans are the YAML
they always were, byte for byte. :func:`read_plan` reads both into the same :class:`Plan`; a
sidecar must sit in the plan's folder and match its sha256, holds no pickled objects, and its
columns are checked as a whole before a task is built (:func:`tasks_from_columns`), then the plan
as any other (:func:`validate_plan`). Why: a million tasks are hundreds of megabytes of YAML that
take minutes to write and read; as columns they are tens of megabytes, read in seconds.

Paths: ``source.path`` is written relative to the plan file's folder and resolved against it on
read, so a plan and its program can move together. ``source.modules`` lists the program's local
modules (files of its folder that it imports, :mod:`streammap.directives.imports`), each with its
path relative to the *program's* folder and its sha256; :meth:`Plan.check_source` checks them as it
checks the program (present, unchanged, inside the folder), and a plan without local modules
omits the list.

A plan file is input like any other: it may come from someone else. So what it names is checked
before it is used (:func:`check_plan_names`, :meth:`Plan.check_source`): a plan read from a file
runs (or exports) only a source inside the plan's own folder, never ``../../elsewhere.py``;
output names are identifiers (they become ``.npz`` member names); device indices are >= 0;
``params`` are scalars, and they are the ones the plan was compiled for: the plan carries their
digest (``source.params_sha256``, :func:`check_params_digest`), so ``N: 1024`` edited into
``N: 1000000000000`` is refused on read with the ``compile -D`` that makes such a plan; and the
runtime sets only names the program declares as ``# @stream param``
(:func:`streammap.runtime.loader.load_program`).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import operator
import os
import re
import shlex
from pathlib import Path
from typing import Any, Literal, Optional, Union

import numpy as np
import pydantic
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, StrictBool, StrictFloat, StrictInt, StrictStr

from streammap.cluster.model import ClusterSpec
from streammap.errors import MAX_SHOWN_VALUE, PlanError, shown
from streammap.io.bulk import gc_paused
from streammap.io.columnar import decode_strings, encode_strings, read_columns, write_columns
from streammap.io.files import atomic_write_text, check_output_path
from streammap.io.yamlfile import dump_mapping_yaml, dump_yaml, field_name, load_yaml, validation_error
from streammap.ir import MAX_RETRIES, MAX_SPEC_DEPTH, MAX_TIMEOUT, MIN_SHARE, spec_problem, spec_refs
from streammap.units import MAX_QUANTITY

PLAN_VERSION = 1

#: Plans of more tasks than this keep their task list in a columnar sidecar (:func:`write_plan`).
COLUMNAR_TASKS = 50_000

#: Slack when summing shares (``0.1 + 0.2 + 0.7`` is a full device, not an overfull one).
SHARE_EPS = 1e-9


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


#: A local module's recorded path: ``/``-separated identifiers under the program's folder, ending in ``.py``.
MODULE_PATH = re.compile(r"^(?:[A-Za-z_][A-Za-z0-9_]*/){0,32}[A-Za-z_][A-Za-z0-9_]*\.py$")


class ModuleInfo(_Strict):
    """A local module the program imports (:mod:`streammap.directives.imports`): its path relative
    to the program's folder, and its sha256 at compile time."""
    path: str = Field(max_length=1000)
    sha256: str

    @pydantic.field_validator("path")
    @classmethod
    def _importable_path(cls, value: str) -> str:
        if not MODULE_PATH.match(value):
            raise ValueError(f"{value[:200]!r} is not a module path under the program's folder "
                             "(folders/NAME.py, each part an identifier; no '..', no absolute path)")
        return value


class SourceInfo(_Strict):
    path: str = Field(min_length=1, max_length=4096)
    sha256: str
    # The digest of the plan's params (params_digest), written with them: params edited by hand
    # are refused on read, as a changed program is refused at run.
    params_sha256: Optional[str] = None
    entry: Optional[str] = None
    kind: Literal["program", "workflow"] = "program"
    # The local modules the program imports (files of its folder), checked like the program itself.
    modules: list[ModuleInfo] = Field(default=[], max_length=1000)

    @pydantic.field_validator("path")
    @classmethod
    def _openable_path(cls, value: str) -> str:
        # A NUL byte or a part longer than a file name can be made the OS calls fail with a
        # ValueError or ENAMETOOLONG deep inside the checks of the source, as a traceback.
        if "\0" in value:
            raise ValueError("a path has no NUL character")
        if any(len(part.encode("utf-8", "surrogateescape")) > 255 for part in value.split("/")):
            raise ValueError("a part of the path is longer than a file name may be (255 bytes)")
        return value


class ClusterInfo(_Strict):
    name: str
    sha256: str = ""
    # The whole cluster in the cluster-file format, so that a runtime can re-map the rest of a
    # plan (a lost or slow device) without the original file.
    spec: Optional[dict] = None

    @pydantic.field_validator("spec")
    @classmethod
    def _a_cluster(cls, value: dict | None) -> dict | None:
        # Read as plain data by the runtime (spilling), re-mapping and the k8s export: a spec from
        # someone else is checked as a cluster file is, or a wrong type there is a traceback later.
        if value is not None:
            try:
                ClusterSpec.model_validate(value)
            except pydantic.ValidationError as exc:
                err = exc.errors()[0]
                raise ValueError(f"{field_name(err['loc'])}: {err['msg'].removeprefix('Value error, ')}") from None
        return value


class MapperInfo(_Strict):
    # Finite times (a run record copies them, and refuses an infinity: the run would fail at its end).
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    name: str
    estimated_makespan: float = Field(ge=0)
    lower_bound: float = Field(ge=0)
    heft_makespan: Optional[float] = Field(default=None, ge=0)
    # The exact solver's proven lower bound on every plan's makespan, when it ran (streammap.mappers.exact);
    # lower_bound is then the larger of it and the analytic bounds.
    solver_bound: Optional[float] = Field(default=None, ge=0)
    # Under memory oversubscription: bytes the plan is expected to spill and restore (streammap.placement.spilling).
    spill_bytes: Optional[float] = Field(default=None, ge=0)


class PlanDevice(_Strict):
    id: str
    kind: str
    vendor: Optional[str] = None
    model: Optional[str] = None
    index: Optional[int] = Field(default=None, ge=0, le=65535)
    memory: Optional[float] = Field(default=None, ge=0)      # bytes; the spill logic's capacity


class PlanTask(_Strict):
    id: str
    kernel: str
    device: str
    deps: list[str] = []
    start: float = Field(ge=0, allow_inf_nan=False)
    finish: float = Field(ge=0, allow_inf_nan=False)
    site: Optional[str] = None
    estimate: Optional[str] = None
    retries: int = Field(default=0, ge=0, le=MAX_RETRIES)
    # Seconds a call may run before it is abandoned and counts as a failure (the kernel's timeout clause).
    timeout: Optional[float] = Field(default=None, gt=0, le=MAX_TIMEOUT)
    # GPU sharing (streammap.placement.sharing): the fraction of its device the task needs, and, under
    # memory oversubscription, the bytes its output is expected to take (spilling reserves them).
    share: float = Field(default=1.0, ge=MIN_SHARE, le=1)
    out: Optional[float] = Field(default=None, ge=0, le=MAX_QUANTITY, allow_inf_nan=False)
    # A call of a stateful kernel: all calls of one kernel must run on one device (streammap.placement.colocate).
    stateful: bool = False
    args: list[Any] = Field(default_factory=list)     # a factory: pydantic deep-copies a literal default per task
    kwargs: dict[str, Any] = Field(default_factory=dict)


class StrategyInfo(_Strict):
    """Which parallel strategy the compiler chose (:mod:`streammap.strategies`), and why."""
    chosen: Literal["none", "data", "model", "pipeline"] = "none"
    forced: bool = False
    # Estimated makespan of every strategy evaluated (the program's whole run), by name.
    estimates: dict[str, float] = {}
    # Strategies that did not apply, with the reason.
    skipped: dict[str, str] = {}
    reason: Optional[str] = None
    # data: the split tasks and their shard counts {task id: k}.
    splits: dict[str, int] = {}


class PipelineStage(_Strict):
    """One stage of a stream pipeline: its tasks (one per item, in item order) and where they run."""
    name: str
    kernel: str
    stateful: bool = False
    # Device id -> share of the items this replica runs (sums to 1).
    replicas: dict[str, float]
    tasks: list[str]


class PipelineInfo(_Strict):
    """The steady state of a stream program mapped for throughput (:mod:`streammap.strategies.pipeline`)."""
    items: int = Field(ge=0)
    period: float = Field(ge=0)
    lower_bound: float = Field(ge=0)
    items_per_second: float = Field(ge=0)
    bound_by: Optional[str] = None
    buffer: int = Field(default=4, ge=1)
    stages: list[PipelineStage] = []


class Plan(_Strict):
    """A validated plan (see the module docstring)."""

    streammap_plan: int
    source: SourceInfo
    # Param values as the program's `# @stream param`s have them: scalars only.
    params: dict[str, Union[StrictBool, StrictInt, StrictFloat, StrictStr, None]] = {}
    cluster: ClusterInfo
    objective: Literal["makespan", "throughput"] = "makespan"
    mapper: MapperInfo
    devices: list[PlanDevice]
    outputs: Optional[Any] = None
    tasks: list[PlanTask]
    # Optional (older plans have neither): the parallel strategy chosen, and a pipeline's steady state.
    strategy: Optional[StrategyInfo] = None
    pipeline: Optional[PipelineInfo] = None
    # The folder of the plan file it was read from (None: built in this process, trusted).
    _folder: Optional[str] = PrivateAttr(default=None)
    # The plan file itself, for errors found after reading (:func:`task_line`).
    _file: Optional[str] = PrivateAttr(default=None)

    # -- derived views -------------------------------------------------------------------
    def device(self, device_id: str) -> PlanDevice:
        for d in self.devices:
            if d.id == device_id:
                return d
        raise KeyError(device_id)

    def tasks_by_device(self) -> dict[str, list[PlanTask]]:
        """Each device's tasks in the order it runs them (plan order)."""
        out: dict[str, list[PlanTask]] = {d.id: [] for d in self.devices}
        for t in self.tasks:
            out[t.device].append(t)
        return out

    def check_source(self) -> Path:
        """The source file, after checking it still matches the plan's sha256.

        Raises
        ------
        PlanError
            When the file is missing or has changed since compile time, or (a plan read from a
            file) lies outside the plan's folder.
        """
        path = Path(self.source.path)
        check_source_confined(self)
        if not path.exists():
            raise PlanError(f"the plan's source {path} does not exist",
                            hint="run the plan from where it was compiled, or compile it again")
        if not path.is_file():
            raise PlanError(f"the plan's source {path} is not a file",
                            hint="source.path names the program the plan was compiled from")
        digest = sha256_file(path)
        if digest != self.source.sha256:
            raise PlanError(f"{path} has changed since this plan was compiled (sha256 {digest[:12]}… "
                            f"!= {self.source.sha256[:12]}…)",
                            hint=f"compile it again: streammap compile {path} --cluster ... -o PLAN")
        self.check_modules()
        return path

    def module_files(self) -> dict[str, Path]:
        """``{recorded path: file}`` of the program's local modules (files beside the program)."""
        folder = Path(self.source.path).parent
        return {m.path: folder / m.path for m in self.source.modules}

    def check_modules(self) -> None:
        """Check that every local module the plan records is still there, unchanged, inside the
        program's folder (links resolved), as :meth:`check_source` checks the program.

        Raises
        ------
        PlanError
            Naming the module that is missing, changed, or outside the program's folder.
        """
        program = Path(self.source.path)
        folder = program.parent.resolve()
        recompile = f"compile it again: streammap compile {program} --cluster ... -o PLAN"
        for m, file in zip(self.source.modules, self.module_files().values()):
            if not file.resolve().is_relative_to(folder):
                raise PlanError(f"the plan's local module {file} lies outside the program's folder {folder}",
                                hint="a plan runs only modules of its program's folder; " + recompile)
            if not file.is_file():
                raise PlanError(f"the local module {file} that {program.name} imports does not exist",
                                hint="run the plan where its program's folder is whole, or " + recompile)
            digest = sha256_file(file)
            if digest != m.sha256:
                raise PlanError(f"{file} (imported by {program.name}) has changed since this plan was compiled "
                                f"(sha256 {digest[:12]}… != {m.sha256[:12]}…)", hint=recompile)

    # -- writing -------------------------------------------------------------------------
    def to_yaml(self, relative_to: str | Path | None = None) -> str:
        # The task list, most of a large plan, is written directly (the same bytes, faster).
        return dump_mapping_yaml(self._yaml_data(relative_to), long_key="tasks", width=100)

    def _yaml_data(self, relative_to: str | Path | None = None, tasks: bool = True) -> dict:
        """The plan as the YAML's plain data (fields at their defaults left out); without the task
        list when ``tasks`` is false (a plan whose tasks go to a columnar sidecar)."""
        data = self.model_dump(mode="json", exclude=None if tasks else {"tasks"})
        for key in ("solver_bound", "spill_bytes"):
            if data["mapper"].get(key) is None:
                data["mapper"].pop(key, None)
        for key in ("strategy", "pipeline"):
            if data.get(key) is None:
                data.pop(key, None)
        if relative_to is not None:
            data["source"]["path"] = _relpath(self.source.path, relative_to)
        if not data["source"]["modules"]:
            del data["source"]["modules"]        # a one-file program's plan reads as it always did
        data["source"].pop("params_sha256", None)
        if self.params:                         # a plan without params reads as it always did
            data["source"]["params_sha256"] = params_digest(self.params)
        for t in data.get("tasks", ()):
            for key, empty in _TASK_DEFAULTS:
                if t.get(key) == empty:
                    del t[key]
        return data


#: Task fields left out of the YAML (and of the sidecar's columns) when at these values.
_TASK_DEFAULTS = (("site", None), ("estimate", None), ("retries", 0), ("timeout", None), ("share", 1.0),
                  ("out", None), ("stateful", False), ("args", []), ("kwargs", {}))


def _relpath(path: str, base) -> str:
    try:
        return os.path.relpath(os.path.abspath(path), os.path.abspath(base))
    except ValueError:        # another drive on Windows
        return os.path.abspath(path)


def params_digest(params: dict) -> str:
    """The sha256 of ``params`` as canonical JSON: names sorted, and each value's type kept
    (``1``, ``1.0``, ``"1"`` and ``true`` differ), so any edit of a name, value or type shows."""
    text = json.dumps(params, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def check_params_digest(plan: Plan, path=None, lines: dict | None = None) -> None:
    """Refuse a plan whose params are not the ones it was compiled for.

    The rule: a plan's params are what its tasks were built from (their number, sizes and
    estimates), so a plan runs only with those. The compiler writes their digest
    (``source.params_sha256``); params changed by hand, or a digest removed or edited, are
    refused here, before anything runs, with the command that compiles the plan for the params
    it now shows. A plan without params has no digest (and may not gain params by hand).
    """
    recorded = plan.source.params_sha256
    if recorded is None and not plan.params:
        return
    if recorded is not None and recorded == params_digest(plan.params):
        return
    lines = lines or {}
    # Shell-quoted: a str param's quotes are part of its -D value ('N="128"'), which the shell
    # would strip from N="128" and leave the int 128.
    defines = " ".join(_define(k, v) for k, v in plan.params.items())
    hint = (f"a plan runs with the params it was compiled for; to run with these, compile again: "
            f"streammap compile {Path(plan.source.path).name} {defines} --cluster CLUSTER -o PLAN").replace("  ", " ")
    if recorded is None:
        raise PlanError("the plan's params carry no digest (source.params_sha256): they may not be the ones "
                        "it was compiled for", path=path, line=lines.get(("params",)) or lines.get(("source",)),
                        hint=hint)
    raise PlanError("the plan's params are not the ones it was compiled for (they were edited after "
                    "compiling: their sha256 differs from source.params_sha256)", path=path,
                    line=lines.get(("params",)) or lines.get(("source", "params_sha256")), hint=hint)


def _define(name: str, value) -> str:
    """``-D NAME=VALUE`` for the hint of :func:`check_params_digest`, shell-quoted to be pasted; a
    value too long to echo (a 300-digit number edited in) is shown bounded, as errors show values
    (:func:`streammap.errors.shown`): that command is then not one to paste, and says so."""
    text = json.dumps(value) if isinstance(value, str) else str(value)
    if len(text) > MAX_SHOWN_VALUE:
        return f"-D {name}=VALUE (the plan's value: {shown(value)})"
    return "-D " + shlex.quote(f"{name}={text}")


def sha256_file(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def write_plan(plan: Plan, path, *, columnar_above: int | None = None) -> None:
    """Write ``plan`` to ``path`` atomically (a half-written plan never exists).

    The program's path is written relative to the plan's folder, so a folder holding both can be
    moved. :func:`read_plan` gives the same plan back.

    A plan of more than ``columnar_above`` tasks (:data:`COLUMNAR_TASKS` by default) keeps its
    task list in a columnar sidecar beside it (:func:`tasks_file_name`; see the module docstring):
    the sidecar is written first, then the YAML that names it with its sha256, so the YAML never
    names a sidecar that is not complete.

    Examples
    --------
    >>> import pathlib, tempfile
    >>> import streammap
    >>> from streammap.plan import read_plan, write_plan
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (folder / "ramp.py").write_text('''
    ... import numpy as np
    ...
    ... # @stream kernel(flops=4, out=32)
    ... def ramp():
    ...     return np.arange(4.0)
    ...
    ... # @stream graph
    ... def main():
    ...     return ramp()
    ... ''')
    >>> one_cpu = {"name": "one", "nodes": [{"name": "n0", "devices": [{"name": "cpu", "kind": "cpu"}]}]}
    >>> plan = streammap.compile(folder / "ramp.py", cluster=one_cpu, history=False)
    >>> write_plan(plan, folder / "plan.yaml")
    >>> text = (folder / "plan.yaml").read_text()
    >>> text.splitlines()[0], "{path: ramp.py," in text
    ('streammap_plan: 1', True)
    >>> read_plan(folder / "plan.yaml").to_yaml() == plan.to_yaml()
    True
    """
    path = Path(path)
    limit = COLUMNAR_TASKS if columnar_above is None else columnar_above
    if len(plan.tasks) <= limit:
        atomic_write_text(path, plan.to_yaml(relative_to=path.parent), what="plan")
        return
    check_output_path(path, "plan")
    sidecar = path.with_name(tasks_file_name(path))
    write_columns(sidecar, tasks_to_columns(plan), what="plan's task columns")
    header = plan._yaml_data(relative_to=path.parent, tasks=False)
    tasks_file = {"path": sidecar.name, "sha256": sha256_file(sidecar), "tasks": len(plan.tasks)}
    # The sidecar's name takes the place of the task list, so the header keeps the field order.
    data = {}
    for key in Plan.model_fields:
        if key == "tasks":
            data["tasks_file"] = tasks_file
        elif key in header:
            data[key] = header[key]
    text = dump_yaml(data, sort_keys=False, default_flow_style=None, width=100, allow_unicode=True)
    atomic_write_text(path, text, what="plan")


def read_plan(path) -> Plan:
    """Read and validate a plan file; errors name the file, line and field.

    Examples
    --------
    A plan is read back by :func:`write_plan`'s example; a file that is not a plan is refused
    with what to do:

    >>> import pathlib, tempfile
    >>> from streammap.plan import read_plan
    >>> notes = pathlib.Path(tempfile.mkdtemp()) / "notes.yaml"
    >>> _ = notes.write_text("hello: world")
    >>> read_plan(notes)
    Traceback (most recent call last):
      ...
    streammap.errors.PlanError: ...notes.yaml:1: error: not a StreamMAP plan (no 'streammap_plan' version)
        hello: world
    hint: make one with: streammap compile PROGRAM --cluster CLUSTER -o plan.yaml
    """
    path = Path(path)
    data, lines = load_yaml(path, PlanError, long_list="tasks")
    if not isinstance(data, dict) or "streammap_plan" not in data:
        raise PlanError("not a StreamMAP plan (no 'streammap_plan' version)", path=path, line=1,
                        hint="make one with: streammap compile PROGRAM --cluster CLUSTER -o plan.yaml")
    if data["streammap_plan"] != PLAN_VERSION:
        raise PlanError(f"plan version {shown(data['streammap_plan'])} is not supported (this StreamMAP reads {PLAN_VERSION})",
                        path=path, line=lines.get(("streammap_plan",)), hint="compile the program again")
    tasks_file = data.pop("tasks_file", None)
    if tasks_file is not None:
        if "tasks" in data:
            raise PlanError("the plan has both 'tasks' and 'tasks_file'", path=path, line=lines.get(("tasks_file",)),
                            hint="a plan lists its tasks in one place: remove one of them, or compile again")
        data["tasks"] = []
    rows = data.get("tasks")
    built = _tasks_of_plain_rows(rows) if isinstance(rows, list) else None
    if built is not None:
        data["tasks"] = []
    try:
        plan = Plan.model_validate(data)
    except pydantic.ValidationError as exc:
        raise validation_error(exc, path, lines, PlanError, "plan") from None
    if built is not None:
        plan.tasks = built
    if tasks_file is not None:
        plan.tasks = read_tasks_file(path, tasks_file, [d.id for d in plan.devices], lines.get(("tasks_file",)))
    src = Path(plan.source.path)
    if not src.is_absolute():
        plan.source.path = os.path.normpath(path.parent / src)
    plan._folder = os.path.abspath(path.parent)
    plan._file = str(path)
    validate_plan(plan, path=path, lines=lines)
    check_plan_names(plan, path=path, lines=lines)
    check_params_digest(plan, path=path, lines=lines)
    return plan


def task_line(plan: Plan, index: int) -> int | None:
    """The line of the plan file where task ``index`` starts, for an error found after reading
    (a check that needs the program, such as its kernels' parameters); ``None`` for a plan not
    read from a file or a task in a columnar sidecar (the line of ``tasks_file`` then).

    The positions are not kept with the plan (for a large plan they cost more than its tasks):
    the file is read again, only when an error needs one; the line is given only if the file's
    task there is still this one (a plan re-mapped in this process may list its tasks otherwise).
    """
    if plan._file is None:
        return None
    try:
        data, lines = load_yaml(plan._file, PlanError, long_list="tasks")
    except (PlanError, OSError):
        return None
    rows = data.get("tasks") if isinstance(data, dict) else None
    if isinstance(rows, list) and index < len(rows):
        same = isinstance(rows[index], dict) and rows[index].get("id") == plan.tasks[index].id
        return lines.get(("tasks", index)) if same else None
    return lines.get(("tasks_file",))


# -- the columnar sidecar --------------------------------------------------------------------------

#: Sidecar columns every task has (besides the string columns ``id`` and ``kernel_names``).
_REQUIRED_COLUMNS = ("kernel", "device", "start", "finish", "dep_ptr", "dep_idx")


def tasks_file_name(plan_path) -> str:
    """The sidecar's file name for a plan file: ``g.plan.yaml`` -> ``g.plan.tasks.npz``."""
    path = Path(plan_path)
    stem = path.stem if path.suffix in (".yaml", ".yml") else path.name
    return f"{stem}.tasks.npz"


def _categories(values) -> tuple[np.ndarray, list[str]]:
    """Codes (``-1`` for ``None``) into a list of the distinct strings, in order of appearance."""
    names: dict[str, int] = {}
    codes = np.fromiter((-1 if v is None else names.setdefault(v, len(names)) for v in values),
                        dtype=np.int32, count=len(values))
    return codes, list(names)


def _put_strings(columns: dict, name: str, values) -> None:
    columns[f"{name}_utf8"], columns[f"{name}_off"] = encode_strings(values)


def tasks_to_columns(plan: Plan) -> dict[str, np.ndarray]:
    """The plan's task list as the sidecar's columns (see the module docstring).

    Every task has ``id``, ``kernel`` (codes into ``kernel_names``), ``device`` (positions in
    ``plan.devices``), ``start``, ``finish`` and its deps as positions in the task list
    (``dep_idx[dep_ptr[i]:dep_ptr[i + 1]]``). The other fields get a column only when some task
    has a value other than the default: ``site`` and ``estimate`` (codes into their names),
    ``retries``, ``timeout`` and ``out`` (NaN: none), ``share``, ``stateful``, and ``args`` and
    ``kwargs`` as JSON text (empty: none).
    """
    tasks = plan.tasks
    T = len(tasks)
    index = {t.id: i for i, t in enumerate(tasks)}
    device_pos = {d.id: i for i, d in enumerate(plan.devices)}
    columns: dict[str, np.ndarray] = {}
    _put_strings(columns, "id", [t.id for t in tasks])
    columns["kernel"], kernels = _categories([t.kernel for t in tasks])
    _put_strings(columns, "kernel_names", kernels)
    columns["device"] = np.fromiter((device_pos[t.device] for t in tasks), dtype=np.int32, count=T)
    columns["start"] = np.fromiter((t.start for t in tasks), dtype=np.float64, count=T)
    columns["finish"] = np.fromiter((t.finish for t in tasks), dtype=np.float64, count=T)
    columns["dep_ptr"] = np.zeros(T + 1, dtype=np.int64)
    np.cumsum([len(t.deps) for t in tasks], out=columns["dep_ptr"][1:])
    columns["dep_idx"] = np.fromiter((index[d] for t in tasks for d in t.deps), dtype=np.int64,
                                     count=int(columns["dep_ptr"][-1]))
    defaults = dict(_TASK_DEFAULTS)
    for key in ("site", "estimate"):
        values = [getattr(t, key) for t in tasks]
        if any(v is not None for v in values):
            columns[key], names = _categories(values)
            _put_strings(columns, f"{key}_names", names)
    for key, dtype in (("retries", np.int64), ("timeout", np.float64), ("share", np.float64), ("out", np.float64),
                       ("stateful", np.bool_)):
        values = [getattr(t, key) for t in tasks]
        if any(v != defaults[key] for v in values):
            columns[key] = np.array([np.nan if v is None else v for v in values], dtype=dtype)
    for key in ("args", "kwargs"):
        values = [getattr(t, key) for t in tasks]
        if any(values):
            _put_strings(columns, key, [json.dumps(v, separators=(",", ":")) if v else "" for v in values])
    return columns


def read_tasks_file(plan_path: Path, tasks_file, device_ids: list[str], line: int | None = None) -> list[PlanTask]:
    """The task list of a plan whose ``tasks_file`` names a columnar sidecar.

    The sidecar must be a file of the plan's own folder (a bare file name), match the sha256 the
    plan gives, and hold the number of tasks it says; its columns are then checked
    (:func:`tasks_from_columns`).
    """
    if not (isinstance(tasks_file, dict) and set(tasks_file) == {"path", "sha256", "tasks"}
            and isinstance(tasks_file["path"], str) and isinstance(tasks_file["sha256"], str)
            and isinstance(tasks_file["tasks"], int)):
        raise PlanError("'tasks_file' must be a mapping of path, sha256 and tasks", path=plan_path, line=line,
                        hint="compile the plan again")
    name = tasks_file["path"]
    if not name or Path(name).name != name or name.startswith(".") or "\\" in name:
        raise PlanError(f"tasks_file {name!r} is not a file name in the plan's folder", path=plan_path, line=line,
                        hint="a plan's task columns sit beside it: path is a bare file name")
    sidecar = plan_path.parent / name
    digest = sha256_file(sidecar) if sidecar.is_file() else None
    if digest is None:
        raise PlanError(f"the plan's task columns {sidecar} do not exist", path=plan_path, line=line,
                        hint="keep the .tasks.npz file beside its plan, or compile again")
    if digest != tasks_file["sha256"]:
        raise PlanError(f"{sidecar} does not match the plan (sha256 {digest[:12]}… != {tasks_file['sha256'][:12]}…)",
                        path=plan_path, line=line, hint="the plan and its task columns are written together: compile again")
    columns = read_columns(sidecar, PlanError, "plan's task columns")
    # The tasks of a large plan live as long as the plan: frozen, so that no later collector pass
    # walks them all (see streammap.io.bulk). Not a small one's (a sidecar written with a lower
    # columnar_above): a process reading many would keep the garbage cycles of the moment alive.
    with gc_paused(freeze=tasks_file["tasks"] > COLUMNAR_TASKS):
        tasks = tasks_from_columns(columns, device_ids, path=sidecar)
    if len(tasks) != tasks_file["tasks"]:
        raise PlanError(f"the plan says {tasks_file['tasks']} tasks but its task columns hold {len(tasks)}",
                        path=plan_path, line=line, hint="compile the plan again")
    return tasks


def tasks_from_columns(columns: dict[str, np.ndarray], device_ids: list[str], path=None) -> list[PlanTask]:
    """Check the sidecar's columns (:func:`tasks_to_columns`) and build the plan's tasks from them.

    What pydantic checks on a YAML plan is checked here on whole columns: lengths, codes within
    their tables, ``start >= 0``, ``finish >= 0``, ``MIN_SHARE <= share <= 1``, ``retries >= 0``,
    ``timeout > 0``, ``out >= 0``, and deps that name earlier tasks; :func:`validate_plan` then
    checks the plan as it checks any other.
    """
    def bad(what: str, rows=None):
        first = ""
        if rows is not None and np.asarray(rows).any():
            first = f" (first at task #{int(np.flatnonzero(rows)[0])})"
        return PlanError(f"the plan's task columns are invalid: {what}{first}", path=path,
                         hint="the task columns are written by streammap compile: compile the plan again")

    missing = [k for k in (*_REQUIRED_COLUMNS, "id_utf8", "id_off", "kernel_names_utf8", "kernel_names_off")
               if k not in columns]
    if missing:
        raise bad(f"no column {missing[0]!r}")
    ids = decode_strings(columns["id_utf8"], columns["id_off"], PlanError, path, "id")
    kernels = decode_strings(columns["kernel_names_utf8"], columns["kernel_names_off"], PlanError, path, "kernel_names")
    T = len(ids)
    for key, n in (("kernel", T), ("device", T), ("start", T), ("finish", T), ("dep_ptr", T + 1),
                   *((k, T) for k in ("site", "estimate", "retries", "timeout", "share", "out", "stateful")
                     if k in columns)):
        if columns[key].size != n:
            raise bad(f"column {key!r} has {columns[key].size} values for {T} tasks")

    def codes(key: str, n: int, none_ok: bool = False) -> np.ndarray:
        c = columns[key]
        if c.dtype.kind not in "iu":
            raise bad(f"column {key!r} is not integer")
        rows = (c < (-1 if none_ok else 0)) | (c >= n)
        if rows.any():
            raise bad(f"column {key!r} holds a code outside 0..{n - 1}", rows)
        return c

    kernel, device = codes("kernel", len(kernels)), codes("device", len(device_ids))
    start, finish = columns["start"].astype(np.float64), columns["finish"].astype(np.float64)
    for key, col in (("start", start), ("finish", finish)):
        if not ((col >= 0) & (col < np.inf)).all():
            raise bad(f"{key} must be >= 0 and finite", ~((col >= 0) & (col < np.inf)))
    ptr, idx = columns["dep_ptr"], columns["dep_idx"]
    if ptr.dtype.kind not in "iu" or idx.dtype.kind not in "iu":
        raise bad("dep_ptr and dep_idx must be integer")
    if ptr[0] != 0 or ptr[-1] != idx.size or (np.diff(ptr) < 0).any():
        raise bad("dep_ptr does not cut dep_idx into the tasks' deps")
    owner = np.repeat(np.arange(T), np.diff(ptr))
    late = (idx < 0) | (idx >= owner)
    if late.any():
        # The same rule as validate_plan's: deps come earlier in the list (the list is a topological order).
        raise bad(f"task #{int(owner[np.flatnonzero(late)[0]])} depends on a task that does not come before it")

    optional: dict[str, list] = {}
    for key in ("site", "estimate"):
        if key in columns:
            names = decode_strings(columns[f"{key}_names_utf8"], columns[f"{key}_names_off"], PlanError, path,
                                   f"{key}_names") if f"{key}_names_utf8" in columns else []
            table = names + [None]           # code -1 picks None
            optional[key] = [table[c] for c in codes(key, len(names), none_ok=True).tolist()]
    checks = {"retries": lambda c: (c >= 0) & (c <= MAX_RETRIES), "timeout": lambda c: np.isnan(c) | ((c > 0) & (c <= MAX_TIMEOUT)),
              "share": lambda c: (c >= MIN_SHARE) & (c <= 1), "out": lambda c: np.isnan(c) | ((c >= 0) & (c <= MAX_QUANTITY)),
              "stateful": lambda c: np.ones(c.size, dtype=bool)}
    for key, ok in checks.items():
        if key in columns:
            col = columns[key]
            rows = ~ok(col)
            if rows.any():
                raise bad(f"column {key!r} holds an invalid value", rows)
            if key == "retries":
                optional[key] = col.astype(np.int64).tolist()
            elif key == "stateful":
                optional[key] = col.astype(bool).tolist()
            else:
                optional[key] = [None if math.isnan(v) and key != "share" else v for v in col.astype(np.float64).tolist()]
    for key, kind in (("args", list), ("kwargs", dict)):
        if f"{key}_utf8" in columns:
            texts = decode_strings(columns[f"{key}_utf8"], columns[f"{key}_off"], PlanError, path, key)
            if len(texts) != T:
                raise bad(f"column {key!r} has {len(texts)} values for {T} tasks")
            optional[key] = _json_values(texts, kind, key, bad)

    # Every value was checked above, column by column, as PlanTask's fields would check it: the
    # tasks are built without a second, per-object validation (half the time of reading a plan),
    # a row of the columns at a time, in the model's field order.
    bounds = ptr.tolist()
    dep_ids = list(map(ids.__getitem__, idx.tolist()))
    fields = [ids, list(map(kernels.__getitem__, kernel.tolist())), list(map(device_ids.__getitem__, device.tolist())),
              [dep_ids[a:b] for a, b in zip(bounds, bounds[1:])], start.tolist(), finish.tolist()]
    for key, default in _TASK_DEFAULTS:
        if key in optional:
            fields.append(optional[key])
        elif isinstance(default, (list, dict)):         # mutable: a new one per task, as pydantic gives
            fields.append([type(default)() for _ in range(T)])
        else:
            fields.append(itertools.repeat(default, T))
    names = tuple(PlanTask.model_fields)
    new_task = _task_builder()
    return [new_task(dict(zip(names, row))) for row in zip(*fields)]


def _json_values(texts: list[str], kind: type, key: str, bad) -> list:
    """The JSON values of ``texts`` (``""``: an empty ``kind``), each a ``kind``.

    Parsed as one JSON array (one call of the C parser, not one per task); when that fails or
    does not give one value per text (a text holding ``1], [2``), text by text, to name the
    first bad one.
    """
    empty = "[]" if kind is list else "{}"
    try:
        values = json.loads("[" + ",".join([t or empty for t in texts]) + "]")
    except (ValueError, RecursionError):            # RecursionError: nested too deep for the parser
        values = None
    if values is None or len(values) != len(texts) or not all(type(v) is kind for v in values):
        values = []
        for i, text in enumerate(texts):
            try:
                v = json.loads(text) if text else kind()
            except ValueError:
                raise bad(f"task #{i}: {key} is not JSON") from None
            except RecursionError:
                raise bad(f"task #{i}: {key} is nested more than {MAX_SPEC_DEPTH} levels") from None
            if not isinstance(v, kind):
                raise bad(f"task #{i}: {key} is not a {kind.__name__}")
            values.append(v)
    return values


def _tasks_of_plain_rows(rows: list) -> list[PlanTask] | None:
    """The :class:`PlanTask` of each row of a YAML task list, or ``None`` for pydantic to decide.

    A row passes here only when pydantic would take every value of it as it is: the field's own
    type (an ``int`` where a float goes becomes that float, as pydantic's lax mode makes it),
    within the field's bounds, no unknown key, every required key. The task is then built
    without a second, per-object validation (:func:`_task_builder`); its lists and dict are
    copies, as pydantic's (the YAML reader shares one parsed flow among the rows that repeat
    it). Any other row (a string for a number, a bool for a count, a missing field) sends the
    whole list to pydantic, which refuses it with the error and line it always gave.
    """
    known = frozenset(PlanTask.model_fields)
    build = _task_builder()
    try:
        return _plain_rows(rows, known, build)
    except OverflowError:                            # an int past the floats: pydantic says so
        return None


def _plain_rows(rows: list, known: frozenset, build) -> list[PlanTask] | None:
    """:func:`_tasks_of_plain_rows`'s loop (``float()`` of a huge int raises ``OverflowError``)."""
    str_, float_, int_, list_, dict_, inf = str, float, int, list, dict, math.inf
    tasks = []
    for row in rows:
        if type(row) is not dict_ or not known.issuperset(row):
            return None
        get = row.get
        tid, kernel, device = get("id"), get("kernel"), get("device")
        start, finish = get("start"), get("finish")
        if type(tid) is not str_ or type(kernel) is not str_ or type(device) is not str_:
            return None
        if type(start) is not float_:
            if type(start) is not int_:
                return None
            start = float(start)
        if type(finish) is not float_:
            if type(finish) is not int_:
                return None
            finish = float(finish)
        if not (0 <= start < inf and 0 <= finish < inf):     # also refuses NaN, as ge=0 does
            return None
        deps = get("deps", ())
        if type(deps) is not list_ and deps != ():
            return None
        deps = list(deps)
        if not all(type(d) is str_ for d in deps):
            return None
        site, estimate = get("site"), get("estimate")
        if (site is not None and type(site) is not str_) or (estimate is not None and type(estimate) is not str_):
            return None
        retries = get("retries", 0)
        if type(retries) is not int_ or not 0 <= retries <= MAX_RETRIES:
            return None
        timeout, share, out = get("timeout"), get("share", 1.0), get("out")
        if timeout is not None:
            if type(timeout) is not float_:
                if type(timeout) is not int_:
                    return None
                timeout = float(timeout)
            if not 0 < timeout <= MAX_TIMEOUT:
                return None
        if type(share) is not float_:
            if type(share) is not int_:
                return None
            share = float(share)
        if not MIN_SHARE <= share <= 1:
            return None
        if out is not None:
            if type(out) is not float_ and type(out) is not int_:
                return None
            if not 0 <= out <= MAX_QUANTITY:        # before float(): an int of 400 digits overflows it
                return None
            out = float(out)
        stateful = get("stateful", False)
        if type(stateful) is not bool:
            return None
        args, kwargs = get("args", ()), get("kwargs")
        if (type(args) is not list_ and args != ()) or (kwargs is not None and type(kwargs) is not dict_):
            return None
        if kwargs and not all(type(k) is str_ for k in kwargs):
            return None
        tasks.append(build({"id": tid, "kernel": kernel, "device": device, "deps": deps, "start": start,
                            "finish": finish, "site": site, "estimate": estimate, "retries": retries,
                            "timeout": timeout, "share": share, "out": out, "stateful": stateful,
                            "args": list(args), "kwargs": dict(kwargs) if kwargs else {}}))
    return tasks


def _task_builder():
    """``build(fields)``: a :class:`PlanTask` of ``fields`` (every field, in the model's order,
    values already checked), made as ``model_construct`` makes one, without its per-call work.

    All tasks share one set of "fields set" (every field: a plan task is written whole); adding
    a name already in it (an assignment) changes nothing.
    """
    new, setattr_ = object.__new__, object.__setattr__
    fields_set = set(PlanTask.model_fields)

    def build(fields: dict) -> PlanTask:
        task = new(PlanTask)
        setattr_(task, "__dict__", fields)
        setattr_(task, "__pydantic_fields_set__", fields_set)
        setattr_(task, "__pydantic_extra__", None)
        setattr_(task, "__pydantic_private__", None)
        return task
    return build


def check_source_confined(plan: Plan) -> None:
    """A plan read from a file uses only a source inside that file's folder or the current folder.

    A plan names the program its tasks run; a plan handed over by someone else must not be able to
    run (or export the text of) ``../../anything.py`` or ``/elsewhere/anything.py``. The plan's own
    folder, and the folder the user runs from (their project: ``.demo/plan.yaml`` running
    ``samples/fm_radio.py``), are the two places a program may be. Links are resolved before
    comparing.
    """
    if plan._folder is None:
        return
    folder = Path(plan._folder).resolve()
    here = Path.cwd().resolve()
    source = Path(plan.source.path)
    resolved = (folder / source).resolve() if not source.is_absolute() else source.resolve()
    if not (resolved.is_relative_to(folder) or resolved.is_relative_to(here)):
        raise PlanError(f"the plan's source {plan.source.path} lies outside the plan's folder {folder} "
                        f"and the current folder {here}",
                        hint="a plan runs only a program in its own folder or in the folder it is run from "
                             "(or below them): run it from the program's project folder, or compile again "
                             "next to the program")


def check_plan_names(plan: Plan, path=None, lines: dict | None = None) -> None:
    """Names a plan file gives that later become file names: output names are identifiers.

    A returned dict's keys name the ``.npz`` members of the outputs, so ``../../x`` or ``a/b``
    must never get that far.
    """
    lines = lines or {}
    outputs = plan.outputs
    if isinstance(outputs, dict) and isinstance(outputs.get("dict"), dict):
        for name in outputs["dict"]:
            if not (isinstance(name, str) and name.isidentifier()):
                raise PlanError(f"output name {name!r} is not an identifier", path=path,
                                line=lines.get(("outputs", "dict", name)) or lines.get(("outputs",)),
                                hint="output names are letters, digits and _, not starting with a digit "
                                     "(they name the .npz members)")


#: What a plan's arguments and outputs may be (:mod:`streammap.ir`'s arg specs).
SPEC_HINT = ("an argument (and the outputs) is {ref: TASK} (with index: I), {value: V}, {list: [...]}, "
             "{tuple: [...]} or {dict: {NAME: ...}}; compile the program again to get a valid plan")


def validate_plan(plan: Plan, path=None, lines: dict | None = None) -> None:
    """Check what pydantic cannot: known devices, unique ids, deps before use, args within deps."""
    lines = lines or {}
    device_ids = {d.id for d in plan.devices}
    if len(device_ids) != len(plan.devices):
        raise PlanError("a device id appears twice in 'devices'", path=path, line=lines.get(("devices",)))
    seen = _check_tasks(plan, device_ids, path, lines)
    problem = spec_problem(plan.outputs) if plan.outputs is not None else None
    if problem:
        raise PlanError(f"the plan's outputs: {problem}", path=path, line=lines.get(("outputs",)),
                        hint=SPEC_HINT)
    for r in spec_refs(plan.outputs):
        if r not in seen:
            raise PlanError(f"the plan's outputs name unknown task {shown(r, _ID_SHOWN)}", path=path, line=lines.get(("outputs",)))
    check_plan_shares(plan, path=path, lines=lines)
    check_plan_colocation(plan, path=path, lines=lines)
    if plan.pipeline is not None:
        _validate_pipeline(plan, path, lines)


#: How much of a task id (or device id) a plan error echoes whole: real ids are far shorter.
_ID_SHOWN = 120


def _check_tasks(plan: Plan, device_ids: set, path, lines: dict) -> set[str]:
    """The per-task rules of :func:`validate_plan`, task by task: raise for the first task at
    fault; the set of the task ids when none is.

    A task's deps must all be ids already seen (one ``issuperset``, the dep at fault only found
    when one is missing); a plain ``{"ref": ...}`` argument is one look-up in the deps, nested
    arguments are walked.
    """
    seen: set[str] = set()
    for i, t in enumerate(plan.tasks):
        # the checks one task at a time, cheapest first; the error's line only once one fails
        if t.id in seen:
            raise PlanError(f"task id {shown(t.id, _ID_SHOWN)} appears twice", path=path, line=lines.get(("tasks", i)))
        if t.device not in device_ids:
            raise PlanError(f"task {shown(t.id, _ID_SHOWN)} is placed on unknown device {shown(t.device, _ID_SHOWN)}", path=path,
                            line=lines.get(("tasks", i)), hint=f"devices of this plan: {', '.join(sorted(device_ids))}")
        deps = t.deps
        if deps and not seen.issuperset(deps):
            dep = next(dep for dep in deps if dep not in seen)
            known = dep in {u.id for u in plan.tasks}
            why = "comes later in the task list (tasks must follow their deps; a cycle?)" if known else "is not a task of this plan"
            raise PlanError(f"task {shown(t.id, _ID_SHOWN)} depends on {shown(dep, _ID_SHOWN)}, which {why}", path=path, line=lines.get(("tasks", i)))
        if len(deps) > 8:
            deps = set(deps)               # a fan-in of 100,000 deps: not a list scan per ref
        for spec in (t.args if not t.kwargs else (*t.args, *t.kwargs.values())):
            problem = spec_problem(spec)
            if problem:
                raise PlanError(f"task {shown(t.id, _ID_SHOWN)}: an argument is malformed: {problem}", path=path,
                                line=lines.get(("tasks", i)), hint=SPEC_HINT)
            if "ref" in spec:              # a plain ref: one look-up, no walk
                missing = spec["ref"]
                if missing in deps:
                    continue
            elif "value" in spec and len(spec) == 1:
                continue                   # a constant (the common case): no refs to walk
            else:
                missing = next((r for r in spec_refs(spec) if r not in deps), None)
                if missing is None:
                    continue
            raise PlanError(f"task {shown(t.id, _ID_SHOWN)} uses the result of {shown(missing, _ID_SHOWN)} but does not list it in deps",
                            path=path, line=lines.get(("tasks", i)))
        if t.finish < t.start:
            raise PlanError(f"task {shown(t.id, _ID_SHOWN)} finishes before it starts", path=path, line=lines.get(("tasks", i)))
        seen.add(t.id)
    return seen


def share_profile(intervals) -> list[tuple[float, float, int]]:
    """The share in use over time from ``(start, finish, share)`` intervals (half-open).

    Returns ``[(t, share, tasks), ...]``: from ``t`` on (until the next entry), ``share`` of the
    device is in use by ``tasks`` tasks. Zero-length intervals hold nothing.
    """
    ev: dict[float, list[float]] = {}
    for s, f, sh in intervals:
        if f > s:
            ev.setdefault(s, [0.0, 0])
            ev.setdefault(f, [0.0, 0])
            ev[s][0] += sh
            ev[s][1] += 1
            ev[f][0] -= sh
            ev[f][1] -= 1
    out, used, n = [], 0.0, 0
    for t in sorted(ev):
        used += ev[t][0]
        n += ev[t][1]
        out.append((t, max(0.0, used) if abs(used) > SHARE_EPS else 0.0, n))
    return out


def check_plan_shares(plan: Plan, path=None, lines: dict | None = None) -> None:
    """Plan validation: on no device that shares (has a task with ``share < 1``) do the shares
    of the tasks running at once exceed 1, nor their number the cluster's ``max_tasks_per_device``.

    Raises
    ------
    PlanError
        Naming the device, the instant, the tasks running then and their shares.
    """
    lines = lines or {}
    spec = plan.cluster.spec or {}
    limit = spec.get("max_tasks_per_device") or math.inf
    if min(map(operator.attrgetter("share"), plan.tasks), default=1.0) >= 1.0 - SHARE_EPS:
        return                                 # no task shares its device (the common plan)
    for d, tasks in plan.tasks_by_device().items():
        # Only devices that share: whole-device tasks run one at a time whatever their estimated
        # times say (a re-mapped plan may keep finished tasks' estimates overlapping new ones).
        if len(tasks) < 2 or all(t.share >= 1.0 - SHARE_EPS for t in tasks):
            continue
        for t, used, n in share_profile((x.start, x.finish, x.share) for x in tasks):
            if used > 1.0 + SHARE_EPS or n > limit:
                running = [x for x in tasks if x.start <= t < x.finish]
                names = ", ".join(f"{x.id} (share {x.share:g})" for x in running[:4])
                more = f" and {len(running) - 4} more" if len(running) > 4 else ""
                if used > 1.0 + SHARE_EPS:
                    what = f"shares sum to {used:.3g} > 1"
                    hint = "lower the tasks' share= clauses or move one to another device; compile again to get a valid plan"
                else:
                    what = f"{n} tasks run at once, above max_tasks_per_device={int(limit)}"
                    hint = "raise max_tasks_per_device in the cluster file, or compile again"
                index = {x.id: i for i, x in enumerate(plan.tasks)}
                raise PlanError(f"device {d} is oversubscribed at t={t:.6g} s: {what} ({names}{more})",
                                path=path, line=lines.get(("tasks", index[running[0].id])) if running else None,
                                hint=hint)


def check_plan_colocation(plan: Plan, path=None, lines: dict | None = None) -> None:
    """Refuse a plan in which a stateful kernel's calls run on more than one device.

    Raises
    ------
    PlanError
        Naming the kernel, its devices and the first call on a second device.
    """
    lines = lines or {}
    if not any(map(operator.attrgetter("stateful"), plan.tasks)):
        return                                 # no stateful kernel (the common plan)
    home: dict[str, tuple[str, str]] = {}          # kernel -> (device, first task)
    for i, t in enumerate(plan.tasks):
        if not t.stateful:
            continue
        first = home.setdefault(t.kernel, (t.device, t.id))
        if first[0] != t.device:
            raise PlanError(f"stateful kernel {t.kernel!r} runs on {first[0]} (task {first[1]!r}) and on "
                            f"{t.device} (task {t.id!r}): its calls share state, so they must run on one device",
                            path=path, line=lines.get(("tasks", i)),
                            hint=f"place every task of {t.kernel!r} on {first[0]}, or compile the program again")


def _validate_pipeline(plan: Plan, path, lines: dict) -> None:
    """A pipeline block names tasks of the plan, one per item per stage, on its replicas' devices."""
    by_id = {t.id: t for t in plan.tasks}
    where = dict(path=path, line=lines.get(("pipeline",)))
    for s in plan.pipeline.stages:
        if len(s.tasks) != plan.pipeline.items:
            raise PlanError(f"pipeline stage {s.name!r} lists {len(s.tasks)} tasks for "
                            f"{plan.pipeline.items} items", **where)
        for tid in s.tasks:
            t = by_id.get(tid)
            if t is None:
                raise PlanError(f"pipeline stage {s.name!r} names unknown task {tid!r}", **where)
            if t.device not in s.replicas:
                raise PlanError(f"task {tid!r} of pipeline stage {s.name!r} runs on {t.device}, "
                                f"which is not one of the stage's replicas", **where)
