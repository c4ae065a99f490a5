"""The streammap policy's ``themis`` order: under overload the longest jobs keep the tail deadline
while they can still finish within THEMIS_BOUND x their run on their tenant's share, then give way."""

import pytest

from streammap.errors import StreamMapError
from streammap.tenancy.admission import THEMIS_BOUND, Scheduler
from streammap.tenancy.tenants import tenants_from_dict
from tests.helpers.admission import job, one_model_cluster, tail_scene
from tests.helpers.cli import refused


def overloaded_queue(order, tenants=("a",)):
    """The tail scene (:func:`tests.helpers.admission.tail_scene`) with four more 20-s jobs behind
    the 20-s one, so the queue asks for more GPUs than the cluster has (5 of 4: overload) when the
    500-s job arrives at t=10,002. Without the wait bound, which would put the 20-s job's deadline
    at its arrival (no job of the scene has waited; tests/tenancy/test_wait_bound.py)."""
    s = Scheduler(one_model_cluster(4), tenants_from_dict(list(tenants)), order=order, wait_cap=0)
    return tail_scene(s, [job(f"other{i}", 10001.5, 20.0) for i in range(4)])


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
        Scheduler(one_model_cluster(4), tenants_from_dict(["a"]), order="lifo")


def test_simulate_refuses_an_unknown_order_without_a_traceback(tmp_path, capsys):
    refused(["simulate", "--jobs", tmp_path / "jobs.yaml", "--cluster", tmp_path / "c.yaml", "--order", "lifo"],
            capsys, "--order", "lifo", "themis")
