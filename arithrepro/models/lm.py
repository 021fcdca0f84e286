"""The wrapper every expr model shares: token embedding -> core -> head, logits / sqrt(d_model).

A core maps embedded inputs (B, T, d) to outputs (B, T, d) and carries a decoding state:
    core(h, keep, state, pos) -> (h, state)
`state=None` means "start of sequence, nothing to keep" (training); a state from
`core.init_state(batch, max_len)` is filled in place while decoding, `pos` being the position of
h[:, 0]. `keep` (B, T) is False at padding, where recurrent state must not change.
"""

from __future__ import annotations

import math

import torch
from torch import nn


class LanguageModel(nn.Module):
    def __init__(self, core: nn.Module, vocab_size: int, d_model: int, dropout: float, pad_id: int):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d_model)
        self.drop = nn.Dropout(dropout)
        self.core = core
        self.head = nn.Linear(d_model, vocab_size, bias=False)
        self.scale = 1.0 / math.sqrt(d_model)
        self.pad_id = pad_id

    def forward(self, tokens: torch.Tensor, state=None, pos: int = 0):
        """tokens (B, T) -> logits (B, T, V); with a state, also the updated state."""
        keep = tokens != self.pad_id
        h, state_out = self.core(self.drop(self.embed(tokens)), keep, state, pos)
        logits = self.head(h) * self.scale
        return logits if state is None else (logits, state_out)

    def init_state(self, batch: int, max_len: int):
        p = next(self.parameters())
        return self.core.init_state(batch, max_len, device=p.device, dtype=p.dtype)


def count_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
