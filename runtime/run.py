"""Run a plan: the executors that run it: in this process (:mod:`.local`, the default) or on a Ray cluster
(:mod:`.ray.executor`, ``backend="ray"``).

:func:`run_plan` is the one entry point: it checks the plan can run here (source unchanged,
devices available, or ``emulate``), loads the program, runs it with the local executor, and
writes the outputs (``.npz``) and the run record (``.run.json``). What every backend does around
its run (checks, metrics and alerts opened, the supervisor, closing, the record) is
:class:`~streammap.runtime.lifecycle.RunSession`.

Monitoring (``supervisor.py``, options in :class:`~streammap.monitoring.options.MonitorOptions`):
unless ``telemetry=False``, a daemon thread samples the devices (NVML, the CPU), feeds Prometheus
metrics when asked (``metrics=``), evaluates the alert rules (``alerts=``) and watches for a device that runs consistently slower than its model. When it finds
one and re-mapping is on, the executor drains (running tasks finish, nothing new starts), the rest
of the plan is re-mapped (:func:`streammap.remap.remap_plan`) and a new executor continues with
the results held; the run record lists each re-mapping.
"""

from __future__ import annotations

import logging
import time
from typing import Optional

from streammap.errors import StreamMapError
from streammap.monitoring.options import MonitorOptions, monitor_options
from streammap.plan import Plan
from streammap.remap import RemapError, remap_plan
from streammap.runtime.devices import check_devices, make_devices
from streammap.runtime.guard import checked_kernels
from streammap.runtime.lifecycle import RunSession
from streammap.runtime.loader import load_program
from streammap.runtime.local import LocalExecutor, Outcome
from streammap.runtime.pipeline import PipelineExecutor
from streammap.runtime.ray.executor import DEFAULT_MAX_RECOVERIES, run_plan_ray
from streammap.runtime.shared import SharingExecutor, needs_sharing_executor
from streammap.runtime.supervisor import RunSupervisor

__all__ = ["run_plan"]

log = logging.getLogger("streammap.runtime")


def run_plan(plan, *, emulate: bool = False, outputs_path=None, record_path=None, progress: bool = True,
             plan_path=None, backend: str = "local", address: Optional[str] = None,
             max_recoveries: Optional[int] = None, monitoring: Optional[MonitorOptions] = None,
             check_inputs: bool = False, **monitoring_keywords) -> dict:
    """Run ``plan`` on this machine and return its outputs.

    Parameters
    ----------
    plan : Plan, str or Path
        A validated plan, or a plan file to read.
    emulate : bool
        Run every device's tasks with NumPy on the CPU, with the same threads and order, for plans
        made for devices this machine lacks (GPUs, other nodes, other vendors).
    outputs_path : str or Path, optional
        Write the outputs there as ``.npz`` (atomically: nothing is written when the run fails).
    record_path : str or Path, optional
        Write the run record there; by default beside ``outputs_path`` (``out.run.json``) when that
        is given. The record is written when the run fails too (status ``failed``).
    progress : bool
        Show a progress bar (on stderr).
    plan_path : str or Path, optional
        The plan file the plan was read from, named in the run record.
    backend : str
        ``"local"`` (default: this process) or ``"ray"`` (:mod:`.ray.executor`: one actor per plan
        device on a Ray cluster; needs ``pip install 'streammap[cluster]'``). Monitoring works alike
        on both (:mod:`.ray.monitor`), except that Ray does not re-map a slow device.
    address : str, optional
        With ``backend="ray"``: the Ray cluster (``auto``, ``host:port``); default: the cluster
        this process is connected to, else ``RAY_ADDRESS``, else a new local Ray.
    max_recoveries : int, optional
        With ``backend="ray"``: how many lost nodes/actors to recover from (default 3).
    monitoring : streammap.monitoring.options.MonitorOptions, optional
        How the run is watched: telemetry, its interval, Prometheus metrics, alert rules (see
        :class:`~streammap.monitoring.options.MonitorOptions`; default: telemetry and the default
        alert rules).
    check_inputs : bool
        Checksum every array argument of every kernel call before and after the call, and fail
        the run, naming the kernel and the argument, when a kernel changed one
        (:func:`~streammap.runtime.guard.checked_kernels`). NumPy inputs are read-only anyway;
        this catches writes into CuPy arrays on GPUs, which have no read-only flag. It costs two
        passes over every input per call.
    **monitoring_keywords
        Instead of ``monitoring``, its fields one by one: ``telemetry``, ``interval``, ``metrics``,
        ``dcgm_names``, ``metrics_addr``, ``alerts``, ``samplers``.

    Returns
    -------
    dict
        NumPy arrays named as in the ``.npz``: ``result`` for a single returned value,
        ``result_0, result_1, ...`` for a tuple or list, a returned dict's own keys.

    Raises
    ------
    StreamMapError
        The plan cannot run here (imported workflow, unknown kernel, missing devices: see
        :func:`streammap.runtime.devices.check_devices`); nothing is run or written.
    PlanError
        The source file changed since the plan was compiled.
    KernelError
        A kernel raised (after its retries), ran past its task's ``timeout``
        (:class:`~streammap.runtime.guard.KernelTimeout`) or wrote into one of its inputs
        (:class:`~streammap.runtime.guard.InputWritten`); carries the task id, call site, device
        and the kernel's own traceback text.
    TypeError
        An unknown keyword, or both ``monitoring`` and monitoring keywords.

    Notes
    -----
    The program is loaded as a fresh module for the run and its namespace is emptied when the run
    ends (:meth:`~streammap.runtime.loader.Program.unload`, so that the run leaves no reference
    cycles behind): what the program leaves running past the run (a thread it started, an object
    whose methods read its globals) must not rely on its module-level names.
    """
    options = monitor_options(monitoring, caller="run_plan", **monitoring_keywords)
    if backend == "ray":
        return run_plan_ray(plan, emulate=emulate, outputs_path=outputs_path, record_path=record_path,
                            progress=progress, plan_path=plan_path, address=address,
                            max_recoveries=DEFAULT_MAX_RECOVERIES if max_recoveries is None else max_recoveries,
                            monitoring=options, check_inputs=check_inputs)
    if backend != "local":
        raise StreamMapError(f"unknown backend {backend!r}", hint="use 'local' or 'ray'")
    session = RunSession(plan, options, backend="local", emulate=emulate, plan_path=plan_path,
                         outputs_path=outputs_path, record_path=record_path)
    plan = session.plan
    placements = check_devices(plan, emulate=emulate)        # refuses before anything runs
    with session:
        program = load_program(plan, session.source)       # checked by the session, just above
        session.defer(program.unload)
        kernels = checked_kernels(program.kernels) if check_inputs else program.kernels
        session.begin()
        devices = make_devices(placements)
        if options.watching:        # a local run nobody asked to watch runs without a supervisor
            # a pipeline plan streams its items (.pipeline): monitored alike, but not re-mapped
            config = session.alert_config
            remap = config.remap if config.remap.active(emulate) and config.remap.max_remaps > 0 else None
            session.supervise(placements, remap=remap if plan.pipeline is None else None)
        if plan.pipeline is not None:
            outcome = _stream(plan, kernels, devices, session.supervisor)
        else:
            outcome = _execute(plan, kernels, devices, placements, emulate=emulate, progress=progress,
                               supervisor=session.supervisor)
    return session.finish(outcome)


def _stream(plan: Plan, kernels: dict, devices: dict, supervisor: Optional[RunSupervisor]) -> Outcome:
    """Run a pipeline plan (:mod:`.pipeline`), followed by ``supervisor`` when there is one."""
    executor = PipelineExecutor(plan, kernels, devices)
    if supervisor is not None:
        supervisor.start()
        supervisor.attach(executor)
    outcome = executor.run()
    if supervisor is not None:
        supervisor.detach()
    return outcome


def _execute(plan: Plan, kernels: dict, devices: dict, placements: dict, *, emulate: bool, progress: bool,
             supervisor=None) -> Outcome:
    """Run ``plan``; when the supervisor asks for it, drain, re-map the rest and go on.

    Returns one :class:`Outcome` for the whole run, indexed like ``plan.tasks`` (the original
    plan), with ``outcome.plan`` the plan the tasks finally ran under and ``outcome.remaps`` the
    re-mappings (run-record dicts).
    """
    t_run = time.perf_counter()
    if supervisor is not None:
        supervisor.start(t_run)
    segments: list = []
    current, carry = plan, None
    starts: dict[str, float] = {}
    finishes: dict[str, float] = {}
    attempts: dict[str, int] = {}
    remaps: list[dict] = []
    slowdown: dict[str, float] = {}
    lost: set[str] = set()
    while True:
        executor = _executor_class(current)(current, kernels, devices, progress=progress, carry=carry)
        if supervisor is not None:
            supervisor.attach(executor)
        outcome = executor.run()
        if supervisor is not None:
            supervisor.detach()
        segments.append((executor, outcome, executor.t0 - t_run))
        trigger = supervisor.take_trigger() if outcome.drained and supervisor is not None else None
        if not outcome.drained:
            break
        held = executor.held_results()
        finished = {t.id: t.device for k, t in enumerate(current.tasks) if executor.done[k]}
        now = time.perf_counter() - t_run
        if trigger is not None:
            for d, f in trigger.factors.items():
                slowdown[d] = slowdown.get(d, 1.0) * f
            lost |= set(trigger.lost)
        exclude = {d.id for d in current.devices if d.id not in devices} if not emulate else set()
        try:
            result = remap_plan(current, finished, now, slowdown=slowdown, lost=lost, exclude=exclude,
                                available=held.keys())
        except (RemapError, StreamMapError) as exc:
            msg = f"cannot re-map the rest of the plan ({exc.message}); going on with the current plan"
            log.warning("%s", msg)
            if supervisor is not None:
                if supervisor.alerts is not None:
                    supervisor.alerts.fire("remap", msg, t=now)
                supervisor.remap = None
            carry = held
            continue
        new_devices = [d for d in {t.device for t in result.plan.tasks} if d not in devices]
        if new_devices:
            extra = check_devices(result.plan, emulate=emulate)
            devices.update(make_devices({d: extra[d] for d in new_devices}))
            placements.update({d: extra[d] for d in new_devices})
        carry = {k: v for k, v in held.items() if k not in set(result.rerun)}
        rec = {
            "t": round(trigger.t if trigger is not None else now, 6),
            "reason": trigger.reason if trigger is not None else "drained",
            "devices": list(trigger.devices) if trigger is not None else [],
            "factors": {d: round(f, 4) for d, f in (trigger.factors if trigger is not None else {}).items()},
            "lost": sorted(lost), "unfinished": len(result.unfinished), "moved": len(result.moved),
            "rerun": len(result.rerun), "mapping_time": result.mapping_time,
            "drain_time": max(0.0, now - (trigger.t if trigger is not None else now)),
            "estimated_makespan": result.estimated_makespan,
        }
        remaps.append(rec)
        off = [k for k in result.moved if current.tasks[executor.index[k]].device in rec["devices"]]
        what = ", ".join(rec["devices"]) or "the devices"
        log.warning("re-mapped the remaining %d task(s) in %.1f ms after %s: %d moved (%d off %s)",
                    len(result.unfinished), result.mapping_time * 1e3, rec["reason"].split(";")[0],
                    len(result.moved), len(off), what)
        if supervisor is not None:
            supervisor.remaps_done += 1
            if supervisor.metrics is not None:
                supervisor.metrics.remapped()
            if supervisor.detector is not None:
                supervisor.detector.reset()
        current = result.plan

    if len(segments) == 1:         # no re-mapping (the common case): the executor's outcome as it is
        return outcome
    for executor, seg, offset in segments:
        for k, t in enumerate(executor.plan.tasks):
            if k in executor.carried:
                continue
            if seg.attempts[k]:
                attempts[t.id] = attempts.get(t.id, 0) + seg.attempts[k]
            if seg.starts[k] is not None:
                starts[t.id] = seg.starts[k] + offset
            if seg.finishes[k] is not None:
                finishes[t.id] = seg.finishes[k] + offset
    wall = time.perf_counter() - t_run
    original = {t.id: t.device for t in plan.tasks}
    ids = [t.id for t in plan.tasks]
    final = {t.id: t for t in current.tasks}
    busy: dict[str, float] = {}
    for tid in ids:
        s, f = starts.get(tid), finishes.get(tid)
        if s is not None and f is not None:
            busy[final[tid].device] = busy.get(final[tid].device, 0.0) + (f - s)
    used = {final[t].device for t in ids} | set(busy)
    devs = {d.id: {"executor": devices[d.id].executor, "busy": busy.get(d.id, 0.0),
                   "peak_memory": devices[d.id].peak_memory()}
            for d in current.devices if d.id in used and d.id in devices}
    return Outcome(outputs=outcome.outputs, error=outcome.error, wall_time=wall,
                   starts=[starts.get(t) for t in ids], finishes=[finishes.get(t) for t in ids],
                   attempts=[attempts.get(t, 0) for t in ids], devices=devs,
                   plan=current if current is not plan else None, remaps=remaps,
                   planned_device={t: original[t] for t in ids if final[t].device != original[t]})


def _executor_class(plan: Plan):
    """The local executor, or the sharing executor for plans that share devices or spill."""
    return SharingExecutor if needs_sharing_executor(plan) else LocalExecutor


