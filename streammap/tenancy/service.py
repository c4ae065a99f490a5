"""The job service: ``streammap serve --cluster cluster.yaml --tenants tenants.yaml --state DIR``.

State
-----
The SQLite job store (:mod:`.store`) is the truth; the :class:`~.admission.Scheduler` in memory is
rebuilt from it when the service starts. Each running job is a worker process
(:mod:`.worker`) in its own session, whose pid the store keeps.

Policy
------
One scheduler thread wakes on every submission, cancellation and worker exit (and every
``tick`` seconds): it reaps finished workers, asks the scheduler what to start (the policy of the
tenants file's cluster, ``streammap`` by default: gang admission, weighted DRF, priorities,
backfill, preemption where configured), and starts a worker for each: the job is compiled against
the sub-cluster of exactly the devices it was granted. Preempted jobs are stopped (SIGTERM to the
worker's process group) and queued again.

Restart: queued jobs are queued again in their order; a running job whose worker is still alive
(same pid, its command line naming the job's folder) is *found again* and keeps its devices; one
whose worker is gone is finished from its exit note, or, without one, queued again to re-run.

API (HTTP/JSON; stdlib ``ThreadingHTTPServer``: the service needs a handful of routes, no
framework). Every request carries ``Authorization: Bearer TOKEN``; the token names the tenant.
A tenant sees, cancels and fetches only its own jobs: another tenant's job is "not found".

``POST /jobs``                 submit ``{tenant, source_name, source_text, params, entry, priority, gpus}``
``GET /jobs[?all=1]``          the tenant's jobs (active ones unless ``all``)
``GET /jobs/ID``               one job
``POST /jobs/ID/cancel``       cancel it
``GET /jobs/ID/logs``          its log (text)
``GET /jobs/ID/result``        its outputs (``.npz`` bytes), once done
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

from streammap.cluster.model import load_cluster
from streammap.compiler import load_source_graph
from streammap.errors import StreamMapError
from streammap.io.files import atomic_write_text
from streammap.tenancy.admission import Job, Scheduler
from streammap.tenancy.estimate import Demand, Estimator, Option, sub_cluster_spec
from streammap.tenancy.store import ACTIVE, JobStore
from streammap.tenancy.tenants import load_tenants

log = logging.getLogger("streammap.tenancy")

#: Largest request body accepted (a program's source).
MAX_BODY = 8 << 20


class Refused(Exception):
    """A request the service answers with an HTTP error and a message."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


class JobService:
    """The service without its HTTP front: submit, list, cancel, and the scheduling loop.

    Parameters
    ----------
    cluster, tenants : path
        The cluster file and the tenants file.
    state_dir : path
        Where the job store and the job folders live.
    policy : str
        Admission policy (``streammap``, ``drf`` or ``fifo``).
    emulate : bool
        Run GPU plans on the CPU (a machine without the cluster's GPUs; tests).
    backend, address :
        ``local`` (one machine) or ``ray`` with the Ray address.
    mapper : str
        The mapper that re-maps each admitted job onto its granted devices.
    """

    def __init__(self, cluster, tenants, state_dir, *, policy: str = "streammap", emulate: bool = False,
                 backend: str = "local", address: str | None = None, mapper: str = "auto", tick: float = 1.0):
        self.cluster = load_cluster(cluster)
        self.tenants = load_tenants(tenants)
        if backend == "local" and len(self.cluster.spec.nodes) > 1:
            raise StreamMapError(f"cluster '{self.cluster.name}' has {len(self.cluster.spec.nodes)} nodes; the local "
                                 "executor runs one machine", path=cluster,
                                 hint="serve with --backend ray --address HEAD:6379 on a Ray cluster")
        self.store = JobStore(state_dir)
        self.estimator = Estimator(self.cluster, mapper="heft")
        self.scheduler = Scheduler(self.cluster, self.tenants, policy=policy)
        self.emulate, self.backend, self.address, self.mapper = emulate, backend, address, mapper
        self.tick = tick
        self._lock = threading.RLock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._procs: dict[str, subprocess.Popen | int] = {}
        self._thread: threading.Thread | None = None
        self.recover()

    # -- restart ----------------------------------------------------------------------------
    def recover(self) -> None:
        """Rebuild the scheduler from the store (see the module docstring)."""
        for row in self.store.list(states=ACTIVE):
            job = _job_of(row)
            if job.tenant not in self.tenants.by_name:
                self._kill_pid(row["id"], row["pid"])
                self.store.update(row["id"], state="failed", finished=time.time(), pid=None,
                                  error=f"tenant {job.tenant} is no longer in the tenants file")
                continue
            if row["state"] == "running":
                pid = row["pid"]
                g = row["grant"]
                known = all(d in self.scheduler.pool.model_of for d in g["devices"])
                if pid and known and _is_worker(pid, self.store.job_dir(row["id"])):
                    self.scheduler.restore(job, _option(g), g["devices"], row["started"] or time.time())
                    self._procs[row["id"]] = pid
                    log.warning("found running job %s again (pid %d)", row["id"], pid)
                    continue
                if not known:        # the cluster file changed under it: run it again on what exists
                    self._kill_pid(row["id"], pid)
                if self._finish_from_note(row["id"]):
                    continue
                self.store.update(row["id"], state="queued", pid=None, grant=None, started=None)
                log.warning("job %s lost its worker: queued to run again", row["id"])
            self.scheduler.submit(job)

    def _finish_from_note(self, job_id: str) -> bool:
        note = self.store.job_dir(job_id) / "exit.json"
        if not note.exists():
            return False
        status = json.loads(note.read_text())
        self.store.update(job_id, state=status["status"], finished=time.time(), pid=None, error=status.get("error"))
        return True

    # -- requests ----------------------------------------------------------------------------
    def submit(self, tenant: str, source_name: str, source_text: str, params: dict | None = None,
               entry: str | None = None, priority: int = 0, gpus: int | None = None) -> str:
        """Queue a program; returns its id. Raises :class:`Refused` for a program that cannot run."""
        name = Path(source_name or "").name
        if not name.endswith(".py"):
            raise Refused(400, f"{source_name!r}: the service runs programs (.py with # @stream directives); "
                               "a workflow has no kernels to run")
        params = {str(k): v for k, v in (params or {}).items()}
        quota = self.tenants.quota(tenant)

        def prepare(job_id, folder):
            atomic_write_text(folder / name, source_text, what="program")

        # Check and size the program in a scratch folder before it gets an id.
        scratch = self.store.dir / "incoming" / f"{os.getpid()}-{threading.get_ident()}"
        scratch.mkdir(parents=True, exist_ok=True)
        try:
            atomic_write_text(scratch / name, source_text, what="program")
            try:
                graph = load_source_graph(scratch / name, params, entry)
                key = ("program", hashlib.sha256(source_text.encode()).hexdigest(), name,
                       tuple(sorted((k, str(v)) for k, v in params.items())), entry)
                demand = self.estimator.demand(key, graph, gpus, max_gpus=quota.gpus)
            except StreamMapError as exc:
                raise Refused(400, exc.format().replace(str(scratch / name), name)) from None
        finally:
            for f in scratch.iterdir():
                f.unlink()
            scratch.rmdir()
        fits = [o for o in demand.options if self.scheduler.quota_allows(tenant, o, ever=True)]
        if not fits:
            raise Refused(400, f"the job needs {demand.gpus} device(s) of {', '.join(o.model for o in demand.options)}; "
                               f"tenant {tenant}'s quota can never grant that")
        with self._lock:
            job_id = self.store.add(tenant=tenant, priority=priority, source=name, params=params, entry=entry,
                                    gpus=gpus, demand=_demand_dict(demand), prepare=prepare)
            row = self.store.get(job_id)
            self.scheduler.submit(_job_of(row))
        self._wake.set()
        return job_id

    def jobs(self, tenant: str, all_states: bool = False) -> list[dict]:
        return [self.public(r) for r in self.store.list(tenant, None if all_states else ACTIVE)]

    def public(self, row: dict) -> dict:
        """What a tenant may see of its job, with the last pass's estimated start if it waits."""
        queued = row["state"] == "queued"
        return _public(row, self.scheduler.estimated_starts.get(row["id"]) if queued else None,
                       self.scheduler.start_intervals.get(row["id"]) if queued else None)

    def job(self, tenant: str, job_id: str) -> dict:
        row = self.store.get(job_id)
        if row is None or row["tenant"] != tenant:
            raise Refused(404, f"no job {job_id} of tenant {tenant}")
        return row

    def cancel(self, tenant: str, job_id: str) -> dict:
        with self._lock:
            row = self.job(tenant, job_id)
            if row["state"] not in ACTIVE:
                raise Refused(409, f"job {job_id} is already {row['state']}")
            if row["state"] == "running":
                self._kill(job_id)
            self.scheduler.cancel(job_id)
            self.store.update(job_id, state="cancelled", finished=time.time(), pid=None)
        self._wake.set()
        return self.public(self.store.get(job_id))

    def logs(self, tenant: str, job_id: str) -> str:
        self.job(tenant, job_id)
        path = self.store.job_dir(job_id) / "log.txt"
        return path.read_text(errors="replace") if path.exists() else ""

    def result(self, tenant: str, job_id: str) -> bytes:
        row = self.job(tenant, job_id)
        if row["state"] != "done":
            raise Refused(409, f"job {job_id} is {row['state']}: results exist once it is done"
                          + (f"\n{row['error']}" if row.get("error") else ""))
        return (self.store.job_dir(job_id) / "result.npz").read_bytes()

    # -- the scheduling loop ----------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="streammap-scheduler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop scheduling (running workers go on; a restarted service finds them again)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.store.close()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.step()
            except Exception:  # noqa: BLE001 - the loop must survive one bad job
                log.exception("scheduling step failed")
            self._wake.wait(self.tick)
            self._wake.clear()

    def step(self) -> None:
        """Reap finished workers, then start what the policy admits."""
        with self._lock:
            for job_id, proc in list(self._procs.items()):
                if _alive(proc, self.store.job_dir(job_id)):
                    continue
                del self._procs[job_id]
                if job_id in self.scheduler.running:
                    self.scheduler.finish(job_id)
                if not self._finish_from_note(job_id):
                    self.store.update(job_id, state="failed", finished=time.time(), pid=None,
                                      error="the worker exited without an exit note (killed?)")
            starts, preempted = self.scheduler.schedule(time.time())
            for job_id in preempted:
                self._kill(job_id)
                self.store.update(job_id, state="queued", pid=None, grant=None, started=None)
                log.warning("preempted job %s", job_id)
            for s in starts:
                self._launch(s)

    def _launch(self, start) -> None:
        row = self.store.get(start.job_id)
        folder = self.store.job_dir(start.job_id)
        devices = [self.cluster.devices[self.cluster.index[d]] for d in start.devices]
        (folder / "exit.json").unlink(missing_ok=True)
        job = {"source": row["source"], "params": row["params"], "entry": row["entry"], "mapper": self.mapper,
               "cluster": sub_cluster_spec(self.cluster, devices, name=f"{self.cluster.name}-{start.job_id}"),
               "emulate": self.emulate, "backend": self.backend, "address": self.address}
        atomic_write_text(folder / "job.json", json.dumps(job, indent=1), what="job description")
        with open(folder / "log.txt", "ab") as logf:
            proc = subprocess.Popen([sys.executable, "-m", "streammap.tenancy.worker", str(folder.resolve())],
                                    stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True, cwd=folder)
        self._procs[start.job_id] = proc
        o = start.option
        self.store.update(start.job_id, state="running", started=time.time(), pid=proc.pid,
                          attempts=row["attempts"] + 1,
                          grant={"model": o.model, "gpus": o.gpus, "duration": o.duration, "memory": o.memory,
                                 "devices": list(start.devices)})

    def _kill(self, job_id: str) -> None:
        proc = self._procs.pop(job_id, None)
        self._kill_pid(job_id, proc.pid if isinstance(proc, subprocess.Popen) else proc, proc)

    def _kill_pid(self, job_id: str, pid: int | None, proc=None) -> None:
        """Stop the worker of ``job_id`` (its whole process group), if ``pid`` is still it."""
        if pid and _is_worker(pid, self.store.job_dir(job_id)):
            try:
                os.killpg(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            if isinstance(proc, subprocess.Popen):
                try:
                    proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    os.killpg(pid, signal.SIGKILL)
                    proc.wait()


def _job_of(row: dict) -> Job:
    d = row["demand"]
    demand = Demand(gpus=d["gpus"], options=tuple(Option(**o) for o in d["options"]))
    return Job(id=row["id"], tenant=row["tenant"], arrival=row["submitted"], demand=demand,
               priority=row["priority"], seq=row["seq"])


def _option(g: dict) -> Option:
    return Option(model=g["model"], gpus=g["gpus"], duration=g["duration"], memory=g["memory"])


def _demand_dict(d: Demand) -> dict:
    return {"gpus": d.gpus, "options": [o.__dict__ for o in d.options]}


def _public(row: dict, planned: tuple[float, str] | None = None,
            interval: tuple[float, float] | None = None) -> dict:
    """What a tenant may see of its job; ``planned``: its reservation (start time, model), if any;
    ``interval``: the calibrated (earliest, latest) start around it (``streammap.tenancy.forecast``)."""
    keys = ("id", "tenant", "state", "priority", "submitted", "started", "finished", "source", "params", "entry",
            "attempts", "error")
    out = {k: row[k] for k in keys}
    out["gpus"] = row["demand"]["gpus"]
    out["estimates"] = {o["model"]: o["duration"] for o in row["demand"]["options"]}
    g = row.get("grant")
    out["devices"] = g["devices"] if g else None
    out["model"] = g["model"] if g else None
    out["estimated_start"], out["estimated_model"] = planned if planned else (None, None)
    out["estimated_start_interval"] = list(interval) if interval else None
    return out


def _is_worker(pid: int, folder: Path) -> bool:
    """Whether ``pid`` is alive and is the worker of the job in ``folder`` (not a reused pid)."""
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        try:
            os.kill(pid, 0)
        except OSError:
            return False
        return True     # no /proc (macOS): trust the pid
    return str(folder.resolve()).encode() in cmd


def _alive(proc, folder: Path) -> bool:
    if isinstance(proc, subprocess.Popen):
        return proc.poll() is None
    if not _is_worker(proc, folder):
        return False
    try:         # a zombie counts as gone
        with open(f"/proc/{proc}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


# -- HTTP ----------------------------------------------------------------------------------------

class _Handler(BaseHTTPRequestHandler):
    service: JobService = None      # set on a subclass per server
    server_version = "streammap-serve"

    def log_message(self, fmt, *args):     # requests are not worth a line each on stderr
        log.debug("%s " + fmt, self.address_string(), *args)

    def do_GET(self):
        self._handle("GET")

    def do_POST(self):
        self._handle("POST")

    def _handle(self, method: str) -> None:
        try:
            tenant = self._tenant()
            url = urlparse(self.path)
            parts = [p for p in url.path.split("/") if p]
            svc = self.service
            if parts == ["jobs"] and method == "GET":
                all_states = parse_qs(url.query).get("all", ["0"])[0] not in ("0", "")
                return self._json(200, {"jobs": svc.jobs(tenant, all_states)})
            if parts == ["jobs"] and method == "POST":
                body = self._body()
                if body.get("tenant", tenant) != tenant:
                    raise Refused(403, f"this token belongs to tenant {tenant}, not {body.get('tenant')}")
                job_id = svc.submit(tenant, body.get("source_name", ""), body.get("source_text", ""),
                                    body.get("params") or {}, body.get("entry"), int(body.get("priority") or 0),
                                    body.get("gpus"))
                return self._json(201, {"id": job_id})
            if len(parts) == 2 and parts[0] == "jobs" and method == "GET":
                return self._json(200, svc.public(svc.job(tenant, parts[1])))
            if len(parts) == 3 and parts[0] == "jobs" and method == "POST" and parts[2] == "cancel":
                return self._json(200, svc.cancel(tenant, parts[1]))
            if len(parts) == 3 and parts[0] == "jobs" and method == "GET" and parts[2] == "logs":
                return self._bytes(200, svc.logs(tenant, parts[1]).encode(), "text/plain; charset=utf-8")
            if len(parts) == 3 and parts[0] == "jobs" and method == "GET" and parts[2] == "result":
                return self._bytes(200, svc.result(tenant, parts[1]), "application/octet-stream")
            raise Refused(404, f"no such route: {method} {url.path}")
        except Refused as exc:
            self._json(exc.status, {"error": exc.message})
        except Exception as exc:  # noqa: BLE001 - a request must get an answer
            log.exception("request failed")
            self._json(500, {"error": f"internal error: {type(exc).__name__}: {exc}"})

    def _tenant(self) -> str:
        auth = self.headers.get("Authorization", "")
        if not auth.startswith("Bearer "):
            raise Refused(401, "missing token: send 'Authorization: Bearer TOKEN' (streammap --token or $STREAMMAP_TOKEN)")
        t = self.service.tenants.authenticate(auth[len("Bearer "):].strip())
        if t is None:
            raise Refused(401, "invalid token: it belongs to no tenant of this service")
        return t.name

    def _body(self) -> dict:
        n = int(self.headers.get("Content-Length") or 0)
        if n > MAX_BODY:
            raise Refused(413, f"request too large ({n} bytes; at most {MAX_BODY})")
        try:
            body = json.loads(self.rfile.read(n) or b"{}")
        except json.JSONDecodeError as exc:
            raise Refused(400, f"the request is not JSON: {exc}") from None
        if not isinstance(body, dict):
            raise Refused(400, "the request must be a JSON object")
        return body

    def _json(self, status: int, obj) -> None:
        self._bytes(status, json.dumps(obj).encode(), "application/json")

    def _bytes(self, status: int, data: bytes, ctype: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def make_server(service: JobService, host: str = "127.0.0.1", port: int = 8470) -> ThreadingHTTPServer:
    handler = type("Handler", (_Handler,), {"service": service})
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    return server


def serve(cluster, tenants, state_dir, *, host: str = "127.0.0.1", port: int = 8470, ready=None, **options) -> None:
    """Run the service until SIGTERM/SIGINT; writes ``STATE/server.json`` with its URL once listening."""
    service = JobService(cluster, tenants, state_dir, **options)
    server = make_server(service, host, port)
    url = f"http://{host}:{server.server_address[1]}"
    atomic_write_text(Path(state_dir) / "server.json", json.dumps({"url": url, "pid": os.getpid()}),
                      what="server note")
    service.start()
    if ready is not None:
        ready(url)

    def _stop(signum, frame):
        threading.Thread(target=server.shutdown, daemon=True).start()
    signal.signal(signal.SIGTERM, _stop)
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        service.stop()
