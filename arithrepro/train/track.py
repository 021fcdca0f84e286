"""What the loop carries per copy of the ensemble it trains (one model: an ensemble of one):
its state, the losses still on the device, its observers, its validations and its result."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from arithrepro.observers import FiniteLoss, Live, NonFiniteLoss, Progress
from arithrepro.train.config import TrainConfig
from arithrepro.train.losses import validation_loss


@dataclass
class State:
    """What the loop carries from step to step (and a checkpoint holds), per copy."""
    step: int = 0
    best_val_loss: float = math.inf
    best_step: int = -1
    best_state: dict | None = None
    train_curve: list = field(default_factory=list)
    val_curve: list = field(default_factory=list)
    seconds: float = 0.0
    tokens: int = 0
    failed: str = ""  # why this copy stopped (a non-finite loss); the others go on


def of_copy(row: dict, e: int) -> dict:
    """Copy e's row: a field given per copy (a list: the copies' own rates, or epochs where
    their data differ in size) as copy e's value."""
    return {k: v[e] if isinstance(v, list) else v for k, v in row.items()}


class Losses:
    """The steps whose loss is still on the device, read back in one transfer now and then
    rather than every step (under DDP, each rank's share averaged). A step's loss is a scalar,
    or an ensemble's (E,) losses, one per copy."""

    def __init__(self, world: int):
        self.world, self.rows, self.values = world, [], []

    def add(self, row: dict, loss) -> None:
        self.rows.append(row)
        self.values.append(loss)

    def __len__(self) -> int:
        return len(self.rows)

    def take(self, copies: int = 1) -> list[list[dict]]:
        """The queued rows with their losses, a list per copy."""
        if not self.rows:
            return [[] for _ in range(copies)]
        losses = torch.stack(self.values).float()
        if self.world > 1:  # each rank holds its shard's share: the batch's loss is their mean
            torch.distributed.all_reduce(losses)
            losses /= self.world
        values = losses.reshape(len(self.rows), copies).cpu().tolist()
        out = [[{**of_copy(row, e), "loss": v[e]} for row, v in zip(self.rows, values)]
               for e in range(copies)]
        self.rows, self.values = [], []
        return out


class Tracker:
    """Every copy's state, observers and validation set, and the progress bar (copy 0's). A copy
    whose loss becomes non-finite stops there; when every copy has, the run stops with
    NonFiniteLoss."""

    def __init__(self, ens, cfg: TrainConfig, total: int, valid, series, observers: tuple,
                 rank: int, world: int, progress: bool):
        self.ens, self.cfg = ens, cfg
        self.copies = range(ens.members)
        self.states = [State() for _ in self.copies]
        self.valids = ens.per_copy(valid, "valid")
        sinks = ens.per_copy(series, "series")
        self.told = [[FiniteLoss(), *observers, *([Live(s)] if rank == 0 and s else [])]
                     for s in sinks]
        self.bar = [Progress(total)] if rank == 0 and progress else []
        self.losses = Losses(world)

    @property
    def step(self) -> int:
        return self.states[0].step

    def tell(self, hook: str, *args) -> None:
        """Tell every running copy's observers (args: per-copy lists), then the progress bar
        copy 0's."""
        for e in self.copies:
            if self.states[e].failed:
                continue
            try:
                _tell(self.told[e], hook, *(a[e] for a in args))
            except NonFiniteLoss as err:
                self.states[e].failed = str(err)
        self._stop_if_all_failed()
        _tell(self.bar, hook, *(a[0] for a in args))

    def _stop_if_all_failed(self) -> None:
        if all(st.failed for st in self.states):
            first = self.states[0].failed
            raise NonFiniteLoss(first if len(self.states) == 1 else f"every copy stopped: {first}")

    def at_step(self, n: int) -> None:
        for st in self.states:
            st.step = n

    def spent(self, seconds: float, tokens: int) -> None:
        for st in self.states:
            st.seconds += seconds
            st.tokens += tokens

    def flush(self) -> None:
        """Read the queued losses back and tell the observers."""
        rows = self.losses.take(len(self.states))
        self.tell("train", rows, self.states)
        for st, r in zip(self.states, rows):
            st.train_curve.extend(r)

    def validate(self, epoch) -> None:
        """Score every running copy; `epoch`, one or a list of one per copy."""
        rows = [None if self.states[e].failed
                else self._validate(e, epoch[e] if isinstance(epoch, list) else epoch)
                for e in self.copies]
        self.tell("val", rows)

    def _validate(self, e: int, epoch: int) -> dict:
        """Score copy e as the standalone model it is, note the row, keep the best state."""
        net, valid, state = self.ens.copy_of(e), self.valids[e], self.states[e]
        if callable(valid):
            net.eval()
            result = valid(net)
            net.train()
        else:
            result = {"val_loss": validation_loss(net, *valid, self.cfg.eval_batch_size)}
        row = {"step": state.step, "epoch": epoch, **result}
        state.val_curve.append(row)
        if result["val_loss"] < state.best_val_loss:
            state.best_val_loss, state.best_step = result["val_loss"], state.step
            if self.cfg.restore_best:
                state.best_state = self.ens.state_of(e)
        return row

    def end(self) -> None:
        for e in self.copies:
            _tell(self.told[e], "end")
        _tell(self.bar, "end")

    def results(self):
        """Each copy's result, its best state restored (cfg.restore_best); a copy that stopped
        or never validated finitely: {"failed": why}."""
        out = []
        for st in self.states:
            if self.cfg.restore_best and st.best_state is None and not st.failed:
                st.failed = "no validation loss was finite: no best state to restore"
        self._stop_if_all_failed()
        for e, st in zip(self.copies, self.states):
            if st.failed:
                out.append({"failed": st.failed})
                continue
            if self.cfg.restore_best:
                self.ens.load_state_of(e, st.best_state)
            out.append({
                "best_val_loss": st.best_val_loss, "best_step": st.best_step, "steps": st.step,
                "train_seconds": st.seconds, "tokens_per_s": st.tokens / max(st.seconds, 1e-9),
                "train_curve": st.train_curve, "val_curve": st.val_curve})
        return self.ens.result(out)


def _tell(observers, hook: str, *args) -> None:
    for o in observers:
        getattr(o, hook)(*args)
