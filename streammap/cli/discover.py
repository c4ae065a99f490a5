"""``streammap discover``: describe this machine's devices (or a Ray cluster's) as a cluster file."""

from __future__ import annotations

import sys

from streammap.cli.common import console
from streammap.cluster.discover import calibrate, discover, format_cluster, write_cluster
from streammap.cluster.ray import discover_ray


def configure(parser, command: str) -> None:
    parser.add_argument("-o", "--output", help="write the cluster file here (default: print it)")
    parser.add_argument("--node", help="node name (default: the host name)")
    parser.add_argument("--name", default="local", help="cluster name (default: local)")
    parser.add_argument("--ray", metavar="ADDRESS", nargs="?", const="auto",
                   help="discover every node of the Ray cluster at ADDRESS (default auto); node names from "
                        "the 'streammap-node' label, else the host name")
    parser.add_argument("--no-calibrate", dest="calibrate", action="store_false",
                        help="skip the micro-benchmarks (a GEMM and a copy per device, under a second each) that "
                             "record achieved_flops and achieved_bandwidth for the cost model")
    parser.set_defaults(func=run)


def run(args) -> int:
    if args.ray:
        found = discover_ray(None if args.ray == "auto" else args.ray,
                             cluster_name=args.name if args.name != "local" else "ray")
    else:
        found = discover(node_name=args.node, cluster_name=args.name)
        if args.calibrate:
            found = calibrate(found)
    spec = found.spec
    out = console()
    if args.output:
        write_cluster(spec, args.output, found.notes)
        gpus = sum(1 for n in spec.nodes for d in n.devices if d.kind == "gpu")
        out.print(f"wrote {args.output}: {len(spec.nodes)} node(s), {gpus} GPU(s), "
                  f"{sum(len(n.devices) for n in spec.nodes)} device(s) [{found.status}]", markup=False)
    else:
        sys.stdout.write(format_cluster(spec, found.notes))
    return 0
