"""Alerts: thresholds on what a run does, and what happens when one is crossed.

The rules come from a YAML file (``streammap run --alerts alerts.yaml``), validated with pydantic;
errors name the file, line and field like every other StreamMAP file. Every key is optional::

    memory_share: 0.95        # a device's memory use above this share of its capacity
    temperature: 90           # degrees C
    slow_task:                # a task slower than factor x its estimate (or just `slow_task: 10`)
      factor: 10
      baseline: run           # run: relative to this run's median measured/estimated ratio (so a
                              #      run emulated on the CPU, slower everywhere, does not alert on
                              #      every task); model: relative to the estimate itself.
                              #      Under --emulate this rule is off unless the file names it.
      min_time: 5ms           # tasks shorter than this never alert (timer and dispatch noise)
    device_lost: true         # a GPU NVML reports lost
    ecc: true                 # new uncorrected ECC errors, and Xid critical errors
    cooldown: 60s             # the same alert (kind, device) at most once in this time
    webhook:                  # POST each alert as JSON (or just `webhook: https://...`)
      url: https://hooks.example.org/streammap
      timeout: 2s
      headers: {Authorization: Bearer ...}
    remap:                    # automatic re-mapping when a device runs consistently slow
      enabled: auto           # auto: on for real runs, off under --emulate; or true / false
      factor: 2.0             # a device is slow when `window` tasks in a row run >= factor x
      window: 3               #   (its estimate x the other devices' median measured/estimated)
      min_task_time: 1ms      # shorter tasks are not evidence either way
      max_remaps: 3

Without a file, :data:`DEFAULT_CONFIG` applies (the values above, no webhook).

An alert is a log line (logger ``streammap.monitoring.alerts``, level WARNING, or ERROR for critical ones), a
count in ``streammap_alerts_total{kind, severity}``, an entry in the run record, and, with a
webhook, a JSON POST from a background thread with a short timeout: a slow or failing endpoint
never delays or fails the run (failures are logged once).
"""

from __future__ import annotations

import json
import logging
import queue
import socket
import threading
import urllib.request
from pathlib import Path
from typing import Literal, Optional, Union

import pydantic
from pydantic import BaseModel, ConfigDict, Field, field_validator

from streammap.cluster.model import Time
from streammap.errors import StreamMapError
from streammap.io.yamlfile import load_yaml, validation_error
from streammap.units import format_size, format_time

log = logging.getLogger("streammap.monitoring.alerts")

KINDS = ("memory", "temperature", "slow_task", "slow_device", "device_lost", "ecc", "xid", "remap")


class AlertConfigError(StreamMapError):
    """An alerts file is not valid."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class WebhookConfig(_Strict):
    url: str
    timeout: Time = Field(default=2.0, gt=0, le=30)
    headers: dict[str, str] = {}

    @field_validator("url")
    @classmethod
    def _http(cls, v: str) -> str:
        if not v.startswith(("http://", "https://")):
            raise ValueError("a webhook url starts with http:// or https://")
        return v


class SlowTaskRule(_Strict):
    factor: float = Field(default=10.0, gt=1.0)
    baseline: Literal["run", "model"] = "run"
    min_time: Time = Field(default=5e-3, ge=0)


class RemapConfig(_Strict):
    enabled: Union[bool, Literal["auto"]] = "auto"
    factor: float = Field(default=2.0, gt=1.0)
    window: int = Field(default=3, ge=1)
    min_task_time: Time = Field(default=1e-3, ge=0)
    max_remaps: int = Field(default=3, ge=0)

    def active(self, emulate: bool) -> bool:
        return (not emulate) if self.enabled == "auto" else bool(self.enabled)


class AlertConfig(_Strict):
    memory_share: Optional[float] = Field(default=0.95, gt=0, le=1)
    temperature: Optional[float] = Field(default=90.0, gt=0)
    slow_task: Optional[SlowTaskRule] = SlowTaskRule()
    device_lost: bool = True
    ecc: bool = True
    cooldown: Time = Field(default=60.0, ge=0)
    webhook: Optional[WebhookConfig] = None
    remap: RemapConfig = RemapConfig()

    @field_validator("slow_task", mode="before")
    @classmethod
    def _slow_number(cls, v):
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return {"factor": v}
        if v is False:
            return None
        return v

    @field_validator("webhook", mode="before")
    @classmethod
    def _webhook_str(cls, v):
        return {"url": v} if isinstance(v, str) else v

    def for_run(self, emulate: bool) -> "AlertConfig":
        """The rules a run applies. Under ``emulate`` the slow-task rule is off unless these rules
        name ``slow_task`` themselves: an emulated run times the plan's devices on this CPU, so a
        task far slower than its estimate there says nothing about the plan (a GPU's matrix
        product is a thousand times a CPU's, a copy only a few times)."""
        if emulate and "slow_task" not in self.model_fields_set:
            return self.model_copy(update={"slow_task": None})
        return self


DEFAULT_CONFIG = AlertConfig()


def load_alert_config(path) -> AlertConfig:
    """Read and validate an alerts file; errors give the file, line and field."""
    path = Path(path)
    data, lines = load_yaml(path, AlertConfigError)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise AlertConfigError("an alerts file is a mapping of rules (memory_share, temperature, slow_task, ...)",
                               path=path, line=1)
    try:
        return AlertConfig.model_validate(data)
    except pydantic.ValidationError as exc:
        raise validation_error(exc, path, lines, AlertConfigError, "alerts file") from None


def alert_config(value) -> AlertConfig:
    """An :class:`AlertConfig` from ``None`` (defaults), a path, a dict or a config."""
    if value is None:
        return DEFAULT_CONFIG
    if isinstance(value, AlertConfig):
        return value
    if isinstance(value, dict):
        try:
            return AlertConfig.model_validate(value)
        except pydantic.ValidationError as exc:
            raise validation_error(exc, "<alerts>", {}, AlertConfigError, "alert config") from None
    return load_alert_config(value)


class Webhook:
    """POST alerts as JSON from one daemon thread; never raises, never blocks the caller."""

    def __init__(self, config: WebhookConfig):
        self.config = config
        self._queue: queue.Queue = queue.Queue(maxsize=1000)
        self._failed = False
        self.sent = 0
        self._thread = threading.Thread(target=self._loop, name="streammap webhook", daemon=True)
        self._thread.start()

    def post(self, payload: dict) -> None:
        try:
            self._queue.put_nowait(payload)
        except queue.Full:
            pass

    def _loop(self) -> None:
        while True:
            payload = self._queue.get()
            if payload is None:
                self._queue.task_done()
                return
            try:
                body = json.dumps(payload).encode("utf-8")
                req = urllib.request.Request(self.config.url, data=body, method="POST",
                                             headers={"Content-Type": "application/json",
                                                      "User-Agent": "streammap", **self.config.headers})
                with urllib.request.urlopen(req, timeout=self.config.timeout) as resp:
                    resp.read(1024)
                self.sent += 1
            except Exception as exc:   # noqa: BLE001 -- a webhook never fails the run
                if not self._failed:
                    self._failed = True
                    log.warning("alert webhook %s failed: %s (further failures are not logged)",
                                self.config.url, exc)
            finally:
                self._queue.task_done()

    def close(self, timeout: float | None = None) -> None:
        """Let queued alerts go out, waiting at most ``timeout`` (default: the webhook timeout + 1 s)."""
        self.post(None)
        self._thread.join(self.config.timeout + 1.0 if timeout is None else timeout)


_HOST: list = []


def _hostname() -> str:
    """This host's name, asked once per process (every run's alert manager names it)."""
    if not _HOST:
        _HOST.append(socket.gethostname())
    return _HOST[0]


class AlertManager:
    """Evaluates the rules and raises alerts (log, metric, record, webhook).

    Thread-safe enough for its one caller, the run's monitoring thread; :meth:`fire` may also be
    called from the run's main thread (re-mapping).
    """

    def __init__(self, config: AlertConfig | None = None, metrics=None, context: dict | None = None):
        self.config = config or DEFAULT_CONFIG
        self.metrics = metrics
        self.context = dict(context or {})
        if "host" not in self.context:
            self.context["host"] = _hostname()
        self.alerts: list[dict] = []
        self._last: dict[tuple, float] = {}
        self._active: set[tuple] = set()
        self._ecc0: dict[str, int] = {}
        self._lock = threading.Lock()
        self.webhook = Webhook(self.config.webhook) if self.config.webhook is not None else None

    # -- raising ---------------------------------------------------------------------------
    def fire(self, kind: str, message: str, *, t: float, device: str | None = None, task: str | None = None,
             value: float | None = None, threshold: float | None = None, severity: str = "warning",
             cooldown: bool = True, key: tuple | None = None) -> bool:
        """Raise an alert unless the same ``key`` (default: kind, device, task) fired less than the
        config's ``cooldown`` ago."""
        key = key or (kind, device, task)
        with self._lock:
            last = self._last.get(key)
            if cooldown and last is not None and t - last < self.config.cooldown:
                return False
            self._last[key] = t
            rec = {"t": round(t, 6), "kind": kind, "severity": severity, "message": message, "device": device,
                   "task": task, "value": value, "threshold": threshold}
            self.alerts.append(rec)
        (log.error if severity == "critical" else log.warning)("alert [%s] %s: %s (at %s)",
                                                               severity, kind, message, format_time(t))
        if self.metrics is not None:
            try:
                self.metrics.alert(kind, severity)
            except Exception:          # noqa: BLE001
                pass
        if self.webhook is not None:
            payload = {"source": "streammap", **self.context, **rec,
                       "text": f"streammap alert [{severity}] {kind}: {message}"}
            self.webhook.post(payload)
        return True

    # -- rules -----------------------------------------------------------------------------
    def check_reading(self, t: float, r, where: str = "") -> None:
        """Memory, temperature, lost device and ECC rules on one :class:`~streammap.monitoring.telemetry.Reading`."""
        c = self.config
        dev = r.device
        label = dev + where
        share = r.memory_share
        if c.memory_share is not None and share is not None:
            key = ("memory", dev)
            if share > c.memory_share:
                if key not in self._active:
                    self._active.add(key)
                    self.fire("memory", f"{label} uses {share:.0%} of its memory ({format_size(r.memory_used)} "
                              f"of {format_size(r.memory_total)}; threshold {c.memory_share:.0%})",
                              t=t, device=dev, value=share, threshold=c.memory_share)
            elif share < c.memory_share * 0.98:
                self._active.discard(key)
        if c.temperature is not None and r.temperature is not None:
            key = ("temperature", dev)
            if r.temperature > c.temperature:
                if key not in self._active:
                    self._active.add(key)
                    self.fire("temperature", f"{label} is at {r.temperature:.0f} °C (threshold {c.temperature:.0f} °C)",
                              t=t, device=dev, value=r.temperature, threshold=c.temperature)
            elif r.temperature < c.temperature - 3:
                self._active.discard(key)
        if c.device_lost and r.lost and ("device_lost", dev) not in self._active:
            self._active.add(("device_lost", dev))
            self.fire("device_lost", f"{label} is lost (NVML: GPU is lost)", t=t, device=dev,
                      severity="critical", cooldown=False)
        if c.ecc and r.ecc_uncorrected is not None:
            base = self._ecc0.setdefault(dev, r.ecc_uncorrected)
            if r.ecc_uncorrected > base:
                self.fire("ecc", f"{label}: {r.ecc_uncorrected - base} new uncorrected ECC error(s)",
                          t=t, device=dev, value=float(r.ecc_uncorrected - base), threshold=0.0, severity="critical")
                self._ecc0[dev] = r.ecc_uncorrected

    def check_xid(self, t: float, event, where: str = "") -> None:
        if self.config.ecc:
            self.fire("xid", f"{event.device}{where}: Xid {event.xid} (critical error reported by the driver)",
                      t=t, device=event.device, value=float(event.xid), severity="critical", cooldown=False)

    def check_task(self, t: float, task_id: str, device: str, estimated: float, measured: float,
                   baseline: float | None, running: bool = False) -> bool:
        """Slow-task rule: ``measured >= factor x estimated x baseline`` (``baseline`` is the run's
        median measured/estimated ratio under ``baseline: run``, ``None`` while unknown)."""
        rule = self.config.slow_task
        if rule is None or estimated <= 0 or measured < rule.min_time:
            return False
        base = 1.0 if rule.baseline == "model" else baseline
        if base is None:
            return False
        limit = rule.factor * estimated * base
        if measured < limit:
            return False
        rel = "" if rule.baseline == "model" else \
            f" after calibration (this run's median measured/estimated ratio is {base:.3g})"
        what = "has been running for" if running else "took"
        # one alert per device per cooldown: a slow device would otherwise alert on every task
        return self.fire("slow_task", f"task {task_id} on {device} {what} {format_time(measured)}: "
                         f"{measured / (estimated * base):.1f}x its estimate of {format_time(estimated)}{rel}",
                         t=t, device=device, task=task_id, value=measured / (estimated * base),
                         threshold=rule.factor, key=("slow_task", device))

    def close(self) -> None:
        if self.webhook is not None:
            self.webhook.close()
