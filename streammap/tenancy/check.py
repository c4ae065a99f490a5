"""Checking and sizing a submitted program away from the service's request path.

Submission compiles an untrusted program (``load_source_graph``) and maps it onto shape clusters
(:class:`~.estimate.Estimator`) to learn its demand. Either can be made to take any amount of
time or memory by the program's text (a directive's expression that compares nested tuples for
hours; a graph of a million tasks), so neither runs in the service process: each check is a
**child process of its own**, and the service only waits for its answer.

Children are forked from a *forkserver* that imported the compiler once
(:mod:`multiprocessing`'s ``forkserver`` start method with :data:`PRELOAD`), so a check starts in
milliseconds rather than the seconds a fresh interpreter takes to import numpy and the compiler,
and a child shares nothing with the threads of the service nor with the check of another tenant's
program (it is forked from the clean server, not from a warm worker that ran someone else's).

Policy
------
Each child runs under :class:`CheckLimits`:

* **wall time** ``seconds``: the service waits that long, then kills the child;
* **CPU time** ``RLIMIT_CPU`` of the same number of seconds (the kernel stops a child that
  outruns it even if the service is slow to notice);
* **memory** ``RLIMIT_AS``: ``memory_mib`` MiB of address space on top of what the forked child
  already maps (the preloaded modules), so an allocation past it fails with ``MemoryError``.

A child stopped by a limit is a refusal of the program (HTTP 400: "compiling the program took
more than 20 s", "... more than 2048 MiB of memory"), never a failure of the service. At most
``concurrency`` checks run at once (:class:`Checker`); a submission that waits longer than
``queue_seconds`` for a turn is refused as busy (HTTP 503), so a flood of submissions queues in
bounded memory and every one gets an answer.

Each child writes the program, and its local modules at their paths beside it, into its own
folder under ``STATE/incoming/`` (removed when the check ends, and wholesale when the service
starts) and compiles it from there under its bare file name, so no message it returns names a path
of the service. The local modules are read as the compiler reads them
(:func:`~streammap.directives.imports.local_modules`): one that does not parse is refused at its
line.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import resource
import shutil
import signal
import tempfile
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

from streammap.compiler import load_source_graph
from streammap.directives.imports import local_modules
from streammap.errors import StreamMapError
from streammap.tenancy.estimate import Demand, Estimator

#: Modules the forkserver imports once, so each forked check starts with the compiler loaded.
PRELOAD = ["streammap.tenancy.check"]


@dataclass(frozen=True)
class CheckLimits:
    """Limits of one check (see the module docstring)."""

    seconds: float = 20.0
    memory_mib: int = 2048
    concurrency: int = 2
    queue_seconds: float = 30.0
    #: Distinct (program, params, entry, width) demands remembered, so a resubmission skips its check.
    cache: int = 1024


class CheckRefused(Exception):
    """The program cannot be accepted; ``status`` is the HTTP status (400 bad program, 503 busy)."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


class Checker:
    """Runs checks in forked children, at most ``limits.concurrency`` at once.

    Parameters
    ----------
    cluster : Cluster
        The cluster whose device models size the program.
    scratch : path
        Folder for the children's copies of the programs (``STATE/incoming``).
    limits : CheckLimits
    """

    def __init__(self, cluster, scratch, limits: CheckLimits | None = None):
        self.cluster = cluster
        self.scratch = Path(scratch)
        self.limits = limits or CheckLimits()
        self._slots = threading.BoundedSemaphore(self.limits.concurrency)
        self._ctx = multiprocessing.get_context("forkserver")
        self._ctx.set_forkserver_preload(PRELOAD)
        self._cache: OrderedDict[tuple, Demand] = OrderedDict()
        self._cache_lock = threading.Lock()

    def warm_up(self) -> None:
        """Start the forkserver now (it imports the compiler: seconds), not on the first submission."""
        p = self._ctx.Process(target=_noop, daemon=True)
        p.start()
        p.join()

    def demand(self, key: tuple, name: str, source_text: str, params: dict, entry: str | None,
               gpus: int | None, max_gpus: int | None, modules: dict[str, str] | None = None,
               share: float | None = None) -> Demand:
        """The demand of a program (with its local modules, ``{path: text}``), checked in a child
        under the limits.

        Raises
        ------
        CheckRefused
            400 with the compiler's message, or the limit the check ran into; 503 when no check
            slot frees within ``queue_seconds``.
        """
        ck = (key, gpus, max_gpus, share)
        with self._cache_lock:
            if ck in self._cache:
                self._cache.move_to_end(ck)
                return self._cache[ck]
        if not self._slots.acquire(timeout=self.limits.queue_seconds):
            raise CheckRefused(503, f"the service is busy checking other programs ({self.limits.concurrency} at "
                                    "a time): submit again in a moment")
        try:
            demand = self._run(name, source_text, params, entry, gpus, max_gpus, modules or {}, share)
        finally:
            self._slots.release()
        with self._cache_lock:
            self._cache[ck] = demand
            while len(self._cache) > self.limits.cache:
                self._cache.popitem(last=False)
        return demand

    def _run(self, name, source_text, params, entry, gpus, max_gpus, modules, share=None) -> Demand:
        lim = self.limits
        folder = Path(tempfile.mkdtemp(prefix="check-", dir=self.scratch))
        recv, send = self._ctx.Pipe(duplex=False)
        child = self._ctx.Process(target=check_in_child, daemon=True,
                                  args=(send, str(folder), name, source_text, params, entry, gpus, max_gpus,
                                        self.cluster, lim.seconds, lim.memory_mib, modules, share))
        try:
            child.start()
            send.close()
            answer = recv.recv() if recv.poll(lim.seconds) else None
        except (EOFError, OSError):
            answer = None          # the child died before answering: its exit code says why
        finally:
            if child.is_alive():
                child.kill()
            child.join()
            recv.close()
            shutil.rmtree(folder, ignore_errors=True)
        if answer is None:
            raise CheckRefused(400, _death(child.exitcode, lim))
        kind, value = answer
        if kind == "ok":
            return Demand.from_dict(value)
        if kind == "memory":
            raise CheckRefused(400, f"compiling the program took more than {lim.memory_mib} MiB of memory")
        return _refuse(value, folder)

    def close(self) -> None:
        """Nothing to release: each check's child is gone when its answer is in."""


def _refuse(message: str, folder: Path):
    raise CheckRefused(400, message.replace(str(folder) + os.sep, "").replace(str(folder), "."))


def _death(exitcode: int | None, lim: CheckLimits) -> str:
    """Why a child that sent no answer stopped."""
    if exitcode in (None, -signal.SIGKILL, -signal.SIGXCPU):
        return f"compiling the program took more than {_secs(lim.seconds)} s"
    return f"checking the program failed (its checker exited with status {exitcode})"


def _secs(s: float) -> str:
    return f"{s:g}"


def _noop() -> None:
    pass


def check_in_child(conn, folder: str, name: str, source_text: str, params: dict, entry, gpus, max_gpus,
                   cluster, seconds: float, memory_mib: int, modules: dict | None = None,
                   share: float | None = None) -> None:
    """The child's side: limit itself, compile and size the program, send one answer.

    The answer is ``("ok", demand dict)``, ``("refused", message)`` or ``("memory", None)``.
    """
    _limit_self(seconds, memory_mib)
    os.chdir(folder)
    try:
        try:
            (Path(folder) / name).write_text(source_text, encoding="utf-8", errors="surrogatepass")
            for rel, text in (modules or {}).items():
                (Path(folder) / rel).parent.mkdir(parents=True, exist_ok=True)
                (Path(folder) / rel).write_text(text, encoding="utf-8", errors="surrogatepass")
            graph = load_source_graph(name, params, entry)
            local_modules(name)                 # the modules it imports parse (the worker records them)
            demand = Estimator(cluster, mapper="heft").demand(("check",), graph, gpus, max_gpus=max_gpus,
                                                              share=share)
            answer = ("ok", demand.as_dict())
        except StreamMapError as exc:
            # The client prints a refusal as "error: <message>": send the error without its own "error: ".
            answer = ("refused", exc.format().replace("error: ", "", 1))
        except RecursionError:
            answer = ("refused", f"{name}: the program nests too deeply to compile")
        except MemoryError:
            answer = ("memory", None)
        except Exception as exc:  # noqa: BLE001 - any failure of an untrusted program is its refusal
            answer = ("refused", f"{name}: the program could not be compiled ({type(exc).__name__}: {exc})")
        conn.send(answer)
    except MemoryError:
        conn.send(("memory", None))
    finally:
        conn.close()


def _limit_self(seconds: float, memory_mib: int) -> None:
    """Set this process's CPU and address-space limits (on top of what it already maps)."""
    cpu = max(1, math.ceil(seconds))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    mapped = _mapped_bytes()
    limit = mapped + (memory_mib << 20)
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


def _mapped_bytes() -> int:
    """This process's virtual size (``/proc/self/statm``; 0 where there is no ``/proc``)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return 0
