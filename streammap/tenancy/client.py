"""The job service's client commands: ``submit``, ``queue``, ``status``, ``cancel``, ``logs``, ``result``.

Each talks HTTP/JSON to ``streammap serve`` at ``--server`` (default ``$STREAMMAP_SERVER``, else
``http://127.0.0.1:8470``) with the tenant's token (``--token``, default ``$STREAMMAP_TOKEN``).
A refusal (no or wrong token, another tenant's job, a program that cannot run) is printed as the
service's message and exits with status 2, like every other bad input.

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

from ..errors import StreamMapError
from ..fileio import atomic_write

DEFAULT_SERVER = "http://127.0.0.1:8470"


class ServiceError(StreamMapError):
    """The job service refused a request, or could not be reached."""


class Client:
    def __init__(self, server: str | None = None, token: str | None = None, timeout: float = 60.0):
        self.server = (server or os.environ.get("STREAMMAP_SERVER") or DEFAULT_SERVER).rstrip("/")
        self.token = token if token is not None else os.environ.get("STREAMMAP_TOKEN")
        self.timeout = timeout

    def _call(self, method: str, path: str, body: dict | None = None) -> tuple[bytes, str]:
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
            raise ServiceError(f"{msg}", hint=_HINTS.get(exc.code)) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise ServiceError(f"cannot reach the job service at {self.server}: {reason}",
                               hint="start it with 'streammap serve', or pass --server / set STREAMMAP_SERVER") from None

    def _json(self, method: str, path: str, body: dict | None = None):
        raw, _ = self._call(method, path, body)
        return json.loads(raw)

    def submit(self, path, tenant: str, params: dict | None = None, priority: int = 0, gpus: int | None = None,
               entry: str | None = None) -> str:
        """Submit a program (``.py``) or a plan's program (``.yaml``: its source, params and entry)."""
        path = Path(path)
        if path.suffix in (".yaml", ".yml"):
            from ..plan import read_plan
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
        except OSError as exc:
            raise StreamMapError(f"cannot read {source}: {exc.strerror or exc}") from None
        body = {"tenant": tenant, "source_name": source.name, "source_text": text, "params": params or {},
                "entry": entry, "priority": priority, "gpus": gpus}
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


_HINTS = {401: "pass the tenant's token with --token or STREAMMAP_TOKEN",
          403: "submit with the tenant your token belongs to",
          404: "a tenant sees only its own jobs; 'streammap queue --all' lists them"}


# -- CLI ------------------------------------------------------------------------------------------

def _common(p) -> None:
    p.add_argument("--server", help=f"job service URL (default $STREAMMAP_SERVER, else {DEFAULT_SERVER})")
    p.add_argument("--token", help="the tenant's token (default $STREAMMAP_TOKEN)")


def add_client_parsers(sub) -> None:
    s = sub.add_parser("submit", help="submit a program (or a plan's program) to the job service")
    s.add_argument("source", metavar="PROGRAM|PLAN", help="a .py program with # @stream directives, or a plan.yaml")
    s.add_argument("--tenant", required=True, help="the tenant the job belongs to (must match the token)")
    s.add_argument("-D", dest="defines", action="append", default=[], metavar="NAME=VALUE", help="override a param")
    s.add_argument("--priority", type=int, default=0, help="higher runs first among the tenant's jobs (default 0)")
    s.add_argument("--gpus", type=int, help="gang width (default: chosen from the mapper's estimates)")
    s.add_argument("--entry", help="the # @stream graph function, when the file has several")
    _common(s)
    s.set_defaults(func=_submit)

    q = sub.add_parser("queue", help="the tenant's jobs in the job service")
    q.add_argument("--all", action="store_true", help="finished jobs too")
    _common(q)
    q.set_defaults(func=_queue)

    for name, helptext, fn in (("status", "one job's state", _status), ("cancel", "cancel a job", _cancel),
                               ("logs", "a job's log", _logs)):
        c = sub.add_parser(name, help=helptext)
        c.add_argument("id", help="job id (from submit or queue)")
        _common(c)
        c.set_defaults(func=fn)

    r = sub.add_parser("result", help="fetch a finished job's outputs (.npz)")
    r.add_argument("id", help="job id")
    r.add_argument("-o", "--output", required=True, help="write the outputs here (.npz)")
    _common(r)
    r.set_defaults(func=_result)


def _client(args) -> Client:
    return Client(args.server, args.token)


def _print(text: str) -> None:
    print(text, flush=True)


def _submit(args) -> int:
    from ..cli import parse_defines
    job = _client(args).submit(args.source, args.tenant, parse_defines(args.defines), args.priority, args.gpus,
                               args.entry)
    _print(f"submitted {job}")
    return 0


def _queue(args) -> int:
    from rich.console import Console
    from rich.table import Table
    import sys
    jobs = _client(args).queue(args.all)
    table = Table(title=f"{len(jobs)} job(s)")
    for col in ("id", "state", "priority", "gpus", "model", "waited / ran", "estimated start", "program"):
        table.add_column(col)
    now = time.time()
    for j in jobs:
        start = j["started"] or now
        span = f"{start - j['submitted']:.0f} s" + (f" / {((j['finished'] or now) - j['started']):.0f} s"
                                                    if j["started"] else "")
        table.add_row(j["id"], j["state"], str(j["priority"]), str(j["gpus"]), j["model"] or "-", span,
                      _estimated_start(j, now), j["source"])
    Console(highlight=False, width=None if sys.stdout.isatty() else 200).print(table)
    return 0


def _status(args) -> int:
    j = _client(args).status(args.id)
    lines = [f"{j['id']}: {j['state']} (tenant {j['tenant']}, priority {j['priority']}, {j['gpus']} device(s), "
             f"attempts {j['attempts']})"]
    if j["devices"]:
        lines.append(f"devices: {', '.join(j['devices'])} ({j['model']})")
    lines.append("estimated duration: " + ", ".join(f"{m} {t:.4g} s" for m, t in j["estimates"].items()))
    if j.get("estimated_start") is not None:
        lines.append(f"estimated start: {_estimated_start(j, time.time())} (if the jobs ahead take their estimates)")
    if j.get("error"):
        lines.append(j["error"])
    _print("\n".join(lines))
    return 0


def _estimated_start(j: dict, now: float) -> str:
    """A queued job's reservation: "in 42 s on A100", or "-" (running, or not planned yet)."""
    if j.get("estimated_start") is None:
        return "-"
    return f"in {max(0.0, j['estimated_start'] - now):.0f} s on {j['estimated_model']}"


def _cancel(args) -> int:
    j = _client(args).cancel(args.id)
    _print(f"{j['id']}: {j['state']}")
    return 0


def _logs(args) -> int:
    import sys
    sys.stdout.write(_client(args).logs(args.id))
    return 0


def _result(args) -> int:
    out = _client(args).result(args.id, args.output)
    _print(f"wrote {out}")
    return 0
