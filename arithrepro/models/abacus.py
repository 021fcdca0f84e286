"""The abacus model (McLeish et al. 2024): a pre-norm decoder whose digits carry Abacus positions.

Abacus positions: each maximal run of digit tokens counts 1, 2, 3, ... from its first digit;
every other token is 0. Operands and answer are written least-significant digit first, so equal
positions mean equal significance. In training a random offset in [0, k-1] per sample is added
to every digit position, so the embeddings of positions beyond the training length are trained
too; in evaluation the offset is 0. The embedding is added to the token embedding (the paper's
placement).

The transformer is the project's core with a block of `block_layers` layers applied
`recurrences` times and input injection (transformer.py).
"""

from __future__ import annotations

import torch
from torch import nn

from arithrepro.models.lm import LanguageModel
from arithrepro.models.transformer import TransformerConfig, TransformerCore


def abacus_positions(is_digit: torch.Tensor, run: torch.Tensor | None = None) -> torch.Tensor:
    """(B, T) bool -> (B, T) long: position within each maximal digit run (1-based), else 0.

    `run` (B,) continues a run that the previous chunk ended in (decoding one token at a time).
    Vectorized: the digits counted so far, minus that count at the last non-digit (a running
    max). int16 while it cannot overflow: half the memory traffic of int32 (measured ~2x).
    """
    dtype = torch.int16 if is_digit.size(1) < 2**15 else torch.int32
    count = is_digit.to(dtype).cumsum(1, dtype=dtype)
    pos = (count - (count * ~is_digit).cummax(dim=1).values).long()
    if run is not None:
        leading = (~is_digit).cumsum(1) == 0      # no non-digit yet: the run goes on
        pos = pos + torch.where(leading, run.unsqueeze(1), 0)
    return pos


class AbacusEmbedding(nn.Module):
    def __init__(self, vocab_size: int, digit_ids: list[int], max_position: int, d_model: int,
                 offset_k: int):
        super().__init__()
        self.embed = nn.Embedding(max_position + 1, d_model)
        lookup = torch.zeros(vocab_size, dtype=torch.bool)
        lookup[digit_ids] = True
        self.register_buffer("is_digit", lookup, persistent=False)
        self.max_position, self.offset_k = max_position, offset_k

    def positions(self, tokens: torch.Tensor, run: torch.Tensor | None = None) -> torch.Tensor:
        d = self.is_digit[tokens]
        pos = abacus_positions(d, run)
        if run is not None:
            run.copy_(pos[:, -1])  # where the chunk ends in a non-digit this is 0: a new run
        if self.training and self.offset_k > 1:
            offset = torch.randint(0, self.offset_k, (tokens.size(0), 1), device=tokens.device)
            pos = torch.where(d, pos + offset, 0)
        return pos

    def forward(self, tokens: torch.Tensor, run: torch.Tensor | None = None) -> torch.Tensor:
        pos = self.positions(tokens, run)
        if not self.training and int(pos.max()) > self.max_position:
            raise ValueError(f"a digit run of {int(pos.max())} exceeds the Abacus embedding's "
                             f"{self.max_position} positions; train with a larger offset_k or "
                             "evaluate shorter operands")
        return self.embed(pos)

    def init_state(self, batch: int, device=None) -> torch.Tensor:
        return torch.zeros(batch, dtype=torch.long, device=device)


def build(size: dict, *, dropout: float, vocab_size: int, max_len: int, pad_id: int,
          digit_ids: list[int], train_run: int, eval_run: int) -> LanguageModel:
    """train_run / eval_run: the longest digit run (the longest answer) in training / evaluation."""
    d = size["d_model"]
    core = TransformerCore(TransformerConfig(
        d_model=d, d_ff=size["d_ff"], layers=size["block_layers"], heads=size["heads"],
        dropout=dropout, max_len=max_len, prenorm=True, rope=False,
        recurrences=size["recurrences"], inject=True, final_norm=False, norm_eps=1e-12))
    # Training reaches positions up to offset_k - 1 + (longest training run).
    max_position = max(size["offset_k"] - 1 + train_run, eval_run)
    positions = AbacusEmbedding(vocab_size, digit_ids, max_position, d, size["offset_k"])
    # The source's layers as PyTorch builds them (no re-initialization: the Abacus table, like the
    # token embedding, N(0, 1)), its biased head, LayerNorm eps 1e-12 and no final LayerNorm.
    model = LanguageModel(core, vocab_size, d, pad_id, positions=positions,
                          logit_scale=False, head_bias=True)
    return model
