"""The container image and the GPU check, as far as a machine without Docker or a GPU can tell:
the Dockerfile is well-formed (FROM first, the project and its extras installed), ``make image``
tags what ``streammap export k8s`` defaults ``--image`` to, the CuPy extras exist for both CUDA
majors, and ``benchmarks/gpu_check.py`` skips cleanly without a GPU and runs its whole logic
emulated on the CPU."""

from __future__ import annotations

import csv
import re
import sys
from pathlib import Path

import pytest

import streammap
from streammap.cli import main
from streammap.cli.export import DEFAULT_IMAGE
from streammap.cluster import doctor

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import gpu_check  # noqa: E402


def _instructions(text: str) -> list[tuple[str, str]]:
    """``(INSTRUCTION, arguments)`` of a Dockerfile, continuation lines joined, comments dropped."""
    logical, out = "", []
    for line in text.splitlines():
        if not logical and (not line.strip() or line.lstrip().startswith("#")):
            continue
        logical += line.rstrip("\\").rstrip() + " " if line.rstrip().endswith("\\") else line
        if not line.rstrip().endswith("\\"):
            word, _, rest = logical.strip().partition(" ")
            out.append((word, rest.strip()))
            logical = ""
    assert not logical, "the Dockerfile ends inside a continued line"
    return out


def _project() -> tuple[str, dict[str, list[str]]]:
    """The version and the optional dependencies of pyproject.toml (read by pattern: tomllib is 3.11+)."""
    text = (ROOT / "pyproject.toml").read_text()
    version = re.search(r'^version = "([^"]+)"$', text, re.M).group(1)
    block = text.split("[project.optional-dependencies]", 1)[1].split("\n[", 1)[0]
    extras = {m.group(1): re.findall(r'"([^"]+)"', m.group(2))
              for m in re.finditer(r"^([\w-]+) = \[(.*)\]$", block, re.M)}
    return version, extras


KNOWN = {"FROM", "ARG", "ENV", "RUN", "COPY", "ADD", "WORKDIR", "CMD", "ENTRYPOINT", "LABEL", "USER", "EXPOSE",
         "VOLUME", "SHELL", "HEALTHCHECK", "STOPSIGNAL", "ONBUILD"}


def test_the_dockerfile_is_well_formed_and_installs_the_project_with_its_cluster_extra():
    steps = _instructions((ROOT / "Dockerfile").read_text())
    words = [w for w, _ in steps]
    assert set(words) <= KNOWN, set(words) - KNOWN
    first = next(w for w in words if w != "ARG")          # only ARG may come before FROM
    assert first == "FROM" and words.count("FROM") == 1
    base = dict(a.split("=", 1) for w, a in steps if w == "ARG" and "=" in a)["CUDA_IMAGE"]
    assert re.fullmatch(r"nvidia/cuda:\d+\.\d+\.\d+-runtime-ubuntu\d+\.\d+", base)
    runs = " ".join(a for w, a in steps if w == "RUN")
    assert "pip install" in runs and ".[cluster,${GPU_EXTRA}]" in runs
    copied = {a.split()[0] for w, a in steps if w == "COPY"}
    assert {"pyproject.toml", "streammap", "directives", "runtime"} <= copied
    for path in copied:
        assert (ROOT / path).exists(), f"the Dockerfile copies {path}, which the repository lacks"


def test_make_image_tags_what_export_defaults_to():
    version, extras = _project()
    make = (ROOT / "Makefile").read_text()
    assert re.search(r"^IMAGE\s*\?=\s*streammap:\$\(VERSION\)$", make, re.M)
    assert re.search(r"^image:.*\n\tdocker build -t \$\(IMAGE\)", make, re.M)
    assert DEFAULT_IMAGE == f"streammap:{version}" == f"streammap:{streammap.__version__}"
    gpu_extra = re.search(r"^GPU_EXTRA\s*\?=\s*(\S+)$", make, re.M).group(1)
    assert gpu_extra in extras


def test_export_defaults_its_image_and_says_how_to_push_it(tmp_path, capsys):
    plan = tmp_path / "plan.yaml"
    assert main(["compile", str(ROOT / "samples" / "fm_radio.py"), "--cluster",
                 str(ROOT / "samples" / "clusters" / "tiny-gpus.yaml"), "-D", "N=1024", "-o", str(plan)]) == 0
    capsys.readouterr()
    assert main(["export", "k8s", str(plan), "-o", str(tmp_path / "k8s")]) == 0
    out = capsys.readouterr().out
    assert f"image {DEFAULT_IMAGE}: build it with `make image`" in out and "docker push" in out
    assert f"image: {DEFAULT_IMAGE}" in (tmp_path / "k8s" / "all.yaml").read_text()


def test_the_cupy_extras_cover_both_cuda_majors_and_gpu_is_the_newest():
    _, extras = _project()
    assert extras["gpu-cuda12"][0].startswith("cupy-cuda12x")
    assert extras["gpu-cuda13"][0].startswith("cupy-cuda13x")
    assert extras["gpu"] == extras["gpu-cuda13"]


@pytest.mark.parametrize("cuda,extra", [(None, "gpu-cuda12"), (11, "gpu-cuda12"), (12, "gpu-cuda12"),
                                        (13, "gpu-cuda13"), (14, "gpu-cuda13")])
def test_the_extra_follows_the_drivers_cuda_major(cuda, extra):
    assert doctor.cupy_extra(cuda) == extra


def test_gpu_check_without_a_gpu_says_so_and_measures_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(gpu_check, "import_cupy", lambda: None)
    assert gpu_check.main(["--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("gpu-check: skipped: CuPy is not installed")
    assert (tmp_path / "skipped.txt").exists() and not (tmp_path / "samples.csv").exists()


def test_gpu_check_emulated_compares_streammap_with_direct_calls(tmp_path, capsys):
    assert gpu_check.main(["--emulate", "--repeats", "1", "--out", str(tmp_path),
                           "--samples", "fm_radio,fm_stream,tiled_cholesky"]) == 0
    rows = list(csv.DictReader((tmp_path / "samples.csv").open()))
    assert [r["sample"] for r in rows] == ["fm_radio", "tiled_cholesky", "fm_stream"]
    assert all(r["outputs_agree"] == "True" and float(r["direct_s"]) > 0 and int(r["tasks"]) > 1 for r in rows)
    summary = (tmp_path / "summary.txt").read_text()
    assert "gpu tests skipped (--emulate)" in summary and "outputs agree" in summary


def test_direct_calls_give_the_plain_python_result():
    plan = gpu_check.compile_plan(ROOT / "samples" / "fm_radio.py", gpu_check.one_device_cluster(True),
                                  params={"N": 2048, "BANDS": 2}, history=False, strategy="none")
    outputs, seconds = gpu_check.direct(plan, None)
    ran = streammap.run(plan, emulate=True, progress=False)
    assert seconds > 0 and gpu_check.agree(outputs, ran)
    outputs["result"] = outputs["result"] + 1.0
    assert not gpu_check.agree(outputs, ran)
