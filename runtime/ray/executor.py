"""The Ray executor: run a plan on a Ray cluster, one actor per plan device.

Like the local executor it does not schedule: the plan says which device runs each task and in
which order, and this executor makes the hand-offs correct and cheap, on several machines.

Mapping plan devices to Ray
---------------------------
A plan device ``node/device`` runs in one :class:`DeviceActor` on the Ray node named ``node``
(names from :func:`streammap.cluster.ray.ray_node_names`: the ``streammap-node`` label, else the
host name, suffixed with a node-id prefix when hosts repeat). The actor is hard-pinned there
(``NodeAffinitySchedulingStrategy(node_id, soft=False)``), reserves no CPU, and for a real GPU
device reserves one GPU (``num_gpus=1``; Ray sets ``CUDA_VISIBLE_DEVICES``, the actor reports the
GPU it got). Under ``emulate`` every device runs with NumPy and reserves nothing; when the plan's
nodes are not Ray node names (a plan for an 8-GPU cluster on a 2-node test cluster), plan nodes
are assigned to the alive Ray nodes round-robin (plan order onto nodes sorted by name), and a
warning says so. Without ``emulate``, unknown nodes, too few GPUs on a node and device kinds other
than cpu/gpu are refused before anything runs.

State
-----
Driver (this process):

``actors``    device id → actor handle (created on first use, never on a dead node).
``where``     finished task id → device whose actor holds its result.
``exports``   task id → ObjectRef of a *host* copy of its result, made by the task itself
              (``run_export``) when a task on another node, or on a CPU, consumes it; Ray moves
              it (through host memory, the object store) to those consumers.
``shares``    task id → ObjectRef of its result *shared by CUDA IPC* (``run_share``, see
              :mod:`.ipc`), when a GPU of the same node consumes it: the consumer copies it GPU
              to GPU. The producer keeps the shared copy until the completion refs of all its
              GPU consumers, which the driver passes along with the producer's next call (nested,
              so Ray does not wait for them), are ready.
``starts`` / ``finishes`` / ``attempts``   per task id, measured in the actor (``time.time``,
              relative to the run's start; clocks of different machines are assumed in sync).

Actor: the program (loaded once, params set; its file and its local modules travel through the
object store, one :class:`~streammap.runtime.loader.ProgramFiles` put once per run, and an actor
that does not find them unchanged at the plan's paths writes them into a temporary folder of its
own, which is then the program's folder on its ``sys.path``), its device, and ``values``: task id → result,
resident on the device (CuPy on a GPU), freed after the last consumer *on this actor* in the
current segment (unless an output). Under ``memory_oversubscription`` > 1 the actor also keeps
its device within capacity by spilling held results to host memory (:mod:`.spill`).

Policy
------
- **Checks on the driver**: before connecting to Ray, the driver loads the program once and
  unloads it (:func:`~streammap.runtime.loader.check_program`), so a plan that names a kernel the
  file lacks, or a task whose arguments do not fit its kernel, is refused as on the local runtime
  (the plan file, the task's line, exit status 2), with no actor started and nothing written. The
  actors make the same checks again when they load it (a program that cannot be imported on the
  driver is left to them).
- **Submission**: every task is submitted at once, in plan order, to its device's actor
  (``max_concurrency=1``: calls run in submission order; a plan that shares devices gets threaded
  actors that admit calls by share, :mod:`.sharing`), as ``run(k, *refs)``: ``refs`` are the
  export or share refs of the data it needs from other actors and the completion refs of
  cross-actor ordering-only deps, so Ray does all waiting. GPU actors see all GPUs of their node
  (``RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES``) and select their own, so that they can open
  their neighbours' IPC handles. Results used on the same actor never leave it.
  ``run`` returns small metadata (start, finish, attempts) that the driver collects for the
  progress bar and the run record: every 0.1 s, one ``ray.wait`` for the calls done by then and
  one ``ray.get`` of all their metadata (per call only when one of them failed, to tell which),
  so the driver makes no round trip per task while the plan runs. The wait is over the oldest
  :data:`WAIT_WINDOW` outstanding calls only (its cost grows with the refs it is given), so a
  wait costs the same in a plan of 10,000 tasks and of 1,000,000.
- **Failure**: a kernel that raises is called again up to its ``retries``; then its call raises
  :class:`TaskFailed` (task id, call site, device, the kernel's own traceback); the driver kills
  the actors and raises :class:`~streammap.errors.KernelError`.
- **Guards** (:mod:`streammap.runtime.guard`), as in the local executor: a result kept on a CPU
  actor is a read-only view (results from the object store are read-only already), so a kernel
  writing into its input fails naming the argument; a task with a ``timeout`` is called on a
  helper thread of the actor and abandoned past its deadline (retried on a CPU, not on a GPU);
  killing the actors when the run fails ends an abandoned call for good. ``check_inputs`` makes
  each actor checksum its kernels' inputs. Outputs are written by
  ``run_plan`` only after success, atomically.
- **Node loss**: an actor call failing with ``RayActorError`` (the actor or its node died; with
  ``NodeDiedError``, ``ObjectLostError`` for data that lived there) starts recovery. Surviving
  actors keep running what they can (a task whose input is gone raises :class:`InputMissing` at
  once); the driver waits for every outstanding call, pings the actors to learn which are dead
  and reads ``ray.nodes()``; the devices of dead actors and dead nodes are *lost*. Then
  :func:`streammap.remap.remap_plan` re-maps the rest with ``finished`` (task → device holding
  its result), ``available`` (results still held by a surviving actor, or exported from one) and
  ``lost``; finished tasks whose results are gone and are needed again are re-run, everything
  else finished is kept. A new segment submits only the unfinished tasks. At most
  ``max_recoveries`` recoveries; each is logged with its recovery time (from the first error
  seen to the next segment being submitted) and listed in the run record's ``remaps``.
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
from pathlib import Path
from typing import NamedTuple, Optional

from streammap.cluster.ray import connect, ray_node_names
from streammap.errors import KernelError, StreamMapError
from streammap.ir import item, resolve_spec, spec_refs
from streammap.monitoring.options import MonitorOptions, monitor_options
from streammap.monitoring.telemetry import TICKER, CpuSampler, NvmlSampler, TelemetryRecorder, on_node
from streammap.plan import Plan
from streammap.remap import RemapError, remap_plan
from streammap.runtime.accelerators import cupy_platform
from streammap.runtime.context import set_current_device
from streammap.runtime.devices import Placement, make_devices, node_of, raise_not_executable, to_host
from streammap.runtime.guard import (
    Deadline,
    KernelTimeout,
    checked_kernels,
    declared_at,
    explain,
    read_only,
    with_deadline,
)
from streammap.runtime.lifecycle import RunSession
from streammap.runtime.loader import ProgramFiles, check_program, load_program
from streammap.runtime.local import BUILTIN_PREFIX, Outcome, clause_error, name_outputs, user_traceback
from streammap.runtime.ray.ipc import NOSET_VISIBLE, ShareLost, cuda_ordinal, has_shared, receive, share
from streammap.runtime.ray.monitor import BoardSampler, SegmentState, start_board
from streammap.runtime.ray.sharing import ShareGate, actor_concurrency, plan_shares_devices, sharing_steps
from streammap.runtime.ray.spill import ActorSpill, host_value, oversubscribed, spill_tables
from streammap.runtime.spill import nbytes_of
from streammap.runtime.supervisor import nvml_index

log = logging.getLogger("streammap.runtime")

DEFAULT_MAX_RECOVERIES = 3
#: Calls the driver asks ``ray.wait`` about at once: the oldest not yet seen done, in submission
#: order (each actor runs its calls in that order, so they are the ones running). A ``ray.wait``
#: costs time per ref it is given: over every outstanding call, each wait of a large plan cost
#: more as the plan grew.
WAIT_WINDOW = 8192
#: Seconds the supervisor's last tick, after the run, waits for the readings board (a tick during
#: the run waits 0.05 s, and on a loaded machine the board may not answer that fast).
FINAL_BOARD_WAIT = 2.0


# -- errors raised in the actors (picklable: their args are their state) -------------------

class TaskFailed(Exception):
    """A kernel raised on every attempt: ``(task id, site, device, traceback text, attempts,
    refusal)``; ``refusal`` is ``(message, hint)`` when StreamMAP's own kernel (a fission scatter
    or gather) refused its data, which the driver reports as bad input (:func:`clause_error`)."""

    def __init__(self, task_id, site, device, traceback_text, attempts, refusal=None):
        super().__init__(task_id, site, device, traceback_text, attempts, refusal)
        self.task_id, self.site, self.device, self.traceback_text, self.attempts, self.refusal = \
            task_id, site, device, traceback_text, attempts, refusal

    def __str__(self):
        return f"task {self.task_id} failed on {self.device}\n{self.traceback_text}"


class InputMissing(Exception):
    """A task's input is not on its actor (its producer did not run: lost node, earlier failure)."""


# -- the actor -----------------------------------------------------------------------------

class ActorStep(NamedTuple):
    """A task as the driver hands it to its device's actor for a segment (:meth:`DeviceActor.prepare`),
    by its index in the segment's plan. Plain data: it is pickled to the actor."""

    task_id: str
    kernel: str                     #: the kernel's name in the program
    args: list                      #: the task's argument specs (``ref``, ``value``, ``list``, ...)
    kwargs: dict                    #: keyword name → argument spec
    remote_ids: tuple               #: per extra ``run`` argument, the result id it carries (``None``:
                                    #: an ordering-only dep's completion ref)
    frees: tuple                    #: ids of results on this actor to free (or count down: threaded
                                    #: actors, :class:`.sharing.ShareGate`) once the task has finished
    store: bool                     #: keep the result on the actor (a consumer or the outputs need it)
    retries: int                    #: further attempts after the kernel raises
    site: str                       #: the call site, for the error of a failing task
    timeout: Optional[float] = None  #: seconds a call may run (:func:`~streammap.runtime.guard.with_deadline`)


class DeviceActor:
    """Runs the tasks of one plan device (wrapped with ``ray.remote`` by :func:`_actor_class`)."""

    def __init__(self, plan: Plan, files: ProgramFiles, device_id: str, backend: str, emulated: bool,
                 check_inputs: bool = False):

        if not files.present(plan):           # no shared filesystem: the run's own copy, modules too
            plan = files.materialize(plan, Path(tempfile.mkdtemp(prefix="streammap-src-")))
        self.program = load_program(plan)
        self.kernels = checked_kernels(self.program.kernels) if check_inputs else self.program.kernels
        self.device_id = device_id
        placement = Placement(device_id, plan.device(device_id).kind, backend,
                              ordinal=_own_cuda_ordinal() if backend == "cupy" else None, emulated=emulated)
        self.dev = make_devices({device_id: placement})[device_id]
        set_current_device(self.dev)
        self.values: dict = {}
        self.steps: dict = {}
        #: task id -> (the allocations of its shared copies, the consumers' completion refs)
        self.shared: dict = {}
        self.gate = None                  # a ShareGate when the plan shares devices (sharing.py)
        self.spill = None                 # an ActorSpill under memory oversubscription (spill.py)

    def prepare_sharing(self, admission: dict, uses: dict, limit) -> None:
        """Admit this segment's calls by share (see :mod:`.sharing`)."""
        self.gate = ShareGate(admission, uses, limit)

    def prepare_spilling(self, table: dict) -> None:
        """Keep this device within its capacity in this segment (see :mod:`.spill`)."""
        carried = self.spill.report() if self.spill is not None else None
        self.spill = ActorSpill(self.device_id, self.dev, self.values, table, carried)

    def spill_report(self) -> Optional[dict]:
        """The spill figures of this device so far (``None``: it never spills)."""
        return self.spill.report() if self.spill is not None else None

    def info(self) -> dict:
        import ray  # noqa: PLC0415
        ctx = ray.get_runtime_context()
        return {"node_id": ctx.get_node_id(), "gpus": [str(g) for g in ray.get_gpu_ids()],
                "pid": os.getpid(), "executor": self.dev.executor}

    def ping(self) -> bool:
        return True

    # -- telemetry: this actor's device, sampled by the process's ticker thread ----------------
    def start_telemetry(self, t0: float, interval: float, board=None) -> list:
        """Sample this actor's device every ``interval`` s (its GPU through NVML, else the node's
        CPU), with times relative to the driver's ``t0`` (``time.time()``; clocks in sync), and
        hand each tick's readings to the run's ``board`` (:mod:`.monitor`) when there is one.
        Returns the devices it samples (:class:`~streammap.monitoring.telemetry.DeviceInfo`)."""

        samplers = []
        if self.dev.is_gpu:
            s = NvmlSampler(indices=[nvml_index(self.dev.ordinal)])
            if s.devices():
                samplers.append(s)
        if not samplers:
            samplers.append(CpuSampler())
        rec = self._telemetry = TelemetryRecorder(samplers, interval)
        device = self.device_id

        def tick():
            readings, events = rec.sample(time.time() - t0)
            if board is not None:            # not waited for: the driver reads the board
                board.push.remote(device, readings, events)
        tick()
        self._ticker = TICKER.add(tick, interval)
        return [i for s in samplers for i in s.devices()]

    def stop_telemetry(self, t0: float) -> Optional[dict]:
        """The readings so far (a last one now), in the run record's form; sampling stops."""
        rec = getattr(self, "_telemetry", None)
        if rec is None:
            return None
        TICKER.remove(self._ticker)
        rec.sample(time.time() - t0)
        self._telemetry = None
        return rec.to_dict({})

    def prepare(self, steps: dict) -> None:
        """The next segment's steps: task index → :class:`ActorStep`. Shared copies of the last
        segment are freed: its consumers are done or gone."""
        self.steps = steps
        self.shared.clear()

    def _reap(self, releases) -> None:
        """Free the shared copies whose consumers have all finished (see :mod:`.ipc`).

        ``releases``: ``[(task id, [consumer completion refs])]`` from the driver, nested in a
        list so that Ray passes the refs without waiting for them; a non-blocking ``ray.wait``
        tells which consumers are done."""
        shared = self.shared
        for tid, refs in releases or ():
            if tid in shared:
                shared[tid] = (shared[tid][0], list(refs))
        waiting = [(tid, refs) for tid, (_, refs) in list(shared.items()) if refs]   # (threaded actors)
        if not waiting:
            return
        import ray  # noqa: PLC0415
        for tid, refs in waiting:
            _, pending = ray.wait(refs, num_returns=len(refs), timeout=0, fetch_local=False)
            entry = shared.get(tid)
            if entry is None:
                continue
            if pending:
                shared[tid] = (entry[0], pending)
            else:
                shared.pop(tid, None)    # the allocations are freed with their last reference
                if self.spill is not None:
                    self.spill.drop_shared(tid)

    def held(self) -> list:
        return list(self.values)

    def export(self, task_id: str):
        """A host copy of a held result (for a consumer on another actor)."""
        if task_id not in self.values:
            raise InputMissing(task_id)
        return to_host(host_value(self.values[task_id]))

    def _value(self, spec, remote):
        values = self.values

        def ref(r, i):
            if r in remote:
                return item(remote[r], i)
            try:
                v = values[r]
            except KeyError:
                raise InputMissing(r) from None
            return item(v, i)
        return resolve_spec(spec, ref)

    def run(self, k: int, releases, *refs):
        return self._run(k, releases, refs)[0]

    def run_export(self, k: int, releases, *refs):
        """Run, and return a host copy of the result too (for consumers on other nodes or CPUs)."""
        meta, out = self._run(k, releases, refs)
        return meta, to_host(out)

    def run_share(self, k: int, releases, *refs):
        """Run, and return the result shared by CUDA IPC too (for GPUs of this node)."""
        meta, out = self._run(k, releases, refs)
        return meta, self._share(meta[0], out)

    def run_export_share(self, k: int, releases, *refs):
        meta, out = self._run(k, releases, refs)
        return meta, to_host(out), self._share(meta[0], out)

    def _share(self, k, out):
        dev = self.dev
        keep: list = []
        with dev.device:
            desc = share(dev.cupy, out, dev.ordinal, dev.stream, keep)
        tid = self.steps[k].task_id
        self.shared[tid] = (keep, [])
        if self.spill is not None:        # the copy takes device memory until its consumers are done
            self.spill.hold_shared(tid, nbytes_of(out))
        return desc

    def _receive(self, r, v):
        """A remote input on this GPU: a host copy uploaded, or a shared array copied peer to peer."""
        dev = self.dev
        with dev.device, dev.stream:
            if has_shared(v):
                try:
                    return receive(dev.cupy, v, dev.ordinal, dev.stream)
                except ShareLost:
                    raise InputMissing(r) from None
            return dev.bring(v)

    def _run(self, k, releases, refs):
        tid, kernel, args, kwargs, remote_ids, frees, store, retries, site, timeout = self.steps[k]
        dev = self.dev
        if releases or self.shared:
            self._reap(releases)
        remote = {}
        if remote_ids:
            for r, v in zip(remote_ids, refs):
                if r is not None:
                    remote[r] = self._receive(r, v) if dev.is_gpu else v
        fn = self.kernels[kernel]
        if timeout is not None:
            fn = with_deadline(fn, Deadline(timeout, kernel, tid, self.device_id, declared_at(fn)), dev)
        attempts = 0
        gate = self.gate
        if gate is not None:
            gate.enter(k)                 # same-device inputs are done from here on
        stream = None if not dev.is_gpu else dev.stream if gate is None else gate.stream(dev)
        spill = self.spill
        ok = False
        try:
            start = time.time()
            if spill is not None:         # pin and restore the inputs, make room: part of the task's time
                spill.admit(k, tid)
            a = [self._value(s, remote) for s in args]
            kw = {key: self._value(s, remote) for key, s in kwargs.items()} if kwargs else {}
            if spill is None:
                start = time.time()
            while True:
                attempts += 1
                try:
                    if dev.is_gpu:
                        with dev.device, stream:
                            out = dev.bring(fn(*a, **kw))
                            stream.synchronize()
                    else:
                        out = read_only(fn(*a, **kw))      # what this actor's consumers read
                    break
                except Exception as exc:                     # noqa: BLE001 -- the kernel's error
                    if attempts > retries or (type(exc) is KernelTimeout and not exc.retry):
                        if isinstance(exc, StreamMapError) and kernel.startswith(BUILTIN_PREFIX):
                            raise TaskFailed(tid, site, self.device_id, "", attempts,
                                             (exc.message, exc.hint)) from None
                        exc = explain(exc, kernel, tid)
                        raise TaskFailed(tid, site, self.device_id, user_traceback(exc), attempts) from None
            if spill is None:
                if store:
                    self.values[tid] = out
            else:                         # a result only other actors read left with its host/IPC copy
                store = store and spill.keeps(tid)
                if store:
                    self.values[tid] = out
                a = kw = None
                spill.finish(k, tid, store)
            finish = time.time()
            ok = True
        finally:
            if gate is not None:
                gate.leave(k, ok)
        values = self.values
        drop = spill.release if spill is not None else (lambda f: values.pop(f, None))
        if gate is not None:
            gate.free(values, frees, drop)
        else:
            for f in frees:
                drop(f)
        return (k, start, finish, attempts), out


_ACTOR = None


def _actor_class(ray):
    global _ACTOR
    if _ACTOR is None:
        cls = type("DeviceActor", (DeviceActor,), {
            "run_export": ray.method(num_returns=2)(DeviceActor.run_export),
            "run_share": ray.method(num_returns=2)(DeviceActor.run_share),
            "run_export_share": ray.method(num_returns=3)(DeviceActor.run_export_share)})
        cls.__module__ = __name__
        _ACTOR = ray.remote(cls)
    return _ACTOR


def _is_cuda(device) -> bool:
    """An NVIDIA GPU (CUDA IPC; ROCm devices hand results over through the host)."""
    return device.kind == "gpu" and (device.vendor or "nvidia").lower() == "nvidia"


def _own_cuda_ordinal() -> int:
    """The CUDA ordinal of the GPU Ray gave this actor: 0 when Ray narrowed
    ``CUDA_VISIBLE_DEVICES`` to it, its position among the node's GPUs when the executor asked
    Ray not to (:data:`.ipc.NOSET_VISIBLE`, so that GPUs of one node can share arrays)."""
    if os.environ.get(NOSET_VISIBLE) != "1":
        return 0
    import ray  # noqa: PLC0415
    ids = ray.get_gpu_ids()
    return cuda_ordinal(ids[0]) if ids else 0


# -- the driver ----------------------------------------------------------------------------

def run_plan_ray(plan, *, emulate: bool = False, outputs_path=None, record_path=None, progress: bool = True,
                 plan_path=None, address: Optional[str] = None, max_recoveries: int = DEFAULT_MAX_RECOVERIES,
                 monitoring: Optional[MonitorOptions] = None, check_inputs: bool = False, **monitoring_keywords) -> dict:
    """:func:`streammap.runtime.run_plan` with ``backend="ray"`` (same outputs, record, errors).

    ``address``: the Ray cluster (``auto``, ``host:port``, ``ray://...``); default: the cluster
    this process is connected to, else ``RAY_ADDRESS``, else a new local Ray. ``monitoring`` (or
    its fields as keywords): every actor samples its device (NVML for its GPU, else its node's
    CPU) every ``interval`` s into the run record's telemetry, unless ``telemetry=False``. The
    driver always evaluates the alert rules and feeds the Prometheus metrics as a local run does
    (:mod:`.monitor`), except re-mapping a slow device; ``samplers`` are not used (the driver
    reads what the actors sample).
    """
    options = monitor_options(monitoring, caller="run_plan_ray", **monitoring_keywords)
    session = RunSession(plan, options, backend="ray", emulate=emulate, plan_path=plan_path,
                         outputs_path=outputs_path, record_path=record_path)
    if max_recoveries < 0:
        raise StreamMapError("--max-recoveries must be 0 or more")
    plan = session.plan
    check_program(plan, session.source)       # the actors' checks, here: refused before Ray starts
    with session:
        ray, own = connect(address)
        if own:
            session.defer(ray.shutdown)
        session.begin()
        board = start_board(ray) if options.telemetry else None
        if board is not None:
            session.defer(_kill_quietly, ray, board)
        executor = RayExecutor(plan, ProgramFiles.of(plan), emulate=emulate, progress=progress,
                               max_recoveries=max_recoveries, check_inputs=check_inputs,
                               telemetry_interval=options.sample_interval if options.telemetry else None, board=board)
        samplers = [BoardSampler(ray, board, executor.actor_info)] if board is not None else []
        # the supervisor stops first when the session closes: a last sample while the board is up
        executor.supervisor = session.supervise({}, telemetry=bool(samplers), samplers=samplers,
                                                record_telemetry=False)
        outcome = executor.run()
        for s in samplers:
            s.last_wait(FINAL_BOARD_WAIT)
        session.telemetry = executor.telemetry            # the actors' own series, every reading
    return session.finish(outcome)


def _kill_quietly(ray, actor) -> None:
    try:
        ray.kill(actor)
    except Exception:      # noqa: BLE001 -- already gone with its node
        pass


class _Lost(Exception):
    pass


class RayExecutor:
    """Runs ``plan`` on the connected Ray cluster (see the module docstring)."""

    def __init__(self, plan: Plan, files: ProgramFiles, *, emulate: bool = False, progress: bool = False,
                 max_recoveries: int = DEFAULT_MAX_RECOVERIES, telemetry_interval: Optional[float] = None,
                 board=None, check_inputs: bool = False):
        import ray  # noqa: PLC0415
        self.ray = ray
        self.telemetry_interval = telemetry_interval
        #: the driver's monitoring (:mod:`.monitor`): the readings board, and the RunSupervisor
        #: that run_plan_ray sets once the board's sampler can read this executor's actor_info
        self.board, self.supervisor = board, None
        self._state = None
        self.telemetry: Optional[dict] = None
        self.t0 = time.time()
        self.plan = plan
        #: the program and its local modules, put in the object store once for every actor
        self.files = ray.put(files)
        self.emulate = emulate
        self.check_inputs = check_inputs
        self.progress = progress
        self.max_recoveries = max_recoveries
        self.actors: dict = {}
        self.actor_info: dict = {}
        self.where: dict[str, str] = {}
        self.exports: dict = {}
        self.starts: dict = {}
        self.finishes: dict = {}
        self.attempts: dict = {}
        self.remaps: list = []
        self.resumed: list[float] = []          # perf_counter when each recovery resumed the run
        self.dead_nodes: set[str] = set()
        self._held: dict = {}
        self._seen = None
        self.node_names: dict = {}
        self.node_of_device = self._place(plan)

    # -- placement -------------------------------------------------------------------------
    def _place(self, plan: Plan) -> dict[str, str]:
        """``{plan device id: Ray node id}`` for every device of the plan (see module doc)."""

        nodes = self.ray.nodes()
        names = ray_node_names(nodes)
        self.node_names = dict(names)
        by_name = {n: nid for nid, n in names.items()}
        resources = {n["NodeID"]: n.get("Resources", {}) for n in nodes}
        plan_nodes = list(dict.fromkeys(node_of(d.id) for d in plan.devices))
        missing = [n for n in plan_nodes if n not in by_name]
        if missing and not self.emulate:
            raise StreamMapError(
                f"the plan's node(s) {', '.join(missing)} are not nodes of the Ray cluster "
                f"({', '.join(sorted(by_name)) or 'none alive'})",
                hint="label each Ray node with its cluster.yaml name (ray start --labels "
                     "streammap-node=NAME), or use --emulate")
        if missing:
            alive = sorted(by_name)
            assign = {n: by_name[alive[k % len(alive)]] for k, n in enumerate(plan_nodes)}
            log.warning("the plan's nodes are not Ray nodes; emulating them round-robin: %s",
                        ", ".join(f"{n} -> {names[assign[n]]}" for n in plan_nodes))
        else:
            assign = {n: by_name[n] for n in plan_nodes}
        out = {d.id: assign[node_of(d.id)] for d in plan.devices}
        if not self.emulate:
            used = {t.device for t in plan.tasks}
            need: dict[str, int] = {}
            for d in plan.devices:
                if d.id not in used:
                    continue
                if d.kind != "cpu" and cupy_platform(d.kind, d.vendor) is None:
                    raise_not_executable(plan, d.id)
                if d.kind != "cpu":
                    need[out[d.id]] = need.get(out[d.id], 0) + 1
            for nid, k in need.items():
                have = resources.get(nid, {}).get("GPU", 0)
                if have < k:
                    raise StreamMapError(f"Ray node {names[nid]} has {have:g} GPU(s); the plan needs {k} there",
                                         hint="use --emulate to run this plan with NumPy")
        return out

    def _actor(self, device: str):
        a = self.actors.get(device)
        if a is not None:
            return a
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # noqa: PLC0415


        d = self.plan.device(device)
        gpu = d.kind != "cpu" and not self.emulate
        cls = _actor_class(self.ray)
        # a GPU actor sees every GPU of its node (and picks its own from ray.get_gpu_ids()), so
        # that it can open the CUDA IPC handles of its neighbours (see .ipc)
        env = {"env_vars": {NOSET_VISIBLE: "1"}} if gpu and _is_cuda(d) else None
        a = cls.options(
            num_cpus=0, num_gpus=1 if gpu else 0, max_concurrency=actor_concurrency(self.plan, device),
            max_restarts=0, max_task_retries=0,
            scheduling_strategy=NodeAffinitySchedulingStrategy(self.node_of_device[device], soft=False),
            runtime_env=env,
        ).remote(self.plan, self.files, device, "cupy" if gpu else "numpy", self.emulate and d.kind != "cpu",
                  self.check_inputs)
        self.actors[device] = a
        return a

    # -- running ---------------------------------------------------------------------------
    def run(self) -> Outcome:
        ray = self.ray
        self.t0 = time.time()
        t_perf = self.t_perf = time.perf_counter()
        if self.supervisor is not None:
            self.supervisor.start(t_perf)
        current = self.plan
        error = None
        recoveries = 0
        try:
            while True:
                lost_at = self._segment(current)
                if lost_at is None:
                    break
                if recoveries >= self.max_recoveries:
                    raise StreamMapError(
                        f"a Ray node or actor was lost and --max-recoveries ({self.max_recoveries}) "
                        "recoveries are used up", hint="see the run record's remaps")
                recoveries += 1
                current = self._recover(current, lost_at)
                self.resumed.append(time.perf_counter())      # re-mapped: the next segment starts
            outputs = self._outputs(current)
        except (KernelError, StreamMapError) as exc:
            error, outputs = exc, {}
        except Exception as exc:       # noqa: BLE001 -- a Ray failure we do not handle: report it
            error, outputs = exc, {}
        wall = time.perf_counter() - t_perf
        self.telemetry = self._collect_telemetry() if self.telemetry_interval else None
        spill = self._collect_spills() if oversubscribed(self.plan) else {}
        if error is not None:
            for a in self.actors.values():
                try:
                    ray.kill(a)
                except Exception:      # noqa: BLE001
                    pass
        ids = [t.id for t in self.plan.tasks]
        final = {t.id: t.device for t in current.tasks}
        busy: dict[str, float] = {}
        share = {t.id: t.share for t in current.tasks}      # a task with share s uses s of its device
        for tid in ids:
            s, f = self.starts.get(tid), self.finishes.get(tid)
            if s is not None and f is not None:
                busy[final[tid]] = busy.get(final[tid], 0.0) + share[tid] * (f - s)
        devices = {}
        for d in current.devices:
            if d.id in busy or d.id in self.actors:
                info = self.actor_info.get(d.id, {})
                where = f" on Ray node {info['node']}" if info.get("node") else ""
                gpu = f" (GPU {','.join(info['gpus'])})" if info.get("gpus") else ""
                devices[d.id] = {"executor": f"{info.get('executor', 'numpy')}{gpu}{where}",
                                 "busy": busy.get(d.id, 0.0), "peak_memory": None}
                if spill.get(d.id):
                    devices[d.id]["spill"] = spill[d.id]
        original = {t.id: t.device for t in self.plan.tasks}
        return Outcome(outputs=outputs, error=error, wall_time=wall,
                       starts=[self.starts.get(t) for t in ids], finishes=[self.finishes.get(t) for t in ids],
                       attempts=[self.attempts.get(t, 0) for t in ids], devices=devices,
                       plan=current if current is not self.plan else None, remaps=self.remaps,
                       planned_device={t: original[t] for t in ids if final[t] != original[t]})

    def _collect_spills(self) -> dict:
        """Per device: its actor's spill figures (:mod:`.spill`); a dead actor's are lost."""
        refs = {d: a.spill_report.remote() for d, a in self.actors.items()}
        out = {}
        for d, r in refs.items():
            try:
                out[d] = self.ray.get(r, timeout=10)
            except Exception:          # noqa: BLE001 -- a dead actor
                continue
        return out

    def _collect_telemetry(self) -> Optional[dict]:
        """The actors' device readings merged into the run record's telemetry: one series per
        (Ray node, local device), named ``NODE/gpuN`` or ``NODE/cpu``; several plan devices
        emulated on one node's CPU share its series."""
        refs = {d: a.stop_telemetry.remote(self.t0) for d, a in self.actors.items()}
        merged: dict[str, dict] = {}
        events = []
        interval = self.telemetry_interval
        for d, r in refs.items():
            try:
                part = self.ray.get(r, timeout=10)
            except Exception:          # noqa: BLE001 -- a dead actor: its readings are lost with it
                continue
            if not part:
                continue
            node = self.actor_info.get(d, {}).get("node") or self.node_of_device.get(d, "?")[:12]
            for dev in part["devices"]:
                key = f"{node}/{dev['id']}"
                if key in merged:
                    merged[key]["plan_devices"].append(d)
                    continue
                merged[key] = dict(dev, id=key, plan_devices=[d])
            events += [dict(e, device=f"{node}/{e['device']}") for e in part.get("xid_events", [])]
        if not merged:
            return None
        return {"interval": interval, "devices": list(merged.values()), "xid_events": events}

    def _start_actors(self, devices) -> None:
        new = [d for d in devices if d not in self.actors]
        refs = {d: self._actor(d).info.remote() for d in new}
        sampled = {}
        if self.telemetry_interval:
            for d in new:
                sampled[d] = self.actors[d].start_telemetry.remote(self.t0, self.telemetry_interval, self.board)
        names = ray_node_names(self.ray.nodes())
        for d, r in refs.items():
            try:
                info = self.ray.get(r)
            except self.ray.exceptions.RayActorError as exc:
                cause = getattr(exc, "cause", None) or exc
                raise StreamMapError(f"cannot start the actor of {d}: {cause}") from None
            info["node"] = names.get(info["node_id"], info["node_id"][:12])
            self.actor_info[d] = info
        if self.supervisor is not None and sampled:
            infos, plan_devices = [], {}
            for d, r in sampled.items():
                try:
                    seen = on_node(self.actor_info[d]["node"], self.ray.get(r, timeout=30))
                except Exception:        # noqa: BLE001 -- a lost actor shows in the run itself
                    continue
                infos += [i for i in seen if i.id not in plan_devices]
                for i in seen:
                    plan_devices.setdefault(i.id, []).append(d)
            self.supervisor.observe_devices(infos, plan_devices)

    def _segment(self, plan: Plan) -> Optional[float]:
        """Submit and collect the unfinished tasks of ``plan``; the time a loss was seen, or None."""
        tasks = plan.tasks
        where, exports = self.where, self.exports
        todo = [k for k, t in enumerate(tasks) if t.id not in where]
        dev_of = {t.id: t.device for t in tasks}
        for tid, d in where.items():
            dev_of[tid] = d
        self._start_actors(list(dict.fromkeys(tasks[k].device for k in todo)))
        if not hasattr(self, "t_submit"):
            self.t_submit = time.perf_counter()       # actors up: what the overhead benchmark times
        todo_ids = {tasks[k].id for k in todo}
        outputs = set(spec_refs(plan.outputs))
        # consumers: data (spec refs) per producer, on which devices; last local consumer
        data_refs: dict[int, list[str]] = {}
        cross: set[str] = set()
        last_local: dict[str, str] = {}
        used: set[str] = set()
        for k in todo:
            t = tasks[k]
            refs = [r for s in (*t.args, *t.kwargs.values()) for r in spec_refs(s)]
            data_refs[k] = refs
            for r in refs:
                used.add(r)
                if dev_of[r] != t.device or (r not in todo_ids and r not in self._held.get(t.device, ())):
                    if r in todo_ids:
                        cross.add(r)
                elif r in todo_ids:
                    last_local[r] = t.id
        frees: dict[str, list[str]] = {}
        for r, c in last_local.items():
            if r not in outputs:
                frees.setdefault(c, []).append(r)
        # cross-actor hand-offs: GPU to GPU inside a node by CUDA IPC, else a host copy
        peer_of = {}                  # (producer id, consumer device) -> "share" | "host"
        ipc_consumers: dict[str, list[int]] = {}
        for k in todo:
            t = tasks[k]
            for r in dict.fromkeys(data_refs[k]):
                if r in cross and dev_of[r] != t.device:
                    how = "share" if self._peers(dev_of[r], t.device) else "host"
                    peer_of[(r, t.device)] = how
                    if how == "share":
                        ipc_consumers.setdefault(r, []).append(k)
        host_needed = {r for (r, _), how in peer_of.items() if how == "host"}
        steps: dict[str, dict] = {d: {} for d in {tasks[k].device for k in todo}}
        calls = []
        for k in todo:
            t = tasks[k]
            d = t.device
            remote_ids, remote_refs = [], []
            for r in dict.fromkeys(data_refs[k]):
                if dev_of[r] == d and (r in todo_ids or r in self._held.get(d, ())):
                    continue
                remote_ids.append(r)
                if r in todo_ids:             # made by the producer's run_export/share, submitted before
                    remote_refs.append(("shr" if peer_of.get((r, d)) == "share" else "exp", r))
                    continue
                if r not in exports:          # a carried result held on another actor
                    exports[r] = self.actors[dev_of[r]].export.remote(r)
                remote_refs.append(exports[r])
            for dep in t.deps:                # ordering-only deps on other actors
                if dep in todo_ids and dev_of[dep] != d and dep not in remote_ids:
                    remote_ids.append(None)
                    remote_refs.append(("meta", dep))
            store = t.id in outputs or t.id in used
            steps[d][k] = ActorStep(task_id=t.id, kernel=t.kernel, args=t.args, kwargs=t.kwargs,
                                    remote_ids=tuple(remote_ids), frees=tuple(frees.get(t.id, ())), store=store,
                                    retries=t.retries, site=t.site, timeout=t.timeout)
            calls.append((k, t, remote_refs))
        spilling = spill_tables(plan, todo, dev_of, self._held, outputs) if oversubscribed(plan) else {}
        if plan_shares_devices(plan):
            # Threaded actors may run calls out of submission order: set up before any call.
            admission, uses, share_frees = sharing_steps(plan, todo, dev_of, outputs, self._held)
            limit = (plan.cluster.spec or {}).get("max_tasks_per_device")
            ready = []
            for d, s in steps.items():
                s = {k: step._replace(frees=share_frees[step.task_id]) for k, step in s.items()}
                ready.append(self.actors[d].prepare.remote(s))
                ready.append(self.actors[d].prepare_sharing.remote(admission.get(d, {}), uses.get(d, {}), limit))
                if d in spilling:
                    ready.append(self.actors[d].prepare_spilling.remote(spilling[d]))
            self.ray.get(ready)
        else:
            for d, s in steps.items():
                self.actors[d].prepare.remote(s)
                if d in spilling:         # a one-thread actor runs calls in submission order
                    self.actors[d].prepare_spilling.remote(spilling[d])
        meta_of: dict[str, object] = {}
        shares: dict[str, object] = {}
        unsubmitted = {r: len(ks) for r, ks in ipc_consumers.items()}
        releases: dict[str, list] = {}     # producer device -> [(task id, consumer refs)] to pass on
        pending = {}
        kinds = {"meta": meta_of, "exp": exports, "shr": shares}
        for k, t, remote_refs in calls:
            refs = [x if not isinstance(x, tuple) else kinds[x[0]][x[1]] for x in remote_refs]
            a = self.actors[t.device]
            rel = releases.pop(t.device, None)
            if t.id in ipc_consumers and t.id in host_needed:
                m, v, sh = a.run_export_share.remote(k, rel, *refs)
                exports[t.id], shares[t.id] = v, sh
            elif t.id in ipc_consumers:
                m, sh = a.run_share.remote(k, rel, *refs)
                shares[t.id] = sh
            elif t.id in cross:
                m, v = a.run_export.remote(k, rel, *refs)
                exports[t.id] = v
            else:
                m = a.run.remote(k, rel, *refs)
            meta_of[t.id] = m
            pending[m] = k
            # once every GPU consumer of a shared result is submitted, the producer's next call
            # carries their completion refs: it frees the shared copy when they are all done
            for r in dict.fromkeys(x[1] for x in remote_refs if isinstance(x, tuple) and x[0] == "shr"):
                unsubmitted[r] -= 1
                if unsubmitted[r] == 0:
                    releases.setdefault(dev_of[r], []).append((r, [meta_of[tasks[c].id] for c in ipc_consumers[r]]))
        if self.supervisor is None:
            return self._collect(plan, pending)
        self._state = SegmentState(plan, set(where))        # where: the tasks earlier segments finished
        self.supervisor.attach(self._state)
        try:
            return self._collect(plan, pending)
        finally:
            self.supervisor.detach()
            self._state = None

    def _peers(self, producer: str, consumer: str) -> bool:
        """Whether a result moves from ``producer`` to ``consumer`` GPU to GPU (:mod:`.ipc`): both
        real GPUs (not emulated) run by CuPy, on one Ray node."""
        if self.emulate:
            return False
        a, b = self.plan.device(producer), self.plan.device(consumer)
        return _is_cuda(a) and _is_cuda(b) and self.node_of_device[producer] == self.node_of_device[consumer]

    def _collect(self, plan: Plan, pending: dict) -> Optional[float]:
        ray = self.ray
        tasks = plan.tasks
        lost_at = None
        first_error = None
        bar = None
        n_total = len(pending)
        if self.progress and n_total:
            from rich.console import Console  # noqa: PLC0415
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn  # noqa: PLC0415
            bar = Progress(TextColumn("[bold]running[/] {task.description}"), BarColumn(), MofNCompleteColumn(),
                           TimeElapsedColumn(), console=Console(stderr=True), transient=True)
            bar.start()
            bar_task = bar.add_task(f"{plan.source.entry or os.path.basename(plan.source.path)} on Ray",
                                    total=len(self.plan.tasks))
        t0 = self.t0
        state = self._state
        done = 0
        try:
            calls = list(pending)           # submission order
            refs: list = []                 # the oldest calls not seen done, at most WAIT_WINDOW
            submitted = 0
            while refs or submitted < len(calls):
                if len(refs) < WAIT_WINDOW // 2 and submitted < len(calls):
                    more = calls[submitted:submitted + WAIT_WINDOW - len(refs)]
                    refs += more
                    submitted += len(more)
                # The metadata of every call of the window done by now, in one round trip: the
                # driver never waits or fetches per task (a ray.get per call cost ~0.2 ms each, on
                # the driver's thread).
                ready, refs = ray.wait(refs, num_returns=len(refs), timeout=0.1, fetch_local=False)
                if not ready:
                    continue
                try:
                    metas = ray.get(ready)
                except Exception:          # noqa: BLE001 -- a call failed: sorted out one by one below
                    metas = None
                for j, r in enumerate(ready):
                    k = pending[r]
                    t = tasks[k]
                    try:
                        _, s, f, att = metas[j] if metas is not None else ray.get(r)
                    except ray.exceptions.RayTaskError as exc:
                        cause = getattr(exc, "cause", None)
                        if isinstance(cause, TaskFailed):
                            if first_error is None:
                                first_error = KernelError(cause.task_id, cause.site, cause.device,
                                                          cause.traceback_text) if cause.refusal is None else \
                                    clause_error(self.plan, t, StreamMapError(cause.refusal[0], hint=cause.refusal[1]))
                                self.attempts[cause.task_id] = cause.attempts
                            if lost_at is None:
                                return self._fail(first_error)
                            continue
                        if isinstance(cause, InputMissing) or isinstance(cause, ray.exceptions.RayError):
                            if lost_at is None:
                                lost_at = time.perf_counter()
                                self._seen = exc
                            continue
                        raise
                    except ray.exceptions.RayError as exc:  # RayActorError, NodeDiedError, ObjectLostError
                        if lost_at is None:
                            lost_at = time.perf_counter()
                            self._seen = exc
                            log.warning("lost a Ray actor or node while running %s; waiting for the "
                                        "other devices' running tasks", t.id)
                        continue
                    self.starts[t.id] = s - t0
                    self.finishes[t.id] = f - t0
                    self.attempts[t.id] = self.attempts.get(t.id, 0) + att
                    self.where[t.id] = t.device
                    if state is not None:
                        state.finish(k, s - t0, f - t0, att)
                    done += 1
                if bar is not None:
                    bar.update(bar_task, completed=len(self.where))
        finally:
            if bar is not None:
                bar.stop()
        if first_error is not None:
            return self._fail(first_error)
        return lost_at

    def _fail(self, err):
        if self._state is not None:          # the monitoring counts the failed task
            self._state.error = err
        raise err

    def _recover(self, plan: Plan, lost_at: float) -> Plan:
        """Find what was lost, re-map the rest of ``plan``; return the new plan (see module doc)."""

        ray = self.ray
        t_drained = time.perf_counter()
        # which actors are dead; which nodes
        pings = {d: a.ping.remote() for d, a in self.actors.items()}
        dead_devices = set()
        for d, r in pings.items():
            try:
                ray.get(r, timeout=30)
            except Exception:          # noqa: BLE001 -- RayActorError, GetTimeoutError
                dead_devices.add(d)
        alive_nodes = {n["NodeID"] for n in ray.nodes() if n.get("Alive")}
        dead_nodes = {nid for nid in self.node_of_device.values() if nid not in alive_nodes}
        self.dead_nodes |= dead_nodes
        lost = dead_devices | {d for d, nid in self.node_of_device.items() if nid in self.dead_nodes}
        if not lost:
            raise StreamMapError(f"a Ray call failed but no actor or node is dead: {self._seen}")
        for d in list(self.actors):
            if d in lost:
                try:
                    ray.kill(self.actors.pop(d))
                except Exception:      # noqa: BLE001
                    pass
        held = {d: set(ray.get(a.held.remote())) for d, a in self.actors.items()}
        self._held = held
        finished = dict(self.where)
        available = {tid for tid, d in finished.items() if d not in lost and (tid in held.get(d, ()) or tid in self.exports)}
        for tid in list(self.exports):
            if finished.get(tid) in lost or tid not in finished:
                del self.exports[tid]
        now = time.time() - self.t0
        try:
            result = remap_plan(plan, finished, now, lost=lost, available=available)
        except (RemapError, StreamMapError) as exc:
            raise StreamMapError(f"lost {', '.join(sorted(lost))} and cannot re-map the rest of the plan: "
                                 f"{exc.message}") from None
        for tid in result.rerun:
            self.where.pop(tid, None)
            self.exports.pop(tid, None)
        for tid in [t for t in self.where if self.where[t] in lost]:
            self.where.pop(tid)       # gone and not needed again
        recovery = time.perf_counter() - lost_at
        names = sorted(self.node_names.get(nid, nid[:12]) for nid in dead_nodes)
        what = f"Ray node(s) {', '.join(names)}" if names else f"actor(s) of {', '.join(sorted(dead_devices))}"
        rec = {
            "t": round(lost_at - self.t_perf, 6),
            "reason": f"lost {what}; recovered in {recovery:.3f} s",
            "devices": sorted(lost), "factors": {}, "lost": sorted(lost),
            "unfinished": len(result.unfinished), "moved": len(result.moved), "rerun": len(result.rerun),
            "mapping_time": result.mapping_time, "drain_time": max(0.0, t_drained - lost_at),
            "estimated_makespan": result.estimated_makespan,
        }
        self.remaps.append(rec)
        log.warning("lost %s (%d device(s)); re-mapped the remaining %d task(s) (%d re-run) "
                    "onto the surviving devices; recovered in %.3f s", what, len(lost), len(result.unfinished),
                    len(result.rerun), recovery)
        return result.plan

    def _outputs(self, plan: Plan) -> dict:
        spec = plan.outputs
        if spec is None:
            return {}
        ids = list(dict.fromkeys(spec_refs(spec)))
        refs = {tid: self.exports[tid] if tid in self.exports else self.actors[self.where[tid]].export.remote(tid)
                for tid in ids}
        values = dict(zip(refs, self.ray.get(list(refs.values()))))

        return name_outputs(resolve_spec(spec, lambda tid, i: item(values[tid], i)))


__all__ = ["run_plan_ray", "RayExecutor", "DeviceActor", "TaskFailed", "InputMissing", "DEFAULT_MAX_RECOVERIES"]
