"""The pipeline executor: stream a stream program's items through its stages, with bounded buffers.

A plan compiled with the ``pipeline`` strategy has a ``pipeline`` block: its stages, each with its
task per item and the replicas (devices) that run it. The DAG executor (:mod:`.local`) would run
such a plan too, one thread per device in plan order; this one runs it the way a stream runs, so
that different stages work on different items at once and a slow stage never lets the others
race ahead and fill memory.

State
-----
``remaining[k]`` what task k still waits for: its deps not yet done, plus one for its item not yet
                 admitted (a task is *ready* at 0);
``queues``       one FIFO queue of ready task indices per stage replica (stage, device);
``results[k]``   task k's value while a consumer still needs it (or it is an output);
``left[k]``      consumers of task k not yet finished (its value is dropped at 0);
``open_items``   a semaphore of ``window`` tokens: items admitted and not yet finished.

Policy
------
* **Threads**: one per stage replica. A replica takes ready tasks from its queue in FIFO order,
  runs them (with the task's retries) and marks them done; its device is the thread's current
  device. On a GPU the thread keeps the device and its stream current and synchronises the stream
  after each task, so a result is complete when its consumers are told.
* **Admission**: the calling thread admits items in order 0, 1, 2, ..., taking one token of
  ``open_items`` per item; an item's last task returns its token. So at most ``window`` items are
  in flight, and every queue and result buffer is bounded by ``window`` items (the *bounded
  buffers*; default ``plan.pipeline.buffer`` times the number of stages' largest replica count).
* **Order**: a stateful stage's tasks depend on the same stage's previous item (the front end adds
  that edge), so they become ready, and run, in item order on their single device: results are
  those of the sequential program. Stateless replicas may finish items out of order; every value
  is stored per task, so the outputs are in item order regardless.
* **Guards** as in the DAG executor (:mod:`.guard`): results are stored as read-only views on the
  host, and a task with a ``timeout`` is called within its deadline (on a GPU, not retried).
* **Failure**: a kernel that raises after its retries stops the run: the error is kept, every
  queue gets a stop marker, and admission ends; the outcome carries the :class:`KernelError`.
* **Timing**: ``time.perf_counter`` around each task, relative to the run's start (the same
  run-record fields as the DAG executor).
* **Monitoring**: the run's :class:`~streammap.runtime.supervisor.RunSupervisor` reads the same
  lists as it reads from the DAG executor (``done``, ``attempts``, ``starts``, ``finishes``,
  ``gpu_events``, ``plan``, ``error``) and ``order``: per device, its tasks in the order they
  *started* (a replica appends a task as it takes it; several replicas on one device interleave),
  so the supervisor's per-device cursor finds finished tasks in O(new tasks). ``gpu_events`` stays
  ``None`` (a GPU replica synchronises its stream after each task, so the wall time is the task's).
  A pipeline is not drained and re-mapped on a slow device (``request_drain`` does nothing).
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Optional

from streammap.errors import PlanError
from streammap.ir import item, resolve_spec, spec_refs
from streammap.plan import Plan
from streammap.runtime.context import set_current_device
from streammap.runtime.devices import to_host
from streammap.runtime.guard import KernelTimeout, deadline_of, freeze, read_only, with_deadline
from streammap.runtime.local import Outcome, name_outputs, task_error

_STOP = -1


class PipelineExecutor:
    """Run a pipeline plan with ``kernels`` (name -> function) on ``devices`` (id -> executor device)."""

    def __init__(self, plan: Plan, kernels: dict, devices: dict, window: Optional[int] = None):
        if plan.pipeline is None:
            raise PlanError("this plan has no pipeline block", hint="compile it with --strategy pipeline")
        self.plan, self.kernels, self.devices = plan, kernels, devices
        info = plan.pipeline
        tasks = plan.tasks
        self.n = n = len(tasks)
        self.index = index = {t.id: k for k, t in enumerate(tasks)}
        replicas = max((len(s.replicas) for s in info.stages), default=1)
        self.window = window or max(2, info.buffer * replicas)
        self.item_tasks: list[list[int]] = [[] for _ in range(info.items)]
        self.replica_of: list = [None] * n
        for s, stage in enumerate(info.stages):
            for i, tid in enumerate(stage.tasks):
                k = index[tid]
                self.item_tasks[i].append(k)
                self.replica_of[k] = (s, tasks[k].device)
        if any(r is None for r in self.replica_of):
            raise PlanError("a task of this pipeline plan belongs to no stage")
        self.item_of = [0] * n
        for i, ks in enumerate(self.item_tasks):
            for k in ks:
                self.item_of[k] = i
        self.consumers: list[list[int]] = [[] for _ in range(n)]
        self.remaining = [len(t.deps) + 1 for t in tasks]
        for k, t in enumerate(tasks):
            for dep in t.deps:
                self.consumers[index[dep]].append(k)
        self.outputs_idx = {index[r] for r in spec_refs(plan.outputs)}
        self.left = [len(c) for c in self.consumers]
        self.item_left = [len(ks) for ks in self.item_tasks]
        self.queues = {r: queue.Queue() for r in dict.fromkeys(self.replica_of)}
        self.results: list = [None] * n
        self.starts: list = [None] * n
        self.finishes: list = [None] * n
        self.attempts = [0] * n
        self.lock = threading.Lock()
        self.open_items = threading.Semaphore(self.window)
        self.error: Optional[BaseException] = None
        self.stopped = False
        self.done = [False] * n
        # what the supervisor reads (see Monitoring): tasks per device in start order, no GPU events
        self.order: dict[str, list[int]] = {d: [] for d in dict.fromkeys(r[1] for r in self.queues)}
        self.gpu_events: list = [None] * n
        self.draining = False

    # -- running -------------------------------------------------------------------------
    def run(self) -> Outcome:
        """Run every item; never raises for a failing kernel (see ``Outcome.error``)."""
        self.t0 = time.perf_counter()
        threads = [threading.Thread(target=self._worker, args=(r,), name=f"streammap pipeline {r[0]}@{r[1]}",
                                    daemon=True) for r in self.queues]
        for th in threads:
            th.start()
        try:
            for ks in self.item_tasks:
                while not self.open_items.acquire(timeout=0.1):
                    if self.stopped:
                        break
                if self.stopped:
                    break
                with self.lock:
                    ready = [k for k in ks if self._count_down(k)]
                for k in ready:
                    self.queues[self.replica_of[k]].put(k)
            # all admitted: wait for the last items to finish
            for _ in range(self.window):
                while not self.open_items.acquire(timeout=0.1):
                    if self.stopped:
                        break
                if self.stopped:
                    break
        except BaseException as exc:             # KeyboardInterrupt  # noqa: BLE001
            self._fail(None, exc)
        finally:
            for q in self.queues.values():
                q.put(_STOP)
            for th in threads:
                th.join()
        wall = time.perf_counter() - self.t0
        outputs = {}
        if self.error is None:
            try:
                outputs = self._outputs()
            except Exception as exc:  # noqa: BLE001
                self._fail(None, exc)
        starts = [None if s is None else s - self.t0 for s in self.starts]
        finishes = [None if f is None else f - self.t0 for f in self.finishes]
        devices = {}
        for d in dict.fromkeys(r[1] for r in self.queues):
            busy = sum(f - s for k, (s, f) in enumerate(zip(starts, finishes))
                       if s is not None and f is not None and self.replica_of[k][1] == d)
            dev = self.devices[d]
            devices[d] = {"executor": dev.executor, "busy": busy, "peak_memory": dev.peak_memory()}
        return Outcome(outputs=outputs, error=self.error, wall_time=wall, starts=starts, finishes=finishes,
                       attempts=list(self.attempts), devices=devices)

    def request_drain(self) -> None:
        """Nothing: a pipeline run is not drained for re-mapping, it runs to its end (the supervisor
        of a pipeline run is made without re-mapping, so it does not ask)."""

    def _count_down(self, k: int) -> bool:
        """One less thing for task k to wait for (call with the lock held); True when it is ready."""
        self.remaining[k] -= 1
        return self.remaining[k] == 0

    def _worker(self, replica) -> None:
        s, d = replica
        dev = self.devices[d]
        set_current_device(dev)
        q = self.queues[replica]
        try:
            if dev.is_gpu:
                with dev.device, dev.stream:
                    self._loop(q, dev, self.order[d])
            else:
                self._loop(q, dev, self.order[d])
        except BaseException as exc:          # a bug of ours: stop the run rather than hang it  # noqa: BLE001
            self._fail(None, exc)
        finally:
            set_current_device(None)

    def _loop(self, q, dev, started: list) -> None:
        tasks = self.plan.tasks
        while True:
            k = q.get()
            if k == _STOP:
                return
            if self.stopped:
                continue
            t = tasks[k]
            fn = self.kernels[t.kernel]
            if t.timeout is not None:
                fn = with_deadline(fn, deadline_of(t, fn), dev)
            try:
                args = [self._value(spec, dev) for spec in t.args]
                kwargs = {key: self._value(spec, dev) for key, spec in t.kwargs.items()}
            except BaseException as exc:  # noqa: BLE001
                self._fail(k, exc)
                continue
            started.append(k)
            start = time.perf_counter()
            out, exc = None, None
            for attempt in range(t.retries + 1):
                self.attempts[k] = attempt + 1
                try:
                    out = fn(*args, **kwargs)
                    if dev.is_gpu:
                        out = dev.bring(out)
                        dev.stream.synchronize()
                    exc = None
                    break
                except BaseException as e:          # retried, then reported with the kernel's traceback  # noqa: BLE001
                    exc = e
                    if self.stopped or (type(e) is KernelTimeout and not e.retry):
                        break
            if exc is not None:
                self._fail(k, exc)
                continue
            self.starts[k], self.finishes[k] = start, time.perf_counter()
            args = kwargs = None
            self._complete(k, out if dev.is_gpu else read_only(out))

    def _complete(self, k: int, out) -> None:
        tasks = self.plan.tasks
        ready = []
        with self.lock:
            if self.consumers[k] or k in self.outputs_idx:
                self.results[k] = out
            self.done[k] = True
            for c in self.consumers[k]:
                if self._count_down(c):
                    ready.append(c)
            for dep in tasks[k].deps:
                i = self.index[dep]
                self.left[i] -= 1
                if self.left[i] == 0 and i not in self.outputs_idx:
                    self.results[i] = None
            item = self.item_of[k]
            self.item_left[item] -= 1
            finished_item = self.item_left[item] == 0
        for c in ready:
            self.queues[self.replica_of[c]].put(c)
        if finished_item:
            self.open_items.release()

    def _value(self, spec, dev):
        """An argument's value on ``dev`` (moved from its producer's device when needed)."""
        def ref(tid, i):
            k = self.index[tid]
            v = item(self.results[k], i)
            producer = self.devices[self.replica_of[k][1]]
            if producer is dev or not (producer.is_gpu or dev.is_gpu):
                return v
            return dev.bring(v, producer) if dev.is_gpu else freeze(to_host(v))
        return resolve_spec(spec, ref)

    def _fail(self, k: Optional[int], exc: BaseException) -> None:
        with self.lock:
            if self.error is None:
                self.error = task_error(self.plan, k, exc)
            self.stopped = True

    def _outputs(self) -> dict:
        if self.plan.outputs is None:
            return {}
        results, index = self.results, self.index
        return name_outputs(resolve_spec(self.plan.outputs, lambda tid, i: item(results[index[tid]], i)))
