"""The run report: one self-contained HTML page a person can open, and its pictures as files.

``streammap show out.run.json --html [REPORT.html]`` writes (default ``out.report.html``):

``REPORT.gantt.png``         the Gantt chart of estimated against measured (:func:`streammap.views.show.gantt`)
``REPORT.utilisation.png``   device utilisation and memory over time, from the run's telemetry,
                             with the alerts and re-mappings marked
``REPORT.html``              the summary, both pictures embedded (base64 PNG: the page needs no
                             other file), the tasks whose estimates were furthest off, the alerts
                             and the re-mappings

"Furthest off" ranks tasks by ``|log(measured / estimated / median ratio)|``: relative to the
run's median measured/estimated ratio, so that a run slower than the model everywhere (emulated on
a CPU) still shows which tasks the model got wrong *compared with the others*; the raw ratio is
in the table too.
"""

from __future__ import annotations

import base64
import html
import math
import statistics
from dataclasses import dataclass
from pathlib import Path

from streammap.io.files import make_parent
from streammap.runrecord import RunRecord, read_run_record
from streammap.units import format_size, format_time
from streammap.views.show import _palette, _save, _time_unit, gantt, run_summary

TOP = 15


@dataclass
class ReportFiles:
    html: Path
    images: list


def default_report_path(record_path) -> Path:
    """``out.run.json`` → ``out.report.html``."""
    p = Path(record_path)
    name = p.name
    stem = name[: -len(".run.json")] if name.endswith(".run.json") else p.stem
    return p.with_name(stem + ".report.html")


def furthest_off(record: RunRecord, top: int = TOP) -> list[dict]:
    """The ``top`` tasks whose measured time is furthest from the estimate, relative to the run's
    median ratio: dicts with task, kernel, device, estimated, measured, ratio, relative."""
    rows = []
    for t in record.tasks:
        m = t.measured
        if m is None or t.estimated <= 0 or m <= 0:
            continue
        rows.append({"task": t.id, "kernel": t.kernel, "device": t.device, "estimated": t.estimated,
                     "measured": m, "ratio": m / t.estimated})
    if not rows:
        return []
    med = statistics.median(r["ratio"] for r in rows)
    for r in rows:
        r["relative"] = r["ratio"] / med if med > 0 else math.inf
    rows.sort(key=lambda r: (-abs(math.log(r["relative"])) if 0 < r["relative"] < math.inf else -math.inf,
                             r["task"]))
    return rows[:top]


def utilisation_picture(record: RunRecord, path) -> Path:
    """Device utilisation (%) and memory used over time, alerts and re-mappings marked."""
    from matplotlib.figure import Figure  # noqa: PLC0415


    path = Path(path)
    tel = record.telemetry
    devs = tel.devices if tel is not None else []
    fig = Figure(figsize=(10, 5.5), layout="constrained")
    ax_u, ax_m = fig.subplots(2, 1, sharex=True)
    t_max = max([record.wall_time] + [max(d.t) for d in devs if d.t])
    scale, unit = _time_unit(t_max if t_max > 0 else 1.0)
    colours = _palette(max(1, len(devs)))
    any_mem = False
    for c, d in zip(colours, devs):
        label = d.id + (f" ({', '.join(d.plan_devices)})" if d.plan_devices else "")
        xs = [t / scale for t in d.t]
        if d.utilization:
            pts = [(x, 100.0 * u) for x, u in zip(xs, d.utilization) if u is not None]
            if pts:
                ax_u.plot(*zip(*pts), color=c, label=label, linewidth=1.4, marker="." if len(pts) < 40 else None)
        if d.memory_used:
            pts = [(x, m / 2**30) for x, m in zip(xs, d.memory_used) if m is not None]
            if pts:
                any_mem = True
                ax_m.plot(*zip(*pts), color=c, label=label, linewidth=1.4)
            if d.memory_total:
                ax_m.axhline(d.memory_total / 2**30, color=c, linestyle=":", linewidth=0.8)
    for a in record.alerts:
        for ax in (ax_u, ax_m):
            ax.axvline(a.t / scale, color="#d62728" if a.severity == "critical" else "#ff7f0e",
                       linewidth=0.8, alpha=0.6)
    for r in record.remaps:
        for ax in (ax_u, ax_m):
            ax.axvline(r.t / scale, color="#2ca02c", linewidth=1.5, linestyle="--")
    ax_u.set_ylabel("utilisation (%)")
    ax_u.set_ylim(-2, 102)
    ax_m.set_ylabel("memory used (GiB)")
    ax_m.set_xlabel(f"time since the run started ({unit}); orange/red: alerts, green dashed: re-mappings")
    ax_u.set_xlim(0, t_max / scale if t_max > 0 else 1)
    if devs:
        ax_u.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False, title="device",
                    title_fontsize=8)
    else:
        ax_u.text(0.5, 0.5, "no telemetry in this run record", transform=ax_u.transAxes, ha="center",
                  va="center", color="#888888")
    if not any_mem:
        ax_m.text(0.5, 0.5, "no memory readings", transform=ax_m.transAxes, ha="center", va="center",
                  color="#888888")
    for ax in (ax_u, ax_m):
        ax.grid(True, linewidth=0.4, alpha=0.5)
    ax_u.set_title(f"Devices during the run of {record.plan} (every {format_time(tel.interval)})" if tel else
                   f"Devices during the run of {record.plan}", loc="left", fontsize=10)
    return _save(fig, path, 110)


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode("ascii")


def _e(x) -> str:
    return html.escape("" if x is None else str(x))


def _table(headers: list[str], rows: list[list], right: set[int] = frozenset()) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td{' class=r' if i in right else ''}>{_e(c)}</td>" for i, c in enumerate(r))
                   + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


_CSS = """body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:2em auto;max-width:1200px;
color:#222;padding:0 1em}h1{font-size:1.4em}h2{font-size:1.15em;margin-top:1.6em;border-bottom:1px solid #ddd}
pre{background:#f6f8fa;padding:.8em;overflow-x:auto;font-size:.85em}table{border-collapse:collapse;font-size:.85em}
td,th{border:1px solid #ddd;padding:.25em .6em;text-align:left}td.r{text-align:right;font-variant-numeric:tabular-nums}
th{background:#f0f0f0}img{max-width:100%;border:1px solid #eee}.ok{color:#2ca02c}.failed{color:#d62728}"""


def render_html(record: RunRecord, gantt_png: Path | None, util_png: Path | None, top: int = TOP) -> str:

    status = f"<span class={record.status}>{_e(record.status)}</span>"
    parts = [f"<!doctype html><html><head><meta charset=utf-8><title>StreamMAP run report: {_e(record.plan)}</title>"
             f"<style>{_CSS}</style></head><body>",
             f"<h1>StreamMAP run report: {_e(record.plan)} ({status})</h1>",
             f"<pre>{_e(run_summary(record))}</pre>"]
    if gantt_png is not None:
        parts.append("<h2>Estimated against measured</h2><p>Per device, each task's estimate (faint, above) and "
                     "its measurement (solid, below).</p>"
                     f"<img alt='Gantt chart' src='data:image/png;base64,{_b64(gantt_png)}'>")
    if util_png is not None:
        parts.append(f"<h2>Devices over time</h2><img alt='utilisation' src='data:image/png;base64,{_b64(util_png)}'>")
    rows = furthest_off(record, top)
    parts.append("<h2>Tasks whose estimates were furthest off</h2><p>Ranked by measured/estimated relative to this "
                 "run's median ratio (the cost model's overall calibration).</p>")
    if rows:
        parts.append(_table(["task", "kernel", "device", "estimated", "measured", "measured/estimated",
                             "relative to median"],
                            [[r["task"], r["kernel"], r["device"], format_time(r["estimated"]),
                              format_time(r["measured"]), f"{r['ratio']:.3g}x", f"{r['relative']:.3g}x"]
                             for r in rows], right={3, 4, 5, 6}))
    else:
        parts.append("<p>No task has both an estimate and a measurement.</p>")
    parts.append("<h2>Alerts</h2>")
    if record.alerts:
        parts.append(_table(["time", "severity", "kind", "device", "message"],
                            [[format_time(a.t), a.severity, a.kind, a.device or "", a.message] for a in record.alerts],
                            right={0}))
    else:
        parts.append("<p>None.</p>")
    parts.append("<h2>Re-mappings</h2>")
    if record.remaps:
        parts.append(_table(["time", "reason", "devices", "factor", "unfinished", "moved", "re-run", "mapping time",
                             "drain time", "new estimated makespan"],
                            [[format_time(r.t), r.reason, ", ".join(r.devices) or ", ".join(r.lost),
                              ", ".join(f"{f:.3g}x" for f in r.factors.values()), r.unfinished, r.moved, r.rerun,
                              format_time(r.mapping_time), format_time(r.drain_time),
                              format_time(r.estimated_makespan)] for r in record.remaps], right={0, 3, 4, 5, 6, 7, 8, 9}))
    else:
        parts.append("<p>None.</p>")
    tel = record.telemetry
    if tel is not None and tel.devices:
        rows = []
        for d in tel.devices:
            def peak(xs, f=lambda v: v):
                vals = [v for v in (xs or []) if v is not None]
                return f(max(vals)) if vals else "—"
            def mean(xs):
                vals = [v for v in (xs or []) if v is not None]
                return f"{100 * sum(vals) / len(vals):.0f}%" if vals else "—"
            rows.append([d.id, d.model or "", ", ".join(d.plan_devices), mean(d.utilization),
                         peak(d.memory_used, format_size), peak(d.power, lambda v: f"{v:.0f} W"),
                         peak(d.temperature, lambda v: f"{v:.0f} °C"), len(d.t), "yes" if d.lost else ""])
        parts.append("<h2>Telemetry</h2>" + _table(["device", "model", "plan devices", "mean utilisation",
                                                    "peak memory", "peak power", "peak temperature", "samples",
                                                    "lost"], rows, right={3, 4, 5, 6, 7}))
        if tel.xid_events:
            parts.append(_table(["time", "device", "Xid"], [[format_time(e.t), e.device, e.xid] for e in tel.xid_events]))
    parts.append("</body></html>")
    return "\n".join(parts)


def write_report(record, path=None, *, top: int = TOP, record_path=None) -> ReportFiles:
    """Write the report of ``record`` (a :class:`RunRecord` or a run-record file) to ``path``
    (default: beside the record, ``out.report.html``), with its two PNGs beside it."""

    if not isinstance(record, RunRecord):
        record_path = record
        record = read_run_record(record)
    if path is None:
        path = default_report_path(record_path or "run.run.json")
    path = make_parent(path, "report")
    stem = path.name[: -len(".html")] if path.name.endswith(".html") else path.name
    g = path.with_name(stem + ".gantt.png")
    u = path.with_name(stem + ".utilisation.png")
    gantt(record, g)
    utilisation_picture(record, u)
    text = render_html(record, g, u, top)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
    return ReportFiles(html=path, images=[g, u])
