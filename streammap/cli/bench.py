"""``streammap bench mapping``: every mapper on the shared benchmarks and a random-DAG suite, side by side."""

from __future__ import annotations

from streammap.bench.mapping import add_mapping_arguments, run_mapping
from streammap.errors import EXIT_USAGE


def configure(parser, command: str) -> None:
    sub = parser.add_subparsers(title="benchmarks", metavar="BENCHMARK")
    m = sub.add_parser("mapping", help="every mapper on the shared benchmarks and a random-DAG suite: "
                                       "makespan / lower bound, makespan / HEFT, valid share, mapping time")
    add_mapping_arguments(m)
    m.set_defaults(func=run_mapping)
    parser.set_defaults(func=lambda args: (parser.print_help(), EXIT_USAGE)[1])
