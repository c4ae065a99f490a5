"""The ``streammap`` command: one table of commands, one module per command.

Every command reports bad input as ``file:line:col: error: ...`` with a hint and exits with status
2; a kernel that fails while a valid plan runs exits with status 1; output cut short by its reader
(``| head``) ends quietly with status 141. Output files are written only
once their whole content is ready, so an error never leaves a half-written file behind.

:data:`COMMANDS` names each command's module and its line in ``--help``. A module has
``configure(parser, command)``, which adds the command's arguments and sets ``func(args) -> exit
status`` (``command`` is the name it runs as: :mod:`.jobs` serves six). Only the module of the command being run is
imported: ``streammap run`` does not load the compiler's front end, nor ``streammap show`` the
runtime, and ``streammap --help`` loads none of them.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import select
import sys

from streammap import __version__
from streammap.errors import EXIT_FAILURE, EXIT_USAGE, KernelError, StreamMapError

#: Exit status when the reader of the output went away early: 128 + SIGPIPE, as shells report it.
EXIT_PIPE = 141

#: command -> (module, one-line help), in the order ``--help`` lists them.
COMMANDS: dict[str, tuple[str, str]] = {
    "discover": ("streammap.cli.discover", "describe this machine's devices as a cluster file"),
    "compile": ("streammap.cli.compile", "compile a program or workflow into a placement plan"),
    "show": ("streammap.cli.show", "show a plan or a run record: table, Gantt chart, task graph"),
    "run": ("streammap.cli.run", "run a plan on this machine"),
    "monitor": ("streammap.cli.monitor", "show the devices of this machine or of a cluster live"),
    "profile": ("streammap.cli.profile", "run a program's kernels on this machine's devices and "
                "record their times in the performance history"),
    "bench": ("streammap.cli.bench", "benchmarks: score the mappers side by side"),
    "export": ("streammap.cli.export", "export a plan for another system (k8s: Kubernetes manifests)"),
    "doctor": ("streammap.cli.doctor", "check drivers, CuPy, Ray, Kubernetes, network and storage"),
    "simulate": ("streammap.cli.simulate", "replay job arrivals through the admission policies (fifo, drf, streammap)"),
    "serve": ("streammap.cli.serve", "run the job service: tenants, quotas, fair share, a durable queue"),
    "submit": ("streammap.cli.jobs", "submit a program (or a plan's program) to the job service"),
    "queue": ("streammap.cli.jobs", "the tenant's jobs in the job service"),
    "status": ("streammap.cli.jobs", "one job's state"),
    "cancel": ("streammap.cli.jobs", "cancel a job"),
    "logs": ("streammap.cli.jobs", "a job's log"),
    "result": ("streammap.cli.jobs", "fetch a finished job's outputs (.npz)"),
}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(_command_in(argv))
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_USAGE
    # Errors go out as plain text: a console would wrap long source lines and misplace the caret.
    def err(text: str) -> None:
        print(text, file=sys.stderr)
    # Alerts and re-mapping notices are log records (streammap.monitoring.alerts, streammap.runtime).
    logging.basicConfig(format="streammap: %(message)s", level=logging.WARNING)
    try:
        status = args.func(args) or 0
        sys.stdout.flush()          # a reader gone early shows here, not at exit (a traceback)
        return status
    except BrokenPipeError:
        if not stdout_reader_gone():
            raise                   # a pipe to a child or a socket broke: a failure, not `| head`
        return reader_gone()
    except StreamMapError as exc:
        err(exc.format())
        return EXIT_USAGE
    except KernelError as exc:
        err(exc.format())
        return EXIT_FAILURE
    except KeyboardInterrupt:
        err("interrupted")
        return 130


def stdout_reader_gone() -> bool:
    """Whether standard output is a pipe whose reader has closed it (``poll`` reports an error on
    the write end of such a pipe), as opposed to a broken pipe elsewhere (a worker's, a socket)."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (AttributeError, OSError, ValueError):      # no poll(), no descriptor (captured output)
        return False


def reader_gone() -> int:
    """The reader of standard output went away (``streammap show plan.yaml | head``): the rest of
    the output goes nowhere (so the interpreter's flush at exit cannot fail again), and the status
    is :data:`EXIT_PIPE`, as a shell reports a command ended by SIGPIPE."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return EXIT_PIPE


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The ``streammap`` parser: every command listed, ``command``'s arguments configured (every
    command's when ``command`` is ``None``)."""
    p = argparse.ArgumentParser(prog="streammap", description="Compile # @stream-annotated Python into "
                                "placement plans for GPU clusters, and run them.")
    p.add_argument("--version", action="version", version=f"streammap {__version__}")
    sub = p.add_subparsers(title="commands", metavar="COMMAND")
    for name, (module_name, helptext) in COMMANDS.items():
        parser = sub.add_parser(name, help=helptext)
        if command is None or name == command:
            importlib.import_module(module_name).configure(parser, name)
    return p


def _command_in(argv: list[str]) -> str | None:
    """The command ``argv`` names (its first word that is not an option), if it is one."""
    for word in argv:
        if not word.startswith("-"):
            return word if word in COMMANDS else None
    return ""
