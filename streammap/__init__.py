"""StreamMAP: compile ``# @stream``-annotated Python into placement plans for GPU clusters, and run them.

The Python API mirrors the CLI::

    import streammap
    plan = streammap.compile("samples/fm_radio.py", cluster="cluster.yaml", params={"N": 65536})
    streammap.write_plan(plan, "plan.yaml")
    outputs = streammap.run(plan, emulate=True)      # {"result": ndarray}
"""

from __future__ import annotations

import importlib

from streammap.cluster.model import Cluster, load_cluster
from streammap.errors import KernelError, StreamMapError
from streammap.plan import Plan, read_plan, write_plan

__version__ = "0.1.0"

__all__ = ["compile", "run", "array_module", "load_cluster", "read_plan", "write_plan", "Plan", "Cluster",
           "StreamMapError", "KernelError", "__version__"]

#: The API functions that need the compiler or the runtime, by the module that holds them: loaded
#: when first used (PEP 562), so that ``import streammap`` and every command stay light: ``streammap
#: show`` never loads the compiler's front end, nor ``streammap compile`` the runtime.
_LAZY = {"compile": "streammap.api", "run": "streammap.api", "array_module": "streammap.api"}


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value                     # once loaded, a plain attribute
        return value
    raise AttributeError(f"module 'streammap' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
