"""Time of `streammap doctor` on this machine (target: under 30 s), and of `streammap export k8s`
over every shared benchmark plan (target: every manifest valid).

The baseline beside each figure, measured in the same run: `streammap --version` (starting Python
and importing StreamMAP, the floor of any command) for doctor, and building the objects without
validating them for export (so the validation's own cost shows).

    .venv/bin/python benchmarks/doctor_time.py
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import streammap
from streammap.errors import StreamMapError
from streammap.k8s import ExportOptions, build_manifests, validate_objects

SHARED = Path(__file__).resolve().parents[1] / ".." / "shared" / "benchmarks"


def _wall(cmd: list[str], reps: int = 3) -> tuple[float, int]:
    times, rc = [], 0
    for _ in range(reps):
        t0 = time.perf_counter()
        rc = subprocess.run(cmd, capture_output=True, text=True).returncode
        times.append(time.perf_counter() - t0)
    return statistics.median(times), rc


def main() -> int:
    exe = [sys.executable, "-m", "streammap.cli"]
    with tempfile.TemporaryDirectory() as tmp:
        doctor, rc = _wall(exe + ["doctor", "--path", tmp])
    floor, _ = _wall(exe + ["--version"])
    print(f"streammap doctor: {doctor:6.2f} s (exit {rc})   baseline streammap --version: {floor:5.2f} s   "
          f"target < 30 s: {'PASS' if doctor < 30 else 'FAIL'}")

    plans = []
    for g in sorted((SHARED / "workflows").glob("*.json")):
        for c in ("hetero-2x4", "mixed-vendors", "small-memory"):
            try:
                plans.append(streammap.compile(g, cluster=SHARED / "clusters" / f"{c}.yaml", mapper="heft",
                                               history=False))
            except StreamMapError:
                pass
    for g in sorted((SHARED / "cholesky").glob("*.json")):
        plans.append(streammap.compile(g, cluster=SHARED / "clusters" / "cholesky-node.yaml", mapper="heft",
                                       history=False))
    opts = ExportOptions(image="registry.example.org/streammap:0.1", kind="job", gang=True, queue="q")
    t0 = time.perf_counter()
    built = [build_manifests(p, opts) for p in plans]
    build_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    problems = [x for objs in built for x in validate_objects(objs)]
    check_s = time.perf_counter() - t0
    n_obj = sum(len(o) for o in built)
    print(f"export k8s: {len(plans)} shared plans, {n_obj} objects, {len(problems)} problem(s); "
          f"validation {check_s:.2f} s   baseline building them: {build_s:.2f} s   "
          f"target all valid: {'PASS' if not problems else 'FAIL'}")
    return 0 if doctor < 30 and not problems else 1


if __name__ == "__main__":
    sys.exit(main())
