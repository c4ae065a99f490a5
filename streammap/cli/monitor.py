"""``streammap monitor``: the devices of this machine, of a cluster file or of a Ray cluster, live."""

from __future__ import annotations

from streammap.cli.common import interval, port, serve_metrics
from streammap.cluster.model import load_cluster
from streammap.cluster.ray import connect
from streammap.errors import StreamMapError
from streammap.monitoring.live import monitor
from streammap.monitoring.live_ray import RayClusterSampler


def configure(parser, command: str) -> None:
    parser.add_argument("--cluster", metavar="FILE", help="list this cluster file's devices, marking the local ones")
    parser.add_argument("--ray", metavar="ADDRESS", nargs="?", const="auto",
                   help="show every node of the Ray cluster at ADDRESS (default auto), sampled on each node")
    parser.add_argument("--node", help="which node of the cluster file this machine is (default: the host name)")
    parser.add_argument("--interval", type=interval, default=1.0, help="seconds between refreshes (default 1)")
    parser.add_argument("--once", action="store_true", help="print one table and exit")
    parser.add_argument("--count", type=int, help="stop after this many refreshes")
    parser.add_argument("--metrics-port", type=port, metavar="PORT", help="also serve the device metrics on this port")
    parser.add_argument("--metrics-addr", default="127.0.0.1", help="address to serve metrics on (default 127.0.0.1)")
    parser.add_argument("--dcgm-names", action="store_true", help="also export DCGM exporter metric names")
    parser.set_defaults(func=run)


def run(args) -> int:

    if args.ray and (args.cluster or args.node):
        raise StreamMapError(f"--ray and {'--cluster' if args.cluster else '--node'} both say which devices to show",
                             hint="--ray shows every node of the Ray cluster; --cluster and --node a cluster file's")
    cluster = load_cluster(args.cluster) if args.cluster else None
    ray = own = sampler = None
    if args.ray:
        ray, own = connect(args.ray)              # "auto": a running cluster, never a new one
    metrics = None
    try:
        kw = {}
        if ray is not None:
            sampler = RayClusterSampler(ray, timeout=min(max(args.interval, 0.2), 5.0))
            kw = {"samplers": [sampler], "where": "Ray node", "title": f"devices of the Ray cluster at {args.ray}"}
        if args.metrics_port is not None:
            metrics = serve_metrics(args)
        return monitor(cluster, node=args.node, interval=args.interval, once=args.once, count=args.count,
                       metrics=metrics, **kw)
    finally:
        if metrics is not None:
            metrics.close()
        if sampler is not None:
            sampler.close()
        if own:
            ray.shutdown()
