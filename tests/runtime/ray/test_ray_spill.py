"""Spilling inside a Ray device actor, on a fake CuPy (no Ray cluster: the actors run in-process).

What a user relies on: under memory oversubscription a GPU actor keeps its device within its
capacity, counting the CUDA IPC copies that wait for another GPU's consumer; a result whose device
copy was spilled still reaches that consumer intact through its IPC copy, comes back bit-identical
for the producer's own later task, and the actor reports the run record's spill fields.
(The same on the 2-node Ray test cluster: tests/runtime/ray/test_ray.py.)
"""


import numpy as np
import pytest

from streammap.runtime.loader import ProgramFiles
from tests.helpers.plans import FAN, make_plan, ref, task

ROW = 64 * 8                      # one result of FAN: N = 64 doubles


def test_a_gpu_actor_spills_around_an_ipc_copy_and_every_consumer_gets_the_right_data(cp, tmp_path, monkeypatch):
    ray = pytest.importorskip("ray")
    from streammap.runtime.ray import executor as ray_executor
    from streammap.runtime.ray import ipc
    from streammap.runtime.ray.spill import spill_tables
    from streammap.runtime.spill import Spilled
    Step = ray_executor.ActorStep      # task id, kernel, args, kwargs, remote ids, frees, store, retries, site

    devices = [{"id": "node0/gpu0", "kind": "gpu", "vendor": "nvidia", "memory": 3 * ROW},
               {"id": "node0/gpu1", "kind": "gpu", "vendor": "nvidia", "memory": 1e9}]
    tasks = [{**task("src", "source", "node0/gpu0"), "out": ROW},
             {**task("a", "scale", "node0/gpu0", ref("src"), 1), "out": ROW},
             {**task("b", "scale", "node0/gpu0", ref("src"), 2), "out": ROW},
             {**task("c", "scale", "node0/gpu1", ref("a"), 2), "out": ROW},
             {**task("sum", "total", "node0/gpu0", ref("a"), ref("b")), "out": ROW}]
    plan = make_plan(tmp_path, FAN, tasks, devices=devices, outputs={"tuple": [ref("sum"), ref("c")]})
    plan.cluster.spec = {"name": "test", "memory_oversubscription": 3.0}
    ordinals = iter([0, 1])
    monkeypatch.setattr(ray_executor, "_own_cuda_ordinal", lambda: next(ordinals))
    source = ProgramFiles.of(plan)            # the program and its local modules, as the executor ships them
    producer = ray_executor.DeviceActor(plan, source, "node0/gpu0", "cupy", False)
    consumer = ray_executor.DeviceActor(plan, source, "node0/gpu1", "cupy", False)
    t = plan.tasks
    producer.prepare({0: Step("src", "source", [], {}, (), (), True, 0, "prog.py:src"),
                      1: Step("a", "scale", t[1].args, {}, (), (), True, 0, "prog.py:a"),
                      2: Step("b", "scale", t[2].args, {}, (), ("src",), True, 0, "prog.py:b"),
                      4: Step("sum", "total", t[4].args, {}, (), ("a", "b"), True, 0, "prog.py:sum")})
    consumer.prepare({3: Step("c", "scale", t[3].args, {}, ("a",), (), True, 0, "prog.py:c")})
    tables = spill_tables(plan, list(range(5)), {x.id: x.device for x in t}, {}, {"sum", "c"})
    producer.prepare_spilling(tables["node0/gpu0"])
    consumer.prepare_spilling(tables["node0/gpu1"])

    producer.run(0, None)
    _, desc = producer.run_share(1, None)                 # src, a and a's IPC copy: the 3 rows are full
    assert not any(isinstance(v, Spilled) for v in producer.values.values())
    producer.run(2, None)          # b needs a row: src is its input, the copy is pinned, so a goes out
    assert isinstance(producer.values["a"], Spilled) and "src" not in producer.values
    consumer.run(3, None, desc)                           # ... and its IPC copy still reads right
    assert ipc.has_shared(desc) and np.array_equal(consumer.values["c"].get(), np.arange(64.0) * 6)

    # the consumer is done: the producer's next call frees the copy (and the book forgets it)
    monkeypatch.setattr(ray, "wait", lambda refs, **kw: (list(refs), []))
    producer.run(4, [("a", ["consumer-done"])])
    assert "a" not in producer.shared
    assert np.array_equal(producer.export("sum"), np.arange(64.0) * 5)     # a (restored) + b
    rec = producer.spill_report()
    assert rec["spilled_bytes"] == rec["restored_bytes"] == ROW and rec["spills"] == rec["restores"] == 1
    assert rec["overflow"] == 0.0 and rec["seconds"] > 0
    assert consumer.spill_report()["spilled_bytes"] == 0
