"""Placement past the reservation depth (issue 18, fourth round): what a job that holds no
reservation may still count on.

* A **long** job past the depth (its estimate among the longest 30% of recent ones) that would
  end sooner on a busy fast GPU than on a free slow one, by more than the slack, is **promised**
  the fast GPU: a reservation after those of the pass, which later passes plan before anyone
  else, so it gets the first such GPU that frees. Other jobs past the depth take the room they
  have, as before.
* The wait spent since the promise counts against the slack: when the fast GPU slips (jobs overran
  their estimates) so far that the slow one would end the job within the slack of that, it takes
  the slow one.
* A job that needs a fraction of a GPU can start on a partly used shared GPU even when no whole
  device is free: a full cluster of whole devices is not a full cluster for it.
"""

from streammap.tenancy.admission import Job, Scheduler
from streammap.tenancy.estimate import Demand, Option
from streammap.tenancy.packing import fractional_demand
from streammap.tenancy.tenants import tenants_from_dict
from tests.tenancy.test_placement_promise import a100_for, cluster, long_job, one_a100_one_v100


def scheduler_that_has_seen(seconds, depth):
    """A scheduler of one A100 and one V100 (tail deadline off: the order is the slowdown
    deadline's) whose recent jobs were 40 of ``seconds`` each (submitted and cancelled), and whose
    A100 is busy until t=10 (estimated)."""
    s = Scheduler(one_a100_one_v100(), tenants_from_dict(["a"]), depth=depth, tail=0, promises=8)
    for i in range(40):
        s.submit(a100_for(f"seen{i}", 0.0, seconds))
        s.cancel(f"seen{i}")
    s.submit(a100_for("busy", 0.0, 10.0))
    assert [x.job_id for x in s.schedule(0.0)[0]] == ["busy"]
    return s


def started(s, now):
    return [(x.job_id, x.option.model) for x in s.schedule(now)[0]]


def test_a_long_job_past_the_depth_gets_the_fast_gpu_it_was_promised_before_jobs_planned_ahead_of_it():
    # "first" holds the pass's one reservation (the A100 at 10); the long job, past the depth, would
    # end at 201 on the free V100 but at 115 on the A100 after "first": promised the A100 (at 15).
    s = scheduler_that_has_seen(1.0, depth=1)
    s.submit(a100_for("first", 1.0, 5.0))
    s.submit(long_job(arrival=1.0))
    assert started(s, 1.0) == []
    assert s.estimated_starts == {"first": (10.0, "A100"), "long": (15.0, "A100")}
    # From the next pass on the promise is planned first: the A100 free from 10 is the long job's,
    # and the jobs of the depth ("first", and "later", of an earlier deadline still) come after it.
    s.submit(a100_for("later", 5.0, 5.0))
    assert started(s, 5.0) == []
    assert s.estimated_starts == {"long": (10.0, "A100"), "first": (110.0, "A100")}
    s.finish("busy")
    assert started(s, 10.0) == [("long", "A100")]


def test_a_job_that_is_not_among_the_longest_takes_the_slow_room_past_the_depth():
    s = scheduler_that_has_seen(1000.0, depth=0)          # 100 s is short among jobs of 1,000 s
    s.submit(long_job(arrival=1.0))
    assert started(s, 1.0) == [("long", "V100")]


def test_a_promised_job_takes_the_slow_gpu_once_its_wait_since_the_promise_uses_up_the_slack():
    s = scheduler_that_has_seen(1.0, depth=0)
    s.submit(long_job(arrival=1.0))
    assert started(s, 1.0) == []
    assert s.estimated_starts == {"long": (10.0, "A100")}
    # "busy" overruns its 10 s estimate: expected at 20, then at 40 (start + 2^i x estimate). At 10
    # the A100 promises an end at 120, 119 s after the promise: 200 s on the V100 is more than
    # 1.5 x that, so it waits; at 20 the end moves to 140 (139 s): the V100's 200 s is within 1.5x.
    assert started(s, 10.0) == []
    assert s.estimated_starts == {"long": (20.0, "A100")}
    assert started(s, 20.0) == [("long", "V100")]


def whole_a100_job(jid, arrival, seconds):
    return Job(jid, "a", arrival, Demand(1, (Option("A100", 1, seconds, 1e9),)))


def half_a100_job(jid, arrival, seconds):
    """A job that needs half an A100 for ``seconds``."""
    whole = Demand(1, (Option("A100", 1, seconds, 1e9),))
    return Job(jid, "a", arrival, fractional_demand(whole, 0.5, {"A100": seconds / 2}))


def test_a_fractional_job_starts_on_a_partly_used_gpu_of_a_full_cluster_behind_whole_device_jobs():
    # Two A100s: one shared, half held until t=100, the other held whole until t=50. Two
    # whole-device jobs wait (the first takes the one reservation of the pass); the half-GPU job
    # behind them, past the depth, still fits beside the first holder of the shared GPU.
    s = Scheduler(cluster(("A100", 2)), tenants_from_dict(["a"]), depth=1)
    s.submit(half_a100_job("holder", 0.0, 100.0))
    s.submit(whole_a100_job("busy", 0.0, 50.0))
    assert sorted(x.job_id for x in s.schedule(0.0)[0]) == ["busy", "holder"]
    assert s.pool.free_count["A100"] == 0
    s.submit(whole_a100_job("w1", 1.0, 10.0))
    s.submit(whole_a100_job("w2", 1.0, 10.0))
    s.submit(half_a100_job("half", 2.0, 40.0))
    starts = s.schedule(2.0)[0]
    assert [(x.job_id, x.devices) for x in starts] == [("half", s.running["holder"].devices)]
    assert s.estimated_starts == {"w1": (50.0, "A100")}


def test_on_a_small_cluster_no_promise_is_made_and_a_long_job_past_the_depth_takes_the_slow_room():
    # Up to 512 GPUs the 64 reservations of a pass already send the long jobs to the fast GPUs.
    s = Scheduler(one_a100_one_v100(), tenants_from_dict(["a"]), depth=0, tail=0)
    for i in range(40):
        s.submit(a100_for(f"seen{i}", 0.0, 1.0))
        s.cancel(f"seen{i}")
    s.submit(a100_for("busy", 0.0, 10.0))
    s.schedule(0.0)
    s.submit(long_job(arrival=1.0))
    assert started(s, 1.0) == [("long", "V100")]


def test_what_counts_as_long_is_known_as_soon_as_30_estimates_are_even_if_asked_before():
    # A long job asked about after 10 submissions (too few to say what is long: no promise) must
    # not keep that "unknown" until the 50th submission: with 40 estimates of 1 s known, 100 s is long.
    s = Scheduler(one_a100_one_v100(), tenants_from_dict(["a"]), depth=0, tail=0, promises=8)
    for i in range(9):
        s.submit(a100_for(f"seen{i}", 0.0, 1.0))
        s.cancel(f"seen{i}")
    s.submit(a100_for("busy", 0.0, 10.0))
    assert started(s, 0.0) == [("busy", "A100")]
    s.submit(long_job(arrival=0.5))
    assert started(s, 0.5) == [("long", "V100")]           # 11 estimates: not known to be long
    s.finish("long")
    for i in range(9, 40):
        s.submit(a100_for(f"seen{i}", 1.0, 1.0))
        s.cancel(f"seen{i}")
    s.submit(Job("long2", "a", 1.0, long_job().demand))
    assert started(s, 1.0) == []                           # promised the A100, busy until 10
    assert s.estimated_starts == {"long2": (10.0, "A100")}


def test_on_a_large_cluster_dozens_of_long_jobs_past_the_depth_each_wait_for_their_promised_fast_gpu():
    # At the end of an overloaded stream hundreds of jobs wait, the long ones among them past the
    # depth. A cluster of 560 GPUs whose A100s all free at t=10: 30 long jobs arrive, each would end
    # at 110 on an A100 and at 201 on one of the 40 free V100s. Each is promised an A100, not only
    # the first 16: the others took the V100s at half speed and ended the run hours late.
    s = Scheduler(cluster(("A100", 520), ("V100", 40)), tenants_from_dict(["a"]), depth=0, tail=0)
    for i in range(40):
        s.submit(a100_for(f"seen{i}", 0.0, 1.0))
        s.cancel(f"seen{i}")
    s.submit(Job("busy", "a", 0.0, Demand(520, (Option("A100", 520, 10.0, 1e9),))))
    assert started(s, 0.0) == [("busy", "A100")]
    for i in range(30):
        s.submit(Job(f"long{i}", "a", 1.0, long_job().demand))
    assert started(s, 1.0) == []
    assert s.estimated_starts == {f"long{i}": (10.0, "A100") for i in range(30)}
    s.finish("busy")
    assert sorted(started(s, 10.0)) == sorted((f"long{i}", "A100") for i in range(30))


def test_a_job_longer_than_most_but_not_among_the_longest_tenth_is_still_promised_the_fast_gpu():
    # Recent jobs: 28 of 1 s, "busy" of 10 s, 12 of 200 s. The 100 s job is longer than 70% of them
    # but not among the longest tenth: on a half-speed GPU it would still cost its length again
    # (at 2,000 GPUs the 4-GPU jobs of this rank took the V100s past the depth), so it is promised.
    s = Scheduler(one_a100_one_v100(), tenants_from_dict(["a"]), depth=0, tail=0, promises=8)
    for i, seconds in enumerate([1.0] * 28 + [200.0] * 12):
        s.submit(a100_for(f"seen{i}", 0.0, seconds))
        s.cancel(f"seen{i}")
    s.submit(a100_for("busy", 0.0, 10.0))
    assert started(s, 0.0) == [("busy", "A100")]
    s.submit(long_job(arrival=1.0))
    assert started(s, 1.0) == []
    assert s.estimated_starts == {"long": (10.0, "A100")}


def test_above_4096_gpus_only_the_longest_tenth_is_promised_and_the_rest_take_the_slow_room():
    # The same recent jobs as above, on a cluster of 4,097 A100s and a V100. There jobs wait about a
    # minute: the longer band bought no average, and its promises kept the longest jobs off the A100s.
    s = Scheduler(cluster(("A100", 4097), ("V100", 1)), tenants_from_dict(["a"]), depth=0, tail=0)
    for i, seconds in enumerate([1.0] * 28 + [200.0] * 12):
        s.submit(a100_for(f"seen{i}", 0.0, seconds))
        s.cancel(f"seen{i}")
    s.submit(Job("busy", "a", 0.0, Demand(4097, (Option("A100", 4097, 10.0, 1e9),))))
    assert started(s, 0.0) == [("busy", "A100")]
    s.submit(long_job(arrival=1.0))
    assert started(s, 1.0) == [("long", "V100")]
