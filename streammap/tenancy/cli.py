"""The tenancy commands: ``simulate``, ``serve``, and the job client (``submit``, ``queue``,
``status``, ``cancel``, ``logs``, ``result``)."""

from __future__ import annotations


def add_tenancy_parsers(sub) -> None:
    from .simulate import add_simulate_parser
    from .client import add_client_parsers
    add_simulate_parser(sub)
    add_serve_parser(sub)
    add_client_parsers(sub)


def add_serve_parser(sub):
    s = sub.add_parser("serve", help="run the job service: tenants, quotas, fair share, a durable queue")
    s.add_argument("--cluster", required=True, help="cluster.yaml (one node for the local executor; any with Ray)")
    s.add_argument("--tenants", help="tenants file (default STATE/tenants.yaml)")
    s.add_argument("--state", required=True, metavar="DIR", help="folder for the job store (SQLite) and job folders")
    s.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    s.add_argument("--port", type=int, default=8470, help="port (default 8470; 0 picks a free one, see STATE/server.json)")
    s.add_argument("--policy", default="streammap", choices=["streammap", "drf", "fifo"], help="admission policy")
    s.add_argument("--mapper", default="auto", help="mapper that re-maps each job onto its granted devices")
    s.add_argument("--emulate", action="store_true", help="run GPU plans on the CPU (a machine without the GPUs)")
    s.add_argument("--backend", choices=["local", "ray"], default="local", help="executor (ray for multi-node clusters)")
    s.add_argument("--address", help="with --backend ray: the Ray cluster address")
    s.set_defaults(func=_serve)
    return s


def _serve(args) -> int:
    from pathlib import Path
    from .service import serve
    tenants = args.tenants or str(Path(args.state) / "tenants.yaml")

    def ready(url):
        print(f"serving {url} (state {args.state}, policy {args.policy})", flush=True)
    serve(args.cluster, tenants, args.state, host=args.host, port=args.port, ready=ready, policy=args.policy,
          emulate=args.emulate, backend=args.backend, address=args.address, mapper=args.mapper)
    return 0
