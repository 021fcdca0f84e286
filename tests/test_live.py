"""The training series through dvclive (arithrepro/live.py): written while the run goes on, a
resumed run's series equal to an uninterrupted one's, and nothing written outside its folder."""

import json

import yaml

from arithrepro.live import Series, read_series
from arithrepro.train.config import TrainConfig
from tests.helpers import run

PARAMS = {"arch": {"model": "lstm", "size": "small"}, "loop": {"lr": 0.01}}


def series_files(folder):
    return {p.relative_to(folder).as_posix(): p.read_text()
            for p in sorted((folder / "plots").rglob("*.tsv"))}


def test_the_series_hold_every_step_and_validation(tmp_path):
    cfg = TrainConfig(lr=0.01, seed=3, val_every=4, checkpoint_every=5)
    _, result = run(tmp_path, "lstm", cfg, series=Series(tmp_path / "live", PARAMS))
    folder = tmp_path / "live"
    assert set(series_files(folder)) == {"plots/metrics/train/loss.tsv",
                                         "plots/metrics/train/lr.tsv",
                                         "plots/metrics/val/loss.tsv"}
    loss = read_series(folder, "train/loss")
    assert list(loss["step"]) == [r["step"] for r in result["train_curve"]]
    assert list(loss["loss"]) == [r["loss"] for r in result["train_curve"]]
    assert list(read_series(folder, "train/lr")["lr"]) == [r["lr"] for r in result["train_curve"]]
    val = read_series(folder, "val/loss")
    assert list(val["loss"]) == [r["val_loss"] for r in result["val_curve"]]
    summary = json.loads((folder / "metrics.json").read_text())
    assert summary["step"] == result["steps"] == 12
    assert summary["val"]["loss"] == result["val_curve"][-1]["val_loss"]
    assert yaml.safe_load((folder / "params.yaml").read_text()) == PARAMS
    # dvclive neither writes a dvc.yaml nor a report, here or beside the folder
    assert not list(tmp_path.rglob("dvc.yaml")) and not list(tmp_path.rglob("report.*"))


def test_rows_reach_the_files_before_the_run_ends(tmp_path):
    cfg = TrainConfig(lr=0.01, seed=3, val_every=4, checkpoint_every=5)
    _, halted = run(tmp_path, "lstm", cfg, halt_after=8, series=Series(tmp_path / "live", PARAMS))
    assert halted is None
    assert list(read_series(tmp_path / "live", "train/loss")["step"]) == list(range(1, 9))
    # every 4 steps and at the end of the first epoch (6 steps)
    assert list(read_series(tmp_path / "live", "val/loss")["step"]) == [4, 6, 8]


def test_a_resumed_run_continues_its_series(tmp_path):
    """Killed after step 8 with its last checkpoint at step 5: the resumed run drops the rows of
    steps 6-8 it logged before, redoes them, and its files equal an uninterrupted run's."""
    cfg = TrainConfig(lr=0.01, seed=3, val_every=4, checkpoint_every=5)
    run(tmp_path / "a", "lstm", cfg, series=Series(tmp_path / "a" / "live", PARAMS))
    run(tmp_path / "b", "lstm", cfg, halt_after=8, series=Series(tmp_path / "b" / "live", PARAMS))
    run(tmp_path / "b", "lstm", cfg, series=Series(tmp_path / "b" / "live", PARAMS))
    straight, resumed = tmp_path / "a" / "live", tmp_path / "b" / "live"
    assert series_files(resumed) == series_files(straight)
    assert (json.loads((resumed / "metrics.json").read_text())
            == json.loads((straight / "metrics.json").read_text()))


def test_a_fresh_run_clears_an_old_series(tmp_path):
    folder = tmp_path / "live"
    (folder / "plots" / "metrics" / "train").mkdir(parents=True)
    (folder / "plots" / "metrics" / "train" / "loss.tsv").write_text("step\tloss\n99\t1.0\n")
    cfg = TrainConfig(lr=0.01, seed=0, checkpoint_every=50)
    run(tmp_path, "lstm", cfg, epochs=1, series=Series(folder, PARAMS))
    assert 99 not in list(read_series(folder, "train/loss")["step"])
