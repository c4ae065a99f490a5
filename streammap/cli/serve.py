"""``streammap serve``: the job service (tenants, quotas, fair share, a durable queue)."""

from __future__ import annotations

from pathlib import Path

from streammap.tenancy.api import HttpLimits
from streammap.tenancy.check import CheckLimits
from streammap.tenancy.service import serve


def configure(parser, command: str) -> None:
    parser.add_argument("--cluster", required=True, help="cluster.yaml (one node for the local executor; any with Ray)")
    parser.add_argument("--tenants", help="tenants file (default STATE/tenantparser.yaml)")
    parser.add_argument("--state", required=True, metavar="DIR", help="folder for the job store (SQLite) and job folders")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8470, help="port (default 8470; 0 picks a free one, see STATE/server.json)")
    parser.add_argument("--policy", default="streammap", choices=["streammap", "drf", "fifo"], help="admission policy")
    parser.add_argument("--mapper", default="auto", help="mapper that re-maps each job onto its granted devices")
    parser.add_argument("--emulate", action="store_true", help="run GPU plans on the CPU (a machine without the GPUs)")
    parser.add_argument("--backend", choices=["local", "ray"], default="local", help="executor (ray for multi-node clusters)")
    parser.add_argument("--address", help="with --backend ray: the Ray cluster address")
    parser.add_argument("--check-timeout", type=float, default=CheckLimits.seconds, metavar="S",
                        help="refuse a submitted program whose check (compile and sizing) takes longer (default %(default)g s)")
    parser.add_argument("--check-memory", type=int, default=CheckLimits.memory_mib, metavar="MIB",
                        help="refuse a submitted program whose check needs more memory (default %(default)d MiB)")
    parser.add_argument("--checks", type=int, default=CheckLimits.concurrency, metavar="N",
                        help="programs checked at once; more submissions wait their turn (default %(default)d)")
    parser.add_argument("--max-requests", type=int, default=HttpLimits.max_requests, metavar="N",
                        help="requests handled at once; more are answered 503 (default %(default)d)")
    parser.add_argument("--header-timeout", type=float, default=HttpLimits.head_seconds, metavar="S",
                        help="close a connection that sends no full request head within S seconds (default %(default)g)")
    parser.add_argument("--body-timeout", type=float, default=HttpLimits.body_seconds, metavar="S",
                        help="answer 408 to a request body that takes longer (default %(default)g s)")
    parser.set_defaults(func=run)


def run(args) -> int:
    tenants = args.tenants or str(Path(args.state) / "tenants.yaml")

    def ready(url):
        print(f"serving {url} (state {args.state}, policy {args.policy})", flush=True)
    check = CheckLimits(seconds=args.check_timeout, memory_mib=args.check_memory, concurrency=max(1, args.checks))
    http = HttpLimits(max_requests=max(1, args.max_requests), head_seconds=args.header_timeout,
                      body_seconds=args.body_timeout)
    serve(args.cluster, tenants, args.state, host=args.host, port=args.port, ready=ready, policy=args.policy,
          emulate=args.emulate, backend=args.backend, address=args.address, mapper=args.mapper, check=check,
          http=http)
    return 0
