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


def make_optimizer(model, cfg: TrainConfig):
    # where the step is captured as a CUDA graph, the optimizers' step counts stay on the GPU
    on_gpu = next(model.parameters()).device.type == "cuda"
    if cfg.optimizer == "lamb":  # torch-optimizer's Lamb, stepped over all parameters at once
        from arithrepro.optim import ForeachLamb

        return ForeachLamb(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay,
                           blocks=lamb_blocks(model), capturable=on_gpu and cfg.graphs)
    if cfg.optimizer in ("adam", "adamw"):
        kind = torch.optim.AdamW if cfg.optimizer == "adamw" else torch.optim.Adam
        return kind(model.parameters(), lr=cfg.lr, betas=(0.9, cfg.beta2), eps=cfg.eps,
                    weight_decay=cfg.weight_decay, capturable=on_gpu and cfg.graphs)
    raise ValueError(f"optimizer {cfg.optimizer!r}: expected lamb, adam or adamw")


@dataclass
class Parts:
    model: object
    runner: object
    opt: object
    sched: object
    scaler: object
    factor: object = None  # step -> the schedule's factor of the base rate (what sched applies)

    @classmethod
    def of(cls, model, cfg: TrainConfig, total: int, world: int, spec=None) -> "Parts":
        warmup = int(cfg.warmup_frac * total)  # floored, as the source's steps // 10
        opt = make_optimizer(model, cfg)
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
        parts = cls(model, runner, opt, None, scaler)
        parts.place_rates(cfg)
        parts.factor = lambda s: lr_factor(s, total, warmup, cfg.schedule)
        parts.sched = torch.optim.lr_scheduler.LambdaLR(opt, parts.factor)
        return parts

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
