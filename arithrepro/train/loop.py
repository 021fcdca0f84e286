"""fit: the one training loop.

What it takes:
- `batches`: EpochBatches or StreamBatches (arithrepro/batches.py), or an Ensemble's CopiesBatches;
- `valid`: the fixed validation set as (make_batch, n), or a function model -> {"val_loss":
  ..., any other numbers} that evaluates whatever the task tracks (all of it lands in
  val_curve); for an Ensemble, one shared or a list with one per copy (`series` likewise, and
  `cfg`, whose copies may differ in runs.PER_COPY: seed, learning rate, weight decay);
- `spec`: the model's registry entry (models/registry.py), what the loop reads of the model
  (causal, prunes_outputs, eager); None: a causal model that compiles and computes every
  position;
- `observers` (arithrepro.observers.Observer, on every rank, told of every copy) and, on rank
  0, `series` (e.g. arithrepro.live.Series) and the progress bar hear of every training row as
  the losses reach the host, every validation, every step, and the rows a resumed run starts
  with; an observer that raises stops the run there.

Each copy of an Ensemble validates as a standalone model and keeps its own best state, curves
and observers; a copy whose loss becomes non-finite stops there and its result is {"failed":
why}, and when no copy is left (one model: at once) the run stops with NonFiniteLoss. An
ensemble's train_seconds are all copies' together.

Under torch.distributed (torchrun) the model runs wrapped in DistributedDataParallel: every
rank draws the same global batch and trains on its contiguous share of the rows; every rank
validates, only rank 0 writes the checkpoint and tells the series.

It resumes from `checkpoint` when that holds an unfinished run with the same fingerprint.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch

from arithrepro.checkpoint import Checkpoint
from arithrepro.train.config import TrainConfig, shared
from arithrepro.train.ensembles import ensemble_of
from arithrepro.train.parts import Parts
from arithrepro.train.step import Step
from arithrepro.train.track import Tracker


def fit(model, batches, valid, cfg: TrainConfig | list, checkpoint: Path, fingerprint: str, *,
        spec=None, progress: bool = True, series=None, observers: tuple = ()):
    """Train `model` in place on `batches` (EpochBatches, StreamBatches, or an ensemble's
    CopiesBatches) and restore its best-validation state (cfg.restore_best); returns
    {best_val_loss, best_step, steps, train_seconds, tokens_per_s, train_curve, val_curve},
    an Ensemble a list of those (the module's docstring says the rest)."""
    total, (rank, world) = batches.steps, _world()
    ens = ensemble_of(model)
    copies = ens.per_copy(cfg, "cfg")
    cfg = shared(copies)
    parts = Parts.of(model, cfg, total, world, spec, copies)
    step = Step(parts, cfg, rank, world, spec)
    track = Tracker(ens, cfg, total, valid, series, observers, rank, world, progress)
    ck = Checkpoint(checkpoint, fingerprint, rank)
    resumed = ck.resume(parts, track.states)
    parts.place_rates(cfg)  # a resumed optimizer's rates come back from the host
    track.tell("start", track.states, [resumed] * ens.members)
    try:
        model.train()
        while track.step < total:
            n, t0 = track.step, time.perf_counter()
            epoch = batches.epoch(n)
            x, y, mask = ens.stack(*batches(n))
            loss, lr = step(x, y, mask)
            boundary = batches.epoch_end(n) if cfg.validate_epochs else n + 1 == total
            n += 1
            validating = boundary or (cfg.val_every and n % cfg.val_every == 0)
            saving = n % cfg.checkpoint_every == 0 or boundary
            track.at_step(n)
            track.losses.add({"step": n, "epoch": epoch, "loss": None, "lr": lr}, loss)
            # a validation or checkpoint reads back what is queued: wait for it here, so that
            # the training work the device still runs counts as training time, not theirs
            if len(track.losses) >= cfg.sync_every or n == total or validating or saving:
                track.flush()
            # Host time per step: on a GPU it is the time to queue the step unless a flush
            # waited in it; the total is right either way, as every flush waits for all of it.
            track.spent(time.perf_counter() - t0, mask[0].numel())
            if validating:
                track.validate(epoch)
            if saving:
                ck.save(parts, track.states, cfg, finished=False)
            track.tell("step", track.states)
        track.flush()
    finally:
        step.close()
        track.end()
    ck.save(parts, track.states, cfg, finished=True)
    return track.results()


def fit_copies(model, batches, valid, cfg: TrainConfig | list, checkpoint: Path,
               fingerprint: str, **kwargs) -> list[tuple[dict, object]]:
    """`fit`, then one (result, trained model) per copy: one model's own, or each copy of an
    Ensemble as a standalone model (None for a copy that failed)."""
    ens = ensemble_of(model)
    results = ens.per_copy(fit(model, batches, valid, cfg, checkpoint, fingerprint, **kwargs),
                           "results")
    return [(r, None if "failed" in r else ens.copy_of(i)) for i, r in enumerate(results)]


def _world() -> tuple[int, int]:
    """(rank, world size): (0, 1) unless a torch.distributed process group is running."""
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1
