"""Multi-file programs at compile time: the plan records the local modules a program imports.

A local module is a file of the program's folder that the program imports, directly or through
another local module; the plan lists each with its path (relative to the program's folder) and
sha256, so that every place the plan runs can check and ship them.
"""

from __future__ import annotations

import ast
import hashlib
import os

import pytest

import streammap
from streammap.cli import main
from streammap.directives.imports import local_modules
from streammap.directives.scan import import_statements, scan
from streammap.errors import DirectiveError, PlanError
from streammap.plan import read_plan, write_plan
from tests.helpers.multifile import ONE_CPU, PACKAGE_FILES, write_files, write_package, write_two_file


def _sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_two_file_program_records_its_helper_module_with_its_sha256(tmp_path):
    prog = write_two_file(tmp_path)
    plan = streammap.compile(prog, cluster=ONE_CPU, history=False)
    assert [(m.path, m.sha256) for m in plan.source.modules] == [("helpers.py", _sha(tmp_path / "helpers.py"))]


def test_a_local_package_records_every_file_its_imports_reach(tmp_path):
    """The package's __init__, the submodules its relative imports load, and a submodule imported
    only inside a kernel's body; numpy (installed) and os (stdlib) are not recorded."""
    prog = write_package(tmp_path)
    (tmp_path / "mypkg" / "unused.py").write_text("x = 1\n")           # never imported
    plan = streammap.compile(prog, cluster=ONE_CPU, history=False)
    assert [m.path for m in plan.source.modules] == sorted(PACKAGE_FILES)


def test_the_plan_file_carries_the_modules_and_reads_them_back(tmp_path):
    prog = write_package(tmp_path / "project")
    plan = streammap.compile(prog, cluster=ONE_CPU, history=False)
    write_plan(plan, tmp_path / "plan.yaml")
    text = (tmp_path / "plan.yaml").read_text()
    assert "path: project/pkgprog.py" in text and "{path: mypkg/util.py, sha256:" in text
    assert read_plan(tmp_path / "plan.yaml").source.modules == plan.source.modules


def test_a_one_file_program_plan_has_no_modules_list(tmp_path, samples):
    plan = streammap.compile(samples / "fm_radio.py", cluster=ONE_CPU, params={"N": 1024}, history=False)
    assert plan.source.modules == []
    assert "modules" not in plan.to_yaml()


def test_a_module_linked_from_outside_the_folder_is_not_local(tmp_path):
    outside = tmp_path / "elsewhere"
    write_files(outside, {"helpers.py": "def ramp(n):\n    return n\n"})
    project = tmp_path / "project"
    write_files(project, {"prog.py": "import helpers\nimport mypkg.util\n"})
    os.symlink(outside / "helpers.py", project / "helpers.py")
    os.symlink(outside, project / "mypkg")
    assert local_modules(project / "prog.py") == []


def test_relative_imports_that_climb_out_of_the_folder_are_not_followed(tmp_path):
    """In the program (a script, not a package) a relative import is Python's error; in a local
    package, one that climbs above the top-level package is too: neither records anything."""
    write_files(tmp_path / "elsewhere", {"secret.py": "x = 1\n"})
    project = tmp_path / "project"
    write_files(project, {
        "prog.py": "import pkg\nfrom . import helpers\nfrom .. import secret\n",
        "helpers.py": "x = 1\n",
        "pkg/__init__.py": "from .. import secret\nfrom ... import elsewhere\n",
    })
    assert [m.path for m in local_modules(project / "prog.py")] == ["pkg/__init__.py"]


def test_a_name_of_the_standard_library_is_never_a_local_module(tmp_path):
    write_files(tmp_path, {"prog.py": "import json\nimport helpers\n", "json.py": "x = 1\n", "helpers.py": ""})
    assert [m.path for m in local_modules(tmp_path / "prog.py")] == ["helpers.py"]


def test_a_local_module_that_does_not_parse_is_an_error_at_its_line(tmp_path, capsys):
    prog = write_two_file(tmp_path)
    (tmp_path / "helpers.py").write_text("import numpy as np\n\ndef ramp(n)\n    return n\n")
    with pytest.raises(DirectiveError) as exc:
        streammap.compile(prog, cluster=ONE_CPU, history=False)
    assert exc.value.path.endswith("helpers.py") and exc.value.line == 3
    assert main(["compile", str(prog), "--cluster", "local", "-o", str(tmp_path / "plan.yaml")]) == 2
    err = capsys.readouterr().err
    assert "helpers.py:3:" in err and "invalid Python syntax in a module the program imports" in err
    assert "Traceback" not in err and not (tmp_path / "plan.yaml").exists()


@pytest.mark.parametrize("path", ["../helpers.py", "/etc/helpers.py", "mypkg/../../x.py", "helpers.txt"])
def test_a_plan_naming_a_module_outside_the_program_folder_is_refused_when_read(tmp_path, path):
    prog = write_two_file(tmp_path)
    write_plan(streammap.compile(prog, cluster=ONE_CPU, history=False), tmp_path / "plan.yaml")
    text = (tmp_path / "plan.yaml").read_text().replace("{path: helpers.py,", f"{{path: '{path}',")
    (tmp_path / "plan.yaml").write_text(text)
    with pytest.raises(PlanError, match="is not a module path under the program's folder") as exc:
        read_plan(tmp_path / "plan.yaml")
    assert exc.value.line is not None


NESTED_IMPORTS = '''
import os, json as j
from collections import (OrderedDict,
                         deque)
try:
    import helpers
except ImportError:
    from pkg import util
else:
    import a.b.c
finally:
    import zlib
class K:
    def f(self):
        if True:
            from . import rel
        for _ in []:
            import x1
        while False:
            import x2
        with open(__file__):
            import x3
        match 1:
            case 1:
                import x4
x = [i for i in range(3)]
'''


def test_the_import_statements_are_those_ast_walk_finds_in_the_same_order():
    tree = ast.parse(NESTED_IMPORTS)
    walked = [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]
    assert import_statements(tree) == walked and len(walked) == 11


def test_a_program_edited_after_the_front_end_read_it_has_its_imports_read_again(tmp_path):
    """The front end's parse is reused only for the very same text: an import added since counts."""
    prog = tmp_path / "prog.py"
    prog.write_text("x = 1\n")
    (tmp_path / "helpers.py").write_text("y = 2\n")
    scan(prog)
    assert local_modules(prog) == []
    prog.write_text("import helpers\nx = 1\n")
    assert [m.path for m in local_modules(prog)] == ["helpers.py"]
    scan(prog)
    assert [m.path for m in local_modules(prog)] == ["helpers.py"]
