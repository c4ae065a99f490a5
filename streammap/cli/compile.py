"""``streammap compile``: a program or workflow into a placement plan."""

from __future__ import annotations

import time
from pathlib import Path

from streammap.cli.common import console, parse_defines
from streammap.compiler import compile as compile_plan
from streammap.cost.history import History, estimate_sources_summary, history_dir
from streammap.directives import MAX_TASKS
from streammap.errors import StreamMapError
from streammap.io.files import check_output_path
from streammap.plan import write_plan
from streammap.strategies.explain import strategy_sentence
from streammap.units import format_time


def configure(parser, command: str) -> None:
    parser.add_argument("source", help="a .py file with # @stream directives, or a workflow .json")
    parser.add_argument("--cluster", required=True, help="cluster.yaml, or 'local' to discover this machine now")
    parser.add_argument("-D", dest="defines", action="append", default=[], metavar="NAME=VALUE",
                   help="override a # @stream param (repeatable); VALUE may be an expression")
    parser.add_argument("--entry", help="the # @stream graph function, when the file has several")
    parser.add_argument("--mapper", default="auto", help="mapping algorithm: auto (default), heft, heft-plain, peft, a placement policy (least-loaded, binpack, spread, binpack-node, spread-node, fastest) or pkg.module:Class")
    parser.add_argument("--strategy", default="auto", choices=["auto", "none", "data", "model", "pipeline"],
                   help="parallel strategy: auto (default: the least estimate), none, data (split kernels), "
                        "model (partition by memory), pipeline (stream programs, for throughput)")
    parser.add_argument("-o", "--output", help="plan file (default: SOURCE_STEM.plan.yaml)")
    parser.add_argument("--emit-graph", metavar="FILE", help="also write the task graph as node-link JSON")
    parser.add_argument("--history", metavar="DIR", help="performance history folder (default: $STREAMMAP_HISTORY, else $XDG_DATA_HOME/streammap/history, else ~/.local/share/streammap/history)")
    parser.add_argument("--no-history", action="store_true", help="estimate from clauses only, ignoring measured times")
    add_max_tasks_argument(parser)
    parser.set_defaults(func=run)


def add_max_tasks_argument(parser) -> None:
    """``--max-tasks N``: the task budget of compiling a program (compile, profile, submit)."""
    parser.add_argument("--max-tasks", type=int, default=MAX_TASKS, metavar="N",
                        help=f"refuse a program or workflow of more than N tasks (default {MAX_TASKS})")


def max_tasks(args) -> int:
    """The ``--max-tasks`` value, checked."""
    value = getattr(args, "max_tasks", MAX_TASKS)
    if value < 1:
        raise StreamMapError(f"--max-tasks {value}: must be at least 1")
    return value


def run(args) -> int:
    source = Path(args.source)
    output = check_output_path(args.output or source.stem + ".plan.yaml", "plan")
    if args.emit_graph:
        check_output_path(args.emit_graph, "task graph")
    t0 = time.perf_counter()
    history = None
    if not args.no_history and history_dir(args.history).is_dir():
        history = History.load(args.history)       # kept, to say which measurements went unused
    plan = compile_plan(source, args.cluster, params=parse_defines(args.defines), mapper=args.mapper,
                        entry=args.entry, emit_graph=args.emit_graph,
                        history=history if history is not None else False, strategy=args.strategy,
                        max_tasks=max_tasks(args))
    elapsed = time.perf_counter() - t0
    write_plan(plan, output)
    m = plan.mapper
    used = len({t.device for t in plan.tasks})
    console().print(
        f"wrote {output}: {len(plan.tasks)} tasks on {used} of {len(plan.devices)} devices, "
        f"estimated makespan {format_time(m.estimated_makespan)} (lower bound {format_time(m.lower_bound)}), "
        f"mapper {m.name}, compiled in {format_time(elapsed)}", markup=False)
    console().print(estimate_sources_summary(plan), markup=False)
    stale = history.stale_line() if history is not None else None
    if stale:
        console().print(stale, markup=False)
    if plan.strategy is not None:
        console().print(strategy_sentence(plan), markup=False)
    return 0
