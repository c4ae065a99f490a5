"""What-if with failures: a plan re-timed with devices or nodes lost, recovered as the runtime would.

The replay (streammap.whatif) drains like the executor and re-maps with remap_plan, on the plan's
estimates; these tests pin what a capacity planner relies on: losses that cannot matter change
nothing, a loss at the start is a plan for the smaller cluster, a loss mid-run costs between
nothing and a restart, names and times read as the cluster file writes them, and bad events are
refused with the valid names.
"""

from __future__ import annotations

import textwrap

import pytest
import yaml

import streammap
from streammap.cli import main
from streammap.errors import StreamMapError
from streammap.plan import validate_plan
from streammap.remap import remap_plan
from streammap.whatif import parse_losses, plan_makespan, what_if

PROGRAM = """
import numpy as np

# @stream param
N = 12


# @stream kernel(flops=1e6, out=32)
def source():
    return np.zeros(4)


# @stream kernel(flops=1e10, out=32)
def work(x, k):
    return x + k


# @stream kernel(flops=1e6, out=32)
def total(*xs):
    out = xs[0].copy()
    for x in xs[1:]:
        out = out + x
    return out


# @stream graph
def main():
    x = source()
    ys = [work(x, k) for k in range(N)]
    return total(*ys)
"""


def _gpus(n):
    return [{"name": f"gpu{i}", "kind": "gpu", "model": "A100", "flops": "19.5 TFLOP/s",
             "mem_bandwidth": "2 TB/s", "memory": "80GiB"} for i in range(n)]


LINK = {"bandwidth": "300 GB/s", "latency": "3us"}
ONE_NODE = {"name": "four", "nodes": [{"name": "node0", "link": dict(LINK), "devices": _gpus(4)}]}
TWO_NODES = {"name": "two-by-two", "network": {"bandwidth": "25 GB/s", "latency": "5us"},
             "nodes": [{"name": "node0", "link": dict(LINK), "devices": _gpus(2)},
                       {"name": "node1", "link": dict(LINK), "devices": _gpus(2)}]}


def _compile(tmp_path, cluster, n=12):
    path = tmp_path / "prog.py"
    path.write_text(textwrap.dedent(PROGRAM))
    return streammap.compile(path, cluster=cluster, params={"N": n}, mapper="heft")


@pytest.fixture
def plan(tmp_path):
    return _compile(tmp_path, ONE_NODE)


@pytest.fixture
def two_node_plan(tmp_path):
    return _compile(tmp_path, TWO_NODES)


def _times(plan):
    return [(t.id, t.device, t.start, t.finish) for t in plan.tasks]


# -- losses that change nothing ------------------------------------------------------------------

def test_losing_a_device_no_task_uses_changes_nothing(tmp_path):
    plan = _compile(tmp_path, ONE_NODE, n=1)          # source, one work, total: not every GPU is used
    unused = sorted({d.id for d in plan.devices} - {t.device for t in plan.tasks})
    assert unused
    result = what_if(plan, f"lose {unused[0]}@{plan_makespan(plan) / 2}")
    assert result.makespan == result.plan_makespan == plan_makespan(plan)
    assert result.recoveries[0].effect == "unused"
    assert _times(result.plan) == _times(plan)


def test_losing_a_device_after_the_makespan_changes_nothing(plan):
    span = plan_makespan(plan)
    result = what_if(plan, [f"lose node0/gpu0@{span}", "lose gpu1@2s"])
    assert [r.effect for r in result.recoveries] == ["after the end", "after the end"]
    assert result.makespan == span and result.lost_work == 0
    assert _times(result.plan) == _times(plan)


def test_a_device_lost_twice_is_recovered_once(plan):
    result = what_if(plan, "lose gpu1@10%, lose node0/gpu1@20%")
    assert [r.effect for r in result.recoveries] == ["recovered", "already lost"]


# -- what a loss costs ---------------------------------------------------------------------------

def test_losing_a_device_at_time_zero_is_re_mapping_on_the_smaller_cluster(plan):
    result = what_if(plan, "lose gpu2")
    smaller = remap_plan(plan, {}, 0.0, lost=["node0/gpu2"])
    assert _times(result.plan) == _times(smaller.plan)
    assert result.makespan == pytest.approx(plan_makespan(smaller.plan))
    assert result.makespan > result.plan_makespan            # 12 equal works on 3 GPUs, not 4
    rec = result.recoveries[0]
    assert rec.interrupted == [] and rec.rerun == [] and rec.lost_work == 0
    assert all(t.device != "node0/gpu2" for t in result.plan.tasks)


@pytest.mark.parametrize("share", [0.1, 0.3, 0.5, 0.7, 0.9])
@pytest.mark.parametrize("device", ["node0/gpu0", "node0/gpu3"])
def test_losing_a_device_mid_run_costs_between_nothing_and_a_restart(plan, share, device):
    span = plan_makespan(plan)
    at = share * span
    result = what_if(plan, f"lose {device}@{at}")
    restart = plan_makespan(remap_plan(plan, {}, 0.0, lost=[device]).plan)
    assert span <= result.makespan <= span + at + restart
    validate_plan(result.plan)
    rec = result.recoveries[0]
    assert rec.effect == "recovered" and rec.resumed >= at
    new = {t.id: t for t in result.plan.tasks}
    for k in rec.interrupted + rec.rerun:          # work started over goes elsewhere, after the drain
        assert new[k].device != device and new[k].start >= rec.resumed


def test_finished_work_is_kept_and_only_needed_outputs_of_the_lost_device_run_again(plan):
    span = plan_makespan(plan)
    source = plan.tasks[0]
    assert source.kernel == "source"
    at = 0.5 * span
    result = what_if(plan, f"lose {source.device}@{at}")
    rec = result.recoveries[0]
    old = {t.id: t for t in plan.tasks}
    new = {t.id: t for t in result.plan.tasks}
    # works still to come need the source's output, which was on the lost device
    assert source.id in rec.rerun
    # a finished work on a surviving device keeps its device and times
    kept = [t for t in plan.tasks if t.finish <= at and t.device != source.device and t.kernel == "work"]
    assert kept
    for t in kept:
        assert (new[t.id].device, new[t.id].start, new[t.id].finish) == (t.device, t.start, t.finish)
    # lost work: time spent on interrupted tasks plus the planned time of the tasks run again
    expected = sum(at - old[k].start for k in rec.interrupted) + sum(old[k].finish - old[k].start for k in rec.rerun)
    assert rec.lost_work == pytest.approx(expected)
    assert rec.interrupted == [t.id for t in plan.tasks if t.device == source.device and t.start < at < t.finish]


def test_the_local_executor_drains_running_tasks_before_re_mapping(plan):
    at = 0.5 * plan_makespan(plan)
    result = what_if(plan, f"lose gpu3@{at}", backend="local")
    running = [t.finish for t in plan.tasks if t.start < at < t.finish and t.device != "node0/gpu3"]
    assert result.recoveries[0].resumed == pytest.approx(max([at, *running]))


def test_losses_are_replayed_in_time_order_each_on_the_plan_the_last_one_left(plan):
    span = plan_makespan(plan)
    both = what_if(plan, f"lose gpu1@{0.6 * span}, lose gpu0@{0.2 * span}")
    assert [r.loss.target for r in both.recoveries] == ["gpu0", "gpu1"]
    first = what_if(plan, f"lose gpu0@{0.2 * span}")
    assert both.recoveries[0].makespan == first.makespan
    assert both.makespan >= first.makespan - 1e-12
    assert not any(t.device in ("node0/gpu0", "node0/gpu1") for t in both.plan.tasks
                   if t.start >= both.recoveries[1].resumed)


def test_a_finished_task_whose_dep_is_run_again_follows_it_in_the_plan(plan):
    """remap_plan lists finished tasks first, except after a dep that is run again (the what-if
    found this: losing the device of a finished source whose finished works are kept)."""
    source = plan.tasks[0]
    done_work = next(t for t in plan.tasks if t.kernel == "work" and t.device != source.device)
    result = remap_plan(plan, {source.id: source.device, done_work.id: done_work.device},
                        done_work.finish, lost=[source.device])
    validate_plan(result.plan)
    order = [t.id for t in result.plan.tasks]
    assert result.rerun == [source.id]
    assert order.index(source.id) < order.index(done_work.id)


# -- nodes and backends --------------------------------------------------------------------------

def test_losing_a_node_loses_all_its_devices(two_node_plan):
    plan = two_node_plan
    span = plan_makespan(plan)
    result = what_if(plan, f"lose node1@{0.4 * span}")
    rec = result.recoveries[0]
    assert rec.loss.devices == ("node1/gpu0", "node1/gpu1")
    assert result.backend == "ray"                 # the plan spans two nodes: only Ray runs it
    assert not any(t.device.startswith("node1/") for t in result.plan.tasks if t.start >= rec.resumed)
    assert result.makespan >= span


def test_ray_survivors_run_on_what_does_not_need_the_lost_device(two_node_plan):
    plan = two_node_plan
    at = 0.4 * plan_makespan(plan)
    local = what_if(plan, f"lose node1@{at}", backend="local").recoveries[0]
    ray_result = what_if(plan, f"lose node1@{at}", backend="ray")
    ray = ray_result.recoveries[0]
    # the local executor stops starting tasks; Ray's surviving actors go on with what they can
    assert ray.resumed > local.resumed
    went_on = [t for t in plan.tasks if t.device.startswith("node0/") and at <= t.start and t.finish <= ray.resumed]
    assert went_on
    kept = {t.id: t for t in ray_result.plan.tasks}
    for t in went_on:
        assert (kept[t.id].device, kept[t.id].start, kept[t.id].finish) == (t.device, t.start, t.finish)


def test_the_same_question_gives_the_same_answer(plan):
    events = "lose gpu1@30%, lose node0/gpu2@60%"
    assert what_if(plan, events).to_dict() == what_if(plan, events).to_dict()


# -- reading events ------------------------------------------------------------------------------

def test_events_name_nodes_device_ids_or_device_names_with_times_in_units(two_node_plan):
    span = plan_makespan(two_node_plan)
    losses = parse_losses(two_node_plan, "lose node0/gpu1@1.5ms, lose node1, lose node0/gpu0 @ 50%")
    by_text = {loss.text: loss for loss in losses}
    assert by_text["lose node0/gpu1@1.5ms"].at == pytest.approx(1.5e-3)
    assert by_text["lose node0/gpu1@1.5ms"].devices == ("node0/gpu1",)
    assert by_text["lose node1"].at == 0 and by_text["lose node1"].devices == ("node1/gpu0", "node1/gpu1")
    assert by_text["lose node0/gpu0 @ 50%"].at == pytest.approx(span / 2)
    assert [loss.at for loss in losses] == sorted(loss.at for loss in losses)


def test_a_device_name_alone_is_enough_when_one_node_has_it(plan):
    assert parse_losses(plan, "lose gpu3@1us")[0].devices == ("node0/gpu3",)


@pytest.mark.parametrize("events, message, hint", [
    ("lose gpu9@1ms", "'lose gpu9@1ms': the cluster has no node or device 'gpu9'", "node0, node0/gpu0"),
    ("lose gpu1@soon", "'lose gpu1@soon': cannot read 'soon' as a time", "lose NAME[@TIME]"),
    ("lose gpu1@x%", "cannot read 'x%' as a share of the makespan", "50%"),
    ("kill gpu1", "'kill gpu1': cannot read this event", "lose NAME[@TIME]"),
    ("lose gpu1,,lose gpu2", "an empty event between commas", "lose NAME[@TIME]"),
    ("lose node0@1us", "'lose node0@1us': no device left: the plan cannot finish", "node0/gpu3"),
])
def test_bad_events_are_refused_naming_the_event(plan, events, message, hint):
    with pytest.raises(StreamMapError) as err:
        what_if(plan, events)
    assert message in err.value.message and hint in (err.value.hint or "")


def test_a_device_name_on_several_nodes_must_say_which(two_node_plan):
    with pytest.raises(StreamMapError, match="several nodes") as err:
        what_if(two_node_plan, "lose gpu0@1ms")
    assert "node0/gpu0, node1/gpu0" in err.value.hint


def test_losing_every_device_one_by_one_cannot_finish(plan):
    with pytest.raises(StreamMapError, match="'lose gpu3@1ms': no device left"):
        what_if(plan, "lose gpu0, lose gpu1, lose gpu2@1us, lose gpu3@1ms")


# -- the command ---------------------------------------------------------------------------------

def _plan_file(tmp_path, cluster):
    (tmp_path / "prog.py").write_text(textwrap.dedent(PROGRAM))
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump(cluster))
    assert main(["compile", str(tmp_path / "prog.py"), "--cluster", str(tmp_path / "cluster.yaml"),
                 "-o", str(tmp_path / "plan.yaml")]) == 0
    return tmp_path / "plan.yaml"


def test_show_what_if_prints_both_makespans_and_what_moved(tmp_path, capsys):
    path = _plan_file(tmp_path, TWO_NODES)
    capsys.readouterr()
    assert main(["show", str(path), "--what-if", "lose node1@40%", "--what-if", "lose node0/gpu1@9s"]) == 0
    out = capsys.readouterr().out
    assert "what if: lose node1@40%, lose node0/gpu1@9s (recovery as backend ray" in out
    assert "plan makespan: " in out and "makespan with the losses and recovery: " in out
    assert "lose node1@40% (node1/gpu0, node1/gpu1): re-mapped from" in out
    assert "moved node1/gpu" in out
    assert "lose node0/gpu1@9s (node0/gpu1): after the run ended: no effect" in out
    assert main(["show", str(path), "--what-if", "lose node1@40%", "--what-if-backend", "local"]) == 0
    assert "(recovery as backend local" in capsys.readouterr().out


def test_show_what_if_refuses_unknown_names_listing_the_valid_ones(tmp_path, capsys):
    path = _plan_file(tmp_path, ONE_NODE)
    capsys.readouterr()
    assert main(["show", str(path), "--what-if", "lose node2@1ms"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""                      # nothing printed before the refusal
    assert "error: --what-if 'lose node2@1ms': the cluster has no node or device 'node2'" in captured.err
    assert "hint: nodes and devices of cluster 'four': node0, node0/gpu0" in captured.err
    assert "Traceback" not in captured.err


def test_show_what_if_needs_a_plan_not_a_run_record(tmp_path, capsys):
    record = tmp_path / "out.run.json"
    record.write_text("{}")
    assert main(["show", str(record), "--what-if", "lose gpu0"]) == 2
    assert "--what-if re-times a plan" in capsys.readouterr().err


@pytest.mark.parametrize("events", ["lose " + "x" * 100_000 + "@1ms", "lose gpu0@" + "1" * 100_000 + "q",
                                    "hide " + "x" * 100_000])
def test_an_event_of_a_hundred_thousand_characters_is_refused_in_a_few_lines(plan, events):
    with pytest.raises(StreamMapError) as err:
        parse_losses(plan, events)
    message = err.value.format()
    size, counted = len(message), "(100" in message     # (asserting on the message itself: a 200 KB diff)
    assert size < 1000 and counted


def test_more_events_than_the_limit_are_refused_before_any_is_replayed(plan):
    """A hundred thousand events (the command line holds that many) took a minute to replay, and
    printed a row each; at most MAX_EVENTS."""
    from streammap.whatif import MAX_EVENTS
    parse_losses(plan, ", ".join(["lose gpu1@1ms"] * MAX_EVENTS))
    with pytest.raises(StreamMapError, match=f"{MAX_EVENTS + 1} events \\(limit: {MAX_EVENTS}\\)"):
        parse_losses(plan, ", ".join(["lose gpu1@1ms"] * (MAX_EVENTS + 1)))
