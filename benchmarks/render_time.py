"""Time `streammap show` takes to draw a 2,000-task plan: its Gantt chart and its task-graph picture
(target: both together under 30 s).

The plan is a layered random DAG list-scheduled onto 8 GPUs of 2 nodes (the shape of the unit test
that checks both pictures are drawn). The baseline beside it, measured in the same run, is what
matplotlib takes to save an empty figure as a PNG, the floor of any picture.

    .venv/bin/python benchmarks/render_time.py [--tasks 2000]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

from streammap.plan import Plan, validate_plan
from streammap.views import show

TARGET = 30.0


def big_plan(n: int, n_devices: int = 8, n_kernels: int = 12, seed: int = 0) -> Plan:
    """A layered random DAG of ``n`` tasks, list-scheduled onto ``n_devices`` GPUs (4 per node)."""
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
        free[d] = finish[f"t{i}"] = end
        tasks.append(dict(id=f"t{i}", kernel=f"k{i % n_kernels}", device=devices[d]["id"], deps=deps,
                          start=start, finish=end))
    span = max(finish.values())
    return Plan.model_validate(dict(
        streammap_plan=1, source=dict(path="wf.json", sha256="0" * 64, kind="workflow"),
        cluster=dict(name="big"), mapper=dict(name="heft", estimated_makespan=span, lower_bound=span * 0.8),
        devices=devices, tasks=tasks))


def timed(fn, repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def empty_png(path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig = plt.figure()
    fig.savefig(path)
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tasks", type=int, default=2000)
    args = ap.parse_args(argv)
    plan = big_plan(args.tasks)
    validate_plan(plan)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        floor = timed(lambda: empty_png(folder / "empty.png"))
        gantt = timed(lambda: show.gantt(plan, folder / "gantt.png"))
        graph = timed(lambda: show.graph_picture(plan, folder / "graph.png"))
    both = gantt + graph
    print(f"{'picture':<24}{'seconds':>9}  (median of 3; {args.tasks:,} tasks on 8 GPUs)")
    print(f"{'empty figure (baseline)':<24}{floor:>8.3f}s")
    print(f"{'Gantt chart':<24}{gantt:>8.3f}s")
    print(f"{'task graph':<24}{graph:>8.3f}s")
    print(f"{'both':<24}{both:>8.3f}s  target {TARGET:.0f} s  {'ok' if both <= TARGET else 'MISSED'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
