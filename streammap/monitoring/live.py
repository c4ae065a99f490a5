"""``streammap monitor``: the devices of this machine (or of a cluster file) live in the terminal.

A :class:`rich.live.Live` table refreshed every ``--interval`` seconds (default 1 s) from the same
samplers a run uses (:mod:`streammap.monitoring.telemetry`: NVML for NVIDIA GPUs, ``/proc`` for the CPU).
``--once`` prints one table and exits (scripts, tests); ``--count N`` stops after N refreshes.

``--cluster FILE`` lists every device of the cluster file and says, for each, whether it is on
this machine (its node is this host: the node name equals ``--node``, default the host name as
``streammap discover`` writes it, or the cluster has a single node) and whether it is observable
here (a GPU whose index NVML sees, or the CPU). Devices of other nodes are listed as remote.

``--ray [ADDRESS]`` shows every device of every node of a Ray cluster instead, sampled on each
node by a small actor (:mod:`streammap.monitoring.live_ray`), named ``node/device``.

``--metrics-port PORT`` also serves the device gauges of :mod:`streammap.monitoring.metrics` while it runs
(a small exporter for machines without dcgm-exporter; ``--dcgm-names`` as for ``run``).

The command's options are in :mod:`streammap.cli.monitor`; the monitoring options of ``run``
(``--metrics-port``, ``--metrics-addr``, ``--dcgm-names``, ``--alerts``, ``--no-telemetry``,
``--sample-interval``) in :mod:`streammap.cli.run`.
"""

from __future__ import annotations

import sys
import time
from typing import Optional

from rich.console import Console
from rich.table import Table

from streammap.cluster.discover import default_node_name
from streammap.monitoring.telemetry import CpuSampler, NvmlSampler, Reading
from streammap.units import format_size


def _bar(ratio: Optional[float], width: int = 10) -> str:
    if ratio is None:
        return "—"
    ratio = min(1.0, max(0.0, ratio))
    full = int(round(ratio * width))
    colour = "red" if ratio > 0.9 else ("yellow" if ratio > 0.6 else "green")
    return f"{ratio * 100:4.0f}% [{colour}]{'█' * full}[/{colour}]{'░' * (width - full)}"


def _local_node(spec, node: Optional[str]) -> Optional[str]:

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
    from rich.live import Live  # noqa: PLC0415

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
