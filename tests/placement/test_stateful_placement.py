"""Every call of a stateful kernel runs on one device, whatever the strategy: on Ray each device's
actor holds its own copy of the kernel's module state, so calls spread over devices would see
different states. The compiler co-locates them, re-mapping keeps them where their state is, and a
plan that spreads them (edited by hand) is refused when read."""

import collections
import textwrap
from pathlib import Path

import numpy as np
import pytest

import streammap
from streammap.cli import main
from streammap.compiler import load_source_graph, resolve_cluster
from streammap.cost.model import CostModel
from streammap.errors import PlanError
from streammap.mappers import get_mapper
from streammap.placement.colocate import stateful_groups
from streammap.placement.spilling import estimate_spills
from streammap.plan import read_plan, write_plan
from streammap.remap import RemapError, remap_plan
from streammap.runtime import run_plan
from streammap.strategies import Mapped, choose_strategy
from tests.helpers.modules import load_file


def program(heavy: str, accumulate: str, entry: str) -> str:
    """A running sum over items: ``make(i)``, a heavy stateless step, a stateful ``accumulate``."""
    return textwrap.dedent('''
        import numpy as np

        # @stream param
        ITEMS = 6
        # @stream param
        ROWS = 64

        # @stream kernel(out=8*ROWS)
        def make(i):
            return np.arange(ROWS, dtype=float) + i

        # @stream kernel(%s)
        def heavy(x):
            return np.sqrt(x) * 2

        STATE = {"sum": None}

        # @stream kernel(%s)
        def accumulate(x):
            STATE["sum"] = x.copy() if STATE["sum"] is None else STATE["sum"] + x
            return STATE["sum"].copy()
        ''') % (heavy, accumulate) + textwrap.dedent(entry)


#: Batches: the heavy step spreads over the devices, and a mapper left alone puts each
#: accumulate call beside its input (on several devices).
BATCHES = program("flops=1e12, bytes=8*ROWS, out=8*ROWS, split=0", "flops=1e6, out=8*ROWS, stateful=True", '''
    # @stream graph
    def main():
        return [accumulate(heavy(make(i))) for i in range(ITEMS)]
    ''')

#: A stream whose state is reached from two sites of the body (one state, two stages).
STREAM = program("flops=1e11, bytes=8*ROWS, out=8*ROWS", "flops=1e9, out=8*ROWS, stateful=True", '''
    # @stream pipeline(items=ITEMS)
    def stream(i):
        return accumulate(heavy(accumulate(make(i))))
    ''')


#: Two nodes of two GPUs behind a 12.5 GB/s network (small enough for the Ray tests' actors); HEFT
#: spreads BATCHES' accumulate calls over two devices here too.
TWO_BY_TWO = {"name": "two-by-two", "network": {"bandwidth": "12.5 GB/s", "latency": "10us"},
              "nodes": [{"name": f"node{n}", "link": {"bandwidth": "300 GB/s", "latency": "3us"},
                         "devices": [{"name": f"gpu{i}", "kind": "gpu", "vendor": "nvidia", "model": "H200",
                                      "memory": "80GiB", "flops": "20 TFLOP/s", "mem_bandwidth": "2000 GB/s"}
                                     for i in range(2)]} for n in range(2)]}


def write(tmp_path, text, name="prog.py") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def sequential(path: Path, call: str, n: int = 6) -> list:
    """The plain-Python result (a fresh module, so a fresh state)."""
    module = load_file(path, f"seq_{path.stem}")
    if call == "main":
        return module.main()
    return [module.stream(i) for i in range(n)]


def stateful_devices(plan) -> collections.Counter:
    return collections.Counter(t.device for t in plan.tasks if t.stateful)


def assert_results(got: dict, expected: list):
    assert len(got) == len(expected)
    for i, e in enumerate(expected):
        np.testing.assert_array_equal(got[f"result_{i}"], e)


def test_what_a_mapper_returns_beside_a_schedule_stays_with_that_schedule_through_the_re_mappings(tmp_path, hetero_cluster):
    """Co-location maps the graph again for each candidate device of the state; the strategy kept
    carries the spill estimate of the schedule it kept, not of another mapping."""
    graph = load_source_graph(write(tmp_path, BATCHES))
    made = []

    def heft_with_spills(cost):
        schedule = get_mapper("heft")(cost)
        made.append(estimate_spills(cost, schedule))
        return Mapped(schedule, made[-1])

    choice = choose_strategy(graph, resolve_cluster(str(hetero_cluster)), map_fn=heft_with_spills, strategy="none")
    kept = choice.chosen
    assert len(made) > 2                                   # mapped as written, then per candidate device
    assert kept.spills.schedule is kept.schedule and any(e is kept.spills for e in made)
    plain = choose_strategy(graph, resolve_cluster(str(hetero_cluster)), map_fn=get_mapper("heft"), strategy="none")
    assert plain.chosen.spills is None
    np.testing.assert_array_equal(plain.chosen.schedule.device, kept.schedule.device)


def test_the_mapper_alone_spreads_the_calls_and_the_compiler_keeps_them_on_one_device(tmp_path, hetero_cluster):
    path = write(tmp_path, BATCHES)
    cost = CostModel(load_source_graph(path), resolve_cluster(str(hetero_cluster)))
    calls = stateful_groups(cost)[0]
    assert len(set(get_mapper("heft")(cost).device[calls].tolist())) > 1     # the case being fixed
    expected = sequential(path, "main")
    for strategy in ("none", "data", "model"):
        plan = streammap.compile(path, cluster=str(hetero_cluster), strategy=strategy)
        assert plan.strategy.chosen == strategy
        devices = stateful_devices(plan)
        assert len(devices) == 1 and sum(devices.values()) == 6, (strategy, devices)
        assert_results(run_plan(plan, emulate=True, progress=False, telemetry=False), expected)


def test_a_stateful_kernel_called_at_two_stages_of_a_stream_keeps_one_device(tmp_path, hetero_cluster):
    path = write(tmp_path, STREAM)
    plan = streammap.compile(path, cluster=str(hetero_cluster), strategy="pipeline")
    stages = [s for s in plan.pipeline.stages if s.stateful]
    assert len(stages) == 2 and stages[0].replicas == stages[1].replicas and len(stages[0].replicas) == 1
    assert len(stateful_devices(plan)) == 1
    assert_results(run_plan(plan, emulate=True, progress=False, telemetry=False), sequential(path, "stream"))


def test_a_plan_edited_to_spread_a_stateful_kernel_is_refused_when_read(tmp_path, capsys, hetero_cluster):
    path = write(tmp_path, BATCHES)
    plan = streammap.compile(path, cluster=str(hetero_cluster), strategy="none")
    home = plan.tasks[[t.stateful for t in plan.tasks].index(True)].device
    other = next(d.id for d in plan.devices if d.id != home)
    last = max(i for i, t in enumerate(plan.tasks) if t.stateful)
    plan.tasks[last] = plan.tasks[last].model_copy(update={"device": other})
    write_plan(plan, tmp_path / "plan.yaml")
    with pytest.raises(PlanError, match=r"stateful kernel 'accumulate' runs on .* and on " + other) as err:
        read_plan(tmp_path / "plan.yaml")
    assert err.value.line is not None
    assert main(["run", str(tmp_path / "plan.yaml"), "--emulate", "--no-progress"]) == 2
    assert "must run on one device" in capsys.readouterr().err


def test_a_plan_from_before_the_stateful_field_still_reads(tmp_path):
    path = write(tmp_path, BATCHES)
    cluster = {"name": "two", "nodes": [{"name": "n0", "link": {"bandwidth": "300 GB/s", "latency": "3us"}, "devices": [
        {"name": f"gpu{i}", "kind": "gpu", "memory": "80GiB", "flops": "10 TFLOP/s"} for i in range(2)]}]}
    plan = streammap.compile(path, cluster=cluster)
    write_plan(plan, tmp_path / "plan.yaml")
    text = (tmp_path / "plan.yaml").read_text()
    assert "stateful: true" in text
    (tmp_path / "old.yaml").write_text(text.replace("stateful: true", "").replace("\n\n", "\n"))
    assert not any(t.stateful for t in read_plan(tmp_path / "old.yaml").tasks)


def test_re_mapping_keeps_pending_calls_where_the_state_is_and_refuses_a_lost_state(tmp_path, hetero_cluster):
    path = write(tmp_path, BATCHES)
    plan = streammap.compile(path, cluster=str(hetero_cluster), strategy="none")
    state = [t for t in plan.tasks if t.stateful]
    home = state[0].device
    done = [t.id for t in plan.tasks[:plan.tasks.index(state[1])]]        # the first call has run
    got = remap_plan(plan, done, now=0.01, slowdown={home: 50.0})
    assert stateful_devices(got.plan) == collections.Counter({home: 6})
    with pytest.raises(RemapError, match="kept its state on .*lost"):
        remap_plan(plan, done, now=0.01, lost=[home])
