"""Which device the running kernel is on, and which array module it should use.

Each worker thread of an executor sets its device when it starts, or when it takes another device
(:func:`set_current_device`); kernels ask :func:`array_module` for NumPy or CuPy. The lookup never
imports CuPy: a CuPy array can only exist when ``cupy`` is already in ``sys.modules``.

State: a thread's current device is the item of a one-item list, the thread's *cell*
(:func:`device_cell`), kept as an attribute of a ``threading.local``. Setting a thread-local
attribute costs ~0.1 µs; a host pool thread that follows a chain across devices changes device
for every task, so it takes its cell once and stores into it.
"""

from __future__ import annotations

import sys
import threading

import numpy

_local = threading.local()


def current_device():
    """The executor device (see :mod:`streammap.runtime.devices`) of this thread, or ``None``
    outside a run."""
    cell = getattr(_local, "cell", None)
    return None if cell is None else cell[0]


def set_current_device(device) -> None:
    """Make ``device`` (an executor device, or ``None``) this thread's current device."""
    device_cell()[0] = device


def device_cell() -> list:
    """This thread's cell (see the module docstring): ``cell[0] = device`` makes ``device`` its
    current device, as :func:`set_current_device` does."""
    cell = getattr(_local, "cell", None)
    if cell is None:
        cell = _local.cell = [None]
    return cell


def array_module(*arrays):
    """The array module to use: ``cupy`` or ``numpy``.

    With arguments: the module of the first argument that is an array (a CuPy array gives
    ``cupy``, anything else ``numpy``); arguments that are not arrays (scalars, ``None``) are skipped.
    With no array among the arguments: the module of the device running the current kernel
    (``cupy`` on a GPU, ``numpy`` on a CPU and under ``--emulate``), and ``numpy`` outside a run.
    """
    if arrays:
        cupy = sys.modules.get("cupy")
        cupy_ndarray = getattr(cupy, "ndarray", None) if cupy is not None else None
        for a in arrays:
            if cupy_ndarray is not None and isinstance(a, cupy_ndarray):
                return cupy
            if isinstance(a, numpy.ndarray):
                return numpy
    cell = getattr(_local, "cell", None)
    dev = None if cell is None else cell[0]
    return numpy if dev is None else dev.xp
