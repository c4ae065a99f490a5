"""What the default mapper promises beyond "never worse than HEFT": under ``share`` clauses it is no
worse than mapping on the best single node; the HEFT figure a plan is compared with solves the same
problem (stateful kernels co-located); it is never worse than any of its own candidates, runs its
exact search only where the analytic bound leaves a gap, and writes the same plan bytes twice."""

import importlib
import textwrap

import numpy as np
import pytest
import yaml

import streammap
from streammap.compiler import load_source_graph, resolve_cluster
from streammap.cost.model import CostModel
from streammap.mappers import exact as exact_module
from streammap.mappers.auto import EXACT_GAP, auto, cheap_bound, device_subsets, lift
from streammap.mappers.heft import heft
from streammap.mappers.peft import peft
from streammap.mappers.schedule import evaluate
from streammap.placement.colocate import colocate_stateful, stateful_groups
from streammap.plan import write_plan
from tests.helpers.graphs import mixed_cluster, random_graph
from tests.helpers.paths import needs_shared

#: Independent quarter-GPU kernels with 2 MiB outputs feeding one fan-in (issue 17's example).
FAN_IN = textwrap.dedent('''
    import numpy as np

    # @stream param
    N = 32

    # @stream kernel(flops=2e8, out=2*1024*1024, share=0.25, device="gpu")
    def small(i):
        return np.zeros(4) + i

    # @stream kernel(flops=1e6, out=8)
    def gather(*xs):
        return sum(float(x.sum()) for x in xs)

    # @stream graph
    def main():
        return gather(*[small(i) for i in range(N)])
    ''')

#: Stateful accumulate calls that plain HEFT spreads over devices (each beside its heavy input).
BATCHES = textwrap.dedent('''
    import numpy as np

    # @stream param
    ITEMS = 6

    # @stream kernel(out=8*64)
    def make(i):
        return np.arange(64, dtype=float) + i

    # @stream kernel(flops=1e12, bytes=8*64, out=8*64)
    def heavy(x):
        return np.sqrt(x) * 2

    STATE = {"sum": None}

    # @stream kernel(flops=1e6, out=8*64, stateful=True)
    def accumulate(x):
        STATE["sum"] = x.copy() if STATE["sum"] is None else STATE["sum"] + x
        return STATE["sum"].copy()

    # @stream graph
    def main():
        return [accumulate(heavy(make(i))) for i in range(ITEMS)]
    ''')


def write(tmp_path, text, name="prog.py"):
    path = tmp_path / name
    path.write_text(text)
    return path


@needs_shared
def test_auto_with_shares_is_no_worse_than_the_best_single_node_of_the_cluster(tmp_path, hetero_cluster):
    prog = write(tmp_path, FAN_IN)
    plan = streammap.compile(prog, cluster=str(hetero_cluster), history=False)
    assert plan.mapper.name.startswith("auto(") and plan.mapper.name.endswith("+share")
    spec = yaml.safe_load(hetero_cluster.read_text())
    per_node = []
    for node in spec["nodes"]:
        alone = streammap.compile(prog, cluster={**spec, "nodes": [node]}, history=False)
        per_node.append(alone.mapper.estimated_makespan)
    fastest = streammap.compile(prog, cluster=str(hetero_cluster), mapper="fastest", history=False)
    assert plan.mapper.estimated_makespan <= min(per_node) * (1 + 1e-9)
    assert plan.mapper.estimated_makespan <= fastest.mapper.estimated_makespan * (1 + 1e-9)
    # nor worse than the share-aware list scheduler on the whole cluster (one of its candidates)
    heft_shared = streammap.compile(prog, cluster=str(hetero_cluster), mapper="heft", history=False)
    assert plan.mapper.estimated_makespan <= heft_shared.mapper.estimated_makespan * (1 + 1e-9)


@needs_shared
def test_the_heft_figure_of_a_plan_keeps_every_stateful_kernel_on_one_device(tmp_path, hetero_cluster):
    prog = write(tmp_path, BATCHES)
    cost = CostModel(load_source_graph(prog), resolve_cluster(str(hetero_cluster)))
    calls = stateful_groups(cost)[0]
    plain = heft(cost)
    assert len(set(plain.device[calls].tolist())) > 1            # plain HEFT breaks the rule here
    plan = streammap.compile(prog, cluster=str(hetero_cluster), strategy="none", history=False)
    assert plan.mapper.heft_makespan == colocate_stateful(cost, heft).makespan
    assert plan.mapper.heft_makespan != plain.makespan
    assert plan.mapper.estimated_makespan <= plan.mapper.heft_makespan * (1 + 1e-12)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_auto_is_never_worse_than_any_of_its_candidates(seed):
    cost = CostModel(random_graph(24, seed=seed), mixed_cluster("8GiB"))
    s = auto(cost)
    ms, valid, _ = evaluate(cost, s)
    assert valid and ms == pytest.approx(s.makespan, rel=1e-12)
    candidates = [heft(cost), peft(cost), auto(cost, exact=False)]
    for _, devs in device_subsets(cost):
        sub = cost.restrict(devs)
        if np.isfinite(sub.time).any(axis=1).all():
            candidates.append(lift(cost, devs, heft(sub)))
    assert all(s.makespan <= c.makespan * (1 + 1e-12) for c in candidates)


def test_the_exact_search_runs_only_where_the_analytic_bound_leaves_a_gap(monkeypatch):
    calls = []
    real = exact_module.solve_exact

    def counting(cost, hint, **kw):
        calls.append(hint.makespan / cheap_bound(cost))
        return real(cost, hint, **kw)

    monkeypatch.setattr(importlib.import_module("streammap.mappers.auto"), "solve_exact", counting)
    for seed in range(4):
        cost = CostModel(random_graph(16, seed=seed), mixed_cluster("8GiB"))
        before = auto(cost, exact=False)
        gap = before.makespan / cheap_bound(cost) - 1
        n = len(calls)
        after = auto(cost)
        assert len(calls) == n + (gap > EXACT_GAP)
        assert after.makespan <= before.makespan
        if gap > EXACT_GAP:
            assert after.bound is not None and after.bound <= after.makespan * (1 + 1e-12)
    assert calls                                                  # the case where it runs is covered


@needs_shared
def test_the_same_program_compiles_to_the_same_plan_bytes(tmp_path, hetero_cluster):
    prog = write(tmp_path, BATCHES)
    texts = []
    for k in range(2):
        plan = streammap.compile(prog, cluster=str(hetero_cluster), history=False)
        write_plan(plan, tmp_path / f"plan{k}.yaml")
        texts.append((tmp_path / f"plan{k}.yaml").read_bytes())
    assert texts[0] == texts[1]
