"""A param of NaN or an infinity is refused wherever a param comes in, naming the param.

NaN compares false with everything, so it passes every check a program writes as ``if x < 0``,
and a stored NaN cannot be written as JSON again: a job holding one turned its tenant's every
listing into a 500. So ``-D X=nan`` (or any expression that evaluates to NaN or an infinity), a
jobs file's ``.nan``, and a submission's params are refused with exit status 2 or a 400; and a
job stored by an older service that accepted one is failed, saying which param, when the service
starts again, while the other jobs go on.
"""

from __future__ import annotations

import json
import math

import pytest

from streammap.cli import main
from streammap.tenancy.api import Refused
from streammap.tenancy.jobs import JobsError, load_jobs
from streammap.tenancy.service import JobService
from streammap.tenancy.store import JobStore
from tests.helpers.cli import refused
from tests.tenancy.test_job_service import SLEEPY, VISION, write_setup
from tests.tenancy.test_service_hardening import post, request, status_of

NONFINITE = {"NaN": math.nan, "inf": math.inf, "-inf": -math.inf}


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "float('nan')", "float('-inf')", "1e400", "-1e400"])
def test_compile_refuses_a_define_that_is_not_a_finite_number(tmp_path, capsys, value):
    write_setup(tmp_path)
    out = tmp_path / "plan.yaml"
    refused(["compile", tmp_path / "sleepy.py", "--cluster", tmp_path / "cluster.yaml", "-D", f"SECONDS={value}",
             "-o", out], capsys, "sleepy.py: error: ", "param 'SECONDS'")
    assert not out.exists()


@pytest.mark.parametrize("text", ["{SECONDS: .nan}", "{SECONDS: .inf}", "{SECONDS: -.inf}"])
def test_a_jobs_file_define_that_is_not_a_finite_number_is_refused_at_its_line(tmp_path, text):
    write_setup(tmp_path)
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text(f"- {{program: sleepy.py, tenant: a, arrival: 0}}\n- {{program: sleepy.py, tenant: a, "
                    f"defines: {text}}}\n")
    with pytest.raises(JobsError) as info:
        load_jobs(jobs)
    message = info.value.format()
    assert "jobs.yaml:2" in message and "'SECONDS'" in message and "not a finite number" in message


@pytest.mark.parametrize("word", NONFINITE)
def test_a_submission_with_a_nonfinite_param_is_refused_before_anything_is_stored(tmp_path, word):
    write_setup(tmp_path)
    svc = JobService(tmp_path / "cluster.yaml", tmp_path / "tenants.yaml", tmp_path / "state", isolation="none")
    try:
        with pytest.raises(Refused) as info:
            svc.submit("vision", "sleepy.py", SLEEPY, params={"SECONDS": NONFINITE[word]})
        assert info.value.status == 400 and "param 'SECONDS'" in info.value.message
        assert svc.store.list() == []
    finally:
        svc.store.close()


def test_the_service_refuses_nonfinite_params_from_every_client_naming_the_param(service, tmp_path, capsys,
                                                                                 monkeypatch):
    monkeypatch.setenv("STREAMMAP_SERVER", service.url)
    monkeypatch.setenv("STREAMMAP_TOKEN", VISION)
    # The HTTP API: JSON's NaN words, and a number too large to be finite (read as an infinity).
    for raw in (b'"SECONDS": NaN', b'"SECONDS": -Infinity', b'"SECONDS": 1e400'):
        body = b'{"source_name": "sleepy.py", "source_text": ' + json.dumps(SLEEPY).encode() + b', "params": {' + raw + b"}}"
        answer = request(service.url, post("/jobs", body))
        assert status_of(answer) == 400, answer
        assert "param 'SECONDS'" in json.loads(answer.partition(b"\r\n\r\n")[2])["error"]
    # The command line: -D values are expressions, checked with the program.
    for value in ("nan", "1e400", "float('nan')"):
        refused(["submit", tmp_path / "sleepy.py", "--tenant", "vision", "-D", f"SECONDS={value}"], capsys,
                "SECONDS")
    # A plan whose params were edited to .nan, submitted as a plan.
    plan = tmp_path / "plan.yaml"
    assert main(
        ["compile", str(tmp_path / "sleepy.py"), "--cluster", str(tmp_path / "cluster.yaml"), "-D", "SECONDS=0.5",
         "-o", str(plan)]) == 0
    plan.write_text(plan.read_text().replace("SECONDS: 0.5", "SECONDS: .nan"))
    capsys.readouterr()
    refused(["submit", plan, "--tenant", "vision"], capsys, "SECONDS")
    assert service.client(VISION).queue(all_states=True) == []


def test_a_stored_job_with_a_nan_param_fails_at_restart_and_the_listing_still_works(tmp_path):
    """A job an older service stored with NaN params: queued or running, it is failed saying which
    param; done, it is listed without them; the other jobs go on."""
    write_setup(tmp_path)
    store = JobStore(tmp_path / "state")
    demand = {"gpus": 1, "options": [{"model": "A100", "gpus": 1, "duration": 1.0, "memory": 0.0}]}

    def stored(params):
        def prepare(job_id, folder):
            (folder / "sleepy.py").write_text(SLEEPY)
        return store.add(tenant="vision", priority=0, source="sleepy.py", params=params, entry=None, gpus=None,
                         demand=demand, prepare=prepare)
    queued = stored({"SECONDS": math.nan})
    running = stored({"SECONDS": math.inf})
    done = stored({"SECONDS": -math.inf})
    good = stored({"SECONDS": 0.01})
    store.update(running, state="running", pid=None, started=1.0,
                 grant={"model": "A100", "gpus": 1, "duration": 1.0, "memory": 0.0, "devices": ["node0/gpu0"]})
    store.update(done, state="done", finished=2.0)
    store.close()

    svc = JobService(tmp_path / "cluster.yaml", tmp_path / "tenants.yaml", tmp_path / "state", isolation="none")
    try:
        for job, word in ((queued, "nan"), (running, "inf")):
            row = svc.store.get(job)
            assert row["state"] == "failed", row
            assert f"param 'SECONDS' is {word}, not a finite number" in row["error"]
        assert svc.store.get(good)["state"] == "queued" and good in svc.scheduler.jobs
        listing = svc.jobs("vision", all_states=True)
        json.dumps(listing, allow_nan=False)            # as the HTTP answer writes it
        assert {j["id"]: j["params"] for j in listing}[done] == {}
    finally:
        svc.store.close()
