"""Encoders of the looped experiment (Fan et al. 2024): one output class per input position.

Input position i holds a digit pair (a_i, b_i), embedded linearly from its two one-hot vectors.
- standard: learned absolute positions and `layers` pre-norm blocks with full attention, as
  nn.TransformerEncoder builds them (the source's model).
- looped: no absolute positions; one pre-norm block applied `loops` times with input injection.
  Its attention is local: position i sees i and i - 1, with a learned per-head bias for each of
  the two offsets, so a carry moves exactly one position per loop. Digit i of a sum depends on
  digits 0..i, hence L + 1 positions need about L loops; we run n_positions + loop_offset loops
  (L + 5 for a decimal L-digit problem when loop_offset = 4), at any length. With
  extra_loops = k, each training batch runs a random 0..k loops more: a longer input at test
  time runs more loops than any training batch did, and a block trained only at one count
  drifts once its output has settled.
"""

from __future__ import annotations

import torch
from torch import nn

from arithrepro.models.hooks import SharedDraw
from arithrepro.models.transformer import TransformerConfig, TransformerCore, encoder_init, gpt2_init


class PositionClassifier(nn.Module, SharedDraw):
    """Digit pairs (B, T, 2) -> a class per position: an encoder, every position sees all."""

    causal = False

    def __init__(self, core: TransformerCore, base: int, classes: int, d_model: int,
                 max_len: int = 0, loop_offset: int | None = None, extra_loops: int = 0):
        super().__init__()
        self.base = base
        self.embed = nn.Linear(2 * base, d_model)
        self.positions = nn.Embedding(max_len, d_model) if max_len else None
        if self.positions is not None:  # the source's nn.Parameter(torch.randn(...) * 0.1)
            nn.init.normal_(self.positions.weight, 0.0, 0.1)
        self.core = core
        self.head = nn.Linear(d_model, classes)
        self.loop_offset = loop_offset
        self.extra_loops = extra_loops

    def loops(self, n_positions: int) -> int:
        if self.loop_offset is None:
            return self.core.recurrences
        loops = n_positions + self.loop_offset
        if self.training and self.extra_loops:
            loops += int(torch.randint(self.extra_loops + 1, ()))
        return loops

    def shared_draw(self, pairs: torch.Tensor) -> dict:
        """The loop count of a training forward, drawn once for an ensemble's copies
        (arithrepro/stacking.py)."""
        return {"loops": self.loops(pairs.size(1))} if self.loop_offset is not None else {}

    def forward(self, pairs: torch.Tensor, loops: int | None = None) -> torch.Tensor:
        """pairs (B, T, 2) digits -> logits (B, T, classes). loops: the looped encoder's loop
        count (None: T + loop_offset, plus the extra loops training draws)."""
        B, T, _ = pairs.shape
        # (B, T, 2 base) one-hot pairs -> (B, T, d)
        # one-hot by comparison: F.one_hot checks the digits' range on the host, a read from the
        # device that a captured step cannot make
        digits = torch.arange(self.base, device=pairs.device)
        h = self.embed((pairs.unsqueeze(-1) == digits).flatten(2).to(self.embed.weight.dtype))
        if self.positions is not None:
            if T > self.positions.num_embeddings:
                raise ValueError(f"{T} positions exceed the {self.positions.num_embeddings} "
                                 "learned absolute positions")
            h = h + self.positions.weight[:T]
        h, _ = self.core(h, recurrences=loops or self.loops(T))
        return self.head(h)


def build(size: dict, *, dropout: float, base: int, classes: int, max_len: int,
          looped: bool) -> PositionClassifier:
    d = size["d_model"]
    # Non-causal pre-norm encoders without rotary.
    encoder = dict(d_model=d, d_ff=size["d_ff"], heads=size["heads"], dropout=dropout,
                   max_len=max_len, prenorm=True, rope=False, causal=False)
    if looped:
        # The project's block (the source defines none that runs): GELU, a final LayerNorm,
        # GPT-2's initialization, local attention, injection; the recipe docs/looped.md measured.
        core = TransformerCore(TransformerConfig(**encoder, window=2, inject=True))
        model = PositionClassifier(core, base, classes, d, loop_offset=size["loop_offset"],
                                   extra_loops=size.get("extra_loops", 0))
        gpt2_init(model, 1)
        return model
    # The source's nn.TransformerEncoder of nn.TransformerEncoderLayer(norm_first=True) layers
    # at PyTorch's defaults: ReLU, no final LayerNorm (the encoder's norm=None), PyTorch's
    # initialization with every layer a copy of the first (encoder_init).
    core = TransformerCore(TransformerConfig(**encoder, layers=size["layers"], final_norm=False,
                                             activation="relu"))
    model = PositionClassifier(core, base, classes, d, max_len=max_len)
    encoder_init(core)
    return model


def build_standard(size: dict, **dims) -> PositionClassifier:
    return build(size, looped=False, **dims)


def build_looped(size: dict, **dims) -> PositionClassifier:
    return build(size, looped=True, **dims)
