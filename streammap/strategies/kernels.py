"""The kernels the compiler's transformations add to a plan: scatter and gather for fission.

They are named ``streammap.scatter`` and ``streammap.gather`` in plans, and the runtime's program
loader resolves those names here instead of in the user's module. Both stay array-library-neutral
(NumPy or CuPy, whichever their input is).
"""

from __future__ import annotations

import sys


def _xp(a):
    return sys.modules[type(a).__module__.partition(".")[0]]


def scatter(x, parts, axis):
    """Views of ``x`` cut along ``axis``: ``parts`` equal pieces (``numpy.array_split``: the first
    ones one longer), or, for a list of fractions, one piece of each share (rounded to rows)."""
    xp = _xp(x)
    if isinstance(parts, int):
        return tuple(xp.array_split(x, parts, axis=axis))
    n = x.shape[axis]
    total = sum(parts)
    bounds, acc = [], 0.0
    for f in parts[:-1]:
        acc += f
        bounds.append(int(round(n * acc / total)))
    return tuple(xp.split(x, bounds, axis=axis))


def gather(parts, axis):
    """The parts joined along ``axis`` (``numpy.concatenate``)."""
    return _xp(parts[0]).concatenate(parts, axis=axis)


#: Plan kernel name -> function.
BUILTIN_KERNELS = {"streammap.scatter": scatter, "streammap.gather": gather}
