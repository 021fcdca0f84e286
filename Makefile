# `make repro`: set up and run the default pipeline (cpu profile); `make test`: set up and test.
# The virtual environment lives in .venv; torch is installed first, pinned, because an unpinned
# torch pulled in by a dependency brings several GB of CUDA packages.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export DVC_NO_ANALYTICS := 1

.PHONY: setup repro smoke test bench clean-venv

setup: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@

repro: setup
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/dvc repro

smoke: setup
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/dvc exp run -S profile=smoke

test: setup
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/pytest -q

bench: setup
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/python -m benchmarks.run

clean-venv:
	rm -rf $(VENV)
