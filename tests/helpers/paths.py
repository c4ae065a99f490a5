"""The repository's folders, in one place.

Tests ask for the ``root``, ``samples`` and ``shared`` fixtures (tests/conftest.py); these constants
are for what runs when tests are *collected*, such as a parametrization over the shared benchmark
graphs, with :data:`needs_shared` to skip those tests where the shared data is absent.
"""

from pathlib import Path

import pytest

#: The repository root (where pyproject.toml is).
ROOT = Path(__file__).resolve().parents[2]
#: The sample programs.
SAMPLES = ROOT / "samples"
#: Shared benchmark data (workflows, clusters, scoring model), read-only, beside the repository.
SHARED = ROOT.parent / "shared" / "benchmarks"

needs_shared = pytest.mark.skipif(not SHARED.exists(), reason="needs ../shared/benchmarks")
