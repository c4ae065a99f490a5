"""The admission benchmark's average-JCT floor: what no policy can beat on the same arrivals."""


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
    return load_file(ROOT / "benchmarks" / "tenancy_policies.py", "tenancy_policies_bench")


def a100_and_v100():
    """One A100 and one V100 (the V100 runs every job twice as long)."""
    return cluster_from_dict({"name": "two", "network": {"bandwidth": "25 GB/s", "latency": "10us"}, "nodes": [
        {"name": f"n{i}", "link": {"bandwidth": "300 GB/s", "latency": "3us"},
         "devices": [{"name": "g0", "kind": "gpu", "model": model, "memory": "32GiB"}]}
        for i, model in enumerate(("A100", "V100"))]})


def two_jobs_at_once():
    demand = Demand(1, (Option("A100", 1, 10.0, 1e9), Option("V100", 1, 20.0, 1e9)))
    return [Job("j0", "a", 0.0, demand), Job("j1", "a", 0.0, demand)]


def test_the_floor_counts_every_job_on_its_fastest_model_without_waiting(bench):
    # FIFO puts the second job on the idle V100 (20 s): its average JCT is 15 s. No policy can do
    # better than both jobs running 10 s on an A100 at once: the floor is 10 s, whatever FIFO did.
    jobs = two_jobs_at_once()
    fifo = simulate(jobs, a100_and_v100(), tenants_from_dict(["a"]), policy="fifo")
    assert fifo.avg_jct == pytest.approx(15.0)
    assert bench.avg_jct_floor(jobs, fifo) == pytest.approx(10.0)


def test_the_floor_follows_the_real_durations_when_estimates_are_wrong(bench):
    # Each job runs its own factor times its estimate, on every model. On two A100s both jobs start
    # at once, so their average JCT is exactly the floor; on an A100 and a V100, the same jobs (same
    # seed, same factors) have the same floor, though one of them ran twice as long.
    tenants = tenants_from_dict(["a"])
    two_a100 = cluster_from_dict({"name": "a", "nodes": [
        {"name": "n0", "link": {"bandwidth": "300 GB/s", "latency": "3us"},
         "devices": [{"name": f"g{i}", "kind": "gpu", "model": "A100", "memory": "32GiB"} for i in range(2)]}]})
    ideal = simulate(two_jobs_at_once(), two_a100, tenants, policy="fifo", estimate_error=1.0, seed=3)
    jobs = two_jobs_at_once()
    mixed = simulate(jobs, a100_and_v100(), tenants, policy="fifo", estimate_error=1.0, seed=3)
    assert {r.model for r in mixed.jobs} == {"A100", "V100"}
    assert bench.avg_jct_floor(jobs, mixed) == pytest.approx(ideal.avg_jct)
    assert ideal.avg_jct != pytest.approx(10.0)          # the factors did change the durations
