"""Time `streammap show` takes to draw a 2,000-task plan: its Gantt chart and its task-graph picture
(target: both together under 30 s).

The plan is a layered random DAG list-scheduled onto 8 GPUs of 2 nodes (the shape of the unit test
that checks both pictures are drawn). The baseline beside it, measured in the same run, is what
matplotlib takes to save an empty figure as a PNG, the floor of any picture.

    .venv/bin/python benchmarks/render_time.py [--tasks 2000]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))     # the repository root, for tests.helpers

from streammap.bench.timing import timed  # noqa: E402
from streammap.plan import validate_plan  # noqa: E402
from streammap.views import show  # noqa: E402
from tests.helpers.plans import big_plan  # noqa: E402

TARGET = 30.0


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
        floor, _ = timed(lambda: empty_png(folder / "empty.png"), 3)
        gantt, _ = timed(lambda: show.gantt(plan, folder / "gantt.png"), 3)
        graph, _ = timed(lambda: show.graph_picture(plan, folder / "graph.png"), 3)
    both = gantt + graph
    print(f"{'picture':<24}{'seconds':>9}  (median of 3; {args.tasks:,} tasks on 8 GPUs)")
    print(f"{'empty figure (baseline)':<24}{floor:>8.3f}s")
    print(f"{'Gantt chart':<24}{gantt:>8.3f}s")
    print(f"{'task graph':<24}{graph:>8.3f}s")
    print(f"{'both':<24}{both:>8.3f}s  target {TARGET:.0f} s  {'ok' if both <= TARGET else 'MISSED'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
