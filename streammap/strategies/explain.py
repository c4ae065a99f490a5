"""What ``streammap compile`` and ``streammap show`` say about a plan's parallel strategy."""

from __future__ import annotations

from streammap.plan import Plan
from streammap.units import format_time


def strategy_sentence(plan: Plan) -> str:
    """One sentence: the strategy, why, and what the alternatives were estimated at.

    Plans written before strategies existed have no ``strategy`` block: they used ``none``.
    """
    s = plan.strategy
    if s is None:
        return "strategy: none (a plan from before parallel strategies: the task graph as written)"
    est = s.estimates
    mine = est.get(s.chosen)
    what = {"none": "the task graph as written",
            "data": f"data parallel, {len(s.splits)} kernel call(s) split into "
                    + ", ".join(sorted({str(k) for k in s.splits.values()})) + " shards",
            "model": "model parallel, the graph cut into pieces by memory and speed",
            "pipeline": "pipeline parallel, stages streamed through devices"}[s.chosen]
    text = f"strategy: {s.chosen} ({what})"
    others = {n: v for n, v in est.items() if n != s.chosen}
    if s.forced:
        text += ", forced by --strategy"
        if others and mine is not None:
            best = min(others, key=others.get)
            if others[best] < mine:
                text += f"; auto would have chosen {best} ({format_time(others[best])} against {format_time(mine)})"
    elif others and mine is not None:
        runner = min(others, key=others.get)
        ratio = others[runner] / mine if mine > 0 else float("inf")
        text += (f", chosen because its estimated makespan {format_time(mine)} is the least: "
                 f"{ratio:.3g}x shorter than the next best, {runner} ({format_time(others[runner])})")
    else:
        text += ", the only strategy that applies"
    if s.skipped:
        text += "; not applicable: " + "; ".join(f"{n} ({why})" for n, why in s.skipped.items())
    p = plan.pipeline
    if p is not None:
        ratio = p.period / p.lower_bound if p.lower_bound > 0 else float("nan")
        text += (f". Pipeline: period {format_time(p.period)} ({p.items_per_second:,.0f} items/s) for "
                 f"{p.items} items, {ratio:.3g}x its lower bound {format_time(p.lower_bound)} (bound by {p.bound_by})")
        replicated = [st.name.split("@")[0] for st in p.stages if len(st.replicas) > 1]
        if replicated:
            text += f"; replicated stages: {', '.join(replicated[:6])}{' ...' if len(replicated) > 6 else ''}"
    return text
