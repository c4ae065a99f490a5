"""Loading a Python file as a fresh module: a sample run as plain Python, or a benchmark script
whose functions a test calls. Each call executes the file anew, so module-level state (a
stateful sample's running mean, a param set by the test) never leaks from one test to another."""

import importlib.util
from pathlib import Path
from types import ModuleType


def load_file(path: Path, name: str) -> ModuleType:
    """Execute ``path`` as a new module called ``name`` (not entered in ``sys.modules``)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
