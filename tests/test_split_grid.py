"""Several machines, one grid (docs/remote.md, "Split a grid over machines"): two clones each
train a disjoint part of looped's grid (smoke profile) and push to one DVC remote, outputs and
run cache; a third clone pulls and writes the grid's table and figure without training."""

import shutil
from pathlib import Path

import pytest

from tests.workspace import make_clone, ran_stages, sh

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")

PARTS = {"machine-a": "standard-notebook-0", "machine-b": "looped-notebook-0"}


@pytest.fixture(scope="module")
def shared(tmp_path_factory) -> Path:
    """origin.git (the project, smoke params and the remote's entry committed) and store/."""
    where = tmp_path_factory.mktemp("split")
    base = make_clone(where / "base")
    sh(["arithrepro", "compose-params", "-S", "profile=smoke"], base)
    sh(["dvc", "remote", "add", "-d", "store", str(where / "store")], base)
    sh(["git", "add", "-A"], base)
    sh(["git", "commit", "-qm", "smoke params, the shared remote"], base)
    sh(["git", "init", "-q", "--bare", str(where / "origin.git")], where)
    sh(["git", "push", "-q", str(where / "origin.git"), "HEAD:main"], base)
    return where


def machine(shared: Path, name: str) -> Path:
    sh(["git", "clone", "-q", "-b", "main", str(shared / "origin.git"), str(shared / name)],
       shared)
    return shared / name


def test_two_machines_train_halves_of_a_grid_and_a_third_reports_it_without_training(shared):
    for name, cell in PARTS.items():
        here = machine(shared, name)
        out = sh(["dvc", "repro", f"evaluate-looped@{cell}"], here)
        assert {f"train-looped@{cell}", f"evaluate-looped@{cell}"} <= ran_stages(out)
        sh(["dvc", "push", "--run-cache"], here)

    here = machine(shared, "laptop")
    out = sh(["dvc", "repro", "--pull", "render-figures-looped"], here)
    ran = ran_stages(out)
    assert ran == {"render-figures-looped"}, ran      # every cell restored, none trained
    for cell in PARTS.values():
        assert f"Stage 'train-looped@{cell}' is cached - skipping run" in out, out
    table = (here / "metrics/looped.md").read_text()
    assert "| looped   | notebook |" in table and "| standard | notebook |" in table, table
    assert (here / "plots/looped/accuracy_vs_digits.png").stat().st_size > 0
    # the laptop's evaluations are the machines' own
    for name, cell in PARTS.items():
        csv = f"plots/looped/eval/{cell}.csv"
        assert (here / csv).read_text() == (shared / name / csv).read_text()
    assert "Running stage" not in sh(["dvc", "repro", "render-figures-looped"], here)
