"""A custom placement policy: devices of one vendor first, else the least-loaded device.

A placement policy chooses a device for one task at a time; StreamMAP's list scheduler does the
rest (task order, start times, memory checks), so the plan is always valid. Use this one with::

    streammap compile samples/fm_radio.py --cluster ../shared/benchmarks/clusters/mixed-vendors.yaml \\
        --mapper samples.custom_policy:PreferVendor

(run from the project root, so that ``samples.custom_policy`` can be imported), or from Python with
``streammap.compile(..., mapper="samples.custom_policy:PreferVendor")``. To make it available by a
short name, register it in your package's ``pyproject.toml``::

    [project.entry-points."streammap.policies"]
    prefer-nvidia = "mypkg.policies:PreferVendor"

and use ``--mapper prefer-nvidia``. See ``streammap.mappers.policies`` for what ``state`` holds.

Run directly (``python samples/custom_policy.py``), it maps the FM-radio sample with this policy
on a small made-up cluster and prints where the tasks went.
"""

import numpy as np


class PreferVendor:
    """Devices of ``vendor`` first (the one with the fewest tasks among them), else least-loaded.

    ``choose`` gets the task position, the device positions where the task can run and fits
    (ascending, never empty), and the placement state; it returns one of those positions.
    """

    vendor = "nvidia"

    def choose(self, task, feasible, state):
        mine = np.array([d for d in feasible if (state.devices[d].vendor or "").lower() == self.vendor])
        pool = mine if mine.size else feasible
        return int(pool[np.argmin(state.counts[pool])])


class PreferCambricon(PreferVendor):
    """The same policy for Cambricon MLUs: a subclass only changes ``vendor``."""

    vendor = "cambricon"


if __name__ == "__main__":
    from collections import Counter
    from pathlib import Path

    import streammap

    cluster = {
        "name": "two-vendors", "network": {"bandwidth": "25 GB/s", "latency": "5us"},
        "nodes": [
            {"name": "n0", "link": {"bandwidth": "300 GB/s", "latency": "3us"},
             "devices": [{"name": "gpu0", "kind": "gpu", "vendor": "nvidia", "model": "A100", "memory": "80GiB"},
                         {"name": "gpu1", "kind": "gpu", "vendor": "nvidia", "model": "A100", "memory": "80GiB"}]},
            {"name": "n1", "link": {"bandwidth": "32 GB/s", "latency": "5us"},
             "devices": [{"name": "mlu0", "kind": "mlu", "vendor": "cambricon", "model": "MLU370", "memory": "48GiB"}]},
        ]}
    from streammap.cluster.model import cluster_from_dict
    from streammap.mappers import MAPPERS
    from streammap.mappers.policies import PolicyMapper

    # Registered under a name for this run, so that this file works without being importable.
    MAPPERS["prefer-nvidia"] = PolicyMapper(PreferVendor, "prefer-nvidia")
    src = Path(__file__).with_name("fm_radio.py")
    plan = streammap.compile(src, cluster=cluster_from_dict(cluster), params={"N": 4096}, mapper="prefer-nvidia")
    used = Counter(t.device for t in plan.tasks)
    print(f"custom_policy: {len(plan.tasks)} tasks of fm_radio with PreferVendor: "
          + ", ".join(f"{d} {n}" for d, n in sorted(used.items())))
