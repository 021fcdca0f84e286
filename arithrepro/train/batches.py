"""Where the loop's batches come from: a pure function of the step, so a resumed run recomputes
its batches and needs no data-loader state, and every data-parallel rank can draw the global
batch and take its share. And the pieces a batch is cut into for one model on a CPU."""

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
