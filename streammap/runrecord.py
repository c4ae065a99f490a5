"""The run record: what a run did, beside its outputs (``out.npz`` → ``out.run.json``).

Per task: the device, the mapper's estimated start/finish and duration, and the measured ones
(seconds since the run started), with the number of attempts. ``status`` is ``ok``, ``failed``
(``error`` says why) or ``incomplete``: the runtime writes the record when the run starts, with
that status, and replaces it (atomically) when the run ends, so a record left ``incomplete``
tells that the run's process ended first (a kernel called ``os._exit`` or crashed it, or it was
killed). The record written at the start holds no tasks, only ``planned_tasks`` (how many the
plan has: nothing about them is known yet that the plan does not say), so that a run writes its
tasks once; :func:`read_run_record` gives such a record the plan's tasks (estimates, nothing
measured) when the plan file is still there, unchanged. Per device: what executed it
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

Large runs: the runtime does not build a :class:`TaskRun` per task to write a record. It hands
:func:`write_run_record` the record without its tasks and the tasks as columns (one list per
:data:`TASK_FIELDS` entry); the rows are encoded a chunk of :data:`ROWS_PER_CHUNK` at a time and
streamed into the file, one task per line. The file is the same JSON document (same fields,
same order; only the whitespace differs), so :func:`read_run_record` and ``show`` read it as any
other record. Why: at 100,000 tasks, a record of pydantic objects cost about 10 µs and 1.5 KiB
per task, twice per run (the ``incomplete`` record, then the final one).
"""

from __future__ import annotations

import json
from json.encoder import encode_basestring
from pathlib import Path
from typing import Annotated, Literal, Optional, Sequence

import pydantic
from pydantic import Field

from streammap.errors import StreamMapError
from streammap.io.bulk import gc_paused
from streammap.io.files import atomic_write, atomic_write_text, read_text_bounded
from streammap.io.jsonfile import DuplicateKeyError, duplicate_key_error, loads_strict
from streammap.plan import _Strict, read_plan, sha256_file

RUN_VERSION = 1


#: A time of a task in a record: seconds >= 0, finite (views divide by spans of them).
Seconds = Annotated[float, Field(ge=0, allow_inf_nan=False)]


class TaskRun(_Strict):
    id: str
    kernel: str
    device: str
    site: Optional[str] = None
    estimated_start: Seconds
    estimated_finish: Seconds
    start: Optional[Seconds] = None      # measured, seconds from run start; None if it never ran
    finish: Optional[Seconds] = None
    # A real count is at most retries + recoveries + 1; past 32 bits it is no count (10**19 ended
    # the views in an OverflowError traceback: their columns are machine integers).
    attempts: int = Field(default=0, ge=0, le=2**31 - 1)
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
    wall_time: Seconds
    estimated_makespan: Seconds
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
    # the plan's task count, in a record written when the run started (status incomplete), whose
    # tasks are the plan's (read_run_record lists them from the plan file when it can)
    planned_tasks: Optional[int] = None


def run_record_path(outputs_path) -> Path:
    """``out.npz`` → ``out.run.json``."""
    p = Path(outputs_path)
    return p.with_name(p.stem + ".run.json")


#: The fields of a task in a run record, in the order they are written.
TASK_FIELDS = tuple(TaskRun.model_fields)
#: Task fields holding strings (or None); the others hold numbers (or None).
_STRING_FIELDS = frozenset({"id", "kernel", "device", "site", "planned_device"})
#: Tasks encoded at a time when streaming a record's columns (bounds the text held at once).
ROWS_PER_CHUNK = 8192
#: One task of a streamed record, ``%`` formatted with its fields' JSON texts.
_ROW = "  {" + ", ".join(f'"{name}": %s' for name in TASK_FIELDS) + "}"


class _StringCodes(dict):
    """JSON text of strings (``null`` for None), remembered: kernels and devices repeat."""

    def __missing__(self, value):
        text = self[value] = "null" if value is None else encode_basestring(value)
        return text


def _number_texts(values: Sequence) -> list[str]:
    """JSON texts of numbers (``null`` for None, NaN and infinities, as pydantic writes them).

    One call of the C encoder for the whole list, cut at its separators (numbers and ``null``
    hold no ``", "``): a Python call per number cost more than the rest of the row.
    """
    if not values:
        return []
    values = list(values)
    distinct = set(values)
    if (len(distinct) * 4 <= len(values) and len(set(map(type, values))) == 1
            and not (0 in distinct and type(values[0]) is float)):
        # A column that repeats (estimates, attempts): each distinct number encoded once. One
        # type only: 1 and 1.0 are one key of a set, but "1" and "1.0" in JSON; and no float
        # zero, as 0.0 and -0.0 are one key too.
        keys = list(distinct)
        codes = dict(zip(keys, _number_texts(keys)))
        return list(map(codes.__getitem__, values))
    texts = json.dumps(values)[1:-1].split(", ")
    if "N" in "".join(texts) or "I" in "".join(texts):      # NaN, Infinity, -Infinity
        texts = ["null" if t in ("NaN", "Infinity", "-Infinity") else t for t in texts]
    return texts


def _encode_column(name: str, values: Sequence, codes: dict) -> list[str]:
    if name == "id":                       # unique: nothing to remember
        return list(map(encode_basestring, values))
    if name in _STRING_FIELDS:
        return list(map(codes[name].__getitem__, values))
    return _number_texts(values)


def write_run_record(record: RunRecord, path, task_columns: Optional[dict[str, Sequence]] = None) -> None:
    """Write ``record`` to ``path`` as JSON, atomically.

    With ``task_columns`` (:data:`TASK_FIELDS` -> one value per task; ``record.tasks`` empty),
    the tasks are streamed from the columns, a chunk at a time, one task per line (see the
    module docstring): the same document as a record whose ``tasks`` hold them.
    """
    path = Path(path)
    if task_columns is None:
        atomic_write_text(path, record.model_dump_json(indent=1) + "\n", what="run record")
        return
    if record.tasks:
        raise ValueError("a record streamed from task columns must have no tasks of its own")
    missing = [name for name in TASK_FIELDS if name not in task_columns]
    if missing:
        raise ValueError(f"task column {missing[0]!r} is missing")
    n = len(task_columns["id"])
    if any(len(task_columns[name]) != n for name in TASK_FIELDS):
        raise ValueError("the task columns differ in length")
    # indent=1: the top level's keys, and only they, start a line with one space; a string's
    # newline is escaped, so this text cannot occur inside a value.
    head, sep, tail = record.model_dump_json(indent=1).partition('\n "tasks": []')
    if not sep:
        raise AssertionError("the run record has no top-level tasks field")

    def write(f) -> None:
        f.write(head)
        f.write('\n "tasks": [' + ("\n" if n else ""))
        codes = {name: _StringCodes() for name in _STRING_FIELDS}
        for lo in range(0, n, ROWS_PER_CHUNK):
            hi = min(n, lo + ROWS_PER_CHUNK)
            encoded = [_encode_column(name, task_columns[name][lo:hi], codes) for name in TASK_FIELDS]
            f.write(",\n".join([_ROW % row for row in zip(*encoded)]))
            f.write(",\n" if hi < n else "\n")
        f.write((" ]" if n else "]") + tail + "\n")

    atomic_write(path, write, what="run record")


def read_run_record(path) -> RunRecord:
    path = Path(path)
    text = read_text_bounded(path, 1 << 30, what="run record")
    with gc_paused():                       # a large record is many new objects and no garbage
        return _record_of_text(path, text)


def _record_of_text(path: Path, text: str) -> RunRecord:
    try:
        data = loads_strict(text)
    except DuplicateKeyError as exc:
        raise duplicate_key_error(exc, path, what="run record") from None
    except json.JSONDecodeError as exc:
        raise StreamMapError(f"not valid JSON: {exc.msg}", path=path, line=exc.lineno, col=exc.colno) from None
    except (RecursionError, ValueError) as exc:          # nested too deeply; a 5000-digit number
        raise StreamMapError(f"not valid JSON: {exc or 'nested too deeply'}", path=path) from None
    try:
        record = RunRecord.model_validate(data)
    except pydantic.ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        raise StreamMapError(f"not a StreamMAP run record: {loc}: {err['msg']}", path=path) from None
    if record.planned_tasks and not record.tasks:
        record.tasks = planned_task_runs(record, path)
    return record


def planned_task_runs(record: RunRecord, record_path) -> list[TaskRun]:
    """The tasks of a record written when its run started (:attr:`RunRecord.planned_tasks`): the
    plan's, none measured; none when the plan file is gone, changed or unreadable (the record
    still says the run never ended: that is what it is for)."""
    plan_path = Path(record.plan)
    if not plan_path.is_absolute() and not plan_path.exists():     # the run's folder is not this one
        plan_path = Path(record_path).parent / plan_path
    try:
        if not record.plan_sha256 or sha256_file(plan_path) != record.plan_sha256:
            return []
        plan = read_plan(plan_path)
    except (OSError, StreamMapError):
        return []
    if len(plan.tasks) != record.planned_tasks:
        return []
    return [TaskRun(id=t.id, kernel=t.kernel, device=t.device, site=t.site, estimated_start=t.start,
                    estimated_finish=t.finish, share=t.share) for t in plan.tasks]
