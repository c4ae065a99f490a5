"""docs/architecture.md stays true of the code: the layer table it gives is the one the imports
obey, and every file, module and function it names exists.

The document is the map a new engineer reads first; a map that names moved files or allows
imports the code no longer obeys (or forbids ones it makes) sends them the wrong way. So a change
that moves code, adds a room or imports across layers updates the document in the same commit,
and these tests say where.
"""

import ast
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"
#: installed package -> folder, as pyproject.toml maps them
FOLDERS = {"streammap": ROOT / "streammap", "streammap.directives": ROOT / "directives",
           "streammap.runtime": ROOT / "runtime"}
#: Dotted names the document uses that are not Python objects: kernel names written in plans
#: (strategies/kernels.py) and the entry-point group of custom placement policies.
NOT_PYTHON = {"streammap.scatter", "streammap.gather", "streammap.policies"}
#: File name endings that make a dotted word a file name, not a module path.
FILE_SUFFIXES = (".py", ".yaml", ".yml", ".json", ".jsonl", ".npz", ".md", ".toml", ".db", ".png", ".html")


def _modules() -> dict[str, Path]:
    found = {}
    for package, folder in FOLDERS.items():
        for path in folder.rglob("*.py"):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if package == "streammap" and parts[0] in ("directives", "runtime"):
                continue
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join([package, *parts])] = path
    return found


def _layers() -> dict[str, int]:
    """``{name relative to streammap: layer}`` from the table between the ``layers`` markers."""
    text = DOC.read_text(encoding="utf-8")
    table = text.split("<!-- layers -->", 1)[1].split("<!-- /layers -->", 1)[0]
    layers = {}
    for row in re.finditer(r"^\|\s*(\d+)\s*\|(.*)\|\s*$", table, re.M):
        for name in re.findall(r"`([^`]+)`", row.group(2)):
            assert name not in layers, f"{name} appears twice in the layer table"
            layers[name] = int(row.group(1))
    assert layers, "docs/architecture.md has no layer table between <!-- layers --> markers"
    return layers


def _relative(module: str) -> str:
    return "__init__" if module == "streammap" else module[len("streammap."):]


def _layer_of(module: str, layers: dict) -> tuple[int, str] | None:
    """The layer of ``module``: its most specific entry in the table (a module, else its room)."""
    parts = _relative(module).split(".")
    for i in range(len(parts), 0, -1):
        key = ".".join(parts[:i])
        if key in layers:
            return layers[key], key
    return None


def _imports(path: Path, modules: dict) -> set[str]:
    """Project modules imported at module level by the file at ``path``."""
    out = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            targets = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
        elif isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        else:
            continue
        out.update(t for t in targets if t in modules)
    return out


def test_every_module_has_a_layer_in_the_document():
    layers = _layers()
    missing = sorted(m for m in _modules() if _layer_of(m, layers) is None)
    assert missing == [], f"add these to the layer table of docs/architecture.md: {missing}"


def test_imports_go_only_down_the_layers_or_stay_in_their_room():
    layers, modules = _layers(), _modules()
    wrong = []
    for name, path in modules.items():
        here = _layer_of(name, layers)
        if here is None:
            continue
        for target in _imports(path, modules):
            if target == name or name.startswith(target + "."):   # a package's own parent
                continue
            there = _layer_of(target, layers)
            if there is None:
                continue
            same_room = _relative(name).split(".")[0] == _relative(target).split(".")[0]
            if there[0] > here[0] or (there[0] == here[0] and not same_room):
                wrong.append(f"{name} (layer {here[0]}, {here[1]}) imports {target} (layer {there[0]}, {there[1]})")
    assert wrong == [], ("imports against the layer table of docs/architecture.md (move the code, or "
                         "change the table and say why):\n" + "\n".join(sorted(wrong)))


def _code_words() -> list[str]:
    return re.findall(r"`([^`\n]+)`", DOC.read_text(encoding="utf-8"))


def _path_words():
    for word in _code_words():
        path, _, attr = word.partition("::")
        if " " in path or not path.endswith((".py", "/")) and not attr:
            continue
        if "/" not in path or path.startswith(("..", "/", "$", "~")):
            continue
        if re.search(r"<|\bNAME\b", path):        # a placeholder: streammap/cli/NAME.py, tests/<room>/
            continue
        yield word, path, attr


def test_every_file_the_document_names_exists():
    missing = []
    for word, path, attr in _path_words():
        found = next((p for p in (ROOT / path, ROOT / "streammap" / path) if p.exists()), None)
        if found is None:
            missing.append(word)
        elif attr and not re.search(rf"^\s*(def|class)\s+{re.escape(attr)}\b|^{re.escape(attr)}\s*=",
                                    found.read_text(encoding="utf-8"), re.M):
            missing.append(word)
    assert missing == [], f"docs/architecture.md names files or functions that do not exist: {missing}"


def _resolve(dotted: str) -> bool:
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        try:
            for attr in parts[i:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return False
        return True
    return False


@pytest.mark.parametrize("kind", ["absolute", "room-relative"])
def test_every_module_and_function_the_document_names_exists(kind):
    rooms = {_relative(m).split(".")[0] for m in _modules()} - {"__init__"}
    dotted = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)+$")
    missing = []
    for word in _code_words():
        if not dotted.match(word) or word.endswith(FILE_SUFFIXES) or word in NOT_PYTHON:
            continue
        first = word.split(".")[0]
        if kind == "absolute" and first == "streammap":
            name = word
        elif kind == "room-relative" and first in rooms:
            name = f"streammap.{word}"
        else:
            continue
        if not _resolve(name):
            missing.append(word)
    assert missing == [], f"docs/architecture.md names modules or attributes that do not exist: {missing}"
