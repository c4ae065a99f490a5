"""Kubernetes export: a plan as pods (or Jobs) that HAMi, Volcano and Kueue can schedule.

``streammap export k8s PLAN -o DIR --image IMAGE`` writes one YAML file per object into ``DIR``
(``00-configmap.yaml``, ``10-<pod>.yaml``, ...; ``kubectl apply -f DIR``) and a combined
``all.yaml``, after checking every object against the Kubernetes schemas and our own semantic
checks (:mod:`streammap.k8s.validate`), so nothing invalid is ever written.

Stages, each plain data: the plan's device groups and what they ask for
(:mod:`~streammap.k8s.resources`), the objects (:mod:`~streammap.k8s.manifests`), the checks
(:mod:`~streammap.k8s.validate`), and files. :mod:`streammap.k8s.entry` is what the pods run.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from streammap.errors import StreamMapError
from streammap.io.files import atomic_write_text
from streammap.k8s.manifests import PLAN_KEY, ExportOptions, build_manifests, configmap_key, plan_in_configmap
from streammap.k8s.resources import DeviceGroup, device_groups
from streammap.k8s.validate import K8S_VERSION, check_objects, schemas_available, validate_objects
from streammap.plan import Plan, read_plan

__all__ = ["ExportOptions", "export_k8s", "build_manifests", "validate_objects", "check_objects", "schemas_available",
           "device_groups", "DeviceGroup", "plan_from_configmap", "plan_in_configmap", "K8S_VERSION",
           "dump_objects"]


def export_k8s(plan, output_dir, *, image: str, kind: str = "pod", version: str = K8S_VERSION,
               **options) -> list[Path]:
    """Export ``plan`` (a :class:`Plan` or a plan path) as Kubernetes manifests into ``output_dir``.

    Keyword options are :class:`ExportOptions` fields (``namespace``, ``name``, ``node_label``,
    ``node_names``, ``share``, ``gang``, ``volcano_queue``, ``queue``, ``pvc``). Returns the files
    written. Raises :class:`StreamMapError` for a plan that cannot be exported or objects that do
    not validate (then nothing is written).
    """
    if not isinstance(plan, Plan):
        plan = read_plan(plan)
    objects = build_manifests(plan, ExportOptions(image=image, kind=kind, **options))
    check_objects(objects, version)
    out = Path(output_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StreamMapError(f"cannot create {out}: {exc.strerror or exc}") from None
    written = []
    for i, obj in enumerate(objects):
        path = out / f"{i:02d}-{obj['kind'].lower()}-{obj['metadata']['name']}.yaml"
        atomic_write_text(path, dump_objects([obj]), what="manifest")
        written.append(path)
    everything = out / "all.yaml"
    atomic_write_text(everything, dump_objects(objects), what="manifest")
    return [*written, everything]


def dump_objects(objects: list[dict]) -> str:
    """Objects as one YAML stream (``---`` between documents), block style for reading."""
    class _Dumper(yaml.SafeDumper):
        pass

    def _str(dumper, s):          # multi-line strings (the plan, the program) as literal blocks
        return dumper.represent_scalar("tag:yaml.org,2002:str", s, style="|" if "\n" in s else None)
    _Dumper.add_representer(str, _str)
    return yaml.dump_all(objects, Dumper=_Dumper, sort_keys=False, default_flow_style=False,
                         width=120, allow_unicode=True)


def plan_from_configmap(config_map: dict, folder) -> Plan:
    """Read back the plan a ConfigMap carries, writing its files into ``folder`` as the pods'
    volume mounts them (local modules at their paths: round trips)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    data = dict(config_map.get("data") or {})
    atomic_write_text(folder / PLAN_KEY, data.pop(PLAN_KEY, ""))
    plan = read_plan(folder / PLAN_KEY)
    paths = {configmap_key(m.path): m.path for m in plan.source.modules}
    for key, text in data.items():
        target = folder / paths.get(key, key)
        target.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(target, text)
    return plan
