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
"""

from __future__ import annotations

import gc
from contextlib import contextmanager

__all__ = ["gc_paused"]


@contextmanager
def gc_paused():
    """Pause the cyclic garbage collector for the ``with`` block.

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
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
