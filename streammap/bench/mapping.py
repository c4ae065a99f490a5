"""The mapping benchmark: every mapper on every case, side by side, in one run.

For each case (:mod:`streammap.bench.cases`) the harness builds the
:class:`~streammap.cost.model.CostModel` once, then runs each mapper on it and scores the plan the way
``shared/benchmarks/README.md`` says, independently of the mapper:

* **makespan** of :func:`streammap.mappers.schedule.evaluate` (the plan's assignment and per-device order
  re-simulated under the benchmark model), and whether the plan is **memory-valid**;
* **makespan / lower bound** (:func:`streammap.cost.model.lower_bound`, the README's bound: critical path
  at fastest times, or perfectly spread work), and **makespan / fork-join bound**
  (:func:`streammap.cost.model.fork_join_bound`, a stronger valid bound: a long task's descendants can
  only start once it is done). ``FJ/LB`` is then how far above the README's bound *any* plan must
  be: on the BWA and SoyKB workflows, 1.3-1.6;
* **makespan / best bound**: the largest of those two bounds, of the fan-out bound
  (:func:`streammap.cost.model.fan_out_bound`: a gating task's output must reach its children, or
  they wait for it on its own device), of the transfer bound
  (:func:`streammap.cost.model.transfer_bound`: joins and forks along every path pay a transfer or
  serialise, and edges too dear to cross tie their ends to one device or node) and of the lower bounds the exact
  solver proved for the case (:mod:`streammap.mappers.exact`; ``auto`` on small graphs, ``optimal``):
  where it is near 1 the plan is proven near optimal;
* **makespan / HEFT**: the baseline is plain, capacity-blind insertion HEFT (``heft-plain``; when
  that mapper is not registered, the memory-aware ``heft``, and the report says so);
* **mapping time**: wall-clock seconds of the mapper call alone (the cost model is built before).

A mapper that raises :class:`~streammap.errors.MappingError` has *no plan* for the case; a case
where some mapper found a memory-valid plan is one where *a valid plan exists*, and the valid
share of each mapper is counted over those cases. Aggregates (geometric mean and worst case) are
taken per group and CCR: the 102 shared cases (workflows on three clusters, Cholesky on
``cholesky-node``, each at CCR 0.1, 1 and 10), the classic example, and the random suite; or,
with ``--generated``, the seeded WfCommons suite alone (:mod:`streammap.bench.generated`, group
``generated-tune`` or ``generated-report``), which adds a table of ``auto`` per recipe and CCR.
A case counts as **above a memory-valid HEFT** when the mapper's makespan exceeds the baseline's
and the baseline's plan is memory-valid: the one comparison no capacity argument can excuse.

Outputs: a table per group on the console with the targets beside the figures, ``mapping.csv``
(one row per case and mapper, columns :data:`CSV_COLUMNS`), ``mapping-summary.csv`` (one row per
group and mapper) and ``mapping.png`` (makespan / HEFT and makespan / lower bound per case and
mapper, log scale, grouped by set and CCR) in the output folder (default ``bench-out/``).

Run it as ``streammap bench mapping [--quick] [--out DIR] [--mappers a,b,c] [--shared PATH]
[--scale] [--generated [--seeds tune|report]]`` or ``python benchmarks/mapping.py`` with the same options.
"""

from __future__ import annotations

import argparse
import csv
import io
import math
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from streammap.bench.cases import (
    Case,
    ccr,
    find_shared,
    random_cases,
    random_cluster,
    random_dag,
    scale_cluster_for_ccr,
    shared_cases,
)
from streammap.bench.generated import SEED_SETS, generated_cases, require_wfcommons
from streammap.cost.model import CostModel, area_bound, fan_out_bound, fork_join_bound, lower_bound, transfer_bound
from streammap.errors import MappingError, StreamMapError, shown
from streammap.io.files import atomic_write_text
from streammap.mappers import get_mapper
from streammap.mappers.schedule import evaluate

__all__ = ["DEFAULT_MAPPERS", "CSV_COLUMNS", "SUMMARY_COLUMNS", "TARGETS", "BenchResult", "resolve_mappers",
           "run_benchmark", "summarize", "by_recipe", "check_targets", "print_report", "write_csv", "write_summary_csv",
           "plot", "scale_benchmark", "add_mapping_arguments", "run_mapping", "main"]

#: Mappers of a default run: the candidate, the baselines and the trivial one.
DEFAULT_MAPPERS = ("auto", "heft-plain", "heft", "peft", "fastest")
#: The makespan baseline: plain capacity-blind insertion HEFT (fallback: "heft").
BASELINE = "heft-plain"
#: The mapper the targets are checked for.
TARGET_MAPPER = "auto"

#: Targets (issue 3), checked for :data:`TARGET_MAPPER`.
TARGETS = {
    "gm_heft": 0.85,          # geometric mean of makespan / HEFT over the shared set
    "worst_heft": 1.0,        # no case worse than HEFT
    "gm_lb_ccr0.1": 1.10,     # geometric mean of makespan / lower bound, shared set at CCR 0.1
    "valid_share": 1.0,       # memory-valid wherever a valid plan exists
    "time_10k_64": 5.0,       # seconds to map 10,000 tasks on 64 devices
    "time_100k_512": 60.0,    # seconds to map 100,000 tasks on 512 devices
    "gm_heft_generated": 0.62,  # geomean makespan / HEFT, generated report seeds at CCR 1 and 10 (issue 17)
}

CSV_COLUMNS = ["case", "group", "graph", "cluster", "ccr_target", "ccr", "tasks", "edges", "devices", "mapper",
               "status", "makespan", "estimated_makespan", "lower_bound", "makespan_lb", "fork_join_bound",
               "makespan_fj", "fan_out_bound", "solver_bound", "best_bound", "makespan_best", "baseline",
               "baseline_makespan", "makespan_heft", "memory_valid", "valid_plan_exists", "map_time_s", "message",
               "baseline_valid", "transfer_bound"]
SUMMARY_COLUMNS = ["group", "ccr", "mapper", "cases", "plans", "gm_lb", "worst_lb", "gm_fj", "gm_best", "worst_best",
                   "floor_lb", "gm_heft", "worst_heft", "above_valid_heft",
                   "valid", "valid_exists", "valid_share", "capacity_breaks", "mean_time_s", "max_time_s"]

_GROUP_ORDER = {"shared": 0, "classic": 1, "random": 2, "generated-tune": 3, "generated-report": 4, "generated": 5}
_TOL = 1e-9


@dataclass
class BenchResult:
    """What :func:`run_benchmark` returns.

    Attributes
    ----------
    rows : list of dict
        One per case and mapper, keys :data:`CSV_COLUMNS`.
    mappers : list of str
        The mappers that ran, in column order.
    baseline : str
        The mapper makespan / HEFT divides by.
    notes : list of str
        Mappers skipped (not registered), baseline fallback, cases that could not be built.
    """

    rows: list = field(default_factory=list)
    mappers: list = field(default_factory=list)
    baseline: str = BASELINE
    notes: list = field(default_factory=list)
    scale: list = field(default_factory=list)


def resolve_mappers(names: Sequence[str], baseline: str = BASELINE) -> tuple[dict, str, list[str]]:
    """``({name: mapper}, baseline name, notes)``: the registered ones, the baseline added if missing.

    A name :func:`streammap.mappers.get_mapper` does not know is skipped with a note; a baseline it
    does not know falls back to ``heft``.
    """
    notes, found = [], {}
    for n in names:
        try:
            found[n] = get_mapper(n)
        except StreamMapError:
            notes.append(f"mapper {n!r} is not registered: skipped")
    try:
        base_fn = get_mapper(baseline)
    except StreamMapError:
        notes.append(f"baseline {baseline!r} is not registered: makespan / HEFT uses the memory-aware 'heft'")
        baseline = "heft"
        base_fn = get_mapper("heft")
    if baseline not in found:
        found = {baseline: base_fn, **found}
    return found, baseline, notes


def _case_rows(case: Case, mappers: dict, baseline: str) -> list[dict]:
    base = dict(case=case.name, group=case.group, graph=case.graph, cluster=case.cluster,
                ccr_target=case.ccr, baseline=baseline)
    try:
        graph, cluster = case.load()
        cost = CostModel(graph, cluster)
    except StreamMapError as exc:
        return [dict(base, mapper=m, status="error", message=f"case: {exc.message}") for m in mappers]
    area = area_bound(cost, weights=True)            # once, for both bounds
    lb = lower_bound(cost, area=area[0])
    fj = fork_join_bound(cost, area=area)
    fo = fan_out_bound(cost)
    tb = transfer_bound(cost)
    base.update(ccr=ccr(cost), tasks=cost.n_tasks, edges=cost.n_edges, devices=cost.n_devices, lower_bound=lb,
                fork_join_bound=fj, fan_out_bound=fo, transfer_bound=tb)
    rows = []
    for name, fn in mappers.items():
        r = dict(base, mapper=name)
        t0 = time.perf_counter()
        try:
            s = fn(cost)
            r["map_time_s"] = time.perf_counter() - t0
        except MappingError as exc:
            r.update(status="no plan", map_time_s=time.perf_counter() - t0, message=exc.message)
            rows.append(r)
            continue
        except Exception as exc:                      # a broken mapper must not stop the benchmark  # noqa: BLE001
            r.update(status="error", map_time_s=time.perf_counter() - t0, message=f"{type(exc).__name__}: {exc}")
            rows.append(r)
            continue
        try:
            ms, valid, _ = evaluate(cost, s)
        except ValueError as exc:                     # the plan contradicts itself (order vs deps)
            r.update(status="error", message=f"plan does not simulate: {exc}")
            rows.append(r)
            continue
        r.update(status="ok", makespan=ms, estimated_makespan=float(s.makespan), memory_valid=bool(valid),
                 solver_bound=s.bound,
                 makespan_lb=ms / lb if lb > 0 else (1.0 if ms == 0 else math.inf),
                 makespan_fj=ms / fj if fj > 0 else (1.0 if ms == 0 else math.inf))
        rows.append(r)
    b = next((r for r in rows if r["mapper"] == baseline and r.get("status") == "ok"), None)
    exists = any(r.get("memory_valid") for r in rows)
    # The best proven bound of the case: the analytic ones, and every exact solver's that ran.
    best = max([lb, fj, fo, tb] + [r["solver_bound"] for r in rows if r.get("solver_bound") is not None])
    for r in rows:
        r["valid_plan_exists"] = exists
        r["best_bound"] = best
        if r.get("status") == "ok":
            r["makespan_best"] = r["makespan"] / best if best > 0 else (1.0 if r["makespan"] == 0 else math.inf)
        if b is not None:
            r["baseline_makespan"] = b["makespan"]
            r["baseline_valid"] = b["memory_valid"]
            if r.get("status") == "ok":
                bm = b["makespan"]
                r["makespan_heft"] = r["makespan"] / bm if bm > 0 else (1.0 if r["makespan"] == 0 else math.inf)
    return rows


def run_benchmark(cases: Sequence[Case], mappers: Sequence[str] = DEFAULT_MAPPERS, baseline: str = BASELINE,
                  progress: bool = False) -> BenchResult:
    """Run every mapper on every case and score the plans (see the module docstring).

    Parameters
    ----------
    cases : sequence of Case
    mappers : sequence of str
        Names for :func:`streammap.mappers.get_mapper` (registered names, or custom policies by
        class path); unknown ones are skipped with a note.
    baseline : str
        The makespan baseline (default ``heft-plain``; falls back to ``heft``). It is run even when
        not listed in ``mappers``.
    progress : bool
        Show a progress bar on standard error.

    Returns
    -------
    BenchResult
    """
    fns, baseline, notes = resolve_mappers(mappers, baseline)
    res = BenchResult(mappers=list(fns), baseline=baseline, notes=notes)
    if progress:
        from rich.console import Console  # noqa: PLC0415
        from rich.progress import Progress  # noqa: PLC0415
        with Progress(console=Console(stderr=True), transient=True) as bar:
            task = bar.add_task("mapping benchmark", total=len(cases))
            for c in cases:
                bar.update(task, description=c.name[:40])
                res.rows.extend(_case_rows(c, fns, baseline))
                bar.advance(task)
    else:
        for c in cases:
            res.rows.extend(_case_rows(c, fns, baseline))
    for r in res.rows:
        for k in CSV_COLUMNS:
            r.setdefault(k, None)
    return res


# ---------------------------------------------------------------------- aggregation

def _gm(x) -> float:
    x = np.asarray([v for v in x if v is not None and np.isfinite(v) and v > 0], dtype=float)
    return float(np.exp(np.log(x).mean())) if x.size else math.nan


def _worst(x) -> float:
    x = [v for v in x if v is not None and np.isfinite(v)]
    return float(max(x)) if x else math.nan


def _groups(rows) -> list[tuple[str, float | None, list]]:
    """``(group, ccr or None for all, rows)``: per group and CCR, then per group over all CCRs."""
    out = []
    groups = sorted({r["group"] for r in rows}, key=lambda g: (_GROUP_ORDER.get(g, 9), g))
    for g in groups:
        gr = [r for r in rows if r["group"] == g]
        ccrs = sorted({r["ccr_target"] for r in gr if r["ccr_target"] is not None})
        for c in ccrs:
            out.append((g, c, [r for r in gr if r["ccr_target"] == c]))
        if len(ccrs) != 1 or any(r["ccr_target"] is None for r in gr):
            out.append((g, None, gr))
    return out


def _above_valid_heft(row) -> bool:
    """Whether ``row``'s plan is longer than the baseline's and the baseline's is memory-valid."""
    return bool(row.get("baseline_valid")) and row.get("makespan_heft") is not None \
        and row["makespan_heft"] > 1.0 + _TOL


def _aggregate(rows, mapper) -> dict:
    mine = [r for r in rows if r["mapper"] == mapper]
    ok = [r for r in mine if r["status"] == "ok"]
    exists = [r for r in mine if r["valid_plan_exists"]]
    valid = sum(1 for r in exists if r["memory_valid"])
    times = [r["map_time_s"] for r in mine if r["map_time_s"] is not None]
    return dict(mapper=mapper, cases=len(mine), plans=len(ok),
                gm_lb=_gm(r["makespan_lb"] for r in ok), worst_lb=_worst(r["makespan_lb"] for r in ok),
                gm_fj=_gm(r["makespan_fj"] for r in ok), gm_best=_gm(r["makespan_best"] for r in ok),
                worst_best=_worst(r["makespan_best"] for r in ok), floor_lb=_gm(r["fork_join_bound"] / r["lower_bound"]
                                                                     for r in ok if r["lower_bound"] > 0),
                gm_heft=_gm(r["makespan_heft"] for r in ok), worst_heft=_worst(r["makespan_heft"] for r in ok),
                above_valid_heft=sum(1 for r in ok if _above_valid_heft(r)),
                valid=valid, valid_exists=len(exists), valid_share=valid / len(exists) if exists else math.nan,
                capacity_breaks=sum(1 for r in ok if not r["memory_valid"]),
                mean_time_s=float(np.mean(times)) if times else math.nan,
                max_time_s=float(np.max(times)) if times else math.nan)


def summarize(result: BenchResult | list, mappers: Sequence[str] | None = None) -> list[dict]:
    """One dict per group (and CCR; ``ccr`` ``None`` = all CCRs of the group) and mapper,
    keys :data:`SUMMARY_COLUMNS`."""
    rows = result.rows if isinstance(result, BenchResult) else result
    if mappers is None:
        mappers = result.mappers if isinstance(result, BenchResult) else list(dict.fromkeys(r["mapper"] for r in rows))
    out = []
    for g, c, gr in _groups(rows):
        for m in mappers:
            out.append(dict(group=g, ccr=c, **_aggregate(gr, m)))
    return out


def check_targets(result: BenchResult, mapper: str = TARGET_MAPPER) -> list[dict]:
    """The targets for ``mapper``: ``{"target", "limit", "value", "ok"}`` (``ok`` None: not measured)."""
    rows = [r for r in result.rows if r["mapper"] == mapper]
    out = []

    def add(what, limit, value, ok):
        out.append(dict(target=what, limit=limit, value=value, ok=ok))

    shared = [r for r in rows if r["group"] == "shared"]
    for label, sub in (("shared", shared), ("random", [r for r in rows if r["group"] == "random"])):
        if not sub:
            continue
        a = _aggregate(sub, mapper)
        add(f"{label}: geomean makespan/HEFT <= {TARGETS['gm_heft']:g}", TARGETS["gm_heft"], a["gm_heft"],
            None if math.isnan(a["gm_heft"]) else a["gm_heft"] <= TARGETS["gm_heft"])
        add(f"{label}: no case makespan/HEFT > {TARGETS['worst_heft']:g}", TARGETS["worst_heft"], a["worst_heft"],
            None if math.isnan(a["worst_heft"]) else a["worst_heft"] <= TARGETS["worst_heft"] + _TOL)
    low = [r for r in shared if r["ccr_target"] is not None and abs(r["ccr_target"] - 0.1) < 1e-12]
    if low:
        a = _aggregate(low, mapper)
        add(f"shared CCR 0.1: geomean makespan/LB <= {TARGETS['gm_lb_ccr0.1']:g}", TARGETS["gm_lb_ccr0.1"],
            a["gm_lb"], None if math.isnan(a["gm_lb"]) else a["gm_lb"] <= TARGETS["gm_lb_ccr0.1"])
    for g in sorted({r["group"] for r in rows if r["group"].startswith("generated")}):
        sub = [r for r in rows if r["group"] == g]
        high = [r for r in sub if r["ccr_target"] is not None and r["ccr_target"] >= 1.0 - 1e-12]
        lim = TARGETS["gm_heft_generated"]
        if high:
            a = _aggregate(high, mapper)
            add(f"{g} CCR 1 and 10: geomean makespan/HEFT <= {lim:g}", lim, a["gm_heft"],
                None if math.isnan(a["gm_heft"]) else a["gm_heft"] <= lim)
        a = _aggregate(sub, mapper)
        add(f"{g}: cases above a memory-valid HEFT plan = 0", 0, a["above_valid_heft"], a["above_valid_heft"] == 0)
    if rows:
        a = _aggregate(rows, mapper)
        add("memory-valid wherever a valid plan exists (all cases)", 1.0, a["valid_share"],
            None if math.isnan(a["valid_share"]) else a["valid_share"] >= 1.0)
    for s in result.scale:
        if s["mapper"] != mapper:
            continue
        key = "time_10k_64" if s["tasks"] <= 10_000 else "time_100k_512"
        lim = TARGETS[key]
        add(f"map {s['tasks']:,} tasks x {s['devices']} devices <= {lim:g} s", lim, s.get("map_time_s"),
            None if s.get("map_time_s") is None else (s["status"] == "ok" and s["map_time_s"] <= lim))
    return out


# ---------------------------------------------------------------------- report

def _f(v, fmt="{:.3f}") -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return fmt.format(v)


def _t(v) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if v < 1e-3:
        return f"{v * 1e6:.0f} µs"
    if v < 1:
        return f"{v * 1e3:.1f} ms"
    return f"{v:.2f} s"


def _group_title(g, c, rows) -> str:
    cases = len({r["case"] for r in rows})
    exists = len({r["case"] for r in rows if r["valid_plan_exists"]})
    what = {"shared": "shared set", "classic": "classic example (Topcuoglu et al. 2002)",
            "random": "random DAGs", "generated-tune": "generated WfCommons instances (tune seeds)",
            "generated-report": "generated WfCommons instances (report seeds)",
            "generated": "generated WfCommons instances"}.get(g, g)
    ccr_s = f", CCR {c:g}" if c is not None else (", all CCRs" if g != "classic" else "")
    return f"{what}{ccr_s}: {cases} case{'s' if cases != 1 else ''}, a valid plan exists in {exists}"


_INSTANCE = re.compile(r"^(?P<app>.+)-n\d+-s\d+$")


def by_recipe(rows, mapper: str = TARGET_MAPPER) -> list[dict]:
    """Generated cases of ``mapper`` per recipe and CCR: ``{"group", "recipe", "ccr", "cases",
    "gm_heft", "worst_heft", "above_valid_heft", "gm_best"}``."""
    out = []
    mine = [r for r in rows if r["mapper"] == mapper and r["group"].startswith("generated")]
    keys = sorted({(r["group"], m.group("app"), r["ccr_target"]) for r in mine
                   if (m := _INSTANCE.match(r["graph"] or ""))})
    for g, app, c in keys:
        sub = [r for r in mine if r["group"] == g and r["ccr_target"] == c and r["graph"].startswith(app + "-n")]
        a = _aggregate(sub, mapper)
        out.append(dict(group=g, recipe=app, ccr=c, cases=a["cases"], gm_heft=a["gm_heft"], worst_heft=a["worst_heft"],
                        above_valid_heft=a["above_valid_heft"], gm_best=a["gm_best"]))
    return out


def _print_recipes(result: BenchResult, con, mapper: str) -> None:
    """One table per generated group: ``mapper`` per recipe (rows) and CCR (columns)."""
    from rich.table import Table  # noqa: PLC0415
    rec = by_recipe(result.rows, mapper)
    for g in sorted({r["group"] for r in rec}):
        mine = [r for r in rec if r["group"] == g]
        ccrs = sorted({r["ccr"] for r in mine})
        tab = Table(title=f"{mapper} per recipe, {g}: mk/HEFT gm (worst) · mk/best gm", title_justify="left",
                    show_edge=False, pad_edge=False)
        tab.add_column("recipe")
        for c in ccrs:
            tab.add_column(f"CCR {c:g}", justify="right")
        for app in sorted({r["recipe"] for r in mine}):
            cells = []
            for c in ccrs:
                r = next((x for x in mine if x["recipe"] == app and x["ccr"] == c), None)
                cells.append("-" if r is None else f"{_f(r['gm_heft'])} ({_f(r['worst_heft'])}) · {_f(r['gm_best'])}")
            tab.add_row(app, *cells)
        con.print(tab)
        con.print()


def print_report(result: BenchResult, console=None, target_mapper: str = TARGET_MAPPER) -> None:
    """Print one table per group and CCR, the scale runs, and the targets."""
    from rich.console import Console  # noqa: PLC0415
    from rich.table import Table  # noqa: PLC0415
    con = console or Console(highlight=False, width=None if sys.stdout.isatty() else 200)
    for note in result.notes:
        con.print(f"note: {note}", markup=False)
    for g, c, gr in _groups(result.rows):
        tab = Table(title=_group_title(g, c, gr), title_justify="left", show_edge=False, pad_edge=False)
        for col, just in (("mapper", "left"), ("plans", "right"), ("mk/LB gm", "right"), ("mk/LB worst", "right"),
                          ("mk/FJ gm", "right"), ("mk/best gm", "right"), ("mk/best worst", "right"),
                          ("mk/HEFT gm", "right"), ("mk/HEFT worst", "right"), ("> valid HEFT", "right"),
                          ("valid", "right"),
                          ("breaks cap.", "right"), ("time mean", "right"), ("time max", "right")):
            tab.add_column(col, justify=just)
        for m in result.mappers:
            a = _aggregate(gr, m)
            name = m + (" (baseline)" if m == result.baseline else "")
            tab.add_row(name, f"{a['plans']}/{a['cases']}", _f(a["gm_lb"]), _f(a["worst_lb"]), _f(a["gm_fj"]),
                        _f(a["gm_best"]), _f(a["worst_best"]),
                        _f(a["gm_heft"]),
                        _f(a["worst_heft"]), str(a["above_valid_heft"]), f"{a['valid']}/{a['valid_exists']}", str(a["capacity_breaks"]),
                        _t(a["mean_time_s"]), _t(a["max_time_s"]))
        tgt = []
        if g == "shared":
            tgt.append(f"{target_mapper} mk/HEFT gm <= {TARGETS['gm_heft']:g}, worst <= {TARGETS['worst_heft']:g}")
            if c is not None and abs(c - 0.1) < 1e-12:
                fl = _aggregate(gr, result.mappers[0])["floor_lb"]
                tgt.append(f"mk/LB gm <= {TARGETS['gm_lb_ccr0.1']:g} (no plan can score below FJ/LB gm = {_f(fl)})")
            tgt.append("valid = all where one exists")
        if g.startswith("generated"):
            if c is None or c >= 1.0 - 1e-12:
                tgt.append(f"{target_mapper} mk/HEFT gm <= {TARGETS['gm_heft_generated']:g} at CCR 1 and 10")
            tgt.append("> valid HEFT = 0")
        if tgt:
            tab.caption = "targets: " + "; ".join(tgt)
            tab.caption_justify = "left"
        con.print(tab)
        con.print()
    _print_recipes(result, con, target_mapper)
    if result.scale:
        tab = Table(title="mapping time at scale", title_justify="left", show_edge=False, pad_edge=False)
        for col in ("tasks", "devices", "edges", "mapper", "cost model", "map time", "target", "makespan/LB", "status"):
            tab.add_column(col, justify="left" if col in ("mapper", "status") else "right")
        for s in result.scale:
            lim = TARGETS["time_10k_64"] if s["tasks"] <= 10_000 else TARGETS["time_100k_512"]
            tab.add_row(f"{s['tasks']:,}", str(s["devices"]), f"{s['edges']:,}", s["mapper"], _t(s["cost_time_s"]),
                        _t(s.get("map_time_s")), f"<= {lim:g} s" if s["mapper"] == target_mapper else "",
                        _f(s.get("makespan_lb")), s["status"])
        con.print(tab)
        con.print()
    checks = check_targets(result, target_mapper)
    tab = Table(title=f"targets for {target_mapper}", title_justify="left", show_edge=False, pad_edge=False)
    tab.add_column("target")
    tab.add_column("measured", justify="right")
    tab.add_column("", justify="left")
    if target_mapper not in result.mappers:
        con.print(f"targets for {target_mapper}: not measured ({target_mapper} did not run)", markup=False)
        return
    for ch in checks:
        v = ch["value"]
        if "cases above" in ch["target"]:
            shown = str(v)
        else:
            shown = _t(v) if "map " in ch["target"] else (_f(v, "{:.1%}") if "valid" in ch["target"] else _f(v))
        tab.add_row(ch["target"], shown, "-" if ch["ok"] is None else ("PASS" if ch["ok"] else "FAIL"))
    con.print(tab)
    base = [r for r in result.rows if r["mapper"] == result.baseline and r["status"] == "ok"]
    breaks = sum(1 for r in base if not r["memory_valid"])
    con.print(f"{result.baseline} breaks device capacity in {breaks} of {len(base)} plans; "
              f"no mapper found a valid plan in {len({r['case'] for r in result.rows if not r['valid_plan_exists']})} cases",
              markup=False)


def _csv_value(v):
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return repr(v)
    return v


def _write_table(path, columns: list[str], rows) -> None:
    """``rows`` (dicts) as CSV with ``columns``, written whole or not at all."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(columns)
    for r in rows:
        w.writerow([_csv_value(r.get(k)) for k in columns])
    atomic_write_text(path, buf.getvalue(), what="CSV")


def write_csv(result: BenchResult, path) -> None:
    """One row per case and mapper, columns :data:`CSV_COLUMNS`."""
    _write_table(path, CSV_COLUMNS, result.rows)


def write_summary_csv(result: BenchResult, path) -> None:
    """One row per group, CCR (empty: all) and mapper, columns :data:`SUMMARY_COLUMNS`."""
    _write_table(path, SUMMARY_COLUMNS, summarize(result))


def plot(result: BenchResult, path) -> None:
    """Two panels: makespan / HEFT and makespan / lower bound, per case (x) and mapper (marker),
    log scale; cases grouped by set and CCR. Memory-invalid plans are drawn as crosses."""
    import matplotlib  # noqa: PLC0415
    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt  # noqa: PLC0415

    rows = result.rows
    cases = list(dict.fromkeys(r["case"] for r in rows))
    info = {r["case"]: r for r in rows}
    cases.sort(key=lambda c: (_GROUP_ORDER.get(info[c]["group"], 9), info[c]["ccr_target"] or 0.0))
    x_of = {c: i for i, c in enumerate(cases)}
    n = len(cases)
    fig, axes = plt.subplots(2, 1, figsize=(min(40, max(10, 0.06 * n + 4)), 8), sharex=True)
    markers = "os^vDP*hX<>"
    for k, m in enumerate(result.mappers):
        mine = [r for r in rows if r["mapper"] == m and r["status"] == "ok"]
        for ax, key in zip(axes, ("makespan_heft", "makespan_lb")):
            pts = [(x_of[r["case"]], r[key], r["memory_valid"]) for r in mine
                   if r[key] is not None and np.isfinite(r[key]) and r[key] > 0]
            if not pts:
                continue
            xs, ys, ok = map(np.asarray, zip(*pts))
            color = f"C{k % 10}"
            ax.scatter(xs[ok], ys[ok], s=14, marker=markers[k % len(markers)], color=color, alpha=0.8,
                       label=m if key == "makespan_heft" else None, linewidths=0)
            if (~ok).any():
                ax.scatter(xs[~ok], ys[~ok], s=22, marker="x", color=color, alpha=0.9,
                           label=f"{m} (memory-invalid)" if key == "makespan_heft" else None)
    # Separators and labels between groups / CCRs.
    bounds, labels, prev = [], [], None
    for i, c in enumerate(cases):
        key = (info[c]["group"], info[c]["ccr_target"])
        if key != prev:
            bounds.append(i)
            labels.append(f"{key[0]}" + (f"\nCCR {key[1]:g}" if key[1] is not None else ""))
            prev = key
    bounds.append(n)
    for ax, title in zip(axes, (f"makespan / {result.baseline}", "makespan / lower bound")):
        ax.set_yscale("log")
        ax.set_ylabel(title)
        ax.grid(True, which="both", axis="y", alpha=0.3)
        for b in bounds[1:-1]:
            ax.axvline(b - 0.5, color="0.6", lw=0.8)
        ax.axhline(1.0, color="k", lw=0.8)
    axes[0].axhline(TARGETS["gm_heft"], color="C3", lw=0.8, ls="--")
    axes[1].set_xticks([(a + b - 1) / 2 for a, b in zip(bounds[:-1], bounds[1:])])
    axes[1].set_xticklabels(labels, fontsize=8)
    axes[1].set_xlim(-1, n)
    axes[0].legend(fontsize=8, ncol=min(6, 2 * len(result.mappers)), loc="upper left")
    axes[0].set_title("mapping benchmark: per case (dashed: target geomean for auto)")
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---------------------------------------------------------------------- scale

def scale_benchmark(mappers: Sequence[str] = ("auto", "heft"), sizes: Sequence[tuple[int, int]] = ((10_000, 64), (100_000, 512)),
                    seed: int = 1, notes: list | None = None, bound: bool = True) -> list[dict]:
    """Mapping time of ``mappers`` on generated graphs of ``(tasks, devices)``.

    The graphs are :func:`~streammap.bench.cases.random_dag` (``alpha`` 1, out-degree 3, CCR 1,
    ``beta`` 0.5) with 8 device models, on :func:`~streammap.bench.cases.random_cluster` with 8
    devices per node. The cost model is built once per size and timed apart from the mappers.
    """
    out = []
    fns = {}
    for m in mappers:
        try:
            fns[m] = get_mapper(m)
        except StreamMapError:
            if notes is not None:
                notes.append(f"scale: mapper {m!r} is not registered: skipped")
    for n, d in sizes:
        g = random_dag(n, 1.0, 3, 1.0, 0.5, seed, n_models=8)
        cl = scale_cluster_for_ccr(g, random_cluster(d, 8, per_node=8), 1.0)
        t0 = time.perf_counter()
        cost = CostModel(g, cl)
        ct = time.perf_counter() - t0
        lb = lower_bound(cost) if bound else None
        for m, fn in fns.items():
            r = dict(case=f"scale-n{n}-p{d}-s{seed}", tasks=n, devices=d, edges=cost.n_edges, mapper=m, cost_time_s=ct)
            t0 = time.perf_counter()
            try:
                s = fn(cost)
                r.update(status="ok", map_time_s=time.perf_counter() - t0, makespan=float(s.makespan),
                         makespan_lb=float(s.makespan) / lb if lb else None)
            except MappingError as exc:
                r.update(status="no plan", map_time_s=time.perf_counter() - t0, message=exc.message)
            out.append(r)
        del cost, g
    return out


# ---------------------------------------------------------------------- command line

def add_mapping_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``streammap bench mapping`` (and ``benchmarks/mapping.py``)."""
    p.add_argument("--quick", action="store_true",
                   help="smaller random suite (36 small graphs and 1,000 tasks x 3 CCRs instead of 135 + 6 up to "
                        "5,000 tasks); the shared set is always complete; with --generated: one seed, up to 700 tasks")
    p.add_argument("--out", default="bench-out", metavar="DIR",
                   help="output folder for mapping.csv, mapping-summary.csv and mapping.png (default: bench-out)")
    p.add_argument("--mappers", default=",".join(DEFAULT_MAPPERS), metavar="A,B,C",
                   help=f"mappers to compare, comma-separated (default: {','.join(DEFAULT_MAPPERS)}); any name "
                        "--mapper accepts, custom policies by class path included")
    p.add_argument("--shared", metavar="PATH",
                   help="the shared benchmarks folder (default: ../shared/benchmarks)")
    p.add_argument("--scale", action="store_true",
                   help="also time auto and heft on generated 10,000 x 64 and 100,000 x 512 graphs")
    p.add_argument("--no-shared", action="store_true", help="skip the shared set")
    p.add_argument("--no-random", action="store_true", help="skip the random suite")
    p.add_argument("--seed", type=int, default=0, help="seed of the random suite (default 0)")
    p.add_argument("--no-plot", action="store_true", help="do not draw mapping.png")
    p.add_argument("--generated", action="store_true",
                   help="the seeded WfCommons suite instead of the shared set and the random suite: every recipe "
                        "of the shared applications (rnaseq excluded), 50-2,000 tasks, on the shared clusters at "
                        "CCR 0.1, 1 and 10 (needs: pip install 'streammap[bench]')")
    p.add_argument("--seeds", choices=sorted(SEED_SETS), default="report",
                   help="seed set of --generated: tune (to look at while tuning) or report (the figures quoted; "
                        "default)")


def run_mapping(args) -> int:
    """Run ``streammap bench mapping`` with parsed ``args``; returns the exit status."""
    from rich.console import Console  # noqa: PLC0415
    con = Console(highlight=False, width=None if sys.stdout.isatty() else 200)
    mappers = [m.strip() for m in args.mappers.split(",") if m.strip()]
    if args.seed < 0:                       # before any case is drawn: NumPy's seeds are >= 0
        raise StreamMapError(f"--seed: {shown(args.seed)} is not a seed", hint="give an integer >= 0")
    if not mappers:
        raise StreamMapError("--mappers is empty", hint=f"for example --mappers {','.join(DEFAULT_MAPPERS)}")
    cases: list[Case] = []
    notes = []
    generated = getattr(args, "generated", False)
    if generated:
        require_wfcommons()                   # before any work: exit 2 with the install hint
        root = find_shared(args.shared)
        if root is None:
            raise StreamMapError("shared benchmarks not found: the generated suite runs on their clusters",
                                 hint="give --shared PATH (the folder that holds clusters/)")
        cases += generated_cases(root, seeds=args.seeds, quick=args.quick, cache=Path(args.out) / "generated")
    if not args.no_shared and not generated:
        root = find_shared(args.shared)
        if root is None:
            if args.shared:
                raise StreamMapError(f"shared benchmarks not found: {args.shared}",
                                     hint="give the folder that holds workflows/, cholesky/, classic/ and clusters/")
            notes.append("shared benchmarks not found (../shared/benchmarks): only the random suite runs; "
                         "give --shared PATH")
        else:
            cases += shared_cases(root)
    if not args.no_random and not generated:
        cases += random_cases(seed=args.seed, quick=args.quick)
    t0 = time.perf_counter()
    result = run_benchmark(cases, mappers, progress=sys.stderr.isatty())
    result.notes = notes + result.notes
    if args.scale:
        scale_mappers = [m for m in ("auto", "heft") if m in mappers] or ["auto", "heft"]
        result.scale = scale_benchmark(scale_mappers, notes=result.notes)
    elapsed = time.perf_counter() - t0
    out = Path(args.out)
    # The generated suite writes beside a default run's files, not over them.
    stem = f"mapping-generated-{args.seeds}" if generated else "mapping"
    write_csv(result, out / f"{stem}.csv")
    write_summary_csv(result, out / f"{stem}-summary.csv")
    wrote = [out / f"{stem}.csv", out / f"{stem}-summary.csv"]
    if not args.no_plot and result.rows:
        plot(result, out / f"{stem}.png")
        wrote.append(out / f"{stem}.png")
    print_report(result, con)
    n_cases = len({r["case"] for r in result.rows})
    con.print(f"{n_cases} cases x {len(result.mappers)} mappers in {elapsed:.1f} s; wrote "
              + ", ".join(str(p) for p in wrote), markup=False)
    return 0


def main(argv=None) -> int:
    """``python benchmarks/mapping.py [options]``: the same as ``streammap bench mapping``."""
    p = argparse.ArgumentParser(prog="benchmarks/mapping.py", description=__doc__.split("\n\n")[0])
    add_mapping_arguments(p)
    args = p.parse_args(argv)
    try:
        return run_mapping(args)
    except StreamMapError as exc:
        print(exc.format(), file=sys.stderr)
        return 2
