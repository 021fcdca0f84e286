"""The adapter that gives a causal token model aligned digit pairs (models/forms.py: pairs)."""

from __future__ import annotations

import torch
from torch import nn


class PairsAsTokens(nn.Module):
    """A causal token model on aligned digit pairs: the pair (a, b) is the token a·base + b, and
    the model's head keeps its first `classes` rows, a class per position.

    Causal suffices: least significant first, digit i of a sum depends on the pairs 0..i, which
    position i sees. The head's rows are cut from the model's own, so the head starts as the
    model's initialization draws it."""

    def __init__(self, model: nn.Module, base: int, classes: int):
        super().__init__()
        head = getattr(model, "head", None)
        if not isinstance(head, nn.Linear) or head.out_features < classes:
            raise TypeError("pairs adapter: the model needs a linear head `head` over at least "
                            f"{classes} tokens")
        cut = nn.Linear(head.in_features, classes, bias=head.bias is not None,
                        device=head.weight.device, dtype=head.weight.dtype)
        with torch.no_grad():
            cut.weight.copy_(head.weight[:classes])
            if head.bias is not None:
                cut.bias.copy_(head.bias[:classes])
        model.head = cut
        self.model, self.base = model, base

    def forward(self, pairs: torch.Tensor) -> torch.Tensor:
        """pairs (B, T, 2) -> logits (B, T, classes)."""
        return self.model(pairs[..., 0] * self.base + pairs[..., 1])

    @property
    def recurrences(self) -> int:
        return self.model.recurrences

    @recurrences.setter
    def recurrences(self, r: int) -> None:
        self.model.recurrences = r
