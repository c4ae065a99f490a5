"""Under pytest-xdist, every test that uses the session's Ray cluster runs in one worker, which alone
starts it (the hooks are in tests/conftest.py; ``make test`` runs ``pytest -n 2``).

Why not xdist's own ``--dist loadgroup`` with ``xdist_group`` marks: it tells the controller a
test's group by appending ``@group`` to the test's id in the worker, and from pytest 9.2 (structured
node ids) that edit no longer takes: the marks are silently ignored and the tests spread over the
workers, each starting a cluster (pytest-xdist issue #1386, open with pytest-xdist 3.8.0). So the
group travels on its own: each worker, once it has collected, writes the ids of the tests that use
``ray_cluster`` to a file in a folder the controller made and named in the worker's input
(:func:`write_ids`), and the controller's scheduler (:func:`make_scheduler`) reads them back.

The scheduler is xdist's ``LoadScopeScheduling`` with one scope for those tests and one per other
test: each idle worker takes the next test, and the Ray tests go to one worker as a whole, in
collection order (tests/conftest.py puts them last, the node-removing one after every other). The
largest scope goes first (xdist's default ``--loadscope-reorder``), so one worker starts with the Ray
tests while the other runs the rest, and the cluster stops after the last of them.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

#: The scope of the tests that use the Ray cluster (no test id is this string).
RAY_SCOPE = "ray_cluster"
#: The key of the workers' input that names the folder of the id files.
INPUT_KEY = "streammap_ray_tests"


def make_folder() -> Path:
    """A fresh folder for the workers' id files (the controller's; :func:`remove_folder` after)."""
    return Path(tempfile.mkdtemp(prefix="streammap-ray-tests-"))


def remove_folder(folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)


def write_ids(folder: Path, worker: str, ids: list[str]) -> None:
    """Write this worker's ids of the Ray tests, whole or not at all (a rename)."""
    tmp = folder / f".{worker}.tmp"
    tmp.write_text("".join(f"{i}\n" for i in ids))
    os.replace(tmp, folder / f"{worker}.txt")


def read_ids(folder: Path) -> set[str]:
    """The ids of the Ray tests, as the workers wrote them (every worker collects every test)."""
    return {line for f in folder.glob("*.txt") for line in f.read_text().splitlines() if line}


def make_scheduler(config, log, folder: Path):
    """xdist's ``LoadScopeScheduling``, with the Ray tests (read from ``folder`` when the workers have
    collected) in one scope and every other test in its own."""
    from xdist.scheduler import LoadScopeScheduling  # pytest-xdist, only where it runs the suite

    class RayGroupScheduling(LoadScopeScheduling):
        ray_ids: set[str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self.ray_ids is None:      # first called once every worker has sent its collection
                self.ray_ids = read_ids(folder)
            return RAY_SCOPE if nodeid in self.ray_ids else nodeid

    return RayGroupScheduling(config, log)
