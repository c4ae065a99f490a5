"""Prometheus metrics of a run (``streammap run --metrics-port PORT``).

Each :class:`RunMetrics` has its own :class:`prometheus_client.CollectorRegistry` (never the global
one, so several runs in one process do not mix), and :meth:`RunMetrics.serve` exposes it over HTTP
on 127.0.0.1 unless told otherwise. The executor's threads never touch it: the run's monitoring
thread (:mod:`streammap.runtime.supervisor`) feeds it once per sampling interval from the
executor's task lists and the device samplers.

Metrics (Prometheus naming: base units, ``_total`` for counters, ``_ratio`` for 0–1)

``streammap_task_duration_seconds``        histogram; labels ``kernel``, ``device`` (plan device)
``streammap_tasks``                        gauge; label ``state``: pending, running, done, failed
``streammap_device_utilization_ratio``     gauge 0–1; label ``device`` (local: ``gpu0``, ``cpu``)
``streammap_device_memory_used_bytes``     gauge; label ``device``
``streammap_device_memory_total_bytes``    gauge; label ``device``
``streammap_device_power_watts``           gauge; label ``device`` (where known)
``streammap_device_temperature_celsius``   gauge; label ``device`` (where known)
``streammap_device_info``                  gauge 1; labels ``device``, ``kind``, ``model``, ``uuid``,
                                           ``plan_devices`` (join the local device with the plan's)
``streammap_alerts_total``                 counter; labels ``kind``, ``severity``
``streammap_remaps_total``                 counter
``streammap_run_elapsed_seconds``          gauge; seconds since the run started

With ``dcgm_names=True`` the GPUs are also exported under the DCGM exporter's names and labels
(``gpu``, ``UUID``, ``device`` = ``nvidia<i>``, ``modelName``, ``Hostname``), so dashboards built
for dcgm-exporter work unchanged: ``DCGM_FI_DEV_GPU_UTIL`` (percent), ``DCGM_FI_DEV_FB_USED`` and
``DCGM_FI_DEV_FB_FREE`` (MiB), ``DCGM_FI_DEV_POWER_USAGE`` (W), ``DCGM_FI_DEV_GPU_TEMP`` (°C).
"""

from __future__ import annotations

import socket
from typing import Optional

from .errors import StreamMapError

#: Histogram buckets of task durations (seconds): 10 µs to 5 min, about 3 per decade.
DURATION_BUCKETS = (1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0, 30.0,
                    100.0, 300.0, float("inf"))
TASK_STATES = ("pending", "running", "done", "failed")
_MIB = 1024.0 * 1024.0


class RunMetrics:
    """The metrics of one run (or of ``streammap monitor``), in a private registry.

    Parameters
    ----------
    dcgm_names : bool
        Also export GPUs under the DCGM exporter's metric names and labels.
    hostname : str, optional
        The ``Hostname`` label of DCGM metrics (default: this host's name).
    """

    def __init__(self, dcgm_names: bool = False, hostname: Optional[str] = None):
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.dcgm_names = dcgm_names
        self.hostname = hostname or socket.gethostname()
        self.task_duration = Histogram("streammap_task_duration_seconds", "Measured duration of each task",
                                       ["kernel", "device"], buckets=DURATION_BUCKETS, registry=r)
        self.tasks = Gauge("streammap_tasks", "Tasks of the running plan by state", ["state"], registry=r)
        for s in TASK_STATES:
            self.tasks.labels(s).set(0)
        self.util = Gauge("streammap_device_utilization_ratio", "Device utilisation (0-1)", ["device"], registry=r)
        self.mem_used = Gauge("streammap_device_memory_used_bytes", "Device memory in use", ["device"], registry=r)
        self.mem_total = Gauge("streammap_device_memory_total_bytes", "Device memory capacity", ["device"],
                               registry=r)
        self.power = Gauge("streammap_device_power_watts", "Device power draw", ["device"], registry=r)
        self.temp = Gauge("streammap_device_temperature_celsius", "Device temperature", ["device"], registry=r)
        self.info = Gauge("streammap_device_info", "Observed devices (value 1) and the plan devices they host",
                          ["device", "kind", "model", "uuid", "plan_devices"], registry=r)
        self.alerts = Counter("streammap_alerts", "Alerts raised", ["kind", "severity"], registry=r)
        self.remaps = Counter("streammap_remaps", "Re-mappings of the rest of the plan", registry=r)
        self.elapsed = Gauge("streammap_run_elapsed_seconds", "Seconds since the run started", registry=r)
        if dcgm_names:
            labels = ["gpu", "UUID", "device", "modelName", "Hostname"]
            self.dcgm_util = Gauge("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", labels, registry=r)
            self.dcgm_fb_used = Gauge("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", labels, registry=r)
            self.dcgm_fb_free = Gauge("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", labels, registry=r)
            self.dcgm_power = Gauge("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", labels, registry=r)
            self.dcgm_temp = Gauge("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", labels, registry=r)
        self._server = None
        self._thread = None
        self._infos: dict[str, object] = {}
        self.port: Optional[int] = None
        self.addr: Optional[str] = None

    # -- serving --------------------------------------------------------------------------
    def serve(self, port: int, addr: str = "127.0.0.1") -> int:
        """Serve ``/metrics`` on ``addr:port`` (port 0: any free port) from a daemon thread;
        return the port. Like ``prometheus_client.start_http_server`` (it polls for shutdown every
        0.5 s; :meth:`close` wakes it with a connection, so closing is immediate)."""
        import threading
        from wsgiref.simple_server import make_server

        from prometheus_client import make_wsgi_app
        from prometheus_client.exposition import ThreadingWSGIServer, _SilentHandler

        try:
            server = make_server(addr, int(port), make_wsgi_app(self.registry), ThreadingWSGIServer,
                                 handler_class=_SilentHandler)
        except OSError as exc:
            raise StreamMapError(f"cannot serve metrics on {addr}:{port}: {exc.strerror or exc}",
                                 hint="choose another --metrics-port (0 picks a free one)") from None
        thread = threading.Thread(target=server.serve_forever, name="streammap metrics", daemon=True)
        thread.start()
        self._server, self._thread = server, thread
        self.port = int(server.server_address[1])
        self.addr = addr
        return self.port

    def close(self) -> None:
        """Stop serving (the metrics stay readable with :meth:`render`)."""
        server = self._server
        if server is None:
            return
        self._server = None
        import threading

        stopper = threading.Thread(target=server.shutdown, daemon=True)
        stopper.start()
        host = "127.0.0.1" if self.addr in ("0.0.0.0", "", None) else self.addr
        if host == "::":
            host = "::1"
        while stopper.is_alive():          # an empty connection wakes serve_forever's select
            try:
                socket.create_connection((host, self.port), timeout=0.2).close()
            except OSError:
                pass
            stopper.join(0.01)
        server.server_close()

    def render(self) -> str:
        """The exposition text, as a scrape would get it."""
        from prometheus_client import generate_latest

        return generate_latest(self.registry).decode("utf-8")

    # -- updates --------------------------------------------------------------------------
    def observe_task(self, kernel: str, device: str, seconds: float) -> None:
        self.task_duration.labels(kernel, device).observe(seconds)

    def set_tasks(self, pending: int, running: int, done: int, failed: int) -> None:
        for state, n in zip(TASK_STATES, (pending, running, done, failed)):
            self.tasks.labels(state).set(n)

    def set_device_info(self, info, plan_devices: list[str] | None = None) -> None:
        """Declare a device (a :class:`streammap.telemetry.DeviceInfo`)."""
        self._infos[info.id] = info
        self.info.labels(info.id, info.kind, info.model or "", info.uuid or "",
                         ",".join(plan_devices or [])).set(1)
        if info.memory_total:
            self.mem_total.labels(info.id).set(info.memory_total)

    def set_reading(self, reading) -> None:
        """Update the device gauges from a :class:`streammap.telemetry.Reading`."""
        d = reading.device
        if reading.utilization is not None:
            self.util.labels(d).set(reading.utilization)
        if reading.memory_used is not None:
            self.mem_used.labels(d).set(reading.memory_used)
        if reading.memory_total:
            self.mem_total.labels(d).set(reading.memory_total)
        if reading.power is not None:
            self.power.labels(d).set(reading.power)
        if reading.temperature is not None:
            self.temp.labels(d).set(reading.temperature)
        if self.dcgm_names:
            info = self._infos.get(d)
            if info is None or info.kind != "gpu":
                return
            idx = str(info.index if info.index is not None else d.removeprefix("gpu"))
            lab = (idx, info.uuid or "", f"nvidia{idx}", info.model or "", self.hostname)
            if reading.utilization is not None:
                self.dcgm_util.labels(*lab).set(round(reading.utilization * 100.0))
            if reading.memory_used is not None:
                self.dcgm_fb_used.labels(*lab).set(round(reading.memory_used / _MIB))
                total = reading.memory_total or info.memory_total
                if total:
                    self.dcgm_fb_free.labels(*lab).set(round((total - reading.memory_used) / _MIB))
            if reading.power is not None:
                self.dcgm_power.labels(*lab).set(reading.power)
            if reading.temperature is not None:
                self.dcgm_temp.labels(*lab).set(reading.temperature)

    def alert(self, kind: str, severity: str) -> None:
        self.alerts.labels(kind, severity).inc()

    def remapped(self) -> None:
        self.remaps.inc()
