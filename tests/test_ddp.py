"""Data-parallel training: 2 gloo processes on the CPU match one process with the same global
batch, in the loop itself and through `torchrun ... arithrepro train`, and their checkpoints
resume in one process."""

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import yaml

from arithrepro import config
from arithrepro.train.config import TrainConfig
from tests.helpers import run

ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, world: int, port: int, tmp: str, name: str, cfg: TrainConfig,
            halt_after: int | None = None) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        torch.set_num_threads(1)
        model, result = run(Path(tmp), name, cfg, halt_after=halt_after, dropout=0.0)
        if rank == 0 and result is not None:
            torch.save({"state": model.state_dict(), "curve": result["train_curve"],
                        "val": result["val_curve"]}, Path(tmp) / "rank0.pt")
    finally:
        dist.destroy_process_group()


def two_processes(tmp: Path, name: str, cfg: TrainConfig, halt_after: int | None = None) -> None:
    """`run` in 2 gloo processes, forked: they start with this process's imports instead of
    importing torch and the project again (5 s of CPU each; torchrun's own processes are
    test_torchrun_train_matches_a_single_process's)."""
    mp.start_processes(_worker, args=(2, _free_port(), str(tmp), name, cfg, halt_after), nprocs=2,
                       start_method="fork")


@pytest.mark.parametrize("name,cfg", [
    ("gpt", TrainConfig(lr=0.01, seed=3, val_every=4, checkpoint_every=5)),
    ("lstm", TrainConfig(lr=0.01, seed=3, optimizer="adam", val_every=4)),
])
def test_two_processes_match_one(tmp_path, name, cfg):
    single, one = run(tmp_path / "one", name, cfg, dropout=0.0)
    (tmp_path / "two").mkdir()
    two_processes(tmp_path / "two", name, cfg)
    two = torch.load(tmp_path / "two" / "rank0.pt", weights_only=False)
    for k, a in single.state_dict().items():
        assert torch.allclose(a, two["state"][k], atol=1e-5, rtol=1e-4), k
    assert [r["loss"] for r in one["train_curve"]] == pytest.approx(
        [r["loss"] for r in two["curve"]], rel=1e-5)
    assert [r["val_loss"] for r in one["val_curve"]] == pytest.approx(
        [r["val_loss"] for r in two["val"]], rel=1e-5)
    assert (tmp_path / "two" / "checkpoint.pt").is_file()  # written once, by rank 0


def test_a_run_killed_under_two_processes_resumes_in_one(tmp_path):
    """Checkpoints do not depend on the world size: 2 processes stopped after step 8 (the last
    checkpoint is the first epoch end's, step 6), then 1 process resumes from it and ends where
    1 process alone does."""
    cfg = TrainConfig(lr=0.01, seed=3, val_every=4, checkpoint_every=5)
    single, one = run(tmp_path / "one", "gpt", cfg, dropout=0.0)
    (tmp_path / "two").mkdir()
    two_processes(tmp_path / "two", "gpt", cfg, halt_after=8)
    assert torch.load(tmp_path / "two" / "checkpoint.pt", weights_only=False)["step"] == 6
    resumed, result = run(tmp_path / "two", "gpt", cfg, dropout=0.0)
    for k, a in single.state_dict().items():
        assert torch.allclose(a, resumed.state_dict()[k], atol=1e-5, rtol=1e-4), k
    assert [r["loss"] for r in one["train_curve"]] == pytest.approx(
        [r["loss"] for r in result["train_curve"]], rel=1e-5)


@pytest.mark.skipif(shutil.which("git") is None, reason="needs the checkout")
def test_torchrun_train_matches_a_single_process(tmp_path):
    """`torchrun --nproc-per-node 2 ... train` on the smoke expr data, against `train`."""
    params = config.compose(["profile=smoke"], ROOT / "conf")
    params["models"]["lstm"]["dropout"] = 0.0  # dropout draws differ per rank by design
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    results = {}
    for label, launcher in (("one", [str(bin_dir / "arithrepro")]),
                            ("two", [str(bin_dir / "torchrun"), "--standalone", "--nproc-per-node", "2",
                                     "-m", "arithrepro.cli"])):
        cwd = tmp_path / label
        cwd.mkdir()
        (cwd / "params.yaml").write_text(yaml.safe_dump(params))
        subprocess.run([str(bin_dir / "arithrepro"), "generate-datasets", "--task", "expr"],
                       cwd=cwd, check=True, capture_output=True, env=env)
        out = subprocess.run([*launcher, "train", "--task", "expr", "lstm-small-0"],
                             cwd=cwd, capture_output=True, text=True, env=env)
        assert out.returncode == 0, out.stderr[-3000:]
        results[label] = (json.loads((cwd / "runs/expr/lstm-small-0/train.json").read_text()),
                          torch.load(cwd / "runs/expr/lstm-small-0/model.pt", weights_only=False))
    assert "on 2 processes (cpu)" in out.stderr
    (one, m1), (two, m2) = results["one"], results["two"]
    assert one["steps"] == two["steps"]
    # the same params on other process counts: the record tells them apart
    origin = {k: r["provenance"]["train"] for k, r in (("one", one), ("two", two))}
    assert (origin["one"]["processes"], origin["two"]["processes"]) == (1, 2)
    assert origin["one"]["params_sha256"] == origin["two"]["params_sha256"]
    assert one["best_val_loss"] == pytest.approx(two["best_val_loss"], rel=1e-5)
    for k, a in m1["state_dict"].items():
        assert torch.allclose(a, m2["state_dict"][k], atol=1e-5, rtol=1e-4), k
