"""Fixtures every test folder may ask for.

State a test must not leak is set up and undone here: the performance history (every test gets
its own, empty), and a fake CuPy installed as ``cupy``. The session's one Ray cluster is here too
(``ray_cluster``), with the hooks that run the tests asking for it last, together, and under
pytest-xdist (``make test`` runs ``pytest -n 2``) in one worker, which alone starts Ray. Paths come as fixtures too, so that a test needing the shared benchmark data skips
cleanly where ``../shared`` is absent instead of failing.

Plain builders (graphs, plans, fake NVML modules) are functions in :mod:`tests.helpers`, imported
absolutely; tests/ is a package, so they import the same way wherever pytest is started.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.helpers import ray_group
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


def _uses_ray(item) -> bool:
    return "ray_cluster" in getattr(item, "fixturenames", ())


def pytest_collection_modifyitems(config, items):
    """Tests that use the session's Ray cluster run last, together, and one that removes a node of
    it after all of them: the cluster then starts once, and its idle processes slow no other test.
    The order within each group is the collection order. (Under pytest-xdist they run in one
    worker, in this order: :mod:`tests.helpers.ray_group`.)"""
    def group(item) -> int:
        if not _uses_ray(item):
            return 0
        return 2 if item.get_closest_marker("removes_a_ray_node") else 1
    items[:] = sorted(items, key=group)          # a stable sort: each group keeps its order


# -- pytest-xdist: the Ray tests in one worker (tests/helpers/ray_group.py says why and how) --------

_GROUP_DIR = pytest.StashKey[Path]()


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    """The controller names, in each worker's input, the folder the worker writes its Ray test ids to."""
    config = node.config
    if _GROUP_DIR not in config.stash:
        config.stash[_GROUP_DIR] = ray_group.make_folder()
    node.workerinput[ray_group.INPUT_KEY] = str(config.stash[_GROUP_DIR])


@pytest.hookimpl(optionalhook=True, tryfirst=True)       # before xdist's own choice of scheduler
def pytest_xdist_make_scheduler(config, log):
    if config.getoption("dist") in ("load", "loadgroup") and _GROUP_DIR in config.stash:
        return ray_group.make_scheduler(config, log, config.stash[_GROUP_DIR])
    return None


@pytest.hookimpl(tryfirst=True)          # before the worker sends its collection to the controller
def pytest_collection_finish(session):
    folder = getattr(session.config, "workerinput", {}).get(ray_group.INPUT_KEY)
    if folder:
        ray_group.write_ids(Path(folder), session.config.workerinput["workerid"],
                            [i.nodeid for i in session.items if _uses_ray(i)])


def pytest_unconfigure(config):
    if _GROUP_DIR in config.stash:
        ray_group.remove_folder(config.stash[_GROUP_DIR])


#: Where the ``ray_cluster`` fixture leaves the running cluster, for :func:`pytest_runtest_teardown`.
_RAY_KEY = pytest.StashKey[RayCluster]()


@pytest.hookimpl(trylast=True)            # after pytest's own teardown of the test's fixtures
def pytest_runtest_teardown(item, nextitem):
    """After the last test that uses the Ray cluster, stop it rather than at the session's end: under
    pytest-xdist its worker goes on with other tests, which its idle processes would slow."""
    cluster = item.session.stash.get(_RAY_KEY, None)
    if cluster is not None and _uses_ray(item) and item is [i for i in item.session.items if _uses_ray(i)][-1]:
        cluster.stop()


@pytest.fixture(scope="session")
def ray_cluster(request):
    """The session's 2-node Ray cluster (:mod:`tests.helpers.ray_cluster`), this process connected
    to it as its driver; skipped where Ray is not installed. Stopped after the last test that uses
    it (:func:`pytest_runtest_teardown`), else at the session's end."""
    pytest.importorskip("ray")
    c = RayCluster().start()
    request.session.stash[_RAY_KEY] = c
    try:
        yield c
    finally:
        c.stop()
