"""Dropout whose mask comes from torch.rand on the CPU.

nn.Dropout draws its mask with bernoulli_, which on a CPU costs about twice a uniform draw of the
same size (benchmarks/profile_steps.py: bernoulli_ was the largest single cost of a GPT step at
the expr widths; `python -m benchmarks.run --only dropout`: a dropout forward + backward 1.6x).
Comparing a uniform float in [0, 1) against p keeps each value with probability 1 - p, to the
float's resolution, and scales the kept ones by 1 / (1 - p): the same dropout. On a
GPU torch's fused kernel is already one launch, so it is used there.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def dropout_scale(x: torch.Tensor, p: float) -> torch.Tensor:
    """The multiplier a dropout of rate p applies to x: 0 or 1 / (1 - p), elementwise."""
    return (torch.rand_like(x) >= p).to(x.dtype).mul_(1.0 / (1.0 - p))


def dropout(x: torch.Tensor, p: float, training: bool = True) -> torch.Tensor:
    if not training or p == 0.0:
        return x
    if x.device.type != "cpu":
        return F.dropout(x, p, True)
    return x * dropout_scale(x, p)


class Dropout(nn.Dropout):
    """nn.Dropout (same attributes, no parameters) with the mask drawn by `dropout`."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return dropout(x, self.p, self.training)
