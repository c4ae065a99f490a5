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
``params`` are scalars.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
from pathlib import Path
from typing import Any, Literal, Optional, Union

import pydantic
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, StrictBool, StrictFloat, StrictInt, StrictStr

from streammap.errors import PlanError
from streammap.io.files import atomic_write_text
from streammap.io.yamlfile import dump_yaml, load_yaml, validation_error
from streammap.ir import spec_refs

PLAN_VERSION = 1

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
    path: str
    sha256: str
    entry: Optional[str] = None
    kind: Literal["program", "workflow"] = "program"
    # The local modules the program imports (files of its folder), checked like the program itself.
    modules: list[ModuleInfo] = Field(default=[], max_length=1000)


class ClusterInfo(_Strict):
    name: str
    sha256: str = ""
    # The whole cluster in the cluster-file format, so that a runtime can re-map the rest of a
    # plan (a lost or slow device) without the original file.
    spec: Optional[dict] = None


class MapperInfo(_Strict):
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
    memory: Optional[float] = None


class PlanTask(_Strict):
    id: str
    kernel: str
    device: str
    deps: list[str] = []
    start: float = Field(ge=0)
    finish: float = Field(ge=0)
    site: Optional[str] = None
    estimate: Optional[str] = None
    retries: int = Field(default=0, ge=0)
    # Seconds a call may run before it is abandoned and counts as a failure (the kernel's timeout clause).
    timeout: Optional[float] = Field(default=None, gt=0)
    # GPU sharing (streammap.placement.sharing): the fraction of its device the task needs, and, under
    # memory oversubscription, the bytes its output is expected to take (spilling reserves them).
    share: float = Field(default=1.0, gt=0, le=1)
    out: Optional[float] = Field(default=None, ge=0)
    # A call of a stateful kernel: all calls of one kernel must run on one device (streammap.placement.colocate).
    stateful: bool = False
    args: list[Any] = []
    kwargs: dict[str, Any] = {}


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
        data = self.model_dump(mode="json")
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
        for t in data["tasks"]:
            for key, empty in (("site", None), ("estimate", None), ("retries", 0), ("timeout", None), ("share", 1.0), ("out", None), ("stateful", False),
                           ("args", []), ("kwargs", {})):
                if t.get(key) == empty:
                    del t[key]
        return dump_yaml(data, sort_keys=False, default_flow_style=None, width=100, allow_unicode=True)


def _relpath(path: str, base) -> str:
    try:
        return os.path.relpath(os.path.abspath(path), os.path.abspath(base))
    except ValueError:        # another drive on Windows
        return os.path.abspath(path)


def sha256_file(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def write_plan(plan: Plan, path) -> None:
    """Write ``plan`` to ``path`` atomically (a half-written plan never exists).

    The program's path is written relative to the plan's folder, so a folder holding both can be
    moved. :func:`read_plan` gives the same plan back.

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
    text = plan.to_yaml(relative_to=path.parent)
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
    data, lines = load_yaml(path, PlanError)
    if not isinstance(data, dict) or "streammap_plan" not in data:
        raise PlanError("not a StreamMAP plan (no 'streammap_plan' version)", path=path, line=1,
                        hint="make one with: streammap compile PROGRAM --cluster CLUSTER -o plan.yaml")
    if data["streammap_plan"] != PLAN_VERSION:
        raise PlanError(f"plan version {data['streammap_plan']!r} is not supported (this StreamMAP reads {PLAN_VERSION})",
                        path=path, line=lines.get(("streammap_plan",)), hint="compile the program again")
    try:
        plan = Plan.model_validate(data)
    except pydantic.ValidationError as exc:
        raise validation_error(exc, path, lines, PlanError, "plan") from None
    src = Path(plan.source.path)
    if not src.is_absolute():
        plan.source.path = os.path.normpath(path.parent / src)
    plan._folder = os.path.abspath(path.parent)
    validate_plan(plan, path=path, lines=lines)
    check_plan_names(plan, path=path, lines=lines)
    return plan


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


def validate_plan(plan: Plan, path=None, lines: dict | None = None) -> None:
    """Check what pydantic cannot: known devices, unique ids, deps before use, args within deps."""
    lines = lines or {}
    device_ids = {d.id for d in plan.devices}
    if len(device_ids) != len(plan.devices):
        raise PlanError("a device id appears twice in 'devices'", path=path, line=lines.get(("devices",)))
    seen: set[str] = set()
    for i, t in enumerate(plan.tasks):
        where = dict(path=path, line=lines.get(("tasks", i)))
        if t.id in seen:
            raise PlanError(f"task id {t.id!r} appears twice", **where)
        if t.device not in device_ids:
            raise PlanError(f"task {t.id!r} is placed on unknown device {t.device!r}", **where,
                            hint=f"devices of this plan: {', '.join(sorted(device_ids))}")
        for dep in t.deps:
            if dep not in seen:
                known = dep in {u.id for u in plan.tasks}
                why = "comes later in the task list (tasks must follow their deps; a cycle?)" if known else "is not a task of this plan"
                raise PlanError(f"task {t.id!r} depends on {dep!r}, which {why}", **where)
        deps = set(t.deps) if len(t.deps) > 8 else t.deps      # a fan-in of 100,000 deps: not a list scan per ref
        missing = [r for spec in (*t.args, *t.kwargs.values()) for r in spec_refs(spec) if r not in deps]
        if missing:
            raise PlanError(f"task {t.id!r} uses the result of {missing[0]!r} but does not list it in deps", **where)
        if t.finish < t.start:
            raise PlanError(f"task {t.id!r} finishes before it starts", **where)
        seen.add(t.id)
    for r in spec_refs(plan.outputs):
        if r not in seen:
            raise PlanError(f"the plan's outputs name unknown task {r!r}", path=path, line=lines.get(("outputs",)))
    check_plan_shares(plan, path=path, lines=lines)
    check_plan_colocation(plan, path=path, lines=lines)
    if plan.pipeline is not None:
        _validate_pipeline(plan, path, lines)


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
    index = {t.id: i for i, t in enumerate(plan.tasks)}
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
