"""Watching runs and devices: telemetry sampling (:mod:`.telemetry`), Prometheus metrics
(:mod:`.metrics`), alert rules (:mod:`.alerts`), and ``streammap monitor`` live in the terminal, on this
machine or a cluster file (:mod:`.live`) and on a Ray cluster (:mod:`.live_ray`)."""
