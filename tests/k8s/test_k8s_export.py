"""`streammap export k8s`: every shared benchmark plan becomes valid Kubernetes objects that ask for
the plan's devices the way HAMi, Volcano and Kueue expect, and carry the plan back unchanged."""

from __future__ import annotations

import copy
import shutil
from pathlib import Path

import pytest
import yaml

import streammap
from streammap.cli import main
from streammap.errors import StreamMapError
from streammap.k8s import (
    ExportOptions,
    build_manifests,
    check_objects,
    device_groups,
    export_k8s,
    plan_from_configmap,
    validate_objects,
)
from streammap.k8s.entry import container_view
from tests.helpers.paths import SAMPLES
from tests.helpers.plans import FAN, make_plan, ref, task

IMAGE = "registry.example.org/streammap:0.1"


def _cases(shared):
    out = []
    for g in sorted((shared / "workflows").glob("*.json")):
        out += [(g, c) for c in ("hetero-2x4", "mixed-vendors", "small-memory")]
    out += [(g, "cholesky-node") for g in sorted((shared / "cholesky").glob("*.json"))]
    out.append((shared / "classic" / "topcuoglu-10.json", "topcuoglu-3p"))
    return out


@pytest.fixture(scope="module")
def shared_plans(shared):
    """Every shared graph compiled with HEFT on its clusters (those that fit)."""
    plans = []
    for graph, cluster in _cases(shared):
        try:
            plans.append(streammap.compile(graph, cluster=shared / "clusters" / f"{cluster}.yaml",
                                           mapper="heft", history=False))
        except StreamMapError:          # blast on small-memory: no placement exists
            continue
    assert len(plans) >= 30
    return plans


@pytest.fixture(scope="module")
def mixed_plan(shared):
    return streammap.compile(shared / "workflows" / "blast-chameleon-small-001.json",
                             cluster=shared / "clusters" / "mixed-vendors.yaml", mapper="heft", history=False)


def _objects(plan, **kw):
    return build_manifests(plan, ExportOptions(image=IMAGE, **kw))


def _by_kind(objects, kind):
    return [o for o in objects if o["kind"] == kind]


def _pod_spec(obj):
    return obj["spec"] if obj["kind"] == "Pod" else obj["spec"]["template"]["spec"]


# -- every shared plan ------------------------------------------------------------------------------

def test_every_shared_plan_exports_valid_objects_in_every_mode(shared_plans):
    modes = [{}, {"kind": "job"}, {"gang": True, "volcano_queue": "research"},
             {"kind": "job", "queue": "team-a", "share": 0.5}, {"queue": "team-a", "namespace": "ml"}]
    for i, plan in enumerate(shared_plans):
        objects = _objects(plan, **modes[i % len(modes)])
        assert validate_objects(objects) == [], plan.source.path


def test_the_configmap_gives_back_the_same_plan(shared_plans, tmp_path):
    for i, plan in enumerate(shared_plans):
        cm = _by_kind(_objects(plan), "ConfigMap")[0]
        back = plan_from_configmap(cm, tmp_path / str(i))
        assert Path(back.source.path).name == Path(plan.source.path).name
        a, b = back.model_dump(), plan.model_dump()
        a["source"].pop("path"), b["source"].pop("path")
        assert a == b


def test_one_workload_per_node_with_tasks_pinned_by_selector_never_by_node_name(shared_plans):
    for plan in shared_plans:
        objects = _objects(plan, kind="job")
        nodes = {t.device.split("/")[0] for t in plan.tasks}
        jobs = _by_kind(objects, "Job")
        assert len(jobs) == len(nodes)
        for j in jobs:
            spec = _pod_spec(j)
            assert "nodeName" not in spec
            assert spec["nodeSelector"]["kubernetes.io/hostname"] in nodes


# -- what each node asks for ------------------------------------------------------------------------

def test_each_vendor_gets_its_device_plugin_resource_names(mixed_plan):
    groups = {g.node: g for g in device_groups(mixed_plan)}
    assert groups["h100"].limits == {"cpu": 2, "nvidia.com/gpu": 2}
    assert groups["v100"].limits["nvidia.com/gpu"] == 3
    assert groups["mlu"].limits["cambricon.com/vmlu"] == 2
    assert groups["dcu"].limits["hygon.com/dcunum"] == 1
    pods = {p["metadata"]["labels"]["streammap.io/node"]: p for p in _by_kind(_objects(mixed_plan), "Pod")}
    limits = pods["dcu"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {"hygon.com/dcunum": 1}
    assert pods["dcu"]["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "2"}           # dcu0 and the cpu


def test_a_share_asks_for_hami_cores_and_memory_as_whole_numbers(mixed_plan):
    groups = {g.node: g for g in device_groups(mixed_plan, share=0.3)}
    assert groups["h100"].limits["nvidia.com/gpucores"] == 30
    assert groups["h100"].limits["nvidia.com/gpumem"] == 24576          # 30% of 80 GiB, in MiB
    assert groups["mlu"].limits["cambricon.com/mlu.smlu.vcore"] == 30
    assert groups["mlu"].limits["cambricon.com/mlu.smlu.vmemory"] == 30   # Cambricon: percent
    assert groups["dcu"].limits["hygon.com/dcumem"] == 9831
    with pytest.raises(StreamMapError, match="share"):
        device_groups(mixed_plan, share=1.5)


def test_known_uuids_pin_the_devices_and_a_policy_plan_carries_hami_policies(tmp_path, shared):
    cluster = yaml.safe_load((shared / "clusters" / "hetero-2x4.yaml").read_text())
    for n in cluster["nodes"]:
        for d in n["devices"]:
            d["uuid"] = f"GPU-{n['name']}-{d['name']}"
    plan = streammap.compile(shared / "workflows" / "montage-chameleon-2mass-01d-001.json", cluster=cluster,
                             mapper="binpack", history=False)
    for g in device_groups(plan):
        pins = g.annotations["nvidia.com/use-gpuuuid"].split(",")
        assert pins == [f"GPU-{i.replace('/', '-')}" for i in g.devices]
        assert g.annotations["hami.io/node-scheduler-policy"] == "binpack"
        assert g.annotations["hami.io/gpu-scheduler-policy"] == "binpack"
    heft = streammap.compile(shared / "workflows" / "montage-chameleon-2mass-01d-001.json", cluster=cluster,
                             mapper="heft", history=False)
    assert all("hami.io/node-scheduler-policy" not in g.annotations for g in device_groups(heft))


def test_a_device_kind_without_a_resource_name_is_refused(mixed_plan):
    plan = mixed_plan.model_copy(deep=True)
    for d in plan.devices:
        if d.kind == "mlu":
            d.kind, d.vendor = "npu", "huawei"
    with pytest.raises(StreamMapError, match="no Kubernetes resource name"):
        device_groups(plan)


# -- Volcano and Kueue ------------------------------------------------------------------------------

def test_a_volcano_gang_is_one_podgroup_for_all_pods(mixed_plan):
    objects = _objects(mixed_plan, gang=True, volcano_queue="research")
    group = _by_kind(objects, "PodGroup")[0]
    pods = _by_kind(objects, "Pod")
    assert group["spec"] == {"minMember": len(pods), "queue": "research"}
    for p in pods:
        assert p["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == group["metadata"]["name"]
        assert p["spec"]["schedulerName"] == "volcano"


def test_kueue_jobs_are_suspended_in_their_queue_and_plain_pods_form_a_group(mixed_plan):
    jobs = _by_kind(_objects(mixed_plan, kind="job", queue="team-a"), "Job")
    assert all(j["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a" and j["spec"]["suspend"]
               for j in jobs)
    assert not any(k.startswith("kueue") for j in jobs for k in j["spec"]["template"]["metadata"]["labels"])
    pods = _by_kind(_objects(mixed_plan, queue="team-a"), "Pod")
    assert {p["metadata"]["labels"]["kueue.x-k8s.io/pod-group-name"] for p in pods} == {"blast-chameleon-small-001"}
    assert all(p["metadata"]["annotations"]["kueue.x-k8s.io/pod-group-total-count"] == str(len(pods)) for p in pods)


def test_a_several_node_plan_runs_ray_head_and_workers(mixed_plan):
    objects = _objects(mixed_plan)
    pods = _by_kind(objects, "Pod")
    roles = [p["metadata"]["labels"]["streammap.io/role"] for p in pods]
    assert roles == ["head"] + ["worker"] * (len(pods) - 1)
    assert _by_kind(objects, "Service")[0]["spec"]["selector"]["streammap.io/role"] == "head"
    worker = pods[1]["spec"]["containers"][0]["command"]
    assert worker == ["python", "-m", "streammap.k8s.entry", "--worker", "blast-chameleon-small-001-head:6379",
                      "--node", pods[1]["metadata"]["labels"]["streammap.io/node"]]


def test_a_worker_joins_the_head_and_leaves_when_it_is_gone():
    from types import SimpleNamespace

    from streammap.k8s.entry import worker
    calls, answers = [], iter([True, True, False, True, False, False, False])

    def run(cmd):
        calls.append(cmd)
        return SimpleNamespace(returncode=1 if len(calls) == 1 else 0)    # the head is not up at first
    assert worker("h:6379", "v100", run=run, probe=lambda a: next(answers), poll=0) == 0
    assert calls == [["ray", "start", "--address", "h:6379", "--labels", "streammap-node=v100"]] * 2 + \
        [["ray", "stop"]]
    assert worker("h:6379", "v100", run=lambda cmd: SimpleNamespace(returncode=1), poll=0, join_timeout=0) == 1


# -- the semantic checks catch what the schemas miss ------------------------------------------------

@pytest.fixture(scope="module")
def good_pod(mixed_plan):
    pod = _by_kind(_objects(mixed_plan, share=0.5), "Pod")[0]
    assert validate_objects([pod]) == []
    return pod


def _broken(pod, change):
    bad = copy.deepcopy(pod)
    change(bad)
    return validate_objects([bad])


def _limits(p):
    return p["spec"]["containers"][0]["resources"]["limits"]


@pytest.mark.parametrize("change, message", [
    (lambda p: p["spec"].__setitem__("nodeName", "h100"), "nodeName: set"),
    (lambda p: _limits(p).__setitem__("nvidia.com/gpucores", 120), "not in 0..100"),
    (lambda p: _limits(p).__setitem__("nvidia.com/gpumem", "40Gi"), "whole number of MiB"),
    (lambda p: _limits(p).__setitem__("nvidia.com/gpu", "0.5"), "extended resources are whole numbers"),
    (lambda p: _limits(p).__setitem__("nvidia.com/gpu", "two"), "not a Kubernetes quantity"),
    (lambda p: _limits(p).__setitem__("nvidia.com/gpu", "-1"), "negative"),
    (lambda p: p["spec"]["containers"][0]["resources"]["requests"].__setitem__("nvidia.com/gpu", 1),
     "must equal limits"),
    (lambda p: _limits(p).pop("nvidia.com/gpu"), "set without nvidia.com/gpu"),
    (lambda p: p["metadata"].__setitem__("name", "Fm_Radio"), "not a valid Pod name"),
    (lambda p: p["metadata"]["labels"].__setitem__("streammap.io/node", "-bad-"), "not a valid label value"),
    (lambda p: p["metadata"]["labels"].__setitem__("a/b/c", "x"), "not a valid key"),
    (lambda p: p["spec"]["nodeSelector"].__setitem__("kubernetes.io/hostname", "x" * 64), "not a valid label value"),
    (lambda p: p["metadata"]["annotations"].__setitem__("hami.io/node-scheduler-policy", "pack"),
     "not one of binpack, spread"),
    (lambda p: p["metadata"].setdefault("annotations", {}).__setitem__("nvidia.com/use-gpuuuid", "GPU-1"),
     "1 UUID(s) for 2 x nvidia.com/gpu"),
    (lambda p: p["spec"].__setitem__("restartPolicy", 3), "Kubernetes 1.30 schema"),
    (lambda p: p["spec"]["containers"][0].__setitem__("gpus", 1), "Kubernetes 1.30 schema"),
])
def test_semantic_and_schema_checks_catch_bad_pods(good_pod, change, message):
    problems = _broken(good_pod, change)
    assert any(message in p for p in problems), problems


def test_bad_podgroups_and_configmaps_are_caught(mixed_plan):
    objects = _objects(mixed_plan, gang=True)
    group = copy.deepcopy(_by_kind(objects, "PodGroup")[0])
    group["spec"]["minMember"] = 0
    group["spec"]["minAvailable"] = 1
    problems = validate_objects([group])
    assert any("minMember" in p for p in problems) and any("unknown field" in p for p in problems)
    cm = copy.deepcopy(_by_kind(objects, "ConfigMap")[0])
    cm["data"]["big.txt"] = "x" * (1 << 20)
    cm["data"]["no spaces"] = ""
    problems = validate_objects([cm])
    assert any("1 MiB" in p for p in problems) and any("not a valid ConfigMap key" in p for p in problems)
    with pytest.raises(StreamMapError, match="problem"):
        check_objects([cm])


def test_an_invalid_option_writes_nothing(mixed_plan, tmp_path):
    with pytest.raises(StreamMapError, match="kueue.x-k8s.io/queue-name"):
        export_k8s(mixed_plan, tmp_path / "out", image=IMAGE, queue="Team A!")
    assert not (tmp_path / "out").exists()


# -- the CLI and the pod's entry point ---------------------------------------------------------------

def test_cli_exports_a_program_plan_with_its_program(tmp_path, capsys):
    cluster = {"name": "lab", "nodes": [{"name": "node0", "link": {"bandwidth": "300 GB/s"}, "devices": [
        {"name": "gpu0", "kind": "gpu", "vendor": "nvidia", "memory": "16GiB", "uuid": "GPU-aaa"},
        {"name": "gpu1", "kind": "gpu", "vendor": "nvidia", "memory": "16GiB", "uuid": "GPU-bbb"},
        {"name": "cpu", "kind": "cpu", "cores": 8}]}]}
    # A plan exports the program beside it (a plan file names no program outside its folder).
    shutil.copy(SAMPLES / "fm_radio.py", tmp_path / "fm_radio.py")
    plan = streammap.compile(tmp_path / "fm_radio.py", cluster=cluster, params={"N": 4096}, history=False)
    streammap.write_plan(plan, tmp_path / "plan.yaml")
    assert main(["export", "k8s", str(tmp_path / "plan.yaml"), "-o", str(tmp_path / "k8s"), "--image", IMAGE,
                 "--node", "node0=gpu-a1", "--kind", "job"]) == 0
    assert "kubectl apply" in capsys.readouterr().out
    objects = list(yaml.safe_load_all((tmp_path / "k8s" / "all.yaml").read_text()))
    assert [o["kind"] for o in objects] == ["ConfigMap", "Job"]
    assert set(objects[0]["data"]) == {"plan.yaml", "fm_radio.py"}
    spec = objects[1]["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == {"kubernetes.io/hostname": "gpu-a1"}
    assert spec["containers"][0]["command"][:3] == ["python", "-m", "streammap.k8s.entry"]
    back = plan_from_configmap(yaml.safe_load((tmp_path / "k8s" / "00-configmap-fm-radio-plan.yaml").read_text()),
                               tmp_path / "mount")
    assert back.model_dump(exclude={"source"}) == plan.model_dump(exclude={"source"})
    assert (tmp_path / "mount" / "fm_radio.py").read_bytes() == Path(plan.source.path).read_bytes()
    assert main(["export", "k8s", str(tmp_path / "plan.yaml"), "-o", str(tmp_path / "x"), "--image", IMAGE,
                 "--node", "node0"]) == 2


def test_the_pod_sees_its_gpus_numbered_from_zero(mixed_plan):
    plan = mixed_plan.model_copy(deep=True)
    for d in plan.devices:
        if d.id.startswith("v100/"):
            d.index += 4                        # GPUs 4, 5, 6 of the machine
    view = container_view(plan, "v100")
    assert [d.index for d in view.devices if d.id.startswith("v100/")] == [0, 1, 2]
    assert [d.index for d in view.devices if d.id.startswith("h100/")] == [0, 1]
    assert [d.index for d in plan.devices if d.id.startswith("v100/")] == [4, 5, 6]


def test_the_pod_entry_runs_the_configmaps_plan_or_says_why_not(tmp_path, capsys):
    from streammap.k8s.entry import main as entry
    devices = [{"id": "node0/cpu", "kind": "cpu"},
               {"id": "node0/mlu0", "kind": "mlu", "vendor": "cambricon", "model": "MLU370-X8"}]
    tasks = [task("src", "source", "node0/cpu"), task("s0", "scale", "node0/cpu", ref("src"), 0)]
    for name, devs, placed in (("cpu", devices[:1], "node0/cpu"), ("mlu", devices, "node0/mlu0")):
        plan = make_plan(tmp_path, FAN, tasks + [task("sum", "total", placed, ref("s0"))], devices=devs,
                         outputs=ref("sum"))
        cm = _by_kind(_objects(plan), "ConfigMap")[0]
        plan_from_configmap(cm, tmp_path / name / "mount")
        rc = entry(["--plan", str(tmp_path / name / "mount" / "plan.yaml"), "--node", "node0",
                    "--out", str(tmp_path / name)])
        if name == "cpu":
            assert rc == 0 and (tmp_path / "cpu" / "out.npz").exists()
        else:
            assert rc == 2 and "task sum is placed on node0/mlu0" in capsys.readouterr().err


# -- names an attacker controls: namespace, claim, image --------------------------------------------------

@pytest.mark.parametrize("options, message", [
    ({"namespace": "../../etc"}, "metadata.namespace: '../../etc' is not a valid namespace"),
    ({"namespace": "a" * 64}, "is not a valid namespace"),
    ({"pvc": "../x"}, "claimName '../x' is not a valid PersistentVolumeClaim name"),
    ({"image": "streammap latest"}, "image: 'streammap latest' is not an OCI image reference"),
    ({"image": "../streammap:1"}, "is not an OCI image reference"),
    ({"image": "Registry.io/UPPER/x"}, "is not an OCI image reference"),
])
def test_namespaces_claims_and_images_are_checked(mixed_plan, options, message):
    objects = build_manifests(mixed_plan, ExportOptions(**{"image": IMAGE, **options}))
    problems = validate_objects(objects)
    assert any(message in p for p in problems), problems


@pytest.mark.parametrize("image", ["python:3.11", "ghcr.io/org/streammap:1.0", "localhost:5000/a/b_c-d",
                                   "registry.example.org/streammap@sha256:" + "a" * 64])
def test_ordinary_image_references_pass(mixed_plan, image):
    assert validate_objects(build_manifests(mixed_plan, ExportOptions(image=image, namespace="team-a",
                                                                      pvc="results.v1"))) == []


def test_export_refuses_bad_names_through_the_cli(tmp_path, capsys):
    plan = tmp_path / "plan.yaml"
    shutil.copy(Path(__file__).resolve().parents[2] / "samples" / "fm_radio.py", tmp_path / "fm_radio.py")
    streammap.write_plan(streammap.compile(tmp_path / "fm_radio.py", cluster={"name": "c", "nodes": [
        {"name": "n", "devices": [{"name": "cpu", "kind": "cpu"}]}]}, params={"N": 1024}, history=False), plan)
    assert main(["export", "k8s", str(plan), "-o", str(tmp_path / "k8s"), "--image", "a b",
                 "--namespace", "../../etc", "--pvc", "../x"]) == 2
    err = capsys.readouterr().err
    assert "namespace" in err and "claimName" in err and "OCI image reference" in err
    assert not (tmp_path / "k8s").exists()
