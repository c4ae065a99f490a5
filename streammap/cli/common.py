"""What the commands share: the console they print to, ``-D NAME=VALUE`` parsing, and serving metrics."""

from __future__ import annotations

import sys

from rich.console import Console

from streammap.errors import StreamMapError
from streammap.monitoring.metrics import open_metrics


def console() -> Console:
    """Standard output; wide when it is not a terminal, so tables in logs do not wrap."""
    return Console(highlight=False, width=None if sys.stdout.isatty() else 200)


def parse_defines(defines: list[str]) -> dict:
    params = {}
    for item in defines:
        name, eq, value = item.partition("=")
        if not eq or not name.strip().isidentifier() or not value.strip():
            raise StreamMapError(f"-D {item!r}: expected NAME=VALUE", hint="for example -D N=65536 or -D N='1<<16'")
        params[name.strip()] = value.strip()
    return params


def serve_metrics(args):
    """The :class:`~streammap.monitoring.metrics.RunMetrics` that ``--metrics-port`` (with ``--metrics-addr``
    and ``--dcgm-names``) asks for, served, with a line on stderr saying where; the caller closes it."""

    metrics, _ = open_metrics(args.metrics_port, dcgm_names=getattr(args, "dcgm_names", False),
                              addr=getattr(args, "metrics_addr", "127.0.0.1"))
    Console(stderr=True, highlight=False).print(
        f"serving metrics on http://{metrics.addr}:{metrics.port}/metrics", markup=False)
    return metrics
