"""Which device the running kernel is on, and which array module it should use.

Each worker thread of an executor sets its device once, when it starts (:func:`set_current_device`);
kernels ask :func:`array_module` for NumPy or CuPy. The lookup never imports CuPy: a CuPy array can
only exist when ``cupy`` is already in ``sys.modules``.
"""

from __future__ import annotations

import sys
import threading

import numpy

_local = threading.local()


def current_device():
    """The executor device (see :mod:`streammap.runtime.devices`) of this thread, or ``None``
    outside a run."""
    return getattr(_local, "device", None)


def set_current_device(device) -> None:
    """Make ``device`` (an executor device, or ``None``) this thread's current device."""
    _local.device = device


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
    dev = getattr(_local, "device", None)
    return numpy if dev is None else dev.xp
