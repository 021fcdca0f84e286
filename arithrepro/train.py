"""The one training loop: LAMB, per-batch warm-up + linear decay, validation, best-state restore,
per-step curves, and checkpoints that let a killed run finish bit-identical (on CPU) to an
uninterrupted one.

Everything random is derived from the seed: the model's initialization (the caller seeds torch
before building it), each epoch's order (its own generator, seeded by seed and epoch, so a resumed
run recomputes it), and dropout (the global generator, whose state is in the checkpoint).
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from arithrepro.io import save_torch


class NonFiniteLoss(RuntimeError):
    pass


@dataclass(frozen=True)
class TrainConfig:
    lr: float
    batch_size: int
    epochs: int
    seed: int
    warmup_frac: float = 0.1
    loss_on: str = "answer"
    weight_decay: float = 0.0
    val_every: int = 0          # also validate every this many steps (0: at epoch ends only)
    checkpoint_every: int = 100
    eval_batch_size: int = 1024


def lr_factor(step: int, total: int, warmup: int) -> float:
    """Linear warm-up from 0 over `warmup` steps, then linear decay to 0 at `total`."""
    if step < warmup:
        return (step + 1) / warmup
    return max(0.0, (total - step) / max(1, total - warmup))


def masked_loss(logits, targets, mask) -> torch.Tensor:
    """Mean cross-entropy over the positions the mask selects."""
    return F.cross_entropy(logits[mask], targets[mask])


@torch.no_grad()
def validation_loss(model, task, split, cfg: TrainConfig) -> float:
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    for i in range(0, len(split), cfg.eval_batch_size):
        idx = torch.arange(i, min(i + cfg.eval_batch_size, len(split)), device=split.tokens.device)
        x, y, mask = task.batch(split, idx, cfg.loss_on)
        logits = model(x)
        total += F.cross_entropy(logits[mask], y[mask], reduction="sum").item()
        count += int(mask.sum())
    model.train(was_training)
    return total / max(count, 1)


def _epoch_order(n: int, seed: int, epoch: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed * 100_003 + epoch)
    return torch.randperm(n, generator=g)


def fit(model, task, train_split, valid_split, cfg: TrainConfig, checkpoint: Path,
        fingerprint: str, *, halt_after: int | None = None, progress: bool = True) -> dict | None:
    """Train `model` in place and restore its best-validation state.

    Resumes from `checkpoint` when it holds an unfinished run with the same fingerprint. Returns
    {best_val_loss, best_step, steps, train_seconds, tokens_per_s, train_curve, val_curve};
    returns None when stopped by `halt_after` (a stand-in for a killed process, for tests).
    """
    import torch_optimizer

    n = len(train_split)
    per_epoch = math.ceil(n / cfg.batch_size)
    total = per_epoch * cfg.epochs
    warmup = max(1, round(cfg.warmup_frac * total))
    opt = torch_optimizer.Lamb(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(s, total, warmup))
    s = {"step": 0, "best_val_loss": math.inf, "best_step": -1, "best_state": None,
         "train_curve": [], "val_curve": [], "seconds": 0.0, "tokens": 0}
    resumed = _resume(checkpoint, fingerprint, model, opt, sched, s)

    def save(finished: bool) -> None:
        save_torch(checkpoint, {
            "fingerprint": fingerprint, "finished": finished, "config": asdict(cfg),
            "model": model.state_dict(), "optimizer": opt.state_dict(),
            "scheduler": sched.state_dict(), "rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None, **s})

    def validate(epoch: int) -> None:
        loss = validation_loss(model, task, valid_split, cfg)
        s["val_curve"].append({"step": s["step"], "epoch": epoch, "val_loss": loss})
        if loss < s["best_val_loss"]:
            s.update(best_val_loss=loss, best_step=s["step"],
                     best_state=copy.deepcopy(model.state_dict()))

    bar = _bar(total, s["step"], progress, resumed)
    model.train()
    while s["step"] < total:
        epoch, start = divmod(s["step"], per_epoch)
        order = _epoch_order(n, cfg.seed, epoch).to(train_split.tokens.device)
        for b in range(start, per_epoch):
            t0 = time.perf_counter()
            x, y, mask = task.batch(train_split, order[b * cfg.batch_size:(b + 1) * cfg.batch_size],
                                    cfg.loss_on)
            loss = masked_loss(model(x), y, mask)
            value = loss.item()
            if not math.isfinite(value):
                raise NonFiniteLoss(f"loss became {value} at step {s['step']} (epoch {epoch}); "
                                    "lower the learning rate or check the data")
            opt.zero_grad(set_to_none=True)
            loss.backward()
            lr = opt.param_groups[0]["lr"]
            opt.step()
            sched.step()
            dt = time.perf_counter() - t0
            s["seconds"] += dt
            s["tokens"] += x.numel()
            s["step"] += 1
            s["train_curve"].append({"step": s["step"], "epoch": epoch, "loss": value, "lr": lr,
                                     "tokens_per_s": x.numel() / dt})
            end_of_epoch = b == per_epoch - 1
            if end_of_epoch or (cfg.val_every and s["step"] % cfg.val_every == 0):
                validate(epoch)
            if bar is not None:
                bar.update(1)
                bar.set_postfix(loss=f"{value:.4f}", best_val=f"{s['best_val_loss']:.4f}")
            if s["step"] % cfg.checkpoint_every == 0 or end_of_epoch:
                save(finished=False)
            if halt_after is not None and s["step"] >= halt_after:
                if bar is not None:
                    bar.close()
                return None
    if bar is not None:
        bar.close()
    save(finished=True)
    model.load_state_dict(s["best_state"])
    return {
        "best_val_loss": s["best_val_loss"], "best_step": s["best_step"], "steps": s["step"],
        "train_seconds": s["seconds"], "tokens_per_s": s["tokens"] / max(s["seconds"], 1e-9),
        "train_curve": s["train_curve"], "val_curve": s["val_curve"],
    }


def _resume(checkpoint: Path, fingerprint: str, model, opt, sched, s: dict) -> bool:
    if not checkpoint.is_file():
        return False
    ck = torch.load(checkpoint, map_location="cpu", weights_only=False)
    if ck.get("fingerprint") != fingerprint or ck.get("finished"):
        return False  # another configuration, or a finished run: start afresh
    model.load_state_dict(ck["model"])
    opt.load_state_dict(ck["optimizer"])
    sched.load_state_dict(ck["scheduler"])
    torch.set_rng_state(ck["rng"])
    if ck.get("cuda_rng") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(ck["cuda_rng"])
    for key in s:
        s[key] = ck[key]
    return True


def _bar(total: int, done: int, enabled: bool, resumed: bool):
    if not enabled:
        return None
    from tqdm import tqdm

    desc = f"train (resumed at step {done})" if resumed else "train"
    return tqdm(total=total, initial=done, desc=desc, unit="step", dynamic_ncols=True)
