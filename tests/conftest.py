"""Fixtures shared by the test modules: the project's params and a small expr dataset.
(Shared plain functions live in tests/helpers.py.)"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from arithrepro import config

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def _loaded_params() -> dict:
    # loaded and validated once; tests get copies, which they may change
    return config.load(ROOT / "params.yaml")


@pytest.fixture
def params(_loaded_params) -> dict:
    """params.yaml as loaded and validated, a copy the test may change."""
    return copy.deepcopy(_loaded_params)


@pytest.fixture(scope="session")
def _smoke_params() -> dict:
    return config.compose(["profile=smoke"], ROOT / "conf")


@pytest.fixture
def smoke_params(_smoke_params) -> dict:
    """The smoke profile's params, as `dvc exp run -S profile=smoke` composes them; a copy the
    test may change."""
    return copy.deepcopy(_smoke_params)


# A few dozen problems, enough for a training run of a few steps and an evaluation.
TINY_EXPR = {"n_train": 96, "n_valid": 16, "n_test": 16, "n_ood": 16}


@pytest.fixture(scope="session")
def _tiny_expr(tmp_path_factory, _smoke_params):
    params = copy.deepcopy(_smoke_params)
    params["expr"]["data"].update(TINY_EXPR)
    params["expr"]["data"]["workers"] = 1  # generated in this process: no worker processes
    data_dir = tmp_path_factory.mktemp("expr-data")
    from arithrepro.tasks.registry import TASKS

    TASKS["expr"].generate(params, data_dir)
    return params, data_dir


@pytest.fixture
def tiny_expr(_tiny_expr):
    """(params, data dir): the smoke profile with TINY_EXPR problem counts (a copy the test may
    change), and its expr dataset, written once for the session (read it, do not write)."""
    params, data_dir = _tiny_expr
    return copy.deepcopy(params), data_dir


@pytest.fixture(scope="module")
def clone(tmp_path_factory) -> Path:
    """A fresh git repository holding this checkout's files, one per test module (the pipeline
    tests run DVC in it)."""
    from tests.workspace import make_clone

    return make_clone(tmp_path_factory.mktemp("clone"))


@pytest.fixture(scope="session")
def smoke_first_run(tmp_path_factory, worker_id):
    """The smoke profile's whole pipeline, run once for the session: under pytest-xdist once
    for all workers, in their shared temporary folder (tests/workspace.py)."""
    from tests.workspace import first_smoke_run

    base = tmp_path_factory.getbasetemp()
    return first_smoke_run(base if worker_id == "master" else base.parent)


# Under `make test` (two xdist workers, `--dist loadfile --no-loadscope-reorder`) each worker is
# handed files in this order, two to start with: the pipeline file that makes the shared smoke run
# first, the queue recipe's own clone on the other worker meanwhile, then a short file for the
# first worker and the remote scenarios (which wait for the smoke run) for the second; then the
# fault tests (the kills compare with the smoke run; the rest make clones of their own); then the
# files that take half a minute or more (`pytest --durations`), longest first, so that the suite
# ends on short files and neither worker waits long for the other. The rest follows in
# collection order.
FIRST = ["test_pipeline.py", "test_queue.py", "test_config.py", "test_pipeline_remote.py",
         "test_kill.py", "test_split_grid.py", "test_cluster.py", "test_slurm.py", "test_two_commands.py", "test_bad_input.py",
         "test_device.py", "test_ddp.py", "test_pipeline_extend.py", "test_crosscheck.py", "test_repro.py",
         "test_ensemble.py", "test_charlm_task.py"]


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(FIRST)))   # stable: the rest keep their order


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A smoke-profile workspace with looped's data and one trained cell (standard-notebook-0)."""
    from arithrepro.checkout import working_dir
    from tests.helpers import TRAIN_LOOPED, ok, write_params

    ws = tmp_path_factory.mktemp("trained")
    write_params(ws)
    with working_dir(ws):
        ok("generate-datasets", "--task", "looped")
        ok("train", *TRAIN_LOOPED)
    return ws


@pytest.fixture
def ws(trained, tmp_path, monkeypatch):
    """A copy of `trained` for one test, made the working directory."""
    from tests.helpers import work_in_copy

    return work_in_copy(trained, tmp_path, monkeypatch)
