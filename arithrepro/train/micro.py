"""The pieces a batch is cut into for one model on a CPU."""

from __future__ import annotations

import torch


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
