"""Every sample runs directly in plain Python and through StreamMAP, and both give the same result.

Through StreamMAP means compiled for a cluster and run by the local executor: on this machine's
devices (``--cluster local``), and emulated on the 8-GPU ``hetero-2x4`` cluster, so that the
cross-device paths are exercised without GPUs. Sizes are shrunk with params to keep the suite fast.
"""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import streammap
from streammap.cli import main
from tests.helpers.modules import load_file
from tests.helpers.paths import SAMPLES

# (sample, entry, small params)
CASES = [
    ("fm_radio.py", "fm_radio", {"N": 4096, "BANDS": 6}),
    ("tiled_cholesky.py", "cholesky", {"T": 4, "B": 32}),
    ("mlp_batches.py", "mlp", {"BATCHES": 5, "ROWS": 32, "WIDTH": 16, "DEPTH": 2}),
    ("small_kernels.py", "sweep", {"JOBS": 8, "CELLS": 256, "STEPS": 10}),
]


def direct(sample: str, entry: str, params: dict):
    """Import the sample as plain Python, set the params as module globals, call its graph function."""
    module = load_file(SAMPLES / sample, f"sample_{Path(sample).stem}")
    for name, value in params.items():
        setattr(module, name, value)
    return getattr(module, entry)()


@pytest.mark.parametrize("sample,entry,params", CASES, ids=[c[0] for c in CASES])
def test_sample_runs_directly_as_a_script(sample, entry, params):
    proc = subprocess.run([sys.executable, str(SAMPLES / sample)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(Path(sample).stem)


@pytest.mark.parametrize("sample,entry,params", CASES, ids=[c[0] for c in CASES])
def test_sample_through_streammap_api_agrees_with_plain_python(sample, entry, params, tmp_path):
    expected = direct(sample, entry, params)
    plan = streammap.compile(SAMPLES / sample, cluster="local", params=params)
    outputs = streammap.run(plan, emulate=True, outputs=tmp_path / "out.npz")
    np.testing.assert_allclose(outputs["result"], expected, rtol=1e-9, atol=1e-12)
    stored = np.load(tmp_path / "out.npz")
    np.testing.assert_array_equal(stored["result"], outputs["result"])
    assert (tmp_path / "out.run.json").exists()


@pytest.mark.parametrize("sample,entry,params", CASES, ids=[c[0] for c in CASES])
def test_sample_through_cli_on_an_emulated_8_gpu_cluster_agrees(sample, entry, params, tmp_path, hetero_cluster):
    expected = direct(sample, entry, params)
    plan = tmp_path / "plan.yaml"
    defines = [a for k, v in params.items() for a in ("-D", f"{k}={v}")]
    assert main(["compile", str(SAMPLES / sample), "--cluster", str(hetero_cluster), *defines, "-o", str(plan)]) == 0
    loaded = streammap.read_plan(plan)
    assert len({t.device for t in loaded.tasks}) > 1, "a fan-out sample should use several GPUs"
    assert main(["run", str(plan), "--emulate", "-o", str(tmp_path / "out.npz"), "--no-progress"]) == 0
    got = np.load(tmp_path / "out.npz")["result"]
    np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-12)
