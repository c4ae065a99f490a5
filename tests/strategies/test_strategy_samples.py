"""The parallelism samples (a stream program, a data-parallel batch program, a model-parallel MLP)
run directly in plain Python and through StreamMAP, locally and emulated on ``hetero-2x4``, with
the same results. Sizes are shrunk with params to keep the suite fast."""

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
    ("fm_stream.py", "fm_stream", {"FRAMES": 3, "FRAME": 1024, "BANDS": 3}),
    ("mandelbrot.py", "mandelbrot", {"ROWS": 48, "COLS": 32, "ITER": 16}),
    ("model_parallel_mlp.py", "mlp", {"BATCHES": 2, "ROWS": 8, "WIDTH": 64, "LAYERS": 3}),
]
IDS = [c[0] for c in CASES]


def direct(sample: str, entry: str, params: dict) -> dict:
    """Import the sample as plain Python with the params set; its outputs named as in the .npz."""
    module = load_file(SAMPLES / sample, f"plain_{Path(sample).stem}")
    for name, value in params.items():
        setattr(module, name, value)
    fn = getattr(module, entry)
    if "FRAMES" in params:                          # a pipeline: its items, in order
        return {f"result_{i}": fn(i) for i in range(params["FRAMES"])}
    value = fn()
    return dict(value) if isinstance(value, dict) else {"result": value}


def same(got, expected):
    assert set(got) == set(expected)
    for key, value in expected.items():
        np.testing.assert_array_equal(np.asarray(got[key]), value, err_msg=key)


@pytest.mark.parametrize("sample,entry,params", CASES, ids=IDS)
def test_sample_runs_directly_as_a_script(sample, entry, params):
    proc = subprocess.run([sys.executable, str(SAMPLES / sample)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(Path(sample).stem)


@pytest.mark.parametrize("sample,entry,params", CASES, ids=IDS)
def test_sample_through_the_api_locally_agrees_with_plain_python(sample, entry, params):
    plan = streammap.compile(SAMPLES / sample, cluster="local", params=params, history=False)
    same(streammap.run(plan, emulate=True, telemetry=False), direct(sample, entry, params))


@pytest.mark.parametrize("sample,entry,params", CASES, ids=IDS)
def test_sample_through_the_cli_on_the_emulated_8_gpu_cluster_agrees(sample, entry, params, tmp_path, hetero_cluster):
    plan = tmp_path / "plan.yaml"
    defines = [a for k, v in params.items() for a in ("-D", f"{k}={v}")]
    assert main(["compile", str(SAMPLES / sample), "--cluster", str(hetero_cluster), *defines, "-o", str(plan)]) == 0
    assert streammap.read_plan(plan).strategy is not None
    assert main(["run", str(plan), "--emulate", "-o", str(tmp_path / "out.npz"), "--no-progress"]) == 0
    same(dict(np.load(tmp_path / "out.npz")), direct(sample, entry, params))
