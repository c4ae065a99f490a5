"""The streammap policy's response-ratio orders (``hrrn``, ``hrrn-themis``): a pass takes the
jobs by the share of their allowed wait already spent, ``(now - arrival) / (deadline - arrival)``,
largest first, kept incrementally as classes of allowed wait in arrival order."""

import math

import pytest

from streammap.errors import StreamMapError
from streammap.tenancy.admission import RATIO_CLASS, SLOWDOWN, Scheduler
from streammap.tenancy.simulate import simulate
from streammap.tenancy.tenants import tenants_from_dict
from tests.helpers.admission import job, one_model_cluster
from tests.helpers.cli import refused, replay_small_stream
from tests.helpers.paths import needs_shared
from tests.tenancy.test_decisions_pinned import TENANTS, decisions_digest, pinned_stream, two_model_cluster


def scheduler(order="hrrn", gpus=1, tenants=("a",)):
    return Scheduler(one_model_cluster(gpus), tenants_from_dict(list(tenants)), order=order)


def next_start(s, at, running):
    """End the running job and return the one that starts in its place at ``at``."""
    s.finish(running)
    return s.schedule(at)[0][0].job_id


def busy_gpu_with(s, queued):
    """A 1,000-s job holds the one GPU from t=0; then the jobs ``queued`` arrive."""
    s.submit(job("busy", 0.0, 1000.0))
    s.schedule(0.0)
    for j in queued:
        s.submit(j)
    return s


def test_a_job_that_has_waited_long_goes_before_a_shorter_newcomer():
    # A 100-s job waiting since t=0 and a 10-s job arriving at t=350. The deadline order fixed their
    # places at submission: 0 + 4 x 100 = 400 against 350 + 4 x 10 = 390, so the newcomer goes
    # first. At t=360 the 100-s job has spent 360/400 of its allowed wait, the newcomer 10/40.
    def queue():
        return [job("waited", 0.0, 100.0), job("newcomer", 350.0, 10.0)]
    assert next_start(busy_gpu_with(scheduler("deadline"), queue()), 360.0, "busy") == "newcomer"
    assert next_start(busy_gpu_with(scheduler("hrrn"), queue()), 360.0, "busy") == "waited"


def test_the_shorter_job_still_goes_first_among_jobs_that_arrived_together():
    queue = [job("long", 0.0, 400.0), job("short", 0.0, 20.0), job("medium", 0.0, 100.0)]
    s = busy_gpu_with(scheduler(), queue)
    order = [next_start(s, 1000.0, "busy")]
    order.append(next_start(s, 1020.0, order[-1]))
    order.append(next_start(s, 1120.0, order[-1]))
    assert order == ["short", "medium", "long"]


def test_jobs_of_equal_estimates_start_in_arrival_order_across_tenants():
    # With the fair-share floor off (one order for every tenant), equal estimates: the earlier
    # arrival has waited longer, whichever tenant's it is.
    s = Scheduler(one_model_cluster(1), tenants_from_dict(["a", "b"]), order="hrrn", floor=0.0)
    busy_gpu_with(s, [job("b-first", 1.0, 50.0, tenant="b"), job("a-second", 2.0, 50.0, tenant="a"),
                      job("b-third", 3.0, 50.0, tenant="b"), job("a-fourth", 4.0, 50.0, tenant="a")])
    order = [next_start(s, 1000.0, "busy")]
    for t in (1050.0, 1100.0, 1150.0):
        order.append(next_start(s, t, order[-1]))
    assert order == ["b-first", "a-second", "b-third", "a-fourth"]


def test_estimates_within_one_class_width_start_in_arrival_order():
    # 100 s and 105 s lie in one class (allowed waits 400 and 420 s, within RATIO_CLASS of each
    # other): the earlier arrival goes first even where the exact ratio of the later one, with its
    # shorter allowed wait, has just overtaken it (at t=10: 9.5/400 > 10/420 for arrivals 0 and 0.5).
    # This is the approximation the classes buy their speed with: at most one class width.
    assert 420.0 / 400.0 < RATIO_CLASS
    s = scheduler(gpus=2)
    s.submit(job("busy", 0.0, 10.0))
    s.submit(job("held", 0.0, 1e6))
    s.schedule(0.0)
    s.submit(job("earlier", 0.0, 105.0))
    s.submit(job("later", 0.5, 100.0))
    assert next_start(s, 10.0, "busy") == "earlier"


def exact_hrrn_choice(waiting, now):
    """The job exact HRRN starts at ``now``: the largest (now - arrival) / (SLOWDOWN x estimate),
    then the earliest arrival."""
    return max(waiting, key=lambda j: ((now - j.arrival) / (SLOWDOWN * j.demand.best.duration), -j.arrival)).id


#: Arrivals (id, time, estimate) over 2,500 s: three estimates more than a class width apart, so
#: that each class holds one estimate.
ARRIVALS = [("L0", 0, 1000), ("L1", 400, 1000), ("L2", 800, 1000), ("L3", 1200, 1000),
            ("M0", 50, 100), ("M1", 650, 100), ("M2", 1250, 100), ("M3", 1850, 100),
            ("S0", 100, 10), ("S1", 900, 10), ("S2", 1700, 10), ("S3", 2500, 10)]


def starts_against_exact_hrrn(order):
    """Replay ARRIVALS on one GPU held by a 1,000-s job from t=0 (each job runs its estimate):
    the order in which ``order`` starts them, and at which of the starts exact HRRN, asked of
    every job waiting then, would have chosen the same job."""
    s = busy_gpu_with(scheduler(order), [])
    pending, waiting = sorted(ARRIVALS, key=lambda a: a[1]), {}
    now, running, started, agreed = 1000.0, "busy", [], []
    while pending or waiting:
        while pending and pending[0][1] <= now:
            j = job(pending[0][0], float(pending[0][1]), float(pending[0][2]))
            pending.pop(0)
            waiting[j.id] = j
            s.submit(j)
        if not waiting:
            now = float(pending[0][1])
            continue
        expected = exact_hrrn_choice(waiting.values(), now)
        running = next_start(s, now, running)
        started.append(running)
        agreed.append(running == expected)
        now += waiting.pop(running).demand.best.duration
    return started, agreed


def test_the_incremental_order_is_exact_hrrn_where_each_class_holds_one_estimate():
    # At every start the scheduler picks the job with the largest ratio among those waiting, as
    # re-sorting the whole queue would. The deadline order does not: at t=1,010 the 10-s S1
    # (arrived at 900) has spent 110/40 of its allowed wait and the 100-s M0 (arrived at 50)
    # 960/400, so HRRN starts S1, and the deadline order M0 (its deadline 450 against S1's 940).
    started, agreed = starts_against_exact_hrrn("hrrn")
    assert len(started) == len(ARRIVALS) and all(agreed)
    assert not all(starts_against_exact_hrrn("deadline")[1])


def test_a_job_whose_estimate_was_far_too_high_still_starts_while_short_jobs_keep_coming():
    # One GPU, ten 10-s jobs queued at t=0, one more every 10 s (the GPU never idles, the queue
    # never drains), and a job estimated at 1,000 s that really runs 10 s. The short jobs wait
    # about 100 s, 2.5 of their 40-s allowed waits; HRRN equalises that share, so the long job
    # starts once it has waited about 2.5 x its 4,000 s, while the stream goes on (not at its
    # drain). Its wait is bounded by the short jobs' slowdown, not by its own deadline as in the
    # deadline order (there: 4,060 s): HRRN gives the long job the slowdown the others get.
    s = scheduler()
    for i in range(10):
        s.submit(job(f"s{i}", 0.0, 10.0))
    s.submit(job("overestimated", 0.0, 1000.0))
    running, now, started_at = None, 0.0, None
    for i in range(10, 2000):
        if running is not None:
            s.finish(running)
        s.submit(job(f"s{i}", now, 10.0))
        starts, _ = s.schedule(now)
        running = starts[0].job_id
        if running == "overestimated":
            started_at = now
            break
        now += 10.0
    assert started_at is not None, "the overestimated job never started"
    assert 9000.0 < started_at < 11000.0


@pytest.mark.parametrize(("order", "preemption"), [("hrrn", False), ("hrrn", True), ("hrrn-themis", False)])
def test_decisions_are_the_same_under_the_same_input(order, preemption):
    # The pinned 300-job stream (four tenants, priorities, two models, gangs), wrong estimates.
    tenants = tenants_from_dict({**TENANTS, "preemption": preemption})
    runs = [simulate(pinned_stream(), two_model_cluster(), tenants, order=order, estimate_error=0.5, seed=3)
            for _ in range(2)]
    assert len(runs[0].jobs) == 300                              # every job ran
    assert decisions_digest(runs[0]) == decisions_digest(runs[1])


def test_a_high_priority_job_goes_first_within_its_tenant_whatever_the_ratios():
    s = busy_gpu_with(scheduler(), [job("old", 0.0, 10.0)])
    urgent = job("urgent", 900.0, 500.0)
    urgent.priority = 1
    s.submit(urgent)
    assert next_start(s, 1000.0, "busy") == "urgent"


def test_the_ratio_orders_need_a_finite_slowdown_deadline():
    with pytest.raises(StreamMapError, match="finite slowdown"):
        Scheduler(one_model_cluster(1), tenants_from_dict(["a"]), order="hrrn", slowdown=math.inf)


def test_simulate_names_the_ratio_orders_when_refusing_an_unknown_one(tmp_path, capsys):
    refused(["simulate", "--jobs", tmp_path / "jobs.yaml", "--cluster", tmp_path / "c.yaml", "--order", "sjf"],
            capsys, "--order", "sjf", "hrrn", "hrrn-themis")


@needs_shared
def test_simulate_replays_a_jobs_file_in_the_ratio_order(tmp_path):
    # The whole command line: generate a small stream, replay it under the hrrn order.
    assert replay_small_stream(tmp_path, "--order", "hrrn") == 20
