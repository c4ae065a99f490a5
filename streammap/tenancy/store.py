"""The job service's durable state: one SQLite database (``jobs.db``) under the state folder.

Every change of a job's state is one committed transaction (WAL mode: readers never block the
writer, and a killed process loses no committed row), so the database *is* the queue: a service
that starts reads it back and finds queued jobs queued and running jobs running. Per job a folder
``jobs/<id>/`` holds its source, the job description its worker reads, the plan, the log, the
outputs and the worker's exit note.

States: ``queued`` -> ``running`` -> ``done`` | ``failed``; ``cancelled`` from either of the
first two. A running job whose worker is gone when the service starts, and that left no exit
note, goes back to ``queued`` (``attempts`` counts its starts).
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from pathlib import Path

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


class JobStore:
    """The jobs table; every method is one transaction, safe to call from any thread."""

    def __init__(self, state_dir):
        self.dir = Path(state_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "jobs").mkdir(exist_ok=True)
        self._db = sqlite3.connect(self.dir / "jobs.db", check_same_thread=False, isolation_level=None)
        self._db.row_factory = sqlite3.Row
        self._lock = threading.Lock()
        with self._lock:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(SCHEMA)

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
    if row is None:
        return None
    d = dict(row)
    d["params"] = json.loads(d["params"])
    d["demand"] = json.loads(d["demand"])
    g = d.pop("grant_")
    d["grant"] = json.loads(g) if g else None
    return d
