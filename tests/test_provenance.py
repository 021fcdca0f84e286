"""Provenance: the block's fields and types, the git state of a checkout (clean, dirty, absent),
the params hash, and the block in records written by the real stages."""

import json
import os
import re
import shutil
import subprocess
from importlib import metadata
from pathlib import Path

import pytest
import torch
import yaml
from click.testing import CliRunner

from arithrepro import config, provenance as prov
from arithrepro.report import tables

SHA1 = re.compile(r"[0-9a-f]{40}")
SHA256 = re.compile(r"[0-9a-f]{64}")
needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


@pytest.fixture(autouse=True)
def fresh_git_state():
    # git_state is memoized per directory; the tests below change their repositories.
    prov.git_state.cache_clear()
    yield
    prov.git_state.cache_clear()


def _block(**kwargs) -> dict:
    return prov.provenance({"lr": 0.01}, device="cpu", precision="fp32", **kwargs)


def test_fields_have_their_types_and_survive_json():
    block = _block()
    assert json.loads(json.dumps(block)) == block
    assert block["commit"] is None or SHA1.fullmatch(block["commit"])
    assert block["dirty"] in (None, True, False)
    assert block["python"].count(".") == 2
    assert block["versions"]["torch"] == metadata.version("torch")
    assert set(prov.LIBRARIES) == set(block["versions"])
    assert block["versions"]["numpy"] == metadata.version("numpy")
    assert all(v is None or isinstance(v, str) for v in block["versions"].values())
    assert isinstance(block["cpu"], (str, type(None))) and isinstance(block["platform"], str)
    assert block["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert (block["device"], block["gpu"], block["cuda"]) == ("cpu", None, None)
    assert block["threads"] == torch.get_num_threads() and block["processes"] == 1
    assert (block["precision"], block["compile"], block["graphs"]) == ("fp32", False, False)
    assert SHA256.fullmatch(block["params_sha256"])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_a_cuda_run_names_its_gpu():
    block = prov.provenance({}, device="cuda", precision="bf16")
    assert block["gpu"] == torch.cuda.get_device_name() and block["cuda"] == torch.version.cuda


def test_the_params_hash_follows_values_not_key_order():
    a = {"arch": {"d_model": 64, "layers": 2}, "loop": {"lr": 0.01, "seed": 0}}
    reordered = {"loop": {"seed": 0, "lr": 0.01}, "arch": {"layers": 2, "d_model": 64}}
    changed = {"arch": {"d_model": 64, "layers": 2}, "loop": {"lr": 0.02, "seed": 0}}
    assert prov.params_hash(a) == prov.params_hash(reordered)
    assert prov.params_hash(a) != prov.params_hash(changed)
    assert prov.provenance(a, device="cpu", precision="fp32")["params_sha256"] == prov.params_hash(a)


def _git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "test", "GIT_AUTHOR_EMAIL": "test@localhost",
           "GIT_COMMITTER_NAME": "test", "GIT_COMMITTER_EMAIL": "test@localhost"}
    return subprocess.run(["git", "-c", "commit.gpgsign=false", *args], cwd=repo, env=env,
                          check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    _git(tmp_path, "init", "-q")
    (tmp_path / "code.py").write_text("x = 1\n")
    (tmp_path / "dvc.lock").write_text("schema: '2.0'\n")
    (tmp_path / "params.yaml").write_text("profile: cpu\n")
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-qm", "first")
    return tmp_path


@needs_git
def test_a_clean_checkout_records_its_commit(repo):
    block = _block(root=repo)
    assert block["commit"] == _git(repo, "rev-parse", "HEAD")
    assert block["dirty"] is False


@needs_git
def test_a_modified_file_makes_the_tree_dirty(repo):
    (repo / "code.py").write_text("x = 2\n")
    assert _block(root=repo)["dirty"] is True


@needs_git
def test_the_pipelines_own_files_do_not_make_it_dirty(repo):
    # dvc.lock and .gitignore files are rewritten by `dvc repro` itself; outputs are untracked;
    # params.yaml by `dvc exp run -S` (the params a run read are hashed beside)
    (repo / "dvc.lock").write_text("schema: '2.0'\nstages: {}\n")
    (repo / "params.yaml").write_text("profile: smoke\n")
    (repo / "metrics.json").write_text("{}\n")
    assert _block(root=repo)["dirty"] is False


def test_outside_a_repository_the_git_fields_are_null(tmp_path):
    block = _block(root=tmp_path)
    assert (block["commit"], block["dirty"]) == (None, None)
    assert SHA256.fullmatch(block["params_sha256"])  # the rest is still there
    assert _block(root=tmp_path / "absent")["commit"] is None


@needs_git
def test_a_directory_inside_another_repository_is_not_a_checkout(repo):
    # an installed package under a checkout's .venv must not take the checkout's commit
    (repo / "site-packages").mkdir()
    assert _block(root=repo / "site-packages")["commit"] is None


def test_without_git_the_git_fields_are_null(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert (_block(root=tmp_path)["commit"], _block(root=tmp_path)["dirty"]) == (None, None)


# --- records written by the stages -----------------------------------------------------------

def _invoke(command, args: list[str]) -> None:
    result = CliRunner().invoke(command, args)
    assert result.exit_code == 0, result.output


@pytest.fixture
def smoke(tmp_path: Path, monkeypatch) -> Path:
    """A workspace with the smoke profile's params.yaml, as the current directory."""
    params = config.compose(["profile=smoke"], Path(__file__).resolve().parents[1] / "conf")
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params, allow_unicode=True))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _check_block(block: dict, device: str = "cpu") -> None:
    assert block["device"] == device and block["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert block["threads"] == torch.get_num_threads() and SHA256.fullmatch(block["params_sha256"])
    assert block["versions"]["torch"] == metadata.version("torch")


def test_train_and_evaluate_records_carry_both_provenances(smoke):
    from arithrepro.stages.evaluate import evaluate
    from arithrepro.stages.generate_datasets import generate_datasets
    from arithrepro.stages.train import train

    cell = ["--task", "looped", "standard-notebook-0"]
    _invoke(generate_datasets, ["--task", "looped"])
    _invoke(train, ["--task", "looped", "standard-notebook-0"])
    trained = json.loads((smoke / "runs/looped/standard-notebook-0/train.json").read_text())
    assert list(trained["provenance"]) == ["train"]
    _check_block(trained["provenance"]["train"])
    assert trained["provenance"]["train"]["precision"] == "fp32"

    _invoke(evaluate, cell)
    record = json.loads((smoke / "metrics/looped/runs/standard-notebook-0.json").read_text())
    assert record["provenance"]["train"] == trained["provenance"]["train"]
    scored = record["provenance"]["evaluate"]
    _check_block(scored)
    assert scored["params_sha256"] != trained["provenance"]["train"]["params_sha256"]

    # the summary keeps a few scalar columns of the training's block, the metrics none of it
    df = tables.collect_runs(smoke / "metrics", ["looped"])
    assert list(df.columns[-len(tables.PROVENANCE):]) == tables.PROVENANCE
    assert df["commit"].iloc[0] == trained["provenance"]["train"]["commit"]
    assert df["machine"].iloc[0] == trained["provenance"]["train"]["cpu"]
    summary = tables.summary_json(df)["looped"]["standard-notebook-0"]
    assert not set(summary) & {"provenance", *tables.PROVENANCE}


def test_study_and_charlm_runs_record_their_training(smoke):
    from arithrepro.stages.charlm_corpus import charlm_corpus
    from arithrepro.stages.train import train

    for name in ("lstm-std-sanity-0", "gpt-sin-sanity-0"):
        _invoke(train, ["--task", "modular", name])
    records = sorted((smoke / "metrics/modular/runs/sanity").glob("*.json"))
    assert len(records) == 2
    blocks = [json.loads(p.read_text())["provenance"]["train"] for p in records]
    for block in blocks:
        _check_block(block)
    assert blocks[0]["params_sha256"] != blocks[1]["params_sha256"]  # each run's own params

    _invoke(charlm_corpus, [])
    _invoke(train, ["--task", "charlm", "rnn-s16-0"])
    record = json.loads((smoke / "metrics/charlm/runs/rnn-s16-0.json").read_text())
    _check_block(record["provenance"]["train"])
    trained = json.loads((smoke / "runs/charlm/rnn-s16-0/train.json").read_text())
    assert trained["provenance"] == record["provenance"]

    # the studies' tables and the summary take records with the block
    tables.write_all(smoke / "metrics", ["modular", "charlm"])
    assert "commit" not in (smoke / "metrics/modular.md").read_text()
    assert "commit" in (smoke / "metrics/summary.csv").read_text().splitlines()[0]
