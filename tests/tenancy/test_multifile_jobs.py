"""The job service runs multi-file programs: ``streammap submit`` sends the program's local modules,
the service checks them with the program and keeps them in the job's own folder, and the worker
runs the job with them importable, giving what plain Python gives."""

from __future__ import annotations

import numpy as np
import pytest

from streammap.cli import main
from streammap.tenancy.client import ServiceError
from tests.helpers.multifile import HELPERS, plain_python, write_package, write_two_file
from tests.tenancy.test_job_service import VISION, wait_for


def test_submitted_multi_file_programs_run_with_their_own_modules(service, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("STREAMMAP_SERVER", service.url)
    monkeypatch.setenv("STREAMMAP_TOKEN", VISION)
    two = write_two_file(tmp_path / "two")
    pkg = write_package(tmp_path / "pkg")
    other = write_two_file(tmp_path / "other")          # a helpers.py of its own, with another weight
    (tmp_path / "other" / "helpers.py").write_text(HELPERS.replace("WEIGHT = 0.25", "WEIGHT = 0.75"))
    jobs = {}
    for prog in (two, pkg, other):
        assert main(["submit", str(prog), "--tenant", "vision"]) == 0
        jobs[prog] = capsys.readouterr().out.split()[-1]
    client = service.client(VISION)
    for prog, job in jobs.items():
        wait_for(client, job)
        client.result(job, tmp_path / f"{job}.npz")
        np.testing.assert_array_equal(np.load(tmp_path / f"{job}.npz")["result"], plain_python(prog))
    # Each job keeps its own copies, beside its program, and its plan records them.
    folder = service.state / "jobs" / jobs[pkg]
    assert (folder / "mypkg" / "stats.py").read_text() == (tmp_path / "pkg" / "mypkg" / "stats.py").read_text()
    assert "{path: mypkg/consts.py, sha256:" in (folder / "plan.yaml").read_text()
    assert "0.75" in (service.state / "jobs" / jobs[other] / "helpers.py").read_text()
    assert "0.75" not in (service.state / "jobs" / jobs[two] / "helpers.py").read_text()


def test_bad_local_modules_are_refused_at_submission(service, tmp_path, capsys):
    client = service.client(VISION)
    prog = write_two_file(tmp_path / "two")
    body = {"tenant": "vision", "source_name": "prog.py", "source_text": prog.read_text()}
    # A module that does not parse: refused with its line, whoever sent it.
    with pytest.raises(ServiceError, match=r"helpers.py:3:\d+: .*invalid Python syntax"):
        client._json("POST", "/jobs", {**body, "modules": {"helpers.py": "import numpy\n\ndef ramp(n)\n"}})
    # A path outside the job's folder, or not a module's: refused before anything is written.
    for path in ("../helpers.py", "/tmp/helpers.py", "a/../../b.py", "helpers.sh", "prog.py"):
        with pytest.raises(ServiceError, match="local module"):
            client._json("POST", "/jobs", {**body, "modules": {path: HELPERS}})
    assert client.queue(all_states=True) == []
    # The client reads the modules as the compiler does: a bad one is the user's error, exit 2.
    (tmp_path / "two" / "helpers.py").write_text("def ramp(n)\n")
    assert main(["submit", str(prog), "--tenant", "vision", "--server", service.url, "--token", VISION]) == 2
    assert "helpers.py:1:" in capsys.readouterr().err
