"""``streammap show``: a plan or a run record as a table, a Gantt chart, a task graph or an HTML report."""

from __future__ import annotations

from pathlib import Path

from streammap.cli.common import console
from streammap.cost.history import estimate_sources_summary
from streammap.errors import StreamMapError
from streammap.plan import read_plan
from streammap.runrecord import read_run_record
from streammap.views import show
from streammap.views.report import write_report
from streammap.whatif import BACKENDS, what_if


def configure(parser, command: str) -> None:
    parser.add_argument("file", help="plan.yaml or a run record (*.run.json)")
    parser.add_argument("--gantt", metavar="IMAGE", help="write a Gantt chart (png, svg or pdf)")
    parser.add_argument("--graph", metavar="IMAGE", help="write the task graph as a picture (plans)")
    parser.add_argument("--limit", type=int, default=40, help="rows of the task table (0: all; default 40)")
    parser.add_argument("--html", nargs="?", const="", metavar="REPORT.html",
                   help="write the run report (one HTML page + PNGs); default beside the record: OUT.report.html")
    parser.add_argument("--what-if", action="append", metavar="EVENTS",
                        help="re-time the plan with devices or nodes lost, with the runtime's recovery: "
                             "'lose node2@1.2ms, lose gpu3@50%%' (NAME: a node, NODE/DEVICE or a device name; "
                             "TIME: 0.5s, 1.2ms or %% of the makespan; none: at the start)")
    parser.add_argument("--what-if-backend", choices=BACKENDS, default="auto",
                        help="whose recovery --what-if replays: local (drain, re-map), ray (survivors run on, "
                             "re-map); default auto: ray when the plan spans several nodes")
    parser.set_defaults(func=run)


#: What ``show`` reads, by suffix; anything else is refused before it is opened.
SHOWN = {".json": "a run record", ".yaml": "a plan", ".yml": "a plan"}


def run(args) -> int:
    path = Path(args.file)
    if path.suffix.lower() not in SHOWN:
        raise StreamMapError(f"streammap show reads a plan (.yaml) or a run record (.run.json), not "
                             f"{path.name!r}", path=path,
                             hint="outputs (.npz) are NumPy archives: read them with numpy.load")
    is_record = path.suffix.lower() == ".json"
    # Options for the other kind of file are refused here, before anything is printed or drawn.
    if args.what_if and is_record:
        raise StreamMapError("--what-if re-times a plan; give it the plan file", path=path)
    if args.html is not None and not is_record:
        raise StreamMapError("--html writes a run report; give it a run record (*.run.json)", path=path)
    if args.graph and is_record:
        raise StreamMapError("--graph draws a plan's task graph; give it the plan file", path=path)
    out = console()
    if is_record:
        obj = read_run_record(path)
        if obj.status == "incomplete":
            out.print(incomplete_summary(obj), markup=False)
        else:
            out.print(show.run_summary(obj), markup=False)
        out.print(show.run_table(obj, limit=args.limit or None))
    else:
        obj = read_plan(path)
        replay = what_if(obj, args.what_if, backend=args.what_if_backend) if args.what_if else None
        out.print(show.plan_summary(obj), markup=False)
        out.print(estimate_sources_summary(obj), markup=False)
        out.print(show.plan_table(obj, limit=args.limit or None))
        if replay is not None:
            out.print(show.what_if_summary(replay, limit=args.limit or None), markup=False)
    if args.gantt:
        show.gantt(obj, args.gantt)
        out.print(f"wrote {args.gantt}", markup=False)
    if args.html is not None:
        files = write_report(obj, args.html or None, record_path=path)
        out.print(f"wrote {files.html} ({', '.join(map(str, files.images))})", markup=False)
    if args.graph:
        show.graph_picture(obj, args.graph)
        out.print(f"wrote {args.graph}", markup=False)
    return 0


def incomplete_summary(record) -> str:
    """What an ``incomplete`` record tells: the run started and its process ended before the run
    did, so nothing was measured (the record is written at the start and replaced at the end)."""
    mode = f"backend {record.backend}" + (", emulated on the CPU" if record.emulate else "")
    return "\n".join([
        f"run of {record.plan}: INCOMPLETE ({mode}), started {record.started}",
        show.error_line(record.error or "none recorded"),
        "the run never ended: no task time, output or telemetry was recorded (a task shown 'not run' may have "
        "run); the estimates below are the plan's",
        *([f"the plan's {record.planned_tasks} tasks are not listed: its file {record.plan} is gone or has changed"]
          if record.planned_tasks and not record.tasks else []),
    ])
