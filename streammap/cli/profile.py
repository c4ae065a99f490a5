"""``streammap profile``: run a program's kernels on this machine's devices and record their times."""

from __future__ import annotations

from streammap.cli.common import console, parse_defines, repeats
from streammap.cli.compile import add_max_tasks_argument, max_tasks
from streammap.cost.calibrate import profile


def configure(parser, command: str) -> None:
    parser.add_argument("source", help="a .py file with # @stream directives")
    parser.add_argument("-D", dest="defines", action="append", default=[], metavar="NAME=VALUE",
                   help="override a # @stream param (repeatable): profile at the sizes you compile for")
    parser.add_argument("--entry", help="the # @stream graph function, when the file has several")
    parser.add_argument("--repeats", type=repeats, default=3,
                        help="timed runs per device after one warm-up (default 3; at most 1000)")
    parser.add_argument("--device", dest="devices", action="append", default=[], metavar="NAME",
                   help="profile only this device (name such as cpu or gpu1, a kind, or a model substring; repeatable)")
    parser.add_argument("--history", metavar="DIR", help="history folder (default: $STREAMMAP_HISTORY, else "
                   "$XDG_DATA_HOME/streammap/history, else ~/.local/share/streammap/history)")
    add_max_tasks_argument(parser)
    parser.set_defaults(func=run)


def run(args) -> int:
    """Handler of ``streammap profile``: run :func:`profile`, print the table and notes."""
    rep = profile(args.source, params=parse_defines(args.defines), repeats=args.repeats,
                  devices=args.devices or None, history_dir=args.history, entry=args.entry,
                  max_tasks=max_tasks(args))
    out = console()
    if rep.rows:
        out.print(rep.table())
    for note in rep.notes:
        out.print(f"note: {note}", markup=False)
    out.print(f"recorded {rep.records} measurement(s) on {len(rep.devices)} device(s) in {rep.history}",
              markup=False)
    return 0 if rep.devices else 1
