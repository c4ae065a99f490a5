"""Run a plan: the executors that run it: in this process (:mod:`.local`, the default) or on a Ray cluster
(:mod:`.ray_executor`, ``backend="ray"``).

:func:`run_plan` is the one entry point: it checks the plan can run here (source unchanged,
devices available, or ``emulate``), loads the program, runs it with the local executor, and
writes the outputs (``.npz``) and the run record (``.run.json``).

Monitoring (``supervisor.py``): unless ``telemetry=False``, a daemon thread samples the devices
(NVML, the CPU), feeds Prometheus metrics when asked (``metrics=``), evaluates the alert rules
(``alerts=``) and watches for a device that runs consistently slower than its model. When it finds
one and re-mapping is on, the executor drains (running tasks finish, nothing new starts), the rest
of the plan is re-mapped (:func:`streammap.remap.remap_plan`) and a new executor continues with
the results held; the run record lists each re-mapping.
"""

from __future__ import annotations

import datetime as _dt
import logging
import time
from typing import Optional

from streammap.errors import StreamMapError
from streammap.monitoring.alerts import AlertManager, alert_config
from streammap.monitoring.metrics import open_metrics
from streammap.monitoring.telemetry import DEFAULT_INTERVAL
from streammap.plan import Plan
from streammap.remap import RemapError, remap_plan
from streammap.runrecord import run_record_path
from streammap.runtime.devices import check_devices, make_devices
from streammap.runtime.lifecycle import finish_run
from streammap.runtime.loader import load_program, runnable_plan
from streammap.runtime.local import LocalExecutor, Outcome
from streammap.runtime.pipeline import PipelineExecutor
from streammap.runtime.ray.executor import DEFAULT_MAX_RECOVERIES, run_plan_ray
from streammap.runtime.shared import SharingExecutor, needs_sharing_executor
from streammap.runtime.supervisor import RunSupervisor

__all__ = ["run_plan"]

log = logging.getLogger("streammap.runtime")


def run_plan(plan, *, emulate: bool = False, outputs_path=None, record_path=None, progress: bool = True,
             plan_path=None, telemetry: bool = True, interval: float | None = None, metrics=None,
             dcgm_names: bool = False, metrics_addr: str = "127.0.0.1", alerts=None, samplers=None,
             backend: str = "local", address: Optional[str] = None, max_recoveries: Optional[int] = None) -> dict:
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
    telemetry : bool
        Sample the devices during the run (NVML for the GPUs it uses, the CPU) into the run record;
        with ``False`` and no ``metrics`` or ``alerts``, nothing watches the run at all.
    interval : float, optional
        Seconds between samples (default :data:`streammap.monitoring.telemetry.DEFAULT_INTERVAL`).
    metrics : int or streammap.monitoring.metrics.RunMetrics, optional
        A port to serve Prometheus metrics on during the run (on ``metrics_addr``; 0 picks a free
        port), or a :class:`~streammap.monitoring.metrics.RunMetrics` the caller serves and closes.
    dcgm_names : bool
        With a port: also export the DCGM exporter's metric names.
    alerts : str, Path, dict or streammap.monitoring.alerts.AlertConfig, optional
        Alert rules and re-mapping settings (default :data:`streammap.monitoring.alerts.DEFAULT_CONFIG`:
        alerts on, re-mapping on except under ``emulate``).
    samplers : list, optional
        Telemetry samplers to use instead of this machine's (tests).
    backend : str
        ``"local"`` (default: this process) or ``"ray"`` (:mod:`.ray_executor`: one actor per plan
        device on a Ray cluster; needs ``pip install 'streammap[cluster]'``). Monitoring works alike
        on both (:mod:`.ray_monitor`), except that Ray does not re-map a slow device.
    address : str, optional
        With ``backend="ray"``: the Ray cluster (``auto``, ``host:port``); default: the cluster
        this process is connected to, else ``RAY_ADDRESS``, else a new local Ray.
    max_recoveries : int, optional
        With ``backend="ray"``: how many lost nodes/actors to recover from (default 3).

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
        A kernel raised (after its retries); carries the task id, call site, device and the
        kernel's own traceback text.

    Notes
    -----
    The program is loaded as a fresh module for the run and its namespace is emptied when the run
    ends (:meth:`~streammap.runtime.loader.Program.unload`, so that the run leaves no reference
    cycles behind): what the program leaves running past the run (a thread it started, an object
    whose methods read its globals) must not rely on its module-level names.
    """
    if backend == "ray":
        return run_plan_ray(plan, emulate=emulate, outputs_path=outputs_path, record_path=record_path,
                            progress=progress, plan_path=plan_path, address=address,
                            max_recoveries=DEFAULT_MAX_RECOVERIES if max_recoveries is None else max_recoveries,
                            telemetry=telemetry, interval=interval, metrics=metrics, alerts=alerts,
                            dcgm_names=dcgm_names, metrics_addr=metrics_addr)
    if backend != "local":
        raise StreamMapError(f"unknown backend {backend!r}", hint="use 'local' or 'ray'")
    plan, plan_path, _ = runnable_plan(plan, plan_path)
    placements = check_devices(plan, emulate=emulate)        # refuses before anything runs
    if record_path is None and outputs_path is not None:
        record_path = run_record_path(outputs_path)


    config = alert_config(alerts)
    metrics, own = open_metrics(metrics, dcgm_names=dcgm_names, addr=metrics_addr)
    own_metrics = metrics if own else None
    try:
        program = load_program(plan)
    except BaseException:
        if own_metrics is not None:
            own_metrics.close()
        raise
    started = _dt.datetime.now().astimezone().isoformat(timespec="seconds")
    supervisor = None
    monitored: tuple = (None, None)         # the record's telemetry and alerts
    try:
        devices = make_devices(placements)
        watch = telemetry or metrics is not None or alerts is not None
        # a pipeline plan streams its items (.pipeline): monitored alike, but not re-mapped
        remap = config.remap if config.remap.active(emulate) and config.remap.max_remaps > 0 else None
        if plan.pipeline is not None:
            remap = None
        if watch:
            manager = AlertManager(config, metrics=metrics, context={
                "plan": str(plan_path) if plan_path is not None else None, "source": plan.source.path})
            supervisor = RunSupervisor(
                plan, placements, telemetry=telemetry, metrics=metrics, alerts=manager,
                remap=remap,
                interval=interval or _default_interval(), samplers=samplers)
        if plan.pipeline is not None:
            executor = PipelineExecutor(plan, program.kernels, devices)
            if supervisor is not None:
                supervisor.start()
                supervisor.attach(executor)
            outcome = executor.run()
            if supervisor is not None:
                supervisor.detach()
        else:
            outcome = _execute(plan, program.kernels, devices, placements, emulate=emulate, progress=progress,
                               supervisor=supervisor)
    finally:
        program.unload()
        if supervisor is not None:
            supervisor.stop()
            if record_path is not None:
                monitored = (supervisor.telemetry_dict(), supervisor.alert_list())
            # freed now, not after the record is built: what monitoring allocated no longer counts
            # towards the collector's next young-generation pass (which the record's YAML and JSON
            # work would otherwise set off more often in monitored runs)
            supervisor = manager = None
        if own_metrics is not None:
            own_metrics.close()

    return finish_run(plan, outcome, outputs_path=outputs_path, record_path=record_path, emulate=emulate,
                      started=started, plan_path=plan_path, telemetry=monitored[0], alerts=monitored[1])


def _default_interval() -> float:
    return DEFAULT_INTERVAL


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
            log.warning("streammap: %s", msg)
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
        log.warning("streammap: re-mapped the remaining %d task(s) in %.1f ms after %s: %d moved (%d off %s)",
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


