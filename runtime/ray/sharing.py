"""GPU sharing on Ray: admission by share inside a device's actor.

A plan that shares devices (some task with ``share < 1``) runs each device's actor with
``max_concurrency`` = its number of tasks (at most :data:`MAX_CONCURRENCY`), so that every call
submitted to it has a thread, and a :class:`ShareGate` in the actor decides when a call may run:
once the tasks of the same device it depends on have finished, its share fits (shares running +
its own <= 1) and fewer than ``max_tasks_per_device`` tasks run. Calls that wait hold a thread but
no device time. Without shares the actor keeps ``max_concurrency=1`` and no gate (calls run in
submission order, as before).

Results used on the actor are freed when their last local consumer has finished (counted, since
consumers may now finish out of plan order). On a GPU each of the actor's threads launches on its
own CUDA stream.
"""

from __future__ import annotations

import math
import threading
from typing import NamedTuple

from streammap.ir import spec_refs

#: The most threads one device's actor gets (calls beyond it wait in Ray's queue).
MAX_CONCURRENCY = 512
SHARE_EPS = 1e-9


def plan_shares_devices(plan) -> bool:
    """Whether some task of ``plan`` needs less than its whole device."""
    return any(t.share < 1.0 - SHARE_EPS for t in plan.tasks)


def actor_concurrency(plan, device: str) -> int:
    """``max_concurrency`` for the actor of ``device``: 1 unless the plan shares devices."""
    if not plan_shares_devices(plan):
        return 1
    n = sum(1 for t in plan.tasks if t.device == device)
    return max(1, min(n, MAX_CONCURRENCY))


class Admission(NamedTuple):
    """What the gate of a task's actor needs to admit it (one per task of the segment)."""

    task_id: str
    share: float                    #: the fraction of the device the task uses while it runs
    deps: tuple                     #: ids of the tasks on the same actor it must wait for


class ShareGate:
    """Admission of one actor's calls by share, task slots and same-device dependencies."""

    def __init__(self, admission: dict, uses: dict, limit: float | None):
        self.admission = admission          # task index -> Admission
        self.uses = dict(uses)              # result id -> local consumers still to finish
        self.limit = math.inf if not limit else float(limit)
        self.cond = threading.Condition()
        self.used = 0.0
        self.running = 0
        self.finished: set = set()
        self.local = threading.local()

    def enter(self, k: int) -> None:
        step = self.admission[k]
        share = step.share
        with self.cond:
            while not (all(d in self.finished for d in step.deps) and self.used + share <= 1.0 + SHARE_EPS
                       and self.running < self.limit):
                self.cond.wait()
            self.used += share
            self.running += 1

    def leave(self, k: int, ok: bool) -> None:
        step = self.admission[k]
        with self.cond:
            self.used -= step.share
            self.running -= 1
            if ok:
                self.finished.add(step.task_id)
            self.cond.notify_all()

    def free(self, values: dict, frees, drop=None) -> None:
        """Count down the local consumers of ``frees``; drop each result after its last one
        (``drop(id)``, default: remove it from ``values``)."""
        with self.cond:
            for f in frees:
                n = self.uses.get(f, 1) - 1
                if n <= 0:
                    self.uses.pop(f, None)
                    if drop is None:
                        values.pop(f, None)
                    else:
                        drop(f)
                else:
                    self.uses[f] = n

    def stream(self, dev):
        """This thread's CUDA stream on ``dev`` (one per actor thread)."""
        s = getattr(self.local, "stream", None)
        if s is None:
            with dev.device:
                s = self.local.stream = dev.cupy.cuda.Stream(non_blocking=True)
        return s


def sharing_steps(plan, todo: list, dev_of: dict, outputs: set, held: dict) -> tuple[dict, dict, dict]:
    """Per device: the gate's admission table (task index → :class:`Admission`) and local use
    counts (result id → its consumers on the device), and per task id the local results it frees
    (for :class:`ShareGate`; they replace :attr:`.executor.ActorStep.frees`)."""
    tasks = plan.tasks
    todo_ids = {tasks[k].id for k in todo}
    admission: dict[str, dict] = {}
    uses: dict[str, dict] = {}
    frees: dict[str, tuple] = {}
    for k in todo:
        t = tasks[k]
        d = t.device
        deps = tuple(x for x in t.deps if x in todo_ids and dev_of[x] == d)
        admission.setdefault(d, {})[k] = Admission(t.id, t.share, deps)
        local = []
        for r in dict.fromkeys(r for s in (*t.args, *t.kwargs.values()) for r in spec_refs(s)):
            if dev_of[r] == d and (r in todo_ids or r in held.get(d, ())) and r not in outputs:
                local.append(r)
                uses.setdefault(d, {})[r] = uses.get(d, {}).get(r, 0) + 1
        frees[t.id] = tuple(local)
    return admission, uses, frees
