"""The wrapper every language model shares: token embedding (+ positions) -> core -> head.

A core maps embedded inputs (B, T, d) to outputs (B, T, d) and carries a decoding state:
    core(h, keep, state, pos) -> (h, state)
`state=None` means "start of sequence, nothing to keep" (training); a state from
`core.init_state(batch, max_len)` is filled in place while decoding, `pos` being the position of
h[:, 0]. `keep` (B, T) is False at padding, where recurrent state must not change.

Some cores (the transformers) offer more, which the wrapper exposes: `prunes_outputs`, with
core(..., outputs_from=n) computing the positions n.. only (for the other cores the wrapper
drops the outputs before n); a looped core's `recurrences`, with core(..., exit_at=n) for the
progressive loss; and core(..., trace=dict), which records hidden states and attention weights.

A positions module (Abacus embeddings) adds to the token embedding; it may need a running
decoding state of its own, kept beside the core's.
"""

from __future__ import annotations

import math

import torch
from torch import nn


class LanguageModel(nn.Module):
    def __init__(self, core: nn.Module, vocab_size: int, d_model: int, pad_id: int,
                 positions: nn.Module | None = None, logit_scale: bool = True,
                 head_bias: bool = False, d_embed: int | None = None, tie: bool = False):
        super().__init__()
        # d_embed: a token embedding narrower than the core (the charlm RNNs: 64 into 256)
        self.embed = nn.Embedding(vocab_size, d_embed or d_model)
        self.positions = positions
        self.core = core
        self.head = nn.Linear(d_model, vocab_size, bias=head_bias)
        if tie:  # one matrix embeds the tokens and scores them (nanoGPT's weight tying)
            assert (d_embed or d_model) == d_model, "tied weights need d_embed = d_model"
            self.head.weight = self.embed.weight
        # The ReTran source divides the logits by sqrt(d_model); the other sources do not.
        self.scale = 1.0 / math.sqrt(d_model) if logit_scale else 1.0
        self.pad_id = pad_id

    def _embed(self, tokens, pos_state):
        h = self.embed(tokens)
        if self.positions is not None:
            h = h + self.positions(tokens, pos_state)
        # No dropout on the embedded input: no source drops it (their cores start from it)
        return h

    def forward(self, tokens: torch.Tensor, state=None, pos: int = 0, outputs_from: int = 0,
                exit_at: int | None = None):
        """tokens (B, T) -> logits (B, T, V); with a state, also the updated state.
        outputs_from > 0: logits (B, T - outputs_from, V) for the positions outputs_from.. only,
        for training that scores those alone (cores that support it skip the rest's work).
        exit_at: the progressive loss's logits (see `progressive`), through forward so that a
        DistributedDataParallel wrapper sees the call."""
        if exit_at is not None:
            return self.progressive(tokens, exit_at)
        keep = tokens != self.pad_id
        core_state, pos_state = state if self.positions is not None and state is not None else (state, None)
        h = self._embed(tokens, pos_state)                      # (B, T, d)
        if outputs_from and self.prunes_outputs:
            h, _ = self.core(h, keep, core_state, pos, outputs_from=outputs_from)
        else:
            h, _ = self.core(h, keep, core_state, pos)
            if outputs_from:
                h = h[:, outputs_from:]                          # (B, T - outputs_from, d)
        logits = self.head(h) * self.scale
        return logits if state is None else (logits, state)

    def progressive(self, tokens: torch.Tensor, exit_at: int) -> list[torch.Tensor]:
        """Training logits after all recurrences and, when exit_at is fewer, after exit_at."""
        hs, _ = self.core(self._embed(tokens, None), tokens != self.pad_id, None, 0, exit_at=exit_at)
        return [self.head(h) * self.scale for h in hs]

    @torch.no_grad()
    def trace(self, tokens: torch.Tensor) -> dict:
        """Logits, the hidden state after the embedding and after every block, and every block's
        attention weights (B, heads, T, T): for models whose core records them (transformers)."""
        record: dict = {}
        h, _ = self.core(self._embed(tokens, None), tokens != self.pad_id, None, 0, trace=record)
        return {"logits": self.head(h) * self.scale, **record}

    def init_state(self, batch: int, max_len: int):
        p = next(self.parameters())
        core_state = self.core.init_state(batch, max_len, device=p.device, dtype=p.dtype)
        if self.positions is None:
            return core_state
        return core_state, self.positions.init_state(batch, device=p.device)

    @property
    def recurrences(self) -> int:
        """How many times a looped core (abacus) runs its block stack. Evaluation may set
        another count; a decoding state is sized for the count at init_state time."""
        return self.core.recurrences

    @recurrences.setter
    def recurrences(self, r: int) -> None:
        self.core.recurrences = r

    @property
    def prunes_outputs(self) -> bool:
        """Whether forward(outputs_from=n) skips work on the positions before n (a causal
        transformer's last block) rather than computing them and dropping their outputs."""
        return getattr(self.core, "prunes_outputs", False)


def count_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
