"""Plans compiled once per test session, for tests that read a compiled plan but are not about
compiling it.

State: one dictionary, from what was compiled (the program's path and bytes, and every argument
of :func:`streammap.compile`) to the plan it gave. Policy: the compiler is deterministic (the
byte-for-byte tests in tests/strategies and tests/mappers say so), so a second compile of the same
program with the same arguments is the same plan; each caller gets a deep copy, free to edit it.
Only compiles that neither read nor write the performance history (``history=False``) are kept:
with a history, what was compiled before changes the estimates.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import streammap
from streammap.plan import Plan

_PLANS: dict[tuple[str, str, str], Plan] = {}


def compiled(path: Path | str, **kwargs) -> Plan:
    """``streammap.compile(path, **kwargs)``, compiled once per session; a fresh deep copy each call.

    Parameters
    ----------
    path : Path or str
        The program or workflow file; its bytes are part of the key (a test that rewrites the
        file compiles afresh).
    **kwargs
        :func:`streammap.compile`'s arguments, as plain data (a cluster as a dict, a path or a
        name); ``history=False`` is required.
    """
    if kwargs.get("history") is not False:
        raise ValueError("compiled() keeps only compiles made with history=False")
    path = Path(path)
    key = (str(path.resolve()), hashlib.sha256(path.read_bytes()).hexdigest(),
           json.dumps(kwargs, sort_keys=True, default=_path_only))
    if key not in _PLANS:
        _PLANS[key] = streammap.compile(path, **kwargs)
    return _PLANS[key].model_copy(deep=True)


def _path_only(value):
    """Paths key by their text; any other object (a Cluster, say) might print alike for two
    different values, so it is refused rather than risk handing back another plan."""
    if isinstance(value, Path):
        return str(value.resolve())
    raise TypeError(f"compiled() keys only plain data and paths, not {type(value).__name__}")
