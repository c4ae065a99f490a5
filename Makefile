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
	$(BIN)/pip install --quiet -e '.[test]'
	@touch $@

venv: $(BIN)/streammap

# Discover this machine, compile the FM-radio sample for it, run the plan, and show it.
demo: venv
	@mkdir -p $(DEMO)
	$(BIN)/streammap discover -o $(DEMO)/cluster.yaml
	$(BIN)/streammap compile samples/fm_radio.py --cluster $(DEMO)/cluster.yaml -D N=65536 -o $(DEMO)/plan.yaml
	$(BIN)/streammap show $(DEMO)/plan.yaml --gantt $(DEMO)/plan.png
	$(BIN)/streammap run $(DEMO)/plan.yaml -o $(DEMO)/out.npz
	$(BIN)/python samples/fm_radio.py

test: venv
	$(BIN)/python -m pytest -q

bench: venv
	$(BIN)/python benchmarks/runtime_overhead.py
	$(BIN)/python benchmarks/compile_time.py
	$(BIN)/python benchmarks/heft_scaling.py

clean:
	rm -rf $(VENV) $(DEMO) build *.egg-info
