"""What a run trains and validates on, as a task hands it over: batches that are a pure function
of the step (a resumed run recomputes its batches and needs no data-loader state, and every
data-parallel rank can draw the global batch and take its share), and fixed rows the loop
validates on. Below the tasks and the loop alike: a task makes its data of these, train/ reads
them, and neither calls the other."""

from __future__ import annotations

import torch


class EpochBatches:
    """A fixed split in a seeded order per epoch: batch(step) -> (x, y, mask). An epoch is the
    order's whole batches, n // batch_size of them (one batch of all n when n < batch_size):
    the n % batch_size rows left over wait for a later epoch's order rather than make a step of
    their own, whose few rows would move the weights as far as a whole batch (modular's 769
    training equations at batch 256 would train every fourth step on one equation). `steps` ends
    the run at a step count instead of after whole epochs."""

    def __init__(self, make_batch, n: int, batch_size: int, epochs: int, seed: int, device,
                 steps: int | None = None):
        self.make_batch, self.n, self.batch_size, self.seed = make_batch, n, batch_size, seed
        self.per_epoch = max(1, n // batch_size)
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
        self.per_epoch = steps

    def epoch(self, step: int) -> int:
        return 0

    def epoch_end(self, step: int) -> bool:
        return step == self.steps - 1

    def __call__(self, step: int):
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + step)
        return self.sample(self.batch_size, g)


def rows(x, y, mask):
    """A split held as tensors, as the loop validates on it: (make_batch(idx) -> (x, y, mask) of
    those rows, the number of rows)."""
    return (lambda idx: (x[idx], y[idx], mask[idx])), len(y)
