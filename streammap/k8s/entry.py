"""What an exported pod runs: ``python -m streammap.k8s.entry ...``.

A one-node plan runs here with the local executor. Inside a container the device plugin shows only
the devices the pod was given, numbered from 0 in PCI order (``CUDA_DEVICE_ORDER=PCI_BUS_ID``),
so :func:`container_view` renumbers this node's accelerators the same way (their order by the
plan's ``index``, which discovery takes from NVML's PCI order) before running; the plan file in
the ConfigMap stays the one that was compiled.

A plan over several nodes runs on Ray. The head pod (``--ray-nodes N``) starts the Ray head,
labelled with its plan node as the worker pods label theirs, waits until all N nodes have joined,
runs the plan with the Ray executor (which gives each device's actor its own GPU), and stops Ray.
A worker pod (``--worker HEAD:PORT``) joins the head, then stays until the head has gone, and
exits 0: so a worker Job completes when the run is over instead of failing with the lost head.
It exits 1 when it could not join at all.
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import streammap
from streammap.cli import main as cli_main
from streammap.errors import EXIT_FAILURE, EXIT_USAGE, KernelError, StreamMapError
from streammap.plan import Plan, read_plan

JOIN_TIMEOUT = 600.0
POLL = 5.0
GONE_AFTER = 3              # consecutive failed probes of the head before a worker leaves


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


def reachable(address: str, timeout: float = 2.0) -> bool:
    """Whether a TCP connection to ``HOST:PORT`` opens."""
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            return True
    except OSError:
        return False


def worker(head: str, node: str, *, run: Callable = subprocess.run, probe: Callable[[str], bool] = reachable,
           poll: float = POLL, join_timeout: float = JOIN_TIMEOUT) -> int:
    """Join the Ray head at ``head`` as plan node ``node``; return 0 once the head is gone."""
    deadline = time.monotonic() + join_timeout
    while True:                    # the head's pod may start after this one
        r = run(["ray", "start", "--address", head, "--labels", f"streammap-node={node}"])
        if r.returncode == 0:
            break
        if time.monotonic() > deadline:
            print(f"streammap: could not join the Ray head at {head}", file=sys.stderr)
            return EXIT_FAILURE
        time.sleep(poll)
    misses = 0
    while misses < GONE_AFTER:
        time.sleep(poll)
        misses = 0 if probe(head) else misses + 1
    run(["ray", "stop"])
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m streammap.k8s.entry")
    p.add_argument("--plan", help="the plan (head or one-node pods)")
    p.add_argument("--node", required=True, help="this pod's plan node")
    p.add_argument("--out", help="folder for out.npz and the run record")
    p.add_argument("--ray-nodes", type=int, default=1, help="nodes of the plan (several: start a Ray head)")
    p.add_argument("--port", type=int, default=6379)
    p.add_argument("--worker", metavar="HEAD:PORT", help="join this Ray head as a worker")
    args = p.parse_args(argv)
    if args.worker:
        return worker(args.worker, args.node)
    if not args.plan or not args.out:
        p.error("--plan and --out are needed unless --worker")
    out = Path(args.out) / "out.npz"
    if args.ray_nodes <= 1:
        try:
            streammap.run(container_view(read_plan(args.plan), args.node), outputs=out, progress=False)
        except StreamMapError as exc:        # the pod's log says what is wrong, as the CLI would
            print(exc.format(), file=sys.stderr)
            return EXIT_USAGE
        except KernelError as exc:
            print(exc.format(), file=sys.stderr)
            return EXIT_FAILURE
        return 0
    subprocess.run(["ray", "start", "--head", "--port", str(args.port),
                    "--labels", f"streammap-node={args.node}"], check=True)
    try:
        alive = wait_for_nodes(args.ray_nodes)
        if alive < args.ray_nodes:
            print(f"streammap: only {alive} of {args.ray_nodes} nodes joined the Ray cluster", file=sys.stderr)
            return EXIT_FAILURE
        return cli_main(["run", args.plan, "--backend", "ray", "--address", "auto", "-o", str(out), "--no-progress"])
    finally:
        subprocess.run(["ray", "stop"])


if __name__ == "__main__":
    sys.exit(main())
