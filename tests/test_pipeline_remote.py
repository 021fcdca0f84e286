"""Train on one machine, analyse on another (docs/remote.md): the smoke pipeline's first run
(shared with tests/test_pipeline.py, made once per session) is the "GPU machine"; a copy of it
pushes to a bare git repository and a local-directory DVC remote, and clones pull from them."""

import json
import shutil
from pathlib import Path

import pytest

from tests.workspace import FirstRun, ran_stages, sh

# Every `dvc exp run` composes params.yaml from conf/config.yaml, so each names the profile.
SMOKE = ["-S", "profile=smoke"]

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


@pytest.fixture(scope="module")
def first_run(smoke_first_run) -> FirstRun:
    return smoke_first_run


@pytest.fixture(scope="module")
def published(first_run, tmp_path_factory) -> Path:
    """The "GPU machine" (a copy of the clone after the first run) commits its results, pushes
    the commit to a bare git repository and the outputs and run cache to a local-directory DVC
    remote, and pushes the first run's experiment. Returns the folder holding origin.git and
    store/."""
    where = tmp_path_factory.mktemp("remote")
    # its own copy: tests/test_pipeline.py runs DVC in the first run's on the other worker, and
    # two DVC processes in one repository wait on each other's lock or fail on it
    gpu = where / "gpu"
    shutil.copytree(first_run.saved / "gpu", gpu, symlinks=True)
    sh(["git", "init", "-q", "--bare", str(where / "origin.git")], where)
    sh(["dvc", "remote", "add", "-d", "store", str(where / "store")], gpu)
    sh(["git", "add", "-A"], gpu)
    sh(["git", "commit", "-qm", "smoke results"], gpu)
    sh(["git", "remote", "add", "origin", str(where / "origin.git")], gpu)
    sh(["git", "push", "-q", "origin", "HEAD:main"], gpu)
    sh(["dvc", "push", "--run-cache"], gpu)
    # an experiment on top of the pushed commit (an experiment carries the repository's config,
    # the remote included, from the commit it was run on)
    sh(["dvc", "exp", "run", "-n", "moved", *SMOKE, "-S", "charlm.sample.temperature=0.5"], gpu)
    sh(["dvc", "exp", "push", "origin", "moved"], gpu)
    return where


def laptop(published: Path, name: str, rev: str = "main") -> Path:
    dest = published / name
    sh(["git", "clone", "-q", "-b", "main", str(published / "origin.git"), str(dest)], published)
    if rev != "main":
        sh(["git", "checkout", "-q", rev], dest)
    return dest


def test_a_pulled_commit_reproduces_without_training(first_run, published):
    """git clone + dvc pull: `dvc repro` runs nothing, and the outputs are the GPU machine's to
    the byte."""
    here = laptop(published, "laptop")
    sh(["dvc", "pull"], here)
    assert "Running stage" not in sh(["dvc", "repro"], here)
    assert sh(["dvc", "status"], here).strip().endswith("Data and pipelines are up to date.")
    gpu = first_run.saved / "gpu"
    for name in ("metrics/headline.json", "metrics/summary.json", "plots/expr/accuracy_vs_params.png"):
        assert (here / name).read_bytes() == (gpu / name).read_bytes(), name


def test_arithrepro_repro_pull_restores_every_stage_and_trains_none(first_run, published):
    """`arithrepro repro --pull` on a clone of the pushed commit: every stage's outputs come
    from the remote in one pull, none runs its command, and the workspace ends as DVC leaves
    it."""
    here = laptop(published, "repro-pull")
    out = sh(["arithrepro", "repro", "--pull", "--jobs", "1"], here)
    assert "Running stage" not in out, out[-3000:]
    stages = len(sh(["dvc", "stage", "list", "--name-only"], here).split())
    assert f"pulling the DVC remote's outputs of {stages} stages" in out, out[-3000:]
    assert sh(["dvc", "status"], here).strip().endswith("Data and pipelines are up to date.")
    gpu = first_run.saved / "gpu"
    for name in ("metrics/summary.json", "plots/expr/accuracy_vs_params.png"):
        assert (here / name).read_bytes() == (gpu / name).read_bytes(), name


def test_the_run_cache_restores_cells_without_a_lock_file(published):
    """A commit without dvc.lock (as an experiment queue's cells leave the workspace): the run
    cache pulled from the remote restores every stage, none is trained again."""
    here = laptop(published, "no-lock", rev="main~1")
    assert not (here / "dvc.lock").exists()
    # that commit predates the remote's entry in .dvc/config: name it for this clone only
    sh(["dvc", "remote", "add", "--local", "-d", "store", str(published / "store")], here)
    sh(["arithrepro", "compose-params", "-S", "profile=smoke"], here)
    out = sh(["dvc", "repro", "--pull"], here)    # fetches the run cache, then each stage's outputs
    # but the headline numbers: git's output (DVC does not cache it), so it is written again,
    # from the restored records, in seconds; the results pages are a cached output like any other
    assert ran_stages(out) == {"aggregate-tables"}, ran_stages(out)
    assert out.count("is cached - skipping run") == len(sh(["dvc", "stage", "list", "--name-only"],
                                                              here).split()) - 1


def test_a_pulled_clone_changes_settings_and_trains_only_the_cells_they_reach(published):
    """Another machine's results pulled, one change of params sets four kinds of setting at once,
    and each reaches exactly its own cells: a modular sweep's value replaced trains the new value's run
    (the dropped one leaves the results); a charlm architecture changed retrains its run; a GPT
    learning rate retrains the GPT cells of every task, the benchmark's included; an
    evaluation-only key re-evaluates abacus's cells without training them. Every other run stays
    as pulled, each run a cached DVC cell, and only the reports they feed follow. Run by README
    command 1's `arithrepro repro` (two stages at once), which runs what `dvc repro` would: the
    stages DVC finds changed (`dvc exp run -S` composes and runs the same plan: test_pipeline.py's
    experiment and the published fixture's)."""
    here = laptop(published, "extend")
    sh(["dvc", "pull"], here)
    sh(["arithrepro", "compose-params", *SMOKE, "-S", "modular.studies.data.sweep.r_train=[0.3,0.5]",
        "-S", "charlm.architectures.gru.d_model=24", "-S", "models.gpt.lr=0.02",
        "-S", "abacus.eval.recurrences=[1,2,3]"], here)
    out = sh(["arithrepro", "repro", "--jobs", "2"], here)
    ran = ran_stages(out)
    gpt = {"expr@gpt-small-0", "expr@gpt-large-0", "bench-abacus-gpt@0", "bench-looped-gpt@0"}
    trained = {s for s in ran if s.startswith("train-")}
    assert trained == {"train-modular-data@lstm-std-0.5-0", "train-charlm@gru-s16-0",
                       *(f"train-{c}" for c in gpt)}, trained
    # the benchmark's cells on the abacus task read its evaluation block too
    evaluated = {s for s in ran if s.startswith("evaluate-")}
    assert evaluated == {*(f"evaluate-{c}" for c in gpt), "evaluate-abacus@abacus-l2r2-0",
                         *(f"evaluate-bench-abacus-{m}@0" for m in ("lstm", "retran"))}, evaluated
    assert not any(s.startswith(("generate-", "charlm-corpus")) for s in ran), ran
    assert {"aggregate-tables", "results", *(f"render-figures-{t}" for t in
            ("expr", "abacus", "modular", "charlm", "bench"))} <= ran, ran
    assert "render-figures-looped" not in ran, ran
    summary = json.loads((here / "metrics" / "summary.json").read_text())
    assert "lstm-std-data.r0.5-0" in summary["modular"]
    assert "lstm-std-data.r0.7-0" not in summary["modular"]
    assert "acc_r3" in summary["abacus"]["abacus-l2r2-0"]
    assert "Running stage" not in sh(["dvc", "repro"], here)


def test_an_experiment_moves_with_exp_push_and_pull(first_run, published):
    """An experiment run on the GPU machine (as a queue's are) reaches the laptop through
    `dvc exp push`/`pull`, outputs included: applied, nothing runs."""
    here = laptop(published, "exp")
    assert sh(["dvc", "exp", "list", "--name-only", "origin"], here).split() == ["moved"]
    sh(["dvc", "exp", "pull", "origin", "moved"], here)
    sh(["dvc", "exp", "apply", "moved"], here)
    assert "Running stage" not in sh(["dvc", "repro"], here)
    samples = (here / "metrics/charlm/samples.md").read_text()
    assert samples == (published / "gpu" / "metrics/charlm/samples.md").read_text()
    assert samples != first_run.read("metrics/charlm/samples.md")  # the experiment's, not main's
