"""The local executor: run a plan in this process, following its device order.

A plan already says everything a scheduler would decide: which device runs each task and in which
order. So this executor does not schedule; it *follows* the plan, and its job is to make the
hand-offs between devices correct and cheap.

State
-----
Everything is prepared before any thread starts, so that the hot path is a handful of list reads:

``results``   list, one slot per task (plan order): the task's return value, or ``None`` once freed.
``done``      list of bools: the task has finished (its result is in ``results``; on a GPU, its
              work is *enqueued* and ``events[i]`` recorded, not necessarily complete).
``pending``   per task of a host device: how many producers on other devices it waits for (the
              pruned cross-device waits). Deps on the task's own device need no count: a device
              runs its tasks in plan order and the plan lists deps first.
``arrivals``  per task with ``pending``: an ``itertools.count`` that each of its producers draws
              from when done, and its device when it reaches the task. Whoever draws last (the
              value ``pending``) runs the device on from that task; the others leave it. ``next``
              on a count is atomic, so this hand-over takes no lock.
``parked``    per host device: the task it stopped at because producers of that task were still to
              come (``-1``: the device is running, queued, or has nothing left); for reading only,
              the hand-over is ``arrivals``'.
``signals``   for each task that a task on a *GPU* device waits for, a ``threading.Event`` set
              once the task is done (or the run stops): the GPU worker waits on it.
``events``    GPU tasks: the CUDA event recorded on the device's stream after the task.
``steps``     per device, its tasks in plan order, each precompiled into a step record
              (:class:`HostStep` or :class:`GpuStep`): the call with its argument resolution baked
              in (``operator.itemgetter`` over ``results`` for plain refs), whom to count down or
              signal when done, which results to free afterwards (:class:`SharedFree` for results
              that consumers on several devices count down).
``ready_devices``
              a ``queue.SimpleQueue`` of host devices whose next task can run and that no thread
              holds (``None``: a thread may stop).

Policy
------
- **Order**: each device runs its tasks in plan order (``Plan.tasks_by_device``), one at a time.
- **Host devices are run by a pool, not bound to threads**: a thread *holds* one device at a
  time, running its tasks while they are ready (their producers on other devices have all
  arrived). When a finished task makes another device's parked task ready, the
  thread runs that device itself (no hand-off between threads, and no return to the pool's
  loop: :meth:`LocalExecutor._drive` switches devices in place) if its own next task must wait,
  else it queues the woken device for an idle thread. A chain alternating between two devices
  thus runs on one thread with no wake-up per task, while independent work on several devices
  still runs on as many threads as devices. Each device's order and one-task-at-a-time are kept:
  only its holder runs it, and it is held by one thread at most (a device is parked, queued or
  held: of its holder and a task's producers, only the last to draw from the task's ``arrivals``
  runs it on).
- **Threads**: the pool has at most one thread per host device, started as they are needed.
  Without a progress bar the thread that called :meth:`LocalExecutor.run` is the pool's first
  (it would only wait otherwise; its own current device is given back when the run ends, for a
  run started inside a kernel), and each device queued for an idle thread starts one more
  (:meth:`LocalExecutor._queue`) while the pool has fewer threads than host devices: a chain
  alternating between devices starts no thread at all (starting one and waiting for it to run
  takes ~0.1 ms on a quiet machine, milliseconds on a loaded one: µs per task of a short run),
  while independent work starts its threads as it becomes ready. With a progress bar the
  calling thread draws it and the whole pool is started at once. A Ctrl-C that lands in a
  kernel the calling thread runs stops the run with ``KeyboardInterrupt``, as it does while that
  thread waits (it is neither retried nor reported as the kernel's error).
- **GPU devices** keep one thread each (their CUDA device and stream stay current). Before a
  task, the thread waits for its deps on other devices (``signals``; pruned: a device's tasks
  finish in order, so having waited for task k of device E, later waits for tasks of E at or
  before k are dropped). GPU consumers make their stream wait on the producer's event
  (``stream.wait_event``), never synchronising the host; host consumers of GPU data wait on the
  event, then copy. A GPU task's completion counts down its host consumers like a host task's.
- **Moving data**: an argument produced on another device is moved to the consumer's when needed
  (NumPy → CuPy with ``cupy.asarray`` on the consumer's stream; CuPy on another GPU: the
  consumer's stream waits on the producer's event, then copies; CuPy → host: wait, then copy).
  A GPU kernel that returns NumPy arrays has them moved to its GPU.
- **Freeing**: a result is dropped when the last task that uses it has finished (per device, the
  last consumer in plan order; across devices, the last device to get there, counted with an
  ``itertools.count`` whose ``next`` is atomic), unless it is one of the plan's outputs. Results
  nobody uses are never stored.
- **Inputs are read-only**: a stored result is a read-only view of what the kernel returned
  (:func:`.guard.read_only`, no copy), so a kernel writing into its input fails with
  :class:`.guard.InputWritten` instead of changing what other consumers read.
- **Timeouts**: a task with a ``timeout`` has its call wrapped by :func:`.guard.with_deadline`
  when the steps are compiled (a helper thread per call, waited for at most the timeout); a call
  past it raises :class:`.guard.KernelTimeout`, handled like a kernel's error. Other tasks are
  called as before. On a GPU a timed-out call is not retried and its device is not synchronised
  again (it is ``abandoned``).
- **Failure**: a kernel that raises is called again up to its task's ``retries``; then the run
  stops: the failing thread sets the stop flag, sets every signal and queues a ``None`` per
  host thread; every thread stops before its next task, so threads waiting on a dep or for a
  device wake up and stop too. The error keeps the kernel's own traceback (the executor's frames
  are cut off).
- **Timing**: on the host, ``time.perf_counter`` around each call, relative to the run's start.
  On a GPU, a CUDA event before and after each task on the device's stream, converted to the
  same time base after the run from one event synchronised when the device's thread starts; the
  stream is never synchronised just to time a task. Measured times on the host include getting
  the task's inputs from GPUs.
- **Progress**: the main thread polls ``done`` (no cost to the workers) for a ``rich`` bar.
- **Monitoring**: the run's monitoring thread (``supervisor.py``) reads ``done``, ``attempts``,
  ``starts``/``finishes`` and ``gpu_events`` while the workers write them; the workers never call it.
- **Garbage**: compiling the steps of a large plan allocates many small objects and no reference
  cycles, so the cyclic garbage collector is paused while it runs (it would otherwise walk the
  whole heap, plan included, several times: about half of the compile time at 10,000 tasks).
  For a plan of more than :data:`FREEZE_TASKS` tasks what is alive when the steps are compiled
  is then frozen (:func:`streammap.io.bulk.gc_paused` with ``freeze``): the collector's next pass
  would otherwise walk all of it at once, young and found to be no garbage (0.1 s at 100,000
  tasks), and every older pass again. It is still freed by reference counting when the run ends.
  Smaller plans are not frozen: a process running many (a test suite, ``streammap serve``) would
  keep the garbage cycles alive at that moment out of every later pass.
- **Draining**: :meth:`LocalExecutor.request_drain` makes every worker stop before its next task
  (running tasks finish, retries go on); ``run`` then returns an outcome with ``drained=True``
  and the results it holds, and a new executor can continue from them: ``carry`` gives, per
  finished task id, its result and event; those tasks are done from the start and their results
  are kept only while some remaining task (or the outputs) needs them.
"""

from __future__ import annotations

import itertools
import keyword
import operator
import os
import queue
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, NamedTuple, Optional

import numpy

from streammap.errors import KernelError, PlanError, StreamMapError
from streammap.io.bulk import gc_paused
from streammap.ir import item, resolve_spec, spec_refs
from streammap.plan import Plan
from streammap.runtime.context import current_device, device_cell, set_current_device
from streammap.runtime.devices import to_host
from streammap.runtime.guard import (
    GuardError,
    KernelTimeout,
    deadline_of,
    explain,
    freeze,
    read_only,
    with_deadline,
    writable,
)

_HERE = os.path.dirname(os.path.abspath(__file__))
#: Getters of the task fields :meth:`LocalExecutor._compile` reads, in the order it unpacks them.
_TASK_FIELDS = tuple(map(operator.attrgetter,
                         ("id", "device", "kernel", "args", "kwargs", "deps", "timeout", "retries")))
#: Plans of more tasks than this have what is alive after compiling their steps frozen (see *Garbage*).
FREEZE_TASKS = 50_000


class _Stop(Exception):
    """Raised inside a worker to leave its loop when the run stops."""


# -- step records ---------------------------------------------------------------------------
# What ``_compile`` makes of each task, read by the device's worker in its inner loop. The workers
# unpack a record into locals once per task (``k, call, gpu_waits, ... = steps[pos]``), so the
# field order below is the order they unpack: change both together.

class Wait(NamedTuple):
    """A cross-device dependency a GPU task waits for before it runs."""

    producer: int                   #: the producing task's index
    signal: threading.Event         #: set by the producer's thread when it is done (or the run stops)
    on_gpu: bool                    #: the producer ran on a GPU: its stream waits on its CUDA event too


class SharedFree(NamedTuple):
    """A result whose last consumers are on several devices: the last of them to finish frees it."""

    producer: int                   #: the result's task index
    counter: Any                    #: ``itertools.count()``, shared by its last consumers (atomic ``next``)
    last: int                       #: the count the last of them reads (consumer devices - 1)


class HostStep(NamedTuple):
    """A task of a host (CPU) device, ready to call."""

    index: int                      #: the task's index in ``plan.tasks``
    call: Callable                  #: ``call(results)``: resolves the arguments and calls the kernel
                                    #: (within the task's deadline when it has a ``timeout``)
    gpu_waits: tuple                #: producers on GPUs (pruned) whose CUDA event the host syncs first
    signal: Optional[threading.Event]   #: set when the task is done (``None``: no GPU task waits)
    wakes: tuple                    #: ``(consumer, host device slot)`` of host tasks on other
                                    #: devices whose ``arrivals`` this task draws from when done
    frees: tuple                    #: indices of the results this task is the last consumer of
    shared_frees: tuple             #: :class:`SharedFree` of results last used here and elsewhere
    store: bool                     #: keep the result (someone uses it, or it is an output)
    retries: int                    #: further attempts after the kernel raises


class GpuStep(NamedTuple):
    """A task of a GPU device: its kernel and argument getters, called on the device's stream."""

    index: int                      #: the task's index in ``plan.tasks``
    kernel: Callable                #: the kernel (within the task's deadline when it has a ``timeout``)
    arg_getters: list               #: ``getter(results)`` per positional argument (moving data here)
    kwarg_getters: list             #: ``(name, getter)`` per keyword argument
    waits: tuple                    #: :class:`Wait` for each pruned cross-device dependency
    signal: Optional[threading.Event]   #: as :attr:`HostStep.signal`
    wakes: tuple                    #: as :attr:`HostStep.wakes`
    frees: tuple                    #: as :attr:`HostStep.frees`
    shared_frees: tuple             #: as :attr:`HostStep.shared_frees`
    store: bool                     #: as :attr:`HostStep.store`
    retries: int                    #: as :attr:`HostStep.retries`


@dataclass
class Outcome:
    """What a run did: outputs (NumPy, named as in the ``.npz``), timings, and the error if any."""

    outputs: dict[str, Any]
    error: Optional[BaseException]
    wall_time: float
    starts: list                    # per task: measured start (s from run start) or None
    finishes: list
    attempts: list
    devices: dict[str, dict] = field(default_factory=dict)   # id → executor, busy, peak_memory
    drained: bool = False           # stopped on request (re-mapping), not by an error
    plan: Optional[Plan] = None     # the plan the tasks finally ran under, when re-mapped
    remaps: list = field(default_factory=list)
    planned_device: dict = field(default_factory=dict)      # task id → the original plan's device


class LocalExecutor:
    """Run ``plan`` with ``kernels`` (name → function) on ``devices`` (id → executor device)."""

    def __init__(self, plan: Plan, kernels: dict, devices: dict, progress: bool = False,
                 carry: Optional[dict] = None):
        self.plan = plan
        self.kernels = kernels
        self.devices = devices
        self.progress = progress
        self.carry = carry or {}
        self.draining = False
        self.t0 = time.perf_counter()
        with gc_paused(freeze=len(plan.tasks) > FREEZE_TASKS):
            self._compile()

    # -- preparation ---------------------------------------------------------------------
    def _compile(self) -> None:
        """Prepare the run's state (see *State*) in a few passes over the plan's tasks.

        Each pass fills lists indexed by task (``last_dev``/``last_k``, ``free_of``, ``wake_of``,
        ...) rather than a dict or list per task: a task's step is then built from list reads.
        What a step holds (its frees, its wakes) is the tuple its step record keeps, made at its
        first entry; the rare task with more entries grows a list (:func:`_grow`), made a tuple
        again once the pass is over. The common case, a step that frees one result and wakes one
        consumer, so costs no list and no call.
        """
        plan = self.plan
        tasks = plan.tasks
        n = len(tasks)
        self.n = n
        # the fields the passes read, as columns, each read in C (a row per task would cost as
        # much, and its tuples would all be alive at once)
        ids, dev_of, kernel_of, args_of, kwargs_of, deps_of, timeout_of, retries_of = \
            [tuple(map(field, tasks)) for field in _TASK_FIELDS]
        index = self.index = dict(zip(ids, range(n)))
        carry = self.carry
        carried: set[int] = {k for k, tid in enumerate(ids) if tid in carry} if carry else set()
        self.carried = carried
        # each device's tasks in plan order; pos[k]: k's place in its device's list
        pos: list[int] = [-1] * n
        by_dev: dict[str, list[int]] = {}
        for k, d in enumerate(dev_of):
            if carried and k in carried:
                continue
            ks = by_dev.get(d)
            if ks is None:
                ks = by_dev[d] = []
            pos[k] = len(ks)
            ks.append(k)
        # devices in the plan's device order (their threads start in that order)
        by_dev = {d.id: by_dev[d.id] for d in plan.devices if d.id in by_dev}
        missing = [d for d in by_dev if d not in self.devices]
        if missing:
            raise PlanError(f"no executor for device {missing[0]!r}")
        self.order = by_dev
        devices, kernels = self.devices, self.kernels
        gpu_devices = {d for d, dev in devices.items() if dev.is_gpu}
        # per task: its device is a GPU
        self._on_gpu = [d in gpu_devices for d in dev_of] if gpu_devices else [False] * n
        task_on_gpu = self._on_gpu

        # Data consumers: per producer, its last consumer (``last_k``) on the one device that uses
        # it (``last_dev``), or ``_SEVERAL`` and ``several[i]``: {consumer device: last consumer}.
        # Plain refs are the common case and are read without walking the spec. The same pass
        # notes the *shape* of each argument list that :func:`call_factory` can bake (positional
        # refs to host results, indexed refs, constants): ``shapes[k]`` is its kinds as a string
        # (``"rv"``), ``None`` when the task needs :meth:`_call`'s general path; ``baked[k]`` the
        # values, in order.
        last_dev: list = [None] * n
        last_k: list = [0] * n
        several: dict[int, dict[str, int]] = {}
        shapes: list = [None] * n
        baked: list = [None] * n
        for k, (d, args, kw) in enumerate(zip(dev_of, args_of, kwargs_of)):
            if carried and k in carried:
                continue
            kinds = "" if not kw else None         # keyword arguments: the general path
            values = []
            for spec in (args if not kw else (*args, *kw.values())):
                if "ref" in spec:
                    i = index[spec["ref"]]
                    e = last_dev[i]
                    if e is None or e == d:
                        last_dev[i] = d
                        last_k[i] = k              # tasks are visited in order: k is the latest
                    else:
                        _use_on(several, last_dev, last_k, i, d, k)
                    if kinds is not None:
                        size = len(spec)
                        if task_on_gpu[i] or size > 2:
                            kinds = None
                        elif size == 1:
                            kinds += "r"
                            values.append(i)
                        elif "index" in spec:
                            kinds += "i"
                            values.append(i)
                            values.append(spec["index"])
                        else:
                            kinds = None
                    continue
                if "value" in spec:            # a constant: no refs (no walk, no list)
                    if kinds is not None:
                        if len(spec) == 1:
                            kinds += "v"
                            values.append(spec["value"])
                        else:
                            kinds = None
                    continue
                kinds = None
                for r in spec_refs(spec):
                    i = index[r]
                    e = last_dev[i]
                    if e is None or e == d:
                        last_dev[i] = d
                        last_k[i] = k
                    else:
                        _use_on(several, last_dev, last_k, i, d, k)
            if kinds is not None:
                shapes[k] = kinds
                baked[k] = values
        outputs = {index[r] for r in spec_refs(plan.outputs)}
        free_of: list = [()] * n                   # per consumer: the results it frees
        shared_of: list = [()] * n                 # per consumer: its SharedFree records
        grown: list = []                           # (column, task) of entries that grew lists (_grow)
        store = [True] * n
        for i, e in enumerate(last_dev):
            if i in outputs:
                continue
            if e is None:
                store[i] = False
            elif e is not _SEVERAL:
                k = last_k[i]
                if free_of[k]:
                    _grow(free_of, k, i, grown)
                else:
                    free_of[k] = (i,)
            else:
                uses = several[i]
                counter = itertools.count()
                for k in uses.values():
                    entry = SharedFree(i, counter, len(uses) - 1)
                    if shared_of[k]:
                        _grow(shared_of, k, entry, grown)
                    else:
                        shared_of[k] = (entry,)

        # Cross-device waits, pruned per (consumer device, producer device): a host consumer
        # counts them (``pending``, ``arrivals``) and its producers draw (``wake_of``: (consumer, host
        # slot) pairs), syncing the CUDA events of those on GPUs first (``gpu_wait_of``); a GPU
        # consumer waits on its producers' signals (``waits_of``).
        # Host devices get slots 0..H-1 (the pool's ``parked`` and ``ready_devices`` name them so).
        self.host_order = [d for d in by_dev if d not in gpu_devices]
        slot = {d: h for h, d in enumerate(self.host_order)}
        pending: list = [0] * n
        arrivals: list = [None] * n
        wake_of: list = [()] * n
        gpu_wait_of: list = [()] * n
        waits_of: list = [None] * n
        signals: list = [None] * n
        for d, ks in by_dev.items():
            waited: dict[str, int] = {}
            h = slot.get(d)
            for k in ks:
                deps = deps_of[k]
                if not deps:
                    continue
                if len(deps) == 1:          # the common case, without a dict per task
                    i = index[deps[0]]
                    e = dev_of[i]
                    if e == d or (carried and i in carried) or pos[i] <= waited.get(e, -1):
                        continue
                    waited[e] = pos[i]
                    ws = (i,)
                else:
                    latest: dict[str, int] = {}
                    for dep in deps:
                        i = index[dep]
                        if carried and i in carried:
                            continue
                        e = dev_of[i]
                        if e != d and pos[i] > latest.get(e, -1):
                            latest[e] = pos[i]
                    ws = []
                    for e, p in latest.items():
                        if p > waited.get(e, -1):
                            waited[e] = p
                            ws.append(by_dev[e][p])
                    if not ws:
                        continue
                if h is None:
                    waits_of[k] = ws
                    for i in ws:
                        if signals[i] is None:
                            signals[i] = threading.Event()
                    continue
                pending[k] = len(ws)
                arrivals[k] = itertools.count()
                pair = (k, h)
                for i in ws:
                    if wake_of[i]:
                        _grow(wake_of, i, pair, grown)
                    else:
                        wake_of[i] = (pair,)
                    if task_on_gpu[i]:
                        if gpu_wait_of[k]:
                            _grow(gpu_wait_of, k, i, grown)
                        else:
                            gpu_wait_of[k] = (i,)
        for column, k in grown:
            column[k] = tuple(column[k])
        self.pending = pending
        self.arrivals = arrivals
        self.signals = signals

        self.results: list = [None] * n
        self.done: list = [False] * n
        self.events: list = [None] * n
        self.starts: list = [None] * n
        self.finishes: list = [None] * n
        self.attempts: list = [0] * n
        self.gpu_events: list = [None] * n       # (start event, end event) of GPU tasks
        self.stop = [False]
        for i in carried:
            value, event = carry[tasks[i].id]
            self.done[i] = True
            self.events[i] = event
            if store[i] and (i in outputs or last_dev[i] is not None):
                self.results[i] = value
        self.error: Optional[BaseException] = None
        self._error_lock = threading.Lock()
        self._halted = False
        # the host pool's scheduler state (see *Policy*)
        self.parked: list = [-1] * len(self.host_order)
        self.cursor: list = [0] * len(self.host_order)
        self.ready_devices = queue.SimpleQueue()
        self._exhausted = itertools.count()
        self._pool: list = []                  # the pool threads started (see *Threads*)
        self._pool_slots = itertools.count()   # drawn per thread of the pool, started or this one

        self.steps: dict[str, list] = {}
        none = ()
        # ``tuple.__new__`` of the fields in order, as ``_make`` does without its frame: calling
        # the class costs ~0.3 µs a task more (~1 µs with keywords), a tenth of the executor's
        # whole per-task cost
        new = tuple.__new__
        makers: dict = {}                      # shape string -> its call factory (or None)
        for d, ks in by_dev.items():
            dev = devices[d]
            steps = []
            append = steps.append
            if d in gpu_devices:
                for k in ks:
                    t = tasks[k]
                    fn = kernels[kernel_of[k]]
                    deadline = deadline_of(t, fn) if timeout_of[k] is not None else None
                    w = tuple([Wait._make((i, signals[i], task_on_gpu[i])) for i in (waits_of[k] or none)])
                    argg, kwg = self._resolver(t, dev, dev_of)
                    if deadline is not None:
                        fn = with_deadline(fn, deadline, dev)
                    append(new(GpuStep, (k, fn, argg, kwg, w, signals[k], wake_of[k], free_of[k], shared_of[k],
                                         store[k], retries_of[k])))
                self.steps[d] = steps
                continue
            calls: list = []                   # the host steps' calls, in ``ks`` order
            add_call = calls.append
            for k in ks:
                fn = kernels[kernel_of[k]]
                kinds = shapes[k]
                call = None
                if kinds is not None:
                    values = baked[k]
                    baked[k] = None            # the call holds its values: free the list now
                    make = makers.get(kinds, False)
                    if make is False:
                        make = makers[kinds] = call_factory(tuple([(None, c) for c in kinds]))
                    if make is not None:     # (spelled out for one value: a star call costs ~0.1 µs more)
                        call = make(fn, values[0]) if len(values) == 1 else make(fn, *values)
                    elif len(kinds) > 1 and kinds.count("r") == len(kinds):
                        # a fan-in of plain refs: one C call gets them all, as in :meth:`_call`
                        call = _fan_in(fn, operator.itemgetter(*values))
                if call is None:
                    call = self._call(tasks[k], fn, dev, dev_of)
                if timeout_of[k] is not None:
                    deadline = deadline_of(tasks[k], fn)
                    if deadline is not None:
                        call = with_deadline(call, deadline, dev)
                add_call(call)
            # the records from the columns, in C: a ``zip`` row per task, copied into its record
            self.steps[d] = list(map(new, itertools.repeat(HostStep), zip(
                ks, calls, *[map(column.__getitem__, ks) for column in (
                    gpu_wait_of, signals, wake_of, free_of, shared_of, store, retries_of)])))
        self.host_steps = [self.steps[d] for d in self.host_order]        # by host slot
        self.host_devices = [devices[d] for d in self.host_order]
        for h, d in enumerate(self.host_order):
            first = self.steps[d][0].index
            if self.pending[first]:
                self.parked[h] = first
                next(arrivals[first])          # the device has reached it: its producers come last
            else:
                self.ready_devices.put(h)

    def _ref_getter(self, ref: str, item, consumer, dev_of):
        """A function of ``results`` giving the value of ``ref`` (item ``item``) on ``consumer``."""
        i = self.index[ref]
        producer = self.devices[dev_of[i]]
        if item is None:
            get = operator.itemgetter(i)
        else:
            j = item

            def get(r, i=i, j=j):
                return r[i][j]
        if producer is consumer or not (producer.is_gpu or consumer.is_gpu):
            return get
        events = self.events
        if consumer.is_gpu:
            bring = consumer.bring

            def moved(r, get=get, i=i, producer=producer):
                return bring(get(r), producer, events[i])
        else:
            def moved(r, get=get, i=i):          # a fresh host copy, read-only like any input
                return freeze(to_host(get(r), events[i]))
        return moved

    def _spec_getter(self, spec, consumer, dev_of):
        if "ref" in spec:
            return self._ref_getter(spec["ref"], spec.get("index"), consumer, dev_of)
        if "value" in spec:
            v = spec["value"]
            return lambda r: v
        if "list" in spec or "tuple" in spec:
            gs = [self._spec_getter(s, consumer, dev_of) for s in spec.get("list", spec.get("tuple"))]
            if "list" in spec:
                return lambda r: [g(r) for g in gs]
            return lambda r: tuple([g(r) for g in gs])
        if "dict" in spec:
            items = [(key, self._spec_getter(s, consumer, dev_of)) for key, s in spec["dict"].items()]
            return lambda r: {key: g(r) for key, g in items}
        raise PlanError(f"unknown argument spec {spec!r}",
                        hint="an argument is one of ref (with index), value, list, tuple, dict")

    def _call(self, t, fn, dev, dev_of):
        """``call(results)``: resolve ``t``'s arguments and call its kernel (host devices).

        Arguments that are plain refs to host results, indexed refs and values are baked into a
        call of the argument list's *shape* (:func:`call_factory`): ``fn(r[12], r[7][0], 3)``
        runs as that expression, without a getter per argument. A list longer than a shape may be
        (:data:`MAX_SHAPE`) of plain refs only, a fan-in, is one ``operator.itemgetter`` of all
        its indices. Anything else (nested specs, results to move from a GPU) goes through the
        getters of :meth:`_resolver`.
        """
        shape, values = [], []
        index, on_gpu = self.index, self._on_gpu
        specs = zip(itertools.repeat(None), t.args)
        if t.kwargs:
            specs = itertools.chain(specs, t.kwargs.items())
        for name, spec in specs:
            ref = spec.get("ref")
            if ref is not None:
                i = index[ref]
                if on_gpu[i] or len(spec) > 2 or (len(spec) == 2 and "index" not in spec):
                    break
                j = spec.get("index")
                shape.append((name, "r" if j is None else "i"))
                values.append(i)
                if j is not None:
                    values.append(j)
            elif len(spec) == 1 and "value" in spec:
                shape.append((name, "v"))
                values.append(spec["value"])
            else:
                break
        else:
            make = call_factory(tuple(shape))
            if make is not None:
                return make(fn, *values)
            if len(shape) > 1 and all(entry == (None, "r") for entry in shape):
                # A long list of plain refs (a fan-in): one C call gets them all (a tuple, as there
                # are several), no getter each.
                get_all = operator.itemgetter(*values)
                return lambda r: fn(*get_all(r))
        args, kwargs = self._resolver(t, dev, dev_of)
        if not kwargs:
            return lambda r: fn(*[g(r) for g in args])
        return lambda r: fn(*[g(r) for g in args], **{key: g(r) for key, g in kwargs})

    def _resolver(self, t, dev, dev_of):
        args = [self._spec_getter(s, dev, dev_of) for s in t.args]
        kwargs = [(key, self._spec_getter(s, dev, dev_of)) for key, s in t.kwargs.items()]
        return args, kwargs

    # -- running -------------------------------------------------------------------------
    def run(self) -> Outcome:
        """Run the plan; never raises for a failing kernel (see ``Outcome.error``)."""
        if self.stop[0]:                      # drained before it started
            return Outcome(outputs={}, error=self.error, wall_time=0.0, starts=[None] * self.n,
                           finishes=[None] * self.n, attempts=list(self.attempts),
                           drained=self.error is None)
        self.t0 = time.perf_counter()
        self.gpu_base: dict[str, tuple] = {}
        self._run_workers()
        for d in self.order:
            dev = self.devices[d]
            if dev.is_gpu and not getattr(dev, "abandoned", False):    # an abandoned stream may never finish
                try:
                    dev.stream.synchronize()
                except Exception as exc:      # an asynchronous CUDA error surfaces here  # noqa: BLE001
                    self._fail(None, exc)
        wall = time.perf_counter() - self.t0
        outputs = {}
        drained = self.draining and self.error is None
        if self.error is None and not drained:
            try:
                outputs = self._outputs()
            except Exception as exc:  # noqa: BLE001
                self._fail(None, exc)
        starts, finishes = self._times()
        devices = {}
        for d in self.order:
            dev = self.devices[d]
            busy = _busy(starts, finishes, self.order[d])
            devices[d] = {"executor": dev.executor, "busy": busy, "peak_memory": dev.peak_memory()}
        return Outcome(outputs=outputs, error=self.error, wall_time=wall, starts=starts,
                       finishes=finishes, attempts=list(self.attempts), devices=devices, drained=drained)

    def _run_workers(self) -> None:
        """Run the plan's workers until they end (see *Threads*): this thread is the host pool's
        first, one more starts per device made ready while fewer than there are host devices
        (:meth:`_queue`), and each GPU device has its own. With a progress bar to draw, this
        thread draws it and every worker has its own thread (:meth:`_run_threads`)."""
        if self.progress and self.n:
            self._pool_slots = itertools.count(len(self.host_order))     # the pool is started whole
            self._run_threads(self._workers())
            return
        gpu = [threading.Thread(target=self._gpu_worker, args=(d,), name=f"streammap {d}", daemon=True)
               for d in self.order if self.devices[d].is_gpu]
        pool = self._pool
        try:
            if self.host_order:
                # This thread's slot, drawn before any GPU worker starts: a GPU worker that makes a
                # host device ready at once would otherwise draw slot 0, start a pool thread, and
                # leave one thread more than the pool's closing ``None``s (a hang at the end).
                next(self._pool_slots)
            for th in gpu:
                th.start()
            if self.host_order:
                for _ in range(self.ready_devices.qsize() - 1):  # the devices ready from the start
                    if next(self._pool_slots) < len(self.host_order):
                        self._start_pool_thread()
                caller_device = current_device()     # a run inside a kernel: its device, given back
                try:
                    self._host_worker()
                finally:
                    set_current_device(caller_device)
            for th in gpu:              # first: a GPU worker may start a pool thread until it ends
                th.join()
            i = 0
            while i < len(pool):        # a pool thread may start another until it ends
                pool[i].join()
                i += 1
        except BaseException as exc:          # KeyboardInterrupt: stop the workers, then report  # noqa: BLE001
            self._fail(None, exc)
            for th in [*gpu, *pool]:
                if th.is_alive():
                    th.join()

    def _run_threads(self, threads: list) -> None:
        """Start ``threads`` and wait for them (drawing the progress bar when asked)."""
        try:
            for th in threads:
                th.start()
            if self.progress and self.n:
                self._wait_with_progress(threads)
            else:
                for th in threads:
                    th.join()
        except BaseException as exc:          # KeyboardInterrupt: stop the workers, then report  # noqa: BLE001
            self._fail(None, exc)
            for th in threads:
                if th.is_alive():
                    th.join()

    def _queue(self, h: int) -> None:
        """Queue host device ``h`` (ready, held by no thread) for the pool; start a pool thread
        for it while the pool has fewer threads than host devices."""
        self.ready_devices.put(h)
        if next(self._pool_slots) < len(self.host_order):
            self._start_pool_thread()

    def _start_pool_thread(self) -> None:
        th = threading.Thread(target=self._host_worker, name=f"streammap host {len(self._pool) + 1}", daemon=True)
        self._pool.append(th)
        th.start()

    def _workers(self) -> list:
        """The threads that run the plan (not started): the host pool, then one per GPU device."""
        threads = [threading.Thread(target=self._host_worker, name=f"streammap host {h}", daemon=True)
                   for h in range(len(self.host_order))]
        threads += [threading.Thread(target=self._gpu_worker, args=(d,), name=f"streammap {d}", daemon=True)
                    for d in self.order if self.devices[d].is_gpu]
        return threads

    def request_drain(self) -> None:
        """Stop dispatching: each worker stops before its next task (see *Draining*)."""
        self.draining = True
        self.stop[0] = True
        self._halt()

    def held_results(self) -> dict:
        """``{task id: (result, event)}`` of the finished tasks whose results are still held: those
        a task not yet done needs, and the plan's outputs (for a new executor's ``carry``)."""
        tasks, done, index = self.plan.tasks, self.done, self.index
        keep = {index[r] for r in spec_refs(self.plan.outputs)}
        for k, t in enumerate(tasks):
            if done[k]:
                continue
            for spec in (*t.args, *t.kwargs.values()):
                for r in spec_refs(spec):
                    keep.add(index[r])
        return {tasks[i].id: (self.results[i], self.events[i]) for i in sorted(keep) if done[i]}

    def _wait_with_progress(self, threads) -> None:
        from rich.console import Console  # noqa: PLC0415
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn  # noqa: PLC0415

        done = self.done
        with Progress(TextColumn("[bold]running[/] {task.description}"), BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn(), console=Console(stderr=True), transient=True) as bar:
            task = bar.add_task(self.plan.source.entry or os.path.basename(self.plan.source.path),
                                total=self.n)
            for th in threads:
                while th.is_alive():
                    th.join(0.1)
                    bar.update(task, completed=done.count(True))
            bar.update(task, completed=done.count(True))

    def _fail(self, k: Optional[int], exc: BaseException) -> None:
        """Record the first error (a :class:`KernelError` for task ``k``) and stop the run."""
        with self._error_lock:
            if self.error is None:
                self.error = task_error(self.plan, k, exc)
            self.stop[0] = True
        self._halt()

    def _halt(self) -> None:
        """Wake every worker after ``stop`` was set, once: GPU workers waiting on a signal, host
        threads waiting for a device (one ``None`` each: a host thread stops at the first)."""
        with self._error_lock:
            if self._halted:
                return
            self._halted = True
        for ev in self.signals:
            if ev is not None:
                ev.set()
        self._close_pool()

    def _close_pool(self) -> None:
        put = self.ready_devices.put
        for _ in self.host_order:
            put(None)

    def _retry(self, k: int, call, retries: int, exc: BaseException):
        """``call()`` again after ``exc``, up to ``retries`` more times; raise :class:`_Stop` when out."""
        if isinstance(exc, KeyboardInterrupt) and threading.current_thread() is threading.main_thread():
            self._fail(None, exc)     # Ctrl-C in a kernel the main thread ran: stop the run, not a retry
            raise _Stop
        for _ in range(retries):
            if self.stop[0] and not self.draining:
                break
            if type(exc) is KernelTimeout and not exc.retry:
                break
            self.attempts[k] += 1
            try:
                return call()
            except BaseException as again:  # noqa: BLE001
                exc = again
        self._fail(k, exc)
        raise _Stop

    def _count_down(self, wakes: tuple) -> list:
        """Arrive at the host consumers of a finished task (see ``arrivals``); the devices (slots)
        this unparks."""
        woke = []
        pending, arrivals, parked = self.pending, self.arrivals, self.parked
        for c, h in wakes:
            if next(arrivals[c]) == pending[c]:       # the last to arrive: the device is parked on c
                parked[h] = -1
                woke.append(h)
        return woke

    def _host_worker(self) -> None:
        """A thread of the host pool: take a ready device, run it (see :meth:`_drive`), repeat;
        stop at the first ``None``."""
        get = self.ready_devices.get
        try:
            h = get()
            while h is not None:
                self._drive(h)
                h = get()
        except BaseException as exc:       # a bug of ours: report it rather than hang  # noqa: BLE001
            self._fail(None, exc)
        finally:
            set_current_device(None)

    def _drive(self, h: int) -> None:
        """Run host device ``h``'s tasks from its cursor while they are ready; then go idle.

        When this device must wait (its next task is parked, or it has no task left) and its last
        task made another device ready, the thread takes that device here, in this loop: a chain
        alternating between two devices runs on one thread, without a thread hand-off or even a
        return to :meth:`_host_worker` per task. The arrivals at other devices' consumers are
        inline for the same reason (:meth:`_count_down` is the GPU workers'). A device is only
        ever entered at a task that is ready (all its producers have arrived, or it has none), so
        the device's own arrival is drawn for the tasks after that one.
        """
        host_steps, host_devices, cursor, parked = self.host_steps, self.host_devices, self.cursor, self.parked
        results, done, events = self.results, self.done, self.events
        pending, arrivals = self.pending, self.arrivals
        starts, finishes, attempts = self.starts, self.finishes, self.attempts
        stop, put = self.stop, self._queue
        exhausted, n_host = self._exhausted, len(host_steps)
        perf = time.perf_counter
        steps = host_steps[h]
        last = len(steps)
        pos = entered = cursor[h]
        cell = device_cell()                   # cell[0] = device: this thread's current device
        cell[0] = host_devices[h]
        woken = None           # a device the last task made ready: run here if this one must wait
        try:
            while True:
                if pos == last:                        # this device has nothing left
                    cursor[h] = pos
                    if next(exhausted) == n_host - 1:  # the last host device is done
                        self._close_pool()
                    if woken is None:
                        return
                    h, woken = woken, None             # take the device it woke
                    steps, pos = host_steps[h], cursor[h]
                    last, entered = len(steps), pos
                    cell[0] = host_devices[h]
                    continue
                k, call, gpu_waits, signal, wakes, frees, shared, store, retries = steps[pos]     # HostStep
                if pending[k] and pos != entered:   # (a device is entered where it is ready)
                    cursor[h] = pos          # first: the producer that arrives last goes on from here
                    parked[h] = k
                    if next(arrivals[k]) != pending[k]:     # producers still to come: the last takes it
                        if woken is None:
                            return
                        h, woken = woken, None         # take the device it woke
                        steps, pos = host_steps[h], cursor[h]
                        last, entered = len(steps), pos
                        cell[0] = host_devices[h]
                        continue
                    parked[h] = -1
                if woken is not None:     # this device goes on: an idle thread takes the other
                    put(woken)
                    woken = None
                if stop[0]:
                    return
                if gpu_waits:
                    for i in gpu_waits:
                        events[i].synchronize()
                attempts[k] = 1
                s = perf()
                try:
                    out = call(results)
                except BaseException as exc:  # noqa: BLE001
                    out = self._retry(k, lambda: call(results), retries, exc)
                finishes[k] = perf()
                starts[k] = s
                if store:
                    results[k] = read_only(out)
                out = None
                done[k] = True
                if signal is not None:
                    signal.set()
                for i in frees:
                    results[i] = None
                if shared:
                    for i, counter, last_use in shared:
                        if next(counter) == last_use:
                            results[i] = None
                pos += 1
                if wakes:                 # arrive at consumers on other devices (as _count_down)
                    for c, w in wakes:
                        if next(arrivals[c]) == pending[c]:   # the last: its device is parked on c
                            parked[w] = -1
                            if woken is None:
                                woken = w
                            else:
                                put(w)
        except _Stop:
            return

    def _release_remaining(self, d: str) -> None:
        done, signals = self.done, self.signals
        for k in self.order[d]:
            ev = signals[k]
            if ev is not None and not done[k]:
                ev.set()

    def _gpu_worker(self, d: str) -> None:
        dev = self.devices[d]
        set_current_device(dev)
        results, done, events, gpu_events = self.results, self.done, self.events, self.gpu_events
        attempts = self.attempts
        stop, put = self.stop, self._queue
        stream = dev.stream
        try:
            with dev.device, stream:
                ev0 = stream.record()
                ev0.synchronize()
                self.gpu_base[d] = (ev0, time.perf_counter() - self.t0)
                for k, fn, argg, kwg, waits, signal, wakes, frees, shared, store, retries in self.steps[d]:   # GpuStep
                    if stop[0]:
                        break
                    for i, ev, gpu in waits:
                        if not done[i]:
                            ev.wait()
                            if stop[0]:
                                raise _Stop
                        if gpu:
                            stream.wait_event(events[i])
                    try:
                        args = [g(results) for g in argg]
                        kwargs = {key: g(results) for key, g in kwg}
                    except BaseException as exc:  # noqa: BLE001
                        self._fail(k, exc)
                        raise _Stop from None
                    attempts[k] = 1
                    ev_start = stream.record()
                    try:
                        out = dev.bring(fn(*args, **kwargs))
                    except BaseException as exc:  # noqa: BLE001
                        out = self._retry(k, lambda: dev.bring(fn(*args, **kwargs)), retries, exc)
                    ev_end = stream.record()
                    args = kwargs = None
                    events[k] = ev_end
                    gpu_events[k] = (ev_start, ev_end)
                    if store:
                        results[k] = out
                    done[k] = True
                    if signal is not None:
                        signal.set()
                    out = None
                    for i in frees:
                        results[i] = None
                    for i, counter, last in shared:
                        if next(counter) == last:
                            results[i] = None
                    if wakes:                 # host consumers: an idle host thread takes them
                        for w in self._count_down(wakes):
                            put(w)
                    dev.sample_memory()
                    dev.release_pending()
        except _Stop:
            pass
        except BaseException as exc:  # noqa: BLE001
            self._fail(None, exc)
        finally:
            self._release_remaining(d)
            set_current_device(None)

    # -- results -------------------------------------------------------------------------
    def _times(self) -> tuple[list, list]:
        """Measured start/finish of every task, in seconds from the run's start."""
        starts, finishes = _since(self.starts, self.t0), _since(self.finishes, self.t0)
        for d, (ev0, base) in getattr(self, "gpu_base", {}).items():
            dev = self.devices[d]
            elapsed = dev.cupy.cuda.get_elapsed_time
            with dev.device:
                for k in self.order[d]:
                    pair = self.gpu_events[k]
                    if pair is None:
                        continue
                    try:
                        starts[k] = base + elapsed(ev0, pair[0]) / 1e3
                        finishes[k] = base + elapsed(ev0, pair[1]) / 1e3
                    except Exception:        # an event that never completed (failed run)  # noqa: BLE001
                        pass
        return starts, finishes

    def _outputs(self) -> dict[str, Any]:
        spec = self.plan.outputs
        if spec is None:
            return {}
        value = self._spec_value(spec)
        return name_outputs(value)

    def _spec_value(self, spec):
        results, index = self.results, self.index
        return resolve_spec(spec, lambda tid, i: item(results[index[tid]], i))


#: ``last_dev`` of a result that consumers on several devices use (see :meth:`LocalExecutor._compile`).
_SEVERAL = object()


def _use_on(several: dict, last_dev: list, last_k: list, i: int, d: str, k: int) -> None:
    """Note that task ``k`` on device ``d`` uses result ``i``, which another device uses too."""
    uses = several.get(i)
    if uses is None:
        uses = several[i] = {last_dev[i]: last_k[i]}
        last_dev[i] = _SEVERAL
    uses[d] = k


def _since(times: list, t0: float) -> list:
    """``times`` (``perf_counter`` readings, ``None`` for a task that did not run) as seconds
    from ``t0``; without ``None`` the subtractions run in C (``float.__rsub__``: ``s - t0``)."""
    if None in times:
        return [None if s is None else s - t0 for s in times]
    return list(map(t0.__rsub__, times))


def _busy(starts: list, finishes: list, ks: list) -> float:
    """The summed durations of tasks ``ks`` that have both times, in their order (the same sum,
    term by term, as a loop over them: C's ``map`` when none lacks a time)."""
    s, f = list(map(starts.__getitem__, ks)), list(map(finishes.__getitem__, ks))
    if None in s or None in f:
        return sum(b - a for a, b in zip(s, f) if a is not None and b is not None)
    return sum(map(operator.sub, f, s))


def _grow(column: list, k: int, entry, grown: list) -> None:
    """Add ``entry`` to ``column[k]``, which has entries already: a tuple becomes a list (noted in
    ``grown``, to be made a tuple again), a list is appended to."""
    entries = column[k]
    if type(entries) is tuple:
        entries = column[k] = list(entries)
        grown.append((column, k))
    entries.append(entry)

#: Shapes of argument lists → the factory of their calls (see :func:`call_factory`).
_FACTORIES: dict = {}
#: Arguments a shape may have; longer lists resolve through getters.
MAX_SHAPE = 16


def _fan_in(fn: Callable, get_all: Callable) -> Callable:
    """``call(results)`` of ``fn`` on the results ``get_all`` (an ``operator.itemgetter`` of
    several indices) picks."""
    return lambda r: fn(*get_all(r))


def call_factory(shape: tuple) -> Optional[Callable]:
    """``make(fn, *values)`` → ``call(results)`` for an argument list of ``shape``, or ``None``.

    ``shape`` has one ``(keyword or None, kind)`` per argument: kind ``r`` is ``results[i]``,
    ``i`` is ``results[i][j]``, ``v`` is a constant; ``values`` give ``i`` (and ``j``) or the
    constant, in order. The factory is generated once per shape (as ``namedtuple`` generates its
    class), so that a call is that one expression, e.g. ``fn(r[a0], r[a1][b1], a2)``: no getter
    per argument, no list built per call (the values are bound as the call's parameter defaults).
    """
    make = _FACTORIES.get(shape)
    if make is not None or shape in _FACTORIES:
        return make
    if len(shape) > MAX_SHAPE or any(name is not None and (not name.isidentifier() or keyword.iskeyword(name))
                                     for name, _ in shape):
        _FACTORIES[shape] = None
        return None
    params, exprs = [], []
    for p, (name, kind) in enumerate(shape):
        params.append(f"a{p}")
        if kind == "i":
            params.append(f"b{p}")
        expr = {"r": f"r[a{p}]", "i": f"r[a{p}][b{p}]", "v": f"a{p}"}[kind]
        exprs.append(expr if name is None else f"{name}={expr}")
    # the values are the lambda's defaults, not a closure: one tuple per call instead of a cell per
    # value and the closure's tuple (fewer objects to build, free, and for the collector to walk)
    bound = "".join(f", {p}={p}" for p in params)
    source = f"def make(fn{''.join(', ' + p for p in params)}):\n" \
             f"    return lambda r, fn=fn{bound}: fn({', '.join(exprs)})\n"
    namespace: dict = {}
    exec(source, namespace)           # noqa: S102 -- our own text, from kinds and identifiers only
    make = _FACTORIES[shape] = namespace["make"]
    return make


def task_error(plan, k: Optional[int], exc: BaseException) -> BaseException:
    """What a run reports for ``exc``: a :class:`KernelError` naming task ``k`` (its call site,
    device and the kernel's own traceback), or ``exc`` itself when no task raised it (a bug of
    ours in an executor thread)."""
    if k is None:
        return exc
    t = plan.tasks[k]
    if isinstance(exc, StreamMapError) and t.kernel.startswith(BUILTIN_PREFIX):
        return clause_error(plan, t, exc)
    exc = explain(exc, t.kernel, t.id)
    err = KernelError(t.id, t.site, t.device, user_traceback(exc), cause=exc)
    err.__cause__ = exc
    return err


#: Kernels the compiler adds to a plan (``streammap.scatter``, ``streammap.gather``) are named so.
BUILTIN_PREFIX = "streammap."


def clause_error(plan, t, exc: StreamMapError) -> StreamMapError:
    """StreamMAP's own kernel of task ``t`` (a fission scatter or gather) refusing the data it met:
    the program's clause is what is wrong (``split=1`` of a 1-D array), not code of the user's, so
    it is bad input (exit status 2) at the call site, with the refusal's hint and no traceback."""
    path, line = None, None
    if t.site and plan.source.kind == "program":
        file, _, number = t.site.rpartition(":")
        if number.isdigit():
            path, line = Path(plan.source.path).parent / file, int(number)
    return StreamMapError(f"task {t.id} on {t.device}: {exc.message}", path=path, line=line, hint=exc.hint)


def name_outputs(value) -> dict[str, numpy.ndarray]:
    """Outputs named as in the ``.npz``: ``result``; ``result_0, result_1, ...`` for a tuple or
    list; a dict's own keys. Values become NumPy arrays."""
    if isinstance(value, dict):
        return {str(key): to_numpy(v) for key, v in value.items()}
    if isinstance(value, (tuple, list)):
        return {f"result_{k}": to_numpy(v) for k, v in enumerate(value)}
    return {"result": to_numpy(value)}


def to_numpy(value) -> numpy.ndarray:
    """``value`` as a NumPy array the caller may change (CuPy arrays are copied to the host)."""
    value = to_host(value)
    if isinstance(value, numpy.ndarray):
        return writable(value)
    try:
        return numpy.asarray(value)
    except ValueError:                      # ragged sequences
        out = numpy.empty(len(value), dtype=object)
        out[:] = list(value)
        return out


def user_traceback(exc: BaseException) -> str:
    """The traceback of ``exc`` from the first frame that is not the runtime's (the kernel's); a
    guard's own error (a timeout) without frames."""
    tb = exc.__traceback__
    while tb is not None and os.path.abspath(tb.tb_frame.f_code.co_filename).startswith(_HERE + os.sep):
        tb = tb.tb_next
    if tb is None and not isinstance(exc, GuardError):
        tb = exc.__traceback__
    return "".join(traceback.format_exception(type(exc), exc, tb))
