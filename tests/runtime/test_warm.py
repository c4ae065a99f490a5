"""A run's first tasks do the kernels' work, not the process's: the library submodules a program
reads lazily are imported when it is loaded, and the allocator is settled as discovery settled it
(streammap/runtime/warm.py). Specified by what is imported when and by page-fault counts, never
by the clock."""

from __future__ import annotations

import platform
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import streammap
from streammap.plan import write_plan
from streammap.runtime.loader import load_program
from tests.helpers.multifile import ONE_CPU, write_files

#: A package that imports its submodule ``heavy`` on first access, as NumPy 2 imports
#: ``numpy.random`` and ``numpy.fft``.
LAZY_PACKAGE = {
    "__init__.py": """\
        import importlib


        def __getattr__(name):
            if name == "heavy":
                return importlib.import_module(__name__ + ".heavy")
            raise AttributeError(name)
        """,
    "heavy.py": "VALUE = 3.0\n",
}

#: Kernel bodies over a package ``PKG`` and what they read of it.
READS_SUBMODULE = "return np.full(2, PKG.heavy.VALUE)"
CALLS_OWN_FUNCTION = "return np.full(2, heavy())"


def lazy_program(folder, package: str, body: str) -> object:
    """``prog.py`` in ``folder`` importing ``package`` (at module level) with one kernel ``use``."""
    write_files(folder, {"prog.py": f"""\
        import numpy as np

        import {package}


        def heavy():
            return 1.0


        # @stream kernel
        def use():
            {body.replace("PKG", package)}


        # @stream graph
        def main():
            return use()
        """})
    return folder / "prog.py"


@pytest.fixture(autouse=True)
def _forget_test_packages():
    """The packages these tests write are forgotten after each test."""
    yield
    for name in [n for n in sys.modules if n.split(".")[0] in ("lazylib", "locallazy")]:
        del sys.modules[name]


@pytest.mark.parametrize(("lazy", "body", "warmed"), [
    (True, READS_SUBMODULE, True), (True, CALLS_OWN_FUNCTION, False), (False, READS_SUBMODULE, False)],
    ids=["reads-the-submodule", "calls-a-function-of-that-name", "package-without-lazy-loading"])
def test_loading_a_program_imports_the_lazy_library_submodules_its_kernels_read(tmp_path, monkeypatch, lazy, body,
                                                                                 warmed):
    """A package without lazy loading is left alone: reading a submodule it never imported fails
    under StreamMAP as in plain Python."""
    files = LAZY_PACKAGE if lazy else {**LAZY_PACKAGE, "__init__.py": ""}
    write_files(tmp_path / "site" / "lazylib", files)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    prog = lazy_program(tmp_path / "proj", "lazylib", body)
    plan = streammap.compile(prog, cluster=ONE_CPU, history=False)
    assert "lazylib.heavy" not in sys.modules
    program = load_program(plan)
    try:
        assert ("lazylib.heavy" in sys.modules) is warmed      # before any kernel ran
    finally:
        program.unload()


def test_the_programs_own_packages_are_imported_when_the_program_says(tmp_path):
    """A local package's lazy submodule stays for the kernel to import."""
    write_files(tmp_path / "locallazy", LAZY_PACKAGE)
    prog = lazy_program(tmp_path, "locallazy", READS_SUBMODULE)
    plan = streammap.compile(prog, cluster=ONE_CPU, history=False)
    assert [m.path for m in plan.source.modules] == ["locallazy/__init__.py"]
    program = load_program(plan)
    try:
        assert "locallazy" in sys.modules and "locallazy.heavy" not in sys.modules
        np.testing.assert_array_equal(program.kernels["use"](), [3.0, 3.0])
    finally:
        program.unload()


#: A program whose one task counts the page faults of its last ten complex FFTs of 2^16 points
#: (1 MiB results) out of twenty.
FAULTS_PROGRAM = """\
    import resource

    import numpy as np


    # @stream kernel
    def faults():
        z = np.ones(1 << 16, dtype=complex)
        for k in range(20):
            if k == 10:
                before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            np.fft.fft(z)
        return np.array([resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before])


    # @stream graph
    def main():
        return faults()
    """


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
                    reason="the allocator rule is glibc's")
def test_a_fresh_run_reuses_result_arrays_as_discovery_measured(tmp_path):
    """In a fresh process glibc maps each 1 MiB result afresh (a fault per 4 KiB page, ~2.5 us:
    half the FFT); discovery measured with freed blocks reused, and a run's first task now does too."""
    write_files(tmp_path, {"prog.py": textwrap.dedent(FAULTS_PROGRAM)})
    write_plan(streammap.compile(tmp_path / "prog.py", cluster=ONE_CPU, history=False), tmp_path / "plan.yaml")
    subprocess.run([sys.executable, "-m", "streammap.cli", "run", "plan.yaml", "-o", "out.npz", "--no-progress",
                    "--no-history"], cwd=tmp_path, check=True, capture_output=True)
    pages_per_result = (1 << 20) // 4096
    assert int(np.load(tmp_path / "out.npz")["result"][0]) < pages_per_result


def dynamic_lazy_program(folder, value: float) -> object:
    """``prog.py`` in ``folder`` with a package ``locallazy`` of its own (``heavy.VALUE`` is
    ``value``), imported by name at run time (``importlib.import_module``), which the compiler's
    static search for local modules does not see: the plan records no local module."""
    write_files(folder / "locallazy", {**LAZY_PACKAGE, "heavy.py": f"VALUE = {value}\n"})
    write_files(folder, {"prog.py": """\
        import importlib

        import numpy as np

        locallazy = importlib.import_module("locallazy")


        # @stream kernel
        def use():
            return np.full(2, locallazy.heavy.VALUE)


        # @stream graph
        def main():
            return use()
        """})
    return folder / "prog.py"


@pytest.mark.parametrize("warm", [True, False], ids=["warmed", "not-warmed"])
def test_a_second_program_gets_its_own_local_package_and_its_lazy_submodule(tmp_path, warm):
    """Every module loaded from a program's folder is forgotten when it is unloaded, the
    submodules its kernels imported lazily during the run included: the next program, whose own
    package of that name the plan does not record, must not get the first one's submodule."""
    got = []
    for k, value in enumerate((3.0, 5.0)):
        plan = streammap.compile(dynamic_lazy_program(tmp_path / f"p{k}", value), cluster=ONE_CPU, history=False)
        assert plan.source.modules == []
        program = load_program(plan, warm=warm)
        try:
            got.append(program.kernels["use"]().tolist())
        finally:
            program.unload()
        assert [n for n in sys.modules if n.split(".")[0] == "locallazy"] == []
    assert got == [[3.0, 3.0], [5.0, 5.0]]


def test_a_lazy_submodule_of_a_recorded_local_package_is_forgotten_on_unload(tmp_path):
    write_files(tmp_path / "locallazy", LAZY_PACKAGE)
    program = load_program(streammap.compile(lazy_program(tmp_path, "locallazy", READS_SUBMODULE),
                                             cluster=ONE_CPU, history=False))
    try:
        program.kernels["use"]()
        assert "locallazy.heavy" in sys.modules          # imported by the kernel, during the run
    finally:
        program.unload()
    assert [n for n in sys.modules if n.split(".")[0] == "locallazy"] == []
