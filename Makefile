# Two entry points that work on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
SHARED ?= ../shared
DEMO   ?= .demo

.PHONY: demo test venv bench clean

$(BIN)/streammap: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test,cluster]'
	@touch $@

venv: $(BIN)/streammap

# Discover this machine, compile the FM-radio sample for it, show the plan, and run it: on the GPUs
# with CuPy when this machine has them (installing the `gpu` extra if it can), else on the CPU.
demo: venv
	@mkdir -p $(DEMO)
	$(BIN)/streammap discover -o $(DEMO)/cluster.yaml
	$(BIN)/streammap compile samples/fm_radio.py --cluster $(DEMO)/cluster.yaml -D N=65536 -o $(DEMO)/plan.yaml
	$(BIN)/streammap show $(DEMO)/plan.yaml --gantt $(DEMO)/plan.png --limit 12
	@if grep -q 'kind: gpu' $(DEMO)/cluster.yaml && ! $(BIN)/python -c 'import cupy' 2>/dev/null; then \
	  $(BIN)/pip install --quiet -e '.[gpu]' || echo "CuPy could not be installed: the GPU plan runs emulated on the CPU"; fi
	@if ! grep -q 'kind: gpu' $(DEMO)/cluster.yaml || $(BIN)/python -c 'import cupy' 2>/dev/null; then \
	  $(BIN)/streammap run $(DEMO)/plan.yaml -o $(DEMO)/out.npz; \
	else $(BIN)/streammap run $(DEMO)/plan.yaml -o $(DEMO)/out.npz --emulate; fi
	$(BIN)/streammap show $(DEMO)/out.run.json --gantt $(DEMO)/run.png --limit 12
	$(BIN)/python samples/fm_radio.py

# Lint first (ruff, configured in pyproject.toml), so CI fails on it; then the whole suite.
test: venv
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q

# Every measurement behind a target, each printed beside its baseline (history kept out of the way).
bench: venv
	$(BIN)/python benchmarks/runtime_overhead.py
	$(BIN)/python benchmarks/compile_time.py
	$(BIN)/python benchmarks/heft_scaling.py
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

clean:
	rm -rf $(VENV) $(DEMO) build *.egg-info
