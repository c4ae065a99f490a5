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
worker's process group, SIGKILL after ``KILL_GRACE`` seconds) and queued again.

Containment: a worker is started by the sandbox launcher (:mod:`.sandbox`), which runs it in
namespaces of its own (``isolation="namespaces"``: it sees its own folder and program, nothing of
the state folder, the tenants file or other jobs) under the job's limits (the tenant's, else the
service's defaults). A job past its wall-time limit is stopped and failed; a worker that ends
without an exit note is failed with what the launcher's exit status says (the signal, the limit it hit).
Without namespaces on the machine, a service of more than one tenant refuses to start unless
``isolation="none"`` says to go on without.

Submission checks and sizes the program in a child process under time and memory limits
(:mod:`.check`), so a program built to freeze the compiler costs its submitter a refusal and the
service nothing; at most a few checks run at once. A param that is NaN or an infinity is refused
first, naming it (it would pass the program's own checks, and a stored one cannot be written as
JSON again); a job an older service stored with one is failed at restart (see :mod:`.store`).

Restart: queued jobs are queued again in their order; a running job whose worker is still alive
(same pid, its command line naming the job's folder) is *found again* and keeps its devices; one
whose worker is gone is finished from its exit note, or, without one, queued again to re-run.
Recovery never stops the service: whatever is wrong with one job's row or folder (an exit note
that is not a note, a missing folder, a damaged row) fails that job with a message saying what,
and the others go on. A worker that exits leaving a note that is not one fails its job at the next
reaping, like a worker that left none.

Multi-file programs: a program that imports modules of its own folder (``import helpers``,
``from mypkg import util``) is submitted with them (``modules``: path relative to the program's
folder -> text; the client finds them as the compiler does, :mod:`streammap.directives.imports`).
Each path is a relative ``.py`` path of identifiers (:data:`streammap.plan.MODULE_PATH`: no
``..``, no absolute path), at most :data:`MAX_MODULES` of them; their text is bounded by the
request's size, like the program's. They are checked with the program (a module that does not
parse is refused, naming its line) and kept in the job's own folder at their paths, beside the
program, so the worker's compile records them and its run imports them from there: a job never
sees another job's modules.

Files: the service runs with umask 077 (its state folder is 0700, ``jobs.db`` 0600), so no other
user reads jobs, results, logs or the store; see :mod:`.store`.

API (HTTP/JSON, served by uvicorn; limits, timeouts and error answers are :mod:`.api`'s). Every
request carries ``Authorization: Bearer TOKEN``; the token names the tenant.
A tenant sees, cancels and fetches only its own jobs: another tenant's job is "not found".

``POST /jobs``                 submit ``{tenant, source_name, source_text, modules, params, entry, priority, gpus}``
                               (``modules``: the program's local modules, ``{path: text}``, see below)
``GET /jobs[?all=1]``          the tenant's jobs (active ones unless ``all``)
``GET /jobs/ID``               one job
``POST /jobs/ID/cancel``       cancel it
``GET /jobs/ID/logs``          its log (text)
``GET /jobs/ID/result``        its outputs (``.npz`` bytes), once done
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import re
import resource
import shutil
import signal
import stat
import subprocess
import threading
import time
from pathlib import Path
from typing import BinaryIO

from streammap.compiler import resolve_cluster
from streammap.directives.imports import MAX_LOCAL_MODULES
from streammap.errors import StreamMapError
from streammap.io.files import atomic_write_text
from streammap.plan import MODULE_PATH
from streammap.tenancy import sandbox
from streammap.tenancy.admission import Job, Scheduler
from streammap.tenancy.api import HttpLimits, Refused, listen, make_server
from streammap.tenancy.check import Checker, CheckLimits, CheckRefused
from streammap.tenancy.estimate import WIDTHS, Demand, Estimator, Option, accelerator_pools, sub_cluster_spec
from streammap.tenancy.store import ACTIVE, JobStore, StateError, nonfinite_param
from streammap.tenancy.tenants import limits_from, load_tenants

log = logging.getLogger("streammap.tenancy")

__all__ = ["JobService", "Refused", "serve"]

#: The error of a job whose worker left an exit note that is not one (a job can write its own folder).
GARBAGE_NOTE = ('the worker exited leaving an exit note that is not one (exit.json is not '
                '{"status": "done" | "failed", "error": ...}): the job is failed')

#: Seconds a stopped worker has between SIGTERM and SIGKILL.
KILL_GRACE = 5.0

#: Largest exit note read (a worker's is a few hundred bytes; a bigger one is not a note).
MAX_NOTE = 1 << 20
#: What a kept program's file name looks like.
PROGRAM_NAME = re.compile(r"^[\w.\-]{1,200}\.py$")
#: Most local modules one job may bring (the compiler's own bound).
MAX_MODULES = MAX_LOCAL_MODULES

class JobService:
    """The service without its HTTP front: submit, list, cancel, and the scheduling loop.

    Parameters
    ----------
    cluster, tenants : path
        The cluster file (or ``"local"``: discover this machine now, as ``compile --cluster local``
        does) and the tenants file. A cluster without accelerators is refused before the state
        folder is touched (``"local"`` on a CPU-only machine: serve a cluster file's GPUs emulated).
    state_dir : path
        Where the job store and the job folders live.
    policy : str
        Admission policy (``streammap``, ``drf`` or ``fifo``).
    emulate : bool
        Run GPU plans on the CPU (a machine without the cluster's GPUs; tests). Emulated, a
        cluster of several nodes is served by the local backend too, as ``run --emulate`` runs it.
    backend, address :
        ``local`` (one machine) or ``ray`` with the Ray address.
    mapper : str
        The mapper that re-maps each admitted job onto its granted devices.
    isolation : str
        ``auto`` (namespaces where the machine has them; without them, a service of more than one
        tenant refuses to start), ``namespaces`` (required) or ``none`` (jobs see what the
        service sees: for one trusted tenant, or knowingly). See :mod:`.sandbox`.
    limits : dict or Limits
        Default per-job limits (``memory``, ``cpu_time``, ``wall_time``) for tenants whose
        ``limits`` do not say.
    check : CheckLimits
        Time, memory and concurrency limits of checking submitted programs (:mod:`.check`).
    """

    def __init__(self, cluster, tenants, state_dir, *, policy: str = "streammap", emulate: bool = False,
                 backend: str = "local", address: str | None = None, mapper: str = "auto", tick: float = 1.0,
                 isolation: str = "auto", limits=None, check: CheckLimits | None = None):
        self.cluster = resolve_cluster(cluster)      # a cluster file, or "local": discover this machine now
        if not accelerator_pools(self.cluster):       # refused before the state folder is touched
            raise _nothing_to_grant(cluster, self.cluster)
        self.tenants = load_tenants(tenants)
        _warn_plain_tokens(self.tenants, tenants)
        self.tenants_file = Path(tenants).resolve()
        self.isolation = _choose_isolation(isolation, len(self.tenants), backend)
        self.limits = limits_from(limits)
        # Emulated, every node's devices are threads of this machine, as `streammap run --emulate` runs them.
        if backend == "local" and not emulate and len(self.cluster.spec.nodes) > 1:
            raise StreamMapError(f"cluster '{self.cluster.name}' has {len(self.cluster.spec.nodes)} nodes; the local "
                                 "executor runs one machine", path=cluster,
                                 hint="serve with --backend ray --address HEAD:6379 on a Ray cluster, "
                                      "or with --emulate to run every node's devices emulated on this machine")
        self.store = JobStore(state_dir)
        self.estimator = Estimator(self.cluster, mapper="heft")    # refuses a cluster without accelerators
        self.checker = Checker(self.cluster, self.store.incoming, check)
        self.scheduler = Scheduler(self.cluster, self.tenants, policy=policy)
        self.emulate, self.backend, self.address, self.mapper = emulate, backend, address, mapper
        self.tick = tick
        self._lock = threading.RLock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._procs: dict[str, subprocess.Popen | int] = {}
        self._deadlines: dict[str, float | None] = {}      # job -> end of its wall time (None: no limit)
        self._thread: threading.Thread | None = None
        self.recover()

    # -- restart ----------------------------------------------------------------------------
    def recover(self) -> None:
        """Rebuild the scheduler from the store (see the module docstring).

        Each job is recovered on its own: whatever goes wrong with one fails that job only.
        """
        for row in self.store.list(states=ACTIVE):
            try:
                self._recover_job(row)
            except Exception as exc:  # noqa: BLE001 - one damaged job must not stop the service
                log.exception("job %s could not be recovered", row["id"])
                self._fail(row["id"], f"the service could not recover this job after a restart "
                                      f"({type(exc).__name__}): it was failed")

    def _recover_job(self, row: dict) -> None:
        if row["damaged"]:
            self._fail(row["id"], f"this job's record in jobs.db is damaged ({row['damaged']}): it was failed")
            return
        job = _job_of(row)
        pid = row["pid"] if isinstance(row["pid"], int) and row["pid"] > 0 else None
        if job.tenant not in self.tenants.by_name:
            self._kill_pid(row["id"], pid)
            self._fail(row["id"], f"tenant {job.tenant} is no longer in the tenants file")
            return
        folder = self.store.job_dir(row["id"])
        if not (folder / row["source"]).is_file():
            self._kill_pid(row["id"], pid)
            self._fail(row["id"], "this job's program is gone from the state folder: it was failed")
            return
        if row["state"] == "running":
            g = row["grant"] or {}
            devices = g.get("devices")
            known = isinstance(devices, list) and all(d in self.scheduler.pool.model_of for d in devices)
            if pid and known and _is_worker(pid, folder):
                self.scheduler.restore(job, _option(g), devices, row["started"] or time.time())
                self._procs[row["id"]] = pid
                log.warning("found running job %s again (pid %d)", row["id"], pid)
                return
            if not known:        # the cluster file changed under it: run it again on what exists
                self._kill_pid(row["id"], pid)
            if self._finish_from_note(row["id"]):
                return
            self.store.update(row["id"], state="queued", pid=None, grant=None, started=None)
            log.warning("job %s lost its worker: queued to run again", row["id"])
        self.scheduler.submit(job)

    def _fail(self, job_id: str, error: str) -> None:
        self.store.update(job_id, state="failed", finished=time.time(), pid=None, error=error)

    def _finish_from_note(self, job_id: str, limits: dict | None = None) -> bool:
        """Finish a job whose worker is gone from its exit note; ``False`` if it left none.

        A note that is not one (unreadable, not JSON, not ``{"status": "done"|"failed"}``) fails
        the job: its worker ended, and what it said about how cannot be trusted. A failure under a
        memory limit (``limits``, the job's own) that ran out of memory says so first.
        """
        note = self.store.job_dir(job_id) / "exit.json"
        if not (note.exists() or note.is_symlink()):
            return False
        status = _read_note(note)
        if status is None:
            self._fail(job_id, GARBAGE_NOTE)
            return True
        error = status["error"]
        if status["status"] == "failed" and error is not None:
            error = sandbox.out_of_memory(error, limits)
        self.store.update(job_id, state=status["status"], finished=time.time(), pid=None, error=error)
        return True

    # -- requests ----------------------------------------------------------------------------
    def submit(self, tenant: str, source_name: str, source_text: str, params: dict | None = None,
               entry: str | None = None, priority: int = 0, gpus: int | None = None,
               modules: dict[str, str] | None = None, share: float | None = None) -> str:
        """Queue a program; returns its id. Raises :class:`Refused` for a program that cannot run.

        The program is checked and sized in a child process (:class:`~.check.Checker`) before it
        gets an id: a program that does not compile, or whose check runs past its limits, is
        refused with a message saying so. ``modules`` are its local modules, ``{path relative to
        the program's folder: text}`` (see the module docstring). ``share`` is the fraction of
        one GPU the job needs (joint placement, :mod:`.packing`; default: its ``share`` clauses).
        """
        name = Path(source_name or "").name
        if not name.endswith(".py"):
            raise Refused(400, f"{source_name[:200]!r}: the service runs programs (.py with # @stream directives); "
                               "a workflow has no kernels to run")
        if not PROGRAM_NAME.match(name):
            raise Refused(400, f"{name[:200]!r}: a program's name may hold letters, digits, '_', '-' and '.' only")
        _refuse_shadowing(name, "the program")
        modules = _checked_modules(name, modules or {})
        params = {str(k): v for k, v in (params or {}).items()}
        if (bad := nonfinite_param(params)) is not None:
            # Refused before anything is stored: NaN would pass the program's checks, and a stored
            # NaN cannot be written as JSON again (see the store).
            raise Refused(400, f"param {bad[0][:200]!r} is {bad[1]}, not a finite number: a job's params are "
                               "finite numbers, strings, bools or null")
        quota = self.tenants.quota(tenant)

        def prepare(job_id, folder):
            atomic_write_text(folder / name, source_text, what="program")
            for rel, text in modules.items():         # beside the program, as in its own folder
                (folder / rel).parent.mkdir(parents=True, exist_ok=True)
                atomic_write_text(folder / rel, text, what="module")

        key = ("program", _digest(source_text), name, tuple((rel, _digest(t)) for rel, t in modules.items()),
               tuple(sorted((k, str(v)) for k, v in params.items())), entry)
        def check(width):
            try:
                return self.checker.demand(key, name, source_text, params, entry, width, quota.gpus,
                                           modules=modules, share=share)
            except CheckRefused as exc:
                raise Refused(exc.status, exc.message, {"Retry-After": "2"} if exc.status == 503 else None) from None

        demand = check(gpus)
        if gpus is None:
            # The width was ours to choose: narrower, as far as the quota needs (a per-model cap or a
            # memory quota can refuse the width the estimate chose within quota.gpus).
            for width in sorted((w for w in WIDTHS if w < demand.gpus), reverse=True):   # (a fraction: width 1)
                if self._quota_fits(tenant, demand):
                    break
                try:
                    demand = check(width)
                except Refused as exc:
                    if exc.status != 400:      # busy: say so; 400: it cannot run this narrow
                        raise
                    break
        if not self._quota_fits(tenant, demand):
            raise Refused(400, self._quota_refusal(tenant, demand, gpus))
        with self._lock:
            job_id = self.store.add(tenant=tenant, priority=priority, source=name, params=params, entry=entry,
                                    gpus=gpus, demand=demand.as_dict(), prepare=prepare)
            row = self.store.get(job_id)
            self.scheduler.submit(_job_of(row))
        self._wake.set()
        return job_id

    def _quota_fits(self, tenant: str, demand: Demand) -> bool:
        return any(self.scheduler.quota_allows(tenant, o, ever=True) for o in demand.options)

    def _quota_refusal(self, tenant: str, demand: Demand, asked: int | None) -> str:
        """Why ``tenant``'s quota can never run ``demand``, and which ``--gpus`` it would accept."""
        models = [o.model for o in demand.options]
        head = (f"the job asks for {asked} device(s)" if asked is not None else
                f"the job needs {demand.gpus} device(s)") + f" of {', '.join(models)}; tenant {tenant}'s quota can never grant that"
        widest = max((k for m in models for k in range(1, self.scheduler.pool.size.get(m, 0) + 1)
                      if self.scheduler.quota_allows(tenant, Option(model=m, gpus=k, duration=0.0, memory=0.0),
                                                     ever=True)), default=0)
        if widest and widest < demand.gpus:
            return head + f"; it grants at most {widest}: submit with --gpus {widest} (a narrower gang, slower)"
        return head + f"; it grants no device of {', '.join(models)}: ask the service's operator for a quota"

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
        with self.open_log(tenant, job_id) as f:
            return f.read().decode(errors="replace")

    def open_log(self, tenant: str, job_id: str) -> BinaryIO:
        """The job's log, open for reading (empty before it has one): see :func:`_open_plain`."""
        self.job(tenant, job_id)
        return _open_plain(self.store.job_dir(job_id) / "log.txt") or io.BytesIO()

    def result(self, tenant: str, job_id: str) -> bytes:
        with self.open_result(tenant, job_id) as f:
            return f.read()

    def open_result(self, tenant: str, job_id: str) -> BinaryIO:
        """The job's outputs (``.npz``), open for reading; refused until it is done."""
        row = self.job(tenant, job_id)
        if row["state"] != "done":
            raise Refused(409, f"job {job_id} is {row['state']}: results exist once it is done"
                          + (f"\n{row['error']}" if row.get("error") else ""))
        f = _open_plain(self.store.job_dir(job_id) / "result.npz")
        if f is None:
            raise Refused(410, f"job {job_id} is done but its outputs are gone from the service")
        return f

    # -- the scheduling loop ----------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="streammap-scheduler", daemon=True)
        self._thread.start()
        # The checker's forkserver imports the compiler (seconds): start it now, not on the first submission.
        threading.Thread(target=self.checker.warm_up, name="streammap-checker-warm-up", daemon=True).start()

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
                    if time.time() > (self._deadline(job_id) or float("inf")):
                        self._stop_past_wall_time(job_id)
                    continue
                del self._procs[job_id]
                try:
                    self._reap(job_id, proc)
                except Exception as exc:  # noqa: BLE001 - one job's damage must not stop the others' reaping
                    log.exception("reaping job %s failed", job_id)
                    self._fail(job_id, f"the service could not read how this job ended ({type(exc).__name__})")
            starts, preempted = self.scheduler.schedule(time.time())
            for job_id in preempted:
                self._kill(job_id)
                self.store.update(job_id, state="queued", pid=None, grant=None, started=None)
                log.warning("preempted job %s", job_id)
            for s in starts:
                self._launch(s)

    def health(self) -> dict:
        """The service's own state, for a status or health answer: isolation, default limits, counts."""
        rows = self.store.list(states=ACTIVE)
        return {"isolation": self.isolation, "limits": self.limits.as_dict(), "tenants": len(self.tenants),
                "running": sum(r["state"] == "running" for r in rows), "queued": sum(r["state"] == "queued" for r in rows)}

    def _launch(self, start) -> None:
        row = self.store.get(start.job_id)
        folder = self.store.job_dir(start.job_id)
        devices = [self.cluster.devices[self.cluster.index[d]] for d in start.devices]
        (folder / "exit.json").unlink(missing_ok=True)
        job = {"source": row["source"], "params": row["params"], "entry": row["entry"], "mapper": self.mapper,
               "cluster": sub_cluster_spec(self.cluster, devices, name=f"{self.cluster.name}-{start.job_id}"),
               "emulate": self.emulate, "backend": self.backend, "address": self.address}
        if start.option.share < 1.0:
            job["share"] = start.option.share   # joint placement: the worker holds the job to its fraction
        atomic_write_text(folder / "job.json", json.dumps(job, indent=1), what="job description")
        limits = self.tenants.limits(row["tenant"], self.limits).as_dict()
        policy = sandbox.policy(self.isolation, state_dir=self.store.dir, tenants_file=self.tenants_file,
                                limits=limits)
        with _open_log(folder / "log.txt") as logf:
            proc = subprocess.Popen(sandbox.command(folder, policy), stdout=logf, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True, cwd=folder)
        self._procs[start.job_id] = proc
        started = time.time()
        self._deadlines[start.job_id] = started + limits["wall_time"] if limits["wall_time"] else None
        o = start.option
        self.store.update(start.job_id, state="running", started=started, pid=proc.pid,
                          attempts=row["attempts"] + 1,
                          grant={"model": o.model, "gpus": o.gpus, "duration": o.duration, "memory": o.memory,
                                 "share": o.share, "devices": list(start.devices), "isolation": self.isolation,
                                 "limits": limits})

    def _deadline(self, job_id: str) -> float | None:
        """When the running ``job_id`` passes its wall time (from the store for a job found again)."""
        if job_id not in self._deadlines:
            row = self.store.get(job_id)
            wall = ((row.get("grant") or {}).get("limits") or {}).get("wall_time")
            self._deadlines[job_id] = row["started"] + wall if wall and row["started"] else None
        return self._deadlines[job_id]

    def _stop_past_wall_time(self, job_id: str) -> None:
        limits = self.store.get(job_id)["grant"]["limits"]
        self._kill(job_id)
        if job_id in self.scheduler.running:
            self.scheduler.finish(job_id)
        self.store.update(job_id, state="failed", finished=time.time(), pid=None,
                          error=sandbox.wall_time_exceeded(limits))
        log.warning("job %s passed its wall-time limit: stopped", job_id)

    def _reap(self, job_id: str, proc) -> None:
        """Finish a job whose worker ended: from its exit note, else from how its process ended."""
        self._deadlines.pop(job_id, None)
        ran = self.scheduler.finish(job_id) if job_id in self.scheduler.running else None
        limits = (self.store.get(job_id).get("grant") or {}).get("limits")
        if self._finish_from_note(job_id, limits):
            if ran is not None and self.store.get(job_id)["state"] == "done":
                # A run that ended on its own, done: its length teaches the estimate correction.
                self.scheduler.correction.observe(ran.job.tenant, ran.option.duration, time.time() - ran.start)
            return
        returncode = proc.returncode if isinstance(proc, subprocess.Popen) else None
        self.store.update(job_id, state="failed", finished=time.time(), pid=None,
                          error=sandbox.ending(returncode, limits))

    def _kill(self, job_id: str) -> None:
        proc = self._procs.pop(job_id, None)
        self._deadlines.pop(job_id, None)
        self._kill_pid(job_id, proc.pid if isinstance(proc, subprocess.Popen) else proc, proc)

    def _kill_pid(self, job_id: str, pid: int | None, proc=None) -> None:
        """Stop the job of ``job_id`` (its launcher's whole process group), if ``pid`` is still its launcher.

        SIGTERM first; SIGKILL to the group after :data:`KILL_GRACE` seconds. In a pid namespace,
        the job's init ending takes every process of the job with it.
        """
        folder = self.store.job_dir(job_id)
        if not pid or not _is_worker(pid, folder):
            return
        _signal_group(pid, signal.SIGTERM)
        if not _wait_gone(proc if isinstance(proc, subprocess.Popen) else pid, folder, KILL_GRACE):
            _signal_group(pid, signal.SIGKILL)
            _wait_gone(proc if isinstance(proc, subprocess.Popen) else pid, folder, KILL_GRACE)


def _nothing_to_grant(asked, cluster) -> StreamMapError:
    """The error of a cluster without accelerators: the service grants GPUs (or MLUs, DCUs...), so
    a CPU-only machine (``--cluster local`` there) is served by emulating the GPUs of a cluster
    file, as ``streammap run --emulate`` runs a GPU plan on the CPU."""
    emulate = ("to serve jobs on this machine's CPU, emulate the GPUs of a cluster file: streammap serve "
               "--cluster cluster.yaml --emulate ... (a cluster file lists the GPUs to emulate, see 'Cluster "
               "files' in the README; e.g. ../shared/benchmarks/clusters/hetero-2x4.yaml, 8 GPUs)")
    if str(asked) == "local":
        return StreamMapError("--cluster local found no GPU (or other accelerator) on this machine, only its CPU: "
                              "the job service grants accelerators to jobs", hint=emulate)
    return StreamMapError(f"cluster '{cluster.name}' has no accelerator (non-CPU) devices to grant", path=cluster.path,
                          hint="the job service grants GPUs (or MLUs, DCUs...) to jobs: list them in the cluster "
                               "file (with --emulate they run on this machine's CPU)")


def _choose_isolation(isolation: str, tenants: int, backend: str) -> str:
    """The isolation the service runs its jobs with; refuses what it cannot give (see ``JobService``)."""
    if isolation not in ("auto", *sandbox.ISOLATIONS):
        raise StreamMapError(f"isolation {isolation!r}: choose auto, namespaces or none")
    if isolation == "none":
        log.warning("jobs run without isolation: each sees what the service sees (--no-isolation)")
        return "none"
    ok, why = sandbox.available()
    if backend == "ray":     # see sandbox's docstring: Ray's workers run the kernels, outside any sandbox
        ok, why = False, "with --backend ray, a job's kernels run in Ray's workers, outside the service's sandbox"
    if ok:
        return "namespaces"
    if isolation == "namespaces" or tenants > 1:
        fix = ("give tenants who must not meet separate Ray clusters and services" if backend == "ray" else
               "run on Linux >= 5.12 with unprivileged user namespaces (sysctl user.max_user_namespaces > 0, "
               "kernel.unprivileged_userns_clone=1)")
        raise StreamMapError(
            f"jobs cannot be contained ({why}); with {tenants} tenant(s), one tenant's job could read the "
            "tenants file (every token), the job database and the other tenants' jobs",
            hint=f"{fix}, or serve knowingly without isolation: --no-isolation")
    log.warning("jobs run without isolation (%s); one tenant, so the service starts", why)
    return "none"


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _wait_gone(proc, folder: Path, timeout: float) -> bool:
    """Wait up to ``timeout`` s for a worker (a ``Popen``, or the pid of one found again) to end."""
    if isinstance(proc, subprocess.Popen):
        try:
            proc.wait(timeout=timeout)
            return True
        except subprocess.TimeoutExpired:
            return False
    deadline = time.time() + timeout
    while _alive(proc, folder):
        if time.time() > deadline:
            return False
        time.sleep(0.05)
    return True


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _refuse_shadowing(rel: str, what: str) -> None:
    """Refuse a file of the job's folder named like a module of Python, of StreamMAP or of an
    installed package (:func:`.sandbox.shadows`).

    The worker keeps its folder off ``sys.path`` and last for the program's imports (see
    :mod:`.worker`), so such a file would never be imported in place of that module: the job
    would not run the file it brought. Refused here, with what to do, before the job exists.
    """
    top = rel.split("/", 1)[0].removesuffix(".py")
    if not top.isidentifier():
        return                                  # not importable: it shadows nothing
    shadowed = sandbox.shadows(top)
    if shadowed is None:
        return
    raise Refused(400, f"{what} is named like the module {top!r} of {shadowed}: a job never imports a "
                       "file of its folder in place of such a module; rename it")


def _checked_modules(program: str, modules: dict) -> dict[str, str]:
    """A submission's local modules, sorted by path, after checking their paths (see the module
    docstring); raises :class:`Refused` (400) naming the first bad one."""
    if len(modules) > MAX_MODULES:
        raise Refused(400, f"{len(modules)} local modules: a program may bring at most {MAX_MODULES}")
    for rel in modules:
        if not isinstance(rel, str) or not MODULE_PATH.match(rel):
            raise Refused(400, f"local module {str(rel)[:200]!r}: a module's path is relative to the program's "
                               "folder, of identifiers separated by '/', ending in .py (no '..', no absolute path)")
        if rel == program:
            raise Refused(400, f"local module {rel!r} has the program's own name")
        _refuse_shadowing(rel, f"local module {rel!r}")
        if not isinstance(modules[rel], str):
            raise Refused(400, f"local module {rel!r}: its text must be a string")
    return dict(sorted(modules.items()))


def _job_of(row: dict) -> Job:
    demand = Demand.from_dict(row["demand"])
    return Job(id=row["id"], tenant=row["tenant"], arrival=row["submitted"], demand=demand,
               priority=row["priority"], seq=row["seq"])


def _option(g: dict) -> Option:
    return Option(model=g["model"], gpus=g["gpus"], duration=g["duration"], memory=g["memory"],
                  share=g.get("share", 1.0))


def _public(row: dict, planned: tuple[float, str] | None = None,
            interval: tuple[float, float] | None = None) -> dict:
    """What a tenant may see of its job; ``planned``: its reservation (start time, model), if any;
    ``interval``: the calibrated (earliest, latest) start around it (``streammap.tenancy.forecast``)."""
    keys = ("id", "tenant", "state", "priority", "submitted", "started", "finished", "source", "params", "entry",
            "attempts", "error")
    out = {k: row[k] for k in keys}
    d = row["demand"] or {}            # empty on a damaged row (failed at recovery)
    out["gpus"] = d.get("gpus")
    try:
        out["estimates"] = {o["model"]: o["duration"] for o in d.get("options", ())}
    except (TypeError, KeyError):
        out["estimates"] = {}
    g = row.get("grant") or {}
    out["devices"] = g.get("devices")
    out["model"] = g.get("model")
    # The fraction of one GPU the job holds (granted) or needs (queued); 1: whole GPUs.
    try:
        out["share"] = float(g.get("share") or (d.get("options") or [{}])[0].get("share", 1.0))
    except (TypeError, AttributeError, IndexError, ValueError):
        out["share"] = 1.0
    out["isolation"] = g.get("isolation")
    out["limits"] = g.get("limits")
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


def _read_note(note: Path) -> dict | None:
    """A worker's exit note, or ``None`` when the file is not one (see ``_finish_from_note``)."""
    f = _open_plain(note)
    if f is None:
        return None
    try:
        with f:
            text = f.read(MAX_NOTE + 1)
        if len(text) > MAX_NOTE:
            return None
        status = json.loads(text)
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(status, dict) or status.get("status") not in ("done", "failed"):
        return None
    error = status.get("error")
    return {"status": status["status"], "error": error if isinstance(error, str) or error is None else str(error)}


def _open_log(path: Path):
    """A job's log, opened to append, never through what the job left at its name.

    The job writes its folder: an earlier attempt of it (preempted, or run again after a restart)
    may have left ``log.txt`` as a link to a file of the service's user, which the service would
    append to, or a FIFO, whose ``open`` never returns. Anything but a regular file there is
    removed, and the open neither follows a link nor waits for a reader.
    """
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        mode = None
    if mode is not None and not stat.S_ISREG(mode):
        if stat.S_ISDIR(mode):
            shutil.rmtree(path)
        else:
            path.unlink()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o600)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(f"{path} is not a regular file")
    return os.fdopen(fd, "ab")


def _open_plain(path: Path) -> BinaryIO | None:
    """``path`` open for reading if it is a regular file itself, else ``None``.

    One open, that neither follows a link nor waits on a FIFO, then a look at what was opened: a
    running job may swap a file of its folder for a link to another tenant's file between a look
    at its name and an open of it.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    return os.fdopen(fd, "rb")


def _plain_file(path: Path) -> bool:
    """Whether ``path`` is a regular file itself (not a link a job may have planted to elsewhere)."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def _warn_plain_tokens(tenants, path) -> None:
    """Warn when the tenants file holds plain tokens and other users may read it."""
    plain = tenants.plain_tokens()
    if not plain:
        return
    try:
        readable = bool(os.stat(path).st_mode & 0o044)
    except OSError:
        readable = False
    log.warning("%s holds the tokens of %s in plain text%s: prefer token_sha256 "
                "(python -m streammap.tenancy.tenants makes one)", path, ", ".join(plain),
                " and other users may read it" if readable else "")


# -- the server ----------------------------------------------------------------------------------

def serve(cluster, tenants, state_dir, *, host: str = "127.0.0.1", port: int = 8470, ready=None,
          http: HttpLimits | None = None, **options) -> None:
    """Run the service until SIGTERM/SIGINT; writes ``STATE/server.json`` with its URL once listening.

    ``http`` bounds the HTTP front (:class:`~.api.HttpLimits`); ``options`` go to :class:`JobService`.
    """
    os.umask(0o077)           # jobs, results, logs and the store are this user's only (workers inherit it)
    http = http or HttpLimits()
    _raise_open_files(http.max_connections + 256)
    service = JobService(cluster, tenants, state_dir, **options)
    try:
        sock = listen(host, port, http.backlog)
    except OSError as exc:
        service.stop()
        raise StateError(f"cannot listen on {host}:{port}: {exc.strerror or exc}",
                         hint="pick another --port (0 picks a free one)") from None
    url = f"http://{host}:{sock.getsockname()[1]}"
    atomic_write_text(Path(state_dir) / "server.json", json.dumps({"url": url, "pid": os.getpid(), "isolation": service.isolation}),
                      what="server note")
    service.start()
    if ready is not None:
        ready(url)
    server = make_server(service, http)
    # uvicorn stops gracefully on SIGTERM/SIGINT, then raises the signal again for its previous
    # handler: this one lets the service stop its loop and close the store afterwards.
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: None)
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        sock.close()
        service.stop()


def _raise_open_files(want: int) -> None:
    """Raise the soft limit on open files towards ``want`` (each connection holds one)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = want if hard == resource.RLIM_INFINITY else min(want, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
