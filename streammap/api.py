"""The Python API's functions: :func:`compile`, :func:`run` and :func:`array_module`.

They live here, not in the package's ``__init__``, because they need the compiler (and its front
end, libcst) and the runtime: ``streammap`` itself stays light, so every ``streammap`` command and
every ``import streammap.x`` loads only what it uses. ``streammap.compile`` and the others are
this module's functions, reached through the package (see :mod:`streammap`).
"""

from __future__ import annotations

from pathlib import Path

from streammap.compiler import compile as _compile
from streammap.plan import Plan, read_plan
from streammap.runtime import run_plan
from streammap.runtime.context import array_module as _am

__all__ = ["compile", "run", "array_module"]


def compile(path, cluster="local", params=None, mapper="auto", entry=None, emit_graph=None, history=None,
            strategy="auto", max_tasks=200_000) -> Plan:
    """Compile a program or workflow into a :class:`Plan` (see :func:`streammap.compiler.compile`).

    Examples
    --------
    A program of two kernels, compiled for a node with a GPU and a CPU: the heavy kernel goes to
    the GPU, the tiny one stays on the CPU (a GPU launch would cost more than it does).

    >>> import pathlib, tempfile
    >>> import streammap
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (folder / "double.py").write_text('''
    ... import numpy as np
    ...
    ... # @stream kernel(flops=8, out=64)
    ... def ramp():
    ...     return np.arange(8.0)
    ...
    ... # @stream kernel(flops=1e12, out=64)
    ... def double(x):
    ...     return 2 * x
    ...
    ... # @stream graph
    ... def main():
    ...     return double(ramp())
    ... ''')
    >>> lab = {"name": "lab", "nodes": [{"name": "n0", "link": {"bandwidth": "100 GB/s", "latency": "5us"},
    ...        "devices": [{"name": "gpu0", "kind": "gpu", "flops": "10 TFLOP/s"},
    ...                    {"name": "cpu", "kind": "cpu", "flops": "100 GFLOP/s"}]}]}
    >>> plan = streammap.compile(folder / "double.py", cluster=lab, history=False)
    >>> [(t.kernel, t.device) for t in plan.tasks]
    [('ramp', 'n0/cpu'), ('double', 'n0/gpu0')]
    >>> round(plan.mapper.estimated_makespan, 3)        # seconds: 1e12 elementwise flops at 1/20 of 10 TFLOP/s
    2.0
    """
    return _compile(path, cluster, params=params, mapper=mapper, entry=entry, emit_graph=emit_graph,
                    history=history, strategy=strategy, max_tasks=max_tasks)


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

    Examples
    --------
    A one-kernel program compiled for a GPU, run emulated on this machine's CPU; the outputs are
    also written to ``out.npz``, with the run record beside them.

    >>> import pathlib, tempfile
    >>> import streammap
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (folder / "ramp.py").write_text('''
    ... import numpy as np
    ...
    ... # @stream kernel(flops=4, out=32)
    ... def ramp():
    ...     return np.arange(4.0)
    ...
    ... # @stream graph
    ... def main():
    ...     return ramp()
    ... ''')
    >>> one_gpu = {"name": "one", "nodes": [{"name": "n0", "devices": [{"name": "gpu0", "kind": "gpu"}]}]}
    >>> plan = streammap.compile(folder / "ramp.py", cluster=one_gpu, history=False)
    >>> streammap.run(plan, emulate=True, outputs=folder / "out.npz", telemetry=False)
    {'result': array([0., 1., 2., 3.])}
    >>> sorted(p.name for p in folder.iterdir())
    ['out.npz', 'out.run.json', 'ramp.py']
    """
    plan_path = None
    if isinstance(plan, (str, Path)):
        plan_path, plan = plan, read_plan(plan)
    return run_plan(plan, emulate=emulate, outputs_path=outputs, record_path=record, progress=progress,
                    plan_path=plan_path, check_inputs=check_inputs, **monitoring)


def array_module(*arrays):
    """The array module (NumPy or CuPy) of ``arrays``, or of the device running this kernel."""
    return _am(*arrays)
