"""What ``streammap show`` prints and draws: tables, summaries and pictures of plans and runs.

Text
    :func:`plan_table` / :func:`plan_summary` for a :class:`~streammap.plan.Plan`,
    :func:`run_table` / :func:`run_summary` for a :class:`~streammap.runrecord.RunRecord`,
    :func:`cluster_table` for a cluster (what ``streammap discover`` found),
    :func:`what_if_summary` for a :class:`~streammap.whatif.WhatIf` (``show --what-if``). Tables are
    :class:`rich.table.Table`; summaries are plain text (no rich markup: task ids contain ``[``,
    so print them with ``markup=False`` or plain ``print``).
Pictures (PNG, SVG or PDF, chosen by the file's extension; matplotlib is imported only here)
    :func:`gantt` -- one row per device, one bar per task coloured by kernel; for a run record two
    bars per task, the estimate faint above the measurement, so a glance shows where the cost
    model was wrong. :func:`graph_picture` -- the task graph, layered left to right by
    topological generation, nodes coloured by device.

Both pictures use one ``broken_barh``/scatter call per device rather than one artist per task,
so a plan of 10,000 tasks draws in a few seconds; labels are drawn only where they fit (and at
most :data:`MAX_LABELS`), graph labels only up to :data:`GRAPH_LABELS_UP_TO` tasks.
"""

from __future__ import annotations

import math
import operator
import re
from pathlib import Path
from typing import Iterable, Union

import numpy as np
from rich.table import Table

from streammap.errors import StreamMapError
from streammap.io.files import atomic_write, make_parent
from streammap.placement.sharing import share_profile, stack_offsets
from streammap.plan import Plan
from streammap.runrecord import RunRecord
from streammap.strategies.explain import strategy_sentence
from streammap.units import format_size, format_time

PICTURE_FORMATS = (".png", ".svg", ".pdf")
MAX_LABELS = 400
GRAPH_LABELS_UP_TO = 100
GRAPH_ARROWS_UP_TO = 400

PlanOrRecord = Union[Plan, RunRecord]


# -- tables and summaries -----------------------------------------------------------------------

def _ft(t: float | None) -> str:
    return "—" if t is None else format_time(t)


def _short(task_id: str) -> str:
    """``bandpass[3]@fm_radio.py:12`` → ``bandpass[3]``."""
    return task_id.split("@", 1)[0] or task_id


def _caption_more(table: Table, shown: int, total: int) -> None:
    if shown < total:
        table.caption = f"… {total - shown} more of {total} tasks not shown"


def plan_table(plan: Plan, limit: int | None = None) -> Table:
    """Tasks of ``plan`` sorted by estimated start: id, kernel, device, start, finish, duration,
    number of deps. ``limit`` keeps the first rows only (a caption says how many are left out)."""
    order = {t.id: i for i, t in enumerate(plan.tasks)}
    tasks = sorted(plan.tasks, key=lambda t: (t.start, t.finish, order[t.id]))
    table = Table(title=f"plan: {len(plan.tasks)} tasks, mapper {plan.mapper.name}", title_justify="left")
    table.add_column("task", overflow="fold")
    table.add_column("kernel")
    table.add_column("device")
    for name in ("start", "finish", "duration"):
        table.add_column(name, justify="right")
    table.add_column("deps", justify="right")
    shown = tasks if limit is None else tasks[:max(0, limit)]
    for t in shown:
        table.add_row(t.id, t.kernel, t.device, format_time(t.start), format_time(t.finish),
                      format_time(t.finish - t.start), str(len(t.deps)))
    _caption_more(table, len(shown), len(tasks))
    return table


def _makespan(plan: Plan) -> float:
    end = max((t.finish for t in plan.tasks), default=0.0)
    return plan.mapper.estimated_makespan or end


def plan_summary(plan: Plan) -> str:
    """Mapper, estimated makespan against the lower bound and HEFT, tasks, devices used and each
    device's busy share of the makespan."""
    m = plan.mapper
    span = _makespan(plan)
    src = plan.source.path + (f" (entry {plan.source.entry})" if plan.source.entry else "")
    lines = [f"plan of {src}, objective {plan.objective}, cluster {plan.cluster.name}"]
    mapper = f"mapper: {m.name}"
    mapping_time = getattr(m, "mapping_time", None)        # not in every plan version
    if mapping_time is not None:
        mapper += f" (mapped in {format_time(mapping_time)})"
    lines.append(mapper)
    lines.append(f"estimated makespan: {format_time(m.estimated_makespan)}")
    lb = f"lower bound: {format_time(m.lower_bound)}"
    if m.lower_bound > 0:
        lb += f" (makespan is {m.estimated_makespan / m.lower_bound:.3g}x the bound)"
    if getattr(m, "solver_bound", None) is not None and m.solver_bound >= m.lower_bound:
        lb += ", proven by the exact solver"
    lines.append(lb)
    if m.heft_makespan is not None:
        lines.append(f"HEFT makespan: {format_time(m.heft_makespan)}")
    if m.spill_bytes is not None:
        lines.append(f"memory oversubscription: {format_size(m.spill_bytes)} expected to move to the host and "
                     "back (included in the makespan)")
    lines.append(plan_verdict(plan))
    lines.append(strategy_sentence(plan))
    by_dev = plan.tasks_by_device()
    used = [d for d, ts in by_dev.items() if ts]
    kernels = {t.kernel for t in plan.tasks}
    lines.append(f"tasks: {len(plan.tasks)} ({len(kernels)} kernel{'s' if len(kernels) != 1 else ''}); "
                 f"devices used: {len(used)} of {len(plan.devices)}")
    if plan.params:
        lines.append("params: " + ", ".join(f"{k}={v}" for k, v in plan.params.items()))
    lines.append("device busy share of the makespan:")
    width = max((len(d) for d in by_dev), default=0)
    for d in plan.devices:
        ts = by_dev[d.id]
        busy = sum(t.share * (t.finish - t.start) for t in ts)      # a task with share s uses s of it
        share = busy / span if span > 0 else 0.0
        what = " ".join(x for x in (d.kind, d.model or "") if x)
        lines.append(f"  {d.id:<{width}}  {share:6.1%}  busy {format_time(busy):>10}  "
                     f"{len(ts):>5} task{'s' if len(ts) != 1 else ' '}  {what}{colocation_note(ts)}")
    return "\n".join(lines)


def colocation_note(tasks) -> str:
    """`` · up to 4 at once, peak share 100%`` for a device whose tasks run co-located, else ``""``."""
    steps = share_profile((t.start, t.finish, t.share) for t in tasks)
    most = max((n for _, _, n in steps), default=0)
    if most < 2:
        return ""
    peak = max(u for _, u, _ in steps)
    return f" · up to {most} at once, peak share {peak:.0%}"


def plan_verdict(plan: Plan) -> str:
    """One sentence: the gain over whole-device HEFT under the same constraints (no shares, every
    stateful kernel's calls on one device: ``mapper.heft_makespan``), and the gap to the lower bound,
    in words: "within X% of optimal (proven)" when the bound is the exact solver's, "at most X% from
    optimal" when it is an analytic bound only."""
    m = plan.mapper
    parts = []
    if m.heft_makespan:
        gain = 1 - m.estimated_makespan / m.heft_makespan
        heft = f"whole-device HEFT under the same constraints ({format_time(m.heft_makespan)})"
        if abs(gain) < 5e-4:
            parts.append(f"as long as {heft}")
        elif gain > 0:
            parts.append(f"{gain:.1%} shorter than {heft}")
        else:
            parts.append(f"{-gain:.1%} longer than {heft}")
    if m.lower_bound > 0:
        gap = m.estimated_makespan / m.lower_bound - 1
        proven = getattr(m, "solver_bound", None) is not None and m.solver_bound >= m.lower_bound
        if gap < 5e-4:
            parts.append("optimal (proven)" if proven else "optimal: it reaches the lower bound")
        elif proven:
            parts.append(f"within {gap:.1%} of optimal (proven: the exact solver shows no plan can finish "
                         f"before {format_time(m.lower_bound)})")
        else:
            parts.append(f"at most {gap:.1%} from optimal (no plan can finish before {format_time(m.lower_bound)})")
    if not parts:
        return f"The {m.name} plan has no HEFT or bound figures to compare with."
    return f"The {m.name} plan is " + ", and ".join(parts) + "."


def _ratio(t) -> float | None:
    meas, est = t.measured, t.estimated
    if meas is None or est <= 0:
        return None
    return meas / est


def _task_times(tasks) -> dict[str, np.ndarray]:
    """A record's task times as float columns (NaN where a task never ran), in task order.

    The summary and the table of a large run are array arithmetic over these: a Python pass
    over every task's properties (``measured``, ``estimated``) per figure was most of the time
    ``show`` took for a record of 200,000 tasks.
    """
    n = len(tasks)

    def column(name: str) -> np.ndarray:
        get = operator.attrgetter(name)
        return np.fromiter((math.nan if v is None else v for v in map(get, tasks)), float, n)

    cols = {name: column(name) for name in ("start", "finish", "estimated_start", "estimated_finish")}
    cols["attempts"] = np.fromiter(map(operator.attrgetter("attempts"), tasks), np.int64, n)
    return cols


def _run_order(times: dict[str, np.ndarray]) -> np.ndarray:
    """Task indices by measured start (tasks that never ran last, by estimated start), ties in
    task order: what ``sorted`` with that key gives, from one stable ``lexsort``."""
    start = times["start"]
    never = np.isnan(start)
    return np.lexsort((np.arange(len(start)), np.where(never, times["estimated_start"], start), never))


def run_table(record: RunRecord, limit: int | None = None) -> Table:
    """Per task: device, estimated and measured duration, their ratio (measured / estimated),
    attempts; sorted by measured start (tasks that never ran last)."""
    order = _run_order(_task_times(record.tasks))
    table = Table(title=f"run of {record.plan}: {record.status}, {len(record.tasks)} tasks", title_justify="left")
    table.add_column("task", overflow="fold")
    table.add_column("kernel")
    table.add_column("device")
    for name in ("est. start", "estimated", "start", "measured", "ratio", "attempts"):
        table.add_column(name, justify="right")
    shown = order if limit is None else order[:max(0, limit)]
    for i in shown:
        t = record.tasks[int(i)]
        r = _ratio(t)
        if r is None:
            ratio = "—"
        else:
            style = "red" if (r > 2 or r < 0.5) else ("yellow" if (r > 1.25 or r < 0.8) else "green")
            ratio = f"[{style}]{r:.2f}x[/{style}]"
        measured = _ft(t.measured) if t.measured is not None else ("not run" if not t.attempts else "failed")
        table.add_row(t.id, t.kernel, t.device, format_time(t.estimated_start), format_time(t.estimated),
                      _ft(t.start), measured, ratio, str(t.attempts))
    _caption_more(table, len(shown), len(order))
    return table


#: How a formatted StreamMAP error starts: ``error: ...`` or ``file:line:col: error: ...``.
_FORMATTED_ERROR = re.compile(r"^(\S+: )?error: ")


def error_line(text: str) -> str:
    """A run record's ``error`` as shown: prefixed with ``error: `` unless it already reads so (a
    :class:`StreamMapError` or a failed task is recorded as the CLI printed it)."""
    return text if _FORMATTED_ERROR.match(text) else f"error: {text}"


def run_summary(record: RunRecord) -> str:
    """Status, measured wall time against the estimate, tasks run, the worst estimates and each
    device's executor, busy time, utilisation and peak memory."""
    mode = f"backend {record.backend}" + (", emulated on the CPU" if record.emulate else "")
    lines = [f"run of {record.plan}: {record.status} ({mode}), started {record.started}"]
    wall = f"measured wall time: {format_time(record.wall_time)}; estimated makespan: " \
           f"{format_time(record.estimated_makespan)}"
    if record.estimated_makespan > 0:
        wall += f" (measured/estimated {record.wall_time / record.estimated_makespan:.3g}x)"
    lines.append(wall)
    times = _task_times(record.tasks)
    measured = times["finish"] - times["start"]                 # NaN: never ran
    estimated = times["estimated_finish"] - times["estimated_start"]
    ran = ~np.isnan(measured)
    retried = int((times["attempts"] > 1).sum())
    line = f"tasks: {int(ran.sum())} of {len(record.tasks)} ran"
    if retried:
        line += f", {retried} retried"
    lines.append(line)
    rated = np.flatnonzero(ran & (estimated > 0))               # the tasks _ratio gives a ratio
    if len(rated):
        ratios = measured[rated] / estimated[rated]
        med = float(np.median(ratios))
        with np.errstate(divide="ignore"):
            off = np.where(ratios > 0, np.abs(np.log(np.where(ratios > 0, ratios, 1.0))), math.inf)
        worst = int(np.argmax(off))                             # the first of the furthest, as max() picks
        lines.append(f"measured/estimated per task: median {med:.3g}x; furthest off {float(ratios[worst]):.3g}x "
                     f"({record.tasks[int(rated[worst])].id})")
    if record.error:
        lines.append(error_line(record.error))
    if record.outputs:
        lines.append(f"outputs: {record.outputs}")
    lines.append("devices:")
    width = max((len(d.id) for d in record.devices), default=0)
    for d in record.devices:
        mem = f"  peak memory {format_size(d.peak_memory)}" if d.peak_memory is not None else ""
        sp = d.spill
        if sp:                                  # memory oversubscription (runtime/spill.py)
            mem += (f"  spilled {format_size(sp.get('spilled_bytes', 0))} ({sp.get('spills', 0)}x), restored "
                    f"{format_size(sp.get('restored_bytes', 0))} in {format_time(sp.get('seconds', 0.0))}")
        lines.append(f"  {d.id:<{width}}  {d.utilisation:6.1%}  busy {format_time(d.busy):>10}  "
                     f"{d.executor}{mem}")
    return "\n".join(lines)



def _signed_time(t: float) -> str:
    return ("-" if t < 0 else "+") + format_time(abs(t))


def _ids(task_ids, limit: int | None) -> str:
    """``a[1], a[2] … and 3 more`` (short ids, at most ``limit``)."""
    shown = [_short(k) for k in (task_ids if limit is None else task_ids[:max(1, limit)])]
    more = len(task_ids) - len(shown)
    return ", ".join(shown) + (f" … and {more} more" if more else "")


_RECOVERY = {"local": "the local executor drains (running tasks finish), then re-maps the rest with HEFT",
             "ray": "surviving Ray actors run what they can, then the rest is re-mapped with HEFT"}


def what_if_summary(result, limit: int | None = None) -> str:
    """A :class:`streammap.whatif.WhatIf` as text: both makespans, then per loss what the recovery
    did (tasks interrupted, run again, moved where; lost work). ``limit`` caps the task ids listed
    per line."""
    span, base = result.makespan, result.plan_makespan
    rel = f", {result.delay / base:+.1%}" if base > 0 else ""
    lines = [f"what if: {', '.join(r.loss.text for r in result.recoveries)} "
             f"(recovery as backend {result.backend}: {_RECOVERY[result.backend]})",
             f"plan makespan: {format_time(base)}",
             f"makespan with the losses and recovery: {format_time(span)} ({_signed_time(result.delay)}{rel})",
             f"lost work: {format_time(result.lost_work)}"]
    for r in result.recoveries:
        devices = ", ".join(r.loss.devices)
        head = f"at {format_time(r.loss.at)}: {r.loss.text} ({devices}): "
        if r.effect == "after the end":
            lines.append(head + "after the run ended: no effect")
            continue
        if r.effect == "unused":
            lines.append(head + "no task of the plan runs there: no effect")
            continue
        if r.effect == "already lost":
            lines.append(head + "already lost: no effect")
            continue
        lines.append(head + f"re-mapped from {format_time(r.resumed)}; {len(r.interrupted)} interrupted, "
                     f"{len(r.rerun)} run again, {len(r.moved)} moved; lost work {format_time(r.lost_work)}; "
                     f"makespan {format_time(r.makespan)}")
        if r.interrupted:
            lines.append("  interrupted (started over): " + _ids(r.interrupted, limit))
        if r.rerun:
            lines.append("  run again (outputs lost): " + _ids(r.rerun, limit))
        moves: dict[tuple[str, str], list[str]] = {}
        for task_id, src, dst in r.moved:
            moves.setdefault((src, dst), []).append(task_id)
        for (src, dst), ids in sorted(moves.items()):
            lines.append(f"  moved {src} -> {dst} ({len(ids)}): " + _ids(ids, limit))
    return "\n".join(lines)

def cluster_table(cluster) -> Table:
    """Devices of a cluster (a :class:`~streammap.cluster.model.Cluster` or ``ClusterSpec``)."""
    spec = getattr(cluster, "spec", cluster)
    table = Table(title=f"cluster {spec.name}: {sum(len(n.devices) for n in spec.nodes)} devices "
                        f"on {len(spec.nodes)} node{'s' if len(spec.nodes) != 1 else ''}", title_justify="left")
    for name, just in (("device", "left"), ("kind", "left"), ("model", "left"), ("memory", "right"),
                       ("FLOP/s", "right"), ("mem. bandwidth", "right"), ("speed", "right"),
                       ("node link", "left")):
        table.add_column(name, justify=just)
    for node in spec.nodes:
        link = "—"
        if node.link is not None:
            link = f"{_rate(node.link.bandwidth, 'B/s')}, {format_time(node.link.latency)}"
        for i, d in enumerate(node.devices):
            table.add_row(f"{node.name}/{d.name}", d.kind, d.model or "—",
                          format_size(d.memory) if d.memory else "—",
                          _rate(d.flops, "FLOP/s") if d.flops else "—",
                          _rate(d.mem_bandwidth, "B/s") if d.mem_bandwidth else "—",
                          f"{d.speed:g}", link if i == 0 else "")
    return table


def _rate(x: float, unit: str) -> str:
    for prefix, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if x >= scale:
            return f"{x / scale:.4g} {prefix}{unit}"
    return f"{x:.4g} {unit}"


# -- pictures: shared helpers -------------------------------------------------------------------

def _check_format(path) -> Path:
    path = Path(path)
    if path.suffix.lower() not in PICTURE_FORMATS:
        raise StreamMapError(f"cannot draw {path.name}: unknown picture format {path.suffix or '(none)'!r}",
                             hint="name the file with .png, .svg or .pdf")
    return path


def _palette(n: int):
    """``n`` distinct colours, deterministic: tab10, tab20, then evenly spaced hues."""
    from matplotlib import colormaps  # noqa: PLC0415

    if n <= 10:
        cmap = colormaps["tab10"]
        return [cmap(i) for i in range(n)]
    if n <= 20:
        cmap = colormaps["tab20"]
        return [cmap(i) for i in range(n)]
    cmap = colormaps["turbo"]
    return [cmap(0.05 + 0.9 * i / max(1, n - 1)) for i in range(n)]


def _natural(text: str):
    """Sort key that puts ``k2`` before ``k10``."""
    return [(0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.split(r"(\d+)", text) if p]


def _lighten(c, amount: float = 0.62):
    """``c`` mixed with white (a faint version that hides no grid lines, unlike alpha)."""
    from matplotlib.colors import to_rgb  # noqa: PLC0415

    r, g, b = to_rgb(c)
    return (r + (1 - r) * amount, g + (1 - g) * amount, b + (1 - b) * amount)


def _dark(c) -> bool:
    from matplotlib.colors import to_rgb  # noqa: PLC0415

    r, g, b = to_rgb(c)
    return 0.299 * r + 0.587 * g + 0.114 * b < 0.5


def _time_unit(t_max: float) -> tuple[float, str]:
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs")):
        if t_max >= scale:
            return scale, unit
    return 1e-9, "ns"


def _save(fig, path: Path, dpi: int) -> Path:
    # Its folder made when missing; written whole or not at all (a failed save leaves no half picture).
    path = make_parent(path, "picture")
    atomic_write(path, lambda f: fig.savefig(f, dpi=dpi, bbox_inches="tight", format=path.suffix.lower()[1:]),
                 binary=True, what="picture")
    return path


def _legend_patches(items: Iterable[tuple[str, object]], limit: int):
    from matplotlib.patches import Patch  # noqa: PLC0415

    items = list(items)
    handles = [Patch(facecolor=c, edgecolor="none", label=name) for name, c in items[:limit]]
    if len(items) > limit:
        handles.append(Patch(facecolor="white", edgecolor="none", label=f"… {len(items) - limit} more"))
    return handles


# -- Gantt --------------------------------------------------------------------------------------

def gantt(plan_or_record: PlanOrRecord, path, title: str | None = None) -> Path:
    """Draw a Gantt chart of a plan or a run record to ``path`` (``.png``, ``.svg`` or ``.pdf``).

    One row per device (devices without tasks are left out when there are more than 16), one
    bar per task coloured by kernel, labelled with the task's short id where it fits. For a run
    record each task has two bars: the estimate (faint, upper half of the row) and the
    measurement (solid, lower half); dashed lines mark the estimated makespan and the measured
    wall time. Tasks that share a device (``share < 1``) are stacked in its row, each bar as tall
    as its share, so a full row is a fully used device.
    """
    path = _check_format(path)
    from matplotlib.figure import Figure  # noqa: PLC0415
    from matplotlib.lines import Line2D  # noqa: PLC0415
    from matplotlib.patches import Patch  # noqa: PLC0415

    is_run = isinstance(plan_or_record, RunRecord)
    if not is_run and not isinstance(plan_or_record, Plan):
        raise TypeError(f"gantt() takes a Plan or a RunRecord, not {type(plan_or_record).__name__}")

    # bars: device -> list of (estimated start, estimated finish, measured start|None, finish|None, kernel, label)
    if is_run:
        rec: RunRecord = plan_or_record
        devices = [d.id for d in rec.devices]
        bars = [(t.device, t.estimated_start, t.estimated_finish, t.start, t.finish, t.kernel, _short(t.id),
                 t.share) for t in rec.tasks]
    else:
        plan: Plan = plan_or_record
        devices = [d.id for d in plan.devices]
        bars = [(t.device, t.start, t.finish, None, None, t.kernel, _short(t.id), t.share) for t in plan.tasks]
    for b in bars:
        if b[0] not in devices:
            devices.append(b[0])
    used = {b[0] for b in bars}
    if len(devices) > 16:
        devices = [d for d in devices if d in used] or devices[:1]
    row = {d: i for i, d in enumerate(devices)}

    kernels = sorted({b[5] for b in bars}, key=_natural)
    colour = dict(zip(kernels, _palette(len(kernels))))
    faint = {k: _lighten(c) for k, c in colour.items()}

    t_end = max([b[2] for b in bars] + [b[4] for b in bars if b[4] is not None] + [0.0])
    if is_run:
        t_end = max(t_end, rec.estimated_makespan, rec.wall_time)
    else:
        t_end = max(t_end, plan.mapper.estimated_makespan)
    if t_end <= 0:
        t_end = 1.0
    scale, unit = _time_unit(t_end)
    x_max = t_end / scale * 1.02
    min_w = x_max * 0.0008            # zero-length tasks stay visible as slivers

    n_rows = len(devices)
    row_h = 0.62 if is_run else 0.48
    fig_w = 12.0
    fig_h = min(40.0, max(3.2, 1.6 + row_h * n_rows))
    dpi = 150
    fig = Figure(figsize=(fig_w, fig_h), layout="constrained")
    ax = fig.add_subplot()

    many = len(bars) > 100 * max(1, len(used))       # dense rows: white edges would only add stripes
    edge = dict(edgecolor="none", linewidth=0) if many else dict(edgecolor="white", linewidth=0.4)
    per_dev: dict[str, list] = {d: [] for d in devices}
    for b in bars:
        if b[0] in per_dev:
            per_dev[b[0]].append(b)
    for dev, items in per_dev.items():
        if not items:
            continue
        y = row[dev]
        # Co-located tasks (share < 1) are stacked in the row, each as tall as its share.
        est_off = stack_offsets([(b[1], b[2], b[7]) for b in items])
        est = [(b[1] / scale, max((b[2] - b[1]) / scale, min_w), c, o, b[7])
               for b, o, c in zip(items, est_off, [colour[b[5]] for b in items])]
        if is_run:
            _stacked_bars(ax, [(x, w, faint[b[5]], o, f) for (x, w, _, o, f), b in zip(est, items)],
                          y - 0.42, 0.38, edge)
            ran = [b for b in items if b[3] is not None and b[4] is not None]
            meas_off = stack_offsets([(b[3], b[4], b[7]) for b in ran])
            _stacked_bars(ax, [(b[3] / scale, max((b[4] - b[3]) / scale, min_w), colour[b[5]], o, b[7])
                               for b, o in zip(ran, meas_off)], y + 0.02, 0.4, edge)
        else:
            _stacked_bars(ax, est, y - 0.36, 0.72, edge)

    # labels where they fit (pixels per time unit from the figure size; the axes take ~82 %)
    px_per_unit = fig_w * 0.82 * dpi / x_max
    font = 7
    char_px = font * 0.62 * dpi / 72

    extents: dict[tuple, tuple] = {}        # (device, measured?) -> (starts, finishes) of its bars
    for dev, items in per_dev.items():
        extents[(dev, False)] = (np.array([b[1] for b in items]), np.array([b[2] for b in items]))
        m_items = [b for b in items if b[3] is not None and b[4] is not None]
        extents[(dev, True)] = (np.array([b[3] for b in m_items]), np.array([b[4] for b in m_items]))
    placed = 0
    taken: dict[tuple, list[tuple[float, float]]] = {}     # (row, half) -> label extents in time units
    for b in sorted(bars, key=lambda b: -((b[4] - b[3]) if is_run and b[3] is not None and b[4] is not None
                                             else (b[2] - b[1]))):
        if placed >= MAX_LABELS:
            break
        if b[0] not in row:
            continue
        measured = is_run and b[3] is not None and b[4] is not None
        if measured:
            s, f, yc, bg = b[3], b[4], row[b[0]] + 0.22, colour[b[5]]
        elif is_run:
            s, f, yc, bg = b[1], b[2], row[b[0]] - 0.23, faint[b[5]]
        else:
            s, f, yc, bg = b[1], b[2], row[b[0]], colour[b[5]]
        width_px = (f - s) / scale * px_per_unit
        if width_px < 3 * char_px:
            break                      # sorted by length: nothing shorter fits either
        mid = (s + f) / 2 / scale
        for text in (b[6], b[5]):
            need = len(text) * char_px + 6
            if need > width_px:
                continue
            half = need / 2 / px_per_unit
            spans = taken.setdefault((b[0], yc), [])
            if any(lo < mid + half and mid - half < hi for lo, hi in spans):
                continue               # keep labels apart
            starts, finishes = extents[(b[0], measured)]
            lo_t, hi_t = (mid - half) * scale, (mid + half) * scale
            if int(((starts < hi_t) & (finishes > lo_t)).sum()) > 1:
                break                  # another bar is drawn over this one here: no label
            spans.append((mid - half, mid + half))
            ax.text(mid, yc, text, ha="center", va="center", fontsize=font, clip_on=True,
                    color="white" if _dark(bg) else "black")
            placed += 1
            break

    ax.set_yticks(range(n_rows), devices)
    ax.set_ylim(n_rows - 0.5, -0.5)
    ax.set_xlim(0, x_max)
    ax.set_xlabel(f"time ({unit})")
    ax.grid(axis="x", color="#dddddd", linewidth=0.6)
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)

    handles = _legend_patches([(k, colour[k]) for k in kernels], 20)
    marks = []
    if is_run:
        ax.axvline(rec.estimated_makespan / scale, color="#555555", linestyle="--", linewidth=1)
        ax.axvline(rec.wall_time / scale, color="#c0392b", linestyle="-", linewidth=1)
        marks += [Patch(facecolor=_lighten("#707070"), label="estimated (upper, faint)"),
                  Patch(facecolor="#707070", label="measured (lower, solid)"),
                  Line2D([], [], color="#555555", linestyle="--", label="estimated makespan"),
                  Line2D([], [], color="#c0392b", label="measured wall time")]
        ran = sum(1 for t in rec.tasks if t.start is not None and t.finish is not None)
        sub = [f"{ran} of {len(rec.tasks)} tasks ran", f"backend {rec.backend}"]
        if rec.emulate:
            sub.append("emulated on the CPU")
        if rec.status != "ok":
            sub.append(rec.status.upper())
        ttl = title or (f"Run of {Path(rec.plan).name}: measured {format_time(rec.wall_time)} "
                        f"vs estimated {format_time(rec.estimated_makespan)}\n" + " · ".join(sub))
    else:
        m = plan.mapper
        ax.axvline(m.estimated_makespan / scale, color="#555555", linestyle="--", linewidth=1)
        marks.append(Line2D([], [], color="#555555", linestyle="--", label="estimated makespan"))
        if m.lower_bound > 0:
            ax.axvline(m.lower_bound / scale, color="#27ae60", linestyle=":", linewidth=1.2)
            marks.append(Line2D([], [], color="#27ae60", linestyle=":", label="lower bound"))
        sub = [f"{len(plan.tasks)} tasks", f"mapper {m.name}", f"lower bound {format_time(m.lower_bound)}"]
        if m.heft_makespan is not None:
            sub.append(f"HEFT {format_time(m.heft_makespan)}")
        ttl = title or (f"Plan for {Path(plan.source.path).name}: estimated makespan "
                        f"{format_time(m.estimated_makespan)}\n" + " · ".join(sub))
    ax.set_title(ttl, loc="left", fontsize=10)
    if not bars:
        ax.text(0.5, 0.5, "no tasks", transform=ax.transAxes, ha="center", va="center", color="#888888")
    if handles:
        kernel_legend = ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8,
                                  frameon=False, title="kernel", title_fontsize=8, alignment="left")
        ax.add_artist(kernel_legend)
    ax.legend(handles=marks, loc="lower left", bbox_to_anchor=(1.01, 0.0), fontsize=8, frameon=False)
    return _save(fig, path, dpi)


def _stacked_bars(ax, bars, y0: float, h: float, edge: dict) -> None:
    """Draw ``(x, width, colour, offset, share)`` bars in the band ``[y0, y0 + h)``: each at
    ``offset`` of the band, ``share`` of its height (whole-device tasks fill the band)."""
    groups: dict[tuple, tuple[list, list]] = {}
    for x, w, c, off, frac in bars:
        xs, cs = groups.setdefault((off, frac), ([], []))
        xs.append((x, w))
        cs.append(c)
    for (off, frac), (xs, cs) in groups.items():
        ax.broken_barh(xs, (y0 + h * off, h * frac), facecolors=cs, **edge)


# -- task graph ---------------------------------------------------------------------------------

def graph_picture(plan: Plan, path, title: str | None = None) -> Path:
    """Draw the plan's task graph to ``path``: generations left to right, nodes coloured by
    device. Labels (short task ids) up to :data:`GRAPH_LABELS_UP_TO` tasks, arrows up to
    :data:`GRAPH_ARROWS_UP_TO` edges; larger graphs are still drawn, without them."""
    path = _check_format(path)
    if not isinstance(plan, Plan):
        raise TypeError(f"graph_picture() takes a Plan (a run record has no dependencies), not {type(plan).__name__}")
    import networkx as nx  # noqa: PLC0415
    from matplotlib.figure import Figure  # noqa: PLC0415

    g = nx.DiGraph()
    for t in plan.tasks:
        g.add_node(t.id)
    for t in plan.tasks:
        for d in t.deps:
            g.add_edge(d, t.id)
    gens = [list(gen) for gen in nx.topological_generations(g)] if len(g) else []

    # order each generation by the mean position of its predecessors (one barycentre sweep),
    # which keeps chains straight and fan-outs together; plan order breaks ties.
    plan_pos = {t.id: i for i, t in enumerate(plan.tasks)}
    where: dict[str, float] = {}
    ordered: list[list[str]] = []
    for k, gen in enumerate(gens):
        if k == 0:
            gen = sorted(gen, key=plan_pos.__getitem__)
        else:
            def key(n):
                ps = [where[p] for p in g.predecessors(n)]
                return (sum(ps) / len(ps) if ps else 0.5, plan_pos[n])
            gen = sorted(gen, key=key)
        for i, n in enumerate(gen):
            where[n] = (i + 0.5) / len(gen)
        ordered.append(gen)
    h = nx.DiGraph()
    for k, gen in enumerate(ordered):
        for n in gen:
            h.add_node(n, layer=k)
    h.add_edges_from(g.edges)
    # layers given as a dict of lists: multipartite_layout keeps the order within a layer
    # (with ``subset_key="layer"`` it would group the nodes through sets, in no stable order)
    pos = nx.multipartite_layout(h, subset_key=dict(enumerate(ordered)), align="vertical") if len(h) else {}
    pos = {n: (x, -y) for n, (x, y) in pos.items()}          # first of a generation on top

    device_of = {t.id: t.device for t in plan.tasks}
    used = [d.id for d in plan.devices if d.id in set(device_of.values())]
    colour = dict(zip(used, _palette(len(used))))

    n, m, layers = len(h), h.number_of_edges(), len(ordered)
    widest = max((len(gen) for gen in ordered), default=1)
    labels = n <= GRAPH_LABELS_UP_TO
    fig_w = min(24.0, max(7.0, 2.0 + (1.5 if labels else 0.5) * layers))
    fig_h = min(24.0, max(4.0, 1.5 + (0.5 if labels else 0.12) * widest))
    dpi = 150 if n <= 2000 else 110
    fig = Figure(figsize=(fig_w, fig_h), layout="constrained")
    ax = fig.add_subplot()

    node_size = 260 if labels else max(6.0, min(80.0, 20000.0 / max(n, 1)))
    if m:
        style = dict(arrows=True, arrowstyle="-|>", arrowsize=8, node_size=node_size) \
            if m <= GRAPH_ARROWS_UP_TO else dict(arrows=False)
        nx.draw_networkx_edges(h, pos, ax=ax, width=0.7 if m <= 2000 else 0.3, edge_color="#9a9a9a",
                               alpha=1.0 if m <= 2000 else 0.5, **style)
    for dev in used:
        nodes = [x for x in h.nodes if device_of[x] == dev]
        nx.draw_networkx_nodes(h, pos, nodelist=nodes, ax=ax, node_color=[colour[dev]], node_size=node_size,
                               linewidths=0.6 if labels else 0, edgecolors="white", label=dev)
    if labels:
        for node, (x, y) in pos.items():
            ax.annotate(_short(node), (x, y), xytext=(0, -9), textcoords="offset points", ha="center",
                        va="top", fontsize=7, color="#222222")

    ax.tick_params(axis="x", bottom=True, labelbottom=True)     # networkx hides the ticks
    ax.set_yticks([])
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    if layers:
        xs = sorted({round(x, 9) for x, _ in pos.values()})
        if layers <= 40:
            ax.set_xticks(xs, [str(i) for i in range(len(xs))])
        else:
            step = math.ceil(layers / 20)
            ax.set_xticks(xs[::step], [str(i) for i in range(0, len(xs), step)])
        ax.set_xlabel("topological generation (dependencies flow left → right)")
        pad_x = (xs[-1] - xs[0]) * 0.04 + 0.05
        ax.set_xlim(xs[0] - pad_x, xs[-1] + pad_x)
        ys = [y for _, y in pos.values()]
        pad_y = (max(ys) - min(ys)) * 0.06 + 0.05
        ax.set_ylim(min(ys) - pad_y * (2.0 if labels else 1.0), max(ys) + pad_y)
    else:
        ax.text(0.5, 0.5, "no tasks", transform=ax.transAxes, ha="center", va="center", color="#888888")
    note = "" if labels else f" (task labels shown up to {GRAPH_LABELS_UP_TO} tasks)"
    ttl = title or (f"Task graph of {Path(plan.source.path).name}: {n} tasks, {m} edges, "
                    f"{layers} generations{note}")
    ax.set_title(ttl, loc="left", fontsize=10)
    handles = _legend_patches([(d, colour[d]) for d in used], 24)
    if handles:
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8,
                  frameon=False, title="device", title_fontsize=8, alignment="left")
    return _save(fig, path, dpi)
