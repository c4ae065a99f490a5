"""Executors that run a plan: in this process (:mod:`.local`, the default), later on Ray.

:func:`run_plan` is the one entry point: it checks the plan can run here (source unchanged,
devices available, or ``emulate``), loads the program, runs it with the local executor, and
writes the outputs (``.npz``) and the run record (``.run.json``).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import os
from pathlib import Path
from typing import Optional

import numpy

from streammap.errors import KernelError, StreamMapError
from streammap.plan import Plan, read_plan
from streammap.runrecord import DeviceRun, RunRecord, TaskRun, run_record_path, write_run_record

from .context import array_module, current_device
from .devices import check_devices, make_devices
from .loader import load_program, refuse_workflow
from .local import LocalExecutor, Outcome

__all__ = ["run_plan", "array_module", "current_device", "LocalExecutor", "Outcome", "build_run_record"]


def run_plan(plan, *, emulate: bool = False, outputs_path=None, record_path=None, progress: bool = True,
             plan_path=None) -> dict:
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
    """
    if isinstance(plan, (str, os.PathLike)):
        plan_path = plan_path or plan
        plan = read_plan(plan)
    if not isinstance(plan, Plan):
        raise TypeError(f"run_plan needs a Plan or a plan file, not {type(plan).__name__}")
    refuse_workflow(plan)
    plan.check_source()
    placements = check_devices(plan, emulate=emulate)        # refuses before anything runs
    if record_path is None and outputs_path is not None:
        record_path = run_record_path(outputs_path)

    program = load_program(plan)
    started = _dt.datetime.now().astimezone().isoformat(timespec="seconds")
    try:
        devices = make_devices(placements)
        executor = LocalExecutor(plan, program.kernels, devices, progress=progress)
        outcome = executor.run()
    finally:
        program.unload()

    if outcome.error is None and outputs_path is not None:
        try:
            write_npz(outcome.outputs, outputs_path)
        except OSError as exc:
            outcome.error = StreamMapError(f"cannot write the outputs: {exc.strerror or exc}", path=outputs_path)
        except Exception as exc:
            outcome.error = exc
    if record_path is not None:
        record = build_run_record(plan, outcome, emulate=emulate, started=started, plan_path=plan_path,
                                  outputs_path=outputs_path if outcome.error is None else None)
        try:
            write_run_record(record, record_path)
        except OSError as exc:
            if outcome.error is None:         # else the run's own error is the one to report
                raise StreamMapError(f"cannot write the run record: {exc.strerror or exc}",
                                     path=record_path) from None
    if outcome.error is not None:
        err = outcome.error
        if isinstance(err, KernelError) and err.cause is not None:
            raise err from err.cause
        raise err
    return outcome.outputs


def write_npz(outputs: dict, path) -> None:
    """Write ``outputs`` to ``path`` as ``.npz``, atomically (temp file, then ``os.replace``)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            numpy.savez(f, **outputs)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _plan_digest(plan: Plan, plan_path) -> str:
    if plan_path is not None:
        try:
            return hashlib.sha256(Path(plan_path).read_bytes()).hexdigest()
        except OSError:
            pass
    return hashlib.sha256(plan.to_yaml().encode("utf-8")).hexdigest()


def build_run_record(plan: Plan, outcome: Outcome, *, emulate: bool, started: str, plan_path=None,
                     outputs_path=None, backend: str = "local") -> RunRecord:
    """The :class:`RunRecord` of a run of ``plan`` that ended with ``outcome``."""
    tasks = [
        TaskRun(id=t.id, kernel=t.kernel, device=t.device, site=t.site, estimated_start=t.start,
                estimated_finish=t.finish, start=outcome.starts[k], finish=outcome.finishes[k],
                attempts=outcome.attempts[k])
        for k, t in enumerate(plan.tasks)
    ]
    wall = outcome.wall_time
    devices = [
        DeviceRun(id=d, executor=info["executor"], busy=info["busy"],
                  utilisation=(info["busy"] / wall) if wall > 0 else 0.0, peak_memory=info["peak_memory"])
        for d, info in outcome.devices.items()
    ]
    err = outcome.error
    if err is None:
        error: Optional[str] = None
    elif isinstance(err, (KernelError, StreamMapError)):
        error = err.format()
    else:
        error = f"{type(err).__name__}: {err}"
    return RunRecord(
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
        tasks=tasks,
    )
