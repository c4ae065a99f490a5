"""Spilling at run time: keep each device's real memory within its capacity under oversubscription.

The policy is :class:`streammap.placement.spilling.SpillBook`'s (the compiler charges the same decisions in
its estimates); this module moves the arrays it names and measures what that costs.

State
-----
``book``     the :class:`~streammap.placement.spilling.SpillBook`, keyed by task index (results) and plan
             device id, fed with real array sizes (``nbytes``).
``lock``     one lock around every book update and the moves it asks for, so that a result is
             never spilled while another thread restores or frees it.
``seconds``  per device, the time spent moving arrays to the host and back.

Moves: a spilled result becomes a :class:`Spilled` holding its host copy (``cupy`` arrays:
``.get()``; in emulation, where device memory is an accounted budget, a NumPy copy, so the bytes
really move); a restore copies it back onto its device (``cupy.asarray`` under that device, or a
NumPy copy). Inputs of running tasks are pinned and never spilled. No CUDA managed memory is used:
a restore allocates ordinary device memory that the book has just made room for.
"""

from __future__ import annotations

import threading
import time

import numpy

from streammap.placement.spilling import SpillBook
from streammap.runtime.devices import leaves, map_leaves
from streammap.runtime.guard import freeze


class Spilled:
    """A result moved to host memory (``host``: the same structure with NumPy arrays)."""

    __slots__ = ("host",)

    def __init__(self, host):
        self.host = host


def nbytes_of(value) -> float:
    """Bytes of the arrays in ``value`` (walks tuples, lists and dict values)."""
    return float(sum(float(x.nbytes) for x in leaves(value)
                     if getattr(x, "nbytes", None) is not None and hasattr(x, "shape")))


def _leaf_to_host(v):
    if isinstance(v, numpy.ndarray):
        return v.copy()
    if hasattr(v, "get") and hasattr(v, "shape") and hasattr(v, "data"):   # a CuPy array
        return v.get()
    return v


def _to_host(v):
    return freeze(map_leaves(v, _leaf_to_host))       # read by consumers: read-only like any input


def _to_device(v, dev):
    if getattr(dev, "is_gpu", False):
        with dev.device, dev.stream:          # the device's own stream; complete before use
            out = dev._bring(v, None)
            dev.stream.synchronize()
        return out
    return freeze(map_leaves(v, lambda a: a.copy() if isinstance(a, numpy.ndarray) else a))


class HostView:
    """``results`` as kernels' argument getters read them: a spilled result reads as its host
    copy (for a consumer on another device; the owner's own consumers restore it first)."""

    __slots__ = ("results",)

    def __init__(self, results: list):
        self.results = results

    def __getitem__(self, i):
        v = self.results[i]
        return v.host if type(v) is Spilled else v


class Spiller:
    """Carries out a :class:`SpillBook`'s decisions on an executor's ``results``.

    Parameters
    ----------
    capacity : dict
        Real capacity in bytes per plan device id (the plan's ``devices[].memory``).
    consumers, owner : dict
        Per result (task index): plan positions of its consumers, and its device id.
    results, events : list or dict
        The executor's result slots and GPU events (a result is complete once its event is);
        ``events`` is ``None`` where every result is complete when stored (the Ray actors, whose
        ``results`` is a dict by task id).
    devices : dict
        Executor devices by id.
    """

    def __init__(self, capacity: dict, consumers: dict, owner: dict, results: list, events: list, devices: dict):
        self.book = SpillBook(capacity, consumers, owner)
        self.lock = threading.Lock()
        self.results = results
        self.events = events
        self.devices = devices
        self.seconds = {d: 0.0 for d in capacity}

    def admit(self, k, dev: str, inputs, reserve: float, pos=None) -> None:
        """Before task ``k`` (plan position ``pos``, default ``k``) runs on ``dev``: pin and
        restore its inputs, make room for its output."""
        with self.lock:
            restores, spills = self.book.admit(k, k if pos is None else pos, dev, inputs, reserve)
            self._move(spills, restores)

    def finish(self, k: int, dev: str, inputs, stored: bool) -> None:
        """After task ``k``: account its output, unpin its inputs, spill if over capacity."""
        with self.lock:
            out = nbytes_of(self.results[k]) if stored else None
            spills = self.book.finish(k, dev, inputs, out)
            self._move(spills, ())

    def hold(self, key, dev: str, nbytes: float, spilled: bool = False, pinned: bool = False) -> None:
        """Account bytes already on ``dev`` (:meth:`SpillBook.hold`), making room for them."""
        with self.lock:
            self._move(self.book.hold(key, dev, nbytes, spilled=spilled, pinned=pinned), ())

    def unpin(self, key) -> None:
        """Pinned bytes held with :meth:`hold` leave."""
        with self.lock:
            self.book.unpin(key)

    def release(self, i: int) -> None:
        """Result ``i`` is freed (its last consumer finished)."""
        with self.lock:
            self.book.release(i)
            if isinstance(self.results, dict):
                self.results.pop(i, None)
            else:
                self.results[i] = None

    def _move(self, spills, restores) -> None:
        results, events = self.results, self.events
        for i, d in spills:
            t = time.perf_counter()
            v = results.get(i) if type(results) is dict else results[i]
            if v is not None and not isinstance(v, Spilled):
                ev = events[i] if events is not None else None
                if ev is not None:
                    ev.synchronize()
                results[i] = Spilled(_to_host(v))
            self.seconds[d] = self.seconds.get(d, 0.0) + time.perf_counter() - t
        for i, d in restores:
            t = time.perf_counter()
            v = results.get(i) if type(results) is dict else results[i]
            if isinstance(v, Spilled):
                results[i] = _to_device(v.host, self.devices[d])
                if events is not None:
                    events[i] = None
            self.seconds[d] = self.seconds.get(d, 0.0) + time.perf_counter() - t

    def report(self) -> dict:
        """Per device id: spilled/restored bytes, counts, overflow and seconds."""
        out = {}
        for d, st in self.book.stats().items():
            rec = st.as_dict()
            rec["seconds"] = self.seconds.get(d, 0.0)
            out[d] = rec
        return out
