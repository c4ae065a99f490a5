"""Joint placement: small jobs that need a fraction of a GPU share one, each with its own lifetime."""

import math
import textwrap

import networkx as nx
import numpy as np
import pytest

import streammap
from streammap.cli import main
from streammap.cluster.model import cluster_from_dict
from streammap.compiler import load_source_graph
from streammap.errors import StreamMapError
from streammap.tenancy.admission import Job, Scheduler
from streammap.tenancy.estimate import Demand, Estimator, Option
from streammap.tenancy.jobs import load_jobs, poisson_jobs, write_jobs
from streammap.tenancy.packing import fractional_demand, job_share, shared_duration
from streammap.tenancy.simulate import simulate
from streammap.tenancy.tenants import tenants_from_dict
from tests.placement.test_sharing import SLEEPY
from tests.tenancy.test_job_service import VISION, Service, wait_for, write_setup

GiB = 2.0 ** 30


def gpus(n, memory="16GiB"):
    return cluster_from_dict({"name": "t", "nodes": [
        {"name": "n0", "link": {"bandwidth": "300 GB/s", "latency": "3us"},
         "devices": [{"name": f"g{i}", "kind": "gpu", "model": "A100", "memory": memory} for i in range(n)]}]})


def small(jid, share, duration=10.0, memory=1 * GiB, arrival=0.0, tenant="a"):
    """A job that needs ``share`` of one GPU and ``memory`` of its memory."""
    whole = Demand(1, (Option("A100", 1, duration, memory),))
    return Job(jid, tenant, arrival, fractional_demand(whole, share, {"A100": duration * share}))


def whole(jid, duration=10.0, n=1, arrival=0.0, tenant="a"):
    return Job(jid, tenant, arrival, Demand(n, (Option("A100", n, duration, 1 * GiB),)))


def started(sched, now):
    return {s.job_id: s.devices for s in sched.schedule(now)[0]}


@pytest.fixture(params=["fifo", "drf", "streammap"])
def policy(request):
    return request.param


def test_two_half_gpu_jobs_share_one_gpu_and_a_third_waits(policy):
    s = Scheduler(gpus(1), tenants_from_dict(["a"]), policy=policy)
    for jid in ("x", "y", "z"):
        s.submit(small(jid, 0.5))
    got = started(s, 0.0)
    assert set(got) == {"x", "y"}
    assert got["x"] == got["y"] == ("n0/g0",)
    assert "z" in s.jobs                         # the GPU is full: the third waits


def test_one_ending_frees_only_its_half(policy):
    s = Scheduler(gpus(1), tenants_from_dict(["a"]), policy=policy)
    s.submit(small("x", 0.5, duration=10))
    s.submit(small("y", 0.5, duration=100))
    started(s, 0.0)
    s.submit(small("z", 0.5))
    s.submit(whole("big"))
    s.finish("x")
    got = started(s, 10.0)
    assert got == {"z": ("n0/g0",)}              # beside y, which runs on; not the whole-GPU job
    assert "y" in s.running and "big" in s.jobs
    assert s.packing.used["n0/g0"] == pytest.approx(1.0)
    s.finish("y")
    s.finish("z")
    assert s.pool.free_count["A100"] == 1        # the last holder gone: the GPU is whole again
    assert started(s, 100.0) == {"big": ("n0/g0",)}


def test_no_job_waits_for_a_neighbour_to_end():
    # x (10 s) and y (100 s) share; x's end is recorded at 10 s whatever y does.
    jobs = [small("x", 0.5, duration=10), small("y", 0.5, duration=100)]
    res = {j.id: j for j in simulate(jobs, gpus(1), tenants_from_dict(["a"])).jobs}
    assert (res["x"].start, res["x"].finish) == (0.0, 10.0)
    assert (res["y"].start, res["y"].finish) == (0.0, 100.0)
    assert res["x"].share == 0.5


def test_memory_limits_refuse_a_pair(policy):
    # Two quarter-GPU jobs of 10 GiB each do not fit together into one 16 GiB GPU.
    s = Scheduler(gpus(1, memory="16GiB"), tenants_from_dict(["a"]), policy=policy)
    s.submit(small("x", 0.25, memory=10 * GiB))
    s.submit(small("y", 0.25, memory=10 * GiB))
    assert set(started(s, 0.0)) == {"x"}
    s.finish("x")
    assert set(started(s, 10.0)) == {"y"}


def test_a_job_without_share_is_never_co_placed(policy):
    s = Scheduler(gpus(2), tenants_from_dict(["a"]), policy=policy)
    s.submit(small("q", 0.25))
    s.submit(whole("w"))
    s.submit(small("r", 0.25))
    got = started(s, 0.0)
    assert got["q"] == got["r"] != got["w"]
    s.submit(whole("w2"))
    assert started(s, 0.0) == {}                 # 0.5 of q's GPU is free, but w2 needs a whole one


def test_without_joint_placement_each_small_job_holds_a_whole_gpu():
    s = Scheduler(gpus(2), tenants_from_dict(["a"]), joint=False)
    for jid in ("x", "y", "z"):
        s.submit(small(jid, 0.5))
    got = started(s, 0.0)
    assert len(got) == 2 and len(set(got.values())) == 2
    assert all(r.option.share == 1.0 for r in s.running.values())


def test_quota_counts_a_fraction_and_its_memory():
    tenants = tenants_from_dict({"tenants": [{"name": "a", "quota": {"gpus": 1}}]})
    s = Scheduler(gpus(4), tenants, policy="streammap")
    for jid in ("x", "y", "z"):
        s.submit(small(jid, 0.5))
    assert set(started(s, 0.0)) == {"x", "y"}     # 0.5 + 0.5 GPU: the quota of one GPU is held
    assert s.usage["a"].gpus == pytest.approx(1.0)
    assert s.usage["a"].memory == pytest.approx(2 * GiB)


def test_the_interference_model_slows_a_job_only_past_its_fraction():
    # A chain of quarter-GPU kernels (busy 0.25 x 8 s of an 8 s run) runs in 8 s at 0.25; four
    # such kernels side by side (busy 0.25 x 32 s in a 8 s run) take 32 s at 0.25.
    assert shared_duration(8.0, 0.25 * 8.0, 0.25) == 8.0
    assert shared_duration(8.0, 0.25 * 32.0, 0.25) == 32.0


def test_a_graph_of_quarter_gpu_kernels_declares_a_quarter():
    g = nx.DiGraph()
    g.add_node("a", share=0.25)
    g.add_node("b", share=0.125)
    assert job_share(g) == 0.25
    g.add_node("c")                              # a task of the whole device: the job is whole
    assert job_share(g) == 1.0
    assert job_share(g, 0.5) == 0.5              # --share says so


def test_the_estimator_gives_a_stated_share_fractional_options(shared):
    graph_file = sorted((shared / "workflows").glob("*.json"))[0]
    graph = load_source_graph(graph_file)
    est = Estimator(gpus(2))
    d = est.demand(("g",), graph, share=0.25)
    assert d.gpus == 1 and d.options[0].share == 0.25 and d.held == 0.25
    assert d.whole is not None and d.whole.options[0].share == 1.0
    # A workflow's tasks run one at a time on one GPU: held to a quarter it is no slower.
    assert d.options[0].duration == pytest.approx(d.whole.options[0].duration)
    with pytest.raises(StreamMapError, match="fraction of one device"):
        est.demand(("g",), graph, gpus=2, share=0.25)


SHARE_SEEN = '''\
import os
import time

import numpy as np


# @stream kernel(flops=1e6)
def seen():
    # runs until the test, having seen both jobs running at once, writes 'gate' in the job's folder
    deadline = time.monotonic() + 60
    while not os.path.exists("gate") and time.monotonic() < deadline:
        time.sleep(0.02)
    return np.full(2, float(os.environ.get("STREAMMAP_DEVICE_SHARE", "1")))


# @stream graph
def probe():
    return seen()
'''


def test_the_service_runs_two_half_gpu_jobs_on_one_gpu_each_held_to_its_half(tmp_path, capsys, monkeypatch):
    write_setup(tmp_path, gpus=1)
    (tmp_path / "probe.py").write_text(SHARE_SEEN)
    service = Service(tmp_path)
    try:
        monkeypatch.setenv("STREAMMAP_SERVER", service.url)
        monkeypatch.setenv("STREAMMAP_TOKEN", VISION)
        ids = []
        for _ in range(2):
            assert main(["submit", str(tmp_path / "probe.py"), "--tenant", "vision", "--share", "0.5"]) == 0
            ids.append(capsys.readouterr().out.split()[-1])
        client = service.client(VISION)
        both = [wait_for(client, j, states=("running",)) for j in ids]        # at once: neither can end yet
        assert [s["devices"] for s in both] == [["node0/gpu0"], ["node0/gpu0"]]
        assert all(s["share"] == 0.5 for s in both)
        assert main(["status", ids[0]]) == 0
        assert "devices: node0/gpu0 (0.5) (A100)" in capsys.readouterr().out
        assert main(["queue"]) == 0
        assert "node0/gpu0 (0.5)" in capsys.readouterr().out
        for j in ids:
            (service.state / "jobs" / j / "gate").touch()
        for j in ids:
            done = wait_for(client, j)
            assert done["started"] < min(s["finished"] or math.inf for s in map(client.status, ids))
            client.result(j, tmp_path / f"{j}.npz")
            # The worker held the job to its half: the runtime saw the fraction it was granted.
            assert np.load(tmp_path / f"{j}.npz")["result"].tolist() == [0.5, 0.5]
    finally:
        service.stop()


def test_a_run_granted_half_a_gpu_keeps_its_quarter_kernels_within_that_half(tmp_path, monkeypatch):
    (tmp_path / "prog.py").write_text(textwrap.dedent(SLEEPY))
    one = {"name": "one", "nodes": [{"name": "n0", "devices": [{"name": "gpu0", "kind": "gpu", "flops": "20 TFLOP/s"}]}]}
    plan = streammap.compile(tmp_path / "prog.py", cluster=one, params={"SHARE": 0.25}, history=False)
    monkeypatch.setenv("STREAMMAP_DEVICE_SHARE", "0.5")
    out = streammap.run(plan, emulate=True, outputs=tmp_path / "o.npz", progress=False, telemetry=False)
    assert out["result"][0] == pytest.approx(0.5)        # two quarters at once, never four
    assert out["result"][1] == sum(range(8))
    monkeypatch.setenv("STREAMMAP_DEVICE_SHARE", "2")
    with pytest.raises(StreamMapError, match="not a fraction of a device"):
        streammap.run(plan, emulate=True, outputs=tmp_path / "p.npz", progress=False, telemetry=False)


def test_a_stream_with_small_shared_jobs_keeps_the_arrivals_of_its_seed(tmp_path, shared):
    graphs = sorted(str(p) for p in (shared / "workflows").glob("*.json"))[:3]
    plain = poisson_jobs(graphs, 0.1, 200, {"a": 0.5, "b": 0.5}, seed=3)
    mixed = poisson_jobs(graphs, 0.1, 200, {"a": 0.5, "b": 0.5}, seed=3, shared=0.3)
    assert [(j.arrival, j.tenant, j.source) for j in plain] == [(j.arrival, j.tenant, j.source) for j in mixed]
    small_jobs = [j for j in mixed if j.share is not None]
    assert 40 <= len(small_jobs) <= 80 and {j.share for j in small_jobs} == {0.25, 0.5}
    write_jobs(mixed, tmp_path / "jobs.yaml")
    assert [j.share for j in load_jobs(tmp_path / "jobs.yaml")] == [j.share for j in mixed]


def test_a_small_job_does_not_join_a_shared_gpu_where_that_would_delay_a_reserved_job():
    # x holds half a GPU until 10, a whole job the other until 100: W (one GPU, 50 s) is reserved x's at 10.
    # y (half a GPU, 1,000 s) fits beside x now, but would hold that GPU until 1,000: it waits instead.
    s = Scheduler(gpus(2), tenants_from_dict(["a"]), policy="streammap")
    s.submit(small("x", 0.5, duration=10))
    s.submit(whole("w1", duration=100))
    assert set(started(s, 0.0)) == {"x", "w1"}
    s.submit(whole("W", duration=50, arrival=0.0))
    s.submit(small("y", 0.5, duration=1000, arrival=0.0))
    assert started(s, 0.0) == {}
    assert s.estimated_starts["W"][0] == 10.0
    x_gpu = s.running["x"].devices
    s.finish("x")
    assert started(s, 10.0) == {"W": x_gpu}
    # A short one that ends before x does joins x's GPU at once (it moves nothing).
    s2 = Scheduler(gpus(2), tenants_from_dict(["a"]), policy="streammap")
    s2.submit(small("x", 0.5, duration=10))
    s2.submit(whole("w1", duration=100))
    started(s2, 0.0)
    s2.submit(whole("W", duration=50))
    s2.submit(small("z", 0.5, duration=5))
    assert started(s2, 0.0) == {"z": s2.running["x"].devices}
    assert s2.estimated_starts["W"][0] == 10.0


def test_a_long_small_job_waits_for_a_fast_gpu_as_a_whole_job_would():
    cluster = cluster_from_dict({"name": "t", "nodes": [
        {"name": "n0", "link": {"bandwidth": "300 GB/s", "latency": "3us"},
         "devices": [{"name": "a", "kind": "gpu", "model": "A100", "memory": "80GiB"},
                     {"name": "v", "kind": "gpu", "model": "V100", "memory": "32GiB"}]}]})

    def two_models(jid, fast, share=0.5):
        whole_demand = Demand(1, (Option("A100", 1, fast, GiB), Option("V100", 1, 2 * fast, GiB)))
        return Job(jid, "a", 0.0, fractional_demand(whole_demand, share, {"A100": fast * share, "V100": fast * share}))

    s = Scheduler(cluster, tenants_from_dict(["a"]), policy="streammap")
    s.submit(Job("busy", "a", 0.0, Demand(1, (Option("A100", 1, 10.0, GiB),))))
    started(s, 0.0)
    s.submit(two_models("long", 100.0))      # 200 s on the V100 now, or 10 + 100 s on the A100
    s.submit(two_models("short", 2.0))       # 4 s on the V100 now, or 10 + 2 s on the A100
    got = started(s, 0.0)
    assert got == {"short": ("n0/v",)}
    assert s.estimated_starts["long"] == (10.0, "A100")
