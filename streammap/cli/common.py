"""What the commands share: the console they print to, ``-D NAME=VALUE`` parsing, serving metrics,
and the argument types of numbers with a range (a value out of it is a usage error, exit 2, before
anything runs: a port past 65535, an infinite interval or a 100 TB test file used to get far enough
to fail with a traceback, or not to fail at all)."""

from __future__ import annotations

import argparse
import math
import sys

from rich.console import Console

from streammap.errors import StreamMapError
from streammap.monitoring.metrics import open_metrics


class _Console(Console):
    """rich's console, but a reader gone early (``| head``) ends the command as ``print`` does in
    :func:`streammap.cli.main` (rich's own default exits with status 1, which means a failed run)."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError


def console() -> Console:
    """Standard output; wide when it is not a terminal, so tables in logs do not wrap."""
    return _Console(highlight=False, width=None if sys.stdout.isatty() else 200)


#: Longest interval between refreshes or samples (a day): a longer one overflows the clocks.
MAX_INTERVAL = 86_400.0
#: Largest test file ``doctor --size`` writes, in MiB.
MAX_TEST_MIB = 65_536


#: Most timed runs per device ``profile --repeats`` makes.
MAX_REPEATS = 1000


def int_between(low: int, high: int, what: str):
    """An argparse type: an integer from ``low`` to ``high``; anything else is refused as not
    ``what`` (a non-number too, without a traceback)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = low - 1
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{text} is not {what} ({low} to {high})")
        return value
    parse.__name__ = what
    return parse


#: A TCP port, 0 (any free one) to 65535.
port = int_between(0, 65535, "a port")
#: The MiB of ``doctor``'s test file, 1 to :data:`MAX_TEST_MIB`.
test_file_mib = int_between(1, MAX_TEST_MIB, "a size in MiB")
#: Timed runs per device, 1 to :data:`MAX_REPEATS`.
repeats = int_between(1, MAX_REPEATS, "a number of runs")


def number_between(low: float, high: float, what: str):
    """An argparse type: a finite number from ``low`` to ``high``; NaN, infinities and anything
    else are refused as not ``what`` (NaN compares false with everything, so it would pass a
    check written as ``if x < low``)."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not low <= value <= high:                # NaN fails too
            raise argparse.ArgumentTypeError(f"{text} is not {what} ({low:g} to {high:g})")
        return value
    parse.__name__ = what
    return parse


def interval(text: str) -> float:
    """An argparse type: seconds between two events, > 0 and at most :data:`MAX_INTERVAL`."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value <= MAX_INTERVAL:           # NaN fails too
        raise argparse.ArgumentTypeError(f"{text} is not a number of seconds > 0 and at most {MAX_INTERVAL:.0f}")
    return value


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
