"""Discovery across a Ray cluster: one ``cluster.yaml`` for every alive node.

:func:`discover_ray` connects to Ray (``address``), runs :func:`streammap.cluster.discover.discover` in a
task pinned to each alive node (``NodeAffinitySchedulingStrategy(node_id, soft=False)``, no CPU or
GPU reserved, so it runs even on a fully busy node), and merges the single-node specs into one
:class:`~streammap.cluster.model.ClusterSpec`.

Node names
----------
A node's name is, in order of preference:

1. its Ray label ``streammap-node`` (``ray start --labels streammap-node=node0 ...``; with older
   Ray: ``--labels='{"streammap-node": "node0"}'``);
2. otherwise its host name (sanitised to ``[A-Za-z0-9_.-]``), suffixed with the first 6 hex digits
   of its Ray node id (``myhost-1a2b3c``) when several Ray nodes share that host name (emulated
   nodes, several raylets on one machine).

The Ray executor (:mod:`streammap.runtime.ray.executor`) uses the same names
(:func:`ray_node_names`) to match a plan's ``node/device`` ids to Ray nodes, so a plan compiled
for the discovered ``cluster.yaml`` runs there unchanged.

Network between nodes: not measured; :data:`DEFAULT_NETWORK` (10 GB/s, 20 µs: a 100 Gb/s fabric
with TCP-level latency) is written and may be edited.
"""

from __future__ import annotations

from collections import Counter

from streammap.cluster.discover import Discovery, discover, sanitise_name
from streammap.cluster.model import ClusterSpec, Link
from streammap.errors import StreamMapError

#: The Ray node label that names a StreamMAP node.
NODE_LABEL = "streammap-node"
#: Link written between nodes (not measured).
DEFAULT_NETWORK = {"bandwidth": 10e9, "latency": 20e-6}


def import_ray():
    """``ray``, or a :class:`StreamMapError` saying how to install it."""
    try:
        import ray  # noqa: PLC0415 -- optional dependency
    except Exception as exc:  # noqa: BLE001
        raise StreamMapError(f"Ray is not installed ({type(exc).__name__}: {exc})",
                             hint="pip install 'streammap[cluster]'") from None
    return ray


def connect(address: str | None):
    """Connect to Ray at ``address`` unless already connected; return ``(ray, connected_here)``."""
    ray = import_ray()
    if ray.is_initialized():
        return ray, False
    try:
        ray.init(address=address, logging_level="WARNING", log_to_driver=True)
    except Exception as exc:  # noqa: BLE001 -- ConnectionError, ValueError, ...
        raise StreamMapError(f"cannot connect to Ray at {address or 'the default address'}: {exc}",
                             hint="start Ray with 'ray start --head' and pass its address "
                                  "(e.g. --address 10.0.0.1:6379 or auto)") from None
    return ray, True


def ray_node_names(nodes: list[dict]) -> dict[str, str]:
    """``{node id: StreamMAP node name}`` for the alive nodes of ``ray.nodes()`` (see module doc)."""
    alive = [n for n in nodes if n.get("Alive")]
    hosts = Counter(sanitise_name(n.get("NodeManagerHostname") or "") or "node" for n in alive)
    out: dict[str, str] = {}
    for n in sorted(alive, key=lambda n: n["NodeID"]):
        label = (n.get("Labels") or {}).get(NODE_LABEL)
        if label:
            name = sanitise_name(label)
        else:
            host = sanitise_name(n.get("NodeManagerHostname") or "") or "node"
            name = f"{host}-{n['NodeID'][:6]}" if hosts[host] > 1 else host
        out[n["NodeID"]] = name
    dup = [k for k, c in Counter(out.values()).items() if c > 1]
    if dup:
        raise StreamMapError(f"several Ray nodes are named {dup[0]!r}",
                             hint=f"give each node its own '{NODE_LABEL}' label (ray start --labels ...)")
    return out


def _discover_here(name: str, cluster_name: str):
    found = discover(node_name=name, cluster_name=cluster_name)
    return found.spec.model_dump(mode="json"), found.status, found.notes


def discover_ray(address: str | None = None, cluster_name: str = "ray", timeout: float = 120.0):
    """Discover every alive node of the Ray cluster at ``address``.

    Returns a :class:`streammap.cluster.discover.Discovery` (merged spec, status line, header notes).
    """
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # noqa: PLC0415


    ray, own = connect(address)
    try:
        names = ray_node_names(ray.nodes())
        if not names:
            raise StreamMapError("the Ray cluster has no alive node")
        fn = ray.remote(num_cpus=0, num_gpus=0, max_retries=0)(_discover_here)
        refs = {nid: fn.options(scheduling_strategy=NodeAffinitySchedulingStrategy(nid, soft=False))
                .remote(name, cluster_name) for nid, name in names.items()}
        nodes, notes, gpus, statuses = [], [], 0, []
        for nid, ref in sorted(refs.items(), key=lambda kv: names[kv[0]]):
            try:
                spec, status, node_notes = ray.get(ref, timeout=timeout)
            except Exception as exc:  # noqa: BLE001
                raise StreamMapError(f"discovery failed on Ray node {names[nid]} ({nid[:12]}): {exc}") from None
            node = spec["nodes"][0]
            nodes.append(node)
            n_gpu = sum(1 for d in node["devices"] if d["kind"] == "gpu")
            gpus += n_gpu
            statuses.append(f"{names[nid]}: {status}")
            notes += [f"{names[nid]}: {x}" for x in node_notes]
        data = {"name": cluster_name, "nodes": nodes}
        if len(nodes) > 1:
            data["network"] = dict(DEFAULT_NETWORK)
        merged = ClusterSpec.model_validate(data)
        head = [f"Ray cluster at {address or 'auto'}: {len(nodes)} node(s), named by the "
                f"'{NODE_LABEL}' label or the host name",
                "network between nodes: a default (10 GB/s, 20us), not measured"]
        return Discovery(spec=merged, status="; ".join(statuses), notes=head + statuses + notes, gpus=gpus)
    finally:
        if own:
            ray.shutdown()


__all__ = ["discover_ray", "ray_node_names", "NODE_LABEL", "DEFAULT_NETWORK", "connect", "import_ray", "Link"]
