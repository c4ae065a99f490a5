"""What ``pip install .`` installs is the whole program, not only what an editable install sees.

An editable install (``make venv``, the test suite's) resolves every subpackage from the source
folders, so a package folder missing from ``[tool.setuptools] packages`` goes unnoticed here; a
user's ``pip install streammap`` (or the Docker image) then lacks it, and ``streammap`` itself
fails with ``No module named 'streammap.cli'``. So the list is checked against the folders.
"""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: installed package -> folder, as pyproject.toml's package-dir maps them
FOLDERS = {"streammap": ROOT / "streammap", "streammap.directives": ROOT / "directives",
           "streammap.runtime": ROOT / "runtime"}


def _listed_packages() -> set[str]:
    """``[tool.setuptools] packages`` of pyproject.toml (read by pattern: tomllib is 3.11+)."""
    text = (ROOT / "pyproject.toml").read_text()
    block = re.search(r"^\[tool\.setuptools\]\s*\npackages\s*=\s*\[(.*?)\]", text, re.S | re.M).group(1)
    return set(re.findall(r'"([^"]+)"', block))


def _package_folders() -> set[str]:
    found = set()
    for package, folder in FOLDERS.items():
        for init in folder.rglob("__init__.py"):
            parts = init.parent.relative_to(folder).parts
            if package == "streammap" and parts[:1] in (("directives",), ("runtime",)):
                continue
            found.add(".".join([package, *parts]))
    return found


def test_every_package_folder_is_installed_by_a_plain_pip_install():
    missing = _package_folders() - _listed_packages()
    assert not missing, f"pyproject.toml [tool.setuptools] packages lacks {sorted(missing)}"


def test_every_listed_package_is_a_folder_of_the_repository():
    assert _listed_packages() <= _package_folders()
