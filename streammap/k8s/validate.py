"""Checking Kubernetes objects without a cluster: the API schemas, then what the schemas miss.

:func:`validate_objects` returns every problem it finds as a readable line
(``Pod/fm-radio-node0: spec.containers[0].resources.limits.nvidia.com/gpucores: 120 is not in
0..100``); :func:`check_objects` raises one :class:`~streammap.errors.StreamMapError` with them.

1. **Schemas.** Core objects (Pod, Job, ConfigMap, Service) go through ``kubernetes-validate``
   in strict mode (unknown fields are errors) against the OpenAPI schemas of Kubernetes
   :data:`K8S_VERSION`, which the package ships, so no cluster or network is needed. 1.30 is a
   version every current HAMi, Volcano and Kueue release supports, and an API server accepts
   what its schema accepts in later versions too (these objects use only GA fields).
   Volcano's PodGroup is a CRD with no schema there; it gets the checks of its CRD's required
   fields (:func:`_podgroup`).

2. **Semantics** the OpenAPI schemas leave to the API server's validation code
   (``k8s.io/apimachinery/pkg/util/validation``, ``pkg/apis/core/validation``):

   - object names: RFC 1123 subdomains (≤ 253), and labels (≤ 63) for Pods, Jobs, Services,
     containers, volumes and ports;
   - label and annotation keys (``prefix/name``), label and ``nodeSelector`` values (≤ 63,
     alphanumeric at both ends);
   - resource quantities (``^[+-]?digits[.digits][suffix]$``, never negative);
   - extended resources (any name outside ``cpu``, ``memory``, ``ephemeral-storage``,
     ``hugepages-*``) are whole numbers, and where requested equal their limits;
   - no ``spec.nodeName`` (HAMi, Volcano and Kueue schedule only pods the scheduler places);
   - HAMi: ``*cores`` and percent memory in 0..100, ``*mem`` a positive whole number of MiB,
     a share asked only beside its device count, policies ``binpack``/``spread``;
   - ConfigMap keys (``[-._a-zA-Z0-9]+``) and at most 1 MiB of data;
   - ``metadata.namespace`` an RFC 1123 label (``../../etc`` is not), a PersistentVolumeClaim's
     ``claimName`` an RFC 1123 subdomain (as the API server checks PVC names), and container
     images OCI references (``[registry[:port]/]path[:tag][@digest]``, no spaces, no ``..``).
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Iterable

from streammap.errors import StreamMapError
from streammap.k8s.resources import VENDORS

K8S_VERSION = "1.30"

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_QUANTITY = re.compile(r"^(?P<num>[+-]?(\d+(\.\d*)?|\.\d+))(?P<suf>[KMGTPE]i|[numkMGTPE]|[eE][+-]?\d+)?$")
_CONFIGMAP_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
# The OCI (docker/distribution) reference grammar: [domain[:port]/]path[:tag][@digest].
_DOMAIN_PART = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_PATH_PART = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_IMAGE = re.compile(rf"^(?:{_DOMAIN_PART}(?:\.{_DOMAIN_PART})*(?::[0-9]+)?/)?{_PATH_PART}(?:/{_PATH_PART})*"
                    r"(?::[\w][\w.-]{0,127})?"
                    r"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?$")
_SUFFIX = {"": 1, "n": Fraction(1, 10**9), "u": Fraction(1, 10**6), "m": Fraction(1, 1000), "k": 10**3,
           "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
           "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_STANDARD = ("cpu", "memory", "ephemeral-storage")
CONFIGMAP_LIMIT = 1024 * 1024
_HAMI_PERCENT = {r for v in VENDORS.values() for r in (v.cores, v.memory if v.memory_unit == "percent" else None) if r}
_HAMI_MIB = {v.memory for v in VENDORS.values() if v.memory and v.memory_unit == "MiB"}
_SHARE_OF = {r: v.count for v in VENDORS.values() for r in (v.cores, v.memory) if r}
_POLICIES = {"hami.io/node-scheduler-policy": ("binpack", "spread"),
             "hami.io/gpu-scheduler-policy": ("binpack", "spread", "topology-aware")}


def schemas_available() -> bool:
    """Whether ``kubernetes-validate`` (the ``k8s`` extra) is installed to check the schemas."""
    try:
        import kubernetes_validate  # noqa: F401, PLC0415 -- loads the schemas only when validating
    except ImportError:
        return False
    return True


def validate_objects(objects: Iterable[dict], version: str = K8S_VERSION, schemas: bool = True) -> list[str]:
    """Every problem of ``objects`` (schemas, then semantics), ``[]`` when they are all valid.
    ``schemas=False`` leaves out step 1 for the core objects (PodGroups keep their CRD checks)."""
    problems: list[str] = []
    for obj in objects:
        where = f"{obj.get('kind', '?')}/{(obj.get('metadata') or {}).get('name', '?')}"
        schema = _schema(obj, version) if schemas or obj.get("kind") == "PodGroup" else []
        found = schema + _semantics(obj)
        problems += [f"{where}: {p}" for p in found]
    return problems


def check_version(version: str) -> None:
    """Raise :class:`StreamMapError` unless the schema library has schemas for ``version`` (the
    library fails with its own exceptions, or an IndexError, on a version it does not know)."""
    try:
        from kubernetes_validate.utils import all_versions  # noqa: PLC0415 -- with the schemas, when validating
    except ImportError:
        return                          # _schema says the library is missing
    known = sorted({".".join(v.split(".")[:2]) for v in all_versions()}, key=lambda v: tuple(map(int, v.split("."))))
    if not re.fullmatch(r"[0-9]{1,3}\.[0-9]{1,3}(\.[0-9]{1,3})?", version) or \
            ".".join(version.split(".")[:2]) not in known:
        raise StreamMapError(f"--k8s-version {version[:100]}: no Kubernetes schemas for this version",
                             hint=f"give one of {known[0]} to {known[-1]} (default {K8S_VERSION})")


def check_objects(objects: list[dict], version: str = K8S_VERSION) -> bool:
    """Raise :class:`StreamMapError` listing every problem of ``objects``; return whether the
    schemas were checked. Without ``kubernetes-validate`` (a plain ``pip install streammap``) only
    the semantic checks run: the export still works, and its caller says what was not checked."""
    check_version(version)
    schemas = schemas_available()
    problems = validate_objects(objects, version, schemas=schemas)
    if problems:
        raise StreamMapError(f"{len(problems)} problem(s) in the Kubernetes objects:\n  " + "\n  ".join(problems),
                             hint="fix the option value named above (--name, --image, --namespace, --pvc, --queue, --node-label); "
                                  "map a plan node whose name is no Kubernetes label value with --node PLAN=K8S")
    return schemas


# -- schemas ----------------------------------------------------------------------------------------

def _schema(obj: dict, version: str) -> list[str]:
    if obj.get("kind") == "PodGroup":
        return _podgroup(obj)
    try:
        import kubernetes_validate  # noqa: PLC0415 -- loads the schemas only when validating
    except ImportError:
        return ["cannot check against the Kubernetes schemas: kubernetes-validate is not installed "
                "(pip install 'streammap[k8s]')"]
    try:
        kubernetes_validate.validate(obj, version, strict=True)
    except kubernetes_validate.ValidationError as exc:
        path = ".".join(str(p) for p in exc.absolute_path) or "(object)"
        return [f"{path}: {exc.message} (Kubernetes {version} schema)"]
    except kubernetes_validate.SchemaNotFoundError:
        return [f"no Kubernetes {version} schema for {obj.get('apiVersion')} {obj.get('kind')}"]
    return []


def _podgroup(obj: dict) -> list[str]:
    """Volcano's PodGroup CRD (``scheduling.volcano.sh/v1beta1``): required and typed fields."""
    out = []
    if obj.get("apiVersion") != "scheduling.volcano.sh/v1beta1":
        out.append(f"apiVersion: {obj.get('apiVersion')!r} is not scheduling.volcano.sh/v1beta1")
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return out + ["spec: missing"]
    unknown = set(spec) - {"minMember", "minResources", "queue", "priorityClassName", "minTaskMember"}
    if unknown:
        out.append(f"spec: unknown field(s) {', '.join(sorted(unknown))}")
    mm = spec.get("minMember")
    if not isinstance(mm, int) or isinstance(mm, bool) or mm < 1:
        out.append(f"spec.minMember: {mm!r} is not a positive integer")
    if "queue" in spec and not (isinstance(spec["queue"], str) and _DNS_SUBDOMAIN.match(spec["queue"])):
        out.append(f"spec.queue: {spec['queue']!r} is not a valid queue name")
    return out


# -- semantics --------------------------------------------------------------------------------------

def _semantics(obj: dict) -> list[str]:
    out: list[str] = []
    kind = obj.get("kind")
    meta = obj.get("metadata") or {}
    name = meta.get("name")
    pattern, limit = ((_DNS_LABEL, 63) if kind in ("Pod", "Job", "Service") else (_DNS_SUBDOMAIN, 253))
    if not isinstance(name, str) or len(name) > limit or not pattern.match(name):
        out.append(f"metadata.name: {name!r} is not a valid {kind} name "
                   f"(lower-case alphanumerics and '-', at most {limit} characters)")
    out += _meta(meta, "metadata")
    namespace = meta.get("namespace")
    if namespace is not None and not dns_label_ok(namespace):
        out.append(f"metadata.namespace: {namespace!r} is not a valid namespace "
                   "(an RFC 1123 label: lower-case alphanumerics and '-', at most 63 characters)")
    if kind == "ConfigMap":
        out += _configmap(obj)
    elif kind == "Pod":
        out += _pod_spec(obj.get("spec") or {}, "spec", meta)
    elif kind == "Job":
        tmpl = (obj.get("spec") or {}).get("template") or {}
        out += _meta(tmpl.get("metadata") or {}, "spec.template.metadata")
        out += _pod_spec(tmpl.get("spec") or {}, "spec.template.spec", tmpl.get("metadata") or {})
    return out


def _meta(meta: dict, at: str) -> list[str]:
    out = []
    for key, value in (meta.get("labels") or {}).items():
        out += _key(key, f"{at}.labels")
        if not isinstance(value, str) or len(value) > 63 or not _LABEL_VALUE.match(value):
            out.append(f"{at}.labels.{key}: {value!r} is not a valid label value "
                       "(at most 63 of [A-Za-z0-9_.-], alphanumeric at both ends)")
    for key, value in (meta.get("annotations") or {}).items():
        out += _key(key, f"{at}.annotations")
        if key in _POLICIES and value not in _POLICIES[key]:
            out.append(f"{at}.annotations.{key}: {value!r} is not one of {', '.join(_POLICIES[key])}")
    return out


def _key(key, at: str) -> list[str]:
    if not isinstance(key, str):
        return [f"{at}: key {key!r} is not a string"]
    prefix, slash, name = key.rpartition("/")
    bad = (len(name) > 63 or not _QUALIFIED_NAME.match(name)
           or (slash and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix))))
    return [f"{at}: {key!r} is not a valid key ([prefix/]name, name at most 63 characters)"] if bad else []


def _configmap(obj: dict) -> list[str]:
    out = []
    data = obj.get("data") or {}
    for key in data:
        if len(key) > 253 or not _CONFIGMAP_KEY.match(key):
            out.append(f"data: key {key!r} is not a valid ConfigMap key ([-._a-zA-Z0-9]+)")
    size = sum(len(k.encode()) + len(str(v).encode()) for k, v in data.items())
    if size > CONFIGMAP_LIMIT:
        out.append(f"data: {size} bytes, more than a ConfigMap's {CONFIGMAP_LIMIT} (1 MiB)")
    return out


def _pod_spec(spec: dict, at: str, meta: dict) -> list[str]:
    out = []
    if spec.get("nodeName"):
        out.append(f"{at}.nodeName: set; HAMi, Volcano and Kueue cannot schedule a pod bound to a node "
                   "(use nodeSelector or nodeAffinity)")
    for key, value in (spec.get("nodeSelector") or {}).items():
        out += _key(key, f"{at}.nodeSelector")
        if not isinstance(value, str) or len(value) > 63 or not _LABEL_VALUE.match(value):
            out.append(f"{at}.nodeSelector.{key}: {value!r} is not a valid label value")
    for v in spec.get("volumes") or []:
        if not _DNS_LABEL.match(str(v.get("name", ""))):
            out.append(f"{at}.volumes: name {v.get('name')!r} is not an RFC 1123 label")
        claim = (v.get("persistentVolumeClaim") or {}).get("claimName")
        if claim is not None and not dns_subdomain_ok(claim):
            out.append(f"{at}.volumes: claimName {claim!r} is not a valid PersistentVolumeClaim name "
                       "(an RFC 1123 subdomain: lower-case alphanumerics, '-' and '.', at most 253 characters)")
    annotations = meta.get("annotations") or {}
    for i, c in enumerate(spec.get("containers") or []):
        cat = f"{at}.containers[{i}]"
        if not _DNS_LABEL.match(str(c.get("name", ""))):
            out.append(f"{cat}.name: {c.get('name')!r} is not an RFC 1123 label")
        if not image_ok(c.get("image")):
            out.append(f"{cat}.image: {c.get('image')!r} is not an OCI image reference "
                       "([registry[:port]/]name[:tag][@sha256:digest], e.g. ghcr.io/org/streammap:1.0)")
        out += _resources(c.get("resources") or {}, f"{cat}.resources", annotations)
    return out


def _resources(res: dict, at: str, annotations: dict) -> list[str]:
    out = []
    values: dict[str, dict] = {}
    for part in ("limits", "requests"):
        for name, q in (res.get(part) or {}).items():
            where = f"{at}.{part}.{name}"
            v = parse_quantity(q)
            if v is None:
                out.append(f"{where}: {q!r} is not a Kubernetes quantity")
                continue
            if v < 0:
                out.append(f"{where}: {q!r} is negative")
                continue
            values.setdefault(part, {})[name] = v
            if _extended(name) and v.denominator != 1:
                out.append(f"{where}: {q!r}: extended resources are whole numbers")
            if name in _HAMI_PERCENT and not 0 <= v <= 100:
                out.append(f"{where}: {q!r} is not in 0..100 (a percentage)")
            if name in _HAMI_MIB and (not isinstance(q, int) and not str(q).isdigit() or v <= 0):
                out.append(f"{where}: {q!r}: HAMi reads device memory as a positive whole number of MiB")
    limits, requests = values.get("limits", {}), values.get("requests", {})
    for name, v in requests.items():
        if _extended(name) and limits.get(name) != v:
            out.append(f"{at}.requests.{name}: {v} must equal limits.{name} ({limits.get(name)}): "
                       "extended resources cannot be overcommitted")
    for name, count in _SHARE_OF.items():
        if name in limits and count not in limits:
            out.append(f"{at}.limits.{name}: set without {count} (a share of which device?)")
    for vendor in VENDORS.values():
        pins = annotations.get(vendor.uuid_annotation) if vendor.uuid_annotation else None
        if pins and vendor.count in limits and len(pins.split(",")) < limits[vendor.count]:
            out.append(f"annotation {vendor.uuid_annotation}: {len(pins.split(','))} UUID(s) for "
                       f"{limits[vendor.count]} x {vendor.count}")
    return out


def dns_label_ok(text) -> bool:
    """Whether ``text`` is an RFC 1123 label (namespaces, Pod, Job and Service names)."""
    return isinstance(text, str) and len(text) <= 63 and bool(_DNS_LABEL.match(text))


def dns_subdomain_ok(text) -> bool:
    """Whether ``text`` is an RFC 1123 subdomain (ConfigMap and PersistentVolumeClaim names)."""
    return isinstance(text, str) and len(text) <= 253 and bool(_DNS_SUBDOMAIN.match(text))


def image_ok(text) -> bool:
    """Whether ``text`` is an OCI image reference (``ghcr.io/org/app:1.0``, ``python:3.11``)."""
    return isinstance(text, str) and len(text) <= 1024 and bool(_IMAGE.match(text))


def _extended(name: str) -> bool:
    return name not in _STANDARD and not name.startswith("hugepages-")


def parse_quantity(q) -> Fraction | None:
    """A Kubernetes quantity as an exact number (``"1.5Gi"`` → 1610612736), ``None`` if invalid."""
    if isinstance(q, bool):
        return None
    if isinstance(q, int):
        return Fraction(q)
    if isinstance(q, float):
        return Fraction(q) if q == q and abs(q) != float("inf") else None
    m = _QUANTITY.match(str(q))
    if not m:
        return None
    num, suf = Fraction(m.group("num")), m.group("suf") or ""
    if suf[:1] in ("e", "E"):
        return num * Fraction(10) ** int(suf[1:])
    return num * _SUFFIX[suf]
