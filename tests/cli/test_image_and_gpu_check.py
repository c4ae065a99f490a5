"""The container image and the GPU check, as far as a machine without Docker or a GPU can tell:
the Dockerfile is well-formed (FROM first, the project and its extras installed), ``make image``
tags what ``streammap export k8s`` defaults ``--image`` to, the CuPy extras exist for both CUDA
majors, and ``benchmarks/gpu_check.py`` skips cleanly without a GPU and runs its whole logic
emulated on the CPU."""

from __future__ import annotations

import csv
import importlib.util
import re
import shutil
import subprocess
import sys
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

import streammap
from streammap.cli import main
from streammap.cli.export import DEFAULT_IMAGE
from streammap.cluster import doctor
from tests.helpers.fake_cupy import make_fake_cupy

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import gpu_check  # noqa: E402
import gpu_env  # noqa: E402


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
    assert re.search(r"^image:.*\n(\t@.*\n)*\tdocker build -t \$\(IMAGE\)", make, re.M)
    assert DEFAULT_IMAGE == f"streammap:{version}" == f"streammap:{streammap.__version__}"
    gpu_extra = re.search(r"^GPU_EXTRA\s*\?=\s*(\S+)$", make, re.M).group(1)
    assert gpu_extra in extras



def _make_image(tmp_path, docker_script: str | None):
    """``make image`` with a PATH of ``sed`` only, plus a ``docker`` running ``docker_script``."""
    make = shutil.which("make")
    if make is None:
        pytest.skip("make is not installed")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sed").symlink_to(shutil.which("sed"))
    if docker_script is not None:
        (bin_dir / "docker").write_text("#!/bin/sh\n" + docker_script)
        (bin_dir / "docker").chmod(0o755)
    return subprocess.run([make, "--no-print-directory", "image"], cwd=ROOT, capture_output=True, text=True,
                          env={"PATH": str(bin_dir), "HOME": str(tmp_path)})


def test_make_image_without_docker_says_so_and_builds_nothing(tmp_path):
    r = _make_image(tmp_path, None)
    assert r.returncode != 0
    assert r.stderr.startswith("make image: docker is not installed; install Docker Engine")


def test_make_image_without_a_docker_engine_says_so_before_building(tmp_path):
    r = _make_image(tmp_path, 'if [ "$1" = info ]; then exit 1; fi\necho "built $*"\n')
    assert r.returncode != 0 and "built" not in r.stdout
    assert r.stderr.startswith("make image: docker cannot reach a Docker engine")


def test_make_image_with_docker_builds_the_tag_export_defaults_to(tmp_path):
    r = _make_image(tmp_path, 'echo "docker $*"\n')
    assert r.returncode == 0, r.stderr
    assert f"docker build -t {DEFAULT_IMAGE} " in r.stdout and "docker push" in r.stdout

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


def test_gpu_check_with_a_cupy_that_sees_no_device_says_so_and_measures_nothing(tmp_path, monkeypatch, capsys):
    fake = make_fake_cupy(0)
    fake.__version__ = "14.0.0"
    monkeypatch.setattr(gpu_check, "import_cupy", lambda: fake)
    assert gpu_check.main(["--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("gpu-check: skipped: CuPy 14.0.0 sees no CUDA device (no GPU, or no driver)")
    assert (tmp_path / "skipped.txt").exists() and not (tmp_path / "samples.csv").exists()


# -- the offline set-up of make gpu-check (benchmarks/gpu_env.py) ------------------------------------

def test_gpu_wheels_are_pinned_to_this_environment_and_a_missing_one_is_named():
    pins = gpu_env.pins(("pydantic", "libcst"))
    assert pins == [f"pydantic=={metadata.version('pydantic')}", f"libcst=={metadata.version('libcst')}"]
    with pytest.raises(gpu_env.Refusal, match="no-such-dist-here"):
        gpu_env.pins(("pydantic", "no-such-dist-here"))


def test_gpu_wheels_are_binary_wheels_for_the_gpu_machines_python_without_dependencies(tmp_path):
    cmd = gpu_env.download_command(["libcst==1.9.0"], tmp_path, "3.12")
    assert cmd[1:4] == ["-m", "pip", "download"] and cmd[-1] == "libcst==1.9.0"
    assert {"--no-deps", "--only-binary=:all:"} <= set(cmd)
    assert cmd[cmd.index("--python-version") + 1] == "3.12" and cmd[cmd.index("--implementation") + 1] == "cp"
    platforms = [cmd[i + 1] for i, a in enumerate(cmd) if a == "--platform"]
    assert "manylinux_2_17_x86_64" in platforms and all(p.endswith("x86_64") for p in platforms)


def test_the_wheels_cover_what_a_gpu_image_lacks_and_nothing_it_has():
    assert {"libcst", "pydantic", "pydantic-core", "annotated-types", "typing-inspection", "pymetis",
            "uvicorn", "starlette"} <= set(gpu_env.WHEELS)
    assert not {"numpy", "scipy", "cupy-cuda13x", "matplotlib", "networkx", "pyyaml"} & set(gpu_env.WHEELS)


@pytest.mark.parametrize("name,foreign", [
    ("pydantic_core-2.50.5-cp312-cp312-manylinux2014_x86_64.manylinux_2_17_x86_64.whl", False),
    ("libcst-1.9.0-cp311-cp311-manylinux_2_28_x86_64.whl", True),
    ("pydantic-2.14.4-py3-none-any.whl", False),
    ("something-1.0-cp39-abi3-manylinux_2_17_x86_64.whl", False),
])
def test_a_wheel_for_another_python_is_found_before_pip_runs(name, foreign):
    assert gpu_env.foreign_wheels([Path(name)], (3, 12)) == ([name] if foreign else [])


def test_gpu_check_install_refuses_missing_or_foreign_wheels_with_the_command_to_fix_it(tmp_path, capsys):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    assert gpu_env.main(["install", "--wheels", str(wheels), "--venv", str(tmp_path / "env")]) == 2
    assert "no wheels (make gpu-wheels downloads them" in capsys.readouterr().err
    other = "cp39" if sys.version_info[:2] != (3, 9) else "cp310"
    (wheels / f"libcst-1.9.0-{other}-{other}-manylinux_2_28_x86_64.whl").write_bytes(b"")
    assert gpu_env.main(["install", "--wheels", str(wheels), "--venv", str(tmp_path / "env")]) == 2
    here = f"{sys.version_info[0]}.{sys.version_info[1]}"
    assert f"make gpu-wheels GPU_PYTHON_VERSION={here}" in capsys.readouterr().err
    assert not (tmp_path / "env").exists()


def _wheel(folder: Path, name: str, version: str, files: dict[str, str]) -> Path:
    """A pure-Python wheel of ``files``, written by hand (building one would need ``wheel``)."""
    dist = f"{name}-{version}.dist-info"
    meta = {f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
            f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    entries = {**files, **meta}
    record = "".join(f"{path},,\n" for path in entries) + f"{dist}/RECORD,,\n"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for name_in_zip, text in {**entries, f"{dist}/RECORD": record}.items():
            z.writestr(name_in_zip, text)
    return path


def test_the_offline_environment_sees_the_images_packages_and_takes_the_carried_wheels_first(tmp_path, monkeypatch):
    wheels = tmp_path / "wheels"
    _wheel(wheels, "carried_pkg", "1.0", {"carried_pkg/__init__.py": "WHERE = 'carried'\n"})
    # a carried version of a package the image has too (an older typing-extensions there, say) wins
    # in the environment, and the image's own copy is left as it is
    _wheel(wheels, "PyYAML", "99.0", {"yaml/__init__.py": "WHERE = 'carried yaml'\n"})
    built = []
    monkeypatch.setattr(gpu_env, "install_project", built.append)
    python = gpu_env.install(wheels, tmp_path / "env")
    assert built == [python]
    probe = "import carried_pkg, numpy, yaml; print(carried_pkg.WHERE, numpy.__name__, yaml.WHERE)"
    out = subprocess.run([str(python), "-c", probe], check=True, capture_output=True, text=True, cwd=tmp_path).stdout
    assert out.strip() == "carried numpy carried yaml"
    image_yaml = subprocess.run([sys.executable, "-c", "import yaml; print(hasattr(yaml, 'WHERE'))"],
                                check=True, capture_output=True, text=True).stdout
    assert metadata.version("PyYAML") != "99.0" and image_yaml.strip() == "False"


def _builds_editable() -> bool:
    """Whether this environment's setuptools builds an editable wheel with no index (``make
    gpu-wheels`` carries one that does: 70.1 and newer, or any with ``wheel``)."""
    try:
        version = tuple(int(x) for x in metadata.version("setuptools").split(".")[:2])
    except metadata.PackageNotFoundError:
        return False
    return version >= (70, 1) or (version >= (64, 0) and importlib.util.find_spec("wheel") is not None)


@pytest.mark.skipif(not _builds_editable(), reason="this environment's setuptools cannot build offline "
                                                   "(make gpu-wheels carries one that can)")
def test_the_project_installed_offline_imports_from_the_checkout(tmp_path):
    python = gpu_env.make_overlay(tmp_path / "env")
    gpu_env.install_project(python)
    probe = "import streammap.directives, streammap.runtime.ray; print(streammap.__file__)"
    out = subprocess.run([str(python), "-c", probe], check=True, capture_output=True, text=True, cwd=tmp_path).stdout
    assert out.strip() == str(ROOT / "streammap" / "__init__.py")
