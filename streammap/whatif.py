"""What if devices or nodes are lost while a plan runs? The makespan with the runtime's recovery.

:func:`what_if` re-times a plan, on the cluster it was made for, with devices or whole nodes lost
at given times, and returns a :class:`WhatIf`: the plan's makespan, the makespan with the losses
and the recovery, and per loss which tasks were interrupted, run again or moved where, and the
work lost. It answers the capacity-planning question "what does losing node2 halfway cost?"
before a node is bought or lost. ``streammap show plan.yaml --what-if "lose node2@50%"`` prints it.

Events
------
:func:`parse_losses` reads ``"lose gpu3@0.5s, lose node2@1.2ms, lose node0/gpu1"``: comma-separated
``lose NAME[@TIME]``. ``NAME`` is a node of the cluster file (all its devices), a device id as plans
write it (``node0/gpu1``), or a device's own name when one node has it (``gpu1``). ``TIME`` is
what :func:`streammap.units.parse_time` reads (``0.5s``, ``1.2ms``, a number of seconds) or a
percentage of the plan's makespan (``50%``); without it the loss is at time 0 (the devices are
gone when the run starts). Losses are applied in time order (ties in the order written).

The model: a discrete-event replay on the plan's estimates
------------------------------------------------------------
Times are the plan's estimated starts and finishes (the cost model and schedule the mappers made,
:mod:`streammap.mappers.schedule`); nothing runs. At a loss at time ``L`` of the devices ``X``
(``current`` is the plan as re-mapped by the earlier losses):

1. **Finished** are the tasks with ``finish <= L``; **interrupted** are those running on ``X`` at
   ``L`` (``start < L < finish``): their work since ``start`` is lost and they start over.
2. **Drain**, as the backend does it until it re-maps:

   ``local`` (the local executor, :mod:`streammap.runtime.run`): the supervisor asks the executor
   to drain: tasks running on the surviving devices finish, nothing new starts. The re-mapping
   starts at the drain's end ``D``, the latest finish of those running tasks (``L`` if none).

   ``ray`` (:mod:`streammap.runtime.ray.executor`): every call was submitted at the start, so the
   surviving actors keep running what they can; a task whose input is gone (produced on ``X``
   and not yet fetched by a consumer that started before ``L``) fails at once, and so does
   everything that waits on it. The driver re-maps once every outstanding call has ended: ``D``
   is the latest finish of the tasks that still ran. Those keep their planned times (their inputs
   are unaffected, so the estimates stand).

   ``auto`` (the default) is ``ray`` for a plan whose tasks span several nodes (the local
   executor runs one machine) and ``local`` otherwise, as ``streammap run`` would have to.
3. **Re-map** with the runtime's own recovery, :func:`streammap.remap.remap_plan` (HEFT on the
   surviving devices, from ``D`` on, every device free at ``D`` since nothing runs after a
   drain), given the finished tasks with the device holding each output, ``lost`` = every device
   lost so far, and ``available`` = the outputs the executor still holds: those of a finished
   task on a surviving device that an unfinished task or the plan's outputs still need (both
   executors free a result once its last consumer has finished). So, as in a real run, a
   finished task whose output was on a lost device is **run again** only when something still
   needs it (an output already consumed by finished tasks is not missed), and so is whatever it
   needs in turn whose result was freed.
4. The new plan's tasks keep their times when finished, the rest get the re-mapped ones; the
   next loss is replayed on it. The **makespan** is the latest finish of all tasks.

A loss at or after the makespan changes nothing (the run has ended); so does the loss of a device
no task of the current plan uses (no executor watches or runs it: nothing drains), or of a device
already lost. **Lost work** of a loss is the interrupted tasks' time since their start plus the
planned time of every task run again. Executor overheads (the mapping time, Ray's failure
detection) are not modelled, nor the runtime's cap on recoveries (``max_remaps`` /
``--max-recoveries``, 3 by default): a what-if with more losses shows what unlimited recovery
would give.

Errors (:class:`~streammap.errors.StreamMapError`, exit status 2 from the CLI): an event that
does not read, an unknown or ambiguous name (the hint lists the valid ones), losing every
device (``no device left: the plan cannot finish``), or a recovery the runtime could not make
(no device of a kind some task needs; a stateful kernel's state lost); each names the event as
written.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Iterable, Sequence

from streammap.errors import StreamMapError, shown
from streammap.ir import spec_refs
from streammap.plan import Plan
from streammap.remap import RemapError, remap_plan
from streammap.units import parse_time

#: Recovery models: which executor's recovery the replay follows (see the module docstring).
BACKENDS = ("auto", "local", "ray")

#: Most events one question may hold: each is replayed (a re-mapping) and printed as a row, and
#: a command line holds a hundred thousand (a minute of replays); a cluster loses far fewer.
MAX_EVENTS = 1000
#: How many names an error's hint lists before it says how many more there are.
NAMES_IN_HINT = 24

_SYNTAX = "write lose NAME[@TIME], e.g. 'lose node2@1.2ms, lose gpu3@50%' (no TIME: lost at the start)"
_SECONDS = re.compile(r"\+?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")       # a bare number: seconds
_EVENT = re.compile(r"\s*(?P<verb>\w+)\s+(?P<target>[^@\s]+)\s*(?:@\s*(?P<time>.+?))?\s*")


@dataclass(frozen=True)
class Loss:
    """One event: ``devices`` (plan device ids) lost at ``at`` seconds, as written in ``text``."""

    text: str
    target: str
    at: float
    devices: tuple[str, ...]


@dataclass
class Recovery:
    """What one loss did.

    Attributes
    ----------
    loss : Loss
    effect : str
        ``recovered`` (drained and re-mapped), ``after the end`` (at or after the makespan),
        ``unused`` (no task of the plan on the lost devices) or ``already lost``.
    resumed : float
        When the re-mapped rest starts (the drain's end); the loss time when nothing was re-mapped.
    interrupted : list of str
        Tasks running on the lost devices at the loss, started over.
    rerun : list of str
        Finished tasks run again: their outputs were lost (or freed) and are needed.
    moved : list of (task, from, to)
        Unfinished tasks the re-mapping put on another device.
    lost_work : float
        Seconds of device work thrown away: the interrupted tasks' time since their start, plus
        the planned time of the tasks run again.
    makespan : float
        The makespan after this loss.
    """

    loss: Loss
    effect: str
    resumed: float
    interrupted: list[str] = field(default_factory=list)
    rerun: list[str] = field(default_factory=list)
    moved: list[tuple[str, str, str]] = field(default_factory=list)
    lost_work: float = 0.0
    makespan: float = 0.0


@dataclass
class WhatIf:
    """The result of :func:`what_if`: the plan's makespan, the makespan with the losses and the
    recovery, one :class:`Recovery` per loss (in time order), and the final plan."""

    plan_makespan: float
    makespan: float
    backend: str
    recoveries: list[Recovery]
    plan: Plan

    @property
    def delay(self) -> float:
        """Seconds the losses add to the makespan."""
        return self.makespan - self.plan_makespan

    @property
    def lost_work(self) -> float:
        return sum(r.lost_work for r in self.recoveries)

    def to_dict(self) -> dict:
        """Plain data (no plan), for JSON."""
        return {"plan_makespan": self.plan_makespan, "makespan": self.makespan, "delay": self.delay,
                "lost_work": self.lost_work, "backend": self.backend,
                "recoveries": [asdict(r) for r in self.recoveries]}


# -- events ------------------------------------------------------------------------------------

def _node(device_id: str) -> str:
    return device_id.rpartition("/")[0]


def _names_hint(plan: Plan) -> str:
    ids = [d.id for d in plan.devices]
    nodes = list(dict.fromkeys(_node(i) for i in ids if _node(i)))
    names = nodes + ids
    shown = ", ".join(names[:NAMES_IN_HINT])
    more = f" and {len(names) - NAMES_IN_HINT} more" if len(names) > NAMES_IN_HINT else ""
    return f"nodes and devices of cluster {plan.cluster.name!r}: {shown}{more}"


def _resolve(plan: Plan, target: str, text: str) -> tuple[str, ...]:
    """The plan device ids ``target`` names: a device id, a node, or a device name one node has."""
    ids = [d.id for d in plan.devices]
    if target in ids:
        return (target,)
    on_node = tuple(i for i in ids if _node(i) == target)
    if on_node:
        return on_node
    by_name = [i for i in ids if i.rpartition("/")[2] == target]
    if len(by_name) == 1:
        return (by_name[0],)
    if by_name:
        raise StreamMapError(f"--what-if {_quoted(text)}: {_quoted(target)} names a device on several nodes",
                             hint="write it as NODE/DEVICE: " + ", ".join(by_name))
    raise StreamMapError(f"--what-if {_quoted(text)}: the cluster has no node or device {_quoted(target)}",
                         hint=_names_hint(plan))


def _time(value: str, text: str, makespan: float) -> float:
    if value.endswith("%"):
        try:
            share = float(value[:-1])
        except ValueError:
            share = -1.0
        if not 0 <= share < float("inf"):
            raise StreamMapError(f"--what-if {_quoted(text)}: cannot read {_quoted(value)} as a share of the makespan",
                                 hint="write e.g. 50% (of the plan's makespan)")
        return share / 100.0 * makespan
    try:
        return parse_time(float(value) if _SECONDS.fullmatch(value) else value)
    except ValueError as exc:
        why = str(exc) if len(value) <= 100 else f"cannot read {_quoted(value)} as a time"
        raise StreamMapError(f"--what-if {_quoted(text)}: {why}", hint=_SYNTAX) from None


def _quoted(text: str) -> str:
    """``text`` quoted for an error, its start only when it is long (an error is a few lines)."""
    return shown(text, 100)


def parse_losses(plan: Plan, text: str | Iterable[str]) -> list[Loss]:
    """The events of ``text`` (one string of comma-separated events, or several strings), each
    resolved against ``plan``'s devices, in time order (see the module docstring).

    Raises
    ------
    StreamMapError
        An event that does not read, or names no node or device of the cluster.
    """
    texts = [text] if isinstance(text, str) else list(text)
    parts = [p.strip() for t in texts for p in t.split(",")]
    if not any(parts):
        raise StreamMapError("--what-if needs at least one event", hint=_SYNTAX)
    if len(parts) > MAX_EVENTS:
        raise StreamMapError(f"--what-if holds {len(parts)} events (limit: {MAX_EVENTS})",
                             hint="ask about fewer losses at a time: a device lost once stays lost")
    makespan = plan_makespan(plan)
    losses = []
    for part in parts:
        if not part:
            raise StreamMapError(f"--what-if {_quoted(', '.join(texts))}: an empty event between commas", hint=_SYNTAX)
        m = _EVENT.fullmatch(part)
        if m is None or m["verb"].lower() != "lose":
            raise StreamMapError(f"--what-if {_quoted(part)}: cannot read this event", hint=_SYNTAX)
        at = 0.0 if m["time"] is None else _time(m["time"].strip(), part, makespan)
        losses.append(Loss(text=part, target=m["target"], at=at, devices=_resolve(plan, m["target"], part)))
    return sorted(losses, key=lambda loss: loss.at)        # stable: ties keep the order written


# -- the replay --------------------------------------------------------------------------------

def plan_makespan(plan: Plan) -> float:
    """The latest estimated finish of the plan's tasks (0 for an empty plan)."""
    return max((t.finish for t in plan.tasks), default=0.0)


def _backend(plan: Plan, backend: str) -> str:
    if backend not in BACKENDS:
        raise StreamMapError(f"unknown what-if backend {backend!r}", hint="one of " + ", ".join(BACKENDS))
    if backend != "auto":
        return backend
    return "ray" if len({_node(t.device) for t in plan.tasks}) > 1 else "local"


def _still_running(plan: Plan, at: float, lost: set, backend: str) -> set[str]:
    """Unfinished tasks at ``at`` that still finish before the re-mapping (see step 2)."""
    running = {t.id for t in plan.tasks if t.start < at < t.finish and t.device not in lost}
    if backend == "local":
        return running
    finished = {t.id for t in plan.tasks if t.finish <= at}
    device = {t.id: t.device for t in plan.tasks}
    ran = set(running)
    for t in plan.tasks:                # plan order is topological: deps are judged first
        if t.id in finished or t.id in ran or t.device in lost:
            continue
        if all(d in ran or (d in finished and device[d] not in lost) for d in t.deps):
            ran.add(t.id)
    return ran


def _held(plan: Plan, done: set, lost: set) -> set[str]:
    """Finished outputs the executor still holds: on a surviving device, and needed by an
    unfinished task or the plan's outputs (a result is freed after its last consumer)."""
    needed = set(spec_refs(plan.outputs)) if plan.outputs is not None else set()
    for t in plan.tasks:
        if t.id not in done:
            needed.update(t.deps)
    device = {t.id: t.device for t in plan.tasks}
    return {k for k in done if k in needed and device[k] not in lost}


def _recover(plan: Plan, loss: Loss, lost: set, backend: str) -> tuple[Plan, Recovery]:
    """Replay one loss on ``plan`` (``lost``: every device lost so far, this loss's included)."""
    at = loss.at
    interrupted = [t.id for t in plan.tasks if t.start < at < t.finish and t.device in loss.devices]
    ran = _still_running(plan, at, lost, backend)
    by_id = {t.id: t for t in plan.tasks}
    done = {t.id: t.device for t in plan.tasks if t.finish <= at or t.id in ran}
    resumed = max([at] + [by_id[k].finish for k in ran])
    try:
        result = remap_plan(plan, done, resumed, lost=lost, available=_held(plan, set(done), lost))
    except RemapError as exc:
        raise StreamMapError(f"--what-if {_quoted(loss.text)}: the plan cannot finish: {exc.message}",
                             hint=exc.hint or "lose fewer devices, or none of the kind the tasks need") from None
    new = {t.id: t for t in result.plan.tasks}
    lost_work = sum(at - by_id[k].start for k in interrupted)
    lost_work += sum(by_id[k].finish - by_id[k].start for k in result.rerun)
    recovery = Recovery(loss=loss, effect="recovered", resumed=resumed, interrupted=interrupted,
                        rerun=list(result.rerun),
                        moved=[(k, by_id[k].device, new[k].device) for k in result.moved],
                        lost_work=lost_work, makespan=plan_makespan(result.plan))
    return result.plan, recovery


def what_if(plan: Plan, losses: str | Sequence[Loss] | Iterable[str], *, backend: str = "auto") -> WhatIf:
    """Re-time ``plan`` with devices or nodes lost (see the module docstring).

    Parameters
    ----------
    plan : Plan
        A plan as compiled (it carries its cluster) or a re-mapped one.
    losses : str, list of str, or list of Loss
        Events as :func:`parse_losses` reads them, or already parsed.
    backend : str
        Whose recovery to replay: ``local``, ``ray`` or ``auto`` (``ray`` when the plan's tasks
        span several nodes).

    Returns
    -------
    WhatIf

    Raises
    ------
    StreamMapError
        Bad events, every device lost, or a loss the runtime could not recover from.
    """
    given = [losses] if isinstance(losses, str) else list(losses)
    if all(isinstance(e, Loss) for e in given):
        events = sorted(given, key=lambda loss: loss.at)
    else:
        events = parse_losses(plan, given)
    mode = _backend(plan, backend)
    every = {d.id for d in plan.devices}
    current, lost = plan, set()
    recoveries = []
    for loss in events:
        makespan = plan_makespan(current)
        fresh = set(loss.devices) - lost
        if loss.at >= makespan:
            recoveries.append(Recovery(loss=loss, effect="after the end", resumed=loss.at, makespan=makespan))
            continue
        lost |= fresh
        if lost >= every:
            raise StreamMapError(f"--what-if {_quoted(loss.text)}: no device left: the plan cannot finish",
                                 hint="lost by then: " + ", ".join(sorted(lost)))
        effect = "already lost" if not fresh else "" if fresh & {t.device for t in current.tasks} else "unused"
        if effect:
            recoveries.append(Recovery(loss=loss, effect=effect, resumed=loss.at, makespan=makespan))
            continue
        current, recovery = _recover(current, loss, lost, mode)
        recoveries.append(recovery)
    return WhatIf(plan_makespan=plan_makespan(plan), makespan=plan_makespan(current), backend=mode,
                  recoveries=recoveries, plan=current)

