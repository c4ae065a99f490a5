"""Discoveries built by hand for calibration tests: one node of given devices, no machine probed."""

from streammap.cluster.discover import Discovery
from streammap.cluster.model import ClusterSpec, Node


def one_node(*devices) -> Discovery:
    """A discovery of one node ``n`` holding ``devices`` (a 10 GB/s link), as ``discover`` returns it."""
    return Discovery(spec=ClusterSpec(name="x", nodes=[Node(name="n", link={"bandwidth": 1e10}, devices=list(devices))]),
                     status="test", notes=[])
