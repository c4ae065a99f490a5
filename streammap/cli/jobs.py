"""The job service's client commands: ``submit``, ``queue``, ``status``, ``cancel``, ``logs``, ``result``.

One module serves the six commands: :func:`configure` is called with the command's name.
"""

from __future__ import annotations

import sys
import time

from rich.table import Table

from streammap.cli.common import console, parse_defines
from streammap.tenancy.client import DEFAULT_SERVER, Client


def configure(parser, command: str) -> None:
    if command == "submit":
        parser.add_argument("source", metavar="PROGRAM|PLAN", help="a .py program with # @stream directives, or a plan.yaml")
        parser.add_argument("--tenant", required=True, help="the tenant the job belongs to (must match the token)")
        parser.add_argument("-D", dest="defines", action="append", default=[], metavar="NAME=VALUE", help="override a param")
        parser.add_argument("--priority", type=int, default=0, help="higher runs first among the tenant's jobs (default 0)")
        parser.add_argument("--gpus", type=int, help="gang width (default: chosen from the mapper's estimates)")
        parser.add_argument("--entry", help="the # @stream graph function, when the file has several")
        parser.add_argument("--share", type=float,
                            help="the fraction of one GPU the job needs (0 < SHARE <= 1); below 1 it may share "
                                 "a GPU with other such jobs (default: its share clauses, else whole GPUs)")
    elif command == "queue":
        parser.add_argument("--all", action="store_true", help="finished jobs too")
    elif command == "result":
        parser.add_argument("id", help="job id")
        parser.add_argument("-o", "--output", required=True, help="write the outputs here (.npz)")
    else:
        parser.add_argument("id", help="job id (from submit or queue)")
    parser.add_argument("--server", help=f"job service URL (default $STREAMMAP_SERVER, else {DEFAULT_SERVER})")
    parser.add_argument("--token", help="the tenant's token (default $STREAMMAP_TOKEN)")
    parser.set_defaults(func={"submit": _submit, "queue": _queue, "status": _status, "cancel": _cancel,
                              "logs": _logs, "result": _result}[command])


def _client(args) -> Client:
    return Client(args.server, args.token)


def _print(text: str) -> None:
    print(text, flush=True)


def _submit(args) -> int:
    job = _client(args).submit(args.source, args.tenant, parse_defines(args.defines), args.priority, args.gpus,
                               args.entry, args.share)
    _print(f"submitted {job}")
    return 0


def _queue(args) -> int:
    jobs = _client(args).queue(args.all)
    table = Table(title=f"{len(jobs)} job(s)")
    for col in ("id", "state", "priority", "gpus", "model", "devices", "waited / ran", "estimated start", "program"):
        table.add_column(col)
    now = time.time()
    for j in jobs:
        start = j["started"] or now
        span = f"{start - j['submitted']:.0f} s" + (f" / {((j['finished'] or now) - j['started']):.0f} s"
                                                    if j["started"] else "")
        table.add_row(j["id"], j["state"], str(j["priority"]), str(j["gpus"]), j["model"] or "-", _devices(j), span,
                      _estimated_start(j, now), j["source"])
    console().print(table)
    return 0


def _status(args) -> int:
    j = _client(args).status(args.id)
    lines = [f"{j['id']}: {j['state']} (tenant {j['tenant']}, priority {j['priority']}, {j['gpus']} device(s), "
             f"attempts {j['attempts']})"]
    if j["devices"]:
        lines.append(f"devices: {_devices(j)} ({j['model']})")
    lines.append("estimated duration: " + ", ".join(f"{m} {t:.4g} s" for m, t in j["estimates"].items()))
    if j.get("estimated_start") is not None:
        lines.append(f"estimated start: {_estimated_start(j, time.time())} (the range is calibrated to hold 9 starts in 10)")
    if j.get("error"):
        lines.append(j["error"])
    _print("\n".join(lines))
    return 0


def _devices(j: dict) -> str:
    """The granted devices, "n0/gpu3 (0.25)" for a job holding a fraction of one (joint placement)."""
    if not j.get("devices"):
        return "-"
    share = j.get("share") or 1.0
    return ", ".join(j["devices"]) + (f" ({share:g})" if share < 1.0 else "")


def _estimated_start(j: dict, now: float) -> str:
    """A queued job's reservation: "in 42 s (30-90 s) on A100", or "-" (running, or not planned yet).

    The interval is calibrated on how earlier jobs' real starts compared with their estimates."""
    if j.get("estimated_start") is None:
        return "-"
    text = f"in {max(0.0, j['estimated_start'] - now):.0f} s"
    if j.get("estimated_start_interval"):
        lo, hi = (max(0.0, t - now) for t in j["estimated_start_interval"])
        text += f" ({lo:.0f}-{hi:.0f} s)"
    return f"{text} on {j['estimated_model']}"


def _cancel(args) -> int:
    j = _client(args).cancel(args.id)
    _print(f"{j['id']}: {j['state']}")
    return 0


def _logs(args) -> int:
    sys.stdout.write(_client(args).logs(args.id))
    return 0


def _result(args) -> int:
    out = _client(args).result(args.id, args.output)
    _print(f"wrote {out}")
    return 0
