"""Hand-made plans for runtime tests (no front end, no mapper involved).

``make_plan(tmp_path, source, tasks, devices=..., outputs=..., params=...)`` writes ``source`` to
``tmp_path/prog.py`` and returns a validated :class:`Plan` whose tasks are given as tuples or dicts:

    task("x", "source", "node0/gpu0")                          # no args
    task("y", "inc", "node0/gpu1", ref("x"), retries=2)         # args are specs or plain constants
"""

from __future__ import annotations

import random
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


def big_plan(n: int, n_devices: int = 8, n_kernels: int = 12, seed: int = 0) -> Plan:
    """A layered random DAG of ``n`` tasks, list-scheduled onto ``n_devices`` GPUs (4 per node): a plan
    too big to read, for what ``show`` draws and prints at scale (test and benchmark alike)."""
    rnd = random.Random(seed)
    devices = [{"id": f"node{d // 4}/gpu{d % 4}", "kind": "gpu"} for d in range(n_devices)]
    free = [0.0] * n_devices
    finish: dict[str, float] = {}
    tasks = []
    width = max(1, int(n ** 0.5))
    for i in range(n):
        layer = i // width
        deps = []
        if layer:
            lo = (layer - 1) * width
            deps = sorted({f"t{rnd.randrange(lo, lo + width)}" for _ in range(rnd.randint(1, 3))},
                          key=lambda s: int(s[1:]))
        d = i % n_devices
        start = max([free[d]] + [finish[x] for x in deps])
        end = start + rnd.uniform(0.5, 2.0) * 1e-3
        free[d] = end
        tid = f"t{i}"
        finish[tid] = end
        tasks.append(dict(id=tid, kernel=f"k{i % n_kernels}", device=devices[d]["id"], deps=deps,
                          start=start, finish=end))
    span = max(finish.values())
    return Plan.model_validate(dict(
        streammap_plan=1, source=dict(path="wf.json", sha256="0" * 64, kind="workflow"),
        cluster=dict(name="big"), mapper=dict(name="heft", estimated_makespan=span, lower_bound=span * 0.8),
        devices=devices, tasks=tasks))
