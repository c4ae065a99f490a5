"""``streammap export k8s`` in a plain ``pip install streammap``, without the ``k8s`` extra: the
export works, checked by StreamMAP's own rules, and says that the schemas were not checked and
how to add them; those rules still refuse what the API server would."""

from __future__ import annotations

import sys

import pytest
import yaml

from streammap.cli import main
from tests.helpers.paths import SAMPLES

TINY = SAMPLES / "clusters" / "tiny-gpus.yaml"


@pytest.fixture
def plan(tmp_path, capsys):
    path = tmp_path / "plan.yaml"
    assert main(["compile", str(SAMPLES / "fm_radio.py"), "--cluster", str(TINY), "-D", "N=1024", "-o", str(path)]) == 0
    capsys.readouterr()
    return path


@pytest.fixture
def without_kubernetes_validate(monkeypatch):
    """As if ``kubernetes-validate`` were not installed (``import`` of it raises ImportError)."""
    for name in [m for m in sys.modules if m == "kubernetes_validate" or m.startswith("kubernetes_validate.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "kubernetes_validate", None)


def test_export_without_the_schema_library_writes_the_objects_and_says_what_was_not_checked(
        plan, tmp_path, capsys, without_kubernetes_validate):
    assert main(["export", "k8s", str(plan), "-o", str(tmp_path / "k8s")]) == 0
    out = capsys.readouterr().out
    assert "checked by StreamMAP's own rules, not the Kubernetes 1.30 schemas " \
           "(pip install 'streammap[k8s]' adds those)" in out
    kinds = [o["kind"] for o in yaml.safe_load_all((tmp_path / "k8s" / "all.yaml").read_text())]
    assert "ConfigMap" in kinds and "Pod" in kinds


def test_without_the_schema_library_the_own_rules_still_refuse_and_write_nothing(
        plan, tmp_path, capsys, without_kubernetes_validate):
    assert main(["export", "k8s", str(plan), "-o", str(tmp_path / "k8s"), "--namespace", "../../etc"]) == 2
    err = capsys.readouterr().err
    assert "metadata.namespace" in err and "kubernetes-validate" not in err
    assert not (tmp_path / "k8s").exists()


def test_with_the_schema_library_the_export_says_it_is_valid_for_the_version(plan, tmp_path, capsys):
    pytest.importorskip("kubernetes_validate")
    assert main(["export", "k8s", str(plan), "-o", str(tmp_path / "k8s")]) == 0
    assert "(all.yaml has them all), valid for Kubernetes 1.30:" in capsys.readouterr().out
