"""``streammap profile``: calibrate the performance history on this machine's devices.

:func:`profile` runs every task of a program's graph on each device of this machine that can
execute it, and appends the measured times to the history (:mod:`streammap.cost.history`), so that a
later ``compile`` with the same params estimates from measurements instead of clauses.

How a device is profiled
------------------------
1. Discover this machine (:func:`streammap.cluster.discover.discover_local`). The CPU is profiled with
   NumPy; each GPU with CuPy when CuPy imports (else it is skipped, with a note). Other kinds are
   skipped with a note.
2. Build the graph with the given params (:func:`streammap.directives.parse_program`), drop its
   ``device`` constraints (so the whole graph can run on the one device), and map it onto a
   one-device cluster: a plan in which the device runs every task, one after another.
3. Run that plan with :func:`streammap.runtime.run_plan` once to warm up (imports, FFT plans, CuPy
   kernel compilation, memory pools), then ``repeats`` times, reading each task's measured
   duration from the run record.
4. Append, per task, the median of the ``repeats`` durations to the history (``origin:
   "profile"``), against the device's model as the cost model names it (``model``, else the
   kind). Tasks whose ``device`` clause does not admit the device are run (others need their
   results) but not recorded.

The report (:class:`ProfileReport`) gives per kernel and device the median measured time, the
clause (roofline) estimate the cost model would use without history, and their ratio.
"""

from __future__ import annotations

import statistics
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from streammap.cluster.discover import discover_local
from streammap.cluster.model import Cluster, ClusterSpec, Node
from streammap.compiler import build_plan, load_source_graph
from streammap.cost.history import append_records, make_record, source_stem
from streammap.cost.history import history_dir as resolve_history
from streammap.cost.model import CostModel
from streammap.errors import KernelError, StreamMapError
from streammap.mappers import get_mapper
from streammap.optional import import_cupy
from streammap.runrecord import read_run_record
from streammap.runtime import run_plan
from streammap.units import format_time


@dataclass
class ProfileRow:
    """One kernel on one device."""

    kernel: str
    device: str            # device id, "node/cpu"
    device_model: str
    tasks: int             # tasks of this kernel measured
    measured: float        # median over its tasks of their median over repeats (seconds)
    estimate: float        # median over its tasks of the clause estimate (seconds)

    @property
    def ratio(self) -> float:
        """estimate / measured (above 1: the clauses overestimate)."""
        return self.estimate / self.measured if self.measured > 0 else float("inf")


@dataclass
class ProfileReport:
    """What :func:`profile` measured and recorded."""

    source: str
    params: dict
    history: Path
    repeats: int
    rows: list[ProfileRow] = field(default_factory=list)
    records: int = 0                                   # history records appended
    notes: list[str] = field(default_factory=list)     # devices skipped or failed, and why
    devices: list[str] = field(default_factory=list)   # device ids profiled

    def table(self):
        """A :class:`rich.table.Table` of the rows."""
        from rich.table import Table  # noqa: PLC0415
        tab = Table(title=f"profile of {Path(self.source).name} ({self.repeats} repeats after a warm-up)")
        for col, just in (("kernel", "left"), ("device", "left"), ("model", "left"), ("tasks", "right"),
                          ("measured", "right"), ("clause estimate", "right"), ("estimate / measured", "right")):
            tab.add_column(col, justify=just)
        for r in self.rows:
            tab.add_row(r.kernel, r.device, r.device_model, str(r.tasks), format_time(r.measured),
                        format_time(r.estimate), f"{r.ratio:.3g}")
        return tab


def _one_device_cluster(node, dev):
    spec = ClusterSpec(name="profile", nodes=[Node(name=node.name, devices=[dev])])
    return Cluster(spec, path="profile")


def _can_execute(dev) -> str | None:
    """``None`` when this process can run tasks on ``dev``, else why not."""
    if dev.kind == "cpu":
        return None
    if dev.kind == "gpu":
        if (dev.vendor or "nvidia").lower() not in ("nvidia", "amd"):
            return f"{dev.vendor} GPUs cannot be driven by CuPy"
        if import_cupy() is None:
            return "CuPy is not installed (pip install 'streammap[gpu]')"
        return None
    return f"StreamMAP cannot execute on {dev.kind} devices"


def _wanted(dev, devices) -> bool:
    if not devices:
        return True
    return any(w in (dev.name, dev.kind) or (dev.model and w.lower() in dev.model.lower()) for w in devices)


def profile(source, params: dict | None = None, repeats: int = 3, devices=None, history_dir=None,
            entry: str | None = None, spec=None, max_tasks: int = 200_000) -> "ProfileReport":
    """Run every task of ``source`` on this machine's devices and record the times in the history.

    Parameters
    ----------
    source : str or Path
        A ``.py`` program with ``# @stream`` directives.
    params : dict, optional
        Param overrides (as ``-D``): profile at the sizes you will compile for, so that lookups
        are exact.
    repeats : int
        Timed runs per device after one warm-up run; each task's median over them is recorded.
    devices : list of str, optional
        Only these devices: names (``cpu``, ``gpu1``), kinds (``gpu``) or model substrings.
    history_dir : path, optional
        The history folder (default :func:`streammap.cost.history.history_dir`).
    entry : str, optional
        The ``# @stream graph`` function, when the file has several.
    spec : ClusterSpec, optional
        This machine's description (default: :func:`streammap.cluster.discover.discover_local`).

    Returns
    -------
    ProfileReport
    """

    source = Path(source).resolve()
    if source.suffix != ".py":
        raise StreamMapError(f"cannot profile {source.name}: profile runs .py programs with # @stream directives",
                             path=source, hint="imported workflows cannot run, so they cannot be profiled")
    if repeats < 1:
        raise StreamMapError(f"--repeats {repeats}: need at least 1")
    graph = load_source_graph(source, params, entry, max_tasks=max_tasks)
    if spec is None:
        spec = discover_local()
    check_device_names(spec, devices)
    folder = resolve_history(history_dir)
    report = ProfileReport(source=str(source), params=dict(graph.graph.get("params") or {}),
                           history=folder, repeats=repeats)
    free = graph.copy()
    for _, a in free.nodes(data=True):
        a["device"] = "any"

    for node in spec.nodes:
        for dev in node.devices:
            if not _wanted(dev, devices):
                continue
            why = _can_execute(dev)
            if why is not None:
                report.notes.append(f"{node.name}/{dev.name}: skipped ({why})")
                continue
            cluster = _one_device_cluster(node, dev)
            device = cluster.devices[0]
            cost = CostModel(free, cluster)
            plan = build_plan(free, cluster, cost, get_mapper("heft")(cost), source_path=source,
                              lower=0.0, heft_makespan=None)
            runs: dict[str, list[float]] = {t.id: [] for t in plan.tasks}
            try:
                with tempfile.TemporaryDirectory(prefix="streammap-profile-") as tmp:
                    for k in range(repeats + 1):
                        rec_path = Path(tmp) / f"run{k}.json"
                        run_plan(plan, progress=False, record_path=rec_path)
                        if k == 0:
                            continue       # warm-up
                        for t in read_run_record(rec_path).tasks:
                            if t.measured is not None:
                                runs[t.id].append(t.measured)
            except (KernelError, StreamMapError) as exc:
                msg = exc.format() if hasattr(exc, "format") else str(exc)
                report.notes.append(f"{device.id}: failed ({msg.splitlines()[0]})")
                continue
            model = device.model or device.kind
            recs, per_kernel = [], {}
            for i, tid in enumerate(cost.tasks):
                a = graph.nodes[tid]
                times = runs.get(tid) or []
                if not times or not device.matches(a.get("device")):
                    continue
                med = statistics.median(times)
                recs.append(make_record(a["kernel"], source_stem(a.get("site")), model, device.kind, a, med,
                                        repeats=len(times), origin="profile", path=str(source),
                                        params=report.params))
                per_kernel.setdefault(a["kernel"], []).append((med, float(cost.time[i, 0])))
            report.records += append_records(recs, folder)
            report.devices.append(device.id)
            for kernel, pairs in per_kernel.items():
                report.rows.append(ProfileRow(kernel, device.id, model, len(pairs),
                                              statistics.median(m for m, _ in pairs),
                                              statistics.median(e for _, e in pairs)))
    return report


def check_device_names(spec, wanted) -> None:
    """Refuse a ``--device`` that names no device of ``spec`` (a typo, or a kind this machine lacks),
    listing the ones it has: profiling nothing and saying so only in a note looked like success."""
    devices = [(node, dev) for node in spec.nodes for dev in node.devices]
    for name in wanted or ():
        if not any(_wanted(dev, [name]) for _, dev in devices):
            known = ", ".join(f"{node.name}/{dev.name} ({dev.kind}{', ' + dev.model if dev.model else ''})"
                              for node, dev in devices) or "none"
            raise StreamMapError(f"--device {name}: no device of this machine is named so, nor of that kind "
                                 "or model", hint=f"this machine's devices: {known}; --device takes a name "
                                 "(cpu, gpu0), a kind (cpu, gpu) or part of a model name")
