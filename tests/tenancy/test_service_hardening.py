"""The job service under hostile or broken clients, programs and state: what each may cost.

Every test speaks to a real ``streammap serve`` (raw sockets where the client would be too polite)
or builds a :class:`JobService` on a damaged state folder. All traffic is to 127.0.0.1.
"""

import json
import os
import socket
import sqlite3
import stat
import threading
import time

import pytest

from streammap.tenancy.client import Client, ServiceError
from streammap.tenancy.service import JobService
from streammap.tenancy.tenants import TenantsError, load_tenants, token_digest
from tests.tenancy.test_job_service import NLP, SLEEPY, TENANTS, VISION, Service, write_setup

#: The issue's freezing clause: the front end now refuses it at once (its tuples are counted).
TUPLE_BOMB = '''\
import numpy as np

# @stream param
N = 8


# @stream kernel(flops=0*((((1,)*10000,)*10000,)*10000 == (((1,)*10000,)*10000,)*10000), out=8*N)
def k():
    return np.zeros(N)


# @stream graph
def g():
    return k()
'''

#: A program within every budget of the front end that still takes many seconds to compile:
#: a million loop iterations of arithmetic in its graph body.
FREEZE = '''\
import numpy as np

# @stream param
N = 8


# @stream kernel(out=8*N)
def k():
    return np.zeros(N)


# @stream graph
def g():
    s = 0
    for i in range(999_999):
        s = s + i * i - i // 3
    return k()
'''

# A kernel that scribbles over its job's exit note and ends its worker before the worker can write one.
GARBAGE_NOTE = SLEEPY.replace("    time.sleep(SECONDS)\n", '''\
    import os, sys
    from pathlib import Path
    folder = Path(sys.argv[1]) if len(sys.argv) > 1 and Path(sys.argv[1], "job.json").exists() else Path.cwd()
    (folder / "exit.json").write_text("{this is not a note")
    os._exit(0)
''')


def request(url, raw: bytes, timeout=10) -> bytes:
    """Send raw bytes to the service; return all it answers before closing (or ``timeout``)."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        try:
            s.sendall(raw)
        except (BrokenPipeError, ConnectionResetError):
            pass           # it answered and closed before taking everything: read the answer
        return _read_all(s)


def _read_all(s) -> bytes:
    out = b""
    try:
        while chunk := s.recv(65536):
            out += chunk
            if b"\r\n\r\n" in out and _complete(out):
                break
    except (socket.timeout, ConnectionResetError):
        pass
    return out


def _complete(out: bytes) -> bool:
    head, _, body = out.partition(b"\r\n\r\n")
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return len(body) >= int(line.split(b":")[1])
    return False


def status_of(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1])


def post(path, body: bytes, token=VISION, extra=b"") -> bytes:
    return (b"POST " + path.encode() + b" HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + token.encode() + b"\r\n"
            + extra + b"Content-Type: application/json\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n"
            + body)


@pytest.fixture
def strict(tmp_path):
    """A service with short deadlines and small check limits, so limits are reached in seconds."""
    write_setup(tmp_path)
    svc = Service(tmp_path, "--header-timeout", "1", "--body-timeout", "2", "--check-timeout", "3",
                  "--check-memory", "64", "--max-requests", "8")
    yield svc
    svc.stop()


def test_a_body_cannot_pass_the_size_limit_whatever_content_length_says(strict):
    head = (b"POST /jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + VISION.encode()
            + b"\r\nContent-Type: application/json\r\n")
    # A negative length is not HTTP: refused before any body is read.
    assert status_of(request(strict.url, head + b"Content-Length: -1\r\n\r\n" + b"x" * 1000)) == 400
    # A length over the limit is refused at once, without sending the body.
    assert status_of(request(strict.url, head + b"Content-Length: 314572800\r\n\r\n")) == 413
    # No length (chunked): counted as it streams, refused once past 8 MiB.
    chunk = b"x" * (1 << 20)
    chunked = head + b"Transfer-Encoding: chunked\r\n\r\n" + (b"100000\r\n" + chunk + b"\r\n") * 10 + b"0\r\n\r\n"
    answer = request(strict.url, chunked)
    assert status_of(answer) == 413 and b"at most 8388608 bytes" in answer
    # A body longer than its stated length is cut there: what follows is not taken as a program.
    answer = request(strict.url, head + b"Content-Length: 2\r\n\r\n{}" + b"x" * 100000)
    assert status_of(answer) == 400
    assert strict.client(VISION).queue(all_states=True) == []


def test_a_slow_body_gets_408_and_connections_that_send_nothing_are_closed(strict):
    head = (b"POST /jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + VISION.encode()
            + b"\r\nContent-Type: application/json\r\n")
    host, port = strict.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=20) as s:
        s.sendall(head + b"Content-Length: 100\r\n\r\n{")          # and never the rest
        answer = _read_all(s)
    assert status_of(answer) == 408 and b"within 2 s" in answer
    idle = [socket.create_connection((host, int(port)), timeout=20) for _ in range(50)]
    trickle = idle[0]
    trickle.sendall(b"GET /jobs HTTP/1.1\r\n")                    # a head that never ends
    try:
        # Meanwhile requests are answered as usual.
        assert strict.client(VISION).queue() == []
        # Each of them is closed by the service (recv sees the end) once its head is overdue.
        for s in idle:
            assert s.recv(1) == b""
    finally:
        for s in idle:
            s.close()


def test_a_flood_of_submissions_is_answered_every_one_without_resets(strict, tmp_path):
    text = (tmp_path / "sleepy.py").read_text()
    body = json.dumps({"source_name": "sleepy.py", "source_text": text, "params": {"SECONDS": "0.01"}}).encode()
    answers = [None] * 100

    def submit(i):
        try:
            answers[i] = request(strict.url, post("/jobs", body), timeout=60)
        except OSError as exc:              # a reset or a refused connection: what must not happen
            answers[i] = repr(exc).encode()

    threads = [threading.Thread(target=submit, args=(i,)) for i in range(100)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    codes = [status_of(a) if a.startswith(b"HTTP/1.1 ") else a for a in answers]
    assert all(c in (201, 503) for c in codes), [c for c in codes if c not in (201, 503)]
    assert 201 in codes                                       # some got in; the rest were told to come back
    busy = [a for a, c in zip(answers, codes) if c == 503]
    assert all(b"busy" in a and b"retry-after" in a.lower() for a in busy)
    c = strict.client(VISION)
    jobs = c.queue(all_states=True)
    assert len(jobs) == codes.count(201)
    for j in c.queue():
        try:
            c.cancel(j["id"])
        except ServiceError:
            pass                  # it finished meanwhile


MALFORMED = {
    "source_name not a string": {"source_name": 5},
    "source_name with a NUL": {"source_name": "a\u0000.py"},
    "source_name a path": {"source_name": "../../etc/x.py"},
    "source_text not a string": {"source_text": ["x"]},
    "params not a mapping": {"params": [1, 2]},
    "a param not a scalar": {"params": {"N": {"deep": 1}}},
    "entry not a name": {"entry": "a b"},
    "entry not a string": {"entry": 3},
    "priority not an integer": {"priority": "high"},
    "priority a fraction": {"priority": 1.5},
    "priority huge": {"priority": 10 ** 30},
    "gpus not an integer": {"gpus": "two"},
    "gpus zero": {"gpus": 0},
    "gpus negative": {"gpus": -3},
    "tenant not a string": {"tenant": 5},
    "an unknown field": {"colour": "blue"},
}


def test_every_malformed_field_is_a_400_naming_it_and_never_a_path(strict, tmp_path):
    base = {"source_name": "sleepy.py", "source_text": SLEEPY, "params": {}}
    for what, change in MALFORMED.items():
        answer = request(strict.url, post("/jobs", json.dumps({**base, **change}).encode()))
        field = next(iter(change))
        assert status_of(answer) == 400, (what, answer[:300])
        error = json.loads(answer.partition(b"\r\n\r\n")[2])["error"]
        assert field in error or "name" in error, (what, error)
        assert str(tmp_path) not in error and "/incoming" not in error, (what, error)
    bodies = {"not JSON": b"{", "a list": b"[1]", "deeply nested": b"[" * 100000 + b"]" * 100000,
              "a huge number": b'{"priority": ' + b"9" * 5000 + b"}", "not UTF-8": b'{"source_name": "\xff"}',
              "a lone surrogate": json.dumps({**base, "source_text": "\ud800"}).encode(),
              "a NUL in the program": json.dumps({**base, "source_text": "\u0000"}).encode()}
    for what, raw in bodies.items():
        answer = request(strict.url, post("/jobs", raw))
        assert status_of(answer) == 400, (what, answer[:300])
        assert str(tmp_path).encode() not in answer, (what, answer)
    for path in ("/jobs/..%2F..%2Fjobs.db/logs", "/jobs/job-99999999999999999999999", "/jobs/%00"):
        answer = request(strict.url, f"GET {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {VISION}\r\n\r\n"
                         .encode())
        assert status_of(answer) == 404 and str(tmp_path).encode() not in answer
    assert request(strict.url, b"DELETE /jobs HTTP/1.1\r\nHost: x\r\n\r\n").startswith(b"HTTP/1.1 405")
    assert strict.client(VISION).queue(all_states=True) == []


def test_a_program_that_freezes_the_compiler_is_refused_while_other_requests_are_answered(strict, tmp_path):
    (tmp_path / "freeze.py").write_text(FREEZE)
    vision, nlp = strict.client(VISION), strict.client(NLP)
    outcome = {}

    def submit():
        try:
            outcome["id"] = vision.submit(tmp_path / "freeze.py", "vision")
        except ServiceError as exc:
            outcome["error"] = str(exc)

    t = threading.Thread(target=submit)
    t.start()
    answered_meanwhile = 0
    while t.is_alive():
        assert nlp.queue() == []           # each answered while the freeze is being compiled
        answered_meanwhile += t.is_alive()
        time.sleep(0.05)
    t.join()
    assert "id" not in outcome and "compiling the program took more than 3 s" in outcome["error"]
    assert answered_meanwhile > 0
    # A program that needs too much memory to compile is refused the same way.
    hog = (tmp_path / "sleepy.py").read_text().replace(
        "    return nap(VALUE)", "    out = []\n    for i in range(900000):\n        out.append(nap(i))\n    return out")
    (tmp_path / "hog.py").write_text(hog)
    with pytest.raises(ServiceError, match="compiling the program took more than (64 MiB of memory|3 s)"):
        vision.submit(tmp_path / "hog.py", "vision")
    # The tuple bomb does not even get that far: the front end counts its tuples.
    (tmp_path / "bomb.py").write_text(TUPLE_BOMB)
    with pytest.raises(ServiceError, match="limit: 10000 items in all"):
        vision.submit(tmp_path / "bomb.py", "vision")
    assert not any((strict.state / "incoming").iterdir())        # every check's scratch is gone


def test_a_worker_that_leaves_a_garbage_exit_note_fails_its_job_and_files_stay_private(strict, tmp_path):
    (tmp_path / "garbage.py").write_text(GARBAGE_NOTE)
    c = strict.client(VISION)
    job = c.submit(tmp_path / "garbage.py", "vision")
    deadline = time.time() + 60
    while (s := c.status(job))["state"] in ("queued", "running"):
        assert time.time() < deadline, s
        time.sleep(0.1)
    assert s["state"] == "failed" and "exit note that is not one" in s["error"]
    # The state is this user's alone.
    assert stat.S_IMODE(os.stat(strict.state).st_mode) == 0o700
    for f in (strict.state / "jobs.db", strict.state / "jobs" / job / "log.txt"):
        assert stat.S_IMODE(os.stat(f).st_mode) == 0o600, f


def test_a_restart_on_damaged_state_fails_only_the_damaged_jobs(tmp_path):
    write_setup(tmp_path)
    args = (tmp_path / "cluster.yaml", tmp_path / "tenants.yaml", tmp_path / "state")
    svc = JobService(*args)                       # no scheduling loop: the jobs stay queued
    ids = [svc.submit("vision", "sleepy.py", SLEEPY, {"VALUE": str(v)}) for v in range(6)]
    svc.store.close()
    noted, damaged, gone, dir_note, no_grant, intact = ids
    jobs = tmp_path / "state" / "jobs"
    with sqlite3.connect(tmp_path / "state" / "jobs.db") as db:
        for job in (noted, dir_note, no_grant):
            db.execute("UPDATE jobs SET state = 'running', pid = 999999999 WHERE id = ?", (job,))
        db.execute("UPDATE jobs SET demand = '{not json' WHERE id = ?", (damaged,))
        db.execute("""UPDATE jobs SET grant_ = '{"devices": [' WHERE id = ?""", (no_grant,))
    (jobs / noted / "exit.json").write_text("\x00garbage")
    (jobs / dir_note / "exit.json").mkdir()
    for f in (jobs / gone).iterdir():
        f.unlink()
    (jobs / gone).rmdir()
    (tmp_path / "state" / "incoming" / "left-by-a-killed-service").mkdir(parents=True)
    svc = JobService(*args)                       # starts: nothing above stops it
    try:
        rows = {j: svc.store.get(j) for j in ids}
        assert rows[noted]["state"] == "failed" and "exit note" in rows[noted]["error"]
        assert rows[dir_note]["state"] == "failed" and "exit note" in rows[dir_note]["error"]
        assert rows[damaged]["state"] == "failed" and "damaged (demand)" in rows[damaged]["error"]
        assert rows[no_grant]["state"] == "failed" and "damaged (grant)" in rows[no_grant]["error"]
        assert rows[gone]["state"] == "failed" and "program is gone" in rows[gone]["error"]
        assert rows[intact]["state"] == "queued" and list(svc.scheduler.jobs) == [intact]
        assert list((tmp_path / "state" / "incoming").iterdir()) == []
        # A tenant's listing shows the damaged job too, failed.
        assert [j["state"] for j in svc.jobs("vision", all_states=True)].count("failed") == 5
    finally:
        svc.store.close()


def test_a_tenants_file_may_hold_token_digests_instead_of_tokens(tmp_path):
    digest = token_digest("a-long-random-token").hex()
    (tmp_path / "t.yaml").write_text(f"tenants:\n  - {{name: a, token_sha256: {digest}}}\n"
                                     "  - {name: b, token: plain-token-b}\n")
    tenants = load_tenants(tmp_path / "t.yaml")
    assert tenants.authenticate("a-long-random-token").name == "a"
    assert tenants.authenticate("plain-token-b").name == "b"
    assert tenants.authenticate(digest) is None and tenants.authenticate("a-long-random-tokeN") is None
    assert tenants.plain_tokens() == ["b"]
    (tmp_path / "t.yaml").write_text(f"tenants:\n  - {{name: a, token: a-long-random-token, token_sha256: {digest}}}\n")
    with pytest.raises(TenantsError, match="both token and token_sha256"):
        load_tenants(tmp_path / "t.yaml")
    (tmp_path / "t.yaml").write_text(f"tenants:\n  - {{name: a, token_sha256: {digest}}}\n"
                                     "  - {name: b, token: a-long-random-token}\n")
    with pytest.raises(TenantsError, match="same token"):
        load_tenants(tmp_path / "t.yaml")
    (tmp_path / "t.yaml").write_text("tenants:\n  - {name: a, token_sha256: 1234}\n")
    with pytest.raises(TenantsError, match="token_sha256"):
        load_tenants(tmp_path / "t.yaml")


def test_the_service_accepts_a_hashed_token(tmp_path):
    write_setup(tmp_path)
    (tmp_path / "tenants.yaml").write_text(TENANTS.replace(f"token: {VISION}",
                                                           f"token_sha256: {token_digest(VISION).hex()}"))
    svc = Service(tmp_path)
    try:
        assert Client(svc.url, VISION).queue() == []
        with pytest.raises(ServiceError, match="invalid token"):
            Client(svc.url, token_digest(VISION).hex()).queue()
    finally:
        svc.stop()


@pytest.fixture
def queued_job(tmp_path):
    """A service without its scheduling loop (``step`` is called by hand) and one queued job of
    vision's that ends at once: ``(service, job id)``."""
    write_setup(tmp_path)
    svc = JobService(tmp_path / "cluster.yaml", tmp_path / "tenants.yaml", tmp_path / "state", emulate=True,
                     mapper="heft", isolation="none")
    try:
        yield svc, svc.submit("vision", "sleepy.py", SLEEPY, {"SECONDS": "0"})
    finally:
        svc.stop()


@pytest.mark.parametrize("planted", ["link", "fifo", "folder"])
def test_what_a_job_left_at_its_log_s_name_is_never_opened_when_the_job_runs_again(tmp_path, queued_job, planted):
    """A job writes its own folder: one that left ``log.txt`` as a link to a file of the service's
    user (another tenant's result, a shell's start-up file) had the service append its next
    attempt's output there when it ran again (preempted, or after a restart); a FIFO there held the
    scheduling loop in ``open`` for good. The service opens a fresh log instead."""
    svc, job = queued_job
    victim = tmp_path / "victim.txt"
    victim.write_text("the service user's own file\n")
    log_file = svc.store.job_dir(job) / "log.txt"
    if planted == "link":
        log_file.symlink_to(victim)
    elif planted == "fifo":
        os.mkfifo(log_file)
    else:
        (log_file / "inside").mkdir(parents=True)
    launched = threading.Thread(target=svc.step, daemon=True)
    launched.start()
    launched.join(timeout=30)
    assert not launched.is_alive(), "the scheduling step is stuck opening the job's log"
    deadline = time.time() + 60
    while svc.store.get(job)["state"] in ("queued", "running"):
        assert time.time() < deadline, svc.store.get(job)
        time.sleep(0.2)
        svc.step()
    assert svc.store.get(job)["state"] == "done", svc.store.get(job)
    assert victim.read_text() == "the service user's own file\n"
    assert stat.S_ISREG(os.lstat(log_file).st_mode)


def test_a_log_swapped_for_a_link_after_it_was_checked_is_not_followed(tmp_path, queued_job, monkeypatch):
    """A running job may replace its ``log.txt`` at any moment, also between the service's look
    at it and its opening it: the log is served from what one open without following links
    gives, never from a second look-up of its name."""
    svc, job = queued_job
    secret = tmp_path / "secret.txt"
    secret.write_text("another tenant's secret")
    (svc.store.job_dir(job) / "log.txt").symlink_to(secret)
    # The job swaps the link in right after the service found a plain file there.
    monkeypatch.setattr("streammap.tenancy.service._plain_file", lambda path: True)
    assert "secret" not in svc.logs("vision", job)
    with svc.open_log("vision", job) as served:         # what GET /jobs/ID/logs sends
        assert b"secret" not in served.read()


def test_a_client_that_hangs_up_in_the_middle_of_its_body_costs_no_traceback_in_the_log(strict):
    """Hanging up mid-body is what a client may do at any time (or an attacker, a thousand times
    a minute): the request ends quietly, not as the service's internal error with a traceback."""
    head = (b"POST /jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + VISION.encode()
            + b"\r\nContent-Type: application/json\r\n")
    host, port = strict.url.removeprefix("http://").split(":")
    for _ in range(3):
        with socket.create_connection((host, int(port)), timeout=10) as s:
            s.sendall(head + b"Content-Length: 1000\r\n\r\n{\"source_name\": ")
            time.sleep(0.3)
    assert strict.client(VISION).queue() == []                  # still answering
    strict.stop()
    log = strict.proc.stdout.read()
    assert "Traceback" not in log and "failed" not in log, log
