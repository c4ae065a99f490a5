"""The admission benchmark's diagnostics: which waits a policy chose, and how long the stream drains."""

import pytest

from streammap.cluster.model import cluster_from_dict
from streammap.tenancy.admission import Job
from streammap.tenancy.estimate import Demand, Option
from streammap.tenancy.simulate import simulate
from streammap.tenancy.tenants import tenants_from_dict
from tests.helpers.modules import load_file
from tests.helpers.paths import ROOT


@pytest.fixture(scope="module")
def bench():
    return load_file(ROOT / "benchmarks" / "tenancy_policies.py", "tenancy_policies_diagnostics")


def two_a100s():
    return cluster_from_dict({"name": "two", "nodes": [
        {"name": "n0", "link": {"bandwidth": "300 GB/s", "latency": "3us"},
         "devices": [{"name": f"g{i}", "kind": "gpu", "model": "A100", "memory": "32GiB"} for i in range(2)]}]})


def job(jid, arrival, gpus, duration):
    return Job(jid, "a", arrival, Demand(gpus, (Option("A100", gpus, duration, 1e9),)))


def blocked_head():
    # j0 holds one of two GPUs until 10; j1 needs both (it waits for j0, the cluster has no room
    # for it); j2 needs one GPU for 3 s and arrives at 2, while one GPU is idle.
    return [job("j0", 0.0, 1, 10.0), job("j1", 1.0, 2, 5.0), job("j2", 2.0, 1, 3.0)]


def test_waiting_while_a_gpu_was_free_counts_fifos_blocked_head_and_not_a_wait_for_room(bench):
    jobs = blocked_head()
    fifo = simulate(jobs, two_a100s(), tenants_from_dict(["a"]), policy="fifo")
    starts = {r.id: r.start for r in fifo.jobs}
    assert starts == {"j0": 0.0, "j1": 10.0, "j2": 15.0}
    # j2 waited 13 s, 8 of them (2 to 10) beside an idle GPU; j1's wait had no room for two GPUs.
    assert bench.room_wait(jobs, fifo, {"A100": 2}) == pytest.approx(8.0 / 3)
    assert bench.mean_wait(fifo) == pytest.approx((9.0 + 13.0) / 3)


def test_backfill_leaves_no_wait_beside_an_idle_gpu_that_the_job_fits(bench):
    jobs = blocked_head()
    smart = simulate(jobs, two_a100s(), tenants_from_dict(["a"]), policy="streammap")
    starts = {r.id: r.start for r in smart.jobs}
    assert starts["j2"] == 2.0                   # it ends at 5, before j1's reservation at 10
    assert bench.room_wait(jobs, smart, {"A100": 2}) == 0.0


def test_the_drain_is_the_time_from_the_last_arrival_to_the_last_finish(bench):
    fifo = simulate(blocked_head(), two_a100s(), tenants_from_dict(["a"]), policy="fifo")
    assert bench.drain(fifo) == pytest.approx(18.0 - 2.0)
