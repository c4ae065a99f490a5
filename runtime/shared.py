"""The sharing executor: co-located tasks run at once on one device, and memory spills.

:class:`SharingExecutor` is the local executor (:mod:`.local`) for plans that share devices
(some task has ``share < 1``) or oversubscribe memory (``memory_oversubscription > 1``). Plans
without either keep running on :class:`~.local.LocalExecutor` unchanged.

State (beyond the local executor's ``results``, ``done``, ``events``, timings)
-----------------------------------------------------------------------------
``ready``     a ``threading.Event`` per task, set once it is done (or the run stops).
``slots``     per device: an admission lock, the index of the next task to admit, and under a
              condition variable the share in use and the number of tasks running.
``uses``      per kept result, a counter of its consumers still to finish (any device).
``spiller``   under oversubscription, a :class:`~.spill.Spiller` (else ``None``).

Policy
------
- **Admission, FIFO by share**: each device has ``K`` worker threads, ``K`` the most tasks that
  can run there at once (``1 / smallest share``, at most ``max_tasks_per_device`` and the number
  of its tasks); on a GPU each has its own CUDA stream. A worker takes the device's next task *in
  plan order* under the admission lock, waits for its dependencies (on any device, this one too),
  then until its share fits (shares running + its own <= 1, fewer than ``max_tasks_per_device``
  running), and only then lets the next worker admit. So tasks start in plan order, as the plan's
  schedule (:func:`streammap.placement.sharing.simulate_shared`) assumes, and never overfill the device.
- **GPU**: the worker's stream waits on the events of the task's GPU inputs; inputs are moved on
  the device's own stream, which the worker's stream then waits on; the worker holds the task's
  share until the task's end event has completed, so the share measures work on the GPU, not
  host-side launches.
- **Freeing**: a result is dropped when its last consumer, on any device, has finished (a device's
  tasks may now finish out of order); plan outputs are kept.
- **Spilling**: at admission the task's inputs are pinned and restored (a spilled input from
  another device is read from its host copy), and room made for its output; at finish its output is accounted and the device brought back within its capacity
  (:mod:`.spill`). The time a task spends on its spills is part of its measured time, as the
  compiler's estimate charges it.
- **A job's fraction** (joint placement, :mod:`streammap.tenancy.packing`): when the job service
  grants a job only a fraction of a GPU it sets ``STREAMMAP_DEVICE_SHARE`` (:data:`DEVICE_SHARE_ENV`);
  every accelerator then admits the job's tasks while their shares sum to at most that fraction
  (a task asking more than the fraction runs alone), so the job uses no more than it was granted.
- **Failure and draining** as in the local executor; a stop also wakes every waiter. Inputs are
  read-only and timeouts apply as there (the steps are the local executor's).
"""

from __future__ import annotations

import itertools
import math
import os
import threading
import time

from streammap.errors import StreamMapError
from streammap.ir import spec_refs
from streammap.plan import Plan
from streammap.runtime.context import set_current_device
from streammap.runtime.guard import read_only
from streammap.runtime.local import LocalExecutor, _Stop
from streammap.runtime.spill import HostView, Spilled, Spiller, nbytes_of

#: Slack when summing shares.
SHARE_EPS = 1e-9
#: Worker threads per device when neither shares nor ``max_tasks_per_device`` bound them.
MAX_WORKERS = 64
#: The environment variable holding the fraction of each GPU this run was granted (joint placement).
DEVICE_SHARE_ENV = "STREAMMAP_DEVICE_SHARE"


def device_share() -> float:
    """The fraction of each accelerator this run may use: ``$STREAMMAP_DEVICE_SHARE``, else 1."""
    text = os.environ.get(DEVICE_SHARE_ENV, "").strip()
    if not text:
        return 1.0
    try:
        share = float(text)
    except ValueError:
        share = math.nan
    if not 0 < share <= 1:
        raise StreamMapError(f"{DEVICE_SHARE_ENV}={text!r} is not a fraction of a device",
                             hint="a number in (0, 1], set by the job service for a job granted part of a GPU")
    return share


def needs_sharing_executor(plan: Plan) -> bool:
    """Whether ``plan`` shares a device (a task with ``share < 1``), oversubscribes memory, or runs
    on a fraction of its GPUs (``$STREAMMAP_DEVICE_SHARE``)."""
    spec = plan.cluster.spec or {}
    if float(spec.get("memory_oversubscription", 1.0) or 1.0) > 1.0:
        return True
    if device_share() < 1.0:
        return True
    return any(t.share < 1.0 - SHARE_EPS for t in plan.tasks)


class _Slots:
    __slots__ = ("admit", "next", "cond", "used", "running", "limit", "capacity")

    def __init__(self, limit: float, capacity: float = 1.0):
        self.admit = threading.Lock()
        self.next = 0
        self.cond = threading.Condition()
        self.used = 0.0
        self.running = 0
        self.limit = limit
        self.capacity = capacity          # the share of the device this run may use


class SharingExecutor(LocalExecutor):
    """Run a plan whose devices run several tasks at once, and spill under oversubscription."""

    def _compile(self) -> None:
        super()._compile()
        plan, tasks, index = self.plan, self.plan.tasks, self.index
        spec = plan.cluster.spec or {}
        self.max_tasks = spec.get("max_tasks_per_device") or math.inf
        n = self.n
        self.ready = [threading.Event() for _ in range(n)]
        for k in self.carried:
            self.ready[k].set()
        outputs = {index[r] for r in spec_refs(plan.outputs)}
        consumers: dict[int, list[int]] = {}
        self.inputs: list[tuple] = [()] * n
        for k, t in enumerate(tasks):
            if k in self.carried:
                continue
            refs = sorted({index[r] for s in (*t.args, *t.kwargs.values()) for r in spec_refs(s)})
            self.inputs[k] = tuple(refs)
            for i in refs:
                consumers.setdefault(i, []).append(k)
        self.store = [k in outputs or k in consumers for k in range(n)]
        self.uses = {i: (itertools.count(), len(c)) for i, c in consumers.items() if i not in outputs}
        self.deps = [tuple(index[d] for d in t.deps if index[d] not in self.carried) for t in tasks]
        self.slots: dict[str, _Slots] = {}
        self._workers_of: dict[str, int] = {}
        granted = device_share()
        kinds = {dev.id: dev.kind for dev in plan.devices}
        for d, ks in self.order.items():
            capacity = granted if kinds.get(d) != "cpu" else 1.0
            smallest = min((tasks[k].share for k in ks), default=1.0)
            k_max = min(len(ks), self.max_tasks, MAX_WORKERS, max(1, int(capacity / smallest + SHARE_EPS)))
            self.slots[d] = _Slots(self.max_tasks, capacity)
            self._workers_of[d] = max(1, int(k_max))
        self.spiller = None
        if float(spec.get("memory_oversubscription", 1.0) or 1.0) > 1.0:
            capacity = {d.id: (d.memory if d.memory is not None else math.inf) for d in plan.devices}
            owner = {k: t.device for k, t in enumerate(tasks)}
            self.spiller = Spiller(capacity, consumers, owner, self.results, self.events, self.devices)
            for k in self.carried:
                if self.results[k] is not None:
                    with self.spiller.lock:
                        self.spiller.book.finish(k, tasks[k].device, (), _nbytes(self.results[k]))

    # -- failure wakes everyone ------------------------------------------------------------
    def _fail(self, k, exc) -> None:
        super()._fail(k, exc)
        self._wake()

    def request_drain(self) -> None:
        super().request_drain()
        self._wake()

    def _wake(self) -> None:
        for ev in getattr(self, "ready", ()):
            ev.set()
        for s in getattr(self, "slots", {}).values():
            with s.cond:
                s.cond.notify_all()

    # -- workers -----------------------------------------------------------------------------
    def _workers(self) -> list:
        """One thread per device, which starts the device's other workers (:meth:`_spawn`): a
        shared device's tasks overlap, so devices are not run by the local executor's host pool."""
        return [threading.Thread(target=self._gpu_worker if self.devices[d].is_gpu else self._host_worker,
                                 args=(d,), name=f"streammap {d}", daemon=True) for d in self.order]

    def _run_workers(self) -> None:
        self._run_threads(self._workers())

    def _host_worker(self, d: str) -> None:
        self._spawn(d, self._host_loop)

    def _gpu_worker(self, d: str) -> None:
        dev = self.devices[d]
        with dev.device:
            with dev.stream:
                ev0 = dev.stream.record()
                ev0.synchronize()
            self.gpu_base[d] = (ev0, time.perf_counter() - self.t0)
        self._spawn(d, self._gpu_loop)

    def _spawn(self, d: str, loop) -> None:
        """Run ``loop(d, j)`` in this thread (j = 0) and in K - 1 more for device ``d``."""
        extra = [threading.Thread(target=loop, args=(d, j), name=f"streammap {d} #{j}", daemon=True)
                 for j in range(1, self._workers_of[d])]
        for th in extra:
            th.start()
        try:
            loop(d, 0)
        finally:
            for th in extra:
                th.join()

    def _admit(self, d: str, gpu_wait=None):
        """Take device ``d``'s next task in plan order once its deps are done and its share fits.

        Returns ``(k, step)`` or ``None`` when the device has no task left or the run stops.
        Called with nothing held; returns holding the task's share.
        """
        slots = self.slots[d]
        tasks, ready, stop = self.plan.tasks, self.ready, self.stop
        with slots.admit:
            if stop[0] or slots.next >= len(self.order[d]):
                return None
            j = slots.next
            slots.next += 1
            k = self.order[d][j]
            for i in self.deps[k]:
                ready[i].wait()
            if stop[0]:
                return None
            share = tasks[k].share
            with slots.cond:
                # (a task asking more than the run's capacity of the device runs alone)
                while ((slots.used + share > slots.capacity + SHARE_EPS and slots.running > 0)
                       or slots.running >= slots.limit) and not stop[0]:
                    slots.cond.wait()
                if stop[0]:
                    return None
                slots.used += share
                slots.running += 1
            start = time.perf_counter()
            try:
                if gpu_wait is not None:
                    gpu_wait(k)
                if self.spiller is not None:
                    self.spiller.admit(k, d, self.inputs[k], float(tasks[k].out or 0.0))
            except BaseException:
                self._leave(d, share)
                raise
            return k, start

    def _leave(self, d: str, share: float) -> None:
        slots = self.slots[d]
        with slots.cond:
            slots.used -= share
            slots.running -= 1
            slots.cond.notify_all()

    def _done(self, k: int, d: str) -> None:
        """Bookkeeping after task ``k``: spills, ready flag, frees."""
        if self.spiller is not None:
            self.spiller.finish(k, d, self.inputs[k], self.store[k])
        self.done[k] = True
        self.ready[k].set()
        for i in self.inputs[k]:
            u = self.uses.get(i)
            if u is not None and next(u[0]) == u[1] - 1:
                if self.spiller is not None:
                    self.spiller.release(i)
                else:
                    self.results[i] = None

    def _host_loop(self, d: str, j: int) -> None:
        dev = self.devices[d]
        set_current_device(dev)
        tasks, results, attempts = self.plan.tasks, self.results, self.attempts
        perf = time.perf_counter
        calls = {step.index: step.call for step in self.steps[d]}         # HostStep
        if self.spiller is not None:
            results = HostView(results)
        try:
            while True:
                got = self._admit(d, self._host_wait)
                if got is None:
                    break
                k, s = got
                share = tasks[k].share
                try:
                    attempts[k] = 1
                    call = calls[k]
                    try:
                        out = call(results)
                    except BaseException as exc:  # noqa: BLE001
                        out = self._retry(k, lambda: call(results), tasks[k].retries, exc)
                    if self.store[k]:
                        self.results[k] = read_only(out)
                    out = None
                    self._done(k, d)
                    self.finishes[k] = perf()
                    self.starts[k] = s
                finally:
                    self._leave(d, share)
        except _Stop:
            pass
        except BaseException as exc:        # a bug of ours: report it rather than hang  # noqa: BLE001
            self._fail(None, exc)
        finally:
            set_current_device(None)

    def _host_wait(self, k: int) -> None:
        for i in self.deps[k]:
            ev = self.events[i]
            if ev is not None:
                ev.synchronize()

    def _gpu_loop(self, d: str, j: int) -> None:
        dev = self.devices[d]
        set_current_device(dev)
        tasks, results, attempts, events = self.plan.tasks, self.results, self.attempts, self.events
        view = HostView(results) if self.spiller is not None else results
        steps = {step.index: step for step in self.steps[d]}              # GpuStep
        try:
            with dev.device:
                stream = dev.stream if j == 0 else dev.cupy.cuda.Stream(non_blocking=True)
                with stream:
                    while True:
                        got = self._admit(d, lambda k: self._gpu_wait(k, stream))
                        if got is None:
                            break
                        k, _ = got
                        share = tasks[k].share
                        try:
                            step = steps[k]
                            fn, argg, kwg = step.kernel, step.arg_getters, step.kwarg_getters
                            try:
                                args = [g(view) for g in argg]
                                kwargs = {key: g(view) for key, g in kwg}
                            except BaseException as exc:  # noqa: BLE001
                                self._fail(k, exc)
                                raise _Stop from None
                            if stream is not dev.stream:
                                stream.wait_event(dev.stream.record())
                            attempts[k] = 1
                            ev_start = stream.record()
                            try:
                                out = dev.bring(fn(*args, **kwargs))
                            except BaseException as exc:  # noqa: BLE001
                                out = self._retry(k, lambda: dev.bring(fn(*args, **kwargs)), tasks[k].retries, exc)
                            ev_end = stream.record()
                            args = kwargs = None
                            events[k] = ev_end
                            self.gpu_events[k] = (ev_start, ev_end)
                            if self.store[k]:
                                results[k] = out
                            out = None
                            ev_end.synchronize()        # the share is held while the GPU works
                            self._done(k, d)
                            dev.sample_memory()
                        finally:
                            self._leave(d, share)
        except _Stop:
            pass
        except BaseException as exc:  # noqa: BLE001
            self._fail(None, exc)
        finally:
            set_current_device(None)

    def _gpu_wait(self, k: int, stream) -> None:
        for i in self.deps[k]:
            ev = self.events[i]
            if ev is not None and self.devices[self.plan.tasks[i].device].is_gpu:
                stream.wait_event(ev)

    # -- results -----------------------------------------------------------------------------
    def _outputs(self):
        for i, v in enumerate(self.results):
            if isinstance(v, Spilled):
                self.results[i] = v.host
        return super()._outputs()

    def held_results(self) -> dict:
        held = super().held_results()
        return {k: ((v.host, None) if isinstance(v, Spilled) else (v, e)) for k, (v, e) in held.items()}

    def run(self):
        outcome = super().run()
        tasks = self.plan.tasks
        for d, info in outcome.devices.items():    # busy = share-weighted time: a device's real use
            info["busy"] = sum(tasks[k].share * (outcome.finishes[k] - outcome.starts[k]) for k in self.order.get(d, ())
                               if outcome.starts[k] is not None and outcome.finishes[k] is not None)
        if self.spiller is not None:
            for d, rec in self.spiller.report().items():
                if d in outcome.devices:
                    outcome.devices[d]["spill"] = rec
        return outcome


def _nbytes(v) -> float:
    return nbytes_of(v)
