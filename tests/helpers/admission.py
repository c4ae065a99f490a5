"""Admission scenes the tenancy tests share: a cluster of one GPU model, jobs for it, and the queue
in which the tail deadline is decided."""

import math

from streammap.cluster.model import cluster_from_dict
from streammap.tenancy.admission import Job
from streammap.tenancy.estimate import Demand, Option


def one_model_cluster(gpus):
    """One node of ``gpus`` A100s."""
    return cluster_from_dict({"name": "t", "nodes": [
        {"name": "n0", "link": {"bandwidth": "300 GB/s", "latency": "3us"},
         "devices": [{"name": f"g{i}", "kind": "gpu", "model": "A100", "memory": "80GiB"} for i in range(gpus)]}]})


def job(jid, arrival, duration, gpus=1, tenant="a"):
    """A job of ``gpus`` A100s, estimated (and running) ``duration`` seconds."""
    return Job(jid, tenant, arrival, Demand(gpus, (Option("A100", gpus, duration, 1e9),)))


def tail_scene(s, more=()):
    """On the scheduler ``s`` of four GPUs: 100 jobs of 50 s ran one after another without waiting
    on the fourth (what the 95th percentile of durations is learnt from); three more GPUs are held
    for days from t=10,000, and a 10-s job ("busy") runs on the fourth; then a 20-s job ("medium")
    arrives at t=10,001, the jobs ``more``, and a 500-s job ("long") at t=10,002. Returns ``s``."""
    for i in range(100):
        s.submit(job(f"m{i}", 100.0 * i, 50.0))
        s.schedule(100.0 * i)
        s.finish(f"m{i}")
    for i in range(3):
        s.submit(job(f"hold{i}", 10000.0, 1e6))
    s.submit(job("busy", 10000.0, 10.0))
    s.schedule(10000.0)
    s.submit(job("medium", 10001.0, 20.0))
    for extra in more:
        s.submit(extra)
    s.submit(job("long", 10002.0, 500.0))
    return s


def waited_scene(s, at, busy, error=None):
    """On the scheduler ``s`` of four GPUs: 100 jobs ran one at a time, each after a 10-s wait (the
    mean wait learnt), every fifth of them 2,000 s long (so the 95th percentile of estimates, the
    tail bound, is 2,000 s); at ``at`` three GPUs are held for days and a job of ``busy`` seconds
    ("busy") runs on the fourth. With ``error`` (a log-ratio), the runs also teach the estimate
    correction how precise the tenant's estimates are: the 50-s jobs ran ``exp(+error)`` and
    ``exp(-error)`` times their estimate in turn, the long ones as estimated (so the learned spread
    is about ``0.9 x error``); without it, they teach it nothing. Returns ``s``."""
    for i in range(100):
        estimate = 2000.0 if i % 5 == 0 else 50.0
        s.submit(job(f"m{i}", 3000.0 * i, estimate))
        s.schedule(3000.0 * i + 10.0)
        if error is None:
            s.finish(f"m{i}")
        else:
            factor = 1.0 if i % 5 == 0 else math.exp(error if i % 2 else -error)
            s.finish(f"m{i}", now=3000.0 * i + 10.0 + estimate * factor)
    for i in range(3):
        s.submit(job(f"hold{i}", at, 1e6))
    s.submit(job("busy", at, busy))
    s.schedule(at)
    return s
