"""A run's training series through dvclive, written while the run goes on: the loss and learning
rate at every step (train/loss, train/lr), every validation's numbers (val/loss, val/<name>), and
the cell's params. `dvc plots show`, `dvc metrics show <folder>/metrics.json` and the VS Code
extension read them before the stage ends.

The folder is an ordinary output of the training stage: dvclive writes no dvc.yaml
(dvcyaml=None) and makes no experiment of its own (save_dvc_exp=False), so DVC caches the folder
with the model and the run cache restores it. A resumed run rewrites its series from the
checkpoint, which holds every row up to the step it resumes from: rows logged after that
checkpoint are dropped, and the series reads as if the run had never stopped.
"""

from __future__ import annotations

import json
from pathlib import Path


class Series:
    """The sink `train.fit` reports to (`start`, `train`, `val`, `end`)."""

    def __init__(self, folder: str | Path, params: dict):
        # plain dicts and lists: dvclive's YAML writer refuses mapping subclasses (the params
        # reader's, arithrepro/params_reads.py) and tuples
        self.folder, self.live = Path(folder), None
        self.params = json.loads(json.dumps(params))

    def start(self, train_rows: list[dict], val_rows: list[dict]) -> None:
        """Open the series afresh and replay the rows a resumed run already has."""
        from dvclive import Live

        # resume=False clears whatever an earlier attempt left in the folder
        self.live = Live(str(self.folder), resume=False, dvcyaml=None, save_dvc_exp=False,
                         report=None)
        self.live.log_params(self.params)
        self._rows(train_rows, val_rows)

    def train(self, rows: list[dict]) -> None:
        self._rows(rows, [])

    def val(self, row: dict) -> None:
        self._rows([], [row])

    def end(self) -> None:
        self.live.end()

    def _rows(self, train_rows: list[dict], val_rows: list[dict]) -> None:
        live = self.live
        for row in train_rows:
            live.step = row["step"]
            live.log_metric("train/loss", row["loss"])
            live.log_metric("train/lr", row["lr"])
        for row in val_rows:
            live.step = row["step"]
            for key, value in row.items():
                if key not in ("step", "epoch"):
                    live.log_metric(f"val/{key.removeprefix('val_')}", value)
        if train_rows or val_rows:
            live.make_summary()  # metrics.json: the latest value of every series, and the step


def read_series(folder: str | Path, name: str):
    """One series of a run's folder as a DataFrame (step, value column named after the series'
    last part), e.g. read_series(folder, "train/loss")."""
    from arithrepro.io import read_frame

    path = Path(folder) / "plots" / "metrics" / f"{name}.tsv"
    return read_frame(path, ("step", name.rsplit("/", 1)[-1]))
