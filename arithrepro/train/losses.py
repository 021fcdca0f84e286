"""The losses: what a step's outputs are scored by, and the validation loss.

A copy-stacked batch (arithrepro/train/ensembles.py) has a leading copy dimension: y and mask
(E, B, T), each output (E, B, T, V). `gathered_loss` takes the scored positions out and sums
them (one copy: the loss a standalone model has); `masked_loss` zeroes the unscored
ones and sums each copy over its own positions, so no shape depends on the mask's values (what
an ensemble's stacked copies and a CUDA graph's static step need).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def outputs(model, x, recurrences: int = 0, outputs_from: int = 0, exit_at: int | None = None,
            **drawn) -> list:
    """The outputs the loss scores: [logits], or a progressive loss's [at R, at n] with n drawn
    here in 1..R unless given. `drawn`: keyword arguments the caller drew for the forward."""
    if outputs_from:
        return [model(x, outputs_from=outputs_from, **drawn)]
    if not recurrences:
        return [model(x, **drawn)]
    n = exit_at if exit_at is not None else int(torch.randint(1, recurrences + 1, ()))
    return model(x, exit_at=n, **drawn)  # [at R] or [at R, at n]


def gathered_loss(outs: list, y, mask, count, outputs_from: int = 0) -> torch.Tensor:
    """Mean cross-entropy over the scored positions of the whole batch, each output's summed over
    the positions the mask picks, over `count` positions per output."""
    y, mask = y[..., outputs_from:], mask[..., outputs_from:]
    return sum(F.cross_entropy(o[mask], y[mask], reduction="sum") for o in outs) / (count * len(outs))


def masked_loss(outs: list, y, mask, count, outputs_from: int = 0) -> torch.Tensor:
    """gathered_loss per copy (E,): every position's cross-entropy with the unscored ones zeroed,
    summed over each copy's own, over its `count` (E,)."""
    y, mask = y[..., outputs_from:], mask[..., outputs_from:]
    dims = tuple(range(1, mask.dim()))
    total = 0.0
    for o in outs:
        nll = F.cross_entropy(o.flatten(0, -2), y.flatten(), reduction="none").view(y.shape)
        total = total + nll.masked_fill(~mask, 0.0).sum(dims)
    return total / (count * len(outs))


def training_loss(model, x, y, mask, recurrences: int = 0, outputs_from: int = 0,
                  count: torch.Tensor | None = None) -> torch.Tensor:
    """One model's mean cross-entropy over the scored positions of a plain (B, T) batch.
    `recurrences`: R of a looped model trained with the progressive loss (0: the plain loss).
    `count`: the number of positions the mean is over, when x is a data-parallel shard (the
    global batch's count over the world size), so that the ranks' averaged gradients are the
    whole batch's."""
    if count is None:
        count = mask[..., outputs_from:].sum()
    return gathered_loss(outputs(model, x, recurrences, outputs_from), y, mask, count, outputs_from)


def scored(mask: torch.Tensor, outputs_from: int = 0) -> torch.Tensor:
    """The scored positions of each copy of a copy-stacked mask (E,)."""
    return mask[:, :, outputs_from:].flatten(1).sum(1)


@torch.no_grad()
def validation_loss(model, make_batch, n: int, batch_size: int) -> float:
    """Mean masked cross-entropy over a fixed set: make_batch(idx) -> (x, y, mask)."""
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    for i in range(0, n, batch_size):
        x, y, mask = make_batch(torch.arange(i, min(i + batch_size, n)))
        logits = model(x)
        total += F.cross_entropy(logits[mask], y[mask], reduction="sum").item()
        count += int(mask.sum())
    model.train(was_training)
    return total / max(count, 1)
