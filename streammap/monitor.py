"""``streammap monitor``: the devices of this machine (or of a cluster file) live in the terminal.

A :class:`rich.live.Live` table refreshed every ``--interval`` seconds (default 1 s) from the same
samplers a run uses (:mod:`streammap.telemetry`: NVML for NVIDIA GPUs, ``/proc`` for the CPU).
``--once`` prints one table and exits (scripts, tests); ``--count N`` stops after N refreshes.

``--cluster FILE`` lists every device of the cluster file and says, for each, whether it is on
this machine (its node is this host: the node name equals ``--node``, default the host name as
``streammap discover`` writes it, or the cluster has a single node) and whether it is observable
here (a GPU whose index NVML sees, or the CPU). Devices of other nodes are listed as remote.

``--ray [ADDRESS]`` shows every device of every node of a Ray cluster instead, sampled on each
node by a small actor (:mod:`streammap.monitor_ray`), named ``node/device``.

``--metrics-port PORT`` also serves the device gauges of :mod:`streammap.metrics` while it runs
(a small exporter for machines without dcgm-exporter; ``--dcgm-names`` as for ``run``).

For the lead's CLI: :func:`add_monitor_parser` adds the command, and
:func:`add_run_monitoring_arguments` / :func:`run_monitoring_kwargs` the ``run`` options
``--metrics-port``, ``--metrics-addr``, ``--dcgm-names``, ``--alerts``, ``--no-telemetry``,
``--sample-interval``.
"""

from __future__ import annotations

import sys
import time
from typing import Optional

from rich.console import Console
from rich.table import Table

from .telemetry import CpuSampler, NvmlSampler, Reading
from .units import format_size


def _bar(ratio: Optional[float], width: int = 10) -> str:
    if ratio is None:
        return "—"
    ratio = min(1.0, max(0.0, ratio))
    full = int(round(ratio * width))
    colour = "red" if ratio > 0.9 else ("yellow" if ratio > 0.6 else "green")
    return f"{ratio * 100:4.0f}% [{colour}]{'█' * full}[/{colour}]{'░' * (width - full)}"


def _local_node(spec, node: Optional[str]) -> Optional[str]:
    from .discover import default_node_name

    names = [n.name for n in spec.nodes]
    if node is not None:
        return node if node in names else None
    host = default_node_name()
    if host in names:
        return host
    return names[0] if len(names) == 1 else None


class DeviceMonitor:
    """Samplers of this machine and, optionally, a cluster whose devices to list."""

    def __init__(self, cluster=None, node: Optional[str] = None, nvml=None, samplers=None,
                 where: str = "local", title: Optional[str] = None):
        if samplers is None:
            samplers = []
            s = NvmlSampler(nvml)
            if s.devices():
                samplers.append(s)
            samplers.append(CpuSampler())
        self.samplers = samplers
        self.infos = {i.id: i for s in samplers for i in s.devices()}
        self.cluster = cluster
        self.spec = getattr(cluster, "spec", cluster)
        self.local_node = _local_node(self.spec, node) if self.spec is not None else None
        self.where, self.title = where, title

    def sample(self) -> dict[str, Reading]:
        out = {}
        for s in self.samplers:
            try:
                for r in s.sample():
                    out[r.device] = r
            except Exception:              # noqa: BLE001
                pass
        return out

    def rows(self, readings: dict[str, Reading]) -> list[dict]:
        """One dict per listed device: id, kind, model, where, observed (local id or None), reading."""
        if self.spec is None:
            return [{"id": i, "kind": info.kind, "model": info.model, "where": self.where, "observed": i,
                     "reading": readings.get(i)} for i, info in self.infos.items()]
        rows = []
        for node in self.spec.nodes:
            local = node.name == self.local_node
            gpu_pos = 0
            for d in node.devices:
                observed = None
                if local and d.kind == "gpu":
                    idx = d.index if d.index is not None else gpu_pos
                    observed = f"gpu{idx}" if f"gpu{idx}" in self.infos else None
                elif local and d.kind == "cpu":
                    observed = "cpu" if "cpu" in self.infos else None
                if d.kind == "gpu":
                    gpu_pos += 1
                rows.append({"id": f"{node.name}/{d.name}", "kind": d.kind, "model": d.model,
                             "where": "local" if local else "remote", "observed": observed,
                             "reading": readings.get(observed) if observed else None})
        return rows

    def table(self, readings: dict[str, Reading] | None = None) -> Table:
        readings = self.sample() if readings is None else readings
        title = self.title or ("devices of this machine" if self.spec is None else
                               f"cluster {self.spec.name}: this machine is {self.local_node or 'not in the file'}")
        table = Table(title=f"{title}  ({time.strftime('%H:%M:%S')})", title_justify="left")
        for name, just in (("device", "left"), ("kind", "left"), ("model", "left"), ("where", "left"),
                           ("utilisation", "left"), ("memory", "right"), ("power", "right"), ("temp.", "right"),
                           ("ECC", "right"), ("status", "left")):
            table.add_column(name, justify=just)
        for row in self.rows(readings):
            r = row["reading"]
            if row["observed"] is None:
                status = "remote: not observable here" if row["where"] == "remote" else "not observable here"
                table.add_row(row["id"], row["kind"], row["model"] or "—", row["where"], "—", "—", "—", "—", "—",
                              f"[dim]{status}[/dim]")
                continue
            if r is None:
                table.add_row(row["id"], row["kind"], row["model"] or "—", row["where"], "—", "—", "—", "—", "—",
                              "no reading")
                continue
            mem = "—"
            if r.memory_used is not None:
                mem = format_size(r.memory_used) + (f" / {format_size(r.memory_total)}" if r.memory_total else "")
            status = "[red]LOST[/red]" if r.lost else "[green]ok[/green]"
            table.add_row(row["id"], row["kind"], row["model"] or "—", row["where"], _bar(r.utilization), mem,
                          f"{r.power:.0f} W" if r.power is not None else "—",
                          f"{r.temperature:.0f} °C" if r.temperature is not None else "—",
                          str(r.ecc_uncorrected) if r.ecc_uncorrected is not None else "—", status)
        return table


def monitor(cluster=None, node: Optional[str] = None, interval: float = 1.0, once: bool = False,
            count: Optional[int] = None, console: Optional[Console] = None, nvml=None, samplers=None,
            metrics=None, where: str = "local", title: Optional[str] = None) -> int:
    """Show the devices live (see the module docstring); return the exit status."""
    console = console or Console(highlight=False, width=None if sys.stdout.isatty() else 160)
    mon = DeviceMonitor(cluster, node=node, nvml=nvml, samplers=samplers, where=where, title=title)
    if metrics is not None:
        for info in mon.infos.values():
            metrics.set_device_info(info)

    def refresh():
        readings = mon.sample()
        if metrics is not None:
            for r in readings.values():
                metrics.set_reading(r)
        return mon.table(readings)

    if once:
        time.sleep(min(interval, 0.25))          # the CPU's utilisation needs two samples
        console.print(refresh())
        return 0
    from rich.live import Live

    n = 0
    try:
        with Live(refresh(), console=console, refresh_per_second=4, transient=False) as live:
            while count is None or n < count:
                time.sleep(interval)
                live.update(refresh())
                n += 1
    except KeyboardInterrupt:
        pass
    return 0


# -- CLI wiring --------------------------------------------------------------------------------

def add_monitor_parser(subparsers):
    """Add ``streammap monitor`` to an ``argparse`` subparsers object; returns the parser."""
    m = subparsers.add_parser("monitor", help="show the devices of this machine or of a cluster live")
    m.add_argument("--cluster", metavar="FILE", help="list this cluster file's devices, marking the local ones")
    m.add_argument("--ray", metavar="ADDRESS", nargs="?", const="auto",
                   help="show every node of the Ray cluster at ADDRESS (default auto), sampled on each node")
    m.add_argument("--node", help="which node of the cluster file this machine is (default: the host name)")
    m.add_argument("--interval", type=float, default=1.0, help="seconds between refreshes (default 1)")
    m.add_argument("--once", action="store_true", help="print one table and exit")
    m.add_argument("--count", type=int, help="stop after this many refreshes")
    m.add_argument("--metrics-port", type=int, metavar="PORT", help="also serve the device metrics on this port")
    m.add_argument("--metrics-addr", default="127.0.0.1", help="address to serve metrics on (default 127.0.0.1)")
    m.add_argument("--dcgm-names", action="store_true", help="also export DCGM exporter metric names")
    m.set_defaults(func=monitor_command)
    return m


def monitor_command(args) -> int:
    from .cluster import load_cluster
    from .errors import StreamMapError

    if args.ray and (args.cluster or args.node):
        raise StreamMapError(f"--ray and {'--cluster' if args.cluster else '--node'} both say which devices to show",
                             hint="--ray shows every node of the Ray cluster; --cluster and --node a cluster file's")
    cluster = load_cluster(args.cluster) if args.cluster else None
    ray = own = sampler = None
    if args.ray:
        from .discover_ray import connect
        from .monitor_ray import RayClusterSampler
        ray, own = connect(args.ray)              # "auto": a running cluster, never a new one
    metrics = None
    try:
        kw = {}
        if ray is not None:
            sampler = RayClusterSampler(ray, timeout=min(max(args.interval, 0.2), 5.0))
            kw = {"samplers": [sampler], "where": "Ray node", "title": f"devices of the Ray cluster at {args.ray}"}
        if args.metrics_port is not None:
            metrics = serve_metrics(args)
        return monitor(cluster, node=args.node, interval=args.interval, once=args.once, count=args.count,
                       metrics=metrics, **kw)
    finally:
        if metrics is not None:
            metrics.close()
        if sampler is not None:
            sampler.close()
        if own:
            ray.shutdown()


def add_run_monitoring_arguments(parser) -> None:
    """The monitoring options of ``streammap run``."""
    parser.add_argument("--metrics-port", type=int, metavar="PORT",
                        help="serve Prometheus metrics (streammap_*) on this port during the run (0: any free port)")
    parser.add_argument("--metrics-addr", default="127.0.0.1", metavar="ADDR",
                        help="address to serve metrics on (default 127.0.0.1; 0.0.0.0 for every interface)")
    parser.add_argument("--dcgm-names", action="store_true",
                        help="also export GPU metrics under the DCGM exporter's names (DCGM_FI_DEV_*)")
    parser.add_argument("--alerts", metavar="FILE", help="alert thresholds and re-mapping settings (YAML)")
    parser.add_argument("--no-telemetry", action="store_true", help="do not sample the devices during the run")
    parser.add_argument("--sample-interval", type=float, metavar="SECONDS",
                        help="seconds between telemetry samples (default 0.2)")


def run_monitoring_kwargs(args) -> dict:
    """Keyword arguments for :func:`streammap.runtime.run_plan` from the options above. Loads the
    alerts file now, so that a bad file is reported before anything runs."""
    from .alerts import load_alert_config

    kw: dict = {"telemetry": not getattr(args, "no_telemetry", False)}
    if getattr(args, "sample_interval", None):
        kw["interval"] = args.sample_interval
    if getattr(args, "alerts", None):
        kw["alerts"] = load_alert_config(args.alerts)
    if getattr(args, "metrics_port", None) is not None:
        kw["metrics"] = serve_metrics(args)
    return kw


def serve_metrics(args):
    """The :class:`~streammap.metrics.RunMetrics` that ``--metrics-port`` (with ``--metrics-addr``
    and ``--dcgm-names``) asks for, served, with a line on stderr saying where; the caller closes it."""
    from .metrics import open_metrics

    metrics, _ = open_metrics(args.metrics_port, dcgm_names=getattr(args, "dcgm_names", False),
                              addr=getattr(args, "metrics_addr", "127.0.0.1"))
    Console(stderr=True, highlight=False).print(
        f"serving metrics on http://{metrics.addr}:{metrics.port}/metrics", markup=False)
    return metrics
