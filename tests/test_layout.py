"""The package's shape: every module imports the project's own modules at module level, and those
imports form no cycle, so any module can be imported first and the layers read bottom-up."""

import ast
from pathlib import Path

import networkx as nx

from tests.helpers.paths import ROOT

#: installed package -> folder, as pyproject.toml maps them
FOLDERS = {"streammap": ROOT / "streammap", "streammap.directives": ROOT / "directives",
           "streammap.runtime": ROOT / "runtime"}


def _modules() -> dict[str, Path]:
    found = {}
    for package, folder in FOLDERS.items():
        for path in folder.rglob("*.py"):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[0] in ("directives", "runtime") and package == "streammap":
                continue                         # not there: those folders sit beside streammap/
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join([package, *parts])] = path
    return found


def _project_imports(tree: ast.Module):
    """(node, module) for every import of a ``streammap`` module, relative ones resolved by the caller."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and \
                node.module.split(".")[0] == "streammap":
            yield node, node.module
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "streammap":
                    yield node, alias.name


def test_the_project_imports_its_own_modules_absolutely_and_at_module_level():
    misplaced = []
    for name, path in _modules().items():
        tree = ast.parse(path.read_text())
        top = {id(n) for n in tree.body}
        misplaced += [f"{path.relative_to(ROOT)}:{node.lineno}" for node, _ in _project_imports(tree)
                      if id(node) not in top]
        misplaced += [f"{path.relative_to(ROOT)}:{n.lineno} (relative)" for n in ast.walk(tree)
                      if isinstance(n, ast.ImportFrom) and n.level]
    assert misplaced == []


def _import_graph() -> nx.DiGraph:
    """Module -> the project modules it imports (``from a import b`` counts ``a.b`` when a module)."""
    modules = _modules()
    graph = nx.DiGraph()
    for name, path in modules.items():
        graph.add_node(name)
        for node, target in _project_imports(ast.parse(path.read_text())):
            candidates = [target] + ([f"{target}.{a.name}" for a in node.names]
                                     if isinstance(node, ast.ImportFrom) else [])
            for c in candidates:
                if c in modules and c != name:
                    graph.add_edge(name, c)
    return graph


def test_module_level_imports_form_no_cycle():
    graph = _import_graph()
    # A package imports its own submodules by design (re-exports); the cycles that matter are
    # between modules, so a package's edge to its parent is not counted.
    for name in list(graph):
        parent = name.rsplit(".", 1)[0]
        if graph.has_edge(name, parent):
            graph.remove_edge(name, parent)
    cycles = list(nx.simple_cycles(graph, length_bound=6))
    assert cycles == [], f"import cycles: {cycles[:5]}"


def test_the_plan_contract_depends_on_no_placement_policy():
    """``streammap.plan`` (what a plan is, and the rules every plan obeys) is read by the runtime and
    the tools without the compiler: nothing it imports, directly or through other modules, is
    placement code; the placement policies import the plan's rules, not the other way round."""
    graph = _import_graph()
    reached = nx.descendants(graph, "streammap.plan")
    assert "streammap.errors" in reached                  # the graph does see plan.py's imports
    assert sorted(m for m in reached if m.split(".")[:2] == ["streammap", "placement"]) == []
    assert "streammap.plan" in nx.descendants(graph, "streammap.placement.sharing")
