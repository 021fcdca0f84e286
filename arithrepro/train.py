"""The one training loop: optimizer (LAMB, Adam, AdamW), per-step warm-up then linear decay or a
constant rate, validation, best-state restore, per-step curves (also sent to a live series as
they come: arithrepro/live.py), the progressive loss of looped models, and checkpoints that let
a killed run finish bit-identical (on CPU) to an uninterrupted one; on any device, in fp32 or
under bf16/fp16 autocast, optionally through torch.compile, and data-parallel under torchrun.

Batches come from a source that is a pure function of the step: a fixed split visited in a
seeded order per epoch (EpochBatches), or fresh samples drawn from a generator seeded by the step
(StreamBatches). So a resumed run recomputes its batches and needs no data-loader state, and
every data-parallel rank can draw the global batch and take its share.
Everything else random is derived from the seed: the model's initialization (the caller seeds
torch before building it) and dropout, random offsets and random depths (the global generator,
whose state is in the checkpoint).
"""

from __future__ import annotations

import contextlib
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
    seed: int
    optimizer: str = "lamb"     # lamb | adam | adamw
    schedule: str = "linear"    # after the warm-up: linear (decay to 0 at the end) | constant
    warmup_frac: float = 0.1
    weight_decay: float = 0.0
    beta2: float = 0.999        # Adam's second-moment decay (adam, adamw)
    progressive: bool = False   # ½·(loss at R recurrences + loss at a random n in 1..R)
    val_every: int = 0          # also validate every this many steps (0: at epoch ends only)
    checkpoint_every: int = 100
    eval_batch_size: int = 1024
    validate_epochs: bool = True  # validate at every epoch end (else every val_every and at the end)
    restore_best: bool = True   # end with the best-validation state (else the last one)
    outputs_from: int = 0       # the loss scores positions from here on only (model skips the rest)
    precision: str = "fp32"     # fp32 | bf16 (autocast) | fp16 (autocast and a gradient scaler)
    compile: bool | str = False  # run the forward and backward through torch.compile (a string:
                                 # its mode, e.g. "reduce-overhead" for CUDA graphs)
    sync_every: int = 50        # read the losses back to the host this often (and at every
                                # validation and checkpoint), not every step
    micro_batches: int = 1      # split each batch into this many length-sorted pieces, each cut
                                # to its longest row; gradients add up to the whole batch's
                                # (causal models and the plain loss only; see micro_batches())


def lr_factor(step: int, total: int, warmup: int, schedule: str = "linear") -> float:
    """Linear warm-up from 0 over `warmup` steps, then linear decay to 0 at `total` or constant."""
    if step < warmup:
        return (step + 1) / warmup
    if schedule == "constant":
        return 1.0
    return max(0.0, (total - step) / max(1, total - warmup))


class EpochBatches:
    """A fixed split in a seeded order per epoch: batch(step) -> (x, y, mask). `steps` ends the
    run at a step count instead of after whole epochs."""

    def __init__(self, make_batch, n: int, batch_size: int, epochs: int, seed: int, device,
                 steps: int | None = None):
        self.make_batch, self.n, self.batch_size, self.seed = make_batch, n, batch_size, seed
        self.per_epoch = math.ceil(n / batch_size)
        self.steps = self.per_epoch * epochs if steps is None else steps
        self.device, self._order = device, (None, None)

    def epoch(self, step: int) -> int:
        return step // self.per_epoch

    def epoch_end(self, step: int) -> bool:
        return (step + 1) % self.per_epoch == 0

    def __call__(self, step: int):
        epoch, b = divmod(step, self.per_epoch)
        if self._order[0] != epoch:
            g = torch.Generator().manual_seed(self.seed * 100_003 + epoch)
            self._order = (epoch, torch.randperm(self.n, generator=g).to(self.device))
        return self.make_batch(self._order[1][b * self.batch_size:(b + 1) * self.batch_size])


class StreamBatches:
    """Fresh samples every step: sample(batch_size, generator) -> (x, y, mask), the generator
    seeded by (seed, step). One 'epoch' spans the run."""

    def __init__(self, sample, batch_size: int, steps: int, seed: int):
        self.sample, self.batch_size, self.steps, self.seed = sample, batch_size, steps, seed

    def epoch(self, step: int) -> int:
        return 0

    def epoch_end(self, step: int) -> bool:
        return step == self.steps - 1

    def __call__(self, step: int):
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + step)
        return self.sample(self.batch_size, g)


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


def make_optimizer(model, cfg: TrainConfig):
    if cfg.optimizer == "lamb":  # torch-optimizer's Lamb, stepped over all parameters at once
        from arithrepro.optim import ForeachLamb

        return ForeachLamb(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    if cfg.optimizer == "adamw":
        return torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=(0.9, cfg.beta2),
                                 weight_decay=cfg.weight_decay)
    if cfg.optimizer == "adam":
        return torch.optim.Adam(model.parameters(), lr=cfg.lr, betas=(0.9, cfg.beta2),
                                weight_decay=cfg.weight_decay)
    raise ValueError(f"optimizer {cfg.optimizer!r}: expected lamb, adam or adamw")


def training_loss(model, x, y, mask, recurrences: int = 0, outputs_from: int = 0,
                  count: torch.Tensor | None = None) -> torch.Tensor:
    """Mean cross-entropy over the scored positions. `recurrences`: R of a looped model trained
    with the progressive loss (0: the plain loss). `count`: the number of positions the mean
    is over, when x is a data-parallel shard (the global batch's count over the world size), so
    that the ranks' averaged gradients are the whole batch's."""
    if outputs_from:
        outs = [model(x, outputs_from=outputs_from)]
        y, mask = y[:, outputs_from:], mask[:, outputs_from:]
    elif not recurrences:
        outs = [model(x)]
    else:
        n = int(torch.randint(1, recurrences + 1, ()))
        outs = model(x, exit_at=n)  # [at R] or [at R, at n]
    if count is None:
        count = mask.sum()
    return sum(F.cross_entropy(o[mask], y[mask], reduction="sum") for o in outs) / (count * len(outs))


def micro_batches(x, y, mask, pieces: int, trim_front: bool = False):
    """The batch as `pieces` sub-batches (x, y, mask, outputs_from) of rows sorted by how far
    their scored positions reach, each cut after its last scored position; with trim_front, each
    piece's outputs_from is its first scored position (0 otherwise).

    For a causal model the output at a position never depends on later ones, so columns past a
    row's last scored position change nothing the loss reads: the pieces' summed losses (each over
    the whole batch's count) and their gradients are the batch's, up to float summation order.
    What they save is work on trailing padding (the attention's T x T shrinks quadratically), and
    on a CPU smaller tensors stay in cache. outputs_from lets a core that supports it (a
    transformer's last block) skip the positions before any scored one.
    """
    if pieces <= 1:
        return [(x, y, mask, 0)]
    cols = torch.arange(mask.size(1), device=mask.device)
    reach = torch.where(mask, cols + 1, 0).amax(1)          # 1 + the last scored position
    first = torch.where(mask, cols, mask.size(1)).amin(1)  # the first scored position
    order = torch.argsort(reach, descending=True, stable=True)
    out = []
    for rows in order.tensor_split(pieces):
        if len(rows):
            out.append((rows, reach[rows].max(), first[rows].min()))
    bounds = torch.stack([torch.stack(b) for _, *b in out]).tolist()  # one host sync per step
    return [(x[rows, :w], y[rows, :w], mask[rows, :w], min(f, w - 1) if trim_front else 0)
            for (rows, _, _), (w, f) in zip(out, bounds)]


def fit(model, batches, valid, cfg: TrainConfig, checkpoint: Path, fingerprint: str, *,
        halt_after: int | None = None, progress: bool = True, series=None) -> dict | None:
    """Train `model` in place on `batches` (EpochBatches or StreamBatches) and restore its
    best-validation state (cfg.restore_best). `valid` is the fixed validation set as
    (make_batch, n), or a function model -> {"val_loss": ..., any other numbers} that evaluates
    whatever the task tracks (all of it lands in val_curve).

    Under torch.distributed (torchrun) the model runs wrapped in DistributedDataParallel: every
    rank draws the same global batch and trains on its contiguous share of the rows, the loss
    normalized by the global batch's count, so the averaged gradients are the single-process
    ones; every rank validates, only rank 0 writes the checkpoint.

    `series` (optional, e.g. arithrepro.live.Series) is told every training row as the losses
    reach the host, every validation, and the rows a resumed run starts with (rank 0 only).

    Resumes from `checkpoint` when it holds an unfinished run with the same fingerprint. Returns
    {best_val_loss, best_step, steps, train_seconds, tokens_per_s, train_curve, val_curve};
    returns None when stopped by `halt_after` (a stand-in for a killed process, for tests).
    """
    from arithrepro.device import autocast

    total = batches.steps
    warmup = max(1, round(cfg.warmup_frac * total))
    if cfg.micro_batches > 1 and (cfg.progressive or cfg.outputs_from
                                  or not getattr(model, "causal", True)):
        raise ValueError("micro_batches > 1 needs a causal model and the plain loss")
    # a core whose outputs_from skips work (a transformer's last block) is given each piece's
    # first scored position
    trim_front = getattr(model, "prunes_outputs", False)
    opt = make_optimizer(model, cfg)
    device = next(model.parameters()).device
    recurrences = model.recurrences if cfg.progressive else 0  # before any wrapper
    rank, world = _world()
    runner = model  # what the steps call; it shares the model's parameters
    if world > 1:
        from torch.nn.parallel import DistributedDataParallel

        runner = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    if cfg.compile and _compilable(model):
        runner = torch.compile(runner, mode=cfg.compile if isinstance(cfg.compile, str) else None)
    scaler = torch.amp.GradScaler(device.type, enabled=cfg.precision == "fp16")
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: lr_factor(s, total, warmup, cfg.schedule))
    s = {"step": 0, "best_val_loss": math.inf, "best_step": -1, "best_state": None,
         "train_curve": [], "val_curve": [], "seconds": 0.0, "tokens": 0}
    resumed = _resume(checkpoint, fingerprint, model, opt, sched, scaler, s, rank)
    if rank:
        series = None  # only rank 0 writes
    if series is not None:
        series.start(s["train_curve"], s["val_curve"])

    pending: list[tuple[dict, torch.Tensor]] = []  # steps whose loss is still on the device

    def sync() -> None:
        """Read the pending losses in one transfer; stop at the first non-finite one."""
        if not pending:
            return
        losses = torch.stack([loss for _, loss in pending]).float()
        if world > 1:  # each rank holds its shard's share: the batch's loss is their mean
            torch.distributed.all_reduce(losses)
            losses /= world
        values = losses.cpu().tolist()
        for (row, _), value in zip(pending, values):
            if not math.isfinite(value):
                raise NonFiniteLoss(f"loss became {value} at step {row['step'] - 1} (epoch "
                                    f"{row['epoch']}); lower the learning rate or check the data")
            row["loss"] = value
            s["train_curve"].append(row)
        if series is not None:
            series.train([row for row, _ in pending])
        pending.clear()
        if bar is not None:
            bar.set_postfix(loss=f"{values[-1]:.4f}", best_val=f"{s['best_val_loss']:.4f}")

    def save(finished: bool) -> None:
        sync()
        if rank:
            return  # only rank 0 writes
        save_torch(checkpoint, {
            "fingerprint": fingerprint, "finished": finished, "config": asdict(cfg),
            "model": model.state_dict(), "optimizer": opt.state_dict(),
            "scheduler": sched.state_dict(), "scaler": scaler.state_dict(),
            "rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None, **s})

    def validate(epoch: int) -> None:
        sync()
        if callable(valid):
            model.eval()
            result = valid(model)
            model.train()
        else:
            result = {"val_loss": validation_loss(model, *valid, cfg.eval_batch_size)}
        loss = result["val_loss"]
        s["val_curve"].append({"step": s["step"], "epoch": epoch, **result})
        if series is not None:
            series.val(s["val_curve"][-1])
        if loss < s["best_val_loss"]:
            s.update(best_val_loss=loss, best_step=s["step"])
            if cfg.restore_best:
                s["best_state"] = copy.deepcopy(model.state_dict())

    bar = _bar(total, s["step"], progress and rank == 0, resumed)  # sync() sets its postfix
    model.train()
    while s["step"] < total:
        step = s["step"]
        epoch = batches.epoch(step)
        t0 = time.perf_counter()
        x, y, mask = batches(step)
        tokens, count = mask.numel(), None
        if world > 1:  # every rank draws the global batch (a pure function of the step)
            count = mask[:, cfg.outputs_from:].sum() / world
            lo, hi = rank * len(x) // world, (rank + 1) * len(x) // world
            x, y, mask = x[lo:hi], y[lo:hi], mask[lo:hi]
        opt.zero_grad(set_to_none=True)
        if count is None:
            count = mask[:, cfg.outputs_from:].sum()
        # on a GPU a batch runs whole: a step there is bound by kernel launches, which pieces
        # would multiply
        pieces = micro_batches(x, y, mask, cfg.micro_batches if device.type == "cpu" else 1,
                               trim_front)
        loss = 0.0
        for i, (xp, yp, mp, start) in enumerate(pieces):
            # under DDP, gradients are averaged across ranks once, after the last piece
            last = i == len(pieces) - 1
            with (runner.no_sync() if world > 1 and not last else contextlib.nullcontext()):
                with autocast(device.type, cfg.precision):
                    part = training_loss(runner, xp, yp, mp, recurrences,
                                         start or cfg.outputs_from, count)
                scaler.scale(part).backward()
            loss = loss + part.detach()
        lr = opt.param_groups[0]["lr"]
        scaler.step(opt)
        scaler.update()
        sched.step()
        s["step"] += 1
        pending.append(({"step": s["step"], "epoch": epoch, "loss": None, "lr": lr}, loss.detach()))
        boundary = batches.epoch_end(step) if cfg.validate_epochs else s["step"] == total
        validating = boundary or (cfg.val_every and s["step"] % cfg.val_every == 0)
        saving = s["step"] % cfg.checkpoint_every == 0 or boundary
        # a validation or checkpoint reads back what is queued: wait for it here, so that the
        # training work the device still runs counts as training time, not theirs
        if len(pending) >= cfg.sync_every or s["step"] == total or validating or saving:
            sync()
        # Host time per step: on a GPU it is the time to queue the step unless a sync waited
        # in it; the total over the run is right either way, as every sync waits for all of it.
        dt = time.perf_counter() - t0
        s["seconds"] += dt
        s["tokens"] += tokens
        if validating:
            validate(epoch)
        if bar is not None:
            bar.update(1)
        if saving:
            save(finished=False)
        if halt_after is not None and s["step"] >= halt_after:
            sync()
            if series is not None:
                series.end()
            if bar is not None:
                bar.close()
            return None
    sync()
    if bar is not None:
        bar.close()
    if series is not None:
        series.end()
    save(finished=True)
    if cfg.restore_best:
        model.load_state_dict(s["best_state"])
    return {
        "best_val_loss": s["best_val_loss"], "best_step": s["best_step"], "steps": s["step"],
        "train_seconds": s["seconds"], "tokens_per_s": s["tokens"] / max(s["seconds"], 1e-9),
        "train_curve": s["train_curve"], "val_curve": s["val_curve"],
    }


def _compilable(model) -> bool:
    """A model that says why it cannot compile (`eager_reason`) runs eager, with a warning."""
    reason = getattr(model, "eager_reason", "")
    if not reason:
        return True
    import warnings

    warnings.warn(f"compile: {reason}", stacklevel=3)
    return False


def _world() -> tuple[int, int]:
    """(rank, world size): (0, 1) unless a torch.distributed process group is running."""
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


# What a checkpoint must hold to be resumed, besides the loop's state (scaler and cuda_rng may
# be absent).
CHECKPOINT_KEYS = ("model", "optimizer", "scheduler", "rng")


def _resume(checkpoint: Path, fingerprint: str, model, opt, sched, scaler, s: dict,
            rank: int = 0) -> bool:
    """Restore an unfinished run with this fingerprint from `checkpoint`. One that cannot be
    read or does not fit is set aside and the run starts from step 0: a damaged file must
    neither block the run nor be lost."""
    if not checkpoint.is_file():
        return False
    try:
        ck = torch.load(checkpoint, map_location="cpu", weights_only=False)
    except Exception as err:  # a cut-short zip, random bytes, a pickle of something else
        return _set_aside(checkpoint, f"unreadable ({err})", rank)
    if not isinstance(ck, dict):
        return _set_aside(checkpoint, f"not a checkpoint (a {type(ck).__name__})", rank)
    if ck.get("fingerprint") != fingerprint or ck.get("finished"):
        return False  # another configuration, or a finished run: start afresh
    missing = [k for k in (*CHECKPOINT_KEYS, *s) if k not in ck]
    if missing:
        return _set_aside(checkpoint, f"no {', '.join(missing)}", rank)
    before = _snapshot(model, opt, sched, scaler)
    try:
        _restore(ck, model, opt, sched, scaler)
    except Exception as err:
        # a load that failed part way (load_state_dict copies the weights that fit before it
        # raises) must not leave the fresh run half-restored
        _restore(before, model, opt, sched, scaler)
        return _set_aside(checkpoint, f"does not fit this run ({err})", rank)
    s.update({key: ck[key] for key in s})
    return True


def _snapshot(model, opt, sched, scaler) -> dict:
    """The objects' state laid out as a checkpoint, to undo a resume that failed."""
    return {"model": {k: v.detach().clone() for k, v in model.state_dict().items()},
            "optimizer": copy.deepcopy(opt.state_dict()),
            "scheduler": copy.deepcopy(sched.state_dict()),
            "scaler": copy.deepcopy(scaler.state_dict()), "rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None}


def _restore(ck: dict, model, opt, sched, scaler) -> None:
    model.load_state_dict(ck["model"])
    opt.load_state_dict(ck["optimizer"])
    sched.load_state_dict(ck["scheduler"])
    if ck.get("scaler"):
        scaler.load_state_dict(ck["scaler"])
    torch.set_rng_state(ck["rng"])
    if ck.get("cuda_rng") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(ck["cuda_rng"])


def _set_aside(checkpoint: Path, problem: str, rank: int) -> bool:
    """Rename a checkpoint that cannot be resumed, with one warning; returns False (not resumed)."""
    if rank == 0:  # every rank reads the same file; one moves it
        import warnings

        from arithrepro.io import one_line, set_aside

        moved = set_aside(checkpoint, "unreadable")
        warnings.warn(f"{checkpoint}: {one_line(problem)}; moved to {moved}, training from "
                      "step 0", stacklevel=4)
    return False


def _bar(total: int, done: int, enabled: bool, resumed: bool):
    if not enabled:
        return None
    from tqdm import tqdm

    desc = f"train (resumed at step {done})" if resumed else "train"
    return tqdm(total=total, initial=done, desc=desc, unit="step", dynamic_ncols=True)
