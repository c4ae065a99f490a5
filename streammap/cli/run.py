"""``streammap run``: run a plan on this machine (or a Ray cluster), with its monitoring options."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from streammap.cli.common import console, interval, port, serve_metrics
from streammap.cost.history import record_after_run
from streammap.io.files import check_output_path
from streammap.monitoring.alerts import load_alert_config
from streammap.monitoring.options import MonitorOptions
from streammap.plan import read_plan
from streammap.runrecord import run_record_path
from streammap.runtime import run_plan
from streammap.units import format_time


def configure(parser, command: str) -> None:
    parser.add_argument("plan", help="plan.yaml")
    parser.add_argument("-o", "--output", help="outputs .npz (default: PLAN_STEM.out.npz); the run record goes beside it")
    parser.add_argument("--emulate", action="store_true", help="run devices this machine lacks on the CPU (same threads and order)")
    parser.add_argument("--backend", choices=["local", "ray"], default="local",
                   help="local (default: this process) or ray (a Ray cluster; pip install 'streammap[cluster]')")
    parser.add_argument("--address", help="with --backend ray: the Ray cluster (auto, HOST:PORT); default RAY_ADDRESS or a new local Ray")
    parser.add_argument("--max-recoveries", type=int, default=3, metavar="N",
                   help="with --backend ray: recover from at most N lost nodes (default 3)")
    parser.add_argument("--record", help="run record path (default: OUTPUT_STEM.run.json)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--check-inputs", action="store_true",
                        help="checksum every kernel's array inputs before and after each call and fail when a kernel "
                             "changed one (for GPUs: NumPy inputs are always read-only); costs two passes over the inputs")
    parser.add_argument("--history", metavar="DIR", help="performance history folder (default: $STREAMMAP_HISTORY, else $XDG_DATA_HOME/streammap/history, else ~/.local/share/streammap/history)")
    parser.add_argument("--no-history", action="store_true", help="do not record this run's task times in the performance history")
    add_monitoring_arguments(parser)
    parser.set_defaults(func=run)


def run(args) -> int:
    plan_path = Path(args.plan)
    plan = read_plan(plan_path)
    output = check_output_path(args.output or plan_path.with_name(plan_path.stem + ".out.npz"), "outputs")
    record = check_output_path(args.record, "run record") if args.record else run_record_path(output)
    monitoring = monitoring_options(args)    # a bad alerts file is reported before anything runs
    t0 = time.perf_counter()
    try:
        outputs = run_plan(plan, emulate=args.emulate, outputs_path=output, record_path=record, plan_path=plan_path,
                           progress=not args.no_progress and sys.stderr.isatty(), backend=args.backend,
                           address=args.address, max_recoveries=args.max_recoveries, monitoring=monitoring,
                           check_inputs=args.check_inputs)
    finally:
        if monitoring.metrics is not None:       # served here (serve_metrics), so closed here
            monitoring.metrics.close()
    elapsed = time.perf_counter() - t0
    names = ", ".join(f"{k} {getattr(v, 'shape', ())}" for k, v in outputs.items())
    console().print(f"ran {len(plan.tasks)} tasks{' on Ray' if args.backend == 'ray' else ''} in {format_time(elapsed)}"
                    f"{' (emulated on the CPU)' if args.emulate else ''}; wrote {output} ({names}) and {record}",
                    markup=False)
    if not args.no_history:
        console().print(record_after_run(plan, record, args.history), markup=False)
    return 0


def add_monitoring_arguments(parser) -> None:
    """The monitoring options of ``streammap run``."""
    parser.add_argument("--metrics-port", type=port, metavar="PORT",
                        help="serve Prometheus metrics (streammap_*) on this port during the run (0: any free port)")
    parser.add_argument("--metrics-addr", default="127.0.0.1", metavar="ADDR",
                        help="address to serve metrics on (default 127.0.0.1; 0.0.0.0 for every interface)")
    parser.add_argument("--dcgm-names", action="store_true",
                        help="also export GPU metrics under the DCGM exporter's names (DCGM_FI_DEV_*)")
    parser.add_argument("--alerts", metavar="FILE", help="alert thresholds and re-mapping settings (YAML)")
    parser.add_argument("--no-telemetry", action="store_true", help="do not sample the devices during the run")
    parser.add_argument("--sample-interval", type=interval, metavar="SECONDS",
                        help="seconds between telemetry samples (default 0.2)")


def monitoring_options(args) -> MonitorOptions:
    """The run's :class:`~streammap.monitoring.options.MonitorOptions` from the options above.
    Loads the alerts file now, so that a bad file is reported before anything runs; with
    ``--metrics-port``, serves the metrics now (the caller closes ``metrics``)."""

    kw: dict = {"telemetry": not getattr(args, "no_telemetry", False)}
    if getattr(args, "sample_interval", None):
        kw["interval"] = args.sample_interval
    if getattr(args, "alerts", None):
        kw["alerts"] = load_alert_config(args.alerts)
    if getattr(args, "metrics_port", None) is not None:
        kw["metrics"] = serve_metrics(args)
    return MonitorOptions(**kw)
