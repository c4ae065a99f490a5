"""The set-up and tear-down of every run, on every backend: :class:`RunSession` and :func:`finish_run`.

The local executor (:func:`streammap.runtime.run.run_plan`) and the Ray executor
(:func:`streammap.runtime.ray.executor.run_plan_ray`) both run inside a :class:`RunSession`, so
the two backends check, open, watch, close and write the same things in the same order, and a fix
to any of it lands once. A run goes:

1. ``RunSession(plan, options, ...)``: the plan is made runnable (read, its source checked:
   :func:`~streammap.runtime.loader.runnable_plan`) and the record's path decided; nothing is
   opened yet, so the backend's own checks (devices, options) can still refuse the run cheaply.
2. ``with session:`` the alert rules are read and checked, then the metrics port is opened (when
   ``metrics`` is a port). The backend opens its own resources (the program, a Ray connection)
   and hands their closing to the session (:meth:`RunSession.defer`); :meth:`RunSession.begin`
   stamps the start and writes the run record with status ``incomplete`` (:func:`incomplete_record`),
   so that a process that ends in the middle of the run (a kernel calling ``os._exit``, a
   segfault, a kill) leaves a record that says so (a header without the tasks, which the plan
   lists: a run writes its tasks once, at its end); :meth:`RunSession.supervise` starts watching (alerts, metrics, telemetry:
   :class:`~streammap.runtime.supervisor.RunSupervisor`).
3. Leaving the ``with`` (also on an error) closes everything in the reverse order it was opened:
   the supervisor first (a last sample, while the backend's resources are still up; its
   telemetry and alerts are kept for the record and the supervisor itself is dropped, so that
   what monitoring allocated is freed before the record's YAML and JSON work), then what the
   backend deferred, then the metrics the session opened. When an exception leaves the ``with``
   after :meth:`RunSession.begin` (the backend failed, not a kernel: that is in the outcome), the
   incomplete record is replaced by a ``failed`` one naming the exception.
4. :meth:`RunSession.finish` (:func:`finish_run`): the outputs written (only when the run
   succeeded), the run record written over the incomplete one (also when the run failed), then
   the outputs returned or the run's error raised.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import os
import socket
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Callable, Optional

import numpy

from streammap.errors import KernelError, StreamMapError
from streammap.io.files import atomic_write
from streammap.monitoring.alerts import AlertManager, alert_config
from streammap.monitoring.metrics import open_metrics
from streammap.monitoring.options import MonitorOptions
from streammap.plan import Plan
from streammap.runrecord import TASK_FIELDS, DeviceRun, RunRecord, run_record_path, write_run_record
from streammap.runtime.loader import runnable_plan
from streammap.runtime.local import Outcome
from streammap.runtime.supervisor import RunSupervisor


class RunSession:
    """One run's set-up and tear-down (see the module docstring).

    Parameters
    ----------
    plan : Plan, str or Path
        The plan, or a plan file to read.
    options : MonitorOptions
    backend : str
        Named in the run record (``local``, ``ray``).
    emulate : bool
    plan_path, outputs_path, record_path : str or Path, optional
        As for :func:`streammap.runtime.run_plan`; ``record_path`` defaults to beside
        ``outputs_path``.

    Attributes
    ----------
    plan, plan_path, source
        The runnable plan, the file it was read from, its program's source file.
    metrics : streammap.monitoring.metrics.RunMetrics or None
        The run's metrics, once the session is entered.
    supervisor : RunSupervisor or None
        The run's monitoring, from :meth:`supervise` until the session closes.
    telemetry, alerts
        The run record's telemetry and alerts, kept when the supervisor stops. A backend whose
        telemetry comes from elsewhere (Ray: the actors' own series) sets ``telemetry`` itself.
    """

    def __init__(self, plan, options: MonitorOptions, *, backend: str, emulate: bool, plan_path=None,
                 outputs_path=None, record_path=None):
        self.plan, self.plan_path, self.source = runnable_plan(plan, plan_path)
        self.options = options
        self.backend = backend
        self.emulate = emulate
        self.outputs_path = outputs_path
        if record_path is None and outputs_path is not None:
            record_path = run_record_path(outputs_path)
        self.record_path = record_path
        self.alert_config = None
        self.metrics = None
        self.supervisor: Optional[RunSupervisor] = None
        self.started: Optional[str] = None
        self.telemetry: Optional[dict] = None
        self.alerts: list = []
        self._record_telemetry = True
        self._closers = ExitStack()
        self._incomplete = False             # the record on disk says "incomplete"
        self._t_begin: Optional[float] = None

    # -- set-up --------------------------------------------------------------------------------
    def __enter__(self) -> "RunSession":
        o = self.options
        self.alert_config = alert_config(o.alerts)         # a bad rule is refused before a port opens
        self.metrics, own = open_metrics(o.metrics, dcgm_names=o.dcgm_names, addr=o.metrics_addr)
        if own:
            self._closers.callback(self.metrics.close)
        return self

    def defer(self, close: Callable, *args) -> None:
        """Call ``close(*args)`` when the session closes (in the reverse order of the calls)."""
        self._closers.callback(close, *args)

    def begin(self) -> None:
        """The run starts now (its resources are up): the record's ``started``, and the record
        written with status ``incomplete`` until :meth:`finish` replaces it (when it can be
        written: else the end of the run reports the path)."""
        self.started = _dt.datetime.now().astimezone().isoformat(timespec="seconds")
        self._t_begin = time.perf_counter()
        if self.record_path is None:
            return
        try:
            record = incomplete_record(self.plan, emulate=self.emulate, started=self.started,
                                       plan_path=self.plan_path, backend=self.backend)
            write_run_record(record, self.record_path)
        except StreamMapError:
            # A folder that cannot be written: the run goes on, and its end reports the path (the
            # outputs' or the record's) as a run without this record always did.
            return
        self._incomplete = True

    def supervise(self, placements: dict, *, remap=None, telemetry: Optional[bool] = None, samplers=None,
                  record_telemetry: bool = True) -> RunSupervisor:
        """Start the run's monitoring: a :class:`RunSupervisor` with the run's alert rules and
        metrics, stopped when the session closes.

        ``telemetry`` and ``samplers`` default to the options'; ``remap`` (a
        :class:`~streammap.monitoring.alerts.RemapConfig`) lets slow or lost devices drain the
        run. ``record_telemetry=False``: the record's telemetry does not come from this
        supervisor's samples (the backend sets :attr:`telemetry`).
        """
        o = self.options
        if samplers is None and o.samplers is not None:
            samplers = list(o.samplers)
        manager = AlertManager(self.alert_config.for_run(self.emulate), metrics=self.metrics, context={
            "plan": str(self.plan_path) if self.plan_path is not None else None, "source": self.plan.source.path})
        self.supervisor = RunSupervisor(
            self.plan, placements, telemetry=o.telemetry if telemetry is None else telemetry, metrics=self.metrics,
            alerts=manager, remap=remap, interval=o.sample_interval, samplers=samplers)
        self._record_telemetry = record_telemetry
        self._closers.callback(self._stop_supervisor)
        return self.supervisor

    # -- tear-down -----------------------------------------------------------------------------
    def __exit__(self, exc_type, exc, tb) -> bool:
        try:
            return self._closers.__exit__(exc_type, exc, tb)
        finally:
            if exc is not None and self._incomplete:
                self._record_failure(exc)

    def _record_failure(self, exc: BaseException) -> None:
        """Replace the incomplete record by a failed one: the run stopped on ``exc`` before it had
        an outcome (the run's own error, not a failure to write, is what the caller sees)."""
        n = len(self.plan.tasks)
        wall = time.perf_counter() - self._t_begin if self._t_begin is not None else 0.0
        outcome = Outcome(outputs={}, error=exc, wall_time=wall, starts=[None] * n, finishes=[None] * n,
                          attempts=[0] * n)
        try:
            record, task_columns = run_record_parts(self.plan, outcome, emulate=self.emulate, started=self.started,
                                                    plan_path=self.plan_path, backend=self.backend,
                                                    telemetry=self.telemetry, alerts=self.alerts)
            write_run_record(record, self.record_path, task_columns)
        except StreamMapError:
            pass
        self._incomplete = False

    def _stop_supervisor(self) -> None:
        supervisor, self.supervisor = self.supervisor, None
        supervisor.stop()
        if self.record_path is not None:
            if self._record_telemetry:
                self.telemetry = supervisor.telemetry_dict()
            self.alerts = supervisor.alert_list()

    def finish(self, outcome: Outcome) -> dict:
        """:func:`finish_run` for this session: write the outputs and the record; return the
        outputs or raise the run's error."""
        self._incomplete = False
        return finish_run(self.plan, outcome, outputs_path=self.outputs_path, record_path=self.record_path,
                          emulate=self.emulate, started=self.started, plan_path=self.plan_path,
                          backend=self.backend, telemetry=self.telemetry, alerts=self.alerts)


def finish_run(plan: Plan, outcome: Outcome, *, outputs_path, record_path, emulate: bool, started: str,
               plan_path=None, backend: str = "local", telemetry=None, alerts=None) -> dict:
    """What every executor does once its run ends: write the outputs (only when it succeeded), write
    the run record (also when it failed), then return the outputs or raise the run's error."""
    if outcome.error is None and outputs_path is not None:
        try:
            write_npz(outcome.outputs, outputs_path)
        except Exception as exc:               # StreamMapError "cannot write the outputs", or numpy's  # noqa: BLE001
            outcome.error = exc
    if record_path is not None:
        record, task_columns = run_record_parts(plan, outcome, emulate=emulate, started=started, plan_path=plan_path,
                                                outputs_path=outputs_path if outcome.error is None else None,
                                                backend=backend, telemetry=telemetry, alerts=alerts)
        try:
            write_run_record(record, record_path, task_columns)
        except StreamMapError:
            if outcome.error is None:         # else the run's own error is the one to report
                raise
    if outcome.error is not None:
        err = outcome.error
        if isinstance(err, KernelError) and err.cause is not None:
            raise err from err.cause
        raise err
    return outcome.outputs


def write_npz(outputs: dict, path) -> None:
    """Write ``outputs`` to ``path`` as ``.npz``, atomically (temp file, then ``os.replace``)."""
    atomic_write(path, lambda f: numpy.savez(f, **outputs), binary=True, what="outputs")


def _plan_digest(plan: Plan, plan_path) -> str:
    """sha256 of the plan file, or of an in-memory plan's JSON (pydantic's serialiser in Rust: a
    YAML dump here cost more than a short run's monitoring and set off garbage collections)."""
    if plan_path is not None:
        try:
            return hashlib.sha256(Path(plan_path).read_bytes()).hexdigest()
        except OSError:
            pass
    return hashlib.sha256(plan.model_dump_json().encode("utf-8")).hexdigest()


#: The error of a record left incomplete (followed by the process id and host).
INCOMPLETE_ERROR = ("the run's process ended before the run finished: a kernel may have ended the process "
                    "(os._exit, a crash) or it was killed")


def incomplete_record(plan: Plan, *, emulate: bool, started: str, plan_path=None, backend: str = "local") -> RunRecord:
    """The record of a run that has started and not ended (see the module docstring): status
    ``incomplete``, the error a reader sees if it is never replaced, and no tasks, only how many
    the plan has (:attr:`~streammap.runrecord.RunRecord.planned_tasks`): its tasks are written
    once, when the run ends, and a reader of a record left incomplete takes them from the plan."""
    outcome = Outcome(outputs={}, error=None, wall_time=0.0, starts=[], finishes=[], attempts=[])
    record, _ = run_record_parts(plan, outcome, emulate=emulate, started=started, plan_path=plan_path,
                                 backend=backend, with_tasks=False)
    where = f"process {os.getpid()} on {socket.gethostname()}"
    return record.model_copy(update={"status": "incomplete", "error": f"{INCOMPLETE_ERROR} ({where})",
                                     "planned_tasks": len(plan.tasks)})


def build_run_record(plan: Plan, outcome: Outcome, *, emulate: bool, started: str, plan_path=None,
                     outputs_path=None, backend: str = "local", telemetry: Optional[dict] = None,
                     alerts: Optional[list] = None) -> RunRecord:
    """The :class:`RunRecord` of a run of ``plan`` that ended with ``outcome``, a
    :class:`~streammap.runrecord.TaskRun` per task (the runtime writes records from
    :func:`run_record_parts` instead, without an object per task)."""
    return _with_tasks(*run_record_parts(plan, outcome, emulate=emulate, started=started, plan_path=plan_path,
                                         outputs_path=outputs_path, backend=backend, telemetry=telemetry,
                                         alerts=alerts))


def _with_tasks(record: RunRecord, task_columns: dict[str, list]) -> RunRecord:
    """``record`` with the tasks of ``task_columns`` (validated as a whole)."""
    rows = [dict(zip(TASK_FIELDS, row)) for row in zip(*(task_columns[name] for name in TASK_FIELDS))]
    data = record.model_dump()
    data["tasks"] = rows
    return RunRecord.model_validate(data)


def task_columns_of(plan: Plan, outcome: Outcome) -> dict[str, list]:
    """The run record's tasks as columns (:data:`~streammap.runrecord.TASK_FIELDS` -> a list with
    a value per task of ``plan``): what the plan said and what ``outcome`` measured. A task that
    a re-mapping moved has its final device and estimates, and its plan's device as
    ``planned_device``."""
    tasks = plan.tasks
    if outcome.plan is None:
        finals = tasks
    else:
        final = {t.id: t for t in outcome.plan.tasks}
        finals = [final.get(t.id, t) for t in tasks]
    moved = outcome.planned_device
    return {"id": [t.id for t in tasks], "kernel": [t.kernel for t in tasks], "device": [f.device for f in finals],
            "site": [t.site for t in tasks], "estimated_start": [f.start for f in finals],
            "estimated_finish": [f.finish for f in finals], "start": outcome.starts, "finish": outcome.finishes,
            "attempts": outcome.attempts,
            "planned_device": [moved.get(t.id) for t in tasks] if moved else [None] * len(tasks),
            "share": [f.share for f in finals]}


def run_record_parts(plan: Plan, outcome: Outcome, *, emulate: bool, started: str, plan_path=None,
                     outputs_path=None, backend: str = "local", telemetry: Optional[dict] = None,
                     alerts: Optional[list] = None, with_tasks: bool = True) -> tuple[RunRecord, dict[str, list]]:
    """The run record of a run of ``plan`` that ended with ``outcome``, in two parts: the
    :class:`RunRecord` without its tasks, and the tasks as columns (:func:`task_columns_of`;
    ``None`` when not ``with_tasks``), for :func:`~streammap.runrecord.write_run_record` to stream."""
    wall = outcome.wall_time
    devices = [
        DeviceRun(id=d, executor=info["executor"], busy=info["busy"],
                  utilisation=(info["busy"] / wall) if wall > 0 else 0.0, peak_memory=info["peak_memory"],
                  spill=info.get("spill"))
        for d, info in outcome.devices.items()
    ]
    err = outcome.error
    if err is None:
        error: Optional[str] = None
    elif isinstance(err, (KernelError, StreamMapError)):
        error = err.format()
    else:
        error = f"{type(err).__name__}: {err}"
    record = RunRecord.model_validate(dict(
        plan=str(plan_path) if plan_path is not None else "<memory>",
        plan_sha256=_plan_digest(plan, plan_path),
        source=plan.source.path,
        backend=backend,
        emulate=emulate,
        started=started,
        wall_time=wall,
        estimated_makespan=plan.mapper.estimated_makespan,
        status="ok" if err is None else "failed",
        error=error,
        outputs=str(outputs_path) if outputs_path is not None else None,
        devices=devices,
        tasks=[],
        telemetry=telemetry,
        alerts=list(alerts or []),
        remaps=list(outcome.remaps),
    ))
    return record, task_columns_of(plan, outcome) if with_tasks else None
