"""GPU-to-GPU hand-offs between the Ray actors of one node (CUDA IPC), on a fake CuPy.

What a user relies on: a result consumed by another GPU of the same node moves GPU to GPU, bit
for bit, never through host memory; results for other nodes or CPUs still go through the host;
a shared copy is freed once its consumers are done; a handle whose producer died is an input lost
with its node (recovery), not a crash.
"""

import pickle

import numpy as np
import pytest

from streammap.runtime.loader import ProgramFiles
from streammap.runtime.ray import ipc
from tests.helpers.fake_cupy import cuda_device_count
from tests.helpers.plans import FAN, cpu_devices, gpu_devices, make_plan, ref, task


def test_a_shared_result_arrives_on_the_other_gpu_bit_identical(cp):
    a = np.random.default_rng(0).standard_normal((64, 3))
    with cp.cuda.Device(0):
        produced = (cp.asarray(a), {"n": 3, "b": cp.asarray(np.arange(5, dtype=np.int32))})
        stream = cp.cuda.Stream(non_blocking=True)
        keep = []
        desc = ipc.share(cp, produced, 0, stream, keep)
    assert ipc.has_shared(desc) and len(keep) == 2
    desc = pickle.loads(pickle.dumps(desc))                  # what Ray does to it
    uploads = cp.fake_stats["uploads"]
    with cp.cuda.Device(1):
        got = ipc.receive(cp, desc, 1, cp.cuda.Stream(non_blocking=True))
    arr, rest = got
    assert isinstance(arr, cp.ndarray) and arr.device_id == 1 and rest["n"] == 3
    assert arr.get().tobytes() == a.tobytes() and rest["b"].get().tolist() == [0, 1, 2, 3, 4]
    assert cp.fake_stats["ipc_copies"] == 2 and cp.fake_stats["uploads"] == uploads   # no host hop


def test_a_freed_shared_copy_cannot_be_opened_and_is_reported_lost(cp):
    with cp.cuda.Device(0):
        keep = []
        desc = ipc.share(cp, cp.asarray(np.ones(4)), 0, cp.cuda.Stream(), keep)
    keep.clear()                                             # the producer freed it (or died)
    with cp.cuda.Device(1), pytest.raises(ipc.ShareLost):
        ipc.receive(cp, desc, 1, cp.cuda.Stream())


@pytest.mark.parametrize("gpu_id, visible, ordinal", [
    (0, "", 0), (3, "", 3), ("2", "2,3", 0), (3, "2,3", 1), ("5", "0,1", 5)])
def test_an_actor_finds_its_gpu_among_the_nodes_gpus(gpu_id, visible, ordinal):
    assert ipc.cuda_ordinal(gpu_id, visible) == ordinal


def _fan_plan(tmp_path):
    devices = gpu_devices(2, "node0") + gpu_devices(1, "node1") + cpu_devices(1, "node0")
    tasks = [task("src", "source", "node0/gpu0"),
             task("a", "scale", "node0/gpu1", ref("src"), 1),
             task("b", "scale", "node1/gpu0", ref("src"), 2),
             task("c", "scale", "node0/cpu", ref("src"), 3),
             task("sum", "total", "node0/gpu0", ref("src"), ref("a"))]
    return make_plan(tmp_path, FAN, tasks, devices=devices, outputs=ref("sum"))


def _executor(plan, emulate=False):
    from streammap.runtime.ray.executor import RayExecutor
    ex = RayExecutor.__new__(RayExecutor)        # the decision alone: no Ray cluster needed
    ex.plan, ex.emulate = plan, emulate
    ex.node_of_device = {d.id: d.id.split("/")[0] for d in plan.devices}
    return ex


def test_only_gpus_of_one_node_hand_results_over_by_ipc(tmp_path):
    plan = _fan_plan(tmp_path)
    ex = _executor(plan)
    assert ex._peers("node0/gpu0", "node0/gpu1")             # same node, both GPUs
    assert not ex._peers("node0/gpu0", "node1/gpu0")         # another node: through the host
    assert not ex._peers("node0/gpu0", "node0/cpu")          # the CPU reads host memory
    assert not _executor(plan, emulate=True)._peers("node0/gpu0", "node0/gpu1")


def test_device_actors_hand_a_result_gpu_to_gpu_and_free_it_after_its_consumer(cp, tmp_path, monkeypatch):
    import ray

    from streammap.runtime.ray import executor as ray_executor
    Step = ray_executor.ActorStep      # task id, kernel, args, kwargs, remote ids, frees, store, retries, site
    plan = _fan_plan(tmp_path)
    ordinals = iter([0, 1])
    monkeypatch.setattr(ray_executor, "_own_cuda_ordinal", lambda: next(ordinals))
    source = ProgramFiles.of(plan)            # the program and its local modules, as the executor ships them
    producer = ray_executor.DeviceActor(plan, source, "node0/gpu0", "cupy", False)
    consumer = ray_executor.DeviceActor(plan, source, "node0/gpu1", "cupy", False)
    step = {0: Step("src", "source", [], {}, (), (), True, 0, "prog.py:src")}
    producer.prepare(step)
    consumer.prepare({1: Step("a", "scale", plan.tasks[1].args, {}, ("src",), (), True, 0, "prog.py:a")})
    meta, desc = producer.run_share(0, None)
    assert meta[0] == 0 and ipc.has_shared(desc) and "src" in producer.shared
    uploads = cp.fake_stats["uploads"]
    consumer.run(1, None, desc)
    out = consumer.values["a"]
    assert out.device_id == 1 and np.array_equal(out.get(), np.arange(64.0) * 2)
    assert cp.fake_stats["ipc_copies"] == 1 and cp.fake_stats["uploads"] == uploads

    # the driver passes the consumer's completion ref with the producer's next call: once done,
    # the shared copy is freed
    producer.prepare({2: Step("sum", "total", plan.tasks[4].args, {}, ("a",), (), True, 0, "prog.py:sum")})
    producer.shared["src"] = ([object()], [])
    monkeypatch.setattr(ray, "wait", lambda refs, **kw: (list(refs), []))
    producer._reap([("src", ["consumer-done"])])
    assert "src" not in producer.shared


def _share_in_child(queue, done):
    import cupy
    a = cupy.arange(1 << 16, dtype=cupy.float32) * 3
    keep = []
    with cupy.cuda.Device(0):
        queue.put(ipc.share(cupy, a, 0, cupy.cuda.Stream(non_blocking=True), keep))
    done.wait(60)                     # the copy stays alive until the parent has received it


@pytest.mark.gpu
@pytest.mark.skipif(cuda_device_count() == 0, reason="needs CuPy and a CUDA device")
def test_cuda_ipc_between_two_processes_on_a_real_gpu():
    import multiprocessing as mp

    import cupy
    ctx = mp.get_context("spawn")
    queue, done = ctx.Queue(), ctx.Event()
    child = ctx.Process(target=_share_in_child, args=(queue, done))
    child.start()
    try:
        desc = queue.get(timeout=120)
        with cupy.cuda.Device(0):
            got = ipc.receive(cupy, desc, 0, cupy.cuda.Stream(non_blocking=True))
        assert cupy.asnumpy(got).tolist() == (np.arange(1 << 16, dtype=np.float32) * 3).tolist()
    finally:
        done.set()
        child.join(60)


def test_rocm_gpus_hand_results_over_through_the_host(tmp_path):
    devices = [dict(d, vendor="amd", model="MI300X") for d in gpu_devices(2, "node0")]
    plan = make_plan(tmp_path, FAN, [task("src", "source", "node0/gpu0"), task("a", "scale", "node0/gpu1", ref("src"), 1)],
                     devices=devices, outputs=ref("a"))
    assert not _executor(plan)._peers("node0/gpu0", "node0/gpu1")
