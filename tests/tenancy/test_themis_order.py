"""The streammap policy's ``themis`` order: under overload the longest jobs keep the tail deadline
while they can still finish within THEMIS_BOUND x their run on their tenant's share, then give way."""

import pytest

from streammap.cluster.model import cluster_from_dict
from streammap.errors import StreamMapError
from streammap.tenancy.admission import THEMIS_BOUND, Job, Scheduler
from streammap.tenancy.estimate import Demand, Option
from streammap.tenancy.tenants import tenants_from_dict
from tests.helpers.cli import refused


def four_gpus():
    return cluster_from_dict({"name": "t", "nodes": [
        {"name": "n0", "link": {"bandwidth": "300 GB/s", "latency": "3us"},
         "devices": [{"name": f"g{i}", "kind": "gpu", "model": "A100", "memory": "80GiB"} for i in range(4)]}]})


def job(jid, arrival, duration, tenant="a"):
    return Job(jid, tenant, arrival, Demand(1, (Option("A100", 1, duration, 1e9),)))


def overloaded_queue(order, tenants=("a",)):
    """Four GPUs, three of them held for days. 100 jobs of 50 s ran one after another without
    waiting on the fourth (what the 95th percentile of durations is learnt from); then, behind a
    10-s job on it, a 20-s job and four more queue, so the queue asks for more GPUs than the
    cluster has (5 of 4: overload) when a 500-s job arrives at t=10,002."""
    s = Scheduler(four_gpus(), tenants_from_dict(list(tenants)), order=order)
    for i in range(100):
        s.submit(job(f"m{i}", 100.0 * i, 50.0))
        s.schedule(100.0 * i)
        s.finish(f"m{i}")
    for i in range(3):
        s.submit(job(f"hold{i}", 10000.0, 1e6))
    s.submit(job("busy", 10000.0, 10.0))
    s.schedule(10000.0)
    s.submit(job("medium", 10001.0, 20.0))
    for i in range(4):
        s.submit(job(f"other{i}", 10001.5, 20.0))
    s.submit(job("long", 10002.0, 500.0))
    return s


def first_to_start(s, at):
    s.finish("busy")
    return s.schedule(at)[0][0].job_id


def test_under_overload_the_longest_job_keeps_its_tail_place_in_the_themis_order():
    # The deadline order gives the tail deadline to no job arriving under overload: the 20-s
    # job's slowdown deadline comes first. The themis order gives it while the 500-s job can still
    # end within THEMIS_BOUND x its run (started by 10,002 + (THEMIS_BOUND - 1) x 500 s).
    assert first_to_start(overloaded_queue("deadline"), 10010.0) == "medium"
    assert first_to_start(overloaded_queue("themis"), 10010.0) == "long"


def test_a_long_job_that_can_no_longer_meet_its_bound_gives_way_to_short_ones():
    # The GPU frees only after the long job's instant to give way: served first now, it would end
    # beyond its bound anyway, and the jobs behind it past theirs; it takes its slowdown deadline
    # (10,002 + 4 x 500 s), and the short jobs go first.
    late = 10002.0 + (THEMIS_BOUND - 1.0) * 500.0 + 1.0
    assert first_to_start(overloaded_queue("themis"), late) == "medium"


def test_a_long_job_that_gave_way_is_still_not_passed_for_ever():
    # After giving way it keeps its slowdown deadline: once that has come, no job arriving later
    # with a later deadline passes it (a 1-s job's deadline is 4 s after its arrival).
    s = overloaded_queue("themis")
    s.finish("busy")
    t = 10002.0 + (THEMIS_BOUND - 1.0) * 500.0 + 1.0
    started = [x.job_id for x in s.schedule(t)[0]]
    assert started == ["medium"]
    deadline = 10002.0 + 4 * 500.0
    for i, jid in enumerate(["other0", "other1", "other2", "other3"]):
        t += 20.0
        s.finish(started[0])
        started = [x.job_id for x in s.schedule(t)[0]]
        assert started == [jid]
    s.submit(job("fresh", deadline - 3.0, 1.0))      # its deadline (deadline + 1) is after the long job's
    s.finish(started[0])
    assert [x.job_id for x in s.schedule(deadline)[0]] == ["long"]


def test_a_small_tenant_below_its_share_still_goes_first():
    # The big tenant a overloads the cluster and its 500-s job holds the tail deadline, but tenant
    # b holds nothing (below its fair share): b's job starts first on the GPU that frees.
    s = overloaded_queue("themis", tenants=("a", "b"))
    s.submit(job("b-job", 10005.0, 100.0, tenant="b"))
    assert first_to_start(s, 10010.0) == "b-job"


def test_an_unknown_order_is_refused():
    with pytest.raises(StreamMapError, match="unknown order 'lifo'"):
        Scheduler(four_gpus(), tenants_from_dict(["a"]), order="lifo")


def test_simulate_refuses_an_unknown_order_without_a_traceback(tmp_path, capsys):
    refused(["simulate", "--jobs", tmp_path / "jobs.yaml", "--cluster", tmp_path / "c.yaml", "--order", "lifo"],
            capsys, "--order", "lifo", "themis")
