"""Timing helpers the benchmark scripts share: a median over repeats, and a whole command in a child.

``timed`` times an inner function in this process; ``timed_child`` times what the user waits for,
the whole command in its own process, with that process's peak memory, so a benchmark can print
the two side by side.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from typing import Any, Callable

#: The small process that starts the measured command and waits for it alone (see
#: :func:`timed_child`).
_PROBE = ("import resource, subprocess, sys, time, json\n"
          "t0 = time.perf_counter()\n"
          "r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)\n"
          "wall = time.perf_counter() - t0\n"
          "ru = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
          "print(json.dumps({'wall': wall, 'rss_kib': ru.ru_maxrss, 'cpu': ru.ru_utime + ru.ru_stime, "
          "'rc': r.returncode, 'err': r.stderr[-2000:]}))\n")


def timed(fn: Callable[[], Any], repeat: int = 5) -> tuple[float, Any]:
    """``(median seconds of fn() over repeat calls, the last call's result)``."""
    times, result = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), result


def timed_child(argv: list[str], env: dict) -> tuple[float, float, dict]:
    """Run ``argv`` in a child; return (wall seconds, the child's peak RSS in MiB, its record).

    ``ru_maxrss`` of ``RUSAGE_CHILDREN`` is the largest of all the children a process has waited
    for, so each measured command is started by a fresh small ``python -c`` process that waits for
    it alone and reports its wall time and that figure: the command's own peak. The record also
    holds ``cpu`` (the command's user + system seconds).

    Raises
    ------
    SystemExit
        When the command fails, with its exit status and the end of its stderr.
    """
    out = subprocess.run([sys.executable, "-c", _PROBE, *argv], capture_output=True, text=True, env=env,
                         check=True)
    rec = json.loads(out.stdout)
    if rec["rc"] != 0:
        raise SystemExit(f"{' '.join(argv)} failed (exit {rec['rc']}):\n{rec['err']}")
    return rec["wall"], rec["rss_kib"] / 1024.0, rec
