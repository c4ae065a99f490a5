"""A job waits for a faster model only where it holds a reservation there (issue 18).

The placement slack lets a waiting job pass up a free slower device when it would end within the
slack sooner on a faster one, waiting included. That wait is only worth it to a job the pass
promises the faster device to (a reservation). A job past the reservation depth is promised
nothing: the faster device goes to whichever job the next pass reserves it for, and at 10,000
GPUs StreamMAP's jobs waited beside idle slower devices for ever. So a job without a reservation
starts on the fastest model with room now; one with a reservation still may wait, within its slack.
"""

from streammap.cluster.model import cluster_from_dict
from streammap.tenancy.admission import Job, Scheduler
from streammap.tenancy.estimate import Demand, Option
from streammap.tenancy.packing import fractional_demand
from streammap.tenancy.tenants import tenants_from_dict


def cluster(*nodes):
    """One node per ``(model, gpus)``."""
    return cluster_from_dict({"name": "t", "network": {"bandwidth": "25 GB/s", "latency": "10us"}, "nodes": [
        {"name": f"n{i}", "link": {"bandwidth": "300 GB/s", "latency": "3us"},
         "devices": [{"name": f"g{j}", "kind": "gpu", "model": model, "memory": "80GiB"} for j in range(gpus)]}
        for i, (model, gpus) in enumerate(nodes)]})


def one_a100_one_v100():
    """An A100 and a V100 (the jobs below run half as fast on it)."""
    return cluster(("A100", 1), ("V100", 1))


def a100_for(jid, arrival, seconds):
    return Job(jid, "a", arrival, Demand(1, (Option("A100", 1, seconds, 1e9),)))


def long_job(arrival=1.0):
    """100 s on the A100, 200 s on the V100: with the A100 free at t=10 it would end at 110 there,
    and 201 on the V100 now is more than 1.5 x the 109 s to finish on the A100."""
    return Job("long", "a", arrival, Demand(1, (Option("A100", 1, 100.0, 1e9), Option("V100", 1, 200.0, 1e9))))


def busy_a100_until_10(depth):
    s = Scheduler(one_a100_one_v100(), tenants_from_dict(["a"]), depth=depth)
    s.submit(a100_for("busy", 0.0, 10.0))
    assert [x.job_id for x in s.schedule(0.0)[0]] == ["busy"]
    return s


def test_a_job_without_a_reservation_starts_on_the_free_slower_model_now():
    s = busy_a100_until_10(depth=0)              # no waiting job gets a reservation
    s.submit(long_job())
    starts, _ = s.schedule(1.0)
    assert [(x.job_id, x.option.model) for x in starts] == [("long", "V100")]
    assert s.estimated_starts == {}


def test_a_job_with_a_reservation_on_the_faster_model_still_waits_for_it_within_its_slack():
    s = busy_a100_until_10(depth=1)
    s.submit(long_job())
    assert s.schedule(1.0)[0] == []
    assert s.estimated_starts["long"] == (10.0, "A100")      # the promise it waits for


def test_a_reserved_job_starts_on_the_slower_model_when_that_ends_within_its_slack():
    # The A100 is busy until t=100 instead: 201 on the V100 now is within 1.5 x the 199 s to finish
    # on the A100, so even a job the A100 is promised to takes the free V100.
    s = Scheduler(one_a100_one_v100(), tenants_from_dict(["a"]), depth=1)
    s.submit(a100_for("busy", 0.0, 100.0))
    s.schedule(0.0)
    s.submit(long_job())
    assert [(x.job_id, x.option.model) for x in s.schedule(1.0)[0]] == [("long", "V100")]


def test_a_job_past_the_depth_does_not_take_a_slower_device_a_reservation_wants_before_it_ends():
    # Two V100s, one busy until t=20; a two-V100 gang waiting for both is reserved from t=20. The
    # free V100 is not free for the long job's 200 s there, so past the depth it waits (no promise).
    s = Scheduler(cluster(("A100", 1), ("V100", 2)), tenants_from_dict(["a"]), depth=1)
    s.submit(a100_for("busy", 0.0, 10.0))
    s.submit(Job("v-busy", "a", 0.0, Demand(1, (Option("V100", 1, 20.0, 1e9),))))
    assert len(s.schedule(0.0)[0]) == 2
    s.submit(Job("gang", "a", 0.5, Demand(2, (Option("V100", 2, 30.0, 1e9),))))
    s.submit(long_job())
    assert s.schedule(1.0)[0] == []
    assert s.estimated_starts == {"gang": (20.0, "V100")}


def test_joint_placement_keeps_the_same_rule_for_a_job_of_half_a_gpu():
    # The long job needs half a GPU: within the depth it waits for the A100 (a reservation there),
    # past it it takes half of the free V100 now.
    def half_gpu_long_job():
        whole = long_job().demand
        return Job("long", "a", 1.0, fractional_demand(whole, 0.5, {"A100": 50.0, "V100": 50.0}))

    for depth, started in ((1, []), (0, [("long", "V100")])):
        s = busy_a100_until_10(depth)
        s.submit(half_gpu_long_job())
        assert [(x.job_id, x.option.model) for x in s.schedule(1.0)[0]] == started
    assert s.estimated_starts == {}
