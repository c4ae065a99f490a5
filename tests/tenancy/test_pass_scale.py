"""A pass stays exact when it is cut short: past its reservation depth the admission core stops
looking at jobs that cannot start, but never before a job that can (issue 18, item 5: 100,000
jobs on 10,000 GPUs)."""

from streammap.cluster.model import cluster_from_dict
from streammap.tenancy.admission import Job, Scheduler
from streammap.tenancy.estimate import Demand, Option
from streammap.tenancy.tenants import tenants_from_dict


def eight_gpus():
    return cluster_from_dict({"name": "t", "nodes": [
        {"name": "n0", "link": {"bandwidth": "300 GB/s", "latency": "3us"},
         "devices": [{"name": f"g{i}", "kind": "gpu", "model": "A100", "memory": "80GiB"} for i in range(8)]}]})


def job(jid, arrival, duration, gpus, tenant="a"):
    return Job(jid, tenant, arrival, Demand(gpus, (Option("A100", gpus, duration, 1e9),)))


def test_a_small_job_far_back_in_the_queue_starts_where_it_fits_past_the_reservation_depth():
    # 6 of 8 GPUs busy until t=1000; 60 queued 4-GPU jobs cannot start before then, and only the
    # first two get reservations. Behind all of them, a 2-GPU job fits in the 2 free GPUs now.
    s = Scheduler(eight_gpus(), tenants_from_dict(["a", "b"]), depth=2)
    s.submit(job("busy", 0, 1000, 6))
    s.schedule(0)
    for i in range(60):
        s.submit(job(f"big{i}", 1 + i, 10, 4, tenant="ab"[i % 2]))
    s.submit(job("small", 100, 10, 2, tenant="b"))
    starts, _ = s.schedule(100)
    assert [x.job_id for x in starts] == ["small"]
    assert len(s.estimated_starts) == 2 and "small" not in s.estimated_starts


def test_a_small_job_past_what_a_pass_may_look_at_waits_for_a_later_pass():
    # The same queue, but the tenant's budget of jobs a pass looks at (max_scan, shared by the
    # tenants with queued jobs, at least 32 each) ends before the small job: it is not started,
    # however the pass is cut short.
    s = Scheduler(eight_gpus(), tenants_from_dict(["a"]), depth=2)
    s.submit(job("busy", 0, 1000, 6))
    s.schedule(0)
    for i in range(40):
        s.submit(job(f"big{i}", 1 + i, 10, 4))
    s.submit(job("small", 100, 10, 2))
    assert s.schedule(100, max_scan=32)[0] == []
    assert [x.job_id for x in s.schedule(100, max_scan=64)[0]] == ["small"]


def test_a_shape_without_room_in_one_pass_starts_in_the_next_once_devices_are_freed():
    # Past the depth, a pass remembers which shapes have no model with room until the pool
    # changes: the 4-GPU jobs passed over while 6 of 8 GPUs are busy start as soon as they are not.
    s = Scheduler(eight_gpus(), tenants_from_dict(["a", "b"]), depth=0)
    s.submit(job("busy", 0, 100, 6))
    s.schedule(0)
    for i in range(4):
        s.submit(job(f"big{i}", 1 + i, 10, 4, tenant="ab"[i % 2]))
    s.submit(job("small", 5, 10, 1, tenant="b"))
    assert [x.job_id for x in s.schedule(5)[0]] == ["small"]
    assert s.schedule(6)[0] == []            # one GPU free: no room for a 4-GPU job, remembered
    s.finish("busy")
    s.finish("small")
    assert sorted(x.job_id for x in s.schedule(100)[0]) == ["big0", "big1"]
