"""``make gpu-wheels`` and the offline set-up of ``make gpu-check``: StreamMAP on a GPU machine that
cannot reach a package index.

The situation this serves: a GPU machine whose image already holds CuPy and most of what StreamMAP
needs (NumPy, SciPy, networkx, PyYAML, rich, matplotlib, prometheus-client, nvidia-ml-py, pytest,
hypothesis, anyio, h11, click) but not the rest (:data:`WHEELS`), and that has no
network. So the work is split in two, with a folder of wheels carried between the machines:

* ``download`` (``make gpu-wheels``, on a machine with network, in the project's ``.venv``):
  each name of :data:`WHEELS` pinned to the version installed in the running environment (the
  one the test suite passed with), and :data:`BUILD_WHEELS`, downloaded as binary wheels for CPython ``--python-version``
  (3.12 by default) on manylinux x86_64 into ``--to`` (``.gpu-wheels/``, git-ignored). Nothing
  else is fetched: the GPU image's own packages are used as they are.
* ``install`` (``make gpu-check`` when ``.gpu-wheels/`` is present, on the GPU machine, run by
  the machine's own ``python3``): a virtual environment (``.gpu-venv/``, git-ignored, made
  without pip) that sees the interpreter's site-packages through a ``.pth`` file calling
  ``site.addsitedir`` on each (so *their* ``.pth`` files count too, as CUDA library packages need;
  a plain ``--system-site-packages`` would see the base interpreter's instead, when ``python3`` is
  itself a virtual environment). The wheels are installed into it with ``--no-index --no-deps``,
  then the project, editable, with ``--no-build-isolation`` (built by the carried setuptools).
  Its own packages come first on ``sys.path``, so a carried wheel wins over an older copy in the
  image. No step reaches the network; a wheel built for another Python is refused before pip runs,
  with the command that downloads the right ones.

Exit status: 0, or 2 with a message on stderr (a missing pin, missing or mismatched wheels).

    python benchmarks/gpu_env.py download [--to .gpu-wheels] [--python-version 3.12]
    python3 benchmarks/gpu_env.py install [--wheels .gpu-wheels] [--venv .gpu-venv]
"""

from __future__ import annotations

import argparse
import re
import site
import subprocess
import sys
import venv
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: What StreamMAP imports (its own modules, the service, the test suite's collection) that a GPU
#: image usually lacks. OR-Tools is left out on purpose: 28 MB, tied to a protobuf version, and
#: optional (``auto`` skips its exact step without it).
WHEELS = ("annotated-types", "libcst", "pydantic", "pydantic-core", "pymetis", "starlette",
          "typing-extensions", "typing-inspection", "uvicorn")
#: The manylinux tags pip must match exactly, newest first (pip takes the first that has a wheel).
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_24_x86_64",
             "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64")
#: Carried too, unpinned (the newest): what builds the project's editable install offline. From
#: 70.1 on, setuptools builds wheels itself (no ``wheel`` package), and the project asks for 68 or
#: newer, so neither an older one in this environment nor the image's is relied upon.
BUILD_WHEELS = ("setuptools",)
SITE_PTH = "_gpu_image_site.pth"


class Refusal(Exception):
    """A reason to stop before pip runs: printed as ``gpu-env: error: ...``, exit status 2."""


def pins(names=WHEELS) -> list[str]:
    """``name==version`` of each of ``names`` as installed in the running environment."""
    out, missing = [], []
    for name in names:
        try:
            out.append(f"{name}=={metadata.version(name)}")
        except metadata.PackageNotFoundError:
            missing.append(name)
    if missing:
        raise Refusal(f"not installed here, so no version to pin: {', '.join(missing)} "
                      "(run it in the project's environment: make gpu-wheels)")
    return out


def download_command(requirements: list[str], dest: Path, python_version: str) -> list[str]:
    """The ``pip download`` of binary wheels of ``requirements`` for CPython ``python_version`` on
    manylinux x86_64, without their dependencies (the GPU image has those)."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--python-version", python_version, "--implementation", "cp", "-d", str(dest)]
    for platform in PLATFORMS:
        cmd += ["--platform", platform]
    return cmd + requirements


def foreign_wheels(wheels: list[Path], version: tuple[int, int]) -> list[str]:
    """Names of the wheels in ``wheels`` that CPython ``version`` cannot install: a ``cpXY`` tag of
    another version (pure-Python ``py3`` wheels and the stable ABI ``abi3`` fit any 3.x)."""
    mine = f"cp{version[0]}{version[1]}"
    bad = []
    for wheel in wheels:
        python_tag, abi_tag = wheel.name[:-len(".whl")].split("-")[-3:-1]
        if abi_tag == "abi3":
            continue
        tags = python_tag.split(".")
        if any(re.fullmatch(r"cp\d+", t) for t in tags) and mine not in tags:
            bad.append(wheel.name)
    return bad


def site_pth_lines(dirs: list[str]) -> str:
    """The ``.pth`` text that adds ``dirs`` as site directories (their own ``.pth`` files run)."""
    return "".join(f"import site; site.addsitedir({d!r})\n" for d in dirs)


def image_site_dirs() -> list[str]:
    """The running interpreter's site-packages: what the GPU image installed."""
    dirs = list(site.getsitepackages())
    if site.ENABLE_USER_SITE and Path(site.getusersitepackages()).is_dir():
        dirs.append(site.getusersitepackages())
    return [d for d in dirs if Path(d).is_dir()]


def venv_python(env: Path) -> Path:
    return env / ("Scripts/python.exe" if sys.platform == "win32" else "bin/python")


def make_overlay(env: Path) -> Path:
    """``env`` as a virtual environment without pip that sees this interpreter's packages; its python."""
    venv.EnvBuilder(with_pip=False, symlinks=sys.platform != "win32").create(env)
    python = venv_python(env)
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                             check=True, capture_output=True, text=True).stdout.strip()
    (Path(purelib) / SITE_PTH).write_text(site_pth_lines(image_site_dirs()))
    return python


def install(wheels_dir: Path, env: Path) -> Path:
    """The offline environment of the module docstring; returns its python."""
    wheels = sorted(wheels_dir.glob("*.whl"))
    if not wheels:
        raise Refusal(f"{wheels_dir}: no wheels (make gpu-wheels downloads them where there is network)")
    bad = foreign_wheels(wheels, sys.version_info[:2])
    if bad:
        here = f"{sys.version_info[0]}.{sys.version_info[1]}"
        raise Refusal(f"{wheels_dir}: built for another Python than this {here}: {', '.join(bad)}; "
                      f"download them again with: make gpu-wheels GPU_PYTHON_VERSION={here}")
    python = make_overlay(env)
    subprocess.run(offline_pip(python) + ["--upgrade"] + [str(w) for w in wheels], check=True)
    install_project(python)
    return python


def offline_pip(python: Path) -> list[str]:
    """``pip install`` run by ``python`` that never looks at an index (pip is the image's, seen
    through the overlay's ``.pth``)."""
    return [str(python), "-m", "pip", "install", "--quiet", "--no-index", "--no-deps", "--disable-pip-version-check"]


def install_project(python: Path, root: Path = ROOT) -> None:
    """The project, editable, into ``python``'s environment, built by the setuptools there."""
    subprocess.run(offline_pip(python) + ["--no-build-isolation", "-e", str(root)], check=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    down = sub.add_parser("download", help="wheels for the GPU machine, pinned to this environment")
    down.add_argument("--to", type=Path, default=ROOT / ".gpu-wheels")
    down.add_argument("--python-version", default="3.12", help="the GPU machine's Python (default 3.12)")
    inst = sub.add_parser("install", help="the offline environment over this interpreter's packages")
    inst.add_argument("--wheels", type=Path, default=ROOT / ".gpu-wheels")
    inst.add_argument("--venv", type=Path, default=ROOT / ".gpu-venv")
    args = ap.parse_args(argv)
    try:
        if args.command == "download":
            args.to.mkdir(parents=True, exist_ok=True)
            for old in args.to.glob("*.whl"):       # two versions of one package stop the whole install
                old.unlink()
            subprocess.run(download_command(pins() + list(BUILD_WHEELS), args.to, args.python_version), check=True)
            print(f"gpu-wheels: {len(WHEELS) + len(BUILD_WHEELS)} wheels for CPython {args.python_version} in {args.to}/; "
                  f"carry that folder to the GPU machine and run make gpu-check there")
        else:
            python = install(args.wheels, args.venv)
            print(f"gpu-env: offline environment ready: {python}")
    except Refusal as e:
        print(f"gpu-env: error: {e}", file=sys.stderr)
        return 2
    except subprocess.CalledProcessError as e:
        print(f"gpu-env: error: {' '.join(e.cmd[:5])} ... exited with status {e.returncode}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
