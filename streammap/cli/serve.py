"""``streammap serve``: the job service (tenants, quotas, fair share, a durable queue)."""

from __future__ import annotations

import json
from pathlib import Path

from streammap.cli.common import int_between, interval, port
from streammap.errors import StreamMapError
from streammap.tenancy.api import HttpLimits
from streammap.tenancy.check import CheckLimits
from streammap.tenancy.service import serve
from streammap.units import parse_size, parse_time

#: The service's own bounds as flags: a NaN, negative or infinite deadline reached the event loop
#: and the checker as is (``type=float``), and a zero or negative count was quietly raised to 1.
check_mib = int_between(16, 1 << 20, "a memory size in MiB")
checks = int_between(1, 1024, "a number of concurrent checks")
max_requests = int_between(1, 1_000_000, "a number of requests")


def configure(parser, command: str) -> None:
    parser.add_argument("--cluster", required=True, help="cluster.yaml, or 'local' to discover this machine (one node for the local "
                                                          "executor unless --emulate; any with Ray)")
    parser.add_argument("--tenants", help="tenants file (default STATE/tenants.yaml)")
    parser.add_argument("--state", required=True, metavar="DIR", help="folder for the job store (SQLite) and job folders")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=port, default=8470, help="port (default 8470; 0 picks a free one, see STATE/server.json)")
    parser.add_argument("--policy", default="streammap", choices=["streammap", "drf", "fifo"], help="admission policy")
    parser.add_argument("--mapper", default="auto", help="mapper that re-maps each job onto its granted devices")
    parser.add_argument("--emulate", action="store_true", help="run GPU plans on the CPU (a machine without the GPUs)")
    parser.add_argument("--backend", choices=["local", "ray"], default="local", help="executor (ray for multi-node clusters)")
    parser.add_argument("--address", help="with --backend ray: the Ray cluster address")
    parser.add_argument("--no-isolation", action="store_true",
                        help="run jobs without a sandbox, seeing what the service sees (needed to serve more than "
                             "one tenant on a machine without user namespaces; know what it means)")
    parser.add_argument("--memory-limit", metavar="SIZE",
                        help="default memory of each job process (e.g. 16GiB; a tenant's limits: replace it)")
    parser.add_argument("--cpu-time-limit", metavar="TIME", help="default CPU time of each job process (e.g. 2h)")
    parser.add_argument("--wall-time-limit", metavar="TIME",
                        help="default wall time of a job (e.g. 30min): the service stops it past that")
    parser.add_argument("--check-timeout", type=interval, default=CheckLimits.seconds, metavar="S",
                        help="refuse a submitted program whose check (compile and sizing) takes longer (default %(default)g s)")
    parser.add_argument("--check-memory", type=check_mib, default=CheckLimits.memory_mib, metavar="MIB",
                        help="refuse a submitted program whose check needs more memory (default %(default)d MiB)")
    parser.add_argument("--checks", type=checks, default=CheckLimits.concurrency, metavar="N",
                        help="programs checked at once; more submissions wait their turn (default %(default)d)")
    parser.add_argument("--max-requests", type=max_requests, default=HttpLimits.max_requests, metavar="N",
                        help="requests handled at once; more are answered 503 (default %(default)d)")
    parser.add_argument("--header-timeout", type=interval, default=HttpLimits.head_seconds, metavar="S",
                        help="close a connection that sends no full request head within S seconds (default %(default)g)")
    parser.add_argument("--body-timeout", type=interval, default=HttpLimits.body_seconds, metavar="S",
                        help="answer 408 to a request body that takes longer (default %(default)g s)")
    parser.set_defaults(func=run)


def run(args) -> int:
    tenants = args.tenants or str(Path(args.state) / "tenants.yaml")

    limits = {"memory": _option(args.memory_limit, "--memory-limit", parse_size),
              "cpu_time": _option(args.cpu_time_limit, "--cpu-time-limit", parse_time),
              "wall_time": _option(args.wall_time_limit, "--wall-time-limit", parse_time)}

    def ready(url):
        isolation = json.loads((Path(args.state) / "server.json").read_text()).get("isolation")
        print(f"serving {url} (state {args.state}, policy {args.policy}, isolation {isolation})", flush=True)
    check = CheckLimits(seconds=args.check_timeout, memory_mib=args.check_memory, concurrency=args.checks)
    http = HttpLimits(max_requests=args.max_requests, head_seconds=args.header_timeout,
                      body_seconds=args.body_timeout)
    serve(args.cluster, tenants, args.state, host=args.host, port=args.port, ready=ready, policy=args.policy,
          emulate=args.emulate, backend=args.backend, address=args.address, mapper=args.mapper,
          isolation="none" if args.no_isolation else "auto", limits=limits, check=check, http=http)
    return 0


def _option(text, flag: str, parse):
    if text is None:
        return None
    try:
        value = parse(text)
    except ValueError as exc:
        raise StreamMapError(f"{flag} {text!r}: {exc}") from None
    if value <= 0:
        raise StreamMapError(f"{flag} {text!r}: must be > 0", hint=f"leave {flag} out for no limit")
    return value
