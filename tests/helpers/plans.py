"""Hand-made plans for runtime tests (no front end, no mapper involved).

``make_plan(tmp_path, source, tasks, devices=..., outputs=..., params=...)`` writes ``source`` to
``tmp_path/prog.py`` and returns a validated :class:`Plan` whose tasks are given as tuples or dicts:

    task("x", "source", "node0/gpu0")                          # no args
    task("y", "inc", "node0/gpu1", ref("x"), retries=2)         # args are specs or plain constants
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from streammap.ir import spec_refs
from streammap.plan import Plan, sha256_file, validate_plan


def ref(task_id: str, index: int | None = None) -> dict:
    return {"ref": task_id} if index is None else {"ref": task_id, "index": index}


def value(v) -> dict:
    return {"value": v}


def _spec(a):
    if isinstance(a, dict) and len(a) >= 1 and set(a) <= {"ref", "index", "value", "list", "tuple", "dict"}:
        return a
    return {"value": a}


def task(task_id: str, kernel: str, device: str, *args, deps=None, kwargs=None, retries: int = 0,
         site: str | None = None) -> dict:
    args = [_spec(a) for a in args]
    kwargs = {k: _spec(v) for k, v in (kwargs or {}).items()}
    refs = [r for s in (*args, *kwargs.values()) for r in spec_refs(s)]
    return {"id": task_id, "kernel": kernel, "device": device,
            "deps": list(dict.fromkeys([*(deps or []), *refs])),
            "site": site or f"prog.py:{task_id}", "retries": retries, "args": args, "kwargs": kwargs}


def gpu_devices(n: int = 4, node: str = "node0") -> list[dict]:
    return [{"id": f"{node}/gpu{i}", "kind": "gpu", "vendor": "nvidia", "model": "H200"} for i in range(n)]


def cpu_devices(n: int = 1, node: str = "node0") -> list[dict]:
    return [{"id": f"{node}/cpu{i}" if n > 1 else f"{node}/cpu", "kind": "cpu"} for i in range(n)]


def make_plan(folder, source: str, tasks: list[dict], *, devices=None, outputs=None, params=None,
              kind: str = "program", filename: str = "prog.py") -> Plan:
    """A validated plan over ``tasks`` (in the given order) running ``source``."""
    folder = Path(folder)
    path = folder / filename
    path.write_text(textwrap.dedent(source), encoding="utf-8")
    devices = devices if devices is not None else gpu_devices(4)
    t = 0.0
    rows = []
    for row in tasks:
        rows.append({**row, "start": t, "finish": t + 0.001})
        t += 0.001
    plan = Plan.model_validate({
        "streammap_plan": 1,
        "source": {"path": str(path), "sha256": sha256_file(path), "entry": "main", "kind": kind},
        "params": dict(params or {}),
        "cluster": {"name": "test"},
        "mapper": {"name": "hand", "estimated_makespan": t, "lower_bound": 0.0},
        "devices": devices,
        "outputs": outputs,
        "tasks": rows,
    })
    validate_plan(plan)
    return plan


#: A fan-out/fan-in program: a source, scaled copies, their sum.
FAN = """
import numpy as np

# @stream param
N = 64

def source():
    return np.arange(N, dtype=np.float64)

def scale(x, k):
    return x * (k + 1)

def total(*parts):
    out = parts[0].copy()
    for p in parts[1:]:
        out += p
    return out
"""
