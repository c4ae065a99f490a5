"""``streammap serve --cluster local`` on a machine without a GPU.

The service grants accelerators to jobs; ``--cluster local`` on a CPU-only machine finds none. It
refuses (exit status 2, nothing written) saying what to pass instead: a cluster file of the GPUs
to emulate, with ``--emulate``; and that, on this same CPU-only machine, serves and runs jobs.
"""

from __future__ import annotations

import time

import numpy as np

from streammap.cluster.model import cluster_from_dict
from streammap.tenancy.service import JobService
from tests.helpers.cli import refused
from tests.helpers.multifile import ONE_CPU
from tests.helpers.paths import SHARED, needs_shared
from tests.tenancy.test_job_service import SLEEPY, TENANTS


def test_serve_local_on_a_cpu_only_machine_says_to_emulate_a_cluster_file(tmp_path, capsys, monkeypatch):
    # This machine as discovery sees one without a GPU (whatever the machine running the test has).
    monkeypatch.setattr("streammap.compiler.discover_local", lambda: cluster_from_dict(ONE_CPU).spec)
    (tmp_path / "tenants.yaml").write_text(TENANTS)
    state = tmp_path / "state"
    for extra in ([], ["--emulate"]):
        refused(["serve", "--cluster", "local", "--tenants", tmp_path / "tenants.yaml", "--state", state,
                 "--port", "0", *extra], capsys,
                "--cluster local found no GPU", "--cluster cluster.yaml --emulate")
        assert not state.exists()


def test_a_cluster_file_without_accelerators_is_refused_at_its_path(tmp_path, capsys):
    (tmp_path / "cpu.yaml").write_text("name: cpu-only\nnodes:\n  - name: n0\n    devices:\n"
                                       "      - {name: cpu, kind: cpu}\n")
    (tmp_path / "tenants.yaml").write_text(TENANTS)
    refused(["serve", "--cluster", tmp_path / "cpu.yaml", "--tenants", tmp_path / "tenants.yaml",
             "--state", tmp_path / "state", "--emulate"], capsys, "cpu.yaml: error: ", "no accelerator")
    assert not (tmp_path / "state").exists()


@needs_shared
def test_the_suggested_emulated_cluster_file_serves_jobs_on_this_cpu(tmp_path):
    (tmp_path / "tenants.yaml").write_text(TENANTS)
    svc = JobService(SHARED / "clusters" / "hetero-2x4.yaml", tmp_path / "tenants.yaml", tmp_path / "state",
                     emulate=True, isolation="none", mapper="heft", tick=0.1)
    svc.start()
    try:
        job = svc.submit("vision", "sleepy.py", SLEEPY, params={"SECONDS": 0.01, "VALUE": 3})
        deadline = time.time() + 120
        while (row := svc.store.get(job))["state"] in ("queued", "running"):
            assert time.time() < deadline, f"{job} still {row['state']}"
            time.sleep(0.1)
        assert row["state"] == "done", row["error"]
        np.testing.assert_array_equal(np.load(svc.store.job_dir(job) / "result.npz")["result"], np.full(4, 3.0))
    finally:
        svc.stop()
