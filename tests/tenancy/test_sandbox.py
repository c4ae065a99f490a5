"""Contained jobs: what a job of the job service can and cannot reach, and the limits it runs under.

Each test starts its own ``streammap serve`` process (as ``test_job_service.py`` does) in a
temporary folder; programs run emulated on the CPU. The sandbox needs unprivileged user
namespaces: where the machine has none, the tests that run jobs in one are skipped, saying why;
the refusal to serve several tenants without isolation is checked everywhere.
"""

import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from streammap.cli import main
from streammap.tenancy import sandbox
from streammap.tenancy.client import Client
from streammap.tenancy.service import JobService
from streammap.tenancy.tenants import TenantsError, load_tenants
from tests.tenancy import test_job_service as job_service

ROOT = Path(__file__).resolve().parents[2]

CLUSTER = """\
name: box
nodes:
  - name: node0
    link: {bandwidth: 300 GB/s, latency: 3us}
    devices:
      - {name: gpu0, kind: gpu, vendor: nvidia, model: A100, memory: 80GiB}
      - {name: gpu1, kind: gpu, vendor: nvidia, model: A100, memory: 80GiB}
      - {name: cpu, kind: cpu, memory: 64GiB}
"""

TENANTS = """\
tenants:
  - {name: vision, token: tok-vision-1234}
  - {name: nlp, token: tok-nlp-5678}
  - {name: tight, token: tok-tight-0000, limits: {memory: 1GiB, cpu_time: 4s}}
  - {name: brief, token: tok-brief-0000, limits: {wall_time: 6s}}
"""

TOKENS = {"vision": "tok-vision-1234", "nlp": "tok-nlp-5678", "tight": "tok-tight-0000", "brief": "tok-brief-0000"}

#: A program whose one kernel runs ``BODY`` (indented), then returns three ``VALUE``s.
PROGRAM = '''\
import os
import signal
import socket
import time

import numpy as np

# @stream param
VALUE = 1


# @stream kernel(flops=1e6)
def work(v):
{body}
    return np.full(3, float(v))


# @stream graph
def job():
    return work(VALUE)
'''


def program(body: str) -> str:
    return PROGRAM.format(body="\n".join("    " + line for line in body.strip("\n").splitlines()))


class Service(job_service.Service):
    """The job service's test process, addressed by tenant name; contained jobs start slower."""

    START_TIMEOUT = 60
    STOP_TIMEOUT = 30

    def client(self, tenant):
        return Client(self.url, TOKENS[tenant])

    def submit(self, tenant, folder, name, text, **params):
        (folder / name).write_text(text)
        return self.client(tenant).submit(folder / name, tenant, {k: str(v) for k, v in params.items()})


@pytest.fixture
def setup(tmp_path):
    (tmp_path / "cluster.yaml").write_text(CLUSTER)
    (tmp_path / "tenants.yaml").write_text(TENANTS)
    return tmp_path


@pytest.fixture
def contained(setup):
    ok, why = sandbox.available()
    if not ok:
        pytest.skip(f"jobs cannot be contained on this machine: {why}")
    svc = Service(setup)
    yield svc
    svc.stop()


def wait_end(client, job, timeout=120):
    """The job's status once it is no longer queued or running."""
    deadline = time.time() + timeout
    while True:
        s = client.status(job)
        if s["state"] not in ("queued", "running"):
            return s
        assert time.time() < deadline, f"{job} still {s['state']}\n{client.logs(job)}"
        time.sleep(0.1)


def test_a_hostile_job_reaches_neither_the_tokens_nor_the_database_nor_its_neighbours_files(contained, setup):
    vision, nlp = contained.client("vision"), contained.client("nlp")
    neighbour = contained.submit("vision", setup, "honest.py", program("pass"), VALUE=7)
    assert wait_end(vision, neighbour)["state"] == "done"
    neighbour_dir = contained.state / "jobs" / neighbour
    before = {f.name: f.read_bytes() for f in neighbour_dir.iterdir()}
    service_pid = contained.note["pid"]
    port = int(contained.note["url"].rsplit(":", 1)[1])
    attacks = f'''
attempts = {{
    "read the tokens": lambda: open({str(setup / "tenants.yaml")!r}).read(),
    "read the database": lambda: open({str(contained.state / "jobs.db")!r}, "rb").read(),
    "read the neighbour's result": lambda: open("../{neighbour}/result.npz", "rb").read(),
    "write the neighbour's result": lambda: np.savez("../{neighbour}/result.npz", result=[666] * 3),
    "write by absolute path": lambda: open({str(neighbour_dir / "result.npz")!r}, "wb").write(b"x"),
    "create the neighbour's folder": lambda: os.makedirs("../{neighbour}"),
    "write outside its folder": lambda: open({str(ROOT / "hostile-was-here")!r}, "w").write("x"),
    "reach the service's port": lambda: socket.create_connection(("127.0.0.1", {port}), timeout=5),
    "see the service's process": lambda: b"serve" in open("/proc/{service_pid}/cmdline", "rb").read() or 1 / 0,
}}
leaks = 0
for name, attempt in attempts.items():
    try:
        attempt()
        print("LEAKED", name, flush=True)
        leaks += 1
    except (OSError, ZeroDivisionError) as exc:
        print("BLOCKED", name, type(exc).__name__, flush=True)
open("mine.txt", "w").write("its own folder is writable")
v = leaks
'''
    job = contained.submit("nlp", setup, "hostile.py", program(attacks))
    status = wait_end(nlp, job)
    log = nlp.logs(job)
    assert status["state"] == "done", log
    assert status["isolation"] == "namespaces"
    for name in ("read the tokens", "read the database", "read the neighbour's result",
                 "write the neighbour's result", "write by absolute path", "create the neighbour's folder",
                 "write outside its folder", "reach the service's port", "see the service's process"):
        assert f"BLOCKED {name}" in log, log
    assert "LEAKED" not in log
    nlp.result(job, setup / "hostile.npz")
    assert np.load(setup / "hostile.npz")["result"].tolist() == [0.0] * 3
    assert (contained.state / "jobs" / job / "mine.txt").exists()
    assert not (ROOT / "hostile-was-here").exists()
    assert {f.name: f.read_bytes() for f in neighbour_dir.iterdir()} == before
    vision.result(neighbour, setup / "neighbour.npz")
    assert np.load(setup / "neighbour.npz")["result"].tolist() == [7.0] * 3


def test_a_job_that_allocates_past_its_memory_limit_fails_saying_so(contained, setup):
    tight = contained.client("tight")
    job = contained.submit("tight", setup, "greedy.py", program("x = np.ones(2 << 30 >> 3)"))
    status = wait_end(tight, job)
    assert status["state"] == "failed"
    assert "the job exceeded its memory limit of 1 GiB" in status["error"]
    assert "MemoryError" in status["error"]
    assert status["limits"]["memory"] == 2**30


def test_a_jobs_scratch_space_is_held_to_its_memory_limit(contained, setup):
    """/tmp and /dev/shm are memory (tmpfs), which RLIMIT_DATA does not count: a job limited to
    1 GiB filled them with as much as the machine's RAM allowed. Each is now at most the limit."""
    tight = contained.client("tight")
    body = """
import errno
written = 0
try:
    with open("/tmp/fill", "wb") as f:
        for _ in range(1280):                    # 1.25 GiB, in MiB
            f.write(b"x" * (1 << 20))
            f.flush()
            written += 1
except OSError as exc:
    print("STOPPED", errno.errorcode.get(exc.errno), written, flush=True)
import os
os.remove("/tmp/fill")
v = written
"""
    job = contained.submit("tight", setup, "filler.py", program(body))
    status = wait_end(tight, job)
    log = tight.logs(job)
    assert status["state"] == "done", log
    assert "STOPPED ENOSPC" in log and int(log.split("STOPPED ENOSPC ")[1].split()[0]) <= 1024, log


def test_a_job_past_its_cpu_time_limit_is_killed_and_failed(contained, setup):
    tight = contained.client("tight")
    job = contained.submit("tight", setup, "spin.py", program("while True:\n    pass"))
    status = wait_end(tight, job)
    assert status["state"] == "failed"
    assert status["error"] == "the job exceeded its CPU-time limit of 4 s (killed by SIGXCPU)"


def test_a_hanging_job_is_stopped_at_its_wall_time_with_all_its_processes(contained, setup):
    brief = contained.client("brief")
    job = contained.submit("brief", setup, "hang.py", program("import subprocess\n"
                                                              "subprocess.Popen(['sleep', '600'], start_new_session=True)\n"
                                                              "time.sleep(600)"))
    deadline = time.time() + 60
    while brief.status(job)["state"] == "queued" and time.time() < deadline:
        time.sleep(0.1)
    with sqlite3.connect(contained.state / "jobs.db") as db:
        launcher = db.execute("SELECT pid FROM jobs WHERE id = ?", (job,)).fetchone()[0]
    status = wait_end(brief, job)
    assert status["state"] == "failed"
    assert status["error"] == "the job exceeded its wall-time limit of 6 s and was stopped"
    assert not Path(f"/proc/{launcher}").exists()
    # The sleep that left the process group went with the job's pid namespace.
    sleeps = subprocess.run(["pgrep", "-f", "^sleep 600$"], capture_output=True, text=True).stdout.split()
    assert not [p for p in sleeps if str(setup) in _cwd(p)]


def _cwd(pid: str) -> str:
    try:
        return str(Path(f"/proc/{pid}/cwd").resolve())
    except OSError:
        return ""


def test_a_job_whose_process_ends_without_an_exit_note_fails_with_how_it_ended(contained, setup):
    nlp = contained.client("nlp")
    quits = contained.submit("nlp", setup, "quits.py", program("os._exit(3)"))
    killed = contained.submit("nlp", setup, "killed.py", program("os.kill(os.getpid(), signal.SIGKILL)"))
    assert wait_end(nlp, quits)["error"] == "the job's process exited with status 3 without an exit note"
    assert wait_end(nlp, killed)["error"] == "the job's process was killed by signal SIGKILL (9)"


def test_without_namespaces_several_tenants_are_refused_unless_isolation_is_waived(setup, monkeypatch, capsys):
    monkeypatch.setattr(sandbox, "_AVAILABLE", (False, "user namespaces are disabled"))
    args = ["serve", "--cluster", str(setup / "cluster.yaml"), "--tenants", str(setup / "tenants.yaml"),
            "--state", str(setup / "state"), "--port", "0"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "jobs cannot be contained (user namespaces are disabled)" in err
    assert "--no-isolation" in err and not (setup / "state" / "server.json").exists()
    files = (setup / "cluster.yaml", setup / "tenants.yaml", setup / "state")
    with pytest.raises(Exception, match="cannot be contained"):
        JobService(*files, isolation="namespaces")
    waived = JobService(*files, isolation="none")
    assert waived.health()["isolation"] == "none"
    waived.store.close()
    (setup / "one.yaml").write_text("tenants:\n  - {name: solo, token: tok-solo-0000}\n")
    alone = JobService(setup / "cluster.yaml", setup / "one.yaml", setup / "state")
    assert alone.health()["isolation"] == "none"          # one tenant: nobody to be contained from
    alone.store.close()
    with pytest.raises(Exception, match="run in Ray's workers"):    # Ray runs kernels outside any sandbox
        JobService(*files, backend="ray", address="127.0.0.1:1")


def test_with_no_isolation_a_job_runs_uncontained_and_says_so(setup):
    svc = Service(setup, "--no-isolation", "--wall-time-limit", "10min")
    try:
        assert svc.note["isolation"] == "none"
        job = svc.submit("vision", setup, "plain.py", program("pass"), VALUE=2)
        status = wait_end(svc.client("vision"), job)
        assert status["state"] == "done" and status["isolation"] == "none"
        assert status["limits"] == {"memory": None, "cpu_time": None, "wall_time": 600.0}
    finally:
        svc.stop()


def test_limits_in_the_tenants_file_and_on_the_command_line_are_checked(setup, capsys):
    assert load_tenants(setup / "tenants.yaml").limits("tight").memory == 2**30
    (setup / "bad.yaml").write_text("tenants:\n  - name: a\n    limits: {memory: lots}\n")
    with pytest.raises(TenantsError, match="memory"):
        load_tenants(setup / "bad.yaml")
    (setup / "bad.yaml").write_text("tenants:\n  - name: a\n    limits: {wall_time: -1}\n")
    with pytest.raises(TenantsError, match="wall_time"):
        load_tenants(setup / "bad.yaml")
    args = ["serve", "--cluster", str(setup / "cluster.yaml"), "--tenants", str(setup / "tenants.yaml"),
            "--state", str(setup / "state"), "--port", "0"]
    assert main(args + ["--wall-time-limit", "soon"]) == 2
    assert "--wall-time-limit 'soon'" in capsys.readouterr().err


def test_a_signal_ends_a_job_the_way_it_ended_its_worker():
    assert sandbox.ending(-signal.SIGTERM, None) == "the job's process was killed by signal SIGTERM (15)"
    assert "memory limit is 1 GiB" in sandbox.ending(-signal.SIGSEGV, {"memory": 2**30})
    assert "unknown" in sandbox.ending(None, {})
