"""Messages read once: the CLI's log format adds ``streammap: `` to every log record, so no log
message of the package may start with it again (``streammap: streammap alert ...``), and an alert
reads ``streammap: alert [warning] ...`` on the terminal."""

from __future__ import annotations

import ast
import logging
from pathlib import Path

from streammap.monitoring.alerts import AlertConfig, AlertManager

ROOT = Path(__file__).resolve().parents[2]
LOG_METHODS = {"debug", "info", "warning", "error", "exception", "critical"}


def _log_calls_starting_with_the_program_name():
    for folder in ("streammap", "runtime", "directives"):
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                call = node if isinstance(node, ast.Call) else None
                if call is None or not call.args:
                    continue
                func = call.func.body if isinstance(call.func, ast.IfExp) else call.func   # (log.error if x else log.warning)(...)
                if not isinstance(func, ast.Attribute) or func.attr not in LOG_METHODS:
                    continue
                first = call.args[0]
                text = first.value if isinstance(first, ast.Constant) and isinstance(first.value, str) else \
                    "".join(v.value for v in first.values[:1] if isinstance(v, ast.Constant)) \
                    if isinstance(first, ast.JoinedStr) else ""
                if text.lower().startswith("streammap"):
                    yield f"{path.relative_to(ROOT)}:{call.lineno}: {text[:60]!r}"


def test_no_log_message_repeats_the_prefix_the_cli_adds():
    assert list(_log_calls_starting_with_the_program_name()) == []


def test_an_alert_reads_with_one_prefix_under_the_cli_format(caplog):
    manager = AlertManager(AlertConfig())
    handler_format = logging.Formatter("streammap: %(message)s")
    with caplog.at_level(logging.WARNING, logger="streammap.monitoring.alerts"):
        manager.fire("memory", "gpu0 holds 95% of its memory", t=1.0)
    lines = [handler_format.format(r) for r in caplog.records]
    assert lines and lines[0].startswith("streammap: alert [warning] memory: gpu0 holds 95%")
