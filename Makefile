# The two commands of the README: `make demo` (set up everything and run the demo) and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin

.PHONY: setup binaries demo test unit integration e2e bench crd clean devcluster-up devcluster-down

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[test]"
	touch $@

setup: $(BIN)/.installed

# etcd, kube-apiserver and kubectl built from the pinned Go modules in hack/ (cached per version).
binaries: setup
	$(BIN)/sunk-sandbox-operator devcluster build

demo: binaries
	$(BIN)/sunk-sandbox-operator demo

test: binaries
	$(BIN)/python -m pytest -ra

unit: setup
	$(BIN)/python -m pytest -ra tests/unit

integration: binaries
	$(BIN)/python -m pytest -ra tests/integration

e2e: binaries
	$(BIN)/python -m pytest -ra tests/e2e

bench: binaries
	$(BIN)/python -m tests.bench.scope_burst

crd: setup
	$(BIN)/sunk-sandbox-operator crd > crds/sunksandboxbindings.yaml

devcluster-up: binaries
	$(BIN)/sunk-sandbox-operator devcluster up

devcluster-down:
	$(BIN)/sunk-sandbox-operator devcluster down

clean:
	rm -rf $(VENV) .devcluster .pytest_cache .hypothesis
