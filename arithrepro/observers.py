"""What the training loop tells the world (`train.fit`): each observer hears of the run's start
(with the rows a resumed run already has), every batch of training rows as their losses reach
the host, every validation, every step, and the end. One that raises stops the run there."""

from __future__ import annotations

import math


class NonFiniteLoss(RuntimeError):
    pass


class Observer:
    """What the loop tells the world: every hook is optional."""

    def start(self, state, resumed: bool) -> None: ...
    def train(self, rows: list[dict], state) -> None: ...
    def val(self, row: dict) -> None: ...
    def step(self, state) -> None: ...
    def end(self) -> None: ...


class FiniteLoss(Observer):
    """Stops the run at the first non-finite training loss, with one line saying where."""

    def train(self, rows, state):
        for row in rows:
            if not math.isfinite(row["loss"]):
                raise NonFiniteLoss(f"loss became {row['loss']} at step {row['step'] - 1} (epoch "
                                    f"{row['epoch']}); lower the learning rate or check the data")


class Progress(Observer):
    """A progress bar with the latest loss and the best validation loss."""

    def __init__(self, total: int):
        self.total, self.bar = total, None

    def start(self, state, resumed):
        from tqdm import tqdm

        desc = f"train (resumed at step {state.step})" if resumed else "train"
        self.bar = tqdm(total=self.total, initial=state.step, desc=desc, unit="step",
                        dynamic_ncols=True)

    def train(self, rows, state):
        if rows:
            self.bar.set_postfix(loss=f"{rows[-1]['loss']:.4f}",
                                 best_val=f"{state.best_val_loss:.4f}")

    def step(self, state):
        self.bar.update(1)

    def end(self):
        self.bar.close()


class Live(Observer):
    """A live series (arithrepro.live.Series): every training row and validation as they reach
    the host, and a resumed run's rows replayed first."""

    def __init__(self, series):
        self.series = series

    def start(self, state, resumed):
        self.series.start(state.train_curve, state.val_curve)

    def train(self, rows, state):
        self.series.train(rows)

    def val(self, row):
        self.series.val(row)

    def end(self):
        self.series.end()
