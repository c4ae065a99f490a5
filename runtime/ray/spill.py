"""Spilling on Ray: each device's actor keeps its real memory within capacity.

Under ``memory_oversubscription`` F > 1 the plan may hold up to F x capacity on a device; the
local executor spills (:mod:`.spill`), and so does every :class:`~.executor.DeviceActor`, with
the same policy (:class:`streammap.placement.spilling.SpillBook`: least-soon-needed results go to host
memory first, a spilled input comes back before its task runs, inputs of running tasks are pinned)
and the same run-record fields (``devices[].spill``).

State (per actor, per run segment)
----------------------------------
``spiller``   a :class:`~.spill.Spiller` over the actor's ``values`` (task id -> result) with a
              book of this device alone: its capacity (the plan's ``devices[].memory``), and per
              result it holds the plan positions of its consumers *on this actor*.
``inputs`` / ``reserve``   per step: the results of this actor it reads (pinned while it runs),
              and the bytes its output is planned to take (reserved while it runs).
``keep``      the results that stay on the device after their task: plan outputs and results a
              later task of this actor reads.
``carried``   the spill figures of earlier segments (a recovery starts a new book).

Policy, where it differs from the local executor because a result has one home per actor:

- A result that only tasks on *other* actors read left the device when its task finished (a host
  copy for Ray's object store, or a CUDA IPC copy, :mod:`.ipc`, that the producer keeps apart
  until its consumers have copied it). It is not kept in ``values``, so it neither takes device
  memory nor is ever spilled; those copies stay valid whatever happens to the device copy.
- A kept result's next use is its next consumer on this actor; it is freed after the last one.
- A CUDA IPC copy waiting for its consumers takes device memory the book counts, pinned (it
  cannot move while another process may be reading it), until the producer frees it; room is
  made for it like for a task's output.
- ``export`` of a spilled result (the plan's outputs at the end, a carried result after a
  recovery) returns its host copy as it is.

So on a plan whose memory pressure sits on devices that do not hand results to others the actors
spill exactly what the local executor spills (and the compiler estimates); where results cross
devices the figures may differ either way: an actor holds nothing for other devices, but counts
the IPC copies waiting for them, and orders its results by its own next consumers.
"""

from __future__ import annotations

import math

from streammap.ir import spec_refs
from streammap.runtime.spill import Spilled, Spiller, nbytes_of


def oversubscribed(plan) -> bool:
    """Whether the plan's cluster sets ``memory_oversubscription`` above 1 (the actors spill)."""
    spec = plan.cluster.spec or {}
    return float(spec.get("memory_oversubscription", 1.0) or 1.0) > 1.0


def spill_tables(plan, todo: list, dev_of: dict, held: dict, outputs: set) -> dict:
    """Per device of the segment: what its actor's spill book needs (see the module docstring).

    Parameters
    ----------
    plan : Plan
        The segment's plan.
    todo : list of int
        Plan positions of the tasks to run.
    dev_of : dict
        Task id -> device holding (or to hold) its result.
    held : dict
        Device -> ids of the results its actor still holds from earlier segments.
    outputs : set
        Ids of the plan's outputs.
    """
    tasks = plan.tasks
    todo_ids = {tasks[k].id for k in todo}
    tables: dict[str, dict] = {}
    for k in todo:
        t = tasks[k]
        d = t.device
        tab = tables.get(d)
        if tab is None:
            mem = plan.device(d).memory
            tab = tables[d] = {"capacity": float(mem) if mem is not None else math.inf,
                               "consumers": {}, "inputs": {}, "reserve": {}, "outputs": set(), "made": []}
        local = sorted({r for s in (*t.args, *t.kwargs.values()) for r in spec_refs(s)
                        if dev_of[r] == d and (r in todo_ids or r in held.get(d, ()))})
        for r in local:
            tab["consumers"].setdefault(r, []).append(k)
        tab["inputs"][k] = tuple(local)
        tab["reserve"][k] = float(t.out or 0.0)
        tab["made"].append(t.id)
        if t.id in outputs:
            tab["outputs"].add(t.id)
    return tables


class ActorSpill:
    """One actor's spilling for one segment (built by ``DeviceActor.prepare_spilling``)."""

    def __init__(self, device_id: str, dev, values: dict, table: dict, carried: dict | None = None):
        consumers = {r: sorted(ks) for r, ks in table["consumers"].items()}
        owner = {r: device_id for r in (*consumers, *values, *table["made"])}
        self.device_id = device_id
        self.values = values
        self.inputs = table["inputs"]
        self.reserve = table["reserve"]
        self.keep = set(consumers) | set(table["outputs"])
        self.spiller = Spiller({device_id: table["capacity"]}, consumers, owner, values, None, {device_id: dev})
        self.carried = carried or {}
        for r, v in list(values.items()):      # results held from an earlier segment
            if isinstance(v, Spilled):
                self.spiller.hold(r, device_id, nbytes_of(v.host), spilled=True)
            else:
                self.spiller.hold(r, device_id, nbytes_of(v))

    def keeps(self, tid: str) -> bool:
        """Whether ``tid``'s result stays on the device after its task (see the module docstring)."""
        return tid in self.keep

    def admit(self, k: int, tid: str) -> None:
        self.spiller.admit(tid, self.device_id, self.inputs.get(k, ()), self.reserve.get(k, 0.0), pos=k)

    def finish(self, k: int, tid: str, stored: bool) -> None:
        self.spiller.finish(tid, self.device_id, self.inputs.get(k, ()), stored)

    def release(self, tid: str) -> None:
        self.spiller.release(tid)

    def hold_shared(self, tid: str, nbytes: float) -> None:
        """A CUDA IPC copy of ``tid``'s result waits on the device for its consumers: its bytes
        count, and cannot move, until :meth:`drop_shared`."""
        self.spiller.hold(("shared", tid), self.device_id, nbytes, pinned=True)

    def drop_shared(self, tid: str) -> None:
        self.spiller.unpin(("shared", tid))

    def report(self) -> dict:
        """This device's spill figures, earlier segments included (the run record's form)."""
        rec = self.spiller.report()[self.device_id]
        for key, v in self.carried.items():
            rec[key] = max(rec[key], v) if key == "overflow" else rec[key] + v
        return rec


def host_value(v):
    """A held value as ``export`` hands it out: a spilled result's host copy."""
    return v.host if isinstance(v, Spilled) else v
