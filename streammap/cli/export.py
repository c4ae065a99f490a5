"""``streammap export k8s``: a plan as Kubernetes manifests (Pods or Jobs, a ConfigMap, gang objects)."""

from __future__ import annotations

from streammap import __version__
from streammap.errors import EXIT_USAGE, StreamMapError
from streammap.k8s import K8S_VERSION, export_k8s, schemas_available
from streammap.k8s.resources import device_groups
from streammap.plan import read_plan

#: The tag `make image` builds (the repository's Dockerfile: CUDA runtime, CuPy, streammap[cluster]).
DEFAULT_IMAGE = f"streammap:{__version__}"


def configure(parser, command: str) -> None:
    targets = parser.add_subparsers(title="targets", metavar="TARGET")
    """``streammap export k8s PLAN -o DIR``."""
    k = targets.add_parser("k8s", help="one Pod or Job per node of the plan, a ConfigMap with the plan and program")
    k.add_argument("plan", help="plan.yaml")
    k.add_argument("-o", "--output", required=True, metavar="DIR", help="folder for the manifests")
    k.add_argument("--image", default=DEFAULT_IMAGE,
                   help=f"container image with streammap installed (default {DEFAULT_IMAGE}: what `make image` builds "
                        "from the repository's Dockerfile; tag and push it to a registry the cluster pulls from)")
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
    k.set_defaults(func=run)
    parser.set_defaults(func=lambda args: (parser.print_help(), EXIT_USAGE)[1])


def run(args) -> int:
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
    if schemas_available():
        checked = f"valid for Kubernetes {args.k8s_version}"
    else:
        checked = (f"checked by StreamMAP's own rules, not the Kubernetes {args.k8s_version} schemas "
                   "(pip install 'streammap[k8s]' adds those)")
    print(f"wrote {len(files) - 1} object(s) to {args.output} (all.yaml has them all), {checked}:")
    for g in groups:
        asks = ", ".join(f"{k}={v}" for k, v in g.limits.items())
        print(f"  node {g.node}: {len(g.devices)} device(s), {g.tasks} task(s): {asks}")
    if plan.source.kind == "workflow":
        print("note: a workflow plan has no kernels: the pods reserve its devices, but streammap run "
              "refuses to run it")
    if args.image == DEFAULT_IMAGE:
        print(f"image {DEFAULT_IMAGE}: build it with `make image`, then make it reachable from the cluster's nodes: "
              f"docker tag {DEFAULT_IMAGE} REGISTRY/{DEFAULT_IMAGE} && docker push REGISTRY/{DEFAULT_IMAGE}, and "
              "export again with --image REGISTRY/" + DEFAULT_IMAGE)
    print(f"apply with: kubectl apply -f {args.output}/all.yaml")
    return 0
