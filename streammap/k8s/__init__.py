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

from ..errors import StreamMapError
from ..fileio import atomic_write_text
from ..plan import Plan, read_plan
from .manifests import PLAN_KEY, ExportOptions, build_manifests, plan_in_configmap
from .resources import DeviceGroup, device_groups
from .validate import K8S_VERSION, check_objects, validate_objects

__all__ = ["ExportOptions", "export_k8s", "build_manifests", "validate_objects", "check_objects",
           "device_groups", "DeviceGroup", "plan_from_configmap", "plan_in_configmap", "K8S_VERSION",
           "dump_objects", "add_export_parser"]


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
    """Read back the plan a ConfigMap carries, writing its files into ``folder`` (round trips)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for key, text in (config_map.get("data") or {}).items():
        atomic_write_text(folder / key, text)
    return read_plan(folder / PLAN_KEY)


def add_export_parser(sub) -> None:
    """``streammap export k8s PLAN -o DIR``."""
    e = sub.add_parser("export", help="export a plan for another system (k8s: Kubernetes manifests)")
    targets = e.add_subparsers(title="targets", metavar="TARGET")
    k = targets.add_parser("k8s", help="one Pod or Job per node of the plan, a ConfigMap with the plan and program")
    k.add_argument("plan", help="plan.yaml")
    k.add_argument("-o", "--output", required=True, metavar="DIR", help="folder for the manifests")
    k.add_argument("--image", required=True, help="container image with streammap installed "
                   "(pip install 'streammap[cluster,gpu]')")
    k.add_argument("--kind", choices=["pod", "job"], default="pod", help="Pod (default) or batch/v1 Job per node")
    k.add_argument("--name", help="object name prefix (default: the plan's program name)")
    k.add_argument("--namespace", help="metadata.namespace of every object")
    k.add_argument("--node-label", default="kubernetes.io/hostname",
                   help="node label the pods select on (default kubernetes.io/hostname)")
    k.add_argument("--node", dest="node_names", action="append", default=[], metavar="PLAN=K8S",
                   help="the Kubernetes node (its --node-label value) for a plan node (repeatable)")
    k.add_argument("--share", type=float, help="fraction of each accelerator to ask for (HAMi gpucores/gpumem), "
                   "overriding the plan's shares")
    k.add_argument("--gang", action="store_true", help="Volcano gang scheduling: a PodGroup, schedulerName volcano")
    k.add_argument("--volcano-queue", help="with --gang: the Volcano queue of the PodGroup")
    k.add_argument("--queue", help="Kueue LocalQueue (label kueue.x-k8s.io/queue-name)")
    k.add_argument("--pvc", help="PersistentVolumeClaim for /out (default: an emptyDir)")
    k.add_argument("--k8s-version", default=K8S_VERSION, help=f"schemas to validate against (default {K8S_VERSION})")
    k.set_defaults(func=_export_k8s_cli)
    e.set_defaults(func=lambda args: (e.print_help(), 2)[1])


def _export_k8s_cli(args) -> int:
    names = {}
    for item in args.node_names:
        plan_node, eq, k8s_node = item.partition("=")
        if not eq or not plan_node or not k8s_node:
            raise StreamMapError(f"--node {item!r}: expected PLAN_NODE=K8S_NODE", hint="for example --node node0=gpu-a1")
        names[plan_node] = k8s_node
    if args.volcano_queue and not args.gang:
        raise StreamMapError("--volcano-queue needs --gang")
    plan = read_plan(args.plan)
    files = export_k8s(plan, args.output, image=args.image, kind=args.kind, version=args.k8s_version,
                       name=args.name, namespace=args.namespace, node_label=args.node_label,
                       node_names=names, share=args.share, gang=args.gang,
                       volcano_queue=args.volcano_queue, queue=args.queue, pvc=args.pvc)
    groups = device_groups(plan, share=args.share)
    print(f"wrote {len(files) - 1} object(s) to {args.output} (all.yaml has them all), valid for "
          f"Kubernetes {args.k8s_version}:")
    for g in groups:
        asks = ", ".join(f"{k}={v}" for k, v in g.limits.items())
        print(f"  node {g.node}: {len(g.devices)} device(s), {g.tasks} task(s): {asks}")
    if plan.source.kind == "workflow":
        print("note: a workflow plan has no kernels: the pods reserve its devices, but streammap run "
              "refuses to run it")
    print(f"apply with: kubectl apply -f {args.output}/all.yaml")
    return 0
