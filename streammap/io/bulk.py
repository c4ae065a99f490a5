"""Building large plain-data structures with the cyclic garbage collector paused.

State: none of its own; it switches the interpreter-wide collector (``gc``) off and back on.

Why: reading or writing a 10,000-task plan or workflow makes a few hundred thousand small objects
(YAML nodes, dicts, lists, networkx attribute dicts). Each allocation counts towards the
collector's thresholds, so it runs again and again, and each older-generation pass walks every
object the process holds, which grows as the structure does: most of the time it took to turn a
10,000-task plan into YAML nodes was the collector, finding nothing (these structures are trees).

Policy: :func:`gc_paused` around a bulk build only, never around user code or waiting. Nothing is
lost while it is paused: reference counting still frees everything that is not in a cycle, and
cycles made meanwhile are collected on the collector's next run. It only switches the collector
back on if it was on when entered, so nested or overlapping uses (another thread) leave it on
as they found it.

A structure that then lives as long as the command (the task graph a compile reads) can be kept
out of every later pass as well: ``gc_paused(freeze=True)`` moves every object alive at the end
of the block to the collector's permanent generation (:func:`gc.freeze`). Without it, the first
pass after the block walks the whole new structure (seconds at 100,000 tasks: its objects were
never collected, so they are all young). Frozen objects are still freed by reference counting;
only a cycle among them would stay until :func:`gc.unfreeze`.
"""

from __future__ import annotations

import gc
from contextlib import contextmanager

__all__ = ["gc_paused"]


@contextmanager
def gc_paused(freeze: bool = False):
    """Pause the cyclic garbage collector for the ``with`` block; with ``freeze``, move what is
    alive at its end to the permanent generation (see the module docstring).

    Examples
    --------
    >>> import gc
    >>> with gc_paused():
    ...     gc.isenabled()
    False
    >>> gc.isenabled()
    True
    """
    was_enabled = gc.isenabled()
    gc.disable()
    completed = False
    try:
        yield
        completed = True
    finally:
        if freeze and completed:
            gc.freeze()
        if was_enabled:
            gc.enable()
