"""Compile time of generated programs with 1,000 kernel calls (target: at most 2 s).

Two shapes: 1,000 explicit call lines (a chain), and a loop that the front end unrolls into 1,000
calls (a fan-out of 999 tasks and a fan-in). Each compile is timed whole (front end, cost model,
HEFT, plan, YAML written) and by stage; the baseline beside it, measured in the same run, is what
libcst alone takes to parse the file, the floor for any libcst-based front end.

    .venv/bin/python benchmarks/compile_time.py
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

import libcst

from streammap.compiler import build_plan, load_source_graph, resolve_cluster
from streammap.cost.model import CostModel, lower_bound
from streammap.mappers import get_mapper
from streammap.plan import write_plan

CLUSTER = {
    "name": "bench", "network": {"bandwidth": "12.5 GB/s", "latency": "10us"},
    "nodes": [{"name": f"n{n}", "link": {"bandwidth": "300 GB/s", "latency": "3us"},
               "devices": [{"name": f"gpu{g}", "kind": "gpu", "memory": "80GiB", "flops": "19.5 TFLOP/s",
                            "mem_bandwidth": "2 TB/s"} for g in range(4)]} for n in range(2)],
}

HEADER = '''
# @stream param
N = 4096

# @stream kernel(flops=2*N, bytes=8*N, out=8*N)
def step(x, k):
    return x + k

# @stream kernel(flops=N, out=8*N)
def start():
    import numpy as np
    return np.zeros(N)

# @stream kernel(flops=N*1000, out=8*N)
def total(*xs):
    return sum(xs)
'''


def chain_program(n: int) -> str:
    body = ["    x0 = start()"] + [f"    x{i} = step(x{i - 1}, {i})" for i in range(1, n)] + [f"    return x{n - 1}"]
    return HEADER + "\n# @stream graph\ndef chain():\n" + "\n".join(body) + "\n"


def loop_program(n: int) -> str:
    return HEADER + f'''
# @stream graph
def fan():
    x = start()
    ys = [step(x, k) for k in range({n - 2})]
    return total(*ys)
'''


def timed(fn, repeat=5):
    times, result = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), result


def main() -> int:
    cluster = resolve_cluster(CLUSTER)
    heft = get_mapper("heft")
    print(f"{'program':<28}{'tasks':>7}{'libcst parse':>14}{'front end':>11}{'cost':>9}{'HEFT':>9}"
          f"{'plan+write':>12}{'compile':>10}  target 2 s")
    worst = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        for name, text in (("1,000 explicit calls", chain_program(1000)), ("1,000 calls in a loop", loop_program(1000))):
            src = Path(tmp) / "gen.py"
            src.write_text(text)
            t_parse, _ = timed(lambda: libcst.parse_module(src.read_text()))
            t_front, graph = timed(lambda: load_source_graph(src))
            t_cost, cost = timed(lambda: CostModel(graph, cluster))
            t_map, sched = timed(lambda: heft(cost))

            def plan_and_write():
                plan = build_plan(graph, cluster, cost, sched, source_path=src, lower=lower_bound(cost),
                                  heft_makespan=sched.makespan)
                write_plan(plan, Path(tmp) / "plan.yaml")
            t_plan, _ = timed(plan_and_write)
            whole = t_front + t_cost + t_map + t_plan
            worst = max(worst, whole)
            print(f"{name:<28}{graph.number_of_nodes():>7}{t_parse:>13.3f}s{t_front:>10.3f}s{t_cost:>8.3f}s"
                  f"{t_map:>8.3f}s{t_plan:>11.3f}s{whole:>9.3f}s  {'ok' if whole <= 2 else 'MISSED'}")
    print(f"worst compile: {worst:.3f} s (median of 5 per stage)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
