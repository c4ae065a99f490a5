"""The kernels the compiler's transformations add to a plan: scatter and gather for fission.

They are named ``streammap.scatter`` and ``streammap.gather`` in plans, and the runtime's program
loader resolves those names here instead of in the user's module. Both stay array-library-neutral
(NumPy or CuPy, whichever their input is).

The axis comes from the kernel's ``split`` clause, written before any array existed, so it is
checked against the array that arrives: ``split=1`` on a 1-D array is a :class:`StreamMapError`
saying so, not an ``IndexError`` from inside NumPy.
"""

from __future__ import annotations

import sys

from streammap.errors import StreamMapError


def _xp(a):
    return sys.modules[type(a).__module__.partition(".")[0]]


def scatter(x, parts, axis):
    """Views of ``x`` cut along ``axis``: ``parts`` equal pieces (``numpy.array_split``: the first
    ones one longer), or, for a list of fractions, one piece of each share (rounded to rows)."""
    xp = _xp(x)
    axis = _checked_axis(x, axis)
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
    return _xp(parts[0]).concatenate(parts, axis=_checked_axis(parts[0], axis))


def _checked_axis(x, axis) -> int:
    """``axis`` when ``x`` has it (negative axes count from the end), else a clear error."""
    ndim = len(getattr(x, "shape", ()))
    if isinstance(axis, bool) or not isinstance(axis, int) or not -ndim <= axis < ndim:
        raise StreamMapError(f"split={axis!r} cuts along axis {axis!r}, but the argument has "
                             f"{ndim} dimension{'s' if ndim != 1 else ''}",
                             hint=f"the kernel's split clause must name an axis of its first "
                                  f"argument: 0..{max(ndim - 1, 0)}")
    return axis


#: Plan kernel name -> function.
BUILTIN_KERNELS = {"streammap.scatter": scatter, "streammap.gather": gather}
