"""Fixtures every test folder may ask for.

State a test must not leak is set up and undone here: the performance history (every test gets
its own, empty), and a fake CuPy installed as ``cupy``. The session's one Ray cluster is here too
(``ray_cluster``), with the hook that runs the tests asking for it last, together. Paths come as fixtures too, so that a test
needing the shared benchmark data skips cleanly where ``../shared`` is absent instead of failing.

Plain builders (graphs, plans, fake NVML modules) are functions in :mod:`tests.helpers`, imported
absolutely; tests/ is a package, so they import the same way wherever pytest is started.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.helpers.fake_cupy import make_fake_cupy
from tests.helpers.paths import ROOT, SAMPLES, SHARED
from tests.helpers.ray_cluster import RayCluster


@pytest.fixture(autouse=True)
def _isolated_history(tmp_path_factory, monkeypatch):
    """Every test gets its own empty performance history: no test reads or writes the user's."""
    monkeypatch.setenv("STREAMMAP_HISTORY", str(tmp_path_factory.mktemp("history")))


@pytest.fixture
def root() -> Path:
    """The repository root."""
    return ROOT


@pytest.fixture
def samples() -> Path:
    """The sample programs' folder (samples/)."""
    return SAMPLES


@pytest.fixture(scope="session")
def shared() -> Path:
    """The shared benchmark data (``../shared/benchmarks``: workflows, clusters, classic, cholesky);
    the test is skipped where it is absent."""
    if not SHARED.exists():
        pytest.skip("needs ../shared/benchmarks")
    return SHARED


@pytest.fixture(scope="session")
def hetero_cluster(shared) -> Path:
    """The shared heterogeneous cluster file (2 nodes: 4 A100s and 4 V100s), which many folders
    compile for; skipped where the shared data is absent."""
    return shared / "clusters" / "hetero-2x4.yaml"


@pytest.fixture
def fake_cupy(monkeypatch):
    """Install a fake CuPy as ``cupy`` for this test: ``fake_cupy(n_devices=2, hip=False)`` returns it.

    ``hip=True`` makes it CuPy's ROCm build. A second call replaces the first; the real module (or its
    absence) is back after the test.
    """
    def install(n_devices: int = 2, hip: bool = False):
        fake = make_fake_cupy(n_devices)
        if hip:
            fake.cuda.runtime.is_hip = True
        monkeypatch.setitem(sys.modules, "cupy", fake)
        return fake
    return install


def pytest_configure(config):
    config.addinivalue_line("markers", "removes_a_ray_node: removes a node of the session's Ray cluster "
                                       "(runs after every other test that uses it)")


def pytest_collection_modifyitems(config, items):
    """Tests that use the session's Ray cluster run last, together, and one that removes a node of
    it after all of them: the cluster then starts once, and its idle processes slow no other test.
    The order within each group is the collection order."""
    def group(item) -> int:
        if "ray_cluster" not in getattr(item, "fixturenames", ()):
            return 0
        return 2 if item.get_closest_marker("removes_a_ray_node") else 1
    items[:] = sorted(items, key=group)          # a stable sort: each group keeps its order


@pytest.fixture(scope="session")
def ray_cluster():
    """The session's 2-node Ray cluster (:mod:`tests.helpers.ray_cluster`), this process connected
    to it as its driver; skipped where Ray is not installed."""
    pytest.importorskip("ray")
    c = RayCluster().start()
    try:
        yield c
    finally:
        c.stop()
