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
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F

from arithrepro.checkpoint import Checkpoint
from arithrepro.observers import FiniteLoss, Live, NonFiniteLoss, Progress  # noqa: F401 (NonFiniteLoss: the loop's error)


@dataclass(frozen=True)
class TrainConfig:
    lr: float
    seed: int
    optimizer: str = "lamb"     # lamb | adam | adamw
    schedule: str = "linear"    # after the warm-up: linear (decay to 0 at the end) | constant
    warmup_frac: float = 0.1
    weight_decay: float = 0.0
    beta2: float = 0.999        # Adam's second-moment decay (adam, adamw)
    eps: float = 1e-8           # added to Adam's update denominator (adam, adamw; torch's default)
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
    grad_clip: float = 0.0      # scale the gradients to this L2 norm at most before each step
                                # (torch's clip_grad_norm_; an ensemble's copies each their own);
                                # 0: no clipping
    graphs: bool = False        # every step at a static shape, reading nothing from the device
                                # (Step); on a GPU each shape's whole step is captured once as a
                                # CUDA graph and replayed


def lr_factor(step: int, total: int, warmup: int, schedule: str = "linear") -> float:
    """Linear warm-up from 0 over `warmup` steps, then linear decay to 0 at `total` or constant.
    As in the expr source's scheduler: the factor at step s < warmup is s / warmup, so the first
    step runs at rate 0 (the optimizer's moments still take its gradient)."""
    if step < warmup:
        return step / warmup
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
    # where the step is captured as a CUDA graph, the optimizers' step counts stay on the GPU
    on_gpu = next(model.parameters()).device.type == "cuda"
    if cfg.optimizer == "lamb":  # torch-optimizer's Lamb, stepped over all parameters at once
        from arithrepro.optim import ForeachLamb

        blocks = {p: k for m in model.modules() if hasattr(m, "lamb_blocks")
                  for p, k in m.lamb_blocks().items()}
        return ForeachLamb(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay,
                           blocks=blocks, capturable=on_gpu and cfg.graphs)
    if cfg.optimizer in ("adam", "adamw"):
        kind = torch.optim.AdamW if cfg.optimizer == "adamw" else torch.optim.Adam
        return kind(model.parameters(), lr=cfg.lr, betas=(0.9, cfg.beta2), eps=cfg.eps,
                    weight_decay=cfg.weight_decay, capturable=on_gpu and cfg.graphs)
    raise ValueError(f"optimizer {cfg.optimizer!r}: expected lamb, adam or adamw")


def training_loss(model, x, y, mask, recurrences: int = 0, outputs_from: int = 0,
                  count: torch.Tensor | None = None) -> torch.Tensor:
    """Mean cross-entropy over the scored positions. `recurrences`: R of a looped model trained
    with the progressive loss (0: the plain loss). `count`: the number of positions the mean
    is over, when x is a data-parallel shard (the global batch's count over the world size), so
    that the ranks' averaged gradients are the whole batch's."""
    outs = _outputs(model, x, recurrences, outputs_from)
    y, mask = y[..., outputs_from:], mask[..., outputs_from:]
    if count is None:
        count = mask.sum()
    return sum(F.cross_entropy(o[mask], y[mask], reduction="sum") for o in outs) / (count * len(outs))


def masked_loss(model, x, y, mask, recurrences: int = 0, outputs_from: int = 0,
                count: torch.Tensor | None = None, copies: bool = False, exit_at: int | None = None,
                **drawn) -> torch.Tensor:
    """training_loss computed over every position with the unscored ones zeroed, instead of
    gathering the scored ones: no shape depends on the mask's values, so the step needs nothing
    from the device (a CUDA graph's static step). copies: an Ensemble's x, y, mask (E, B, ...)
    -> each copy's mean over its own positions (E,). exit_at and `drawn` (the model's host
    draws, see Ensemble): drawn by the caller, for a step whose shapes are fixed in advance."""
    outs = _outputs(model, x, recurrences, outputs_from, exit_at, **drawn)
    y, mask = y[..., outputs_from:], mask[..., outputs_from:]
    dims = tuple(range(1 if copies else 0, mask.dim()))
    if count is None:
        count = mask.sum(dims)
    total = 0.0
    for o in outs:
        nll = F.cross_entropy(o.flatten(0, -2), y.flatten(), reduction="none").view(y.shape)
        total = total + nll.masked_fill(~mask, 0.0).sum(dims)
    return total / (count * len(outs))


def copies_loss(model, x, y, mask, recurrences: int = 0, outputs_from: int = 0,
                count: torch.Tensor | None = None, **kw) -> torch.Tensor:
    """training_loss of an Ensemble's copies (arithrepro/ensemble.py): x, y, mask (E, B, ...)
    -> each copy's mean cross-entropy over its own scored positions (E,). A progressive loss's
    exit depth is drawn once for all copies. `count`: (E,) positions per copy."""
    return masked_loss(model, x, y, mask, recurrences, outputs_from, count, copies=True, **kw)


def _outputs(model, x, recurrences: int, outputs_from: int, exit_at: int | None = None,
             **drawn) -> list:
    """The outputs the loss scores: [logits], or a progressive loss's [at R, at n] with n drawn
    here in 1..R unless given."""
    if outputs_from:
        return [model(x, outputs_from=outputs_from, **drawn)]
    if not recurrences:
        return [model(x, **drawn)]
    n = exit_at if exit_at is not None else int(torch.randint(1, recurrences + 1, ()))
    return model(x, exit_at=n, **drawn)  # [at R] or [at R, at n]


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


@dataclass
class State:
    """What the loop carries from step to step (and a checkpoint holds)."""
    step: int = 0
    best_val_loss: float = math.inf
    best_step: int = -1
    best_state: dict | None = None
    train_curve: list = field(default_factory=list)
    val_curve: list = field(default_factory=list)
    seconds: float = 0.0
    tokens: int = 0
    failed: str = ""  # an ensemble's copy that stopped: why (a single run raises instead)


@dataclass
class Parts:
    """The model and what trains it: the optimizer, its schedule, the gradient scaler, and
    `runner`, what the steps call (the model, under DDP and torch.compile as asked)."""
    model: object
    runner: object
    opt: object
    sched: object
    scaler: object

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
        if cfg.compile and _compilable(spec or _PLAIN):
            runner = torch.compile(runner, mode=cfg.compile if isinstance(cfg.compile, str) else None)
        scaler = torch.amp.GradScaler(device.type, enabled=cfg.precision == "fp16")
        for group in opt.param_groups:
            # the schedule's base rate stays a float: from a tensor it would read it back
            group["initial_lr"] = float(group["lr"])
        parts = cls(model, runner, opt, None, scaler)
        parts.place_rates(cfg)
        parts.sched = torch.optim.lr_scheduler.LambdaLR(
            opt, lambda s: lr_factor(s, total, warmup, cfg.schedule))
        return parts

    def place_rates(self, cfg: TrainConfig) -> None:
        """Under graphs on a GPU, each group's rate as a tensor on the device, which the
        scheduler fills in place and a captured step reads (after a resume too: a loaded
        optimizer's rates are the checkpoint's, on the host)."""
        device = next(self.model.parameters()).device
        if not (cfg.graphs and device.type == "cuda"):
            return
        for group in self.opt.param_groups:
            rate = group["lr"]
            if not (torch.is_tensor(rate) and rate.device == device):
                group["lr"] = torch.tensor(float(rate), device=device)


class Step:
    """One optimizer step on a global batch: this rank's share of its rows (the loss normalized
    by the global count, so DDP's averaged gradients are the whole batch's), the micro-batches
    on a CPU, autocast and the gradient scaler. Returns the loss (on the device) and the
    learning rate it stepped with."""

    def __init__(self, parts: Parts, cfg: TrainConfig, rank: int, world: int, spec=None):
        model, spec = parts.model, spec or _PLAIN
        if cfg.micro_batches > 1 and (cfg.progressive or cfg.outputs_from or not spec.causal):
            raise ValueError("micro_batches > 1 needs a causal model and the plain loss")
        self.copies = copies_of(model)
        self.parts, self.cfg, self.rank, self.world = parts, cfg, rank, world
        self.device = next(model.parameters()).device
        if self.copies and cfg.micro_batches > 1 and self.device.type == "cpu":
            raise ValueError("micro_batches > 1 cuts one model's batch into pieces; an "
                             "ensemble's copies run whole batches (micro_batches: 1)")
        if self.copies and cfg.precision == "fp16":
            raise ValueError("precision fp16: its gradient scaler would skip every copy's step "
                             "when one copy overflows; an ensemble trains in fp32 or bf16")
        single = model.template if self.copies else model
        self.recurrences = single.recurrences if cfg.progressive else 0  # before any wrapper
        # a core whose outputs_from skips work (a transformer's last block) is given each
        # piece's first scored position
        self.trim_front = spec.prunes_outputs
        # on a GPU a batch runs whole: a step there is bound by kernel launches, which pieces
        # would multiply
        self.pieces = cfg.micro_batches if self.device.type == "cpu" else 1
        self.single, self.restore = single, []
        if cfg.graphs:
            self._static_setup(world)

    def close(self) -> None:
        """Give the model back as the static step found it (its recurrences skip padding
        again)."""
        for m, own in self.restore:
            if own is None:
                m.__dict__.pop("skip_padding", None)
            else:
                m.skip_padding = own

    def __call__(self, x, y, mask):
        from arithrepro.device import autocast

        if self.cfg.graphs:
            return self._static(x, y, mask)
        p, cfg, world, copies = self.parts, self.cfg, self.world, self.copies
        # an ensemble's tensors are (E, B, ...): its rows are along dim 1
        rows = (slice(None),) if copies else ()
        count = None
        if world > 1:  # every rank draws the global batch (a pure function of the step)
            count = self._count(mask) / world
            B = mask.size(len(rows))
            share = (*rows, slice(self.rank * B // world, (self.rank + 1) * B // world))
            x, y, mask = x[share], y[share], mask[share]
        p.opt.zero_grad(set_to_none=True)
        if count is None:
            count = self._count(mask)
        pieces = micro_batches(x, y, mask, self.pieces, self.trim_front)
        loss_of = copies_loss if copies else training_loss
        loss = 0.0
        for i, (xp, yp, mp, start) in enumerate(pieces):
            # under DDP, gradients are averaged across ranks once, after the last piece
            last = i == len(pieces) - 1
            with (p.runner.no_sync() if world > 1 and not last else contextlib.nullcontext()):
                with autocast(self.device.type, cfg.precision):
                    part = loss_of(p.runner, xp, yp, mp, self.recurrences,
                                   start or cfg.outputs_from, count)
                # the copies' losses summed: each copy's weights get its own loss's gradient
                p.scaler.scale(part.sum() if copies else part).backward()
            loss = loss + part.detach()
        lr = p.opt.param_groups[0]["lr"]
        if cfg.grad_clip:
            p.scaler.unscale_(p.opt)
            clip_gradients(p.model, cfg.grad_clip, copies)
        p.scaler.step(p.opt)
        p.scaler.update()
        p.sched.step()
        return loss.detach(), lr

    def _count(self, mask: torch.Tensor) -> torch.Tensor:
        """The scored positions: of the batch, or of each copy's (E,)."""
        if self.copies:
            return mask[:, :, self.cfg.outputs_from:].flatten(1).sum(1)
        return mask[:, self.cfg.outputs_from:].sum()

    # --- the static step (cfg.graphs) ---------------------------------------------------------
    # Every batch is padded to the largest shape seen so far (unscored rows and columns), the
    # loss zeroes unscored positions instead of gathering the scored ones (masked_loss), the
    # recurrences run every row at every step (skip_padding off), and what the step draws on the
    # host (a progressive loss's depth, a looped encoder's extra loops) is drawn before it, in
    # the order the eager step draws it. On a CPU that step runs as it is (tests compare it with
    # the eager one); on a GPU each (shape, draws) is captured once as a CUDA graph of the whole
    # step, forward, backward and optimizer, and replayed.

    def _static_setup(self, world: int) -> None:
        cfg = self.cfg
        if world > 1:
            raise ValueError("graphs: one process (DistributedDataParallel's collectives are "
                             "not captured here)")
        if cfg.precision == "fp16":
            raise ValueError("graphs: fp16's gradient scaler reads the device every step; train "
                             "in bf16 or fp32")
        if self.pieces > 1:
            raise ValueError("graphs: micro_batches > 1 cut batches by their values "
                             "(micro_batches: 1)")
        for m in self.single.modules():
            if hasattr(type(m), "skip_padding"):
                self.restore.append((m, m.__dict__.get("skip_padding")))
                m.skip_padding = False
        self.pad_id = getattr(self.single, "pad_id", None)
        self.shape = (0, 0)
        self.graphs, self.pool, self.ready = {}, None, False

    def _static(self, x, y, mask):
        p, cfg = self.parts, self.cfg
        x, y, mask = self._pad(x, y, mask)
        count = self._count(mask)
        kw = {}
        if self.recurrences and not cfg.outputs_from:  # as _outputs draws it
            kw["exit_at"] = int(torch.randint(1, self.recurrences + 1, ()))
        if hasattr(self.single, "shared_draw") and self.single.training:
            drawn = self.single.shared_draw(x[0] if self.copies else x)
            kw.update({"drawn": drawn} if self.copies else drawn)
        # the rate on the host, as LambdaLR computes it (a GPU's is a tensor on the device)
        lr = cfg.lr * p.sched.lr_lambdas[0](p.sched.last_epoch)
        if self.device.type == "cuda":
            loss = self._replay(x, y, mask, count, kw)
        else:
            p.opt.zero_grad(set_to_none=True)
            loss = self._body(x, y, mask, count, kw)
        p.sched.step()
        return loss, lr

    def _body(self, x, y, mask, count, kw) -> torch.Tensor:
        """Forward, backward and the optimizer's step at a static shape; the loss (detached)."""
        from arithrepro.device import autocast

        p = self.parts
        with autocast(self.device.type, self.cfg.precision):
            loss = masked_loss(p.runner, x, y, mask, self.recurrences, self.cfg.outputs_from,
                               count, copies=bool(self.copies), **kw)
        (loss.sum() if self.copies else loss).backward()
        if self.cfg.grad_clip:
            clip_gradients(p.model, self.cfg.grad_clip, self.copies)
        p.opt.step()
        return loss.detach()

    def _pad(self, x, y, mask):
        """The batch at the largest shape seen so far: extra rows unscored (a language model's
        all padding), extra columns (a language model's) its padding token, unscored."""
        r = 1 if self.copies else 0
        B, T = mask.shape[r], mask.shape[r + 1]
        wide = self.pad_id is not None  # only a causal language model takes extra columns
        self.shape = (max(self.shape[0], B), max(self.shape[1], T) if wide else T)
        rows, cols = self.shape
        if (rows, cols) == (B, T):
            return x, y, mask
        fill = self.pad_id if wide else 0
        out = []
        for t, value in ((x, fill), (y, 0), (mask, False)):
            shape = list(t.shape)
            shape[r], shape[r + 1] = rows, cols
            padded = t.new_full(shape, value)
            padded[(slice(None),) * r + (slice(0, B), slice(0, T))] = t
            out.append(padded)
        return tuple(out)

    def _replay(self, x, y, mask, count, kw) -> torch.Tensor:
        key = (tuple(x.shape), repr(sorted(kw.items())))
        if key not in self.graphs:
            self.graphs[key] = self._capture(x, y, mask, count, kw)
        inputs, graph, loss = self.graphs[key]
        for static, t in zip(inputs, (x, y, mask, count)):
            static.copy_(t)
        graph.replay()
        return loss.clone()

    def _capture(self, x, y, mask, count, kw):
        """One CUDA graph of the whole step at this shape: a warm-up forward and backward on a
        side stream (no optimizer step), then the capture, which trains nothing until replayed."""
        from arithrepro.device import autocast

        p = self.parts
        if not self.ready:
            _init_optimizer_state(p.opt)
            self.pool, self.ready = torch.cuda.graph_pool_handle(), True
        inputs = [t.clone() for t in (x, y, mask, count)]
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                p.opt.zero_grad(set_to_none=True)
                with autocast(self.device.type, self.cfg.precision):
                    loss = masked_loss(p.runner, *inputs[:3], self.recurrences,
                                       self.cfg.outputs_from, inputs[3],
                                       copies=bool(self.copies), **kw)
                (loss.sum() if self.copies else loss).backward()
        torch.cuda.current_stream().wait_stream(side)
        p.opt.zero_grad(set_to_none=True)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            loss = self._body(*inputs, kw)
        return inputs, graph, loss


def clip_gradients(model, max_norm: float, copies: int = 0) -> None:
    """Scale the gradients so that their L2 norm is at most `max_norm`, as torch's
    clip_grad_norm_ does (coefficient max_norm / (norm + 1e-6), at most 1); an ensemble's
    gradients are stacked per copy along dim 0, and each copy is scaled by its own norm."""
    grads = [q.grad for q in model.parameters() if q.grad is not None]
    if not grads:
        return
    if not copies:
        torch.nn.utils.clip_grad_norm_([q for q in model.parameters() if q.grad is not None],
                                       max_norm, foreach=True)
        return
    norms = torch.stack([g.float().pow(2).flatten(1).sum(1) for g in grads]).sum(0).sqrt()  # (E,)
    coef = (max_norm / (norms + 1e-6)).clamp(max=1.0)
    for g in grads:
        g.mul_(coef.view(-1, *([1] * (g.dim() - 1))).to(g.dtype))


def _init_optimizer_state(opt) -> None:
    """Make the optimizer's state exist before a capture (a captured first step would zero it at
    every replay): one step at rate 0 on zero gradients for the parameters that have none yet,
    after which their state is zeroed (moments and step counts); every other tensor, a resumed
    run's state and the parameters themselves, is put back as it was, in place."""
    params = [q for g in opt.param_groups for q in g["params"]]
    fresh = {id(q) for q in params if not opt.state.get(q)}
    if not fresh:
        return
    kept = {id(t): t.detach().clone() for q in params
            for t in [q, *(v for v in opt.state.get(q, {}).values() if torch.is_tensor(v))]}
    counts = {q: dict(st) for q, st in opt.state.items()}
    rates = []
    for g in opt.param_groups:
        if torch.is_tensor(g["lr"]):  # the scheduler's tensor: keep the object, zero its value
            rates.append(g["lr"].clone())
            g["lr"].fill_(0.0)
        else:
            rates.append(g["lr"])
            g["lr"] = 0.0
        for q in g["params"]:
            q.grad = torch.zeros_like(q) if id(q) in fresh else None
    opt.step()
    for g, rate in zip(opt.param_groups, rates):
        if torch.is_tensor(g["lr"]):
            g["lr"].copy_(rate)
        else:
            g["lr"] = rate
    with torch.no_grad():
        for q in params:
            state = opt.state.get(q, {})
            if id(q) in fresh:
                for key, v in state.items():
                    if torch.is_tensor(v):
                        v.zero_()
                    elif key == "step":
                        state[key] = 0
            else:
                for key, v in counts[q].items():
                    if torch.is_tensor(v):
                        state[key].copy_(kept[id(v)])
                    else:
                        state[key] = v
            q.copy_(kept[id(q)])
    opt.zero_grad(set_to_none=True)


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
        out = [[{**row, "loss": v[e]} for row, v in zip(self.rows, values)] for e in range(copies)]
        self.rows, self.values = [], []
        return out


def copies_of(model) -> int:
    """How many copies `model` trains together: an Ensemble's size, 0 for one model."""
    from arithrepro.ensemble import Ensemble

    return model.size if isinstance(model, Ensemble) else 0


def fit(model, batches, valid, cfg: TrainConfig, checkpoint: Path, fingerprint: str, *,
        spec=None, progress: bool = True, series=None, observers: tuple = ()):
    """Train `model` in place on `batches` (EpochBatches or StreamBatches) and restore its
    best-validation state (cfg.restore_best). `valid` is the fixed validation set as
    (make_batch, n), or a function model -> {"val_loss": ..., any other numbers} that evaluates
    whatever the task tracks (all of it lands in val_curve).

    An Ensemble (arithrepro/ensemble.py) trains its copies as one model: `batches` gives their
    batches stacked (CopiesBatches), `valid` and `series` may be lists with one per copy, each copy
    validates as a standalone model and keeps its own best state, curves and observers, and the
    result is a list with each copy's. A copy whose loss becomes non-finite stops there and its
    result is {"failed": the message}; the others go on (a single model's run raises instead).

    Under torch.distributed (torchrun) the model runs wrapped in DistributedDataParallel: every
    rank draws the same global batch and trains on its contiguous share of the rows (`Step`);
    every rank validates, only rank 0 writes the checkpoint and tells the observers.

    `observers` (arithrepro.observers.Observer, on every rank, told of every copy) and, on rank
    0, `series` (e.g. arithrepro.live.Series) and the progress bar hear of every training row as
    the losses reach the host, every validation, every step, and the rows a resumed run starts
    with; an observer that raises stops the run there (a non-finite loss does, through
    FiniteLoss, unless it is one copy's of several).

    `spec`: the model's registry entry (models/registry.py), what the loop reads of the model
    (causal, prunes_outputs, eager); None: a causal model that compiles and computes every
    position.

    Resumes from `checkpoint` when it holds an unfinished run with the same fingerprint. Returns
    {best_val_loss, best_step, steps, train_seconds, tokens_per_s, train_curve, val_curve}
    (an ensemble: a list of those). An ensemble's train_seconds are all copies' together.
    """
    total = batches.steps
    rank, world = _world()
    parts = Parts.of(model, cfg, total, world, spec)
    step = Step(parts, cfg, rank, world, spec)
    copies = step.copies
    lanes = range(max(1, copies))
    states = [State() for _ in lanes]
    losses, ck = Losses(world), Checkpoint(checkpoint, fingerprint, rank)
    resumed = ck.resume(parts, states)
    parts.place_rates(cfg)  # a resumed optimizer's rates come back from the host
    sinks = (series or [None] * len(lanes)) if copies else [series]
    valids = valid if copies and isinstance(valid, list) else [valid] * len(lanes)
    told = [[FiniteLoss(), *observers, *([Live(s)] if rank == 0 and s else [])] for s in sinks]
    bar = [Progress(total)] if rank == 0 and progress else []
    if copies and len(sinks) != len(lanes):
        raise ValueError(f"series: {len(sinks)} for an ensemble of {len(lanes)} copies")
    if copies and len(valids) != len(lanes):
        raise ValueError(f"valid: {len(valids)} sets for an ensemble of {len(lanes)} copies")

    def tell(hook: str, *args) -> None:
        """Tell every copy's observers (args: per-copy lists), then the progress bar copy 0's."""
        for e in lanes:
            if states[e].failed:
                continue
            try:
                _tell(told[e], hook, *(a[e] for a in args))
            except NonFiniteLoss as err:
                if not copies:
                    raise
                states[e].failed = str(err)  # this copy stops; the others, independent, go on
        _tell(bar, hook, *(a[0] for a in args))
        if all(st.failed for st in states):
            raise NonFiniteLoss(f"every copy stopped: {states[0].failed}")

    tell("start", states, [resumed] * len(lanes))

    def flush() -> None:
        rows = losses.take(len(lanes))
        tell("train", rows, states)
        for st, r in zip(states, rows):
            st.train_curve.extend(r)

    try:
        model.train()
        while states[0].step < total:
            n = states[0].step
            epoch = batches.epoch(n)
            t0 = time.perf_counter()
            x, y, mask = batches(n)
            loss, lr = step(x, y, mask)
            boundary = batches.epoch_end(n) if cfg.validate_epochs else n + 1 == total
            n += 1
            for st in states:
                st.step = n
            losses.add({"step": n, "epoch": epoch, "loss": None, "lr": lr}, loss)
            validating = boundary or (cfg.val_every and n % cfg.val_every == 0)
            saving = n % cfg.checkpoint_every == 0 or boundary
            # a validation or checkpoint reads back what is queued: wait for it here, so that
            # the training work the device still runs counts as training time, not theirs
            if len(losses) >= cfg.sync_every or n == total or validating or saving:
                flush()
            # Host time per step: on a GPU it is the time to queue the step unless a flush
            # waited in it; the total is right either way, as every flush waits for all of it.
            seconds = time.perf_counter() - t0
            for st in states:
                st.seconds += seconds
                st.tokens += mask[0].numel() if copies else mask.numel()
            if validating:
                rows = [None if states[e].failed else
                        _validate(model, valids[e], cfg, states[e], epoch, e if copies else None)
                        for e in lanes]
                tell("val", rows)
            if saving:
                ck.save(parts, states, cfg, finished=False)
            tell("step", states)
        flush()
    finally:
        step.close()
        for e in lanes:
            _tell(told[e], "end")
        _tell(bar, "end")
    ck.save(parts, states, cfg, finished=True)
    results = []
    for e in lanes:
        st = states[e]
        if copies and cfg.restore_best and st.best_state is None and not st.failed:
            st.failed = "no validation loss was finite: no best state to restore"
        if st.failed:
            results.append({"failed": st.failed})
            continue
        if cfg.restore_best:
            if copies:
                model.load_state_of(e, st.best_state)
            else:
                model.load_state_dict(st.best_state)
        results.append({
            "best_val_loss": st.best_val_loss, "best_step": st.best_step, "steps": st.step,
            "train_seconds": st.seconds, "tokens_per_s": st.tokens / max(st.seconds, 1e-9),
            "train_curve": st.train_curve, "val_curve": st.val_curve,
        })
    return results if copies else results[0]


def _tell(observers, hook: str, *args) -> None:
    for o in observers:
        getattr(o, hook)(*args)


def _validate(model, valid, cfg: TrainConfig, state: State, epoch: int,
              index: int | None = None) -> dict:
    """Score the validation set, note the row, keep the best state; returns the row. index: an
    ensemble's copy, scored as the standalone model it is (Ensemble.copy_of)."""
    net = model if index is None else model.copy_of(index)
    if callable(valid):
        net.eval()
        result = valid(net)
        net.train()
    else:
        result = {"val_loss": validation_loss(net, *valid, cfg.eval_batch_size)}
    row = {"step": state.step, "epoch": epoch, **result}
    state.val_curve.append(row)
    if result["val_loss"] < state.best_val_loss:
        state.best_val_loss, state.best_step = result["val_loss"], state.step
        if cfg.restore_best:
            state.best_state = (copy.deepcopy(model.state_dict()) if index is None
                                else model.state_of(index))
    return row


@dataclass(frozen=True)
class _Unregistered:
    """What the loop assumes of a model without a registry entry (ModelSpec's defaults)."""
    causal: bool = True
    prunes_outputs: bool = False
    eager: str = ""


_PLAIN = _Unregistered()


def _compilable(spec) -> bool:
    """A model whose registry entry says why it cannot compile (`eager`) runs eager, with a
    warning."""
    if not spec.eager:
        return True
    import warnings

    warnings.warn(f"compile: runs eager ({spec.eager})", stacklevel=3)
    return False


def _world() -> tuple[int, int]:
    """(rank, world size): (0, 1) unless a torch.distributed process group is running."""
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1
