"""Placement past the reservation depth (issue 18, fourth round): what a job that holds no
reservation may still count on.

* A job that needs a fraction of a GPU can start on a partly used shared GPU even when no whole
  device is free: a full cluster of whole devices is not a full cluster for it.
"""

from streammap.tenancy.admission import Job, Scheduler
from streammap.tenancy.estimate import Demand, Option
from streammap.tenancy.packing import fractional_demand
from streammap.tenancy.tenants import tenants_from_dict
from tests.tenancy.test_placement_promise import cluster


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
