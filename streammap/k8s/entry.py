"""What an exported pod runs: ``python -m streammap.k8s.entry --plan /streammap/plan.yaml ...``.

A one-node plan runs here with the local executor. Inside a container the device plugin shows only
the devices the pod was given, numbered from 0 in PCI order (``CUDA_DEVICE_ORDER=PCI_BUS_ID``),
so :func:`container_view` renumbers this node's accelerators the same way (their order by the
plan's ``index``, which discovery takes from NVML's PCI order) before running; the plan file in
the ConfigMap stays the one that was compiled.

A plan over several nodes starts the Ray head here (labelled with this plan node, as the worker
pods label theirs), waits until every node of the plan has joined, and runs the plan with the
Ray executor, which gives each device's actor its own GPU.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

from ..errors import EXIT_FAILURE, EXIT_USAGE, KernelError, StreamMapError
from ..plan import Plan, read_plan

JOIN_TIMEOUT = 600.0


def container_view(plan: Plan, node: str) -> Plan:
    """``plan`` with ``node``'s used accelerators renumbered 0, 1, ... per kind, in index order."""
    out = plan.model_copy(deep=True)
    used = {t.device for t in plan.tasks}
    by_kind: dict[str, list] = {}
    for d in out.devices:
        if d.id.split("/", 1)[0] == node and d.id in used and d.kind != "cpu":
            by_kind.setdefault(d.kind, []).append(d)
    for devs in by_kind.values():
        for k, d in enumerate(sorted(devs, key=lambda d: (d.index is None, d.index or 0))):
            d.index = k
    return out


def wait_for_nodes(count: int, timeout: float = JOIN_TIMEOUT, ray=None) -> int:
    """Block until ``count`` Ray nodes are alive (or ``timeout``); return how many are."""
    if ray is None:
        import ray  # noqa: PLC0415 -- the cluster extra
    ray.init(address="auto", ignore_reinit_error=True, logging_level="ERROR")
    deadline = time.monotonic() + timeout
    while True:
        alive = sum(1 for n in ray.nodes() if n.get("Alive"))
        if alive >= count or time.monotonic() > deadline:
            return alive
        time.sleep(2.0)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m streammap.k8s.entry")
    p.add_argument("--plan", required=True)
    p.add_argument("--node", required=True, help="this pod's plan node")
    p.add_argument("--out", required=True, help="folder for out.npz and the run record")
    p.add_argument("--ray-nodes", type=int, default=1, help="nodes of the plan (several: start a Ray head)")
    p.add_argument("--port", type=int, default=6379)
    args = p.parse_args(argv)
    from ..cli import main as cli_main  # noqa: PLC0415
    import streammap  # noqa: PLC0415
    plan = read_plan(args.plan)
    out = Path(args.out) / "out.npz"
    if args.ray_nodes <= 1:
        try:
            streammap.run(container_view(plan, args.node), outputs=out, progress=False)
        except StreamMapError as exc:        # the pod's log says what is wrong, as the CLI would
            print(exc.format(), file=sys.stderr)
            return EXIT_USAGE
        except KernelError as exc:
            print(exc.format(), file=sys.stderr)
            return EXIT_FAILURE
        return 0
    subprocess.run(["ray", "start", "--head", "--port", str(args.port),
                    "--labels", f"streammap-node={args.node}"], check=True)
    alive = wait_for_nodes(args.ray_nodes)
    if alive < args.ray_nodes:
        print(f"streammap: only {alive} of {args.ray_nodes} nodes joined the Ray cluster", file=sys.stderr)
        return 1
    return cli_main(["run", args.plan, "--backend", "ray", "--address", "auto", "-o", str(out), "--no-progress"])


if __name__ == "__main__":
    sys.exit(main())
