"""The job service's durable state: one SQLite database (``jobs.db``) under the state folder.

Every change of a job's state is one committed transaction (WAL mode: readers never block the
writer, and a killed process loses no committed row), so the database *is* the queue: a service
that starts reads it back and finds queued jobs queued and running jobs running. Per job a folder
``jobs/<id>/`` holds its source (and the program's local modules at their paths beside it:
``helpers.py``, ``mypkg/util.py``; the job's own copies, so no job imports another's), the job
description its worker reads, the plan, the log, the outputs and the worker's exit note.

States: ``queued`` -> ``running`` -> ``done`` | ``failed``; ``cancelled`` from either of the
first two. A running job whose worker is gone when the service starts, and that left no exit
note, goes back to ``queued`` (``attempts`` counts its starts).

Files. The state folder is the service's alone: it is made (or made again) ``0700``, and
``jobs.db`` and its WAL files ``0600``; the service runs with umask ``077``, so whatever it and its
workers write there (sources, plans, logs, results) is readable by its user only. ``incoming/``
is the scratch of programs being checked; what a killed service left there is removed at start.

Damage. A row whose JSON columns do not parse (a hand-edited or damaged database) is still
listed, with ``damaged`` saying what is wrong and empty values in place of the bad ones, so one
bad row fails its own job (see the service's recovery) and never the listing of all the others.
A ``jobs.db`` that is not a database at all is a :class:`StateError` naming the file. Params
holding NaN or an infinity (stored by a service that accepted them; they cannot be written as
JSON again, so the tenant's every listing failed) are damage too: ``params`` is then empty and
``damaged`` names the param (:func:`nonfinite_param`).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import sqlite3
import threading
import time
from pathlib import Path

from streammap.errors import StreamMapError

SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,
    id         TEXT UNIQUE NOT NULL,
    tenant     TEXT NOT NULL,
    state      TEXT NOT NULL,
    priority   INTEGER NOT NULL DEFAULT 0,
    submitted  REAL NOT NULL,
    started    REAL,
    finished   REAL,
    source     TEXT NOT NULL,          -- file name inside the job folder
    params     TEXT NOT NULL,          -- JSON
    entry      TEXT,
    gpus       INTEGER,                -- stated gang width, or NULL
    demand     TEXT NOT NULL,          -- JSON: {gpus, options: [{model, gpus, duration, memory}]}
    grant_     TEXT,                   -- JSON: {model, gpus, duration, memory, devices}
    pid        INTEGER,
    attempts   INTEGER NOT NULL DEFAULT 0,
    error      TEXT
);
CREATE INDEX IF NOT EXISTS jobs_state ON jobs(state);
CREATE INDEX IF NOT EXISTS jobs_tenant ON jobs(tenant);
"""

ACTIVE = ("queued", "running")
FINAL = ("done", "failed", "cancelled")


class StateError(StreamMapError):
    """The state folder cannot be used (not a folder, not writable, a damaged database)."""


class JobStore:
    """The jobs table; every method is one transaction, safe to call from any thread."""

    def __init__(self, state_dir):
        self.dir = Path(state_dir)
        db_path = self.dir / "jobs.db"
        try:
            self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            os.chmod(self.dir, 0o700)
            (self.dir / "jobs").mkdir(mode=0o700, exist_ok=True)
            self.clear_incoming()
            self._db = sqlite3.connect(db_path, check_same_thread=False, isolation_level=None)
        except OSError as exc:
            raise StateError(f"cannot use the state folder: {exc.strerror or exc}", path=self.dir,
                             hint="give --state a folder this user may create and write") from None
        self._db.row_factory = sqlite3.Row
        self._lock = threading.Lock()
        try:
            with self._lock:
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute("PRAGMA synchronous=NORMAL")
                self._db.executescript(SCHEMA)
        except sqlite3.DatabaseError as exc:
            self._db.close()
            raise StateError(f"the job store is damaged: {exc}", path=db_path,
                             hint="move it aside to start with an empty queue, or restore it from a backup") from None
        for f in (db_path, db_path.with_name("jobs.db-wal"), db_path.with_name("jobs.db-shm")):
            if f.exists():
                os.chmod(f, 0o600)

    @property
    def incoming(self) -> Path:
        """Scratch folder of the programs being checked (one sub-folder per check)."""
        return self.dir / "incoming"

    def clear_incoming(self) -> None:
        """Remove what checks of a killed service left behind, and make the scratch folder anew."""
        if self.incoming.is_dir() and not self.incoming.is_symlink():
            shutil.rmtree(self.incoming, ignore_errors=True)
        elif self.incoming.exists() or self.incoming.is_symlink():
            self.incoming.unlink()
        self.incoming.mkdir(mode=0o700, exist_ok=True)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def job_dir(self, job_id: str) -> Path:
        return self.dir / "jobs" / job_id

    def add(self, *, tenant: str, priority: int, source: str, params: dict, entry, gpus, demand: dict,
            prepare=None) -> str:
        """Insert a queued job; ``prepare(job_id, folder)`` fills its folder first. Returns the id."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                seq = self._db.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM jobs").fetchone()[0]
                job_id = f"job-{seq}"
                folder = self.job_dir(job_id)
                folder.mkdir(parents=True, exist_ok=True)
                if prepare is not None:
                    prepare(job_id, folder)
                self._db.execute(
                    "INSERT INTO jobs (seq, id, tenant, state, priority, submitted, source, params, entry, gpus, demand) "
                    "VALUES (?, ?, ?, 'queued', ?, ?, ?, ?, ?, ?, ?)",
                    (seq, job_id, tenant, priority, time.time(), source, json.dumps(params), entry, gpus,
                     json.dumps(demand)))
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        return job_id

    def get(self, job_id: str) -> dict | None:
        with self._lock:
            row = self._db.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return _row(row)

    def list(self, tenant: str | None = None, states=None) -> list[dict]:
        q, args = "SELECT * FROM jobs", []
        where = []
        if tenant is not None:
            where.append("tenant = ?")
            args.append(tenant)
        if states:
            where.append(f"state IN ({','.join('?' * len(states))})")
            args += list(states)
        if where:
            q += " WHERE " + " AND ".join(where)
        with self._lock:
            rows = self._db.execute(q + " ORDER BY seq", args).fetchall()
        return [_row(r) for r in rows]

    def update(self, job_id: str, **fields) -> None:
        if "grant" in fields:
            g = fields.pop("grant")
            fields["grant_"] = None if g is None else json.dumps(g)
        cols = ", ".join(f"{k} = ?" for k in fields)
        with self._lock:
            self._db.execute(f"UPDATE jobs SET {cols} WHERE id = ?", (*fields.values(), job_id))


def _row(row) -> dict | None:
    """A row as a dict with its JSON columns parsed; ``damaged`` names the columns that did not."""
    if row is None:
        return None
    d = dict(row)
    d["grant"] = d.pop("grant_")
    damaged = []
    for col, empty, kind in (("params", {}, dict), ("demand", None, dict), ("grant", None, dict)):
        raw = d[col]
        if raw is None or raw == "":
            d[col] = empty if col != "grant" else None
            if col == "demand":
                damaged.append(col)
            continue
        try:
            value = json.loads(raw)
        except (TypeError, ValueError, RecursionError):
            value = None
        if not isinstance(value, kind):
            damaged.append(col)
            value = empty
        elif col == "params" and (bad := nonfinite_param(value)) is not None:
            damaged.append(f"params: param {bad[0]!r} is {bad[1]}, not a finite number")
            value = empty
        d[col] = value
    d["damaged"] = ", ".join(damaged) or None
    return d


def nonfinite_param(params: dict) -> tuple[str, float] | None:
    """``(name, value)`` of the first param of ``params`` that holds NaN or an infinity (inside a
    list or a dict too), or ``None`` when every number is finite."""
    for name, value in params.items():
        bad = _nonfinite(value)
        if bad is not None:
            return str(name), bad
    return None


def _nonfinite(value) -> float | None:
    if isinstance(value, float):
        return None if math.isfinite(value) else value
    items = value.values() if isinstance(value, dict) else value if isinstance(value, (list, tuple)) else ()
    for item in items:
        bad = _nonfinite(item)
        if bad is not None:
            return bad
    return None
