"""Importers: WfCommons and node-link JSON become the IR, and bad files get a useful error."""

import json

import pytest

from streammap.errors import StreamMapError
from streammap.io.importers import load_graph
from streammap.ir import NODE_DEFAULTS
from tests.helpers.paths import SHARED, needs_shared

GRAPH_FILES = sorted(SHARED.glob("workflows/*.json")) + sorted(SHARED.glob("cholesky/*.json")) + \
    sorted(SHARED.glob("classic/*.json"))


@needs_shared
@pytest.mark.parametrize("path", GRAPH_FILES, ids=lambda p: p.stem)
def test_every_shared_graph_loads_as_a_workflow_ir(path):
    g = load_graph(path)
    data = json.loads(path.read_text())
    if "workflow" in data:
        n_tasks = len(data["workflow"]["specification"]["tasks"])
    else:
        n_tasks = len(data["nodes"])
        assert g.number_of_edges() == len(data.get("edges", data.get("links")))
    assert g.number_of_nodes() == n_tasks
    assert g.graph["kind"] == "workflow"
    assert g.graph["source"] == str(path)
    for tid, a in g.nodes(data=True):
        assert set(NODE_DEFAULTS) <= set(a)
        assert isinstance(tid, str) and a["kernel"]
        assert a["runtime"] is not None or a["times"]
    for _, _, b in g.edges(data="bytes"):
        assert b >= 0


@needs_shared
def test_wfcommons_edges_memory_and_outputs_follow_the_benchmark_model():
    path = SHARED / "workflows" / "srasearch-chameleon-10a-001.json"
    wf = json.loads(path.read_text())["workflow"]
    size = {f["id"]: f["sizeInBytes"] for f in wf["specification"]["files"]}
    spec = {t["id"]: t for t in wf["specification"]["tasks"]}
    run = {t["id"]: t for t in wf["execution"]["tasks"]}
    g = load_graph(path)
    assert list(g.nodes) == list(spec)                          # ids and order kept
    for u, v, b in g.edges(data="bytes"):
        assert v in spec[u]["children"]
        shared = set(spec[u]["outputFiles"]) & set(spec[v]["inputFiles"])
        assert b == sum(size[f] for f in shared) > 0
    for tid, t in spec.items():
        a = g.nodes[tid]
        io = sum(size[f] for f in set(t["inputFiles"]) | set(t["outputFiles"]))
        assert a["runtime"] == run[tid]["runtimeInSeconds"]
        assert a["mem"] == max(run[tid]["memoryInBytes"], io)
        consumed = set()
        for c in t["children"]:
            consumed |= set(t["outputFiles"]) & set(spec[c]["inputFiles"])
        assert a["out"] == sum(size[f] for f in consumed)
    assert g.nodes["bowtie2-build_ID0000001"]["kernel"] == "bowtie2-build"


def test_wfcommons_without_memory_uses_inputs_plus_outputs(shared):
    g = load_graph(shared / "workflows" / "1000genome-chameleon-2ch-100k-001.json")
    a = g.nodes["individuals_ID0000001"]
    assert a["mem"] > 1e9                                       # the 1 GB input vcf counts
    sinks = [t for t in g if g.out_degree(t) == 0]
    assert sinks and all(g.nodes[t]["out"] == 0 for t in sinks)


def test_node_link_keeps_times_bytes_and_leaves_mem_to_the_cost_model(shared):
    g = load_graph(shared / "classic" / "topcuoglu-10.json")
    assert g.graph["name"] == "topcuoglu-2002-fig2"
    assert g.nodes["T0"]["times"] == {"P0": 14.0, "P1": 16.0, "P2": 9.0}
    assert g.nodes["T0"]["mem"] is None and g.nodes["T0"]["runtime"] is None
    assert g.edges["T0", "T1"]["bytes"] == 18
    c = load_graph(shared / "cholesky" / "cholesky-n8-nb128.json")
    assert c.nodes["GEMM(2,1,0)"]["mem"] == 3 * 131072


def _write(tmp_path, obj, name="g.json"):
    p = tmp_path / name
    p.write_text(obj if isinstance(obj, str) else json.dumps(obj, indent=1))
    return p


def test_node_link_accepts_links_and_numeric_ids(tmp_path):
    p = _write(tmp_path, {"directed": True, "graph": {}, "nodes": [
        {"id": 1, "kernel": "a", "runtime": 1.0}, {"id": 2, "kernel": "b", "runtime": 2, "mem": 10}],
        "links": [{"source": 1, "target": 2, "bytes": 5}]})
    g = load_graph(p)
    assert list(g.nodes) == ["1", "2"]
    assert g.edges["1", "2"]["bytes"] == 5.0
    assert g.nodes["2"]["mem"] == 10.0
    assert g.graph["name"] == "g"


@pytest.mark.parametrize("content, words", [
    ('{"nodes": [\n  {"id": "a",}\n]}', ["not valid JSON"]),
    ({"hello": 1}, ["unknown task-graph format"]),
    ({"directed": True, "nodes": [{"id": "a", "kernel": "k"}], "edges": []}, ["a", "no runtime"]),
    ({"directed": True, "nodes": [{"id": "a", "runtime": 1}], "edges": [{"source": "a", "target": "zz"}]},
     ["zz", "not a node"]),
    ({"directed": True, "nodes": [{"id": "a", "runtime": 1}, {"id": "b", "runtime": 1}],
      "edges": [{"source": "a", "target": "b"}, {"source": "b", "target": "a"}]}, ["cycle"]),
    ({"directed": True, "nodes": [{"id": "a", "runtime": -1}], "edges": []}, ["runtime", "non-negative"]),
    ({"directed": True, "nodes": [{"id": "a", "kernel": 5, "runtime": 1}], "edges": []}, ["kernel of task a", "5"]),
    ({"directed": True, "nodes": [{"id": "a", "kernel": ["k"], "runtime": 1}], "edges": []}, ["kernel of task a"]),
    ({"directed": True, "nodes": [{"id": "a", "kernel": "  ", "runtime": 1}], "edges": []}, ["kernel of task a"]),
    ({"directed": False, "nodes": [], "edges": []}, ["undirected"]),
    ({"workflow": {"specification": {"tasks": [{"id": "a", "parents": [], "children": [], "inputFiles": [],
                                                "outputFiles": []}], "files": []},
                   "execution": {"tasks": [{"id": "a"}]}}}, ["a", "runtimeInSeconds"]),
    ({"workflow": {"specification": {"tasks": [{"id": "a", "parents": [], "children": ["b"], "inputFiles": [],
                                                "outputFiles": []}], "files": []},
                   "execution": {"tasks": [{"id": "a", "runtimeInSeconds": 1}]}}}, ["'b'", "no task"]),
])
def test_bad_files_raise_an_error_naming_the_file_with_a_hint(tmp_path, content, words):
    p = _write(tmp_path, content)
    with pytest.raises(StreamMapError) as info:
        load_graph(p)
    err = info.value
    assert err.path == str(p)
    assert err.hint
    for w in words:
        assert w in err.message
    assert str(p) in err.format()


def test_json_errors_point_at_the_line(tmp_path):
    p = _write(tmp_path, '{"nodes": [\n  {"id": "a",}\n]}')
    with pytest.raises(StreamMapError) as info:
        load_graph(p)
    assert info.value.line == 2
    assert '"id": "a",}' in info.value.format()


def test_node_errors_point_at_the_node_line(tmp_path):
    p = _write(tmp_path, {"directed": True, "nodes": [{"id": "ok", "runtime": 1}, {"id": "bad", "kernel": "k"}],
                          "edges": []})
    with pytest.raises(StreamMapError) as info:
        load_graph(p)
    assert info.value.line is not None
    assert '"bad"' in info.value.source_line


def test_missing_file(tmp_path):
    with pytest.raises(StreamMapError, match="not found"):
        load_graph(tmp_path / "nope.json")


def _chain_with_a_loop_back(n, loop_from, loop_to, tail=0):
    """A node-link chain t0 -> ... -> t{n-1}, an edge back t{loop_from} -> t{loop_to}, and ``tail``
    more tasks hanging off the last one (downstream of the cycle, not on it)."""
    ids = [f"t{i}" for i in range(n + tail)]
    edges = [{"source": a, "target": b} for a, b in zip(ids, ids[1:])]
    edges.append({"source": f"t{loop_from}", "target": f"t{loop_to}"})
    return {"directed": True, "nodes": [{"id": i, "runtime": 1} for i in ids], "edges": edges}


def test_a_cycle_is_reported_as_its_tasks_in_edge_order_from_the_first_in_the_file(tmp_path):
    p = _write(tmp_path, _chain_with_a_loop_back(6, loop_from=4, loop_to=2, tail=3))
    with pytest.raises(StreamMapError) as info:
        load_graph(p)
    assert "the task graph has a cycle: t2 -> t3 -> t4 -> t2" in info.value.message
    assert '"t2"' in info.value.source_line            # the line of the cycle's first task


def test_a_task_that_consumes_its_own_output_is_a_cycle(tmp_path):
    p = _write(tmp_path, {"directed": True, "nodes": [{"id": "a", "runtime": 1}, {"id": "b", "runtime": 1}],
                          "edges": [{"source": "a", "target": "b"}, {"source": "b", "target": "b"}]})
    with pytest.raises(StreamMapError, match=r"cycle: b -> b\b"):
        load_graph(p)


def test_a_wfcommons_cycle_is_reported_too(tmp_path):
    def task(tid, parents, children):
        return {"id": tid, "parents": parents, "children": children, "inputFiles": [], "outputFiles": []}
    p = _write(tmp_path, {"workflow": {
        "specification": {"tasks": [task("a", [], ["b"]), task("b", ["a", "c"], ["c"]), task("c", ["b"], ["b"])],
                          "files": []},
        "execution": {"tasks": [{"id": t, "runtimeInSeconds": 1} for t in "abc"]}}})
    with pytest.raises(StreamMapError, match="cycle: b -> c -> b"):
        load_graph(p)


def test_a_long_chain_and_a_wide_fan_load_without_a_cycle(tmp_path):
    """The acyclicity check walks each task and edge once; 20,000 tasks in a chain and a fan."""
    n = 10_000
    chain = _chain_with_a_loop_back(n, loop_from=0, loop_to=1)        # a duplicate forward edge, no cycle
    fan = {"directed": True, "nodes": [{"id": "root", "runtime": 1}] + [{"id": f"f{i}", "runtime": 1}
                                                                      for i in range(n)],
           "edges": [{"source": "root", "target": f"f{i}"} for i in range(n)]}
    assert load_graph(_write(tmp_path, chain, "chain.json")).number_of_nodes() == n
    assert load_graph(_write(tmp_path, fan, "fan.json")).number_of_edges() == n


def test_raising_the_task_limit_raises_the_file_size_limit_with_it(tmp_path, monkeypatch):
    # A million-task node-link graph is ~480 MB, over the fixed 256 MiB: --max-tasks 1000000 must
    # let it in. Scaled down here: 100 bytes fixed, 10 bytes per task allowed.
    from streammap.io import importers

    monkeypatch.setattr(importers, "MAX_JSON_BYTES", 100)
    monkeypatch.setattr(importers, "JSON_BYTES_PER_TASK", 10)
    nodes = [{"id": f"t{i}", "kernel": "k", "runtime": 1.0} for i in range(3)]
    path = tmp_path / "g.json"
    path.write_text(json.dumps({"directed": True, "nodes": nodes, "edges": []}))
    size = path.stat().st_size
    assert size > 100
    with pytest.raises(StreamMapError, match=f"workflow file is too large: {size} bytes \\(limit: 100 bytes\\)"):
        load_graph(path, max_tasks=5)
    assert load_graph(path, max_tasks=size // 10 + 1).number_of_nodes() == 3
