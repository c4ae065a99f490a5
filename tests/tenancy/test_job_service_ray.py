"""The job service on a Ray cluster: ``streammap serve --backend ray --address ...``.

This module starts its own 2-node Ray cluster (``ray.cluster_utils.Cluster``: a head labelled
``node0`` without GPUs, a worker labelled ``node1`` with 2 fake GPUs; a private temp dir, a small
object store, usage stats off) and stops it, and only it, when its tests are done. The service
grants a job GPUs of ``node1``, re-maps the program onto them and runs it with the Ray executor,
emulated on the CPU.
"""

from __future__ import annotations

import os
import shutil
import tempfile

import numpy as np
import pytest

ray = pytest.importorskip("ray")

from ray.cluster_utils import Cluster  # noqa: E402

import streammap  # noqa: E402
from streammap.runrecord import read_run_record  # noqa: E402
from tests.helpers.paths import SAMPLES  # noqa: E402
from tests.tenancy.test_job_service import TENANTS, VISION, Service, wait_for  # noqa: E402

ENV = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}
STORE = 80 * 2**20

RAY_CLUSTER = """\
name: raybox
network: {bandwidth: 25 GB/s, latency: 10us}
nodes:
  - name: node0
    devices:
      - {name: cpu, kind: cpu, memory: 16GiB}
  - name: node1
    link: {bandwidth: 300 GB/s, latency: 3us}
    devices:
      - {name: gpu0, kind: gpu, vendor: nvidia, model: A100, memory: 80GiB}
      - {name: gpu1, kind: gpu, vendor: nvidia, model: A100, memory: 80GiB}
      - {name: cpu, kind: cpu, memory: 16GiB}
"""


@pytest.fixture(scope="module")
def ray_cluster():
    env = pytest.MonkeyPatch()                                  # module-scoped: undone at the end
    tmp = tempfile.mkdtemp(prefix="smsvc", dir="/tmp")        # short: Unix socket paths
    for k, v in {**ENV, "RAY_TMPDIR": tmp}.items():
        env.setenv(k, v)                                       # the service and its workers inherit them
    c = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 2, "num_gpus": 0, "object_store_memory": STORE, "labels": {"streammap-node": "node0"},
        "temp_dir": os.path.join(tmp, "ray"), "include_dashboard": False})
    try:
        c.add_node(num_cpus=2, num_gpus=2, object_store_memory=STORE, labels={"streammap-node": "node1"})
        c.wait_for_nodes()
        yield c
    finally:
        c.shutdown()
        env.undo()
        shutil.rmtree(tmp, ignore_errors=True)


def test_the_service_runs_a_job_on_the_ray_executor(ray_cluster, tmp_path):
    (tmp_path / "cluster.yaml").write_text(RAY_CLUSTER)
    (tmp_path / "tenants.yaml").write_text(TENANTS)
    svc = Service(tmp_path, "--backend", "ray", "--address", ray_cluster.address, "--no-isolation")
    try:
        vision = svc.client(VISION)
        fm = SAMPLES / "fm_radio.py"
        job = vision.submit(fm, "vision", {"N": "4096"})
        status = wait_for(vision, job, timeout=90)
        assert status["model"] == "A100" and set(status["devices"]) <= {"node1/gpu0", "node1/gpu1"}
        vision.result(job, tmp_path / "out.npz")
    finally:
        svc.stop()
    want = streammap.run(streammap.compile(fm, cluster=str(tmp_path / "cluster.yaml"), params={"N": 4096},
                                           history=False), emulate=True)["result"]
    np.testing.assert_allclose(np.load(tmp_path / "out.npz")["result"], want, rtol=1e-6)
    # It ran on Ray, on the node that holds the granted GPUs, re-mapped onto exactly those.
    record = read_run_record(svc.state / "jobs" / job / "result.run.json")
    assert record.backend == "ray" and record.status == "ok"
    executors = {d.id: d.executor for d in record.devices}
    assert sorted(executors) == sorted(status["devices"])
    assert all("on Ray node node1" in e for e in executors.values())
