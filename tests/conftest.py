"""Fixtures every test folder may ask for.

State a test must not leak is set up and undone here: the performance history (every test gets
its own, empty), and a fake CuPy installed as ``cupy``. Paths come as fixtures too, so that a test
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
