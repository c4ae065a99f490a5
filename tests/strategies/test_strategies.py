"""Parallel strategies as a user relies on them: data parallelism (fission), pipeline parallelism
for stream programs, model parallelism by memory, and ``--strategy auto`` choosing the least
estimate. Every run is checked against the plain-Python result."""

import textwrap
from pathlib import Path

import networkx as nx
import numpy as np
import pytest

import streammap
from streammap.cli import main
from streammap.cluster.model import cluster_from_dict
from streammap.compiler import load_source_graph
from streammap.errors import KernelError, StreamMapError
from streammap.mappers.schedule import evaluate
from streammap.plan import read_plan, write_plan
from streammap.strategies.fission import GATHER, SCATTER, choose_shards, split_graph, splittable
from streammap.strategies.pipeline import (
    StageProblem,
    map_pipeline,
    period_floor,
    period_lower_bound,
    stage_groups,
    stage_of,
)
from tests.helpers.modules import load_file
from tests.helpers.paths import SAMPLES

TINY = SAMPLES / "clusters" / "tiny-gpus.yaml"


def two_gpus(memory="80GiB", n=2):
    return cluster_from_dict({"name": "two", "nodes": [{"name": "n0", "link": {"bandwidth": "300 GB/s", "latency": "3us"},
                              "devices": [{"name": f"gpu{i}", "kind": "gpu", "memory": memory, "flops": "10 TFLOP/s",
                                           "mem_bandwidth": "1000 GB/s"} for i in range(n)]}]})


def load(sample: str, **params):
    module = load_file(SAMPLES / sample, f"direct_{Path(sample).stem}")
    for k, v in params.items():
        setattr(module, k, v)
    return module


def compile_cli(sample: str, cluster, params: dict, strategy: str, plan: Path, *extra: str):
    """``streammap compile SAMPLE --cluster C -D ... --strategy S -o PLAN [EXTRA]``; the plan read back."""
    defines = [a for k, v in params.items() for a in ("-D", f"{k}={v}")]
    assert main(["compile", str(SAMPLES / sample), "--cluster", str(cluster), *defines,
                 "--strategy", strategy, "-o", str(plan), *extra]) == 0
    return read_plan(plan)


def assert_auto_picked_the_least(plan):
    est = plan.strategy.estimates
    assert plan.strategy.chosen == min(est, key=lambda n: (est[n], ["none", "data", "model", "pipeline"].index(n)))


# -- data parallelism ---------------------------------------------------------------------------

MANDEL = {"ROWS": 40, "COLS": 24, "ITER": 12}


def test_a_split_kernel_becomes_scatter_shards_and_a_gather_with_the_same_id():
    g = load_source_graph(SAMPLES / "mandelbrot.py", MANDEL)
    (esc,) = [t for t in splittable(g)]
    s = split_graph(g, {esc: 3})
    assert s.nodes[esc]["kernel"] == GATHER and s.nodes[f"{esc}~scatter"]["kernel"] == SCATTER
    shards = [f"{esc}~shard{i}" for i in range(3)]
    assert all(s.nodes[x]["kernel"] == "escape" for x in shards)
    assert all(s.nodes[x]["code"] == g.nodes[esc]["code"] is not None for x in shards)   # history: same code
    assert s.nodes[shards[0]]["flops"] == pytest.approx(g.nodes[esc]["flops"] / 3)
    assert set(s.predecessors(esc)) == set(shards)
    assert list(s.successors(esc)) == list(g.successors(esc))       # consumers unchanged
    assert nx.is_directed_acyclic_graph(s)


def test_a_stateful_kernel_is_never_split(tmp_path):
    path = tmp_path / "prog.py"
    path.write_text(textwrap.dedent('''
        import numpy as np
        # @stream kernel(out=800)
        def src():
            return np.arange(100.0)
        # @stream kernel(flops=1e12, out=800, split=0, stateful=True)
        def heavy(x):
            return x * 2
        # @stream graph
        def main():
            return heavy(src())
        '''))
    g = load_source_graph(path)
    assert splittable(g) == []
    with pytest.raises(StreamMapError, match="does not apply"):
        streammap.compile(path, cluster=two_gpus(), strategy="data")


def test_the_shard_count_comes_from_the_cost_model():
    big = load_source_graph(SAMPLES / "mandelbrot.py", {"ROWS": 4096, "COLS": 4096, "ITER": 1024})
    small = load_source_graph(SAMPLES / "mandelbrot.py", MANDEL)
    four = two_gpus(n=4)
    (b,) = choose_shards(big, four)
    (s,) = choose_shards(small, four)
    assert b.k == 4 and b.speedup > 0.85 * 4       # large input: every device, near-linear
    assert s.k == 1                                # tiny input: launches and transfers do not pay


def test_a_forced_split_runs_with_identical_results_on_the_emulated_cluster(tmp_path, hetero_cluster):
    expected = load("mandelbrot.py", **MANDEL).mandelbrot()
    plan = tmp_path / "plan.yaml"
    p = compile_cli("mandelbrot.py", hetero_cluster, MANDEL, "data", plan)
    assert p.strategy.chosen == "data" and p.strategy.forced and list(p.strategy.splits.values())[0] >= 2
    assert len({t.device for t in p.tasks if "~shard" in t.id}) >= 2
    assert main(["run", str(plan), "--emulate", "-o", str(tmp_path / "out.npz"), "--no-progress"]) == 0
    got = np.load(tmp_path / "out.npz")
    np.testing.assert_array_equal(got["counts"], expected["counts"])
    np.testing.assert_array_equal(got["histogram"], expected["histogram"])


SPLIT_A_VECTOR_ALONG_COLUMNS = """\
import numpy as np

# @stream param
N = 1024


# @stream kernel(out=8*N)
def make():
    return np.arange(N, dtype=float)


# @stream kernel(flops=N, out=8*N, split=1)
def scale(x):
    return x * 2


# @stream graph
def main():
    return scale(make())
"""


def test_a_split_axis_the_data_lacks_ends_the_run_with_the_call_site_and_status_2(tmp_path, hetero_cluster, capsys):
    (tmp_path / "vec.py").write_text(SPLIT_A_VECTOR_ALONG_COLUMNS)
    plan = tmp_path / "plan.yaml"
    assert main(["compile", str(tmp_path / "vec.py"), "--cluster", str(hetero_cluster), "--strategy", "data",
                 "-o", str(plan)]) == 0
    capsys.readouterr()
    assert main(["run", str(plan), "--emulate", "-o", str(tmp_path / "out.npz"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    first = err.splitlines()[0]
    assert first.startswith(f"{tmp_path / 'vec.py'}:19: error: task scale@vec.py:19~scatter")
    assert "split=1 cuts along axis 1, but the argument has 1 dimension" in first
    assert "hint: the kernel's split clause must name an axis of its first argument: 0..0" in err
    assert "Traceback" not in err and err.count("error:") == 1
    assert not (tmp_path / "out.npz").exists()


def test_auto_splits_a_large_kernel_and_records_the_alternatives(hetero_cluster):
    plan = streammap.compile(SAMPLES / "mandelbrot.py", cluster=hetero_cluster, params={"ROWS": 2048, "COLS": 2048, "ITER": 256})
    assert plan.strategy.chosen == "data" and not plan.strategy.forced
    assert set(plan.strategy.estimates) == {"none", "data"}
    assert "model" in plan.strategy.skipped and "pipeline" in plan.strategy.skipped
    assert_auto_picked_the_least(plan)


# -- pipeline parallelism -----------------------------------------------------------------------

def test_a_pipeline_task_id_names_its_stage_and_item():
    assert stage_of("bandpass[3,2]@fm.py:40") == ("bandpass[2]@fm.py:40", 3)
    assert stage_of("read[7]@p.py:5:9") == ("read@p.py:5:9", 7)
    assert stage_of("combine@fm.py:41") is None


def problem(times, stateful, devices=2, edges=None, bw=1e12):
    times = np.asarray(times, dtype=float)
    t = times[:, None] * np.ones(devices)[None, :] if times.ndim == 1 else times
    S, D = t.shape
    lat = np.where(np.eye(D, dtype=bool), 0.0, 1e-6)
    inv = np.where(np.eye(D, dtype=bool), 0.0, 1.0 / bw)
    return StageProblem(names=[f"s{i}" for i in range(S)], kernels=[f"s{i}" for i in range(S)], time=t,
                        stateful=np.array(stateful), edges=edges if edges is not None else [(i, i + 1, 1e3) for i in range(S - 1)],
                        lat=lat, inv_bw=inv, device_ids=[f"d{j}" for j in range(D)],
                        tasks=[[f"s{i}[{k}]@p.py:1" for k in range(8)] for i in range(S)])


def test_stateless_stages_are_replicated_to_reach_the_work_bound():
    p = problem([1.0, 3.0, 1.0, 1.0], [False] * 4, devices=3)
    lb, why = period_lower_bound(p)
    assert lb == pytest.approx(2.0) and "aggregate" in why
    m = map_pipeline(p, 30)
    assert m.period <= 1.15 * lb
    assert (m.share[1] > 0).sum() >= 2         # the heavy stage runs on several devices


def test_a_heavy_stateful_stage_stays_on_one_device_and_bounds_the_period():
    p = problem([1.0, 5.0, 1.0], [False, True, False], devices=4)
    lb, why = period_lower_bound(p)
    assert lb == pytest.approx(5.0) and "stateful stage s1" in why
    m = map_pipeline(p, 16)
    assert len(set(m.device[1].tolist())) == 1
    assert m.period == pytest.approx(5.0, rel=0.15)
    assert [len(g) for g in stage_groups(p)] == [1, 1, 1]


def test_heterogeneous_devices_get_shares_by_speed():
    p = problem(np.array([[1.0, 2.0], [1.0, 2.0]]), [False, False], devices=2)
    m = map_pipeline(p, 60)
    assert m.share[0, 0] == pytest.approx(2 / 3, abs=0.02)
    assert m.period <= 1.15 * m.lower_bound


def test_the_period_is_within_5_percent_of_the_least_period_any_mapping_reaches():
    # Heterogeneous devices, a stateful stage, and items large enough (1 MB at 100 MB/s: 10 ms per
    # crossing, more than any stage's work) that the transfers, not the work, set the period: the
    # floor (the least flow-LP period over every placement of the state) counts them, the lower
    # bound does not, and the mapping is within 5% of the floor.
    times = np.array([[1.0, 2.0, 2.0], [3.0, 6.0, 6.0], [2.0, 4.0, 4.0], [1.0, 2.0, 2.0]]) * 1e-3
    p = problem(times, [False, True, False, False], devices=3, edges=[(i, i + 1, 1e6) for i in range(3)], bw=1e8)
    floor = period_floor(p)
    lb, _ = period_lower_bound(p)
    assert floor is not None and floor > 1.2 * lb
    m = map_pipeline(p, 64)
    assert m.period <= 1.05 * floor


STREAM = {"FRAMES": 6, "FRAME": 512, "BANDS": 3}


def stream_expected(**params):
    module = load("fm_stream.py", **params)
    return [module.fm_stream(i) for i in range(params["FRAMES"])]


def test_a_stream_program_runs_through_the_pipeline_executor_with_identical_results(tmp_path, capsys, hetero_cluster):
    expected = stream_expected(**STREAM)
    plan = tmp_path / "plan.yaml"
    # --mapper maps only the other strategies' candidates (their estimates): HEFT, the cheaper, here;
    # the stream sample through the default mapper is tests/strategies/test_strategy_samples'
    p = compile_cli("fm_stream.py", hetero_cluster, STREAM, "pipeline", plan, "--mapper", "heft")
    assert p.objective == "throughput" and p.pipeline.items == 6
    assert p.pipeline.period >= p.pipeline.lower_bound > 0
    assert p.pipeline.items_per_second == pytest.approx(1 / p.pipeline.period)
    for st in p.pipeline.stages:
        if st.stateful:
            assert len(st.replicas) == 1
    assert main(["show", str(plan)]) == 0
    out = capsys.readouterr().out
    assert "strategy: pipeline" in out and "items/s" in out and "lower bound" in out
    assert main(["run", str(plan), "--emulate", "-o", str(tmp_path / "out.npz"), "--no-progress"]) == 0
    got = np.load(tmp_path / "out.npz")
    for i, e in enumerate(expected):
        np.testing.assert_array_equal(got[f"result_{i}"], e)


def test_stateful_calls_are_chained_in_program_order():
    g = load_source_graph(SAMPLES / "fm_stream.py", STREAM)
    assert g.has_edge("demodulate[0]@fm_stream.py:113", "demodulate[1]@fm_stream.py:113")
    assert g.edges["smooth[4]@fm_stream.py:115", "smooth[5]@fm_stream.py:115"]["bytes"] == 0.0


SLOW = '''
import time
import numpy as np

# @stream param
ITEMS = 6

# @stream kernel(flops=1e9, out=8)
def produce(i):
    time.sleep(0.03)
    return np.array([float(i)])

# @stream kernel(flops=1e9, out=8, stateful=True)
def consume(x):
    time.sleep(0.03)
    return x * 2

# @stream kernel(flops=1, out=8)
def fail_on(x, bad):
    if bad >= 0 and int(x[0]) == bad:
        raise ValueError("bad item")
    return x

# @stream pipeline(items=ITEMS)
def stream(i, bad=-1):
    return fail_on(consume(produce(i)), bad)
'''


def test_stages_work_on_different_items_at_once_within_a_bounded_window(tmp_path):
    from streammap.runtime.devices import check_devices, make_devices
    from streammap.runtime.loader import load_program
    from streammap.runtime.pipeline import PipelineExecutor
    (tmp_path / "slow.py").write_text(SLOW)
    plan = streammap.compile(tmp_path / "slow.py", cluster=two_gpus(), strategy="pipeline", history=False)
    program = load_program(plan)
    ex = PipelineExecutor(plan, program.kernels, make_devices(check_devices(plan, emulate=True)), window=2)
    out = ex.run()
    assert out.error is None
    assert [float(out.outputs[f"result_{i}"][0]) for i in range(6)] == [2.0 * i for i in range(6)]
    span = {}
    for k, t in enumerate(plan.tasks):
        i = stage_of(t.id)[1]
        s, f = span.get(i, (np.inf, -np.inf))
        span[i] = (min(s, out.starts[k]), max(f, out.finishes[k]))
    # pipelined: item i+1 starts before item i has finished
    assert any(span[i + 1][0] < span[i][1] for i in range(5))
    # bounded: never more than 2 items in flight
    for i in range(6):
        t = span[i][0] + 1e-6
        assert sum(1 for s, f in span.values() if s <= t < f) <= 2
    consume = [t.device for t in plan.tasks if t.kernel == "consume"]
    assert len(consume) == 6 and len(set(consume)) == 1       # the stateful stage stays on one device


def test_a_failing_stage_stops_the_stream_with_the_kernel_error(tmp_path):
    (tmp_path / "slow.py").write_text(SLOW.replace("def stream(i, bad=-1)", "def stream(i, bad=2)"))
    plan = streammap.compile(tmp_path / "slow.py", cluster=two_gpus(), strategy="pipeline", history=False)
    write_plan(plan, tmp_path / "plan.yaml")
    assert main(["run", str(tmp_path / "plan.yaml"), "--emulate", "-o", str(tmp_path / "o.npz"), "--no-progress"]) == 1
    assert not (tmp_path / "o.npz").exists()
    with pytest.raises(KernelError, match="fail_on"):
        streammap.run(plan, emulate=True)


# -- model parallelism --------------------------------------------------------------------------

MLP = {"BATCHES": 3, "ROWS": 16, "WIDTH": 512, "LAYERS": 8}


def test_layers_that_do_not_fit_one_device_are_partitioned_by_memory(tmp_path):
    expected = load("model_parallel_mlp.py", **MLP).mlp()
    plan = tmp_path / "plan.yaml"
    p = compile_cli("model_parallel_mlp.py", TINY, MLP, "model", plan)
    assert p.strategy.chosen == "model" and p.mapper.name == "model-partition"
    layers = {}
    for t in p.tasks:
        if t.kernel == "dense_relu":
            layers.setdefault(stage_of(t.id)[0], set()).add(t.device)
    assert len({d for ds in layers.values() for d in ds}) >= 2
    assert main(["run", str(plan), "--emulate", "-o", str(tmp_path / "out.npz"), "--no-progress"]) == 0
    np.testing.assert_array_equal(np.load(tmp_path / "out.npz")["result"], expected)


def test_every_strategy_plan_respects_device_memory():
    from streammap.compiler import resolve_cluster
    from streammap.mappers import get_mapper
    from streammap.strategies import choose_strategy
    g = load_source_graph(SAMPLES / "model_parallel_mlp.py", MLP)
    clus = resolve_cluster(TINY)
    choice = choose_strategy(g, clus, map_fn=get_mapper("heft"), strategy="model")
    assert "model" in choice.estimates and "none" in choice.estimates
    c = choice.chosen
    _, valid, peak = evaluate(c.cost, c.schedule)
    assert valid and peak.max() <= c.cost.capacity.max()
    assert (peak > 0).sum() >= 2        # the weights (8 MiB) cannot all live on one 6 MiB device


def test_the_choice_gives_the_plan_its_strategy_block():
    from streammap.compiler import resolve_cluster
    from streammap.mappers import get_mapper
    from streammap.plan import StrategyInfo
    from streammap.strategies import choose_strategy
    g = load_source_graph(SAMPLES / "model_parallel_mlp.py", MLP)
    choice = choose_strategy(g, resolve_cluster(TINY), map_fn=get_mapper("heft"), strategy="model")
    info = choice.info()
    assert isinstance(info, StrategyInfo)
    assert (info.chosen, info.forced, info.estimates) == ("model", True, choice.estimates)
    assert info.reason.startswith("model (forced by --strategy)")
    plan = streammap.compile(SAMPLES / "model_parallel_mlp.py", cluster=TINY, params=MLP, mapper="heft",
                             strategy="model", history=False)
    assert plan.strategy == info


def test_model_does_not_apply_to_a_program_that_fits_one_device():
    plan = streammap.compile(SAMPLES / "model_parallel_mlp.py", cluster=two_gpus(), params=MLP, history=False)
    assert "fits one device" in plan.strategy.skipped["model"]
    assert_auto_picked_the_least(plan)


# -- choosing -----------------------------------------------------------------------------------

def test_auto_picks_the_lowest_estimate_for_every_sample():
    cases = [("fm_stream.py", STREAM), ("mandelbrot.py", MANDEL), ("model_parallel_mlp.py", MLP),
             ("fm_radio.py", {"N": 1024, "BANDS": 4})]
    # The choice compares the candidates' estimates whichever mapper made them: HEFT maps them here
    # (auto maps a split graph in the forced-split test above, and fits-one-device below)
    for sample, params in cases:
        plan = streammap.compile(SAMPLES / sample, cluster=TINY, params=params, mapper="heft", history=False)
        assert_auto_picked_the_least(plan)
        assert plan.strategy.reason


def test_an_unknown_or_inapplicable_strategy_is_a_clear_error(tmp_path, capsys):
    with pytest.raises(StreamMapError, match="unknown strategy"):
        streammap.compile(SAMPLES / "fm_radio.py", cluster=two_gpus(), strategy="magic")
    assert main(["compile", str(SAMPLES / "fm_radio.py"), "--cluster", str(TINY), "-D", "N=1024",
                 "--strategy", "pipeline", "-o", str(tmp_path / "p.yaml")]) == 2
    assert "not a # @stream pipeline" in capsys.readouterr().err
    assert not (tmp_path / "p.yaml").exists()


def test_a_plan_from_before_strategies_still_reads_and_shows(tmp_path):
    plan = streammap.compile(SAMPLES / "fm_radio.py", cluster=two_gpus(), params={"N": 1024}, history=False)
    plan.strategy = None
    write_plan(plan, tmp_path / "old.yaml")
    text = (tmp_path / "old.yaml").read_text()
    assert "strategy" not in text and "pipeline" not in text
    from streammap.views.show import plan_summary
    assert "strategy: none (a plan from before" in plan_summary(read_plan(tmp_path / "old.yaml"))


def test_a_pipeline_block_naming_unknown_tasks_is_refused(tmp_path):
    (tmp_path / "slow.py").write_text(SLOW)
    plan = streammap.compile(tmp_path / "slow.py", cluster=two_gpus(), strategy="pipeline", history=False)
    write_plan(plan, tmp_path / "plan.yaml")
    text = (tmp_path / "plan.yaml").read_text()
    tid = next(t.id for t in plan.tasks if t.kernel == "consume")
    assert tid in text
    head, tail = text.rsplit(tid, 1)                 # its entry in the pipeline block (after the tasks)
    text = head + tid.replace("[0]", "[9]") + tail
    (tmp_path / "bad.yaml").write_text(text)
    with pytest.raises(StreamMapError, match="unknown task"):
        read_plan(tmp_path / "bad.yaml")


def test_a_pipeline_plan_is_the_same_byte_for_byte_when_compiled_again():
    # The pipeline's own mapping (stages, replicas, the period's bound) does not use --mapper, which
    # maps only the other strategies' candidates for their estimates: HEFT there, as auto's plans are
    # the same bytes again by tests of their own (tests/cli, tests/mappers/test_auto_candidates).
    a = streammap.compile(SAMPLES / "fm_stream.py", cluster=TINY, params=STREAM, strategy="pipeline",
                          mapper="heft", history=False)
    b = streammap.compile(SAMPLES / "fm_stream.py", cluster=TINY, params=STREAM, strategy="pipeline",
                          mapper="heft", history=False)
    assert a.strategy.chosen == "pipeline" and a.pipeline is not None
    assert a.to_yaml() == b.to_yaml()


GPU_STREAM = '''
import numpy as np

# @stream param
ITEMS = 6

# @stream kernel(flops=1e3, out=64)
def produce(i):
    return np.arange(8.0) + i

# @stream kernel(flops=1e9, out=64)
def scale(x):
    return x * 3

_acc = {"sum": None}

# @stream kernel(flops=1e3, out=64, stateful=True)
def running(x):
    _acc["sum"] = x.copy() if _acc["sum"] is None else _acc["sum"] + x
    return _acc["sum"].copy()

# @stream pipeline(items=ITEMS)
def stream(i):
    return running(scale(produce(i)))
'''


def test_a_pipeline_runs_on_gpus_moving_items_between_them(tmp_path, fake_cupy):
    fake = fake_cupy(2)
    (tmp_path / "gs.py").write_text(GPU_STREAM)
    plan = streammap.compile(tmp_path / "gs.py", cluster=two_gpus(), strategy="pipeline", history=False)
    assert len({t.device for t in plan.tasks if t.kernel == "scale"}) == 2     # replicated over both GPUs
    out = streammap.run(plan, telemetry=False)
    expected = np.cumsum([(np.arange(8.0) + i) * 3 for i in range(6)], axis=0)
    for i in range(6):
        assert type(out[f"result_{i}"]) is np.ndarray
        np.testing.assert_array_equal(out[f"result_{i}"], expected[i])
    assert fake.fake_stats["uploads"] > 0 and fake.fake_stats["peer_copies"] > 0


def test_shards_are_sized_by_device_speed_on_a_heterogeneous_cluster(hetero_cluster):
    from streammap.cluster.model import load_cluster
    hetero = load_cluster(hetero_cluster)
    big = load_source_graph(SAMPLES / "mandelbrot.py", {"ROWS": 4096, "COLS": 4096, "ITER": 512})
    (c,) = choose_shards(big, hetero)
    assert c.k == 8 and c.speedup > 4            # beyond the four A100s: the V100s help too
    by_model = {}
    for f, pin in zip(c.fractions, c.pins):
        by_model.setdefault(pin, []).append(f)
    assert set(by_model) == {"A100-SXM4-80GB", "Tesla-V100-SXM2-32GB"}
    assert min(by_model["A100-SXM4-80GB"]) > 1.5 * max(by_model["Tesla-V100-SXM2-32GB"])
    plan = streammap.compile(SAMPLES / "mandelbrot.py", cluster=hetero_cluster, params={"ROWS": 4096, "COLS": 4096, "ITER": 512},
                             history=False, mapper="heft")
    assert plan.strategy.chosen == "data" and plan.strategy.splits == {c.task: 8}
    shards = [t for t in plan.tasks if "~shard" in t.id]
    assert len({t.device for t in shards}) == 8


def test_unequal_shards_join_back_into_the_unsplit_result(tmp_path):
    from streammap.compiler import build_plan
    from streammap.cost.model import CostModel, lower_bound
    from streammap.mappers import get_mapper
    from streammap.strategies.kernels import gather, scatter
    x = np.arange(30.0).reshape(10, 3)
    parts = scatter(x, [0.5, 0.3, 0.2], 0)
    assert [p.shape[0] for p in parts] == [5, 3, 2]
    np.testing.assert_array_equal(gather(list(parts), 0), x)
    g = load_source_graph(SAMPLES / "mandelbrot.py", MANDEL)
    (esc,) = splittable(g)
    s = split_graph(g, {esc: [0.45, 0.35, 0.2]})
    cost = CostModel(s, two_gpus(n=3))
    plan = build_plan(s, two_gpus(n=3), cost, get_mapper("heft")(cost), source_path=SAMPLES / "mandelbrot.py",
                      lower=lower_bound(cost), heft_makespan=None)
    got = streammap.run(plan, emulate=True, telemetry=False)
    expected = load("mandelbrot.py", **MANDEL).mandelbrot()
    np.testing.assert_array_equal(got["counts"], expected["counts"])


def test_a_remapped_pipeline_plan_becomes_a_valid_dag_plan(tmp_path):
    from streammap.remap import remap_plan
    (tmp_path / "slow.py").write_text(SLOW)
    plan = streammap.compile(tmp_path / "slow.py", cluster=two_gpus(), strategy="pipeline", history=False)
    lost = plan.tasks[0].device
    result = remap_plan(plan, {}, 0.0, lost={lost})
    assert result.plan.pipeline is None
    assert all(t.device != lost for t in result.plan.tasks)


def test_a_pipeline_plan_also_runs_as_a_dag_with_the_same_results(tmp_path):
    (tmp_path / "slow.py").write_text(SLOW.replace("time.sleep(0.03)", "pass"))
    plan = streammap.compile(tmp_path / "slow.py", cluster=two_gpus(), strategy="pipeline", history=False)
    streamed = streammap.run(plan, emulate=True, telemetry=False)
    as_dag = streammap.run(plan.model_copy(update={"pipeline": None}), emulate=True, telemetry=False)
    assert streamed.keys() == as_dag.keys()
    for key in streamed:
        np.testing.assert_array_equal(streamed[key], as_dag[key])


def test_state_is_placed_by_what_items_cost_to_move_and_the_floor_explains_a_missed_target(shared):
    from streammap.cluster.model import load_cluster
    from streammap.cost.model import CostModel
    from streammap.strategies.pipeline import period_floor, stage_problem
    g = load_source_graph(SAMPLES / "fm_stream.py", {})
    # Microsecond stages: every stage computes at the device's matrix-product rate, so moving the
    # frames, not computing them, is what the period is made of.
    for n in g.nodes:
        g.nodes[n]["compute_class"] = "blas"
    problem = stage_problem(CostModel(g, load_cluster(shared / "clusters" / "mixed-vendors.yaml")), 32)
    m = map_pipeline(problem, 32)
    floor = period_floor(problem)
    # 256 KB frames over a 25 GB/s network, microsecond stages: the state's place decides the period
    assert floor <= m.period <= 1.01 * floor
    assert m.period < 1.25 * m.lower_bound            # 1.6 x when placed by compute alone
    assert floor > 1.15 * m.lower_bound               # and no mapping of the model reaches 1.15
