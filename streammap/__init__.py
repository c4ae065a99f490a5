"""StreamMAP: compile ``# @stream``-annotated Python into placement plans for GPU clusters, and run them.

The Python API mirrors the CLI::

    import streammap
    plan = streammap.compile("samples/fm_radio.py", cluster="cluster.yaml", params={"N": 65536})
    streammap.write_plan(plan, "plan.yaml")
    outputs = streammap.run(plan, emulate=True)      # {"result": ndarray}
"""

from __future__ import annotations

from pathlib import Path

from streammap.cluster.model import Cluster, load_cluster
from streammap.compiler import compile as _compile
from streammap.errors import KernelError, StreamMapError
from streammap.plan import Plan, read_plan, write_plan
from streammap.runtime import run_plan
from streammap.runtime.context import array_module as _am

__version__ = "0.1.0"

__all__ = ["compile", "run", "array_module", "load_cluster", "read_plan", "write_plan", "Plan", "Cluster",
           "StreamMapError", "KernelError", "__version__"]


def compile(path, cluster="local", params=None, mapper="auto", entry=None, emit_graph=None, history=None,
            strategy="auto") -> Plan:
    """Compile a program or workflow into a :class:`Plan` (see :func:`streammap.compiler.compile`)."""
    return _compile(path, cluster, params=params, mapper=mapper, entry=entry, emit_graph=emit_graph,
                    history=history, strategy=strategy)


def run(plan, *, emulate: bool = False, outputs=None, record=None, progress: bool = False, check_inputs: bool = False,
        **monitoring) -> dict:
    """Run a plan (a :class:`Plan` or a plan file) on this machine; return its outputs.

    Parameters
    ----------
    plan : Plan or str or Path
    emulate : bool
        Run every device's tasks on the CPU with NumPy (same threads and order), for plans made for
        devices this machine lacks.
    outputs : str or Path, optional
        Also write the outputs as ``.npz`` there, and the run record beside it.
    record : str or Path, optional
        Where to write the run record (default: beside ``outputs``, ``out.run.json``).
    progress : bool
        Show a progress bar.
    check_inputs : bool
        Fail a kernel call that changed one of its array inputs (checksums before and after each
        call; for GPUs, where CuPy arrays cannot be made read-only as NumPy inputs are).
    **monitoring
        ``monitoring=`` a :class:`~streammap.monitoring.options.MonitorOptions`, or its fields one by
        one: ``telemetry`` (default True), ``interval``, ``metrics`` (a port or a
        :class:`~streammap.monitoring.metrics.RunMetrics`), ``dcgm_names``, ``metrics_addr``, ``alerts`` (a
        config file, dict or :class:`~streammap.monitoring.alerts.AlertConfig`): see
        :func:`streammap.runtime.run_plan`.

    Returns
    -------
    dict
        ``{"result": array}`` for a single returned value, ``result_0, result_1, ...`` for a
        tuple, the keys of a returned dict.
    """
    plan_path = None
    if isinstance(plan, (str, Path)):
        plan_path, plan = plan, read_plan(plan)
    return run_plan(plan, emulate=emulate, outputs_path=outputs, record_path=record, progress=progress,
                    plan_path=plan_path, check_inputs=check_inputs, **monitoring)


def array_module(*arrays):
    """The array module (NumPy or CuPy) of ``arrays``, or of the device running this kernel."""
    return _am(*arrays)
