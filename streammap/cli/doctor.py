"""``streammap doctor``: is this machine (and cluster) ready to run plans?"""

from __future__ import annotations

import time

from streammap.cli.common import test_file_mib
from streammap.cluster.doctor import format_checks, run_checks
from streammap.errors import EXIT_FAILURE


def configure(parser, command: str) -> None:
    parser.add_argument("--cluster", metavar="FILE", help="a cluster file: validated, and its network claim checked with --ray")
    parser.add_argument("--ray", metavar="ADDRESS", help="connect to this Ray cluster and measure between two nodes")
    parser.add_argument("--path", help="folder whose storage throughput to measure (default: the temporary folder)")
    parser.add_argument("--size", type=test_file_mib, default=32, metavar="MiB", help="MiB written and read (default 32; at most 65536)")
    parser.add_argument("--no-calibrate", dest="calibrate", action="store_false",
                        help="skip measuring each device (a GEMM and a copy, under a second per device)")
    parser.set_defaults(func=run)


def run(args) -> int:
    t0 = time.perf_counter()
    checks = run_checks(cluster_file=args.cluster, ray_address=args.ray, path=args.path, size_mb=args.size,
                        calibrate_devices=args.calibrate)
    print(format_checks(checks) + f" ({time.perf_counter() - t0:.1f} s)")
    return EXIT_FAILURE if any(c.status == "fail" for c in checks) else 0
