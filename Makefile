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

# The rest goes through uv (pinned), which installs the same pinned packages as pip in well under
# half the time; torch stays with pip, which follows the machine's pip configuration (here: a
# local CPU build). --compile-bytecode as pip does: without it, where PYTHONDONTWRITEBYTECODE is
# set, every process would compile its imports again (3 s more per stage and test process).
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet torch==2.13.0 uv==0.13.9
	$(BIN)/uv pip install --quiet --compile-bytecode --python $(BIN)/python -e '.[dev]'
	touch $@

# The stages of `dvc repro`, several at once (arithrepro/repro.py; docs/profiles.md).
repro: setup
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/arithrepro repro

smoke: setup
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/dvc exp run -S profile=smoke

# Two workers, each file on one of them, the files that run the real pipeline first (the order in
# tests/conftest.py): they run side by side, the rest of the suite after them. One thread per
# torch process, so the few that run at once share the two cores instead of each spinning threads
# on both.
test: setup
	PATH="$(abspath $(BIN)):$$PATH" OMP_NUM_THREADS=1 $(BIN)/pytest -q -n 2 --dist loadfile --no-loadscope-reorder

bench: setup
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/python -m benchmarks.run

clean-venv:
	rm -rf $(VENV)
