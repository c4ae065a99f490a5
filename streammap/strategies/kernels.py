"""The kernels the compiler's transformations add to a plan: scatter and gather for fission.

They are named ``streammap.scatter`` and ``streammap.gather`` in plans, and the runtime's program
loader resolves those names here instead of in the user's module. Both stay array-library-neutral
(NumPy or CuPy, whichever their input is).
"""

from __future__ import annotations

import sys


def _xp(a):
    return sys.modules[type(a).__module__.partition(".")[0]]


def scatter(x, k, axis):
    """``k`` views of ``x`` cut along ``axis`` (``numpy.array_split``: the first ones one longer)."""
    return tuple(_xp(x).array_split(x, k, axis=axis))


def gather(parts, axis):
    """The parts joined along ``axis`` (``numpy.concatenate``)."""
    return _xp(parts[0]).concatenate(parts, axis=axis)


#: Plan kernel name -> function.
BUILTIN_KERNELS = {"streammap.scatter": scatter, "streammap.gather": gather}
