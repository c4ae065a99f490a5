"""The front end on programs of 1,000 to 100,000 explicit kernel calls (issue 16, item 3).

Target: a program that unrolls 100,000 calls compiles in at most 20 s, the whole
``streammap compile prog.py --cluster local`` command in a child process (interpreter start,
imports, front end, cost model, mapping, plan written); and the front end's cost per call is
reported beside libcst's parse time of the same file, the floor of any libcst-based front end.

The program (:func:`unrolled_program`) is what a code generator or a long hand-written pipeline
gives: a graph body of ``n`` explicit call lines, one task each, no loops. It is a chain
``x{i} = step(x{i-1}, i)`` in which every tenth call is a ``pair(x{i-1}, x{i-5})`` instead, so
``x{i-5}`` fans out to two readers and ``pair`` fans in two chains.

In the benchmark's own process, each stage of the front end is timed on its own (median of a few
runs; one at 100,000 calls; the front end's own stages with the cyclic garbage collector paused,
as :func:`~streammap.directives.parse_program` runs them): ``libcst parse`` (the baseline), ``scan`` (tokenize, ``ast`` and the
directives, :func:`streammap.directives.scan.scan`), ``read`` (the directives' meaning,
:func:`~streammap.directives.program.read_program`), ``build`` (the graph body executed into the
IR, :func:`~streammap.directives.build.build_graph`) and ``front end`` (all of it,
:func:`~streammap.directives.parse_program`), with ``µs/call`` = front end / calls. Then the whole
command runs in a child, with its wall time and peak RSS (``ru_maxrss`` of the child, read by a
small parent process that waits for it alone). ``--profile`` writes a cProfile of the front end
at the largest size, sorted by cumulative time.

    nice -n 10 .venv/bin/python benchmarks/frontend_scale.py                # 1k, 10k, 100k
    nice -n 10 .venv/bin/python benchmarks/frontend_scale.py --calls 1000 10000 --no-command
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import sys
import tempfile
from pathlib import Path

import libcst

from streammap.bench.timing import timed, timed_child
from streammap.directives import gc_paused, parse_program, read_program
from streammap.directives.build import build_graph
from streammap.directives.scan import scan

#: Issue 16's target for the whole compile command of a 100,000-call program, seconds.
TARGET_100K_S = 20.0

HEADER = '''"""A generated pipeline of {n:,} explicit kernel calls."""
import numpy as np

# @stream param
N = 1024
# @stream param
PARTS = 4
CHUNK = N // PARTS                    # derived from params


# @stream kernel(flops=N, out=8*N)
def start():
    return np.zeros(N)


# @stream kernel(flops=2*N, bytes=16*N, out=8*N)
def step(x, k):
    return x + k


# @stream kernel(flops=N, bytes=8*CHUNK, out=8*N)
def pair(a, b):
    return a - b


# @stream graph
def pipeline():
'''


def unrolled_program(n: int) -> str:
    """A program whose graph body is ``n`` explicit kernel calls (see the module docstring)."""
    lines = [HEADER.format(n=n), "    x0 = start()\n"]
    for i in range(1, n):
        if i % 10 == 0 and i >= 5:
            lines.append(f"    x{i} = pair(x{i - 1}, x{i - 5})\n")
        else:
            lines.append(f"    x{i} = step(x{i - 1}, {i})\n")
    lines.append(f"    return x{n - 1}\n")
    return "".join(lines)


def stages(path: Path, repeat: int) -> dict:
    """Seconds of each front-end stage on ``path`` (median of ``repeat``), and the task count."""
    text = path.read_text()
    row = {}
    row["libcst_s"], _ = timed(lambda: libcst.parse_module(text), repeat)
    with gc_paused():                   # as parse_program runs them
        row["scan_s"], _ = timed(lambda: scan(path), repeat)
        row["read_s"], prog = timed(lambda: read_program(path), repeat)
        params = prog.param_values()
        entry = prog.entry_point()
        row["build_s"], _ = timed(lambda: build_graph(prog, params, entry), repeat)
    row["front_end_s"], graph = timed(lambda: parse_program(path), repeat)
    row["tasks"] = graph.number_of_nodes()
    return row


def command(path: Path, tmp: Path, env: dict) -> dict:
    """Wall seconds and peak RSS (MiB) of ``streammap compile path --cluster local`` in a child."""
    exe = str(Path(sys.executable).with_name("streammap"))
    argv = [exe, "compile", str(path), "--cluster", "local", "-o", str(tmp / "plan.yaml"), "--no-history"]
    wall, rss, _ = timed_child(argv, env)
    return {"command_s": wall, "command_rss_mib": rss}


def profile(path: Path, out: Path, top: int = 25) -> None:
    """cProfile of the front end on ``path``: the ``top`` functions by cumulative time."""
    prof = cProfile.Profile()
    prof.enable()
    parse_program(path)
    prof.disable()
    with out.open("w") as fh:
        pstats.Stats(prof, stream=fh).sort_stats("cumulative").print_stats(top)
    print(f"  profile of the front end at {path.name}: {out}")


def _format(n: int, row: dict) -> str:
    text = (f"{n:>8,} {row['tasks']:>8,} {row['libcst_s']:>9.3f}s {row['scan_s']:>7.3f}s {row['read_s']:>7.3f}s "
            f"{row['build_s']:>7.3f}s {row['front_end_s']:>9.3f}s {row['front_end_s'] / n * 1e6:>8.1f}"
            f" {row['libcst_s'] / n * 1e6:>8.1f}")
    if "command_s" in row:
        text += f" {row['command_s']:>8.2f}s {row['command_rss_mib']:>7.0f}"
        if n >= 100_000:
            text += f"  target {TARGET_100K_S:g} s: {'met' if row['command_s'] <= TARGET_100K_S else 'MISSED'}"
    return text


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, nargs="+", default=[1000, 10_000, 100_000],
                    help="calls in the generated graph body (default 1000 10000 100000)")
    ap.add_argument("--no-command", action="store_true", help="time the stages only, not the whole command")
    ap.add_argument("--profile", metavar="FILE", help="write a cProfile of the front end at the largest size")
    ap.add_argument("--json", metavar="FILE", help="write the rows as JSON")
    args = ap.parse_args(argv)
    env = dict(os.environ, STREAMMAP_HISTORY=tempfile.mkdtemp(prefix="frontend-history-"))
    print("stages in this process (median); command = `streammap compile --cluster local` in a child")
    print(f"{'calls':>8} {'tasks':>8} {'libcst':>10} {'scan':>8} {'read':>8} {'build':>8} {'front end':>10}"
          f" {'µs/call':>8} {'libcst/c':>8} {'command':>9} {'MiB':>7}")
    rows, missed = [], False
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        for n in args.calls:
            path = tmp / f"unrolled{n}.py"
            path.write_text(unrolled_program(n))
            row = {"calls": n, **stages(path, repeat=1 if n >= 100_000 else 3)}
            if not args.no_command:
                row.update(command(path, tmp, env))
                missed |= n >= 100_000 and row["command_s"] > TARGET_100K_S
            rows.append(row)
            print(_format(n, row), flush=True)
        if args.profile:
            largest = max(args.calls)
            profile(tmp / f"unrolled{largest}.py", Path(args.profile))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
