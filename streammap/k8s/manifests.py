"""Kubernetes objects for a plan: one pod (or Job) per device group, a ConfigMap, and gang objects.

What is emitted, for a plan named ``NAME`` (see :mod:`streammap.k8s.resources` for the groups):

``ConfigMap NAME-plan``   the plan (``plan.yaml``, byte for byte what ``streammap`` wrote, with
                          the source path made relative to the mount), the program and its local
                          modules (the plan's ``source.modules``), mounted read-only at
                          ``/streammap`` in every pod, so the pods run ``streammap`` itself on
                          exactly this plan. A ConfigMap key holds no ``/``, so a module is kept
                          under its path with ``.`` for ``/`` (``mypkg/util.py`` ->
                          ``mypkg.util.py``, :func:`configmap_key`; one-to-one, as the parts of a
                          module path are identifiers) and the volume's ``items`` mount each key
                          at its path, beside the program. Workflow plans carry no program.
``Pod|Job NAME-NODE``     one per node of the plan that has tasks: pinned to its node with
                          ``nodeSelector`` (never ``spec.nodeName``, which bypasses the scheduler
                          and so HAMi, Volcano and Kueue), asking for that node's used devices in
                          ``limits``; HAMi annotations for device UUIDs and the plan's policy.
``Service NAME-head``     (plans over several nodes) a headless Service for the Ray head.
``PodGroup NAME``         (``gang=True``) a Volcano PodGroup with ``minMember`` = the pods, each
                          pod annotated ``scheduling.k8s.io/group-name`` and scheduled by
                          ``volcano`` (Volcano ``docs/podgroup``: all pods or none start).

How the pods run the plan: a one-node plan runs in its pod with the local executor; a plan over
several nodes starts Ray in every pod, the first group's pod as the head (it waits for every
node, then runs ``streammap run --backend ray``), the others as workers labelled with their plan
node (``ray start --labels streammap-node=NODE``), the naming the Ray executor already uses; a
worker leaves when the head has gone, so worker Jobs complete. All through
:mod:`streammap.k8s.entry`. Outputs and the run record go to ``/out`` (an
``emptyDir``, or a PersistentVolumeClaim with ``pvc=``).

Kueue (``queue=``): the ``kueue.x-k8s.io/queue-name`` label on each Job (created suspended, as
Kueue admits it) or Pod; plain pods of a several-pod plan also form one Kueue pod group
(label ``kueue.x-k8s.io/pod-group-name``, annotation ``kueue.x-k8s.io/pod-group-total-count``),
following Kueue's "Run Plain Pods" task.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Optional

from streammap.errors import StreamMapError
from streammap.k8s.resources import DeviceGroup, device_groups
from streammap.plan import Plan, check_source_confined

MOUNT = "/streammap"
OUT = "/out"
RAY_PORT = 6379
PLAN_KEY = "plan.yaml"
NODE_LABEL = "kubernetes.io/hostname"
APP_LABELS = {"app.kubernetes.io/name": "streammap", "app.kubernetes.io/managed-by": "streammap"}


@dataclass
class ExportOptions:
    """How to export a plan (the CLI's ``streammap export k8s`` options)."""

    image: str
    kind: Literal["pod", "job"] = "pod"
    name: Optional[str] = None                 # default: from the plan's source file name
    namespace: Optional[str] = None
    node_label: str = NODE_LABEL
    node_names: dict[str, str] = field(default_factory=dict)   # plan node -> Kubernetes node
    share: Optional[float] = None
    gang: bool = False
    volcano_queue: Optional[str] = None
    queue: Optional[str] = None                # Kueue LocalQueue
    pvc: Optional[str] = None


def build_manifests(plan: Plan, options: ExportOptions, program_text: Optional[str] = None) -> list[dict]:
    """The Kubernetes objects that run ``plan`` (see the module docstring), in apply order.

    ``program_text`` is the program's source; by default it is read from ``plan.source.path``
    (programs only: workflow plans carry none).
    """
    if options.kind not in ("pod", "job"):
        raise StreamMapError(f"unknown kind {options.kind!r}", hint="--kind pod or --kind job")
    groups = device_groups(plan, share=options.share)
    if not groups:
        raise StreamMapError("the plan has no tasks: nothing to export")
    name = dns_label(options.name or Path(plan.source.path).stem or plan.cluster.name, 40)
    meta_ns = {"namespace": options.namespace} if options.namespace else {}
    objects: list[dict] = [config_map(plan, name, meta_ns, program_text)]
    if options.gang:
        spec = {"minMember": len(groups)}
        if options.volcano_queue:
            spec["queue"] = options.volcano_queue
        objects.append({"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
                        "metadata": {"name": name, **meta_ns, "labels": _labels(name)}, "spec": spec})
    if len(groups) > 1:
        objects.append({"apiVersion": "v1", "kind": "Service",
                        "metadata": {"name": f"{name}-head", **meta_ns, "labels": _labels(name)},
                        "spec": {"clusterIP": "None", "selector": {**_labels(name), "streammap.io/role": "head"},
                                 "ports": [{"name": "gcs", "port": RAY_PORT}]}})
    used_names: set[str] = set()
    for i, g in enumerate(groups):
        role = "single" if len(groups) == 1 else ("head" if i == 0 else "worker")
        objects.append(_workload(plan, g, role, name, _unique(f"{name}-{g.node}", used_names),
                                 len(groups), options, meta_ns))
    return objects


def plan_in_configmap(plan: Plan) -> str:
    """The plan as the ConfigMap carries it: its source path relative to the mount folder."""
    copy = plan.model_copy(deep=True)
    copy.source.path = Path(plan.source.path).name
    return copy.to_yaml()


def configmap_key(module_path: str) -> str:
    """The ConfigMap key of a local module's recorded path (``mypkg/util.py`` -> ``mypkg.util.py``)."""
    return module_path.replace("/", ".")


def config_items(plan: Plan) -> Optional[list[dict]]:
    """The ConfigMap volume's ``items`` (key -> path under the mount) when the plan has local
    modules; ``None`` (every key at its own name) when it has none."""
    if plan.source.kind != "program" or not plan.source.modules:
        return None
    program = Path(plan.source.path).name
    return [{"key": PLAN_KEY, "path": PLAN_KEY}, {"key": program, "path": program},
            *({"key": configmap_key(m.path), "path": m.path} for m in plan.source.modules)]


def config_map(plan: Plan, name: str, meta_ns: dict, program_text: Optional[str] = None) -> dict:
    data = {PLAN_KEY: plan_in_configmap(plan)}
    if plan.source.kind == "program":
        key = Path(plan.source.path).name
        if program_text is None:
            check_source_confined(plan)        # a plan file exports only a program in its folder
            program_text = _read(Path(plan.source.path), "program")
        data[key] = program_text
        if plan.source.modules:
            plan.check_modules()               # in the program's folder, and what was compiled
        for m, file in zip(plan.source.modules, plan.module_files().values()):
            mkey = configmap_key(m.path)
            if mkey in data:
                raise StreamMapError(f"the local module {m.path} and the program {key} would share the "
                                     f"ConfigMap key {mkey!r}", hint="rename the program or the module")
            data[mkey] = _read(file, "local module")
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": f"{name}-plan", **meta_ns, "labels": _labels(name)}, "data": data}


def _read(path: Path, what: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise StreamMapError(f"cannot read the plan's {what} {path}: {exc.strerror or exc}",
                             hint="export from where the plan was compiled") from None
    except UnicodeDecodeError as exc:
        raise StreamMapError(f"the plan's {what} {path} is not UTF-8 text ({exc.reason})",
                             hint="a ConfigMap carries text: save the file as UTF-8") from None


def _workload(plan: Plan, g: DeviceGroup, role: str, name: str, obj_name: str, n_groups: int,
              options: ExportOptions, meta_ns: dict) -> dict:
    node = options.node_names.get(g.node, g.node)
    labels = {**_labels(name), "streammap.io/role": role, "streammap.io/node": label_value(g.node)}
    annotations = dict(g.annotations)
    annotations["streammap.io/devices"] = ",".join(g.devices)
    if options.gang:
        annotations["scheduling.k8s.io/group-name"] = name
    if options.queue:
        labels["kueue.x-k8s.io/queue-name"] = options.queue
        if options.kind == "pod" and n_groups > 1:
            labels["kueue.x-k8s.io/pod-group-name"] = name
            annotations["kueue.x-k8s.io/pod-group-total-count"] = str(n_groups)
    limits = {k: v for k, v in g.limits.items() if k != "cpu"}
    requests = {"cpu": str(g.limits["cpu"])}
    container = {
        "name": "streammap",
        "image": options.image,
        "command": _command(g, role, name, n_groups),
        "env": [{"name": "CUDA_DEVICE_ORDER", "value": "PCI_BUS_ID"},
                {"name": "STREAMMAP_HISTORY", "value": f"{OUT}/history"}],
        "resources": {"requests": requests, **({"limits": limits} if limits else {})},
        "volumeMounts": [{"name": "plan", "mountPath": MOUNT, "readOnly": True},
                         {"name": "out", "mountPath": OUT}],
    }
    if n_groups > 1:
        container["ports"] = [{"name": "gcs", "containerPort": RAY_PORT}]
    out_volume = ({"persistentVolumeClaim": {"claimName": options.pvc}} if options.pvc else {"emptyDir": {}})
    pod_spec = {
        "restartPolicy": "Never",
        "nodeSelector": {options.node_label: node},
        "containers": [container],
        "volumes": [{"name": "plan", "configMap": _config_volume(plan, name)}, {"name": "out", **out_volume}],
    }
    if options.gang:
        pod_spec["schedulerName"] = "volcano"
    meta = {"labels": labels, "annotations": annotations}
    if options.kind == "pod":
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": obj_name, **meta_ns, **meta}, "spec": pod_spec}
    # Kueue manages the Job (its label), never its pods: pods with Kueue labels of their own would
    # be taken for plain pods where Kueue's pod integration is on.
    pod_labels = {k: v for k, v in labels.items() if not k.startswith("kueue.x-k8s.io/")}
    spec = {"backoffLimit": 0, "template": {"metadata": {**meta, "labels": pod_labels}, "spec": pod_spec}}
    if options.queue:
        spec["suspend"] = True             # Kueue admits (un-suspends) the Job when quota allows
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": obj_name, **meta_ns, "labels": labels}, "spec": spec}


def _config_volume(plan: Plan, name: str) -> dict:
    items = config_items(plan)
    return {"name": f"{name}-plan", **({"items": items} if items else {})}


def _command(g: DeviceGroup, role: str, name: str, n_groups: int) -> list[str]:
    if role == "worker":
        return ["python", "-m", "streammap.k8s.entry", "--worker", f"{name}-head:{RAY_PORT}", "--node", g.node]
    cmd = ["python", "-m", "streammap.k8s.entry", "--plan", f"{MOUNT}/{PLAN_KEY}", "--node", g.node, "--out", OUT]
    if role == "head":
        cmd += ["--ray-nodes", str(n_groups), "--port", str(RAY_PORT)]
    return cmd


def _labels(name: str) -> dict:
    return {**APP_LABELS, "app.kubernetes.io/instance": name}


# -- names ---------------------------------------------------------------------------------------

def dns_label(text: str, limit: int = 63) -> str:
    """``text`` as an RFC 1123 label: lower case, ``[a-z0-9-]``, at most ``limit`` characters.

    Long names keep a 6-character hash of the whole text so that two long names stay distinct.
    """
    s = re.sub(r"[^a-z0-9-]+", "-", (text or "").lower())
    s = re.sub(r"-+", "-", s).strip("-") or "streammap"
    if len(s) > limit:
        digest = hashlib.sha256(text.encode()).hexdigest()[:6]
        s = s[: limit - 7].rstrip("-") + "-" + digest
    return s


def label_value(text: str) -> str:
    """``text`` as a label value: ``[A-Za-z0-9_.-]``, alphanumeric at both ends, at most 63."""
    s = re.sub(r"[^A-Za-z0-9_.\-]+", "-", text or "")
    s = re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", s)
    if len(s) > 63:
        s = s[:56].rstrip("-_.") + "-" + hashlib.sha256(text.encode()).hexdigest()[:6]
    return s


def _unique(text: str, used: set[str]) -> str:
    base = dns_label(text)
    out, k = base, 1
    while out in used:
        k += 1
        out = dns_label(f"{base[:58]}-{k}")
    used.add(out)
    return out
