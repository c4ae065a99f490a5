"""The streammap policy's wait bound (``admission.WAIT_CAP``): outside overload no job's deadline
is later than its arrival plus WAIT_CAP times the mean wait of recent starts, whatever its
estimate says; under overload the bound is not given."""

import pytest

from streammap.errors import StreamMapError
from streammap.tenancy.admission import WAIT_CAP, Job, Scheduler
from streammap.tenancy.estimate import Demand, Option
from streammap.tenancy.tenants import tenants_from_dict
from tests.helpers.admission import job, one_model_cluster, waited_scene
from tests.helpers.cli import refused, replay_small_stream
from tests.helpers.paths import needs_shared

T = 300000.0     # when the scene's queue forms, after the warm-up


def urgent(jid, arrival, duration):
    """A one-GPU job of priority 1 (ahead of the scene's priority-0 filler)."""
    return Job(jid, "a", arrival, Demand(1, (Option("A100", 1, duration, 1e9),)), priority=1)


def first_of_two(wait_cap=WAIT_CAP, overload=False):
    """Four GPUs. Warm-up: 100 jobs ran one at a time, each after a 10-s wait (the mean wait
    learnt), every fifth of them 2,000 s long (so the 95th percentile of estimates is 2,000 s).
    At T three GPUs are held for days and a 10-s job runs on the fourth; a 400-s job ("high")
    arrives at T + 1 and a 20-s job ("short") at T + 3; with ``overload``, three 2-GPU jobs of
    lower priority queue first (6 GPUs asked of 4). Which of the two starts when the GPU frees?"""
    s = waited_scene(Scheduler(one_model_cluster(4), tenants_from_dict(["a"]), wait_cap=wait_cap), T, 10.0)
    if overload:
        for i in range(3):
            s.submit(job(f"filler{i}", T + 0.5, 100.0, gpus=2))
    s.submit(urgent("high", T + 1.0, 400.0))
    s.submit(urgent("short", T + 3.0, 20.0))
    s.finish("busy")
    return s.schedule(T + 10.0)[0][0].job_id


def test_a_job_is_not_left_waiting_four_times_a_high_estimate_while_the_cluster_keeps_up():
    # Jobs wait about 10 s here. The 400-s job's slowdown deadline is T + 1 + 4 x 400 s (and its
    # tail deadline later still: it is shorter than the 2,000-s jobs), so without the bound every
    # short job arriving in the next 25 minutes would pass it; with it, its deadline is T + 1 +
    # WAIT_CAP x the mean wait, before the 20-s job's, which arrived after it.
    assert first_of_two() == "high"
    assert first_of_two(wait_cap=0) == "short"


def test_under_overload_the_wait_bound_is_not_given_and_short_jobs_keep_their_lead():
    # The same two jobs arrive to a queue asking for more GPUs than the cluster has: the backlog
    # has to fall on someone, and a bound for every job then cost the average (README), so the
    # 400-s job keeps its slowdown deadline and the 20-s job goes first.
    assert first_of_two(overload=True) == "short"


def test_the_wait_bound_must_not_be_negative():
    with pytest.raises(StreamMapError, match="wait bound"):
        Scheduler(one_model_cluster(4), tenants_from_dict(["a"]), wait_cap=-1.0)


def test_simulate_refuses_a_negative_wait_bound(tmp_path, capsys):
    refused(["simulate", "--jobs", tmp_path / "jobs.yaml", "--cluster", tmp_path / "c.yaml", "--wait-cap", "-1"],
            capsys, "--wait-cap must be at least 0")


@needs_shared
def test_simulate_replays_a_jobs_file_without_the_wait_bound(tmp_path):
    # The whole command line: a small stream replayed with the bound off, as a user compares it.
    assert replay_small_stream(tmp_path, "--wait-cap", "0") == 20
