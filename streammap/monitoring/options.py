"""A run's monitoring options, in one object both backends take: :class:`MonitorOptions`.

``streammap.run``, :func:`streammap.runtime.run_plan` and
:func:`streammap.runtime.ray.executor.run_plan_ray` take ``monitoring=MonitorOptions(...)``; they
also keep taking the options one by one as keywords (``telemetry=False, interval=0.5``, the form
the README documents), which :func:`monitor_options` maps into the object. ``streammap run`` builds
the object from its command-line options (:func:`streammap.cli.run.monitoring_options`).

The object only holds what was asked for: the alert rules are read and checked, and a metrics
port is opened, when a run starts (:class:`streammap.runtime.lifecycle.RunSession`).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Optional

from streammap.monitoring.telemetry import DEFAULT_INTERVAL


@dataclass(frozen=True)
class MonitorOptions:
    """How a run is watched.

    Parameters
    ----------
    telemetry : bool
        Sample the devices during the run (NVML for the GPUs it uses, the CPU) into the run record;
        with ``False`` and no ``metrics`` or ``alerts``, nothing watches a local run at all.
    interval : float, optional
        Seconds between samples (default :data:`streammap.monitoring.telemetry.DEFAULT_INTERVAL`).
    metrics : int or streammap.monitoring.metrics.RunMetrics, optional
        A port to serve Prometheus metrics on during the run (on ``metrics_addr``; 0 picks a free
        port), or a :class:`~streammap.monitoring.metrics.RunMetrics` the caller serves and closes.
    dcgm_names : bool
        With a port: also export the DCGM exporter's metric names.
    metrics_addr : str
        With a port: the address to serve on (default ``127.0.0.1``).
    alerts : str, Path, dict or streammap.monitoring.alerts.AlertConfig, optional
        Alert rules and re-mapping settings (default :data:`streammap.monitoring.alerts.DEFAULT_CONFIG`:
        alerts on, re-mapping on except under ``emulate``).
    samplers : sequence, optional
        Telemetry samplers to use instead of this machine's (tests; local runs only: a Ray run's
        driver reads what its actors sample).
    """

    telemetry: bool = True
    interval: Optional[float] = None
    metrics: Any = None
    dcgm_names: bool = False
    metrics_addr: str = "127.0.0.1"
    alerts: Any = None
    samplers: Optional[tuple] = None

    def __post_init__(self):
        if self.samplers is not None:        # a tuple: the caller's list may change after the call
            object.__setattr__(self, "samplers", tuple(self.samplers))

    @property
    def watching(self) -> bool:
        """Whether a local run is watched at all: telemetry, metrics or alert rules asked for."""
        return self.telemetry or self.metrics is not None or self.alerts is not None

    @property
    def sample_interval(self) -> float:
        """Seconds between samples: ``interval``, else the default."""
        return self.interval or DEFAULT_INTERVAL


#: The keywords the run functions take one by one, mapped into :class:`MonitorOptions`.
MONITORING_KEYWORDS = tuple(f.name for f in fields(MonitorOptions))


def monitor_options(monitoring: Optional[MonitorOptions] = None, *, caller: str = "run_plan",
                    **keywords) -> MonitorOptions:
    """The options of a run called with ``monitoring=`` or with the options as keywords.

    Raises :class:`TypeError`, as Python does for a bad call, for an unknown keyword, a
    ``monitoring`` that is not a :class:`MonitorOptions`, or both forms at once (which of them
    would win is not obvious). ``caller`` names the function in the message.
    """
    unknown = [k for k in keywords if k not in MONITORING_KEYWORDS]
    if unknown:
        raise TypeError(f"{caller}() got an unexpected keyword argument {unknown[0]!r}")
    if monitoring is None:
        return MonitorOptions(**keywords)
    if not isinstance(monitoring, MonitorOptions):
        raise TypeError(f"{caller}(): monitoring must be a MonitorOptions, not {type(monitoring).__name__}")
    if keywords:
        raise TypeError(f"{caller}() takes monitoring= or the monitoring keywords, not both "
                        f"(got {', '.join(sorted(keywords))} too): put them in the MonitorOptions")
    return monitoring
