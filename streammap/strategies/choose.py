"""Choosing a parallel strategy: evaluate every one that applies with the cost model, keep the best.

Between the cost model and the plan, the compiler may transform the program:

``none``      the task graph as written, placed by the mapper (``--mapper``);
``data``      fission of ``split=`` kernels into shards (:mod:`.fission`), then the mapper;
``model``     the graph cut into consecutive pieces by memory and speed (:mod:`.model`);
``pipeline``  a stream program's stages mapped for the least period (:mod:`.pipeline`).

Every candidate ends as a :class:`~streammap.mappers.schedule.Schedule` of the (possibly transformed)
graph, and they are compared on one number, the estimated makespan of the whole run (for a
pipeline, of all its items: fill, then one item per period). ``auto`` keeps the least (ties go to
the simpler strategy, in the order above); a forced strategy is kept whatever the others
estimate, and the others are still evaluated so that the plan can say what was given up.

A strategy that does not apply is skipped with its reason: ``data`` without a splittable kernel
(or when no split pays), ``model`` when the program fits the largest device, ``pipeline`` for a
program that is not a ``# @stream pipeline``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, NamedTuple, Optional

import networkx as nx

from streammap.cluster.model import Cluster
from streammap.cost.model import CostModel
from streammap.errors import StreamMapError
from streammap.mappers.schedule import Schedule
from streammap.placement.colocate import colocate_stateful
from streammap.placement.spilling import SpillEstimate
from streammap.plan import StrategyInfo
from streammap.strategies.fission import choose_shards, split_graph, splittable
from streammap.strategies.model import map_model, single_device_fit
from streammap.strategies.pipeline import pipeline_schedule, stage_problem
from streammap.units import format_size, format_time

#: Strategy names, simplest first (the tie-break order).
STRATEGIES = ("none", "data", "model", "pipeline")


class Mapped(NamedTuple):
    """What a mapper of ``none`` and ``data`` returns: its schedule, and the spill estimate the
    schedule was re-timed with when the mapper made one (the compiler's does: the plan reports
    the bytes it spills)."""

    schedule: Schedule
    spills: Optional[SpillEstimate] = None


@dataclass
class Candidate:
    """One strategy's result: the graph it runs, its cost model and schedule, and its extras."""

    name: str
    graph: nx.DiGraph
    cost: CostModel
    schedule: Schedule
    splits: dict = field(default_factory=dict)
    pipeline: Optional[dict] = None        # PipelineInfo fields, for the pipeline strategy
    spills: Optional[SpillEstimate] = None  # the spill estimate of ``schedule``, when its mapper made one

    @property
    def makespan(self) -> float:
        return float(self.schedule.makespan)


@dataclass
class Choice:
    """The kept candidate and what the plan records about the choice."""

    chosen: Candidate
    forced: bool
    estimates: dict[str, float]
    skipped: dict[str, str]
    reason: str

    def info(self) -> StrategyInfo:
        """The plan's ``strategy`` block."""
        return StrategyInfo(chosen=self.chosen.name, forced=self.forced,
                            estimates={k: float(v) for k, v in self.estimates.items()},
                            skipped=dict(self.skipped), reason=self.reason,
                            splits=dict(self.chosen.splits))


def check_strategy(name: str) -> str:
    if name == "auto" or name in STRATEGIES:
        return name
    raise StreamMapError(f"unknown strategy {name!r}",
                         hint=f"use auto (default) or one of: {', '.join(STRATEGIES)}")


def choose_strategy(graph: nx.DiGraph, cluster: Cluster, *, map_fn: Callable[[CostModel], Schedule | Mapped],
                    strategy: str = "auto", history=None, cost: CostModel | None = None) -> Choice:
    """Evaluate the strategies that apply to ``graph`` on ``cluster`` and choose one.

    Parameters
    ----------
    graph : networkx.DiGraph
        The program's task graph (IR).
    cluster : Cluster
    map_fn : callable
        The mapper for ``none`` and ``data`` (``--mapper``): it returns a schedule, or a
        :class:`Mapped` (the schedule with its spill estimate, kept in the :class:`Candidate`).
    strategy : str
        ``auto`` (the least estimate) or a strategy name to force.
    history : callable, optional
        The cost model's history hook.
    cost : CostModel, optional
        The graph's cost model, when the caller has it already.

    Raises
    ------
    StreamMapError
        An unknown strategy, or a forced one that does not apply (with the reason).
    """
    check_strategy(strategy)
    given = map_fn

    def mapped(c: CostModel) -> Mapped:
        got = given(c)
        return got if isinstance(got, Mapped) else Mapped(got)

    def map_fn(c: CostModel) -> Mapped:            # every call of a stateful kernel on one device
        return colocate_stateful(c, mapped, schedule_of=_schedule_of)

    cost = cost or CostModel(graph, cluster, history=history)
    candidates: dict[str, Candidate] = {}
    skipped: dict[str, str] = {}
    failed = None
    try:
        got = map_fn(cost)
        candidates["none"] = Candidate("none", graph, cost, got.schedule, spills=got.spills)
    except StreamMapError as exc:          # e.g. no memory-valid placement of the graph as written
        if strategy == "none":
            raise
        failed, skipped["none"] = exc, exc.message
    for name, build in (("data", _data), ("model", _model), ("pipeline", _pipeline)):
        try:
            got = build(graph, cluster, cost, map_fn=map_fn, history=history, forced=strategy == name)
        except StreamMapError as exc:
            if strategy == name:
                raise
            skipped[name] = exc.message
            continue
        except _Skip as why:
            skipped[name] = str(why)
            if strategy == name:
                raise StreamMapError(f"--strategy {name} does not apply to this program: {why}",
                                     path=graph.graph.get("source"),
                                     hint="use --strategy auto to let the compiler choose") from None
            continue
        candidates[name] = got
    if not candidates:
        raise failed
    estimates = {n: c.makespan for n, c in candidates.items()}
    if strategy == "auto":
        best = min(candidates, key=lambda n: (round(estimates[n], 15), STRATEGIES.index(n)))
    else:
        best = strategy
    return Choice(candidates[best], strategy != "auto", estimates, skipped,
                  _reason(best, strategy, estimates, skipped))


class _Skip(Exception):
    """A strategy does not apply (the message says why)."""


def _schedule_of(result: Mapped) -> Schedule:
    return result.schedule


def _data(graph, cluster, cost, *, map_fn, history, forced) -> Candidate:
    if not splittable(graph):
        raise _Skip("no kernel call with a split clause and an array argument (stateful kernels are never split)")
    if len(cluster.devices) < 2:
        raise _Skip("the cluster has one device")
    choices = choose_shards(graph, cluster, history=history, force=forced)
    chosen = [c for c in choices if c.k >= 2]
    if not chosen:
        raise _Skip("no split pays for itself on this cluster (transfers, or the devices are busy with parallel tasks)")
    splits = {c.task: c.k for c in chosen}
    split = split_graph(graph, {c.task: c.fractions for c in chosen}, {c.task: c.pins for c in chosen})
    scost = CostModel(split, cluster, history=history)
    got = map_fn(scost)
    return Candidate("data", split, scost, got.schedule, splits=splits, spills=got.spills)


def _model(graph, cluster, cost, *, map_fn, history, forced) -> Candidate:
    if cost.n_devices < 2:
        raise _Skip("the cluster has one device")
    ok, peak, cap = single_device_fit(cost)
    if ok and not forced:
        raise _Skip(f"the program fits one device ({format_size(peak)} of {format_size(cap)})")
    return Candidate("model", graph, cost, colocate_stateful(cost, map_model))


def _pipeline(graph, cluster, cost, *, map_fn, history, forced) -> Candidate:
    info = graph.graph.get("pipeline")
    if not info:
        raise _Skip("the program is not a # @stream pipeline")
    items = int(info["items"])
    try:
        problem = stage_problem(cost, items)
    except StreamMapError as exc:
        raise _Skip(exc.message) from None
    sched, pipeline = pipeline_schedule(cost, problem, items)
    return Candidate("pipeline", graph, cost, sched, pipeline=pipeline)


def _reason(best: str, strategy: str, estimates: dict, skipped: dict) -> str:
    """One sentence: what was chosen, how, and against what."""
    how = "forced by --strategy" if strategy != "auto" else "chosen by auto"
    others = [f"{n} {format_time(v)}" for n, v in estimates.items() if n != best]
    text = f"{best} ({how}): estimated makespan {format_time(estimates[best])}"
    if others:
        text += "; the alternatives: " + ", ".join(others)
    if skipped:
        text += "; not applicable: " + "; ".join(f"{n} ({why})" for n, why in skipped.items())
    return text
