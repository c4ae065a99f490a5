"""What each device group of a plan asks Kubernetes for: extended resources and HAMi annotations.

A *device group* is one node of the plan with the devices that have tasks there: the plan already
decided which node runs what, so the natural unit for Kubernetes is one pod per node, asking for
exactly the devices of that node the plan uses (devices without tasks are not requested, so the
rest of the node stays free for others). Devices of the node that run nothing are left out.

Resource names follow the device plugins HAMi configures by default (its ``hami-scheduler-device``
ConfigMap, ``charts/hami/values.yaml`` of Project-HAMi/HAMi, and ``examples/{nvidia,hygon,mlu}``):

=========== ============ =================================== ================================== ========================
vendor      count        memory                              compute                            pin to devices
=========== ============ =================================== ================================== ========================
nvidia      nvidia.com/  nvidia.com/gpumem (MiB, integer,    nvidia.com/gpucores (percent of    nvidia.com/use-gpuuuid
            gpu          per GPU)                            each GPU, 0-100)                   (comma-separated UUIDs)
hygon       hygon.com/   hygon.com/dcumem (MiB, per DCU)     hygon.com/dcucores (percent)       hygon.com/use-gpuuuid
            dcunum
cambricon   cambricon.   cambricon.com/mlu.smlu.vmemory      cambricon.com/mlu.smlu.vcore       (none)
            com/vmlu     (percent of device memory)          (percent)
amd         amd.com/gpu  (none: the AMD device plugin gives whole GPUs)
=========== ============ =================================== ================================== ========================

Fractions come from a device's *share*: the largest ``share`` of the tasks placed on it (a plan
task field the GPU-sharing work adds; 1.0 where absent), or the ``share`` option of the export.
A whole device (share 1) asks for the count alone, which HAMi and the vendors' plugins read as
an exclusive device. HAMi applies one memory and one core figure to every device of a container,
so a group with several devices asks for the largest of their shares.

Every pod requests one ``cpu`` per used device: the executor runs one worker thread per device
(NumPy on a CPU device, the launching thread of an accelerator). Asking for a CPU device's every
core would make the pod unschedulable on any node that keeps some for the system.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

from streammap.errors import StreamMapError
from streammap.plan import Plan

MIB = 1024 * 1024


@dataclass(frozen=True)
class VendorResources:
    """The extended-resource names of one vendor's device plugin (``None``: not offered)."""

    count: str
    memory: Optional[str] = None
    memory_unit: str = "MiB"               # "MiB" or "percent"
    cores: Optional[str] = None
    uuid_annotation: Optional[str] = None


#: Keyed by vendor, then by device kind when the vendor is unknown.
VENDORS: dict[str, VendorResources] = {
    "nvidia": VendorResources("nvidia.com/gpu", "nvidia.com/gpumem", "MiB", "nvidia.com/gpucores",
                              "nvidia.com/use-gpuuuid"),
    "hygon": VendorResources("hygon.com/dcunum", "hygon.com/dcumem", "MiB", "hygon.com/dcucores",
                             "hygon.com/use-gpuuuid"),
    "cambricon": VendorResources("cambricon.com/vmlu", "cambricon.com/mlu.smlu.vmemory", "percent",
                                 "cambricon.com/mlu.smlu.vcore"),
    "amd": VendorResources("amd.com/gpu"),
}
KIND_VENDOR = {"gpu": "nvidia", "dcu": "hygon", "mlu": "cambricon"}

#: ``mapper.name`` of a plan → (HAMi node policy, HAMi GPU policy). HAMi knows "binpack" and
#: "spread" for both (``hami.io/node-scheduler-policy``, ``hami.io/gpu-scheduler-policy``,
#: HAMi ``docs/developers/scheduling.md``); plans from makespan mappers carry no policy.
POLICIES = {
    "binpack": ("binpack", "binpack"),
    "binpack-node": ("binpack", None),
    "spread": ("spread", "spread"),
    "spread-node": ("spread", None),
    "least-loaded": (None, "spread"),
}


@dataclass
class DeviceGroup:
    """One node of the plan and what its pod asks for."""

    node: str
    devices: list[str]                                  # plan device ids with tasks, plan order
    limits: dict[str, int] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    tasks: int = 0


def vendor_of(kind: str, vendor: Optional[str]) -> Optional[str]:
    """The resource vendor of a device: its ``vendor`` when known to :data:`VENDORS`, else by kind."""
    v = (vendor or "").lower()
    if v in VENDORS:
        return v
    return KIND_VENDOR.get(kind)


def device_groups(plan: Plan, share: Optional[float] = None) -> list[DeviceGroup]:
    """The plan's device groups in plan order (see the module docstring).

    Parameters
    ----------
    plan : Plan
    share : float, optional
        The share of each accelerator to ask for (0 < share <= 1), overriding the plan's.

    Raises
    ------
    StreamMapError
        A used device whose kind no device plugin offers (an ``npu`` of an unknown vendor).
    """
    if share is not None and not 0 < share <= 1:
        raise StreamMapError(f"share must be in (0, 1], got {share}", hint="for example --share 0.5")
    uuids = _uuids(plan)
    by_device = plan.tasks_by_device()
    groups: dict[str, DeviceGroup] = {}
    shares: dict[str, float] = {}
    for t in plan.tasks:
        s = getattr(t, "share", None)
        shares[t.device] = max(shares.get(t.device, 0.0), float(s) if s else 1.0)
    for d in plan.devices:
        if not by_device.get(d.id):
            continue
        node = d.id.split("/", 1)[0] if "/" in d.id else d.id
        g = groups.setdefault(node, DeviceGroup(node=node, devices=[]))
        g.devices.append(d.id)
        g.tasks += len(by_device[d.id])
    out = []
    for g in groups.values():
        _fill(plan, g, shares, share, uuids)
        out.append(g)
    return out


def _fill(plan: Plan, g: DeviceGroup, shares, share_override, uuids) -> None:
    per_vendor: dict[str, list] = {}
    for i in g.devices:
        d = plan.device(i)
        if d.kind == "cpu":
            continue
        vendor = vendor_of(d.kind, d.vendor)
        if vendor is None:
            raise StreamMapError(
                f"device {i} ({d.kind}, vendor {d.vendor or 'unknown'}) has no Kubernetes resource name "
                "StreamMAP knows", hint=f"set 'vendor' in the cluster file to one of {', '.join(sorted(VENDORS))}")
        per_vendor.setdefault(vendor, []).append(d)
    g.limits["cpu"] = len(g.devices)
    for vendor, devs in per_vendor.items():
        res = VENDORS[vendor]
        g.limits[res.count] = len(devs)
        share = share_override if share_override is not None else max(shares.get(d.id, 1.0) for d in devs)
        if share < 1:
            if res.cores:
                g.limits[res.cores] = max(1, min(100, math.ceil(share * 100)))
            if res.memory:
                if res.memory_unit == "percent":
                    g.limits[res.memory] = max(1, min(100, math.ceil(share * 100)))
                elif all(d.memory for d in devs):
                    g.limits[res.memory] = max(1, math.ceil(max(d.memory for d in devs) * share / MIB))
        pins = [uuids[d.id] for d in devs if uuids.get(d.id)]
        if res.uuid_annotation and pins and len(pins) == len(devs):
            g.annotations[res.uuid_annotation] = ",".join(pins)
    # "binpack+share", "least-loaded+share+remap": the policy that placed the tasks
    node_policy, gpu_policy = POLICIES.get(plan.mapper.name.split("+")[0], (None, None))
    if per_vendor and node_policy:
        g.annotations["hami.io/node-scheduler-policy"] = node_policy
    if per_vendor and gpu_policy:
        g.annotations["hami.io/gpu-scheduler-policy"] = gpu_policy


def _cluster_devices(plan: Plan):
    spec = plan.cluster.spec or {}
    for node in spec.get("nodes") or []:
        for d in node.get("devices") or []:
            yield f"{node.get('name')}/{d.get('name')}", d


def _uuids(plan: Plan) -> dict[str, str]:
    """Device id → UUID, from the cluster spec the plan carries (discovery writes UUIDs)."""
    return {i: str(d["uuid"]) for i, d in _cluster_devices(plan) if d.get("uuid")}
