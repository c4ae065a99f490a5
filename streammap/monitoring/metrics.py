"""Prometheus metrics of a run (``streammap run --metrics-port PORT``).

Each :class:`RunMetrics` has its own :class:`prometheus_client.CollectorRegistry` (never the global
one, so several runs in one process do not mix), and :meth:`RunMetrics.serve` exposes it over HTTP
on 127.0.0.1 unless told otherwise. The executor's threads never touch it: the run's monitoring
thread (:mod:`streammap.runtime.supervisor`) feeds it once per sampling interval from the
executor's task lists and the device samplers.

Updates are *stored*, not applied: :meth:`~RunMetrics.set_reading`, :meth:`~RunMetrics.set_tasks`
and :meth:`~RunMetrics.set_elapsed` keep the latest values (readings merged field by field, so a
field a later reading lacks keeps its last value), task durations are handed over as a list
(:meth:`~RunMetrics.observe_tasks`) or as a function that lists them
(:meth:`~RunMetrics.observe_tasks_from`: the end of a run hands over the executor's lists and
computes nothing), and all of it is folded into the Prometheus objects when the metrics are read
(a scrape, :meth:`RunMetrics.render`, any ``collect`` of the registry), by a collector registered
first. So what a run pays is a few dict stores and ``list.extend`` calls; a scrape pays the rest.
Labelled children are looked up once.

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
import threading
from bisect import bisect_left
from typing import Optional

from streammap.errors import StreamMapError

#: Histogram buckets of task durations (seconds): 10 µs to 5 min, about 3 per decade.
DURATION_BUCKETS = (1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0, 30.0,
                    100.0, 300.0, float("inf"))
TASK_STATES = ("pending", "running", "done", "failed")
_MIB = 1024.0 * 1024.0


_READING_FIELDS = ("utilization", "memory_used", "memory_total", "power", "temperature")


def _merged(old, new):
    """``new`` with the fields it lacks taken from ``old`` (a copy when any is taken)."""
    missing = [f for f in _READING_FIELDS if getattr(new, f) is None and getattr(old, f) is not None]
    if not missing:
        return new
    import copy  # noqa: PLC0415

    out = copy.copy(new)
    for f in missing:
        setattr(out, f, getattr(old, f))
    return out


class _Flush:
    """A collector with no metrics of its own: folds a :class:`RunMetrics`' pending updates into
    its metrics when the registry is collected (before them: they are registered later)."""

    def __init__(self, metrics: "RunMetrics"):
        self._metrics = metrics

    def collect(self):
        self._metrics.flush()
        return []


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
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram  # noqa: PLC0415

        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        # task durations a run hands over are folded into the histogram when the metrics are read
        # (a scrape, render()), by this collector, registered first so it runs before the others
        self._pending: list = []                 # (kernel, device, seconds)
        self._sources: list = []                 # functions that return such lists
        self._n_pending = 0
        self._readings: dict = {}                # device -> latest Reading (merged), not yet applied
        self._task_state = None                  # (pending, running, done, failed), or (function, arg)
        self._elapsed: Optional[float] = None
        self._pending_lock = threading.Lock()    # guards the stores above (held for a swap or a store)
        self._flush_lock = threading.Lock()      # one flush at a time, so none applies stale values
        r.register(_Flush(self))
        self.dcgm_names = dcgm_names
        self.hostname = hostname or socket.gethostname()
        self.task_duration = Histogram("streammap_task_duration_seconds", "Measured duration of each task",
                                       ["kernel", "device"], buckets=DURATION_BUCKETS, registry=r)
        self.tasks = Gauge("streammap_tasks", "Tasks of the running plan by state", ["state"], registry=r)
        self._task_states = [self.tasks.labels(s) for s in TASK_STATES]
        for g in self._task_states:
            g.set(0)
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
        # labelled children, looked up once (``labels()`` takes a lock and checks the labels: a
        # run feeds the same few children again and again)
        self._durations: dict[tuple, object] = {}
        self._device_gauges: dict[str, list] = {}
        self._dcgm_gauges: dict[tuple, list] = {}
        self._declared: dict[str, tuple] = {}
        self.port: Optional[int] = None
        self.addr: Optional[str] = None

    # -- serving --------------------------------------------------------------------------
    def serve(self, port: int, addr: str = "127.0.0.1") -> int:
        """Serve ``/metrics`` on ``addr:port`` (port 0: any free port) from a daemon thread;
        return the port. Like ``prometheus_client.start_http_server`` (it polls for shutdown every
        0.5 s; :meth:`close` wakes it with a connection, so closing is immediate)."""
        import threading  # noqa: PLC0415
        from wsgiref.simple_server import make_server  # noqa: PLC0415

        from prometheus_client import make_wsgi_app  # noqa: PLC0415
        from prometheus_client.exposition import ThreadingWSGIServer, _SilentHandler  # noqa: PLC0415

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
        import threading  # noqa: PLC0415

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
        from prometheus_client import generate_latest  # noqa: PLC0415

        return generate_latest(self.registry).decode("utf-8")

    # -- updates --------------------------------------------------------------------------
    def observe_task(self, kernel: str, device: str, seconds: float) -> None:
        child = self._durations.get((kernel, device))
        if child is None:
            child = self._durations[(kernel, device)] = self.task_duration.labels(kernel, device)
        child.observe(seconds)

    #: Pending durations above this many are folded in at once rather than at the next read.
    PENDING_MAX = 10_000

    def observe_tasks(self, items) -> None:
        """:meth:`observe_task` for each ``(kernel, device, seconds)`` of ``items`` (a list), at
        the next read of the metrics: the run's thread only hands the list over."""
        with self._pending_lock:
            self._pending.extend(items)
            self._n_pending += len(items)
            if self._n_pending <= self.PENDING_MAX:
                return
        self.flush()

    def observe_tasks_from(self, source, n: int, arg=None) -> None:
        """Like :meth:`observe_tasks` for the ``n`` (about) items ``source(arg)`` returns, called
        at the next read of the metrics (``source`` must only read data that no longer changes)."""
        with self._pending_lock:
            self._sources.append((source, arg))
            self._n_pending += n
            if self._n_pending <= self.PENDING_MAX:
                return
        self.flush()

    def flush(self) -> None:
        """Apply the stored updates: gauges, then the pending task durations, folded into the
        histogram (batched: one update of the sum and of each bucket touched per (kernel, device),
        rather than per task)."""
        with self._flush_lock:
            with self._pending_lock:
                items, self._pending = self._pending, []
                sources, self._sources = self._sources, []
                readings, self._readings = self._readings, {}
                state, self._task_state = self._task_state, None
                elapsed, self._elapsed = self._elapsed, None
                self._n_pending = 0
            for r in readings.values():
                self._apply_reading(r)
            if state is not None:
                try:
                    if len(state) == 2:                  # (function, its argument)
                        state = state[0](state[1])
                    for g, v in zip(self._task_states, state):
                        g.set(v)
                except Exception:      # noqa: BLE001 -- metrics never fail a scrape
                    pass
            if elapsed is not None:
                self.elapsed.set(elapsed)
            for source, arg in sources:
                try:
                    items += source(arg)
                except Exception:      # noqa: BLE001
                    pass
            if items:
                self._fold(items)

    def _fold(self, items: list) -> None:
        groups: dict[tuple, list] = {}
        for kernel, device, seconds in items:
            g = groups.get((kernel, device))
            if g is None:
                groups[(kernel, device)] = [seconds]
            else:
                g.append(seconds)
        for key, values in groups.items():
            child = self._durations.get(key)
            if child is None:
                child = self._durations[key] = self.task_duration.labels(*key)
            if len(values) == 1:
                child.observe(values[0])
                continue
            try:           # prometheus_client's Histogram: _upper_bounds, _buckets (counters), _sum
                bounds, buckets, total = child._upper_bounds, child._buckets, child._sum
            except AttributeError:
                for v in values:
                    child.observe(v)
                continue
            counts: dict[int, int] = {}
            for v in values:
                i = bisect_left(bounds, v)           # the first bound >= v, as observe() finds it
                counts[i] = counts.get(i, 0) + 1
            total.inc(sum(values))
            for i, n in counts.items():
                if i < len(buckets):
                    buckets[i].inc(n)

    def set_tasks(self, pending: int, running: int, done: int, failed: int) -> None:
        with self._pending_lock:
            self._task_state = (pending, running, done, failed)

    def set_tasks_from(self, source, arg=None) -> None:
        """:meth:`set_tasks` with the counts ``source(arg)`` returns at the next read (unless a
        later :meth:`set_tasks` replaces it)."""
        with self._pending_lock:
            self._task_state = (source, arg)

    def set_elapsed(self, seconds: float) -> None:
        with self._pending_lock:
            self._elapsed = seconds

    def set_device_info(self, info, plan_devices: list[str] | None = None) -> None:
        """Declare a device (a :class:`streammap.monitoring.telemetry.DeviceInfo`)."""
        key = (info, tuple(plan_devices or ()))
        if self._declared.get(info.id) == key:       # the same device as the last run's: nothing new
            return
        self._declared[info.id] = key
        self._infos[info.id] = info
        self.info.labels(info.id, info.kind, info.model or "", info.uuid or "",
                         ",".join(plan_devices or [])).set(1)
        if info.memory_total:
            self.mem_total.labels(info.id).set(info.memory_total)

    def set_reading(self, reading) -> None:
        """Update the device gauges from a :class:`streammap.monitoring.telemetry.Reading` (at the next read
        of the metrics; a field the reading lacks keeps its value)."""
        with self._pending_lock:
            prev = self._readings.get(reading.device)
            if prev is not None:
                reading = _merged(prev, reading)
            self._readings[reading.device] = reading

    def _apply_reading(self, reading) -> None:
        d = reading.device
        g = self._device_gauges.get(d)
        if g is None:                 # children made when first set: a field never known is not exported
            g = self._device_gauges[d] = [None] * 5
        if reading.utilization is not None:
            (g[0] or self._child(g, 0, self.util, (d,))).set(reading.utilization)
        if reading.memory_used is not None:
            (g[1] or self._child(g, 1, self.mem_used, (d,))).set(reading.memory_used)
        if reading.memory_total:
            (g[2] or self._child(g, 2, self.mem_total, (d,))).set(reading.memory_total)
        if reading.power is not None:
            (g[3] or self._child(g, 3, self.power, (d,))).set(reading.power)
        if reading.temperature is not None:
            (g[4] or self._child(g, 4, self.temp, (d,))).set(reading.temperature)
        if self.dcgm_names:
            info = self._infos.get(d)
            if info is None or info.kind != "gpu":
                return
            idx = str(info.index if info.index is not None else d.removeprefix("gpu"))
            lab = (idx, info.uuid or "", f"nvidia{idx}", info.model or "", self.hostname)
            g = self._dcgm_gauges.get(lab)
            if g is None:
                g = self._dcgm_gauges[lab] = [None] * 5
            if reading.utilization is not None:
                (g[0] or self._child(g, 0, self.dcgm_util, lab)).set(round(reading.utilization * 100.0))
            if reading.memory_used is not None:
                (g[1] or self._child(g, 1, self.dcgm_fb_used, lab)).set(round(reading.memory_used / _MIB))
                total = reading.memory_total or info.memory_total
                if total:
                    (g[2] or self._child(g, 2, self.dcgm_fb_free, lab)).set(round((total - reading.memory_used) / _MIB))
            if reading.power is not None:
                (g[3] or self._child(g, 3, self.dcgm_power, lab)).set(reading.power)
            if reading.temperature is not None:
                (g[4] or self._child(g, 4, self.dcgm_temp, lab)).set(reading.temperature)

    @staticmethod
    def _child(cache: list, pos: int, metric, labels: tuple):
        child = cache[pos] = metric.labels(*labels)
        return child

    def alert(self, kind: str, severity: str) -> None:
        self.alerts.labels(kind, severity).inc()

    def remapped(self) -> None:
        self.remaps.inc()


def open_metrics(metrics, *, dcgm_names: bool = False, addr: str = "127.0.0.1") -> tuple:
    """``(metrics, own)`` for a run's ``metrics=`` argument: a port (0 picks a free one) gets a new
    :class:`RunMetrics` served on ``addr`` that the run owns (``own``: it closes it); a
    :class:`RunMetrics` (or ``None``) is the caller's. Raises :class:`StreamMapError` when the
    port is taken."""
    if isinstance(metrics, int) and not isinstance(metrics, bool):
        port = metrics
        metrics = RunMetrics(dcgm_names=dcgm_names)
        metrics.serve(port, addr=addr)
        return metrics, True
    return metrics, False
