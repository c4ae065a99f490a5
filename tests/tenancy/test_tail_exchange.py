"""The streammap policy's tail exchange (``admission.TAIL_EXCHANGE``): a start the order gives to a
job of the longest kind goes to the oldest identical job (same tenant, priority and options) that
can still start within its tail allowance, so that a job already too late to end inside the tail
does not take the start that keeps another one out of it. By default (``"auto"``) only for a tenant
whose estimates have proven precise: jobs of one estimate are "identical" only if they run alike."""

import pytest

from streammap.errors import StreamMapError
from streammap.tenancy.admission import EXCHANGE_SPREAD, TAIL_EXCHANGE, Scheduler
from streammap.tenancy.simulate import simulate
from streammap.tenancy.tenants import tenants_from_dict
from tests.helpers.admission import job, one_model_cluster, waited_scene
from tests.helpers.cli import replay_small_stream
from tests.helpers.paths import needs_shared
from tests.tenancy.test_decisions_pinned import TENANTS, twin_stream, two_model_cluster

T = 300000.0     # when the scene's queue forms, after the warm-up


def who_starts(old_arrival, young_arrival, duration=2000.0, tail_exchange=True, error=None):
    """Four GPUs. Warm-up: 100 jobs ran one at a time, each after a 10-s wait (the mean wait learnt),
    every fifth of them 2,000 s long (so the tail bound, the 95th percentile of estimates, is 2,000 s,
    and a 2,000-s job's tail allowance is about two mean waits, 20 s). At T three GPUs are held for
    days and a 200-s job runs on the fourth; two jobs of ``duration`` seconds, "old" and "young",
    arrive at ``old_arrival`` and ``young_arrival``. Which starts when the fourth GPU frees at T + 200?
    ``error``: how far the warm-up's runs ended from their estimates (``waited_scene``)."""
    s = waited_scene(Scheduler(one_model_cluster(4), tenants_from_dict(["a"]), tail_exchange=tail_exchange),
                     T, 200.0, error=error)
    s.submit(job("old", old_arrival, duration))
    s.schedule(old_arrival)
    s.submit(job("young", young_arrival, duration))
    s.schedule(young_arrival)
    s.finish("busy")
    starts = s.schedule(T + 200.0)[0]
    assert len(starts) == 1
    return starts[0].job_id


def test_a_start_goes_to_the_long_job_that_can_still_end_inside_the_tail():
    # "old" has waited 199 s, ten times its allowance: it ends late whenever it starts. "young" has
    # waited 10 s and still can end inside the tail. The order puts "old" first (its deadline is
    # earlier); the exchange gives the start to "young", and "old" waits for the next one.
    assert who_starts(T + 1.0, T + 190.0) == "young"
    assert who_starts(T + 1.0, T + 190.0, tail_exchange=False) == "old"


def test_among_long_jobs_still_inside_their_allowance_the_oldest_goes_first():
    # Both have waited less than their allowance: earliest due date first, as without the exchange.
    assert who_starts(T + 190.0, T + 195.0) == "old"


def test_when_every_long_job_is_late_already_the_order_stands():
    # Both have waited longer than their allowance: no start can keep either inside the tail, so
    # the one the order puts first (its slowdown deadline, the bound on its wait) goes first.
    assert who_starts(T + 1.0, T + 100.0) == "old"


def test_jobs_shorter_than_the_tail_are_never_exchanged():
    # 50-s jobs are not the tail: the order alone decides who goes first.
    assert who_starts(T + 1.0, T + 190.0, duration=50.0) == "old"


def test_the_exchanged_jobs_swap_places_so_long_jobs_start_no_more_often():
    # With exact estimates the exchange changes which jobs wait, not when starts happen: the jobs
    # swapped are identical and take each other's place in the order, so the replay starts jobs at
    # the same instants on the same models, and the average JCT is the same; only who got each
    # start differs (the stream of six job kinds the decisions are pinned on).
    tenants = tenants_from_dict(TENANTS)
    on, off = (simulate(twin_stream(), two_model_cluster(), tenants, tail_exchange=x) for x in (True, False))
    assert sorted((j.start, j.model) for j in on.jobs) == sorted((j.start, j.model) for j in off.jobs)
    assert on.avg_jct == pytest.approx(off.avg_jct, rel=1e-12)
    assert [j.start for j in on.jobs] != [j.start for j in off.jobs]      # but not for the same jobs


def test_by_default_jobs_are_exchanged_once_their_tenants_estimates_proved_precise():
    assert TAIL_EXCHANGE == "auto"
    # The warm-up's runs ended as estimated: the tenant's jobs of one shape run alike.
    assert who_starts(T + 1.0, T + 190.0, tail_exchange=TAIL_EXCHANGE, error=0.0) == "young"
    # Half a log-unit off either way (a learned spread of 0.45) is still precise enough.
    assert who_starts(T + 1.0, T + 190.0, tail_exchange=TAIL_EXCHANGE, error=0.5) == "young"


def test_by_default_jobs_whose_runs_end_far_from_their_estimates_are_not_exchanged():
    # Runs 3.3x above or below their estimates (a learned spread of 1.08, above EXCHANGE_SPREAD):
    # the older twin may run much longer than the younger, so the order stands.
    assert 0.9 * 1.2 > EXCHANGE_SPREAD
    assert who_starts(T + 1.0, T + 190.0, tail_exchange=TAIL_EXCHANGE, error=1.2) == "old"
    # Asked for, the exchange acts whatever the spread.
    assert who_starts(T + 1.0, T + 190.0, tail_exchange="on", error=1.2) == "young"


def test_by_default_nothing_is_exchanged_before_the_estimates_have_been_judged():
    # Runs that taught nothing (no run ended on its own) prove no precision.
    assert who_starts(T + 1.0, T + 190.0, tail_exchange=TAIL_EXCHANGE, error=None) == "old"


@pytest.mark.parametrize("mode", ["sometimes", "", 1, None])
def test_an_unknown_tail_exchange_mode_is_refused(mode):
    with pytest.raises(StreamMapError, match="tail exchange mode"):
        Scheduler(one_model_cluster(4), tenants_from_dict(["a"]), tail_exchange=mode)


@needs_shared
def test_simulate_replays_a_jobs_file_with_the_tail_exchange(tmp_path):
    # The whole command line: a small stream replayed with the exchange on, as a user compares it.
    assert replay_small_stream(tmp_path, "--tail-exchange", "on") == 20
