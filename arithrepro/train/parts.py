"""The model and what trains it: the optimizer, its schedule, the gradient scaler, and the
runner the steps call (the model, under DDP and torch.compile as asked)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from arithrepro.models.hooks import lamb_blocks
from arithrepro.train.config import TrainConfig, lr_factor


@dataclass(frozen=True)
class Unregistered:
    """What the loop assumes of a model without a registry entry (ModelSpec's defaults)."""
    causal: bool = True
    prunes_outputs: bool = False
    eager: str = ""


PLAIN = Unregistered()


def make_optimizer(model, cfg: TrainConfig, copies: list[TrainConfig] | None = None):
    """cfg's optimizer over `model`; with `copies` (an ensemble's copies' settings, differing in
    rate or decay), each copy at its own, the group's rate then the schedule's factor alone."""
    # where the step is captured as a CUDA graph, the optimizers' step counts stay on the GPU
    on_gpu = next(model.parameters()).device.type == "cuda"
    capturable = on_gpu and cfg.graphs
    rates = None if copies is None else ([c.lr for c in copies], [c.weight_decay for c in copies])
    if cfg.optimizer == "lamb":  # torch-optimizer's Lamb, stepped over all parameters at once
        from arithrepro.optim import ForeachLamb

        return ForeachLamb(model.parameters(), lr=1.0 if rates else cfg.lr,
                           weight_decay=0.0 if rates else cfg.weight_decay,
                           blocks=lamb_blocks(model), capturable=capturable, copies=rates)
    if cfg.optimizer in ("adam", "adamw") and rates:
        from arithrepro.optim import CopiesAdam

        return CopiesAdam(model.parameters(), *rates, decoupled=cfg.optimizer == "adamw",
                          betas=(0.9, cfg.beta2), eps=cfg.eps, capturable=capturable)
    if cfg.optimizer in ("adam", "adamw"):
        kind = torch.optim.AdamW if cfg.optimizer == "adamw" else torch.optim.Adam
        return kind(model.parameters(), lr=cfg.lr, betas=(0.9, cfg.beta2), eps=cfg.eps,
                    weight_decay=cfg.weight_decay, capturable=capturable)
    raise ValueError(f"optimizer {cfg.optimizer!r}: expected lamb, adam or adamw")


@dataclass
class Parts:
    model: object
    runner: object
    opt: object
    sched: object
    scaler: object
    factor: object = None  # step -> the schedule's factor of the base rate (what sched applies)
    base: tuple = ()       # each copy's base rate, where the copies' differ; else cfg's alone

    @classmethod
    def of(cls, model, cfg: TrainConfig, total: int, world: int, spec=None,
           copies: list[TrainConfig] | None = None) -> "Parts":
        """What trains `model` under `cfg`; `copies`, an ensemble's per-copy settings (as
        train/config.shared allows them to differ)."""
        warmup = int(cfg.warmup_frac * total)  # floored, as the source's steps // 10
        own = copies if copies and len({(c.lr, c.weight_decay) for c in copies}) > 1 else None
        opt = make_optimizer(model, cfg, own)
        device = next(model.parameters()).device
        runner = model  # it shares the model's parameters
        if world > 1:
            from torch.nn.parallel import DistributedDataParallel

            runner = DistributedDataParallel(
                model, device_ids=[device.index] if device.type == "cuda" else None)
        if cfg.compile and _compilable(spec or PLAIN):
            runner = torch.compile(runner, mode=cfg.compile if isinstance(cfg.compile, str) else None)
        scaler = torch.amp.GradScaler(device.type, enabled=cfg.precision == "fp16")
        for group in opt.param_groups:
            # the schedule's base rate stays a float: from a tensor it would read it back
            group["initial_lr"] = float(group["lr"])
        parts = cls(model, runner, opt, None, scaler, base=tuple(c.lr for c in own or [cfg]))
        parts.place_rates(cfg)
        parts.factor = lambda s: lr_factor(s, total, warmup, cfg.schedule)
        parts.sched = torch.optim.lr_scheduler.LambdaLR(opt, parts.factor)
        return parts

    def rate(self):
        """The learning rate this step runs at, as the scheduler set it: one, or one per copy
        where the copies' differ."""
        f = self.factor(self.sched.last_epoch)
        return self.base[0] * f if len(self.base) == 1 else [b * f for b in self.base]

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def place_rates(self, cfg: TrainConfig) -> None:
        """Under graphs on a GPU, each group's rate as a tensor on the device, which the
        scheduler fills in place and a captured step reads (after a resume too: a loaded
        optimizer's rates are the checkpoint's, on the host)."""
        if not (cfg.graphs and self.device.type == "cuda"):
            return
        for group in self.opt.param_groups:
            rate = group["lr"]
            if not (torch.is_tensor(rate) and rate.device == self.device):
                group["lr"] = torch.tensor(float(rate), device=self.device)


def _compilable(spec) -> bool:
    """A model whose registry entry says why it cannot compile (`eager`) runs eager, with a
    warning."""
    if not spec.eager:
        return True
    import warnings

    warnings.warn(f"compile: runs eager ({spec.eager})", stacklevel=3)
    return False
