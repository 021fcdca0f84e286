"""One optimizer step on a global, copy-stacked batch. `Step` checks the modes once and makes
the eager step (this module) or the static one (graphs.py). Either returns the per-copy loss
(E,), on the device, and the learning rate it stepped with (one per copy where theirs
differ)."""

from __future__ import annotations

import contextlib

from arithrepro.device import autocast
from arithrepro.train import modes
from arithrepro.train.config import TrainConfig
from arithrepro.train.ensembles import ensemble_of
from arithrepro.train.losses import scored
from arithrepro.train.parts import PLAIN, Parts


def Step(parts: Parts, cfg: TrainConfig, rank: int, world: int, spec=None):
    """The step `cfg` asks for, once its modes are known to go together."""
    spec, ens = spec or PLAIN, ensemble_of(parts.model)
    mode = modes.Modes(stacked=ens.stacked,
                       device=parts.device.type, world=world, precision=cfg.precision,
                       graphs=cfg.graphs, micro_batches=cfg.micro_batches,
                       plain_loss=not (cfg.progressive or cfg.outputs_from), causal=spec.causal)
    modes.check(mode)
    if cfg.graphs:
        from arithrepro.train.graphs import StaticStep

        return StaticStep(parts, cfg, ens)
    return EagerStep(parts, cfg, ens, rank, world, spec, mode.pieces)


class EagerStep:
    """This rank's share of the batch's rows (the loss over the global count, so that DDP's
    averaged gradients are the whole batch's), in micro-batches on a CPU, under autocast and
    the gradient scaler."""

    def __init__(self, parts: Parts, cfg: TrainConfig, ens, rank: int, world: int, spec,
                 pieces: int):
        self.parts, self.cfg, self.ens, self.rank, self.world = parts, cfg, ens, rank, world
        self.recurrences = ens.template.recurrences if cfg.progressive else 0
        # a core whose outputs_from skips work (a transformer's last block) is given each
        # piece's first scored position
        self.trim_front, self.pieces = spec.prunes_outputs, pieces
        self.device = parts.device

    def close(self) -> None:
        pass

    def __call__(self, x, y, mask):
        p, cfg, world = self.parts, self.cfg, self.world
        count = None
        if world > 1:  # every rank draws the global batch (a pure function of the step)
            count = scored(mask, cfg.outputs_from) / world
            B = mask.size(1)
            share = (slice(None), slice(self.rank * B // world, (self.rank + 1) * B // world))
            x, y, mask = x[share], y[share], mask[share]
        p.opt.zero_grad(set_to_none=True)
        if count is None:
            count = scored(mask, cfg.outputs_from)
        pieces = self.ens.pieces(x, y, mask, self.pieces, self.trim_front)
        loss = 0.0
        for i, (xp, yp, mp, start) in enumerate(pieces):
            # under DDP, gradients are averaged across ranks once, after the last piece
            last = i == len(pieces) - 1
            with (p.runner.no_sync() if world > 1 and not last else contextlib.nullcontext()):
                with autocast(self.device.type, cfg.precision):
                    part = self.ens.loss(p.runner, xp, yp, mp, self.recurrences,
                                           start or cfg.outputs_from, count)
                # the copies' losses summed: each copy's weights get its own loss's gradient
                p.scaler.scale(part.sum()).backward()
            loss = loss + part.detach()
        lr = p.rate()
        if cfg.grad_clip:
            p.scaler.unscale_(p.opt)
            self.ens.clip(cfg.grad_clip)
        p.scaler.step(p.opt)
        p.scaler.update()
        p.sched.step()
        return loss.detach(), lr
