"""What the loop trains, as an ensemble: one model is an ensemble of one (`Single`), an
Ensemble (arithrepro/stacking.py) is E copies stacked and run as one program (`Stacked`). The
loop, the steps and the checkpoint see copy-stacked batches (a leading copy dimension: (E, B,
...)) and per-copy losses (E,), states, curves and observers, and ask the ensemble for what
differs between the two:

- stack: a batch source's batch, copy-stacked (one model's: a view with a copy dimension of 1);
- forward: the outputs the loss scores, copy-stacked;
- loss: the eager step's per-copy loss (one model: its scored positions gathered, as a
  standalone model's loss is computed; stacked copies: masked, each over its own positions);
- pieces: a batch cut into length-sorted micro-batches (one model on a CPU; copies run whole);
- clip: gradient clipping, each copy by its own norm;
- state_of / load_state_of / copy_of: a copy's weights, and the copy as a standalone model;
- per_copy / result: the caller's per-model arguments and results, as lists or as one.
"""

from __future__ import annotations

import copy

import torch

from arithrepro.stacking import Ensemble
from arithrepro.train.micro import micro_batches
from arithrepro.train.losses import gathered_loss, masked_loss, outputs


class _Kind:
    reduce = None  # the eager step's loss over the outputs: gathered_loss or masked_loss

    def loss(self, runner, x, y, mask, recurrences: int, outputs_from: int, count):
        outs = self.forward(runner, x, recurrences, outputs_from)
        return self.reduce(outs, y, mask, count, outputs_from)


class Single(_Kind):
    members = 1
    stacked = False
    reduce = staticmethod(gathered_loss)

    def __init__(self, model):
        self.model = self.template = model

    def stack(self, x, y, mask) -> tuple:
        return x[None], y[None], mask[None]

    def forward(self, runner, x, recurrences: int, outputs_from: int, exit_at=None,
                drawn=None) -> list:
        outs = outputs(runner, x[0], recurrences, outputs_from, exit_at, **(drawn or {}))
        return [o[None] for o in outs]

    def pieces(self, x, y, mask, n: int, trim_front: bool) -> list:
        if n <= 1:
            return [(x, y, mask, 0)]
        return [(xp[None], yp[None], mp[None], start)
                for xp, yp, mp, start in micro_batches(x[0], y[0], mask[0], n, trim_front)]

    def clip(self, max_norm: float) -> None:
        """As torch's clip_grad_norm_: coefficient max_norm / (norm + 1e-6), at most 1."""
        params = [q for q in self.model.parameters() if q.grad is not None]
        if params:
            torch.nn.utils.clip_grad_norm_(params, max_norm, foreach=True)

    def state_of(self, e: int) -> dict:
        return copy.deepcopy(self.model.state_dict())

    def load_state_of(self, e: int, state: dict) -> None:
        self.model.load_state_dict(state)

    def copy_of(self, e: int):
        return self.model

    def per_copy(self, value, name: str) -> list:
        """[value]: the value, or a list of one."""
        if not isinstance(value, list):
            return [value]
        if len(value) != 1:
            raise ValueError(f"{name}: {len(value)} for one model")
        return value

    def result(self, results: list):
        return results[0]


class Stacked(_Kind):
    stacked = True
    reduce = staticmethod(masked_loss)

    def __init__(self, model: Ensemble):
        self.model, self.template, self.members = model, model.template, model.members

    def stack(self, x, y, mask) -> tuple:
        return x, y, mask  # CopiesBatches stacks them

    def forward(self, runner, x, recurrences: int, outputs_from: int, exit_at=None,
                drawn=None) -> list:
        return outputs(runner, x, recurrences, outputs_from, exit_at,
                       **({} if drawn is None else {"drawn": drawn}))

    def pieces(self, x, y, mask, n: int, trim_front: bool) -> list:
        return [(x, y, mask, 0)]  # the modes table refuses n > 1 on the CPU

    def clip(self, max_norm: float) -> None:
        """clip_grad_norm_'s coefficient, each copy's from its own norm (gradients stacked per
        copy along dim 0)."""
        grads = [q.grad for q in self.model.parameters() if q.grad is not None]
        if not grads:
            return
        norms = torch.stack([g.float().pow(2).flatten(1).sum(1) for g in grads]).sum(0).sqrt()
        coef = (max_norm / (norms + 1e-6)).clamp(max=1.0)
        for g in grads:
            g.mul_(coef.view(-1, *([1] * (g.dim() - 1))).to(g.dtype))

    def state_of(self, e: int) -> dict:
        return self.model.state_of(e)

    def load_state_of(self, e: int, state: dict) -> None:
        self.model.load_state_of(e, state)

    def copy_of(self, e: int):
        return self.model.copy_of(e)

    def per_copy(self, value, name: str) -> list:
        """One value per copy: a list of them, or one value every copy shares."""
        if not isinstance(value, list):
            return [value] * self.members
        if len(value) != self.members:
            raise ValueError(f"{name}: {len(value)} for an ensemble of {self.members} copies")
        return value

    def result(self, results: list) -> list:
        return results


def ensemble_of(model) -> Single | Stacked:
    return Stacked(model) if isinstance(model, Ensemble) else Single(model)


def clip_gradients(model, max_norm: float) -> None:
    """Scale `model`'s gradients to an L2 norm of at most `max_norm`, each copy of an Ensemble
    by its own."""
    ensemble_of(model).clip(max_norm)
