"""The run record: what a run did, beside its outputs (``out.npz`` → ``out.run.json``).

Per task: the device, the mapper's estimated start/finish and duration, and the measured ones
(seconds since the run started), with the number of attempts. Per device: what executed it
(``cupy:0``, ``numpy``, ``numpy (emulating node0/gpu1)``), busy time and utilisation, and peak
memory where known. ``streammap show run.json`` reads it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Literal, Optional

import pydantic

from .errors import StreamMapError
from .plan import _Strict

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
    status: Literal["ok", "failed"]
    error: Optional[str] = None
    outputs: Optional[str] = None
    devices: list[DeviceRun]
    tasks: list[TaskRun]


def run_record_path(outputs_path) -> Path:
    """``out.npz`` → ``out.run.json``."""
    p = Path(outputs_path)
    return p.with_name(p.stem + ".run.json")


def write_run_record(record: RunRecord, path) -> None:
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(record.model_dump_json(indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def read_run_record(path) -> RunRecord:
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise StreamMapError(f"file not found: {path}") from None
    except json.JSONDecodeError as exc:
        raise StreamMapError(f"not valid JSON: {exc.msg}", path=path, line=exc.lineno, col=exc.colno) from None
    try:
        return RunRecord.model_validate(data)
    except pydantic.ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        raise StreamMapError(f"not a StreamMAP run record: {loc}: {err['msg']}", path=path) from None
