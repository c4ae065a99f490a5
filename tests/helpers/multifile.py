"""Multi-file programs: a program with a helper module beside it, and one with a local package.

Each ``write_*`` function writes the program and its modules into a folder and returns the
program's path. Both programs save their result with plain Python (``python prog.py OUT.npy``),
so a test compares what StreamMAP computes with what Python computes (:func:`plain_python`).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np

#: A one-CPU cluster (runs without emulation anywhere).
ONE_CPU = {"name": "one", "nodes": [{"name": "n0", "devices": [{"name": "cpu", "kind": "cpu"}]}]}
#: Two emulated GPUs and a CPU on one node (a job service's grant; Ray's fake GPUs).
TWO_GPUS = {"name": "two", "nodes": [{"name": "node0", "link": {"bandwidth": "300 GB/s"}, "devices": [
    {"name": "gpu0", "kind": "gpu", "vendor": "nvidia", "model": "A100", "memory": "80GiB"},
    {"name": "gpu1", "kind": "gpu", "vendor": "nvidia", "model": "A100", "memory": "80GiB"},
    {"name": "cpu", "kind": "cpu", "memory": "64GiB"}]}]}

_MAIN = '''
if __name__ == "__main__":
    import sys
    np.save(sys.argv[1], np.asarray(main()))
'''

TWO_FILE = '''\
import numpy as np

import helpers

# @stream param
N = 16


# @stream kernel(flops=N, out=8*N)
def ramp():
    return helpers.ramp(N)


# @stream kernel(flops=N, out=8*N)
def smooth(x, k):
    return helpers.smooth(x, k)


# @stream graph
def main():
    x = ramp()
    return smooth(smooth(x, 1), 2)
''' + _MAIN

HELPERS = '''\
import numpy as np

WEIGHT = 0.25


def ramp(n):
    return np.linspace(0.0, 1.0, n) ** 2


def smooth(x, k):
    return (1 - WEIGHT) * x + WEIGHT * np.roll(x, k)
'''

PACKAGE = '''\
import numpy as np

from mypkg import util

# @stream param
N = 12


# @stream kernel(flops=N, out=8*N)
def make(k):
    return util.scaled(np.arange(N, dtype=np.float64), k)


# @stream kernel(flops=N, out=8)
def total(a, b):
    import mypkg.stats          # imported in the kernel's body, when it runs
    return np.array([mypkg.stats.weighted(a, b)])


# @stream graph
def main():
    return total(make(1), make(2))
''' + _MAIN

PACKAGE_FILES = {
    "mypkg/__init__.py": "from .util import scaled\n",
    "mypkg/util.py": "from . import consts\n\n\ndef scaled(a, k):\n    return a * consts.FACTOR + k\n",
    "mypkg/consts.py": "FACTOR = 3.0\n",
    "mypkg/stats.py": "from .consts import FACTOR\n\n\ndef weighted(a, b):\n    return float((a * b).sum() / FACTOR)\n",
}


def write_files(folder, files: dict[str, str]) -> None:
    """Write ``{relative path: text}`` under ``folder``, making sub-folders."""
    for rel, text in files.items():
        path = Path(folder) / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")


def write_two_file(folder, name: str = "prog.py") -> Path:
    """``prog.py`` importing ``helpers.py`` beside it."""
    write_files(folder, {name: TWO_FILE, "helpers.py": HELPERS})
    return Path(folder) / name


def write_package(folder, name: str = "pkgprog.py") -> Path:
    """``pkgprog.py`` importing the local package ``mypkg`` (relative imports inside it, one
    submodule imported only in a kernel's body)."""
    write_files(folder, {name: PACKAGE, **PACKAGE_FILES})
    return Path(folder) / name


def plain_python(program) -> np.ndarray:
    """What ``python program OUT.npy`` computes, run in the program's folder."""
    program = Path(program)
    out = program.parent / f"{program.stem}.plain.npy"
    subprocess.run([sys.executable, program.name, str(out)], cwd=program.parent, check=True)
    return np.load(out)
