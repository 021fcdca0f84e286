"""The transformer family: one attention, one block, one core, in the variants the sources use.

- gpt (expr): post-norm blocks, rotary attention (torchtune), causal, GELU MLP.
- abacus: pre-norm blocks, no rotary (Abacus embeddings carry the positions), a block of
  `block_layers` layers applied `recurrences` times with input injection, final LayerNorm.
- standard / looped (looped.py): the same core as a non-causal encoder, with full attention, or
  with local attention (each position sees itself and its predecessor) looped per input length.

The attention module is shared with ReTran (retran.py), which differs only in what it attends to.
"""

from __future__ import annotations

import functools
import importlib.util
import math
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from arithrepro.models.lm import LanguageModel


@functools.lru_cache(maxsize=1)
def _rotary_class() -> type:
    """torchtune's RotaryPositionalEmbeddings.

    Importing the torchtune package runs its __init__, which imports torchao, datasets and
    tokenizers: about 4 s in every stage process, for one class whose module needs only torch.
    So load that module file on its own, and fall back to the package import if it moved.
    """
    if "torchtune" not in sys.modules:
        spec = importlib.util.find_spec("torchtune")
        if spec is not None and spec.origin is not None:
            path = Path(spec.origin).parent / "modules" / "position_embeddings.py"
            if path.is_file():
                mod_spec = importlib.util.spec_from_file_location("_torchtune_position_embeddings", path)
                module = importlib.util.module_from_spec(mod_spec)
                mod_spec.loader.exec_module(module)
                return module.RotaryPositionalEmbeddings
    from torchtune.modules import RotaryPositionalEmbeddings

    return RotaryPositionalEmbeddings


def rotary(head_dim: int, max_len: int) -> nn.Module:
    return _rotary_class()(dim=head_dim, max_seq_len=max_len)


class Attention(nn.Module):
    """Separate q, k, v projections d_model -> d_sa, output d_sa -> d_model.

    rope: rotate q/k per head (torchtune) or leave positions to the embeddings.
    window: 0 for causal or full attention; w > 0 restricts position i to i-w+1..i and adds a
    learned per-head bias for each of those offsets (length-independent, so a looped model can
    run at any length, moving information one position per application when w = 2).
    """

    def __init__(self, d_model: int, d_sa: int, heads: int, dropout: float, max_len: int,
                 rope: bool = True, window: int = 0):
        super().__init__()
        self.heads, self.head_dim, self.dropout = heads, d_sa // heads, dropout
        self.q = nn.Linear(d_model, d_sa)
        self.k = nn.Linear(d_model, d_sa)
        self.v = nn.Linear(d_model, d_sa)
        self.o = nn.Linear(d_sa, d_model)
        self.rope = rotary(self.head_dim, max_len) if rope else None
        self.window = window
        self.offset_bias = nn.Parameter(torch.zeros(heads, window)) if window else None

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        return x.view(*x.shape[:-1], self.heads, self.head_dim)  # (B, T, nh, hs)

    def _rope(self, x: torch.Tensor, pos: int | torch.Tensor) -> torch.Tensor:
        """pos: the first position (int) or the positions themselves (LongTensor of length T)."""
        if self.rope is None:
            return x.transpose(1, 2)  # (B, nh, T, hs)
        if isinstance(pos, int):
            pos = None if pos == 0 else torch.arange(pos, pos + x.size(1), device=x.device)
        return self.rope(x, input_pos=pos).transpose(1, 2)  # (B, nh, T, hs)

    def query(self, x: torch.Tensor, pos) -> torch.Tensor:
        return self._rope(self._heads(self.q(x)), pos)

    def kv_weights(self) -> tuple[torch.Tensor, torch.Tensor]:
        # k and v in one matmul: the same maths as two, half the kernel launches. Sequential
        # callers build this once per forward, not once per step.
        return torch.cat([self.k.weight, self.v.weight]), torch.cat([self.k.bias, self.v.bias])

    def key_value(self, x: torch.Tensor, pos, kv_weights=None) -> tuple[torch.Tensor, torch.Tensor]:
        k, v = F.linear(x, *(kv_weights or self.kv_weights())).chunk(2, dim=-1)
        return self._rope(self._heads(k), pos), self._heads(v).transpose(1, 2)

    def local_mask(self, T: int, device) -> torch.Tensor:
        """(nh, T, T) additive mask: the offset's bias inside the window, -inf outside."""
        i = torch.arange(T, device=device)
        offset = i.unsqueeze(1) - i.unsqueeze(0)                    # query - key
        inside = (offset >= 0) & (offset < self.window)
        bias = self.offset_bias[:, offset.clamp(0, self.window - 1)]  # (nh, T, T)
        return bias.masked_fill(~inside, float("-inf"))

    def attend(self, q, k, v, causal: bool, mask: torch.Tensor | None = None) -> torch.Tensor:
        p = self.dropout if self.training else 0.0
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p,
                                           is_causal=causal)  # (B, nh, Tq, hs)
        return self.o(y.transpose(1, 2).flatten(2))

    def forward(self, x: torch.Tensor, cache=None, pos: int = 0, causal: bool = True) -> torch.Tensor:
        """Self-attention over x (B, T, d); with a (K, V) cache, x sits at pos.."""
        q = self.query(x, pos)
        k, v = self.key_value(x, pos)
        if self.window:
            return self.attend(q, k, v, causal=False, mask=self.local_mask(x.size(1), x.device))
        if cache is None:
            return self.attend(q, k, v, causal=causal)
        n = x.size(1)
        # SDPA's causal mask is aligned top-left, so a multi-token step is only right from 0.
        assert n == 1 or pos == 0, "multi-token cached steps must start at position 0"
        K, V = cache
        K[:, :, pos:pos + n] = k
        V[:, :, pos:pos + n] = v
        return self.attend(q, K[:, :, :pos + n], V[:, :, :pos + n], causal=n > 1)


class Block(nn.Module):
    """post: x = LN(x + Drop(Attn(x))); x = LN(x + Drop(FF(x))).
    pre:  x = x + Drop(Attn(LN(x)));  x = x + Drop(FF(LN(x)))."""

    def __init__(self, d_model, d_ff, d_sa, heads, dropout, max_len, prenorm=False, rope=True,
                 window=0):
        super().__init__()
        self.attn = Attention(d_model, d_sa, heads, dropout, max_len, rope=rope, window=window)
        self.ln1 = nn.LayerNorm(d_model)
        self.ff = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Dropout(dropout),
                                nn.Linear(d_ff, d_model))
        self.ln2 = nn.LayerNorm(d_model)
        self.drop = nn.Dropout(dropout)
        self.prenorm = prenorm

    def forward(self, x, cache=None, pos: int = 0, causal: bool = True):
        if self.prenorm:
            x = x + self.drop(self.attn(self.ln1(x), cache, pos, causal))
            return x + self.drop(self.ff(self.ln2(x)))
        x = self.ln1(x + self.drop(self.attn(x, cache, pos, causal)))
        return self.ln2(x + self.drop(self.ff(x)))


class TransformerCore(nn.Module):
    """`layers` blocks applied `recurrences` times (weights shared across recurrences).

    inject: add the core's input (the embedded sequence) to the block stack's input at every
    recurrence after the first, so a deep loop does not forget the problem. Pre-norm cores end
    with a LayerNorm. `recurrences` is an attribute: evaluation may change it (more or fewer
    loops than in training); a decoding state is sized for the value at init_state time.
    """

    def __init__(self, d_model, d_ff, d_sa, layers, heads, dropout, max_len, *, prenorm=False,
                 rope=True, causal=True, window=0, recurrences=1, inject=False):
        super().__init__()
        self.blocks = nn.ModuleList(Block(d_model, d_ff, d_sa, heads, dropout, max_len, prenorm,
                                          rope, window) for _ in range(layers))
        self.norm = nn.LayerNorm(d_model) if prenorm else nn.Identity()
        self.shape = (heads, d_sa // heads)
        self.causal, self.recurrences, self.inject = causal, recurrences, inject

    def forward(self, h, keep=None, state=None, pos: int = 0, recurrences: int | None = None,
                exit_at: int | None = None):
        """h (B, T, d) -> (B, T, d). With exit_at = n < R, returns [h after R, h after n]:
        the first n recurrences of an R-recurrence pass are an n-recurrence pass."""
        # Padding only ever trails the sequence, so the causal mask already hides it from every
        # real position; `keep` matters to the recurrent cores only.
        R = recurrences or self.recurrences
        e, exits = h, []
        for r in range(R):
            if r and self.inject:
                h = h + e
            for i, block in enumerate(self.blocks):
                cache = None if state is None else state[r * len(self.blocks) + i]
                h = block(h, cache, pos, self.causal)
            if exit_at is not None and r + 1 == exit_at < R:
                exits.append(self.norm(h))
        h = self.norm(h)
        return ([h, *exits] if exit_at is not None else h), state

    def init_state(self, batch, max_len, device=None, dtype=None):
        shape = (batch, self.shape[0], max_len, self.shape[1])
        return [(torch.zeros(shape, device=device, dtype=dtype),
                 torch.zeros(shape, device=device, dtype=dtype))
                for _ in range(self.recurrences * len(self.blocks))]



def gpt2_init(model: nn.Module, layers: int) -> None:
    """GPT-2 initialization: N(0, 0.02) everywhere, attention outputs N(0, 0.02/sqrt(2L))."""
    for m in model.modules():
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, 0.0, 0.02)
            if getattr(m, "bias", None) is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.LayerNorm):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
    for m in model.modules():
        if isinstance(m, Attention):
            nn.init.normal_(m.o.weight, 0.0, 0.02 / math.sqrt(2 * layers))


def build(size: dict, *, dropout: float, vocab_size: int, max_len: int, pad_id: int) -> LanguageModel:
    core = TransformerCore(size["d_model"], size["d_ff"], size["d_sa"], size["layers"],
                           size["heads"], dropout, max_len)
    model = LanguageModel(core, vocab_size, size["d_model"], dropout, pad_id)
    gpt2_init(model, size["layers"])
    return model
