"""Fixtures of the cluster tests: one real CPU measurement, and a cluster file calibrated from a
given measurement and read back."""

import pytest

from streammap.cluster import microbench
from streammap.cluster.discover import calibrate, write_cluster
from streammap.cluster.model import DeviceSpec, load_cluster
from tests.helpers.clusters import one_node

CPU = DeviceSpec(name="cpu", kind="cpu")


@pytest.fixture(scope="session")
def cpu_measurement() -> microbench.Measured:
    """This machine's CPU measured once with NumPy (short budget), shared by every test that only
    reads what a real measurement gives (a measurement is immutable)."""
    return microbench.measure_device(CPU, budget_s=0.05)


@pytest.fixture
def calibrated_cpu_file(tmp_path):
    """``calibrated_cpu_file(measured) -> (text, device)``: a one-CPU node calibrated with
    ``measured`` (no measurement runs), written by ``discover``'s writer and loaded back."""
    def write(measured: microbench.Measured):
        found = calibrate(one_node(CPU), measure=lambda device, **_: measured)
        out = tmp_path / "cluster.yaml"
        write_cluster(found.spec, out, found.notes)
        return out.read_text(), load_cluster(out).devices[0]
    return write
