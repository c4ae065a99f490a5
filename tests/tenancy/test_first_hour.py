"""The job service's first hour: a job wider than the tenant's quota is sized down to what the
quota grants when the program can run narrower; a refusal says which ``--gpus`` would be accepted
and carries no doubled "error:"; ``serve --cluster local`` discovers this machine; an emulating
service serves a cluster of several nodes as ``run --emulate`` runs it."""

from __future__ import annotations

import pytest

from streammap.errors import StreamMapError
from streammap.tenancy.api import Refused
from streammap.tenancy.client import ServiceError
from streammap.tenancy.service import JobService
from tests.tenancy.test_job_service import CLUSTER as ONE_NODE

# Four independent heavy tasks: the estimator's own choice is a gang of 4 (each task on its device).
WIDE = '''\
import numpy as np

# @stream kernel(flops=1e13, out=800)
def work(i):
    return np.full(100, float(i))


# @stream kernel(flops=1e6, out=800)
def total(*parts):
    return sum(parts)


# @stream graph
def wide():
    return total(*[work(i) for i in range(4)])
'''

TWO_NODES = """\
name: pair
network: {bandwidth: 25 GB/s, latency: 10us}
nodes:
  - name: a
    link: {bandwidth: 300 GB/s, latency: 3us}
    devices:
      - {name: gpu0, kind: gpu, model: A100, memory: 80GiB}
      - {name: gpu1, kind: gpu, model: A100, memory: 80GiB}
  - name: b
    link: {bandwidth: 300 GB/s, latency: 3us}
    devices:
      - {name: gpu0, kind: gpu, model: A100, memory: 80GiB}
      - {name: gpu1, kind: gpu, model: A100, memory: 80GiB}
"""


def _setup(tmp_path, quota: str, cluster: str | None = None):
    devs = "".join(f"      - {{name: gpu{i}, kind: gpu, vendor: nvidia, model: A100, memory: 80GiB}}\n"
                   for i in range(4))
    (tmp_path / "cluster.yaml").write_text(cluster or ONE_NODE % devs)
    (tmp_path / "tenants.yaml").write_text(f"tenants:\n  - {{name: t, token: tok-t-12345678, quota: {quota}}}\n")
    return JobService(tmp_path / "cluster.yaml", tmp_path / "tenants.yaml", tmp_path / "state",
                      emulate=True, isolation="none")


def _demand(svc, job_id):
    return svc.store.get(job_id)["demand"]


def test_an_unbounded_tenant_gets_the_width_the_estimate_chose(tmp_path):
    svc = _setup(tmp_path, "{}")
    job = svc.submit("t", "wide.py", WIDE)
    assert _demand(svc, job)["gpus"] == 4


@pytest.mark.parametrize("quota", ["{gpus: 2}", "{models: {A100: 2}}", "{gpu_memory: 160GiB}"])
def test_a_job_wider_than_the_quota_is_sized_to_what_the_quota_grants(tmp_path, quota):
    svc = _setup(tmp_path, quota)
    job = svc.submit("t", "wide.py", WIDE)
    assert _demand(svc, job)["gpus"] == 2


def test_a_stated_width_beyond_the_quota_is_refused_with_the_width_it_would_grant(tmp_path):
    svc = _setup(tmp_path, "{models: {A100: 2}}")
    with pytest.raises(Refused) as err:
        svc.submit("t", "wide.py", WIDE, gpus=4)
    assert err.value.status == 400
    assert "quota can never grant that" in err.value.message and "--gpus 2" in err.value.message
    assert svc.store.list("t", None) == []


def test_a_quota_of_no_device_says_so(tmp_path):
    svc = _setup(tmp_path, "{models: {A100: 0}}")
    with pytest.raises(Refused, match="grants no device of A100"):
        svc.submit("t", "wide.py", WIDE)


def test_a_refusal_of_the_program_check_reads_error_once(tmp_path):
    svc = _setup(tmp_path, "{}")
    with pytest.raises(Refused) as err:
        svc.submit("t", "wide.py", WIDE, gpus=8)
    assert "the largest pool has 4" in err.value.message and "--gpus 4" in err.value.message
    printed = ServiceError(err.value.message).format()          # what `streammap submit` prints
    assert printed.startswith("error: a job asks for 8 devices") and printed.count("error:") == 1


def test_an_emulating_service_serves_a_cluster_of_two_nodes(tmp_path):
    svc = _setup(tmp_path, "{}", cluster=TWO_NODES)
    assert svc.submit("t", "wide.py", WIDE)


def test_a_real_local_service_still_refuses_two_nodes_and_says_what_works(tmp_path):
    (tmp_path / "cluster.yaml").write_text(TWO_NODES)
    (tmp_path / "tenants.yaml").write_text("tenants:\n  - {name: t, token: tok-t-12345678}\n")
    with pytest.raises(StreamMapError) as err:
        JobService(tmp_path / "cluster.yaml", tmp_path / "tenants.yaml", tmp_path / "state", isolation="none")
    assert "--backend ray" in err.value.hint and "--emulate" in err.value.hint


def test_serve_cluster_local_discovers_this_machine(tmp_path, monkeypatch):
    from streammap import compiler
    from streammap.cluster.model import ClusterSpec, DeviceSpec, Node
    one_gpu = ClusterSpec(name="local", nodes=[Node(name="here", link={"bandwidth": 1e10}, devices=[
        DeviceSpec(name="gpu0", kind="gpu", model="H100", memory=80 * 2**30, index=0),
        DeviceSpec(name="cpu", kind="cpu")])])
    monkeypatch.setattr(compiler, "discover_local", lambda: one_gpu)
    (tmp_path / "tenants.yaml").write_text("tenants:\n  - {name: t, token: tok-t-12345678}\n")
    svc = JobService("local", tmp_path / "tenants.yaml", tmp_path / "state", emulate=True, isolation="none")
    assert [d.id for d in svc.cluster.devices] == ["here/gpu0", "here/cpu"]
    assert svc.cluster.path == "local"
