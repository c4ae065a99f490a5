"""Per-task overhead of the Ray executor against plain Ray actor calls, same DAG, same run.

A 1,000-task random DAG of trivial kernels (each task takes 1-2 earlier results, returns a tiny
array) over 2 emulated Ray nodes x 2 devices (``ray.cluster_utils.Cluster``, labels node0/node1).
Plain Ray: one actor per device, each task an actor call whose arguments are the ObjectRefs of its
deps. StreamMAP: ``run_plan(..., backend="ray", emulate=True)``. Targets: <= 1.5x plain Ray and
<= 1 ms per task.

Then recovery: a third node (``node2``, 2 fake GPUs) runs half of 8 chains of 10 steps of 20 ms;
once it has finished 4 steps the benchmark removes it (``Cluster.remove_node``: its raylet and workers are
killed). Reported: from the node's death to the executor seeing it (Ray's health check:
``RAY_health_check_period_ms`` 200, ``_timeout_ms`` 200, ``_failure_threshold`` 3, set here as in
the tests), from seeing it to the run resuming on the survivors (re-mapped and resubmitted), and
the total. Usage: ``python benchmarks/ray_overhead.py [--tasks 1000] [--repeat 3] [--no-recovery]``.

Driver round trips at scale (``--scale 1000 10000 100000``; ``benchmarks/scale.py --ray`` runs
it): the same DAG at each size, run by the executor on the same emulated cluster, with every
``ray.wait``, ``ray.get``, ``ray.put`` and actor-method ``.remote`` call of the driver counted
(the functions wrapped in this process only), and the driver's CPU time (its process: Python and
Ray's own threads) and wall time from submission to the last result. The claim checked: the
driver submits a plan without per-task round trips that grow with it, i.e. ``.remote`` calls
per task stay at one (a call per task, nothing more) and ``ray.wait`` + ``ray.get`` calls per task
fall as the plan grows (one of each per batch of results, not per task).

Ray is started here, with ``RAY_USAGE_STATS_ENABLED=0``, ``RAY_AUTH_MODE=disabled``, a private
temporary folder and an 80 MiB object store per node, and shut down (this process's cluster
only) when the benchmark ends.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))     # the repository root, for tests.helpers

HEALTH = {"RAY_health_check_period_ms": "200", "RAY_health_check_timeout_ms": "200",
          "RAY_health_check_failure_threshold": "3", "RAY_health_check_initial_delay_ms": "0"}

PROG = """
import time
import numpy as np

def slow(x, k):
    time.sleep(0.02)
    return x + k

def leaf(k):
    return np.full(4, float(k))

def add(*xs):
    out = xs[0] + 1.0
    for x in xs[1:]:
        out = out + x
    return out / len(xs)          # a mean: values stay finite along 100,000 tasks
"""


def build(folder, n, seed=0):
    from tests.helpers.plans import make_plan, ref, task
    rnd = random.Random(seed)
    devs = [f"node{a}/gpu{b}" for a in range(2) for b in range(2)]
    tasks, deps = [], []
    for k in range(n):
        d = devs[k % 4] if rnd.random() < 0.5 else devs[rnd.randrange(4)]
        if k < 4:
            tasks.append(task(f"t{k}", "leaf", d, k))
            deps.append([])
        else:
            ds = sorted(set(rnd.randrange(max(0, k - 20), k) for _ in range(rnd.randint(1, 2))))
            tasks.append(task(f"t{k}", "add", d, *[ref(f"t{i}") for i in ds]))
            deps.append(ds)
    devices = [{"id": x, "kind": "gpu"} for x in devs]
    plan = make_plan(folder, PROG, tasks, devices=devices, outputs=ref(f"t{n - 1}"))
    return plan, deps


def plain_ray(ray, plan, deps, node_ids):
    import numpy as np
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    @ray.remote
    class Plain:
        def leaf(self, k):
            return np.full(4, float(k))

        def add(self, *xs):
            out = xs[0] + 1.0
            for x in xs[1:]:
                out = out + x
            return out / len(xs)

    actors = {}
    for d in dict.fromkeys(t.device for t in plan.tasks):
        actors[d] = Plain.options(num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(
            node_ids[d.split("/")[0]], soft=False)).remote()
    ray.get([a.leaf.remote(0) for a in actors.values()])
    t0 = time.perf_counter()
    refs = []
    for k, t in enumerate(plan.tasks):
        a = actors[t.device]
        refs.append(a.leaf.remote(k) if not deps[k] else a.add.remote(*[refs[i] for i in deps[k]]))
    ray.wait(refs, num_returns=len(refs))
    out = ray.get(refs[-1])
    wall = time.perf_counter() - t0
    for a in actors.values():
        ray.kill(a)
    return wall, out


def recovery(ray, cluster, tmp):
    """Remove node2 mid-run; return (detection s, resume s, total s, tasks re-run, outputs ok)."""
    import threading

    import numpy as np

    from streammap.runtime.loader import ProgramFiles
    from streammap.runtime.ray.executor import RayExecutor
    from tests.helpers.plans import make_plan, ref, task
    victim = cluster.add_node(num_cpus=2, num_gpus=2, object_store_memory=80 * 2**20,
                              labels={"streammap-node": "node2"})
    cluster.wait_for_nodes()
    devs = [f"node{a}/gpu{b}" for a in (0, 2) for b in range(2)]
    tasks, finals = [], []
    for c in range(8):
        prev = None
        for s in range(10):
            tid = f"c{c}s{s}"
            tasks.append(task(tid, "slow", devs[c % 4], ref(prev) if prev else 0.0, float(s)))
            prev = tid
        finals.append(prev)
    tasks.append(task("sum", "add", devs[0], *[ref(f) for f in finals]))
    (Path(tmp) / "rec").mkdir(exist_ok=True)
    plan = make_plan(Path(tmp) / "rec", PROG, tasks, devices=[{"id": d, "kind": "gpu"} for d in devs],
                     outputs=ref("sum"))
    ex = RayExecutor(plan, ProgramFiles.of(plan), emulate=True, max_recoveries=1)
    box = {}
    th = threading.Thread(target=lambda: box.update(outcome=ex.run()))
    th.start()
    deadline = time.time() + 60
    while time.time() < deadline and sum(d.startswith("node2/") for d in list(ex.where.values())) < 4:
        time.sleep(0.01)                  # node2's actors are up and have finished a few steps
    killed = time.perf_counter()
    cluster.remove_node(victim)
    th.join(120)
    outcome = box["outcome"]
    if outcome.error is not None:
        raise outcome.error
    seen = ex.t_perf + ex.remaps[0]["t"]
    resumed = ex.resumed[0]
    expected = (1.0 + sum(sum(range(10)) for _ in range(8))) / 8  # add(): 1.0 more on the first, a mean
    ok = bool(np.allclose(outcome.outputs["result"], expected))
    return seen - killed, resumed - seen, resumed - killed, ex.remaps[0]["rerun"], ok


class DriverCalls:
    """Counts of the driver's calls into Ray, while installed (:meth:`install`, :meth:`remove`).

    State: a count per call name; the originals of the wrapped functions, put back by
    :meth:`remove`. Wrapped in this process only: the actors' own calls are not the driver's.
    """

    NAMES = ("wait", "get", "put", "remote")

    def __init__(self, ray):
        self.ray = ray
        self.counts = dict.fromkeys(self.NAMES, 0)
        self._originals: dict = {}

    def _counted(self, name, fn):
        counts = self.counts

        def counted(*args, **kwargs):
            counts[name] += 1
            return fn(*args, **kwargs)
        return counted

    def install(self) -> None:
        from ray.actor import ActorMethod
        for name in ("wait", "get", "put"):
            self._originals[name] = getattr(self.ray, name)
            setattr(self.ray, name, self._counted(name, self._originals[name]))
        self._originals["remote"] = ActorMethod.remote
        ActorMethod.remote = self._counted("remote", ActorMethod.remote)

    def remove(self) -> None:
        from ray.actor import ActorMethod
        ActorMethod.remote = self._originals.pop("remote")
        for name, fn in self._originals.items():
            setattr(self.ray, name, fn)
        self._originals.clear()


def scale_row(ray, folder: Path, n: int) -> dict:
    """Run the :func:`build` DAG of ``n`` tasks with the executor; the driver's calls and times."""
    from streammap.runtime.loader import ProgramFiles
    from streammap.runtime.ray.executor import RayExecutor
    folder.mkdir(exist_ok=True)
    plan, _ = build(folder, n)
    calls = DriverCalls(ray)
    ex = RayExecutor(plan, ProgramFiles.of(plan), emulate=True)
    calls.install()
    try:
        cpu0 = time.process_time()
        outcome = ex.run()
        cpu = time.process_time() - cpu0
        wall = time.perf_counter() - ex.t_submit               # actor start-up excluded
    finally:
        calls.remove()
        for a in ex.actors.values():
            ray.kill(a)
    if outcome.error is not None:
        raise outcome.error
    c = calls.counts
    return {"tasks": n, "wall_s": wall, "driver_cpu_s": cpu, "driver_cpu_us_per_task": cpu / n * 1e6,
            "wall_us_per_task": wall / n * 1e6, **{f"ray_{k}": v for k, v in c.items()},
            "remote_per_task": c["remote"] / n, "wait_get_per_task": (c["wait"] + c["get"]) / n}


def print_scale_row(row: dict) -> None:
    n = row["tasks"]
    print(f"{n:>8,} tasks: wall {row['wall_s']:7.2f} s ({row['wall_us_per_task']:6.0f} µs/task), driver cpu "
          f"{row['driver_cpu_s']:7.2f} s ({row['driver_cpu_us_per_task']:6.0f} µs/task); driver calls: "
          f".remote {row['ray_remote']:,} ({row['remote_per_task']:.3f}/task), ray.wait {row['ray_wait']:,}, "
          f"ray.get {row['ray_get']:,}, ray.put {row['ray_put']:,} (wait+get {row['wait_get_per_task']:.4f}/task)",
          flush=True)


def start_ray(tmp: str):
    """A private 2-node emulated Ray cluster (node0: head, node1: 2 fake GPUs); ``(ray, cluster)``."""
    os.environ.update(RAY_USAGE_STATS_ENABLED="0", RAY_AUTH_MODE="disabled", RAY_TMPDIR=tmp, **HEALTH)
    import ray
    from ray.cluster_utils import Cluster
    c = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 2, "num_gpus": 0, "object_store_memory": 80 * 2**20, "labels": {"streammap-node": "node0"},
        "temp_dir": os.path.join(tmp, "ray"), "include_dashboard": False})
    c.add_node(num_cpus=2, num_gpus=2, object_store_memory=80 * 2**20, labels={"streammap-node": "node1"})
    ray.init(address=c.address, logging_level="WARNING")
    return ray, c


def scale(sizes: list[int], json_path: str | None) -> int:
    tmp = tempfile.mkdtemp(prefix="smb", dir="/tmp")
    try:
        ray, c = start_ray(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    rows = []
    try:
        print("Ray executor, DAG of tiny kernels on 2 emulated nodes x 2 devices: the driver's calls and time")
        for n in sizes:
            rows.append(scale_row(ray, Path(tmp) / f"s{n}", n))
            print_scale_row(rows[-1])
    finally:
        ray.shutdown()
        c.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)
    if json_path:
        Path(json_path).write_text(json.dumps(rows, indent=1))
    return 0


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--tasks", type=int, default=1000)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--no-recovery", action="store_true", help="skip the node-loss measurement")
    p.add_argument("--scale", type=int, nargs="+", metavar="TASKS",
                   help="only the driver's round trips and time at these sizes (e.g. 1000 10000 100000)")
    p.add_argument("--json", metavar="FILE", help="with --scale: write the rows as JSON")
    args = p.parse_args(argv)
    if args.scale:
        return scale(args.scale, args.json)
    tmp = tempfile.mkdtemp(prefix="smb", dir="/tmp")
    import numpy as np

    from streammap.runtime.loader import ProgramFiles
    from streammap.runtime.ray.executor import RayExecutor
    ray, c = start_ray(tmp)
    try:
        node_ids = {n["Labels"]["streammap-node"]: n["NodeID"] for n in ray.nodes() if n["Alive"]}
        plan, deps = build(tmp, args.tasks)
        plain, ours = [], []
        for _ in range(args.repeat):
            w, ref_out = plain_ray(ray, plan, deps, node_ids)
            plain.append(w)
            ex = RayExecutor(plan, ProgramFiles.of(plan), emulate=True)
            outcome = ex.run()
            ours.append(time.perf_counter() - ex.t_submit)        # actor start-up excluded, as for plain
            out = outcome.outputs
            for a in ex.actors.values():
                ray.kill(a)
            np.testing.assert_allclose(out["result"], ref_out)
        n = args.tasks
        bp, bo = min(plain), min(ours)
        print(f"{n} tasks, 2 nodes x 2 devices (best of {args.repeat}; actor start-up excluded for both)")
        print(f"plain Ray actor calls : {bp:.3f} s  ({bp / n * 1e3:.3f} ms/task)")
        print(f"StreamMAP Ray executor: {bo:.3f} s  ({bo / n * 1e3:.3f} ms/task)  ratio {bo / bp:.2f}x")
        print(f"targets: <= 1.5x plain Ray: {'met' if bo / bp <= 1.5 else 'NOT met'}; <= 1 ms/task: "
              f"{'met' if bo / n <= 1e-3 else 'NOT met'}")
        if not args.no_recovery:
            det, res, tot, rerun, ok = recovery(ray, c, tmp)
            print(f"node loss (health check {HEALTH['RAY_health_check_period_ms']} ms x "
                  f"{HEALTH['RAY_health_check_failure_threshold']}): seen {det:.3f} s after the node died, "
                  f"resumed {res:.3f} s later, {tot:.3f} s in all; {rerun} task(s) re-run; outputs "
                  f"{'correct' if ok else 'WRONG'}")
    finally:
        ray.shutdown()
        c.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
