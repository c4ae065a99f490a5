"""The job service as its users meet it: ``streammap serve`` in a process, the client commands.

Each test starts its own service on a free port in a temporary state folder (and stops it);
programs run emulated on the CPU, re-mapped onto the devices each job was granted.
"""

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import streammap
from streammap.cli import main
from streammap.tenancy.client import Client, ServiceError
from tests.helpers.paths import SAMPLES, SHARED

CLUSTER = """\
name: box
nodes:
  - name: node0
    link: {bandwidth: 300 GB/s, latency: 3us}
    devices:
%s      - {name: cpu, kind: cpu, memory: 64GiB}
"""

TENANTS = """\
tenants:
  - {name: vision, weight: 2, token: tok-vision-1234, quota: {gpus: 2}}
  - {name: nlp, token: tok-nlp-5678, quota: {gpus: 1}}
"""

SLEEPY = '''\
import time

import numpy as np

# @stream param
SECONDS = 1.0
# @stream param
VALUE = 1


# @stream kernel(flops=1e6)
def nap(v):
    time.sleep(SECONDS)
    return np.full(4, float(v))


# @stream graph
def sleepy():
    return nap(VALUE)
'''

#: A job that runs until the test lets it end (an event, not a guess of how long the test needs):
#: its kernel waits for the file GATE in its working directory, the job's folder, which the test
#: can write (at most a minute), and returns VALUE.
GATED = '''\
import os
import time

import numpy as np

# @stream param
GATE = "gate"
# @stream param
VALUE = 1


# @stream kernel(flops=1e6)
def wait_for_gate(v):
    deadline = time.monotonic() + 60
    while not os.path.exists(GATE) and time.monotonic() < deadline:
        time.sleep(0.02)
    return np.full(4, float(v))


# @stream graph
def gated():
    return wait_for_gate(VALUE)
'''

VISION, NLP = "tok-vision-1234", "tok-nlp-5678"


def write_setup(folder, gpus=2):
    devs = "".join(f"      - {{name: gpu{i}, kind: gpu, vendor: nvidia, model: A100, memory: 80GiB}}\n"
                   for i in range(gpus))
    (folder / "cluster.yaml").write_text(CLUSTER % devs)
    (folder / "tenants.yaml").write_text(TENANTS)
    (folder / "sleepy.py").write_text(SLEEPY)


class Service:
    """A ``streammap serve`` process of this test, in ``folder`` (cluster and tenants files there)."""

    #: Seconds it may take to start, and to stop once told.
    START_TIMEOUT = 30
    STOP_TIMEOUT = 15

    def __init__(self, folder, *options):
        self.folder = folder
        self.state = folder / "state"
        note = self.state / "server.json"
        note.unlink(missing_ok=True)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "streammap.cli", "serve", "--cluster", str(folder / "cluster.yaml"),
             "--tenants", str(folder / "tenants.yaml"), "--state", str(self.state), "--port", "0", "--emulate",
             "--mapper", "heft", *options], cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        deadline = time.time() + self.START_TIMEOUT
        while not note.exists():
            if self.proc.poll() is not None or time.time() > deadline:
                raise AssertionError(f"the service did not start: {self.proc.stdout.read()}")
            time.sleep(0.05)
        self.note = json.loads(note.read_text())
        self.url = self.note["url"]

    def client(self, token):
        return Client(self.url, token)

    def kill(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=self.STOP_TIMEOUT)


def wait_for(client, job, states=("done",), timeout=60):
    deadline = time.time() + timeout
    while True:
        s = client.status(job)
        if s["state"] in states:
            return s
        if s["state"] in ("failed", "cancelled") or time.time() > deadline:
            raise AssertionError(f"{job}: {s['state']}\n{s.get('error') or ''}\n{client.logs(job)}")
        time.sleep(0.1)


def test_a_submitted_program_runs_on_its_granted_devices_and_gives_the_direct_result(service, tmp_path, capsys,
                                                                                     monkeypatch):
    monkeypatch.setenv("STREAMMAP_SERVER", service.url)
    monkeypatch.setenv("STREAMMAP_TOKEN", VISION)
    fm = str(SAMPLES / "fm_radio.py")
    assert main(["submit", fm, "--tenant", "vision", "-D", "N=4096"]) == 0
    job = capsys.readouterr().out.split()[-1]
    status = wait_for(service.client(VISION), job)
    assert status["model"] == "A100" and 1 <= len(status["devices"]) <= 2
    assert main(["result", job, "-o", str(tmp_path / "out.npz")]) == 0
    got = np.load(tmp_path / "out.npz")["result"]
    plan = streammap.compile(fm, cluster=str(tmp_path / "cluster.yaml"), params={"N": 4096}, history=False)
    want = streammap.run(plan, emulate=True)["result"]
    np.testing.assert_allclose(got, want, rtol=1e-6)
    # The plan was re-mapped onto the granted devices only.
    granted = streammap.read_plan(service.state / "jobs" / job / "plan.yaml")
    assert sorted(d.id for d in granted.devices) == sorted(status["devices"])
    # A plan submits its program with the plan's params; the job is re-mapped all the same.
    streammap.write_plan(plan, tmp_path / "fm.plan.yaml")
    assert main(["submit", str(tmp_path / "fm.plan.yaml"), "--tenant", "vision", "--priority", "3"]) == 0
    again = capsys.readouterr().out.split()[-1]
    assert wait_for(service.client(VISION), again)["priority"] == 3
    assert main(["result", again, "-o", str(tmp_path / "again.npz")]) == 0
    np.testing.assert_allclose(np.load(tmp_path / "again.npz")["result"], want, rtol=1e-6)
    assert main(["queue", "--all"]) == 0 and job in capsys.readouterr().out
    assert main(["logs", job]) == 0 and "compiled onto" in capsys.readouterr().out


def test_unauthorised_requests_get_nothing(service, tmp_path, capsys):
    vision, nlp = service.client(VISION), service.client(NLP)
    job = vision.submit(tmp_path / "sleepy.py", "vision", {"SECONDS": "0.01"})
    wait_for(vision, job)
    for token, words in ((None, "missing token"), ("not-a-token", "invalid token")):
        c = service.client(token)
        for call in (c.queue, lambda: c.status(job), lambda: c.result(job, tmp_path / "x.npz"),
                     lambda: c.cancel(job), lambda: c.logs(job),
                     lambda: c.submit(tmp_path / "sleepy.py", "vision")):
            with pytest.raises(ServiceError, match=words):
                call()
    # Another tenant's job does not exist for nlp: no status, logs, result or cancel.
    for call in (lambda: nlp.status(job), lambda: nlp.logs(job), lambda: nlp.cancel(job),
                 lambda: nlp.result(job, tmp_path / "x.npz")):
        with pytest.raises(ServiceError, match=f"no job {job} of tenant nlp"):
            call()
    assert not (tmp_path / "x.npz").exists()
    assert nlp.queue(all_states=True) == []
    with pytest.raises(ServiceError, match="belongs to tenant nlp"):
        nlp.submit(tmp_path / "sleepy.py", "vision")
    # The CLI says so and exits 2.
    assert main(["status", job, "--server", service.url, "--token", NLP]) == 2
    assert "no job" in capsys.readouterr().err


def test_bad_programs_and_impossible_jobs_are_refused_at_submission(service, tmp_path):
    vision, nlp = service.client(VISION), service.client(NLP)
    bad = tmp_path / "bad.py"
    bad.write_text("# @stream graph\ndef g():\n    return np.zeros(3)\n")
    with pytest.raises(ServiceError, match="bad.py:3"):
        vision.submit(bad, "vision")
    with pytest.raises(ServiceError, match="quota can never grant"):
        nlp.submit(tmp_path / "sleepy.py", "nlp", gpus=2)
    wf = SHARED / "classic" / "topcuoglu-10.json"
    with pytest.raises(Exception, match="programs"):
        vision.submit(wf, "vision")
    assert vision.queue(all_states=True) == []


def test_a_killed_service_restarts_with_its_queue_intact(tmp_path, capsys):
    write_setup(tmp_path, gpus=1)
    svc = Service(tmp_path)
    try:
        c = svc.client(VISION)
        (tmp_path / "gated.py").write_text(GATED)
        first = c.submit(tmp_path / "gated.py", "vision", {"VALUE": "1"})
        rest = [c.submit(tmp_path / "sleepy.py", "vision", {"SECONDS": "0.01", "VALUE": str(v)}, priority=p)
                for v, p in ((2, 0), (3, 0))]
        wait_for(c, first, states=("running",))
        assert [j["state"] for j in c.queue()] == ["running", "queued", "queued"]
        worker = c.status(first)
        # Each waiting job has a reservation: after the running job's estimated end, in queue order.
        deadline = time.time() + 10
        while any(j["estimated_start"] is None for j in c.queue()[1:]) and time.time() < deadline:
            time.sleep(0.1)
        waiting = c.queue()[1:]
        assert all(j["estimated_start"] >= worker["started"] and j["estimated_model"] == "A100" for j in waiting)
        assert waiting[0]["estimated_start"] <= waiting[1]["estimated_start"]
        assert worker["estimated_start"] is None
        assert main(["status", rest[0], "--server", svc.url, "--token", VISION]) == 0
        assert "estimated start: in " in capsys.readouterr().out
        svc.kill()                                       # SIGKILL: no chance to save anything
        svc = Service(tmp_path)
        c = svc.client(VISION)
        jobs = c.queue(all_states=True)
        assert [j["id"] for j in jobs] == [first] + rest
        assert jobs[0]["state"] == "running" and jobs[0]["attempts"] == 1     # found again, not re-run
        assert jobs[0]["devices"] == worker["devices"]
        assert c.cancel(rest[1])["state"] == "cancelled"
        (svc.state / "jobs" / first / "gate").touch()      # the first job may end now
        for job, value in ((first, 1.0), (rest[0], 2.0)):
            wait_for(c, job)
            c.result(job, tmp_path / f"{job}.npz")
            assert np.load(tmp_path / f"{job}.npz")["result"].tolist() == [value] * 4
        assert c.status(rest[1])["state"] == "cancelled"
        assert c.status(first)["attempts"] == 1
    finally:
        svc.stop()


def test_a_running_job_whose_worker_died_with_the_machine_runs_again(tmp_path):
    write_setup(tmp_path, gpus=1)
    svc = Service(tmp_path)
    try:
        c = svc.client(VISION)
        job = c.submit(tmp_path / "sleepy.py", "vision", {"SECONDS": "30"})
        pid = None
        wait_for(c, job, states=("running",))
        import sqlite3
        with sqlite3.connect(svc.state / "jobs.db") as db:
            pid = db.execute("SELECT pid FROM jobs WHERE id = ?", (job,)).fetchone()[0]
        svc.kill()
        os.killpg(pid, signal.SIGKILL)                   # the worker is lost too (a reboot)
        (tmp_path / "sleepy.py").write_text(SLEEPY)
        svc = Service(tmp_path)
        c = svc.client(VISION)
        s = c.status(job)
        assert s["state"] in ("queued", "running") and s["attempts"] <= 2
        assert c.cancel(job)["state"] == "cancelled"
    finally:
        svc.stop()


def test_serve_refuses_what_it_cannot_serve(tmp_path, capsys):
    write_setup(tmp_path)
    hetero = SHARED / "clusters" / "hetero-2x4.yaml"
    args = ["serve", "--tenants", str(tmp_path / "tenants.yaml"), "--state", str(tmp_path / "s"), "--port", "0"]
    assert main(args + ["--cluster", str(hetero)]) == 2
    assert "--backend ray" in capsys.readouterr().err
    (tmp_path / "tenants.yaml").write_text("tenants:\n  - {name: a, token: short}\n")
    assert main(args + ["--cluster", str(tmp_path / "cluster.yaml")]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'tenants.yaml'}:2" in err and "token" in err


def test_with_preemption_on_an_urgent_job_stops_lower_priority_work(tmp_path):
    write_setup(tmp_path, gpus=1)
    (tmp_path / "tenants.yaml").write_text(TENANTS + "preemption: true\n")
    svc = Service(tmp_path)
    try:
        c = svc.client(VISION)
        low = c.submit(tmp_path / "sleepy.py", "vision", {"SECONDS": "30"})
        wait_for(c, low, states=("running",))
        urgent = c.submit(tmp_path / "sleepy.py", "vision", {"SECONDS": "0.01", "VALUE": "7"}, priority=5)
        wait_for(c, urgent, timeout=15)                  # not after the 30 s job
        deadline = time.time() + 30
        while c.status(low)["attempts"] < 2:              # stopped, queued again, started again
            assert time.time() < deadline, c.status(low)
            time.sleep(0.1)
        assert c.status(low)["state"] == "running"
        assert c.cancel(low)["state"] == "cancelled"
    finally:
        svc.stop()


def test_a_failing_kernel_fails_its_job_with_the_traceback(service, tmp_path):
    (tmp_path / "broken.py").write_text(SLEEPY.replace("    time.sleep(SECONDS)\n", "    raise ValueError('bad input')\n"))
    c = service.client(VISION)
    job = c.submit(tmp_path / "broken.py", "vision")
    with pytest.raises(AssertionError, match="failed"):
        wait_for(c, job)
    s = c.status(job)
    assert s["state"] == "failed" and "ValueError: bad input" in s["error"] and "nap" in s["error"]
    with pytest.raises(ServiceError, match="is failed"):
        c.result(job, tmp_path / "out.npz")
    assert not (tmp_path / "out.npz").exists()


def test_jobs_of_a_tenant_removed_from_the_tenants_file_fail_on_restart(tmp_path):
    from streammap.tenancy.service import JobService
    write_setup(tmp_path)
    args = (tmp_path / "cluster.yaml", tmp_path / "tenants.yaml", tmp_path / "state")
    svc = JobService(*args)                       # no scheduling loop: the jobs stay queued
    kept = svc.submit("vision", "sleepy.py", SLEEPY)
    gone = svc.submit("nlp", "sleepy.py", SLEEPY)
    svc.store.close()
    (tmp_path / "tenants.yaml").write_text(TENANTS.split("  - {name: nlp")[0])
    svc = JobService(*args)
    assert svc.store.get(kept)["state"] == "queued" and kept in svc.scheduler.jobs
    row = svc.store.get(gone)
    assert row["state"] == "failed" and "no longer in the tenants file" in row["error"]
    svc.store.close()
