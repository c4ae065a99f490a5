"""The streammap order with estimates that are wrong by tenant: under-estimating buys no earlier place."""

import math

import numpy as np

from streammap.cluster.model import cluster_from_dict
from streammap.tenancy.admission import Job, Scheduler
from streammap.tenancy.correction import MAX_RATIO, MIN_RUNS, EstimateCorrection
from streammap.tenancy.estimate import Demand, Option
from streammap.tenancy.tenants import tenants_from_dict


def one_gpu():
    return cluster_from_dict({"name": "t", "nodes": [
        {"name": "n0", "link": {"bandwidth": "300 GB/s", "latency": "3us"},
         "devices": [{"name": "g0", "kind": "gpu", "model": "A100", "memory": "80GiB"}]}]})


def job(jid, arrival, duration, tenant):
    return Job(jid, tenant, arrival, Demand(1, (Option("A100", 1, duration, 1e9),)))


def scheduler_after_history(liar_runs_for: float) -> tuple[Scheduler, float]:
    """One GPU, tenants 'honest' and 'liar', each with 40 finished 10-s-estimated jobs, run one
    at a time: honest's ran 10 s, liar's ``liar_runs_for`` seconds. Returns it and the time. The
    slowdown deadline alone: no job here waits, so the wait bound (``wait_cap``, WAIT_CAP x a mean
    wait of 0) would put every deadline at its arrival (tests/tenancy/test_wait_bound.py)."""
    s = Scheduler(one_gpu(), tenants_from_dict(["honest", "liar"]), tail=0, wait_cap=0)
    t = 0.0
    for i in range(40):
        for tenant, real in (("honest", 10.0), ("liar", liar_runs_for)):
            s.submit(job(f"{tenant}{i}", t, 10.0, tenant))
            (start,), _ = s.schedule(t)
            t += real
            s.finish(start.job_id, t)                 # ended on its own, after ``real`` seconds
    return s, t


def first_of_two(liar_runs_for: float) -> str:
    """Which starts first when honest's 100-s job and liar's 30-s job arrive together."""
    s, t = scheduler_after_history(liar_runs_for)
    s.submit(job("h", t, 100.0, "honest"))
    s.submit(job("l", t, 30.0, "liar"))
    (start,), _ = s.schedule(t)
    return start.job_id


def test_a_tenant_whose_estimates_run_long_does_not_gain_by_it():
    # With honest history, liar's 30-s job is the shorter one and goes first.
    assert first_of_two(liar_runs_for=10.0) == "l"
    # But liar's jobs have run 4x their estimates: its 30 s are taken as 120 s, behind honest's 100 s.
    assert first_of_two(liar_runs_for=40.0) == "h"


def test_a_tenant_whose_estimates_run_long_is_corrected_by_how_much_they_run_long():
    s, _ = scheduler_after_history(liar_runs_for=40.0)
    assert math.isclose(s.correction.factor("liar"), 4.0)
    assert math.isclose(s.correction.factor("honest"), 0.25)       # against liar's, honest's run short
    # The deadline of a new liar job is set as if it had declared four times its estimate.
    s.submit(job("l", 0.0, 30.0, "liar"))
    assert math.isclose(s._deadline["l"], 4 * 120.0)


def test_tenants_whose_estimates_are_equally_noisy_are_not_corrected():
    # Every run off by a log-normal factor (sigma 1, mean 1: the simulator's worst), the same for
    # all tenants: chance differences between their means must not move anyone's place.
    rng = np.random.default_rng(0)
    c = EstimateCorrection()
    for i in range(2000):
        tenant = "abcd"[i % 4]
        c.observe(tenant, 100.0, 100.0 * float(np.exp(rng.normal(0.0, 1.0) - 0.5)))
    assert [c.factor(t) for t in "abcd"] == [1.0] * 4


def test_a_bias_every_tenant_shares_moves_no_one():
    # Every job runs half its estimate: no tenant gains on another by it.
    c = EstimateCorrection()
    for i in range(200):
        c.observe("a" if i % 2 else "b", 100.0, 50.0)
    assert c.factor("a") == c.factor("b") == 1.0


def test_exact_estimates_correct_nothing_whatever_the_clock_reads():
    # A run's length is end - start: at large times that is its estimate only to the float's
    # rounding. Here every run of a rounds a hair long and every run of b a hair short.
    c = EstimateCorrection()
    seen = {"a": 0, "b": 0}
    start = 50_000.0
    while min(seen.values()) < 100:
        start += 7.3
        real = (start + 9.1) - start
        tenant = "a" if real > 9.1 else "b" if real < 9.1 else None
        if tenant and seen[tenant] < 100:
            c.observe(tenant, 9.1, real)
            seen[tenant] += 1
    assert c.factor("a") == c.factor("b") == 1.0


def test_too_few_runs_correct_nothing():
    c = EstimateCorrection()
    for i in range(MIN_RUNS - 1):
        c.observe("liar", 10.0, 100.0)
        c.observe("honest", 10.0, 10.0)
    assert c.factor("liar") == 1.0
    c.observe("liar", 10.0, 100.0)
    c.observe("honest", 10.0, 10.0)
    assert math.isclose(c.factor("liar"), 10.0)


def test_a_cancelled_or_preempted_run_says_nothing_of_a_jobs_length():
    # Runs stopped early (cancelled here; preemption ends a run the same way) are not real lengths.
    s = Scheduler(one_gpu(), tenants_from_dict(["honest", "liar"]), tail=0)
    t = 0.0
    for i in range(40):
        s.submit(job(f"h{i}", t, 10.0, "honest"))
        s.schedule(t)
        t += 10.0
        s.finish(f"h{i}", t)
        s.submit(job(f"l{i}", t, 10.0, "liar"))
        s.schedule(t)
        t += 1.0
        s.cancel(f"l{i}")                              # stopped after 1 s of its 10
    assert s.correction.factor("liar") == 1.0


def test_a_run_whose_estimate_is_infinite_or_nan_teaches_nothing():
    # An estimate the cost model could not bound says nothing of how far off the tenant is; it
    # used to stop the scheduler with a math domain error (log of real / inf).
    c = EstimateCorrection()
    for _ in range(MIN_RUNS):
        c.observe("a", math.inf, 10.0)
        c.observe("a", math.nan, 10.0)
        c.observe("b", 10.0, 10.0)
    assert c.factor("a") == c.factor("b") == 1.0


def test_a_run_absurdly_far_off_its_estimate_leaves_every_factor_finite_and_positive():
    # 1e-320 s estimated, 1e10 s measured: the ratio overflows to inf. The correction counts it
    # as MAX_RATIO off, so no deadline becomes inf (never first) or arrival + 0 (always first).
    c = EstimateCorrection()
    for _ in range(MIN_RUNS):
        c.observe("a", 1e-320, 1e10)
        c.observe("b", 10.0, 10.0)
    assert math.isclose(c.factor("a"), MAX_RATIO)
    assert math.isclose(c.factor("b"), 1 / MAX_RATIO)
