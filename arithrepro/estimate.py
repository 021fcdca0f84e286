"""Projected training time: a few steps of a run timed through the one training loop (fit), on
the current device, precision and compile setting, scaled by the run's steps and validations.

A step's time depends on the shapes (model, batch, sequence length), not on the values, so
each distinct shape is timed once and every run of that shape is projected from it.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from arithrepro.train.loop import fit


@dataclass(frozen=True)
class Timing:
    step_s: float        # one training step
    validation_s: float  # one validation pass


@dataclass(frozen=True)
class Projection:
    task: str
    label: str
    runs: int            # runs of this shape in the profile
    steps: int           # training steps per run
    validations: int     # validation passes per run
    timing: Timing       # timing.step_s: one step of all `members` at once
    members: int = 1     # runs trained together as one ensemble (1: each alone)

    @property
    def jobs(self) -> int:
        """Processes that train the shape's runs: one per ensemble, or one per run."""
        return 1 if self.members > 1 else self.runs

    @property
    def run_s(self) -> float:
        """One job: a run, or the ensemble of all of them (each member validated apart)."""
        return (self.steps * self.timing.step_s
                + self.validations * self.timing.validation_s * self.members)

    @property
    def total_s(self) -> float:
        return self.jobs * self.run_s


def validations(batches, cfg) -> int:
    """How many times fit validates over the run of `batches` (its rule, step by step)."""
    total, count = batches.steps, 0
    for step in range(total):
        done = step + 1
        boundary = batches.epoch_end(step) if cfg.validate_epochs else done == total
        count += bool(boundary or (cfg.val_every and done % cfg.val_every == 0))
    return count


class _Clock:
    """A run's batches, cut to `stop + 1` steps, timing steps start..stop-1: the device is
    synchronized when the batches of steps `start` and `stop` are drawn."""

    def __init__(self, batches, start: int, stop: int, device: torch.device):
        self.batches, self.start, self.stop, self.device = batches, start, stop, device
        self.steps, self.seconds, self._t0 = stop + 1, 0.0, 0.0

    def epoch(self, step: int) -> int:
        return self.batches.epoch(step)

    def epoch_end(self, step: int) -> bool:
        return False

    def __call__(self, step: int):
        if step in (self.start, self.stop):
            _synchronize(self.device)
            if step == self.start:
                self._t0 = time.perf_counter()
            else:
                self.seconds = time.perf_counter() - self._t0
        return self.batches(step)


# how far the static step's keys are walked before timing (the paper profile's runs show every
# key within their first 41 steps: benchmarks/graph_keys.py, docs/benchmarks.md)
SETTLE_STEPS = 400


def graph_keys(model, cfg, batches, steps: int) -> list[int]:
    """The steps at which the static step (train/graphs.py) meets a key it has not captured yet
    (StaticBatch.key: the batch's shape after its padding, and what the step draws on the host:
    a progressive loss's exit depth, a looped encoder's loop count), over the first `steps`
    steps. Trains nothing; torch's random state is left as it was."""
    from arithrepro.train.ensembles import ensemble_of
    from arithrepro.train.graphs import StaticBatch

    ens = ensemble_of(model)
    static = StaticBatch(ens.template, cfg)
    state, mode = torch.random.get_rng_state(), ens.template.training
    ens.template.train()
    seen, first = set(), []
    try:
        for step in range(min(steps, batches.steps)):
            x, _, _, kw = static(*ens.stack(*batches(step)))
            key = static.key(x, kw)
            if key not in seen:
                seen.add(key)
                first.append(step)
    finally:
        torch.random.set_rng_state(state)
        ens.template.train(mode)
    return first


def time_steps(model, batches, cfg, warmup: int, timed: int, spec=None) -> float:
    """Seconds per training step of `model` (`spec`: its registry entry) on `batches` under
    `cfg`, through fit: `warmup` untimed steps (first-step allocation, torch.compile), then
    `timed` steps. Under the static step (cfg.graphs) the warm-up runs on to twice the last step
    of the first SETTLE_STEPS that meets a new key, so that the timed steps replay graphs rather
    than capture them: a capture costs a few steps once, a run replays for thousands."""
    if warmup < 1 or timed < 1:
        raise ValueError(f"warmup = {warmup}, timed = {timed}: expected at least 1 of each")
    if cfg.graphs:
        first = graph_keys(model, cfg, batches, SETTLE_STEPS)
        # twice as far: the step's own draws come in another order than the walk's
        warmup = max(warmup, 2 * (first[-1] + 1) if first else 0)
        if warmup + timed >= batches.steps:   # a run shorter than that: as far as it goes
            warmup = max(1, batches.steps - timed - 1)
    device = next(model.parameters()).device
    clock = _Clock(batches, warmup, warmup + timed, device)
    quick = replace(cfg, val_every=0, validate_epochs=False, restore_best=False,
                    checkpoint_every=clock.steps + 1)
    with tempfile.TemporaryDirectory() as tmp:
        fit(model, clock, lambda m: {"val_loss": 0.0}, quick, Path(tmp) / "timed.ckpt",
            "estimate", spec=spec, progress=False)
    return clock.seconds / timed


def time_call(fn, device: torch.device, repeats: int = 3, budget: float | None = 2.0) -> float:
    """Median seconds of fn() over up to `repeats` calls (fewer once they add up to `budget`
    seconds; None: all of them), after one untimed call (allocations, kernel choice)."""
    fn()
    times = []
    while len(times) < repeats and (budget is None or sum(times) < budget):
        _synchronize(device)
        t0 = time.perf_counter()
        fn()
        _synchronize(device)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def forward_seconds(model, x, precision: str) -> float:
    """Seconds per sample of a forward pass without gradients over the batch x: validation's
    cost (it runs the same sequences in larger batches)."""
    from arithrepro.device import autocast

    @torch.no_grad()
    def forward():
        with autocast(x.device.type, precision):
            model(x)

    was = model.training
    model.eval()
    try:
        return time_call(forward, x.device) / len(x)
    finally:
        model.train(was)


def _synchronize(device: torch.device) -> None:
    """Wait for the device's queued work: a CUDA call returns once its kernels are queued."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def makespan(seconds: list[float], devices: int) -> float:
    """The wall time of independent runs on `devices` devices, each run started on the device
    that frees first, longest runs first (LPT: within 4/3 of the best order)."""
    import heapq

    free = [0.0] * max(1, devices)
    for s in sorted(seconds, reverse=True):
        heapq.heapreplace(free, free[0] + s)
    return max(free)


def hours(seconds: float) -> str:
    """A duration for people: seconds, minutes, hours or days."""
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.1f} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"
