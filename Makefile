# `make repro`: set up and run the default pipeline (cpu profile); `make test`: set up and test.
# The virtual environment lives in .venv; torch is installed first, pinned, because an unpinned
# torch pulled in by a dependency brings several GB of CUDA packages.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export DVC_NO_ANALYTICS := 1

.PHONY: setup setup-offline wheelhouse lock repro smoke test bench modular-source paper-slice clean-venv

setup: $(STAMP)

# The rest goes through uv (pinned), which installs the same pinned packages as pip in well under
# half the time; torch stays with pip, which follows the machine's pip configuration (here: a
# local CPU build). --compile-bytecode as pip does: without it, where PYTHONDONTWRITEBYTECODE is
# set, every process would compile its imports again (3 s more per stage and test process).
# Every package but torch comes from requirements.lock, at the versions it pins, so a fresh
# install resolves nothing anew; then this package itself, its pins checked against the lock.
$(STAMP): pyproject.toml requirements.lock
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet torch==2.13.0 uv==0.13.9
	$(BIN)/uv pip install --quiet --compile-bytecode --python $(BIN)/python --no-deps -r requirements.lock
	$(BIN)/uv pip install --quiet --compile-bytecode --python $(BIN)/python --no-deps -e '.[dev,llm]'
	touch $@

# requirements.lock, after a change to pyproject.toml's dependencies: resolved against torch's
# CPU build (TORCH_WHEELS: a folder or page holding torch-2.13.0+cpu, here the machine's copy;
# elsewhere https://download.pytorch.org/whl/cpu/torch/), so the lock holds none of the CUDA
# packages PyPI's torch brings; torch itself is left out and installed first, as above.
TORCH_WHEELS ?= /opt/wheels
lock: $(BIN)/uv
	echo 'torch==2.13.0+cpu' > $(VENV)/torch-cpu.txt
	$(BIN)/uv pip compile pyproject.toml --extra dev --extra llm --python-version 3.11 \
	  --python-platform x86_64-manylinux_2_28 --find-links $(TORCH_WHEELS) \
	  --override $(VENV)/torch-cpu.txt --no-emit-package torch --annotation-style line \
	  --custom-compile-command 'make lock' --quiet -o requirements.lock

# For a machine that reaches no package index and brings its own torch (an air-gapped cluster
# node, a GPU image): `make wheelhouse` here collects every locked package but torch as wheels
# for the node's Python (WHEEL_PYTHON, manylinux x86_64 up to glibc 2.WHEEL_GLIBC; WHEEL_PRESENT:
# the node's `pip list --format=freeze`, whose packages stay out); copy the folder there and run
# `make setup-offline WHEELHOUSE=<folder> PYTHON=<the Python that imports the node's torch>`.
# scripts/wheelhouse.py says how; docs/cluster.md gives the recipe.
WHEELHOUSE ?= wheelhouse
WHEEL_PYTHON ?= 3.12
WHEEL_GLIBC ?= 28
WHEEL_PRESENT ?=
wheelhouse:
	$(PYTHON) scripts/wheelhouse.py build --python $(WHEEL_PYTHON) --glibc $(WHEEL_GLIBC) \
	  --dest $(WHEELHOUSE) $(if $(WHEEL_PRESENT),--present $(WHEEL_PRESENT))

setup-offline:
	$(PYTHON) scripts/wheelhouse.py install --wheelhouse $(WHEELHOUSE) --venv $(VENV)
	touch $(STAMP)

$(BIN)/uv:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet uv==0.13.9

# The stages of `dvc repro`, several at once (arithrepro/repro.py; docs/running.md), then the
# pages published to docs/ and the README's blocks (refused for a smoke profile, or while a
# stage is not up to date).
repro: setup
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/arithrepro repro
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/arithrepro results --publish

# modular's sanity study at every one of the source's values (conf/sanity/source.yaml: 10,001
# steps, seven seeds; about three hours on two cores, docs/modular.md): in a worktree of HEAD
# that shares this workspace's DVC cache, the stages that study's claims read and no other
# (arithrepro/runsets.py, SOURCE_STAGES); the verdicts of the claims it tests go to
# docs/runsets/modular-source.json, which this workspace's results page reads (its `results`
# stage runs again, then the pages are published). This workspace's own stages run first, while
# its tree is clean: the file the target rewrites is tracked, and a run made beside it would name
# a dirty tree (arithrepro/provenance.py). SOURCE_SET: more overrides; with
# SOURCE_SET='-S modular.studies.sanity.seeds=[0,42]' the watched seeds run alone and replace the
# file's watched part, its deciding part kept.
SOURCE_WS := .dvc/tmp/modular-source
SOURCE_SET ?=
SOURCE_STAGES = $(shell $(BIN)/python -c "from arithrepro.runsets import SOURCE_STAGES; print(*SOURCE_STAGES)")
modular-source: setup
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/arithrepro repro
	rm -rf $(SOURCE_WS) && git worktree prune && git worktree add --detach $(SOURCE_WS) HEAD
	cd $(SOURCE_WS) && $(abspath $(BIN))/dvc cache dir --local $(abspath .dvc/cache) \
	  && PATH="$(abspath $(BIN)):$$PATH" $(abspath $(BIN))/arithrepro compose-params -S sanity=source $(SOURCE_SET) \
	  && PATH="$(abspath $(BIN)):$$PATH" $(abspath $(BIN))/arithrepro repro $(SOURCE_STAGES) \
	  && PATH="$(abspath $(BIN)):$$PATH" $(abspath $(BIN))/arithrepro results \
	       --modular-source $(abspath docs/runsets/modular-source.json)
	git worktree remove --force $(SOURCE_WS)
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/arithrepro repro
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/arithrepro results --publish

# On a GPU: the paper profile's modular studies and looped grid (arithrepro paper-slice;
# docs/cluster.md), in a scratch copy sharing this workspace's DVC cache; their verdicts go to
# docs/runsets/paper-slice.json, which every other profile's results page reads.
paper-slice: setup
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/arithrepro paper-slice --yes

# a first try: the smoke profile in a copy of this checkout (.dvc/tmp/smoke), which leaves
# params.yaml, dvc.lock, docs/ and README.md here as they were
smoke: setup
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/arithrepro smoke

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
