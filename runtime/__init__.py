"""Executors that run a plan: in this process (:mod:`.local`, the default) or on a Ray cluster
(:mod:`.ray`, ``backend="ray"``).

:func:`~streammap.runtime.run.run_plan` is the one entry point (see :mod:`.run`); every run, on
either backend, ends in :func:`~streammap.runtime.lifecycle.finish_run`, which writes the outputs
and the run record.
"""

from streammap.runtime.context import array_module, current_device
from streammap.runtime.local import LocalExecutor
from streammap.runtime.run import run_plan

__all__ = ["run_plan", "LocalExecutor", "array_module", "current_device"]
