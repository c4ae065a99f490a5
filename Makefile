# Two entry points that work on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
SHARED ?= ../shared
DEMO   ?= .demo
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
# The tag `streammap export k8s` defaults its --image to (streammap.cli.export.DEFAULT_IMAGE).
IMAGE  ?= streammap:$(VERSION)
CUDA_IMAGE ?= nvidia/cuda:12.8.1-runtime-ubuntu24.04
GPU_EXTRA  ?= gpu-cuda12
# The CuPy extra this machine's NVIDIA driver runs (gpu-cuda13 from CUDA 13 on, else gpu-cuda12).
CUPY_EXTRA = $$($(BIN)/python -c 'from streammap.cluster.doctor import cupy_extra; print(cupy_extra())')

# The offline GPU check: wheels downloaded here (make gpu-wheels), carried to the GPU machine.
GPU_WHEELS ?= .gpu-wheels
GPU_VENV   ?= .gpu-venv
GPU_PYTHON_VERSION ?= 3.12

.PHONY: demo test venv bench clean image gpu-check gpu-wheels

$(BIN)/streammap: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test,cluster]'
	@touch $@

venv: $(BIN)/streammap

# Discover this machine (measuring each device once: calibrated first estimates), compile the
# FM-radio sample for it, show the plan, and run it: on the GPUs with CuPy when this machine has them
# (installing the CuPy its driver runs, unless a CuPy of either flavour is already there), else on the CPU.
demo: venv
	@mkdir -p $(DEMO)
	@if grep -q 'kind: gpu' $(DEMO)/cluster.yaml 2>/dev/null || $(BIN)/python -c 'import pynvml; pynvml.nvmlInit(); assert pynvml.nvmlDeviceGetCount() > 0' 2>/dev/null; then \
	  if ! $(BIN)/python -c 'import cupy' 2>/dev/null; then \
	    echo "installing streammap[$(CUPY_EXTRA)] for this driver"; \
	    $(BIN)/pip install --quiet -e ".[$(CUPY_EXTRA)]" || echo "CuPy could not be installed: the GPU plan runs emulated on the CPU"; fi; fi
	$(BIN)/streammap discover -o $(DEMO)/cluster.yaml
	$(BIN)/streammap compile samples/fm_radio.py --cluster $(DEMO)/cluster.yaml -D N=65536 -o $(DEMO)/plan.yaml
	$(BIN)/streammap show $(DEMO)/plan.yaml --gantt $(DEMO)/plan.png --limit 12
	@if ! grep -q 'kind: gpu' $(DEMO)/cluster.yaml || $(BIN)/python -c 'import cupy' 2>/dev/null; then \
	  $(BIN)/streammap run $(DEMO)/plan.yaml -o $(DEMO)/out.npz; \
	else $(BIN)/streammap run $(DEMO)/plan.yaml -o $(DEMO)/out.npz --emulate; fi
	$(BIN)/streammap show $(DEMO)/out.run.json --gantt $(DEMO)/run.png --limit 12
	$(BIN)/python samples/fm_radio.py

# Lint first (ruff, configured in pyproject.toml), so CI fails on it; then the whole suite, on
# TEST_WORKERS pytest-xdist workers (CI has 2 cores); the tests that use the session's Ray cluster
# run in one of them, which alone starts it (tests/helpers/ray_group.py).
TEST_WORKERS ?= 2
test: venv
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS)

# Every measurement behind a target, each printed beside its baseline (history kept out of the way).
bench: venv
	$(BIN)/python benchmarks/runtime_overhead.py
	$(BIN)/python benchmarks/compile_time.py
	$(BIN)/python benchmarks/frontend_scale.py
	$(BIN)/python benchmarks/heft_scaling.py
	$(BIN)/python benchmarks/scale.py
	$(BIN)/python benchmarks/mapping.py --scale --out bench-out
	STREAMMAP_HISTORY=$$(mktemp -d) $(BIN)/python benchmarks/estimate_accuracy.py
	STREAMMAP_HISTORY=$$(mktemp -d) $(BIN)/python benchmarks/monitoring_overhead.py
	$(BIN)/python benchmarks/ray_overhead.py
	$(BIN)/python benchmarks/doctor_time.py
	$(BIN)/python benchmarks/render_time.py
	STREAMMAP_HISTORY=$$(mktemp -d) $(BIN)/python benchmarks/sharing.py
	$(BIN)/python benchmarks/tenancy_policies.py --out bench-out
	$(BIN)/python benchmarks/pipeline_period.py
	$(BIN)/python benchmarks/fission_speedup.py
	$(BIN)/python benchmarks/optimal_gap.py --quick --out bench-out
	$(BIN)/python benchmarks/fuzz.py --count 10000
	$(BIN)/python benchmarks/service_load.py

# The container image `streammap export k8s` defaults to (needs a Docker engine; see the Dockerfile).
image:
	@command -v docker >/dev/null 2>&1 || { echo "make image: docker is not installed; install Docker Engine (https://docs.docker.com/engine/install/), or build this Dockerfile with another builder: podman build -t $(IMAGE) ." >&2; exit 2; }
	@docker info >/dev/null 2>&1 || { echo "make image: docker cannot reach a Docker engine (is the daemon running, and may this user use it? docker info says why)" >&2; exit 2; }
	docker build -t $(IMAGE) --build-arg CUDA_IMAGE=$(CUDA_IMAGE) --build-arg GPU_EXTRA=$(GPU_EXTRA) .
	@echo "built $(IMAGE); push it where the cluster pulls from: docker tag $(IMAGE) REGISTRY/$(IMAGE) && docker push REGISTRY/$(IMAGE)"

# On a GPU machine, offline, under 8 minutes: the GPU tests, then every sample through StreamMAP against
# its kernels called directly with CuPy (and GPU-to-GPU hand-offs with two GPUs); figures in gpu-check-out/.
# With $(GPU_WHEELS)/ present (make gpu-wheels, carried over) nothing is fetched: a venv over $(PYTHON)'s own
# packages (its CuPy) gets the wheels and the project (benchmarks/gpu_env.py). Without it, the project's
# .venv, plus the CuPy this driver runs when the machine has an NVIDIA GPU (this needs network).
# Without CuPy or a GPU it says so, measures nothing and exits 0.
gpu-check:
	@if [ -d $(GPU_WHEELS) ]; then \
	  echo "gpu-check: offline, with the wheels of $(GPU_WHEELS)/ over $(PYTHON)'s packages in $(GPU_VENV)/"; \
	  $(PYTHON) benchmarks/gpu_env.py install --wheels $(GPU_WHEELS) --venv $(GPU_VENV) \
	  && $(GPU_VENV)/bin/python benchmarks/gpu_check.py --out gpu-check-out; \
	else \
	  $(MAKE) --no-print-directory -s venv \
	  && if $(BIN)/python -c 'import pynvml; pynvml.nvmlInit(); assert pynvml.nvmlDeviceGetCount() > 0' 2>/dev/null \
	       && ! $(BIN)/python -c 'import cupy' 2>/dev/null; then \
	    echo "installing streammap[$(CUPY_EXTRA)] for this driver"; $(BIN)/pip install --quiet -e ".[$(CUPY_EXTRA)]" \
	      || echo "CuPy could not be installed: the check says so and measures nothing"; fi \
	  && $(BIN)/python benchmarks/gpu_check.py --out gpu-check-out; \
	fi

# Here, with network: the wheels a GPU image lacks (benchmarks/gpu_env.py WHEELS), pinned to this .venv's
# versions, for CPython $(GPU_PYTHON_VERSION) on manylinux x86_64, into $(GPU_WHEELS)/ (git-ignored; carry it).
gpu-wheels: venv
	$(BIN)/python benchmarks/gpu_env.py download --to $(GPU_WHEELS) --python-version $(GPU_PYTHON_VERSION)

clean:
	rm -rf $(VENV) $(DEMO) build *.egg-info gpu-check-out $(GPU_VENV)
