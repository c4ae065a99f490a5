"""Load on the job service: a flood of submissions, and idle connections during a freezing compile.

Starts ``streammap serve`` on 127.0.0.1 (a free port, a temporary state folder, emulated GPUs),
then measures the targets of the service's hardening:

1. **100 concurrent submissions**: each answered, accepted (201) or refused with a reason (503
   busy, 400), none reset or left without an answer; the time until the last answer.
2. **1,000 idle connections** open (they send nothing) while a program that freezes the compiler
   is being checked: the latency of a normal request (``GET /jobs``), which should be under 1 s.
   Then how many of the idle connections the service closed once their head deadline passed.

All traffic goes to 127.0.0.1; every loop is bounded. Usage::

    nice -n 10 python benchmarks/service_load.py [--submits 100] [--idle 1000]
"""

from __future__ import annotations

import argparse
import json
import resource
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))                     # the test package's service fixtures

from tests.tenancy.test_job_service import SLEEPY, VISION, write_setup  # noqa: E402
from tests.tenancy.test_service_hardening import FREEZE, post, status_of  # noqa: E402


def start(folder: Path) -> tuple[subprocess.Popen, str]:
    state = folder / "state"
    proc = subprocess.Popen([sys.executable, "-m", "streammap.cli", "serve", "--cluster", str(folder / "cluster.yaml"),
                             "--tenants", str(folder / "tenants.yaml"), "--state", str(state), "--port", "0",
                             "--emulate", "--mapper", "heft", "--check-timeout", "5", "--header-timeout", "10"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while not (state / "server.json").exists():
        if proc.poll() is not None or time.time() > deadline:
            raise SystemExit("the service did not start")
        time.sleep(0.1)
    return proc, json.loads((state / "server.json").read_text())["url"]


def exchange(addr, raw: bytes, timeout: float = 120) -> bytes:
    with socket.create_connection(addr, timeout=timeout) as s:
        s.sendall(raw)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
        return out


def flood(addr, n: int) -> dict:
    answers: list = [None] * n

    def one(i):
        body = json.dumps({"source_name": "sleepy.py", "source_text": SLEEPY,
                           "params": {"SECONDS": "0.01", "VALUE": str(i % 10)}}).encode()
        try:
            answers[i] = status_of(exchange(addr, post("/jobs", body, extra=b"Connection: close\r\n")))
        except (OSError, IndexError, ValueError) as exc:
            answers[i] = type(exc).__name__
    t0 = time.perf_counter()
    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    counts: dict = {}
    for a in answers:
        counts[a] = counts.get(a, 0) + 1
    return {"answers": counts, "seconds": time.perf_counter() - t0}


def idle_and_freeze(addr, n: int, tries: int = 5) -> dict:
    idle = []
    for _ in range(n):
        s = socket.create_connection(addr, timeout=30)
        idle.append(s)
    body = json.dumps({"source_name": "freeze.py", "source_text": FREEZE}).encode()
    frozen = {}
    t = threading.Thread(target=lambda: frozen.setdefault("answer", exchange(addr, post("/jobs", body, extra=b"Connection: close\r\n"))))
    t.start()
    time.sleep(0.5)                              # the freeze is being checked now
    latencies = []
    for _ in range(tries):
        t0 = time.perf_counter()
        answer = exchange(addr, f"GET /jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {VISION}\r\n"
                                "Connection: close\r\n\r\n".encode(), timeout=30)
        latencies.append(time.perf_counter() - t0)
        assert status_of(answer) == 200, answer[:200]
    still_checking = t.is_alive()
    t.join()
    # The head deadline (10 s) closes the idle connections: count those the service ended.
    closed = 0
    deadline = time.time() + 20
    for s in idle:
        s.settimeout(max(0.1, deadline - time.time()))
        try:
            closed += s.recv(1) == b""
        except OSError:
            pass
        s.close()
    freeze_answer = frozen.get("answer", b"")
    return {"idle": n, "latency_max": max(latencies), "latency_median": sorted(latencies)[len(latencies) // 2],
            "answered_while_checking": still_checking, "freeze_status": status_of(freeze_answer) if freeze_answer else None,
            "freeze_error": json.loads(freeze_answer.partition(b"\r\n\r\n")[2] or b"{}").get("error"),
            "idle_closed_by_service": closed}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--submits", type=int, default=100)
    ap.add_argument("--idle", type=int, default=1000)
    args = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, args.idle + 512)), hard))
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        write_setup(folder)
        proc, url = start(folder)
        host, port = url.removeprefix("http://").split(":")
        addr = (host, int(port))
        try:
            f = flood(addr, args.submits)
            ok = sum(v for k, v in f["answers"].items() if isinstance(k, int))
            print(f"{args.submits} concurrent submits: answers {f['answers']} in {f['seconds']:.1f} s; "
                  f"answered {ok}/{args.submits}, reset or unanswered {args.submits - ok}")
            r = idle_and_freeze(addr, args.idle)
            print(f"{r['idle']} idle connections + a freezing program being checked: GET /jobs answered in "
                  f"{r['latency_median'] * 1000:.0f} ms median, {r['latency_max'] * 1000:.0f} ms max "
                  f"(target < 1000 ms; still checking then: {r['answered_while_checking']})")
            print(f"the freezing program: {r['freeze_status']} {r['freeze_error']!r}")
            print(f"idle connections closed by the service after its 10 s head deadline: "
                  f"{r['idle_closed_by_service']}/{r['idle']}")
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
