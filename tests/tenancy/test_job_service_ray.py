"""The job service on a Ray cluster: ``streammap serve --backend ray --address ...``.

On the session's 2-node Ray cluster (``ray_cluster``, :mod:`tests.helpers.ray_cluster`: a head
labelled ``node0`` without GPUs, a worker labelled ``node1`` with 2 fake GPUs; a private temp dir,
a small object store, usage stats off, which the service and its workers inherit). The service
grants a job GPUs of ``node1``, re-maps the program onto them and runs it with the Ray executor,
emulated on the CPU.
"""

from __future__ import annotations

import numpy as np
import pytest

ray = pytest.importorskip("ray")

import streammap  # noqa: E402
from streammap.runrecord import read_run_record  # noqa: E402
from tests.helpers.paths import SAMPLES  # noqa: E402
from tests.tenancy.test_job_service import TENANTS, VISION, Service, wait_for  # noqa: E402

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
