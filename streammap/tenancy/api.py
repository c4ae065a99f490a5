"""The job service's HTTP front: a Starlette (ASGI) app served by uvicorn.

The routes and their JSON are those of :mod:`.service` (its docstring lists them); this module is
how they are served to clients that may be slow, broken or hostile. Everything here is about
bounds: what one request, one connection or a flood of them may cost the service.

State
-----
One asyncio event loop (uvicorn's) owns every connection: an idle connection costs a socket and a
few hundred bytes, not a thread. Work that blocks (the SQLite store, reading a job's files) runs in
a bounded thread pool (``threads``); submissions, whose programs are checked in child processes
(:mod:`.check`), take one of the checker's turns first, waiting for it in the loop.

Policy (:class:`HttpLimits`)
----------------------------
* **Body size** ``max_body``: counted while the body streams in, whatever ``Content-Length``
  says; a declared length over the limit is refused before a byte is read (413). A negative or
  malformed ``Content-Length`` is a protocol error (uvicorn's h11 parser answers 400); a body
  longer than its declared length is cut there by the parser, and the rest is not a request.
* **Time**: a request head must arrive within ``head_seconds`` of the connection opening (or of
  the previous response on a kept-alive connection), else the connection is closed; a body must
  arrive within ``body_seconds`` (else 408); an idle kept-alive connection is closed after
  ``keep_alive`` seconds.
* **Concurrency**: at most ``max_requests`` requests are handled at once; one more is answered at
  once with 503 and ``Retry-After`` (never left to time out, never reset). At most
  ``max_connections`` connections are open at once: one more is closed as it opens.
* **Backlog** ``backlog``: connections the kernel queues before the loop accepts them (a burst of
  a few thousand connects is queued, not reset).
* **JSON**: a body is declared ``application/json`` (else 415, before it is read) and must
  mean one thing to every reader: a key repeated in an object, ``NaN`` or
  an infinity is a 400 (:func:`_refuse_ambiguous_json`); a number given as text is refused, not
  converted.
* **Errors**: every malformed field is a 400 naming the field; an unexpected failure is a 500
  whose answer says only that (the traceback goes to the service's log): no answer ever carries a
  path of the service's machine.
"""

from __future__ import annotations

import functools
import json
import logging
import re
import socket
from dataclasses import dataclass
from typing import Optional, Union

import anyio
import pydantic
import uvicorn
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route
from uvicorn.protocols.http.h11_impl import H11Protocol

from streammap.io.jsonfile import DuplicateKeyError, NotFiniteError, loads_strict
from streammap.ir import MIN_SHARE
from streammap.tenancy.check import CheckRefused
from streammap.tenancy.store import nonfinite_param

log = logging.getLogger("streammap.tenancy")

#: What a job id looks like (``job-<seq>``); anything else is "not found" without a look-up.
JOB_ID = re.compile(r"^job-[0-9]{1,18}$")
#: A program's file name as the service keeps it: a plain ``.py`` name, no folders.
SOURCE_NAME = r"^[^/\\\x00-\x1f]{1,200}$"


@dataclass(frozen=True)
class HttpLimits:
    """Bounds of the HTTP front (see the module docstring)."""

    max_body: int = 8 << 20
    body_seconds: float = 30.0
    head_seconds: float = 10.0
    keep_alive: float = 5.0
    max_requests: int = 256
    max_connections: int = 4096
    backlog: int = 2048
    threads: int = 16


class Refused(Exception):
    """A request the service answers with an HTTP error and a message."""

    def __init__(self, status: int, message: str, headers: dict | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers


Param = Union[StrictBool, StrictInt, StrictFloat, str]


class SubmitRequest(BaseModel):
    """The body of ``POST /jobs``."""

    model_config = ConfigDict(extra="forbid", str_max_length=16 << 20)
    tenant: Optional[str] = Field(default=None, max_length=200)
    source_name: str = Field(pattern=SOURCE_NAME)
    source_text: str
    # The program's local modules, {path relative to its folder: text} (checked by the service).
    modules: dict[str, str] = Field(default_factory=dict, max_length=1000)
    params: dict[str, Param] = Field(default_factory=dict, max_length=1000)
    entry: Optional[str] = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,199}$")
    priority: StrictInt = Field(default=0, ge=-1_000_000, le=1_000_000)
    gpus: Optional[StrictInt] = Field(default=None, ge=1, le=1_000_000)
    # The fraction of one GPU the job needs (joint placement: it may share the GPU). Strict: a
    # number, not the text of one.
    share: Optional[float] = Field(default=None, ge=MIN_SHARE, le=1, strict=True)


def _refuse_ambiguous_json(raw: bytes) -> None:
    """Refuse a body that JSON parsers read differently: a key given twice (``"gpus": 1, "gpus":
    1000``: pydantic keeps the last, a proxy or an auditor may see the first) or ``NaN`` and
    infinities (accepted by pydantic, then stored: the job's listing could never be written as
    JSON again, a 500 on every ``GET /jobs`` of its tenant). Other malformed JSON is left to
    pydantic, whose messages name the field."""
    try:
        loads_strict(raw or b"{}", finite=True)
    except DuplicateKeyError as exc:
        where = f" (in the object at line {exc.line}, column {exc.col})" if exc.line else ""
        raise Refused(400, f"bad request: key {exc.key[:100]!r} appears twice in one object{where}: "
                           "give each field once") from None
    except NotFiniteError as exc:
        where = _nonfinite_param_named(raw)
        raise Refused(400, f"bad request: {where}{exc.word} is not a number this service accepts: numbers are "
                           "finite") from None
    except (ValueError, RecursionError):
        pass


def _nonfinite_param_named(raw: bytes) -> str:
    """``"param 'X' is "`` for the first param of a body that holds NaN or an infinity, or ``""``
    (the body read as Python reads it, which accepts them)."""
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):
        return ""
    params = body.get("params") if isinstance(body, dict) else None
    bad = nonfinite_param(params) if isinstance(params, dict) else None
    return f"param {bad[0][:200]!r} is " if bad else ""


def explain(exc: pydantic.ValidationError) -> str:
    """A validation error as one line per field, without echoing the (possibly huge) input."""
    lines = []
    for err in exc.errors(include_url=False, include_input=False):
        where = ".".join(str(p) for p in err["loc"]) or "the request"
        lines.append(f"field '{where}': {err['msg']}")
    return "bad request: " + "; ".join(lines[:10])


# -- the app --------------------------------------------------------------------------------------

def make_app(service, limits: HttpLimits | None = None):
    """The ASGI app of ``service`` (a :class:`~.service.JobService`), wrapped in its request limit."""
    limits = limits or HttpLimits()
    threads = anyio.CapacityLimiter(limits.threads)
    check_limits = service.checker.limits
    check_turns = anyio.CapacityLimiter(check_limits.concurrency)

    async def blocking(fn, *args):
        return await anyio.to_thread.run_sync(functools.partial(fn, *args), limiter=threads)

    @_answers
    async def list_jobs(request: Request):
        tenant = _tenant(service, request)
        all_states = request.query_params.get("all", "0") not in ("0", "")
        return JSONResponse({"jobs": await blocking(service.jobs, tenant, all_states)})

    @_answers
    async def submit(request: Request):
        tenant = _tenant(service, request)
        _refuse_not_json(request)
        raw = await _read_body(request, limits)
        _refuse_ambiguous_json(raw)
        try:
            body = SubmitRequest.model_validate_json(raw or b"{}")
        except pydantic.ValidationError as exc:
            raise Refused(400, explain(exc)) from None
        if body.tenant is not None and body.tenant != tenant:
            raise Refused(403, f"this token belongs to tenant {tenant}, not {body.tenant}")
        # Wait for one of the checker's turns here, in the loop: a queue of submissions holds no threads.
        with anyio.move_on_after(check_limits.queue_seconds) as waited:
            await check_turns.acquire()
        if waited.cancelled_caught:
            raise Refused(503, f"the service is busy checking other programs ({check_limits.concurrency} at a "
                               "time): submit again in a moment", {"Retry-After": "2"})
        try:
            job_id = await anyio.to_thread.run_sync(functools.partial(
                service.submit, tenant, body.source_name, body.source_text, body.params, body.entry,
                body.priority, body.gpus, body.modules, body.share))
        finally:
            check_turns.release()
        return JSONResponse({"id": job_id}, status_code=201)

    @_answers
    async def one_job(request: Request):
        tenant, job_id = _tenant(service, request), _job_id(service, request)
        return JSONResponse(await blocking(lambda: service.public(service.job(tenant, job_id))))

    @_answers
    async def cancel(request: Request):
        tenant, job_id = _tenant(service, request), _job_id(service, request)
        await _read_body(request, limits)           # a body, if any, is read (and bounded), not used
        return JSONResponse(await blocking(service.cancel, tenant, job_id))

    @_answers
    async def logs(request: Request):
        tenant, job_id = _tenant(service, request), _job_id(service, request)
        f = await blocking(service.open_log, tenant, job_id)
        return StreamingResponse(_chunks(f, blocking), media_type="text/plain; charset=utf-8")

    @_answers
    async def result(request: Request):
        tenant, job_id = _tenant(service, request), _job_id(service, request)
        f = await blocking(service.open_result, tenant, job_id)
        return StreamingResponse(_chunks(f, blocking), media_type="application/octet-stream")

    routes = [Route("/jobs", list_jobs, methods=["GET"]), Route("/jobs", submit, methods=["POST"]),
              Route("/jobs/{job_id}", one_job, methods=["GET"]),
              Route("/jobs/{job_id}/cancel", cancel, methods=["POST"]),
              Route("/jobs/{job_id}/logs", logs, methods=["GET"]),
              Route("/jobs/{job_id}/result", result, methods=["GET"])]
    app = Starlette(routes=routes, exception_handlers={HTTPException: _http_error, Exception: _internal_error})
    return RequestLimit(app, limits.max_requests)


async def _chunks(f, blocking, size: int = 1 << 20):
    """The bytes of the open file ``f`` (the service opened it, see ``service._open_plain``), read
    a chunk at a time by ``blocking`` (the app's worker threads); ``f`` is closed at the end."""
    with f:
        while chunk := await blocking(f.read, size):
            yield chunk


def _answers(handler):
    """Turn what a handler raises into an answer: a refusal's status and message, or a bare 500."""
    @functools.wraps(handler)
    async def wrapped(request: Request):
        try:
            return await handler(request)
        except Refused as exc:
            return _error(exc.status, exc.message, exc.headers)
        except CheckRefused as exc:
            return _error(exc.status, exc.message, {"Retry-After": "2"} if exc.status == 503 else None)
        except Exception:  # noqa: BLE001 - a request must get an answer; the log gets the traceback
            log.exception("request %s %s failed", request.method, request.url.path)
            return _error(500, "internal error of the job service (its log has the details)")
    return wrapped


def _error(status: int, message: str, headers: dict | None = None) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers)


async def _http_error(request: Request, exc: HTTPException) -> JSONResponse:
    if exc.status_code == 404:
        return _error(404, f"no such route: {request.method} {request.url.path[:200]}")
    if exc.status_code == 405:
        return _error(405, f"{request.method} is not allowed on {request.url.path[:200]}")
    return _error(exc.status_code, str(exc.detail))


async def _internal_error(request: Request, exc: Exception) -> JSONResponse:
    log.error("request %s %s failed", request.method, request.url.path, exc_info=exc)
    return _error(500, "internal error of the job service (its log has the details)")


def _tenant(service, request: Request) -> str:
    auth = request.headers.get("authorization", "")
    if not auth.startswith("Bearer "):
        raise Refused(401, "missing token: send 'Authorization: Bearer TOKEN' (streammap --token or $STREAMMAP_TOKEN)")
    t = service.tenants.authenticate(auth[len("Bearer "):].strip())
    if t is None:
        raise Refused(401, "invalid token: it belongs to no tenant of this service")
    return t.name


def _job_id(service, request: Request) -> str:
    job_id = request.path_params["job_id"]
    if not JOB_ID.match(job_id):
        raise Refused(404, f"no job {job_id[:80]} of tenant {_tenant(service, request)}")
    return job_id


def _refuse_not_json(request: Request) -> None:
    """A body must be declared JSON (``application/json``, any parameters): a ``text/plain`` or
    form body is what a web page may send to any address without asking first, and it is not
    read as JSON on the page's word."""
    media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if media != "application/json":
        raise Refused(415, f"a job is submitted as JSON: send Content-Type: application/json "
                           f"(got {media[:100] or 'none'!r})", {"Connection": "close"})


async def _read_body(request: Request, limits: HttpLimits) -> bytes:
    """The request body, refused once it passes ``max_body`` bytes or ``body_seconds`` seconds."""
    declared = request.headers.get("content-length")
    too_large = f"request too large (at most {limits.max_body} bytes)"
    if declared is not None and (not declared.isdigit() or int(declared) > limits.max_body):
        raise Refused(413 if declared.isdigit() else 400,
                      too_large if declared.isdigit() else "bad Content-Length", {"Connection": "close"})
    chunks, size = [], 0
    with anyio.move_on_after(limits.body_seconds) as waited:
        try:
            async for chunk in request.stream():
                size += len(chunk)
                if size > limits.max_body:
                    raise Refused(413, too_large, {"Connection": "close"})
                chunks.append(chunk)
        except ClientDisconnect:
            # The client hung up mid-body (anyone may, at any time): no one to answer, and
            # nothing the service did wrong, so no traceback in its log either.
            raise Refused(400, "the client hung up before its request body ended", {"Connection": "close"}) from None
    if waited.cancelled_caught:
        raise Refused(408, f"the request body did not arrive within {limits.body_seconds:g} s",
                      {"Connection": "close"})
    return b"".join(chunks)


class RequestLimit:
    """ASGI middleware: at most ``limit`` requests in progress; one more gets 503 at once."""

    def __init__(self, app, limit: int):
        self.app = app
        self.limit = limit
        self.active = 0

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if self.active >= self.limit:
            body = json.dumps({"error": f"the service is busy ({self.active} requests in progress): "
                                        "try again in a moment"}).encode()
            await send({"type": "http.response.start", "status": 503,
                        "headers": [(b"content-type", b"application/json"), (b"retry-after", b"1"),
                                    (b"content-length", str(len(body)).encode()), (b"connection", b"close")]})
            await send({"type": "http.response.body", "body": body})
            return
        self.active += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.active -= 1


# -- the server -----------------------------------------------------------------------------------

class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a deadline on each request head and a cap on connections.

    uvicorn closes a kept-alive connection that stays idle, but not one that never sends a full
    request head (a connection opened and left, or one that trickles a byte at a time): this
    closes both after ``limits.head_seconds``.
    """

    limits: HttpLimits = HttpLimits()

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        if len(self.connections) > self.limits.max_connections:
            log.warning("closing a connection: %d are open", len(self.connections))
            transport.close()
            return
        self._head_deadline = None
        self._arm_head_deadline()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._arm_head_deadline()

    def connection_lost(self, exc) -> None:
        super().connection_lost(exc)
        if getattr(self, "_head_deadline", None) is not None:
            self._head_deadline.cancel()

    def _arm_head_deadline(self) -> None:
        if self._head_deadline is not None:
            self._head_deadline.cancel()
        if not self.transport.is_closing():
            self._head_deadline = self.loop.call_later(self.limits.head_seconds, self._head_overdue)

    def _head_overdue(self) -> None:
        self._head_deadline = None
        in_request = self.cycle is not None and not self.cycle.response_complete
        if not in_request and not self.transport.is_closing():
            self.transport.close()      # a request in progress has its own body deadline


def listen(host: str, port: int, backlog: int) -> socket.socket:
    """A listening socket (``port`` 0: a free one), so the URL is known before the server runs."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return socket.create_server((host, port), family=family, backlog=backlog)


def make_server(service, limits: HttpLimits | None = None) -> uvicorn.Server:
    """A uvicorn server of ``service`` under ``limits``; run it with ``server.run(sockets=[sock])``."""
    limits = limits or HttpLimits()
    protocol = type("Protocol", (GuardedH11Protocol,), {"limits": limits})
    config = uvicorn.Config(make_app(service, limits), http=protocol, ws="none", lifespan="off", log_config=None,
                            access_log=False, timeout_keep_alive=limits.keep_alive,
                            backlog=limits.backlog, h11_max_incomplete_event_size=64 << 10,
                            timeout_graceful_shutdown=5, server_header=False)
    return uvicorn.Server(config)
