"""The job service's client commands: ``submit``, ``queue``, ``status``, ``cancel``, ``logs``, ``result``.

Each talks HTTP/JSON to ``streammap serve`` at ``--server`` (default ``$STREAMMAP_SERVER``, else
``http://127.0.0.1:8470``) with the tenant's token (``--token``, default ``$STREAMMAP_TOKEN``).
A refusal (no or wrong token, another tenant's job, a program that cannot run) is printed as the
service's message and exits with status 2, like every other bad input. A busy service (503: too
many requests at once, or every program check taken) did nothing with the request, so the client
asks again, a few times, after the pause the service's ``Retry-After`` names.

The Python API is :class:`Client`::

    c = Client("http://head:8470", token="s3cret-vision")
    job = c.submit("samples/fm_radio.py", tenant="vision", params={"N": 65536})
    c.status(job)["state"]; c.result(job, "out.npz")
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from pathlib import Path

from streammap.directives.imports import local_modules
from streammap.errors import StreamMapError
from streammap.io.files import atomic_write
from streammap.plan import read_plan

DEFAULT_SERVER = "http://127.0.0.1:8470"
#: Times a request the service answered 503 (busy, nothing done) is sent again.
BUSY_RETRIES = 3


class ServiceError(StreamMapError):
    """The job service refused a request, or could not be reached."""


class Client:
    def __init__(self, server: str | None = None, token: str | None = None, timeout: float = 60.0):
        self.server = (server or os.environ.get("STREAMMAP_SERVER") or DEFAULT_SERVER).rstrip("/")
        self.token = token if token is not None else os.environ.get("STREAMMAP_TOKEN")
        self.timeout = timeout

    def _call(self, method: str, path: str, body: dict | None = None) -> tuple[bytes, str]:
        for attempt in range(BUSY_RETRIES + 1):
            try:
                return self._call_once(method, path, body)
            except _Busy as busy:
                if attempt == BUSY_RETRIES:
                    raise ServiceError(busy.message, hint="the service is busy; try again in a moment") from None
                time.sleep(busy.pause)
        raise AssertionError("unreachable")

    def _call_once(self, method: str, path: str, body: dict | None = None) -> tuple[bytes, str]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.server + path, data=data, method=method)
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                return resp.read(), resp.headers.get("Content-Type", "")
        except urllib.error.HTTPError as exc:
            try:
                msg = json.loads(exc.read()).get("error", exc.reason)
            except (ValueError, AttributeError):
                msg = exc.reason
            if exc.code == 503:
                raise _Busy(str(msg), exc.headers.get("Retry-After")) from None
            raise ServiceError(f"{msg}", hint=_HINTS.get(exc.code)) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise ServiceError(f"cannot reach the job service at {self.server}: {reason}",
                               hint="start it with 'streammap serve', or pass --server / set STREAMMAP_SERVER") from None

    def _json(self, method: str, path: str, body: dict | None = None):
        raw, _ = self._call(method, path, body)
        return json.loads(raw)

    def submit(self, path, tenant: str, params: dict | None = None, priority: int = 0, gpus: int | None = None,
               entry: str | None = None, share: float | None = None) -> str:
        """Submit a program (``.py``) or a plan's program (``.yaml``: its source, params and entry),
        with the local modules it imports (files of its folder, found as the compiler finds them:
        :func:`~streammap.directives.imports.local_modules`)."""
        path = Path(path)
        if path.suffix in (".yaml", ".yml"):
            plan = read_plan(path)
            if plan.source.kind != "program":
                raise StreamMapError("this plan is of an imported workflow: it has no kernels to run", path=path)
            source = Path(plan.source.path)
            merged = dict(plan.params)
            merged.update(params or {})
            params, entry = merged, entry or plan.source.entry
        else:
            source = path
        if source.suffix != ".py":
            raise StreamMapError(f"cannot submit {path}: the service runs programs (.py) or plans of programs",
                                 path=path, hint="workflow graphs have no kernels to run; simulate them instead")
        try:
            text = source.read_text(encoding="utf-8")
            modules = {m.path: (source.parent / m.path).read_text(encoding="utf-8")
                       for m in local_modules(source)}
        except OSError as exc:
            raise StreamMapError(f"cannot read {exc.filename or source}: {exc.strerror or exc}") from None
        except UnicodeDecodeError as exc:
            raise StreamMapError(f"a file of the program is not UTF-8 text ({exc.reason})", path=source,
                                 hint="the service keeps programs and their modules as UTF-8 text") from None
        body = {"tenant": tenant, "source_name": source.name, "source_text": text, "params": params or {},
                "entry": entry, "priority": priority, "gpus": gpus}
        if modules:
            body["modules"] = modules
        if share is not None:
            body["share"] = share
        return self._json("POST", "/jobs", body)["id"]

    def queue(self, all_states: bool = False) -> list[dict]:
        return self._json("GET", "/jobs" + ("?all=1" if all_states else ""))["jobs"]

    def status(self, job_id: str) -> dict:
        return self._json("GET", f"/jobs/{job_id}")

    def cancel(self, job_id: str) -> dict:
        return self._json("POST", f"/jobs/{job_id}/cancel", {})

    def logs(self, job_id: str) -> str:
        return self._call("GET", f"/jobs/{job_id}/logs")[0].decode(errors="replace")

    def result(self, job_id: str, output) -> Path:
        data, _ = self._call("GET", f"/jobs/{job_id}/result")
        atomic_write(output, lambda f: f.write(data), binary=True, what="outputs")
        return Path(output)


class _Busy(Exception):
    """A 503 answer: the service did nothing with the request and asks to be asked again."""

    def __init__(self, message: str, retry_after: str | None):
        super().__init__(message)
        self.message = message
        try:
            self.pause = min(max(float(retry_after or 1), 0.1), 5.0)
        except ValueError:
            self.pause = 1.0


_HINTS = {401: "pass the tenant's token with --token or STREAMMAP_TOKEN",
          403: "submit with the tenant your token belongs to",
          404: "a tenant sees only its own jobs; 'streammap queue --all' lists them"}


# -- CLI ------------------------------------------------------------------------------------------
