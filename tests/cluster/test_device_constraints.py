"""A kernel's ``device=`` clause means what it reads as, for every form the README lists: ``any``,
a kind, a vendor, a model substring, and alternatives joined by ``|``, where ``any`` among the
alternatives admits every device (``cpu|any`` on a GPU-only cluster runs on the GPUs)."""

from __future__ import annotations

import pytest

import streammap
from streammap.cluster.model import cluster_from_dict
from streammap.compiler import compile as compile_plan
from streammap.errors import MappingError

CLUSTER = cluster_from_dict({"name": "mixed", "network": {"bandwidth": 1e9}, "nodes": [
    {"name": "a", "link": {"bandwidth": 1e10}, "devices": [
        {"name": "g", "kind": "gpu", "vendor": "nvidia", "model": "A100-SXM4-80GB"},
        {"name": "m", "kind": "mlu", "vendor": "cambricon", "model": "MLU370-X8"}]},
    {"name": "b", "devices": [{"name": "c", "kind": "cpu", "vendor": "amd", "model": "AMD EPYC"}]}]})
GPU, MLU, CPU = CLUSTER.devices

# constraint -> the devices (of GPU, MLU, CPU) it admits
ADMITS = {
    None: "GMC",
    "any": "GMC",
    "gpu": "G", "cpu": "C", "mlu": "M",                  # a kind
    "nvidia": "G", "cambricon": "M", "amd": "C",         # a vendor
    "A100": "G", "a100": "G", "MLU370": "M", "EPYC": "C",  # a model substring, any case
    "GPU": "G", " gpu ": "G",                            # case and spaces ignored
    "gpu|cpu": "GC", "cpu|gpu": "GC", "gpu|mlu": "GM",   # alternatives
    "cpu|any": "GMC", "any|cpu": "GMC", "gpu|any": "GMC", "any|any": "GMC", "cpu | any": "GMC",
    "nvidia|cpu": "GC", "A100|mlu": "GM",
    "tpu": "", "V100": "", "intel": "",                  # nothing of this cluster
    "gpu|": "G", "|": "",                                # an empty alternative admits nothing
}


@pytest.mark.parametrize("constraint,admitted", list(ADMITS.items()))
def test_each_form_of_the_device_clause_admits_exactly_its_devices(constraint, admitted):
    got = "".join(letter for letter, dev in zip("GMC", (GPU, MLU, CPU)) if dev.matches(constraint))
    assert got == admitted


PROGRAM = '''
import numpy as np

# @stream kernel(flops=1e6, out=800, device="{device}")
def make():
    return np.ones(100)


# @stream graph
def main():
    return make()
'''

def compiled_with(tmp_path, device: str, cluster: dict):
    """The plan of PROGRAM with ``device=DEVICE`` on ``cluster``."""
    src = tmp_path / "prog.py"
    src.write_text(PROGRAM.format(device=device))
    return compile_plan(src, cluster, history=False)


def refusal(tmp_path, device: str, cluster: dict) -> MappingError:
    """The error compiling PROGRAM with ``device=DEVICE`` on ``cluster`` raises."""
    with pytest.raises(MappingError) as err:
        compiled_with(tmp_path, device, cluster)
    return err.value


GPU_ONLY = {"name": "gpus", "nodes": [{"name": "n", "link": {"bandwidth": 1e10}, "devices": [
    {"name": "gpu0", "kind": "gpu", "vendor": "nvidia", "model": "H100"},
    {"name": "gpu1", "kind": "gpu", "vendor": "nvidia", "model": "H100"}]}]}


@pytest.mark.parametrize("device", ["cpu|any", "any|cpu", "cpu|gpu", "gpu|cpu", "any", "gpu", "H100", "nvidia"])
def test_a_gpu_only_cluster_runs_every_clause_that_admits_a_gpu(tmp_path, device):
    plan = compiled_with(tmp_path, device, GPU_ONLY)
    assert [t.device for t in plan.tasks] in (["n/gpu0"], ["n/gpu1"])


@pytest.mark.parametrize("device", ["cpu", "A100", "amd|cpu"])
def test_a_clause_no_device_admits_is_refused_with_its_call_site(tmp_path, device):
    err = refusal(tmp_path, device, GPU_ONLY)
    assert "no device of the cluster matches its device constraint" in err.message
    assert err.line == 11        # the call site in the graph body


CPU_ONLY = {"name": "cpus", "nodes": [{"name": "n", "devices": [
    {"name": "cpu", "kind": "cpu", "vendor": "amd", "model": "AMD EPYC"}]}]}


@pytest.mark.parametrize("device", ["cpu|any", "any|cpu", "cpu|gpu", "gpu|cpu", "any", "cpu"])
def test_a_cpu_only_cluster_runs_every_clause_that_admits_a_cpu_on_numpy(tmp_path, device):
    plan = compiled_with(tmp_path, device, CPU_ONLY)
    assert [t.device for t in plan.tasks] == ["n/cpu"]
    assert float(streammap.run(plan, progress=False)["result"].sum()) == 100.0


@pytest.mark.parametrize("device", ["gpu", "nvidia", "gpu|mlu"])
def test_a_gpu_clause_on_a_cpu_only_cluster_is_refused_with_its_call_site(tmp_path, device):
    err = refusal(tmp_path, device, CPU_ONLY)
    assert "no device of the cluster matches its device constraint" in err.message and err.line == 11
