"""``streammap monitor --ray``: every device of a Ray cluster, live.

One small actor per alive node, pinned there and reserving no CPU or GPU (as discovery's tasks,
:mod:`streammap.cluster.ray`), holds that node's samplers
(:func:`streammap.monitoring.telemetry.local_samplers`: NVML for all its GPUs, ``/proc`` for its CPU).
:class:`RayClusterSampler` asks them all at once every refresh and names each device by its node
(``node1/gpu0``, the names of the Ray executor and its run records). A node that has not answered
within ``timeout`` shows "no reading" for that refresh, and is not asked again until it answers
(so calls to a slow node never pile up); nodes that join later are not added (start the monitor
again).
"""

from __future__ import annotations

from streammap.cluster.ray import ray_node_names
from streammap.errors import StreamMapError
from streammap.monitoring.telemetry import DeviceInfo, Reading, Sampler, local_samplers, on_node


class NodeSampler:
    """A Ray actor sampling the node it runs on."""

    def __init__(self):
        self.samplers = local_samplers()

    def devices(self) -> list[DeviceInfo]:
        return [i for s in self.samplers for i in s.devices()]

    def sample(self) -> list[Reading]:
        out: list[Reading] = []
        for s in self.samplers:
            try:
                out += s.sample()
            except Exception:      # noqa: BLE001 -- telemetry never fails the monitor
                pass
        return out


class RayClusterSampler(Sampler):
    """Every alive node's devices, through one :class:`NodeSampler` actor per node.

    Parameters
    ----------
    ray : module
        ``ray``, connected.
    timeout : float
        Seconds a refresh waits for the nodes' readings (and start-up waits for their devices,
        at least 30).
    """

    source = "ray"

    def __init__(self, ray, timeout: float = 1.0):
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # noqa: PLC0415

        self.ray, self.timeout = ray, timeout
        self._pending: dict = {}             # node -> its sample call not answered yet
        names = ray_node_names(ray.nodes())
        if not names:
            raise StreamMapError("the Ray cluster has no alive node")
        cls = ray.remote(num_cpus=0, num_gpus=0, max_restarts=0)(NodeSampler)
        self.actors = {name: cls.options(scheduling_strategy=NodeAffinitySchedulingStrategy(nid, soft=False)).remote()
                       for nid, name in sorted(names.items(), key=lambda kv: kv[1])}
        refs = {node: a.devices.remote() for node, a in self.actors.items()}
        self._devices: list[DeviceInfo] = []
        for node, r in refs.items():
            try:
                self._devices += on_node(node, ray.get(r, timeout=max(30.0, timeout)))
            except Exception as exc:  # noqa: BLE001
                self.close()
                raise StreamMapError(f"cannot sample Ray node {node}: {exc}") from None

    def devices(self) -> list[DeviceInfo]:
        return list(self._devices)

    def sample(self) -> list[Reading]:
        for node, a in self.actors.items():
            if node not in self._pending:
                self._pending[node] = a.sample.remote()
        refs = {r: node for node, r in self._pending.items()}
        ready, _ = self.ray.wait(list(refs), num_returns=len(refs), timeout=self.timeout)
        out: list[Reading] = []
        for r in ready:
            node = refs[r]
            del self._pending[node]
            try:
                out += on_node(node, self.ray.get(r))
            except Exception:      # noqa: BLE001 -- a node lost since: no reading for it
                continue
        return out

    def close(self) -> None:
        """Stop the nodes' actors."""
        for a in self.actors.values():
            try:
                self.ray.kill(a)
            except Exception:      # noqa: BLE001
                pass
        self.actors = {}
