"""The ``streammap`` command: discover, compile, show, run.

Every command reports bad input as ``file:line:col: error: ...`` with a hint and exits with status
2; a kernel that fails while a valid plan runs exits with status 1. Output files are written only
once their whole content is ready, so an error never leaves a half-written file behind.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

from rich.console import Console

from . import __version__
from .errors import EXIT_FAILURE, EXIT_USAGE, KernelError, StreamMapError


def main(argv=None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_USAGE
    # Errors go out as plain text: a console would wrap long source lines and misplace the caret.
    def err(text: str) -> None:
        print(text, file=sys.stderr)
    # Alerts and re-mapping notices are log records (streammap.alerts, streammap.runtime).
    logging.basicConfig(format="streammap: %(message)s", level=logging.WARNING)
    try:
        return args.func(args) or 0
    except StreamMapError as exc:
        err(exc.format())
        return EXIT_USAGE
    except KernelError as exc:
        err(exc.format())
        return EXIT_FAILURE
    except KeyboardInterrupt:
        err("interrupted")
        return 130


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="streammap", description="Compile # @stream-annotated Python into "
                                "placement plans for GPU clusters, and run them.")
    p.add_argument("--version", action="version", version=f"streammap {__version__}")
    sub = p.add_subparsers(title="commands", metavar="COMMAND")

    d = sub.add_parser("discover", help="describe this machine's devices as a cluster file")
    d.add_argument("-o", "--output", help="write the cluster file here (default: print it)")
    d.add_argument("--node", help="node name (default: the host name)")
    d.add_argument("--name", default="local", help="cluster name (default: local)")
    d.add_argument("--ray", metavar="ADDRESS", nargs="?", const="auto",
                   help="discover every node of the Ray cluster at ADDRESS (default auto); node names from "
                        "the 'streammap-node' label, else the host name")
    d.set_defaults(func=_discover)

    c = sub.add_parser("compile", help="compile a program or workflow into a placement plan")
    c.add_argument("source", help="a .py file with # @stream directives, or a workflow .json")
    c.add_argument("--cluster", required=True, help="cluster.yaml, or 'local' to discover this machine now")
    c.add_argument("-D", dest="defines", action="append", default=[], metavar="NAME=VALUE",
                   help="override a # @stream param (repeatable); VALUE may be an expression")
    c.add_argument("--entry", help="the # @stream graph function, when the file has several")
    c.add_argument("--mapper", default="auto", help="mapping algorithm: auto (default), heft, heft-plain, peft, a placement policy (least-loaded, binpack, spread, binpack-node, spread-node, fastest) or pkg.module:Class")
    c.add_argument("--strategy", default="auto", choices=["auto", "none", "data", "model", "pipeline"],
                   help="parallel strategy: auto (default: the least estimate), none, data (split kernels), "
                        "model (partition by memory), pipeline (stream programs, for throughput)")
    c.add_argument("-o", "--output", help="plan file (default: SOURCE_STEM.plan.yaml)")
    c.add_argument("--emit-graph", metavar="FILE", help="also write the task graph as node-link JSON")
    c.add_argument("--history", metavar="DIR", help="performance history folder (default: $STREAMMAP_HISTORY, else $XDG_DATA_HOME/streammap/history, else ~/.local/share/streammap/history)")
    c.add_argument("--no-history", action="store_true", help="estimate from clauses only, ignoring measured times")
    c.set_defaults(func=_compile)

    s = sub.add_parser("show", help="show a plan or a run record: table, Gantt chart, task graph")
    s.add_argument("file", help="plan.yaml or a run record (*.run.json)")
    s.add_argument("--gantt", metavar="IMAGE", help="write a Gantt chart (png, svg or pdf)")
    s.add_argument("--graph", metavar="IMAGE", help="write the task graph as a picture (plans)")
    s.add_argument("--limit", type=int, default=40, help="rows of the task table (0: all; default 40)")
    s.add_argument("--html", nargs="?", const="", metavar="REPORT.html",
                   help="write the run report (one HTML page + PNGs); default beside the record: OUT.report.html")
    s.set_defaults(func=_show)

    r = sub.add_parser("run", help="run a plan on this machine")
    r.add_argument("plan", help="plan.yaml")
    r.add_argument("-o", "--output", help="outputs .npz (default: PLAN_STEM.out.npz); the run record goes beside it")
    r.add_argument("--emulate", action="store_true", help="run devices this machine lacks on the CPU (same threads and order)")
    r.add_argument("--backend", choices=["local", "ray"], default="local",
                   help="local (default: this process) or ray (a Ray cluster; pip install 'streammap[cluster]')")
    r.add_argument("--address", help="with --backend ray: the Ray cluster (auto, HOST:PORT); default RAY_ADDRESS or a new local Ray")
    r.add_argument("--max-recoveries", type=int, default=3, metavar="N",
                   help="with --backend ray: recover from at most N lost nodes (default 3)")
    r.add_argument("--record", help="run record path (default: OUTPUT_STEM.run.json)")
    r.add_argument("--no-progress", action="store_true", help="no progress bar")
    r.add_argument("--history", metavar="DIR", help="performance history folder (default: $STREAMMAP_HISTORY, else $XDG_DATA_HOME/streammap/history, else ~/.local/share/streammap/history)")
    r.add_argument("--no-history", action="store_true", help="do not record this run's task times in the performance history")
    from .monitor import add_monitor_parser, add_run_monitoring_arguments
    add_run_monitoring_arguments(r)
    r.set_defaults(func=_run)
    add_monitor_parser(sub)

    from .profile import add_profile_parser
    add_profile_parser(sub)
    from .bench.mapping import add_bench_parser
    add_bench_parser(sub)
    from .k8s import add_export_parser
    add_export_parser(sub)
    from .doctor import add_doctor_parser
    add_doctor_parser(sub)
    from .tenancy.cli import add_tenancy_parsers
    add_tenancy_parsers(sub)
    return p


def _console() -> Console:
    """Standard output; wide when it is not a terminal, so tables in logs do not wrap."""
    return Console(highlight=False, width=None if sys.stdout.isatty() else 200)


def _discover(args) -> int:
    from .discover import discover, format_cluster, write_cluster
    if args.ray:
        from .discover_ray import discover_ray
        found = discover_ray(None if args.ray == "auto" else args.ray,
                             cluster_name=args.name if args.name != "local" else "ray")
    else:
        found = discover(node_name=args.node, cluster_name=args.name)
    spec = found.spec
    out = _console()
    if args.output:
        write_cluster(spec, args.output, found.notes)
        gpus = sum(1 for n in spec.nodes for d in n.devices if d.kind == "gpu")
        out.print(f"wrote {args.output}: {len(spec.nodes)} node(s), {gpus} GPU(s), "
                  f"{sum(len(n.devices) for n in spec.nodes)} device(s) [{found.status}]", markup=False)
    else:
        sys.stdout.write(format_cluster(spec, found.notes))
    return 0


def parse_defines(defines: list[str]) -> dict:
    params = {}
    for item in defines:
        name, eq, value = item.partition("=")
        if not eq or not name.strip().isidentifier() or not value.strip():
            raise StreamMapError(f"-D {item!r}: expected NAME=VALUE", hint="for example -D N=65536 or -D N='1<<16'")
        params[name.strip()] = value.strip()
    return params


def _compile(args) -> int:
    from .compiler import compile as compile_plan
    from .plan import write_plan
    from .units import format_time
    source = Path(args.source)
    output = Path(args.output) if args.output else Path(source.stem + ".plan.yaml")
    t0 = time.perf_counter()
    from .history import History, history_dir
    history = None
    if not args.no_history and history_dir(args.history).is_dir():
        history = History.load(args.history)       # kept, to say which measurements went unused
    plan = compile_plan(source, args.cluster, params=parse_defines(args.defines), mapper=args.mapper,
                        entry=args.entry, emit_graph=args.emit_graph,
                        history=history if history is not None else False, strategy=args.strategy)
    elapsed = time.perf_counter() - t0
    write_plan(plan, output)
    m = plan.mapper
    used = len({t.device for t in plan.tasks})
    _console().print(
        f"wrote {output}: {len(plan.tasks)} tasks on {used} of {len(plan.devices)} devices, "
        f"estimated makespan {format_time(m.estimated_makespan)} (lower bound {format_time(m.lower_bound)}), "
        f"mapper {m.name}, compiled in {format_time(elapsed)}", markup=False)
    from .history import estimate_sources_summary
    _console().print(estimate_sources_summary(plan), markup=False)
    stale = history.stale_line() if history is not None else None
    if stale:
        _console().print(stale, markup=False)
    from .strategies.explain import strategy_sentence
    if plan.strategy is not None:
        _console().print(strategy_sentence(plan), markup=False)
    return 0


def _show(args) -> int:
    from . import show
    path = Path(args.file)
    out = _console()
    if path.suffix == ".json":
        from .runrecord import read_run_record
        obj = read_run_record(path)
        out.print(show.run_summary(obj), markup=False)
        out.print(show.run_table(obj, limit=args.limit or None))
    else:
        from .plan import read_plan
        obj = read_plan(path)
        out.print(show.plan_summary(obj), markup=False)
        from .history import estimate_sources_summary
        out.print(estimate_sources_summary(obj), markup=False)
        out.print(show.plan_table(obj, limit=args.limit or None))
    if args.gantt:
        show.gantt(obj, args.gantt)
        out.print(f"wrote {args.gantt}", markup=False)
    if args.html is not None:
        if path.suffix != ".json":
            raise StreamMapError("--html writes a run report; give it a run record (*.run.json)", path=path)
        from .report import write_report
        files = write_report(obj, args.html or None, record_path=path)
        out.print(f"wrote {files.html} ({', '.join(map(str, files.images))})", markup=False)
    if args.graph:
        if path.suffix == ".json":
            raise StreamMapError("--graph draws a plan's task graph; give it the plan file", path=path)
        show.graph_picture(obj, args.graph)
        out.print(f"wrote {args.graph}", markup=False)
    return 0


def _run(args) -> int:
    from .plan import read_plan
    from .runrecord import run_record_path
    from .runtime import run_plan
    from .units import format_time
    plan_path = Path(args.plan)
    plan = read_plan(plan_path)
    output = Path(args.output) if args.output else plan_path.with_name(plan_path.stem + ".out.npz")
    record = Path(args.record) if args.record else run_record_path(output)
    from .monitor import run_monitoring_kwargs
    monitoring = run_monitoring_kwargs(args)    # a bad alerts file is reported before anything runs
    t0 = time.perf_counter()
    try:
        outputs = run_plan(plan, emulate=args.emulate, outputs_path=output, record_path=record, plan_path=plan_path,
                           progress=not args.no_progress and sys.stderr.isatty(), backend=args.backend,
                           address=args.address, max_recoveries=args.max_recoveries, **monitoring)
    finally:
        if monitoring.get("metrics") is not None:
            monitoring["metrics"].close()
    elapsed = time.perf_counter() - t0
    names = ", ".join(f"{k} {getattr(v, 'shape', ())}" for k, v in outputs.items())
    _console().print(f"ran {len(plan.tasks)} tasks{' on Ray' if args.backend == 'ray' else ''} in {format_time(elapsed)}"
                    f"{' (emulated on the CPU)' if args.emulate else ''}; wrote {output} ({names}) and {record}",
                    markup=False)
    if not args.no_history:
        from .history import record_after_run
        _console().print(record_after_run(plan, record, args.history), markup=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
