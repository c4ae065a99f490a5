"""The run record: what a run did, beside its outputs (``out.npz`` → ``out.run.json``).

Per task: the device, the mapper's estimated start/finish and duration, and the measured ones
(seconds since the run started), with the number of attempts. ``status`` is ``ok``, ``failed``
(``error`` says why) or ``incomplete``: the runtime writes the record when the run starts, with
that status, and replaces it (atomically) when the run ends, so a record left ``incomplete``
tells that the run's process ended first (a kernel called ``os._exit`` or crashed it, or it was
killed). Per device: what executed it
(``cupy:0``, ``numpy``, ``numpy (emulating node0/gpu1)``), busy time and utilisation, and peak
memory where known. ``streammap show run.json`` reads it.

Optional parts (absent in records of older versions, which stay readable):

``telemetry``  per observed device (``gpu0`` through NVML, ``cpu`` from ``/proc``) a time series
               of utilisation (0–1), memory used (bytes), power (W), temperature (°C) and
               uncorrected ECC errors, with the plan devices it hosted; and the Xid events seen.
``alerts``     what the alert rules raised during the run (:mod:`streammap.monitoring.alerts`).
``remaps``     each time the runtime re-mapped the rest of the plan (:mod:`streammap.remap`): when,
               why, which device, how many tasks moved, how long re-mapping took.
per task       ``planned_device``, when a re-mapping moved the task off the device of the plan.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal, Optional

import pydantic

from streammap.errors import StreamMapError
from streammap.io.files import atomic_write_text, read_text_bounded
from streammap.plan import _Strict

RUN_VERSION = 1


class TaskRun(_Strict):
    id: str
    kernel: str
    device: str
    site: Optional[str] = None
    estimated_start: float
    estimated_finish: float
    start: Optional[float] = None      # measured, seconds from run start; None if it never ran
    finish: Optional[float] = None
    attempts: int = 0
    planned_device: Optional[str] = None   # the plan's device, when a re-mapping moved the task
    share: float = 1.0                      # the fraction of its device it was given (GPU sharing)

    @property
    def estimated(self) -> float:
        return self.estimated_finish - self.estimated_start

    @property
    def measured(self) -> Optional[float]:
        return None if self.start is None or self.finish is None else self.finish - self.start


class DeviceRun(_Strict):
    id: str
    executor: str
    busy: float = 0.0
    utilisation: float = 0.0
    peak_memory: Optional[float] = None
    # Under memory oversubscription: spilled_bytes, restored_bytes, spills, restores, overflow,
    # seconds (runtime/spill.py).
    spill: Optional[dict] = None


class DeviceTelemetry(_Strict):
    id: str                            # local name: gpu0 (NVML index), cpu
    kind: str
    source: str                        # nvml or cpu
    model: Optional[str] = None
    uuid: Optional[str] = None
    memory_total: Optional[float] = None
    plan_devices: list[str] = []       # plan devices that ran on it
    lost: bool = False
    t: list[float] = []                # seconds from the run's start
    utilization: Optional[list[Optional[float]]] = None      # 0-1
    memory_used: Optional[list[Optional[float]]] = None      # bytes
    power: Optional[list[Optional[float]]] = None            # W
    temperature: Optional[list[Optional[float]]] = None      # degrees C
    ecc_uncorrected: Optional[list[Optional[int]]] = None


class XidRecord(_Strict):
    device: str
    xid: int
    t: float


class RunTelemetry(_Strict):
    interval: float
    # seconds monitoring cost: on the run's thread (set-up, final harvest) + CPU of its own thread
    monitor_time: Optional[float] = None
    devices: list[DeviceTelemetry] = []
    xid_events: list[XidRecord] = []


class AlertRecord(_Strict):
    t: float                           # seconds from the run's start
    kind: str                          # memory, temperature, slow_task, slow_device, device_lost, ecc, xid
    severity: Literal["warning", "critical"] = "warning"
    message: str
    device: Optional[str] = None
    task: Optional[str] = None
    value: Optional[float] = None
    threshold: Optional[float] = None


class RemapRecord(_Strict):
    t: float                           # seconds from the run's start, when the re-mapping was decided
    reason: str
    devices: list[str] = []            # the slow or lost devices
    factors: dict[str, float] = {}     # slowdown factor used per slow device
    lost: list[str] = []
    unfinished: int = 0                # tasks left to run when re-mapping
    moved: int = 0                     # of which changed device
    rerun: int = 0                     # finished tasks run again (their outputs were on a lost device)
    mapping_time: float = 0.0          # seconds spent re-mapping
    drain_time: float = 0.0            # seconds from the decision until the running tasks were done
    estimated_makespan: float = 0.0    # of the new plan, from the run's start


class RunRecord(_Strict):
    streammap_run: int = RUN_VERSION
    plan: str
    plan_sha256: str = ""
    source: Optional[str] = None
    backend: str = "local"
    emulate: bool = False
    started: str                       # ISO 8601 wall-clock time
    wall_time: float
    estimated_makespan: float
    # incomplete: written when the run starts and replaced when it ends; a record still
    # incomplete means the run's process ended first (a kernel called os._exit or crashed it, or
    # it was killed); ``error`` then says so
    status: Literal["ok", "failed", "incomplete"]
    error: Optional[str] = None
    outputs: Optional[str] = None
    devices: list[DeviceRun]
    tasks: list[TaskRun]
    telemetry: Optional[RunTelemetry] = None
    alerts: list[AlertRecord] = []
    remaps: list[RemapRecord] = []


def run_record_path(outputs_path) -> Path:
    """``out.npz`` → ``out.run.json``."""
    p = Path(outputs_path)
    return p.with_name(p.stem + ".run.json")


def write_run_record(record: RunRecord, path) -> None:
    path = Path(path)
    atomic_write_text(path, record.model_dump_json(indent=1) + "\n", what="run record")


def read_run_record(path) -> RunRecord:
    path = Path(path)
    text = read_text_bounded(path, 1 << 30, what="run record")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise StreamMapError(f"not valid JSON: {exc.msg}", path=path, line=exc.lineno, col=exc.colno) from None
    except (RecursionError, ValueError) as exc:          # nested too deeply; a 5000-digit number
        raise StreamMapError(f"not valid JSON: {exc or 'nested too deeply'}", path=path) from None
    try:
        return RunRecord.model_validate(data)
    except pydantic.ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        raise StreamMapError(f"not a StreamMAP run record: {loc}: {err['msg']}", path=path) from None
