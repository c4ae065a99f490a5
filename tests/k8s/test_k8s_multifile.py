"""`streammap export k8s` of a multi-file program: the ConfigMap carries the program's local modules
and every pod mounts them beside the program, at their paths, so the pod's run imports them."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

import streammap
from streammap.cli import main
from streammap.errors import StreamMapError
from streammap.k8s import export_k8s, plan_from_configmap
from streammap.k8s.entry import main as entry
from streammap.plan import write_plan
from tests.helpers.multifile import ONE_CPU, PACKAGE_FILES, plain_python, write_package

IMAGE = "registry.example.org/streammap:0.1"


@pytest.fixture
def exported(tmp_path):
    prog = write_package(tmp_path / "project")
    write_plan(streammap.compile(prog, cluster=ONE_CPU, history=False), tmp_path / "project" / "plan.yaml")
    assert main(["export", "k8s", str(tmp_path / "project" / "plan.yaml"), "-o", str(tmp_path / "k8s"),
                 "--image", IMAGE, "--node", "n0=worker-1"]) == 0
    return prog, list(yaml.safe_load_all((tmp_path / "k8s" / "all.yaml").read_text()))


def test_the_configmap_carries_each_module_under_a_valid_key(exported):
    prog, objects = exported
    data = objects[0]["data"]
    assert set(data) == {"plan.yaml", "pkgprog.py", "mypkg.__init__.py", "mypkg.util.py", "mypkg.consts.py",
                         "mypkg.stats.py"}
    for rel in PACKAGE_FILES:
        assert data[rel.replace("/", ".")] == (prog.parent / rel).read_text()


def test_every_pod_mounts_the_modules_beside_the_program(exported):
    _, objects = exported
    (volume,) = [v for v in objects[1]["spec"]["volumes"] if v["name"] == "plan"]
    paths = {i["key"]: i["path"] for i in volume["configMap"]["items"]}
    assert paths == {"plan.yaml": "plan.yaml", "pkgprog.py": "pkgprog.py",
                     **{rel.replace("/", "."): rel for rel in PACKAGE_FILES}}


def test_the_pod_runs_the_mounted_program_with_its_package(exported, tmp_path):
    """What the pod sees (the ConfigMap as its volume mounts it) runs and equals plain Python."""
    prog, objects = exported
    plan = plan_from_configmap(objects[0], tmp_path / "mount")
    assert (tmp_path / "mount" / "mypkg" / "util.py").read_text() == (prog.parent / "mypkg" / "util.py").read_text()
    assert plan.source.modules and plan.source.path == str(tmp_path / "mount" / "pkgprog.py")
    (tmp_path / "out").mkdir()                  # the pod's /out volume
    assert entry(["--plan", str(tmp_path / "mount" / "plan.yaml"), "--node", "n0", "--out", str(tmp_path / "out")]) == 0
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "out.npz")["result"], plain_python(prog))


def test_export_refuses_a_plan_whose_module_changed_and_writes_nothing(tmp_path):
    prog = write_package(tmp_path / "project")
    plan = streammap.compile(prog, cluster=ONE_CPU, history=False)
    (tmp_path / "project" / "mypkg" / "util.py").write_text("def scaled(a, k):\n    return a\n")
    with pytest.raises(StreamMapError, match="util.py .imported by pkgprog.py. has changed"):
        export_k8s(plan, tmp_path / "k8s", image=IMAGE)
    assert not (tmp_path / "k8s").exists()
