"""The one Ray cluster of a test session: started by the first test that asks for it, stopped when
its last test is done (the ``ray_cluster`` fixture of tests/conftest.py).

Starting a 2-node cluster costs 10-15 s on a 2-core machine; three modules each started their own
(the executor's tests, the job service on Ray, doctor's network check). The tests that ask for it
run last, together (tests/conftest.py orders them), so its idle raylets and workers take CPU from
no other test, and the one that removes a node (``removes_a_ray_node``) runs after every other.

The cluster: a head node labelled ``node0`` (2 CPUs, no GPU) and a worker node labelled ``node1``
(2 CPUs, 2 fake GPUs), a small object store each, a private temp dir (short: Unix socket paths),
usage stats and auth off, and fast health checks (a removed node is seen dead in about a second).
The environment it sets is inherited by what the tests start (``streammap serve`` and its
workers), and restored when it stops; it stops only what it started.
"""

from __future__ import annotations

import os
import shutil
import tempfile

ENV = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled",
       "RAY_health_check_period_ms": "200", "RAY_health_check_timeout_ms": "200",
       "RAY_health_check_failure_threshold": "3", "RAY_health_check_initial_delay_ms": "0"}
#: Bytes of object store per node.
STORE = 80 * 2**20


class RayCluster:
    """The running cluster (:meth:`start`, :meth:`stop`): ``cluster`` is the
    ``ray.cluster_utils.Cluster``, ``worker`` its ``node1``, ``address`` the head's address."""

    def __init__(self):
        self.cluster = None
        self.worker = None
        self._old_env: dict = {}
        self._tmp = None

    @property
    def address(self) -> str:
        return self.cluster.address

    def start(self) -> "RayCluster":
        from ray.cluster_utils import Cluster
        self._old_env = {k: os.environ.get(k) for k in (*ENV, "RAY_TMPDIR")}
        self._tmp = tempfile.mkdtemp(prefix="smr", dir="/tmp")
        os.environ.update(ENV, RAY_TMPDIR=self._tmp)
        self.cluster = Cluster(initialize_head=True, head_node_args={
            "num_cpus": 2, "num_gpus": 0, "object_store_memory": STORE, "labels": {"streammap-node": "node0"},
            "temp_dir": os.path.join(self._tmp, "ray"), "include_dashboard": False})
        self.worker = self.cluster.add_node(num_cpus=2, num_gpus=2, object_store_memory=STORE,
                                            labels={"streammap-node": "node1"})
        self.cluster.wait_for_nodes()
        self.connect()
        return self

    def connect(self):
        """This process connected to the cluster as its driver (again, after a test disconnected it);
        returns the ``ray`` module."""
        import ray
        if not ray.is_initialized():
            ray.init(address=self.address, logging_level="WARNING")
        return ray

    def remove_worker(self) -> None:
        """Remove ``node1`` (a node loss, for the test that recovers from one)."""
        self.cluster.remove_node(self.worker)

    def stop(self) -> None:
        """Stop the cluster and restore the environment; a second call does nothing (the fixture
        stops it after its last test, and again at the session's end)."""
        if self.cluster is None:
            return
        import ray
        try:
            ray.shutdown()
            self.cluster.shutdown()
        finally:
            for k, v in self._old_env.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
            shutil.rmtree(self._tmp, ignore_errors=True)
            self.cluster = self.worker = None
