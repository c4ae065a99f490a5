"""Tenants, quotas, fair share and admission: the core the simulator and the job service share."""

import json
import math

import numpy as np
import pytest

from streammap.cli import main
from streammap.cluster.model import cluster_from_dict
from streammap.errors import StreamMapError
from streammap.tenancy.admission import Job, Scheduler
from streammap.tenancy.availability import Profile
from streammap.tenancy.estimate import Demand, Option
from streammap.tenancy.jobs import JobSpec, load_jobs, poisson_jobs
from streammap.tenancy.simulate import compare, fair_shares, jain_index, simulate
from streammap.tenancy.tenants import load_tenants, tenants_from_dict


def gpu_cluster(nodes=2, per_node=4, models=("A100", "V100"), speeds=(1.0, 0.5)):
    """``nodes`` nodes of ``per_node`` GPUs, the models taking turns by node."""
    return cluster_from_dict({
        "name": "t", "network": {"bandwidth": "25 GB/s", "latency": "10us"},
        "nodes": [{"name": f"n{i}", "link": {"bandwidth": "300 GB/s", "latency": "3us"},
                   "devices": [{"name": f"g{j}", "kind": "gpu", "model": models[i % len(models)],
                                "memory": "80GiB" if i % len(models) == 0 else "32GiB",
                                "speed": speeds[i % len(speeds)]} for j in range(per_node)]}
                  for i in range(nodes)]})


def job(jid, tenant, arrival, gpus, duration, priority=0, models=("A100",)):
    """A job with a given demand (as the estimator would give it), ``duration`` on the first model."""
    opts = tuple(Option(m, gpus, duration * (1 + i), 1e9) for i, m in enumerate(models))
    return Job(jid, tenant, arrival, Demand(gpus, opts), priority)


def graph_file(folder, name, runtimes, chain=False):
    """A node-link graph of tasks with reference ``runtimes``: parallel, or a chain."""
    nodes = [{"id": f"t{i}", "kernel": "k", "runtime": r} for i, r in enumerate(runtimes)]
    edges = [{"source": f"t{i}", "target": f"t{i + 1}", "bytes": 0} for i in range(len(runtimes) - 1)] if chain else []
    path = folder / name
    path.write_text(json.dumps({"directed": True, "multigraph": False, "graph": {}, "nodes": nodes, "edges": edges}))
    return path


def held_over_time(result, key):
    """Max over time of the GPUs held, grouped by ``key(job_result)``."""
    events = []
    for j in result.jobs:
        events += [(j.start, 1, key(j), j.gpus), (j.finish, 0, key(j), -j.gpus)]
    held, peak = {}, {}
    for _, _, k, g in sorted(events):          # ends before starts at the same instant
        held[k] = held.get(k, 0) + g
        peak[k] = max(peak.get(k, 0), held[k])
    return peak


# -- tenants file ---------------------------------------------------------------------------------

def test_tenants_file_gives_weights_quotas_and_tokens(tmp_path):
    f = tmp_path / "tenants.yaml"
    f.write_text("tenants:\n"
                 "  - {name: vision, weight: 2, token: s3cret-vision, quota: {gpus: 8, gpu_memory: 1TiB, models: {A100: 4}}}\n"
                 "  - {name: nlp, token: s3cret-nlp}\n"
                 "preemption: true\n")
    t = load_tenants(f)
    assert t.weight("vision") == 2 and t.weight("nlp") == 1
    assert t.quota("vision").gpu_memory == 2 ** 40 and t.quota("vision").models == {"A100": 4}
    assert t.quota("nlp").gpus is None and t.preemption
    assert t.authenticate("s3cret-nlp").name == "nlp"
    assert t.authenticate("s3cret-nl") is None and t.authenticate(None) is None


@pytest.mark.parametrize("text, line, words", [
    ("tenants:\n  - {name: a, token: tok-aaaaaa}\n  - {name: b, weight: 0}\n", 3, "weight"),
    ("tenants:\n  - {name: a, quota: {gpus: 2, gpu: 1}}\n", 2, "unknown field 'gpu'"),
    ("tenants:\n  - {name: a, quota: {gpu_memory: lots}}\n", 2, "gpu_memory"),
    ("tenants:\n  - {name: a}\n  - {name: a}\n", 1, "appears twice"),
    ("tenants:\n  - {name: a, token: same-token}\n  - {name: b, token: same-token}\n", 1, "same token"),
    ("tenants: [\n", 2, "not valid YAML"),
])
def test_a_bad_tenants_file_is_reported_at_its_line(tmp_path, capsys, text, line, words):
    f = tmp_path / "tenants.yaml"
    f.write_text(text)
    with pytest.raises(StreamMapError) as err:
        load_tenants(f)
    assert err.value.line == line and words in err.value.message
    assert f"{f}:{line}" in err.value.format()


def test_a_bad_jobs_file_is_reported_at_its_line(tmp_path):
    g = graph_file(tmp_path, "g.json", [1.0])
    f = tmp_path / "jobs.yaml"
    f.write_text(f"- {{graph: {g.name}, tenant: a, arrival: 0}}\n- {{graph: {g.name}, tenant: b, arrival: -3}}\n")
    with pytest.raises(StreamMapError) as err:
        load_jobs(f)
    assert err.value.line == 2 and "arrival" in err.value.message
    f.write_text("- {graph: missing.json, tenant: a}\n")
    with pytest.raises(StreamMapError, match="file not found"):
        load_jobs(f)
    f.write_text(f"- {{graph: {g.name}, program: x.py, tenant: a}}\n")
    with pytest.raises(StreamMapError, match="exactly one of"):
        load_jobs(f)


# -- admission ------------------------------------------------------------------------------------

def test_gang_admission_starts_a_job_only_with_all_its_devices():
    s = Scheduler(gpu_cluster(nodes=1), tenants_from_dict(["a"]), policy="fifo")
    s.submit(job("small", "a", 0, 2, 10))
    s.submit(job("wide", "a", 0, 4, 10))
    starts, _ = s.schedule(0)
    assert [x.job_id for x in starts] == ["small"]       # 2 of 4 left: the 4-wide job waits whole
    s.finish("small")
    starts, _ = s.schedule(10)
    assert [x.job_id for x in starts] == ["wide"] and len(starts[0].devices) == 4


def test_a_gang_is_packed_onto_one_node_when_one_has_room():
    s = Scheduler(gpu_cluster(nodes=4, models=("A100",), speeds=(1.0,)), tenants_from_dict(["a"]))
    s.submit(job("x", "a", 0, 3, 10))
    s.submit(job("y", "a", 0, 4, 10))
    starts, _ = s.schedule(0)
    for st in starts:
        assert len({d.split("/")[0] for d in st.devices}) == 1


@pytest.mark.parametrize("policy", ["fifo", "drf", "streammap"])
def test_quotas_are_never_exceeded(tmp_path, policy):
    clus = gpu_cluster(nodes=4)
    tenants = tenants_from_dict({"tenants": [
        {"name": "a", "quota": {"gpus": 5, "models": {"A100": 3}}},
        {"name": "b", "quota": {"gpu_memory": "200GiB"}},          # at most 2 A100s, or 6 V100s
        {"name": "c"}]})
    rng = np.random.default_rng(7)
    jobs = []
    for i in range(300):
        g = int(rng.choice([1, 2, 4]))
        jobs.append(job(f"j{i}", str(rng.choice(["a", "b", "c"])), float(rng.uniform(0, 500)), g,
                        float(rng.uniform(1, 60)), models=("A100", "V100")))
    res = simulate(jobs, clus, tenants, policy=policy)
    assert len(res.jobs) == 300
    by_tenant = held_over_time(res, lambda j: j.tenant)
    assert by_tenant["a"] <= 5
    a100_a = held_over_time(res, lambda j: (j.tenant, j.model)).get(("a", "A100"), 0)
    assert a100_a <= 3
    mem = held_over_time(res, lambda j: (j.tenant, j.model))
    assert mem.get(("b", "A100"), 0) <= 2
    per_model = held_over_time(res, lambda j: j.model)
    assert per_model["A100"] <= 8 and per_model["V100"] <= 8


def test_a_job_its_quota_can_never_grant_is_an_error():
    tenants = tenants_from_dict({"tenants": [{"name": "a", "quota": {"gpus": 1}}]})
    with pytest.raises(StreamMapError, match="quota"):
        simulate([job("big", "a", 0, 2, 1)], gpu_cluster(), tenants)


def contended_stream(weights=(1, 1), arrivals=(3, 1), n=400, seed=3):
    """Two tenants whose jobs arrive at unequal rates, far faster than the cluster serves them."""
    tenants = tenants_from_dict({"tenants": [{"name": "a", "weight": weights[0]}, {"name": "b", "weight": weights[1]}]})
    rng = np.random.default_rng(seed)
    p = np.array(arrivals, float) / sum(arrivals)
    jobs = [job(f"j{i}", str(rng.choice(["a", "b"], p=p)), float(i) * 0.5, int(rng.choice([1, 2])),
                float(rng.uniform(5, 20))) for i in range(n)]
    return jobs, tenants


def sixteen_gpus():
    return gpu_cluster(nodes=2, per_node=8, models=("A100",), speeds=(1.0,))


def normalised_share(res, tenant):
    """GPU-seconds held during contention / GPU-seconds of the tenant's weighted fair share."""
    return res.tenant_contention_gpu_seconds[tenant] / res.tenant_fair_gpu_seconds[tenant]


@pytest.mark.parametrize("policy", ["drf", "streammap"])
def test_equal_weight_tenants_get_equal_shares_under_contention(policy):
    jobs, tenants = contended_stream()
    res = simulate(jobs, sixteen_gpus(), tenants, policy=policy)
    assert res.contention_seconds > 400
    assert normalised_share(res, "a") == pytest.approx(normalised_share(res, "b"), rel=0.1)
    assert normalised_share(res, "a") > 0.85            # and neither gets much less than its share
    assert res.jain >= 0.99


def test_fifo_gives_shares_by_arrival_not_by_weight():
    jobs, tenants = contended_stream()
    res = simulate(jobs, sixteen_gpus(), tenants, policy="fifo")
    assert normalised_share(res, "a") > 1.2 and normalised_share(res, "b") < 0.6 and res.jain < 0.95


def test_weights_set_the_shares_under_contention():
    jobs, tenants = contended_stream(weights=(1, 3), arrivals=(1, 1))
    res = simulate(jobs, sixteen_gpus(), tenants, policy="streammap")
    assert normalised_share(res, "a") == pytest.approx(normalised_share(res, "b"), rel=0.1)
    assert res.jain >= 0.99
    jct = {t: np.mean([j.jct for j in res.jobs if j.tenant == t]) for t in "ab"}
    assert jct["b"] < 0.7 * jct["a"]                    # the same arrivals, but b's weight 3 serves it sooner


def test_priority_orders_a_tenants_own_jobs():
    s = Scheduler(gpu_cluster(nodes=1), tenants_from_dict(["a"]), policy="streammap")
    s.submit(job("blocker", "a", 0, 4, 10))
    s.schedule(0)
    s.submit(job("low", "a", 1, 4, 1, priority=0))
    s.submit(job("high", "a", 2, 4, 50, priority=5))
    s.finish("blocker")
    starts, _ = s.schedule(10)
    assert [x.job_id for x in starts] == ["high"]


def test_backfill_never_delays_the_reserved_job():
    """4 GPUs; 'long' holds 2 until t=100; 'wide' needs all 4 and reserves t=100. 'short' ends
    before that and backfills; 'late' would hold 2 GPUs past t=100, so it must wait."""
    jobs = [job("long", "a", 0, 2, 100), job("wide", "a", 1, 4, 10), job("short", "a", 2, 2, 50),
            job("late", "a", 3, 2, 60)]
    res = {j.id: j for j in simulate(jobs, gpu_cluster(nodes=1), tenants_from_dict(["a"]), policy="streammap").jobs}
    assert res["short"].start == 2                    # backfilled into the gap
    assert res["wide"].start == 100                   # its reservation held
    assert res["late"].start >= res["wide"].finish    # would have delayed 'wide': it waited


def test_an_availability_profile_finds_the_earliest_gap_a_gang_fits_for_its_whole_duration():
    # 2 GPUs free now, 1 held by a job past its estimated end (free just after now, not now),
    # 4 more free at t=10.
    p = Profile(0.0, 2, [(10.0, 4), (-5.0, 1)])
    assert p.fits_now(2, 100) and not p.fits_now(3, 1)
    assert 0 < p.earliest_fit(3, 1) < 1e-6
    p.reserve(0.0, 2, 20)                               # a job takes both free GPUs until t=20
    assert not p.fits_now(1, 1)
    assert p.earliest_fit(1, 5) < 1e-6                  # the overdue job's GPU
    assert p.earliest_fit(5, 5) == 10                   # 1 + 4 free from t=10
    assert p.earliest_fit(6, 5) == 20                   # 7 free from t=20
    assert p.earliest_fit(5, 50) == 10                  # [10, 60) stays at 5 or more
    assert p.earliest_fit(8, 1) == math.inf


def test_backfill_never_delays_an_earlier_jobs_estimated_start():
    """Conservative backfill, as a property over random job sets (exact estimates, one model, all
    jobs queued at once): the first pass gives every job an estimated start, and no job starts
    later than that, although many later jobs start before earlier ones."""
    clus = gpu_cluster(nodes=2, per_node=4, models=("A100",), speeds=(1.0,))
    tenants = tenants_from_dict(["a"])
    jumped = 0
    for seed in range(30):
        rng = np.random.default_rng(seed)
        jobs = [job(f"j{i}", "a", 0, int(rng.choice([1, 2, 4, 8])), float(rng.integers(20, 60)),
                    priority=int(rng.integers(0, 3))) for i in range(20)]
        sched = Scheduler(clus, tenants, depth=len(jobs))
        for j in sorted(jobs, key=lambda j: j.id):         # the simulator's order, so equal keys tie alike
            sched.submit(Job(j.id, j.tenant, j.arrival, j.demand, j.priority))
        order = [j.id for j in sorted(sched.queued(), key=sched._key)]
        starts, _ = sched.schedule(0.0)
        estimated = {s.job_id: 0.0 for s in starts} | {j: t for j, (t, _) in sched.estimated_starts.items()}
        assert sorted(estimated) == sorted(order)          # every job is planned
        res = {r.id: r for r in simulate([Job(j.id, j.tenant, j.arrival, j.demand, j.priority) for j in jobs], clus, tenants,
                                         policy="streammap", depth=len(jobs)).jobs}
        for jid in order:
            assert res[jid].start <= estimated[jid] + 1e-9, (seed, jid)
        jumped += sum(res[b].start < res[a].start for i, a in enumerate(order) for b in order[i + 1:])
    assert jumped > 30                                       # backfill did happen, often


def test_every_pass_plans_reservations_that_its_starts_never_overbook():
    """Two tenants, two device models, jobs arriving over time: after every pass the running jobs
    and the reservations of the waiting ones never need more devices of a model than there are,
    at any time (a start that ignored a reservation would)."""
    rng = np.random.default_rng(7)
    clus = gpu_cluster(nodes=4, per_node=4)              # 8 A100, 8 V100 at half speed
    sched = Scheduler(clus, tenants_from_dict({"tenants": [{"name": "a"}, {"name": "b", "weight": 2}]}))
    arrivals = sorted(float(t) for t in rng.uniform(0, 400, 120))
    jobs = [job(f"j{i}", "ab"[i % 2], t, int(rng.choice([1, 2, 4])), float(rng.integers(5, 80)),
                models=("A100", "V100")) for i, t in enumerate(arrivals)]
    now, planned = 0.0, 0
    while jobs or sched.running or sched.jobs:
        now = min([r.est_finish for r in sched.running.values()] + [j.arrival for j in jobs[:1]])
        for r in [r for r in sched.running.values() if r.est_finish <= now]:
            sched.finish(r.job.id)
        while jobs and jobs[0].arrival <= now:
            sched.submit(jobs.pop(0))
        sched.schedule(now)
        planned += len(sched.estimated_starts)
        for model, size in sched.pool.size.items():
            busy = [(r.start, r.est_finish, r.option.gpus) for r in sched.running.values() if r.option.model == model]
            for jid, (t, m) in sched.estimated_starts.items():
                if m == model:
                    o = sched.jobs[jid].demand.option(m)
                    busy.append((t, t + o.duration, o.gpus))
            for p in {a for a, _, _ in busy}:
                assert sum(g for a, b, g in busy if a <= p < b) <= size, (now, model, p)
    assert planned > 200


def test_a_job_past_its_estimate_is_expected_to_run_to_the_next_doubling():
    s = Scheduler(gpu_cluster(nodes=1, per_node=1), tenants_from_dict(["a"]))
    s.submit(job("slow", "a", 0, 1, 10))
    s.schedule(0)
    s.submit(job("next", "a", 1, 1, 5))
    s.schedule(5)
    assert s.estimated_starts["next"] == (10, "A100")      # on time: its estimated end
    s.schedule(15)
    assert s.estimated_starts["next"] == (20, "A100")      # overran: 2 x its estimate
    s.schedule(25)
    assert s.estimated_starts["next"] == (40, "A100")      # and again: 4 x


def test_short_jobs_first_beats_fifo_on_average_completion_time():
    jobs, tenants = contended_stream(arrivals=(1, 1))

    def run(policy, **kw):
        return simulate([Job(j.id, j.tenant, j.arrival, j.demand) for j in jobs], gpu_cluster(nodes=1), tenants,
                        policy=policy, **kw)

    fifo, fair, shortest = run("fifo"), run("streammap"), run("streammap", slowdown=math.inf)
    assert shortest.avg_jct < 0.8 * fifo.avg_jct                  # plain shortest-first
    assert fair.avg_jct < 0.95 * fifo.avg_jct                     # the slowdown deadline: most of the gain,
    assert fair.utilisation >= fifo.utilisation - 1e-9

    def worst_wait(r):
        return max(j.start - j.arrival for j in r.jobs)

    assert worst_wait(fair) < worst_wait(shortest)                # without starving the longest job


def test_a_long_job_waits_for_the_fast_model_when_it_ends_sooner_there_within_the_slack():
    clus = gpu_cluster(nodes=2, per_node=1)          # one A100 (n0), one V100 at half speed (n1)
    jobs = [job("busy", "a", 0, 1, 10, models=("A100",)),
            job("long", "a", 1, 1, 100, models=("A100", "V100"))]    # 100 s on A100, 200 s on V100
    tenants = tenants_from_dict(["a"])
    # The default slack (1.5): 200 s on the idle V100 is more than 1.5 x the 109 s to finish on the A100: wait.
    res = {j.id: j for j in simulate(jobs, clus, tenants, policy="streammap").jobs}
    assert res["long"].model == "A100" and res["long"].start == 10
    # Slack 2 keeps the idle V100 busy instead, as FIFO does.
    res = {j.id: j for j in simulate(jobs, clus, tenants, policy="streammap", slack=2).jobs}
    assert res["long"].model == "V100" and res["long"].start == 1
    fifo = {j.id: j for j in simulate(jobs, clus, tenants, policy="fifo").jobs}
    assert fifo["long"].model == "V100"
    with pytest.raises(StreamMapError, match="slack must be at least 1"):
        simulate(jobs, clus, tenants, slack=0.5)


def test_preemption_happens_only_where_configured():
    def run(preempt):
        tenants = tenants_from_dict({"tenants": [{"name": "a"}], "preemption": preempt})
        jobs = [job("low", "a", 0, 4, 100, priority=0), job("urgent", "a", 5, 4, 10, priority=9)]
        return {j.id: j for j in simulate(jobs, gpu_cluster(nodes=1), tenants, policy="streammap").jobs}
    off = run(False)
    assert off["urgent"].start == 100 and off["low"].preemptions == 0
    on = run(True)
    assert on["urgent"].start == 5 and on["low"].preemptions == 1
    assert on["low"].finish == 15 + 100                # run again from the start


# -- metrics ---------------------------------------------------------------------------------------

def test_jain_index_and_weighted_fair_shares():
    assert jain_index([1, 1, 1]) == 1.0
    assert jain_index([1, 0]) == 0.5
    assert math.isnan(jain_index([]))
    assert fair_shares({"a": 10, "b": 10}, {"a": 1, "b": 1}, 8) == {"a": 4, "b": 4}
    assert fair_shares({"a": 1, "b": 10}, {"a": 1, "b": 1}, 8) == {"a": 1, "b": 7}     # a asks for less
    assert fair_shares({"a": 10, "b": 10}, {"a": 3, "b": 1}, 8) == {"a": 6, "b": 2}


# -- the simulator over real graphs, and its command -------------------------------------------------

def test_job_demands_come_from_the_mapper(tmp_path):
    wide = graph_file(tmp_path, "wide.json", [10.0] * 8)                 # 8 independent tasks
    chain = graph_file(tmp_path, "chain.json", [10.0] * 8, chain=True)   # no parallelism
    specs = [JobSpec(id="w", graph=str(wide), tenant="a"), JobSpec(id="c", graph=str(chain), tenant="a")]
    from streammap.tenancy.estimate import Estimator
    from streammap.tenancy.simulate import prepare_jobs
    w, c = prepare_jobs(specs, Estimator(gpu_cluster()))
    assert w.demand.gpus == 4 and w.demand.best.model == "A100" and w.demand.best.duration == pytest.approx(20, rel=0.01)
    assert w.demand.option("V100").duration == pytest.approx(40, rel=0.01)
    assert c.demand.gpus == 1 and c.demand.best.duration == pytest.approx(80, rel=0.01)


def test_simulate_command_generates_replays_and_reports(tmp_path, capsys):
    graphs = [graph_file(tmp_path, f"g{i}.json", [float(5 + 10 * i)] * (i + 1)) for i in range(3)]
    clus = tmp_path / "cluster.yaml"
    clus.write_text(gpu_cluster(nodes=2).to_yaml())
    jobs = tmp_path / "jobs.yaml"
    args = ["simulate", "--generate", "poisson", "--rate", "0.5", "--jobs-count", "60", "--tenants", "a:2,b",
            "--graphs", *map(str, graphs), "--seed", "4", "--jobs", str(jobs), "--cluster", str(clus),
            "--out", str(tmp_path / "out")]
    assert main(args) == 0
    out = capsys.readouterr().out
    for word in ("fifo", "drf", "streammap", "avg JCT", "Jain"):
        assert word in out
    rows = (tmp_path / "out" / "simulate.csv").read_text().splitlines()
    assert rows[0].startswith("policy,jobs,avg_jct") and len(rows) == 4
    assert (tmp_path / "out" / "simulate.png").stat().st_size > 1000
    first = jobs.read_text()
    assert main(args) == 0                               # the same seed: the same stream
    assert jobs.read_text() == first
    assert len(load_jobs(jobs)) == 60


def test_simulate_refuses_jobs_of_unknown_tenants(tmp_path, capsys):
    g = graph_file(tmp_path, "g.json", [1.0])
    (tmp_path / "jobs.yaml").write_text(f"- {{graph: {g.name}, tenant: ghost}}\n")
    (tmp_path / "tenants.yaml").write_text("tenants:\n  - {name: a}\n")
    clus = tmp_path / "cluster.yaml"
    clus.write_text(gpu_cluster().to_yaml())
    assert main(["simulate", "--jobs", str(tmp_path / "jobs.yaml"), "--cluster", str(clus),
                 "--tenants", str(tmp_path / "tenants.yaml"), "--out", str(tmp_path / "o")]) == 2
    assert "ghost" in capsys.readouterr().err


def test_compare_over_a_poisson_stream_keeps_every_job(tmp_path):
    graphs = [graph_file(tmp_path, f"g{i}.json", [float(3 + 7 * i)] * (2 * i + 1)) for i in range(3)]
    specs = poisson_jobs(graphs, rate=0.3, count=120, tenants={"a": 0.5, "b": 0.5}, seed=1, priorities=2)
    results = compare(specs, gpu_cluster())
    assert [r.policy for r in results] == ["fifo", "drf", "streammap"]
    for r in results:
        assert sorted(j.id for j in r.jobs) == sorted(s.id for s in specs)
        assert all(j.finish > j.start >= j.arrival for j in r.jobs)
        assert 0 < r.utilisation <= 1


def test_simulate_refuses_a_slack_below_one(tmp_path, capsys):
    assert main(["simulate", "--jobs", str(tmp_path / "jobs.yaml"), "--cluster", str(tmp_path / "c.yaml"),
                 "--slack", "0.5", "--out", str(tmp_path / "o")]) == 2
    assert "--slack must be at least 1" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_simulate_refuses_a_fair_share_floor_outside_zero_to_one(tmp_path, capsys):
    assert main(["simulate", "--jobs", str(tmp_path / "jobs.yaml"), "--cluster", str(tmp_path / "c.yaml"),
                 "--floor", "1.5", "--out", str(tmp_path / "o")]) == 2
    assert "--floor must be between 0 and 1" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_a_job_no_model_can_run_is_reported_at_its_line_in_the_jobs_file(tmp_path, capsys):
    graph_file(tmp_path, "ok.json", [1.0])
    tpu = tmp_path / "tpu.json"
    tpu.write_text(json.dumps({"directed": True, "graph": {}, "edges": [],
                               "nodes": [{"id": "t", "kernel": "k", "times": {"TPU-v5": 1.0}}]}))
    (tmp_path / "jobs.yaml").write_text("- {graph: ok.json, tenant: a}\n- {graph: tpu.json, tenant: a}\n")
    clus = tmp_path / "cluster.yaml"
    clus.write_text(gpu_cluster().to_yaml())
    assert main(["simulate", "--jobs", str(tmp_path / "jobs.yaml"), "--cluster", str(clus), "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'jobs.yaml'}:2" in err and "no device model" in err


def test_the_python_api_compares_policies_on_a_jobs_file(tmp_path):
    from streammap.tenancy import compare as api_compare
    from streammap.tenancy import load_jobs as api_load
    graph_file(tmp_path, "g.json", [4.0] * 4)
    (tmp_path / "jobs.yaml").write_text("".join(f"- {{graph: g.json, tenant: {t}, arrival: {i}}}\n"
                                                for i, t in enumerate("abab")))
    (tmp_path / "tenants.yaml").write_text("tenants:\n  - {name: a, weight: 2}\n  - {name: b}\n")
    res = api_compare(api_load(tmp_path / "jobs.yaml"), gpu_cluster(), tenants=tmp_path / "tenants.yaml",
                      policies=["streammap"])
    assert res[0].weights == {"a": 2.0, "b": 1.0} and len(res[0].jobs) == 4
