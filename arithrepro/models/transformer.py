"""GPT of the expr experiment: post-norm blocks, rotary attention (torchtune), GELU MLP.

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
    """Separate q, k, v projections d_model -> d_sa, rotary q/k per head, output d_sa -> d_model."""

    def __init__(self, d_model: int, d_sa: int, heads: int, dropout: float, max_len: int):
        super().__init__()
        self.heads, self.head_dim, self.dropout = heads, d_sa // heads, dropout
        self.q = nn.Linear(d_model, d_sa)
        self.k = nn.Linear(d_model, d_sa)
        self.v = nn.Linear(d_model, d_sa)
        self.o = nn.Linear(d_sa, d_model)
        self.rope = rotary(self.head_dim, max_len)

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        return x.view(*x.shape[:-1], self.heads, self.head_dim)  # (B, T, nh, hs)

    def _rope(self, x: torch.Tensor, pos: int | torch.Tensor) -> torch.Tensor:
        """pos: the first position (int) or the positions themselves (LongTensor of length T)."""
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

    def attend(self, q, k, v, causal: bool) -> torch.Tensor:
        p = self.dropout if self.training else 0.0
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=causal)  # (B, nh, Tq, hs)
        return self.o(y.transpose(1, 2).flatten(2))

    def forward(self, x: torch.Tensor, cache=None, pos: int = 0) -> torch.Tensor:
        """Causal self-attention over x (B, T, d); with a (K, V) cache, x sits at pos.."""
        q = self.query(x, pos)
        k, v = self.key_value(x, pos)
        if cache is None:
            return self.attend(q, k, v, causal=True)
        n = x.size(1)
        # SDPA's causal mask is aligned top-left, so a multi-token step is only right from 0.
        assert n == 1 or pos == 0, "multi-token cached steps must start at position 0"
        K, V = cache
        K[:, :, pos:pos + n] = k
        V[:, :, pos:pos + n] = v
        return self.attend(q, K[:, :, :pos + n], V[:, :, :pos + n], causal=n > 1)


class Block(nn.Module):
    """Post-norm: x = LN(x + Drop(Attn(x))); x = LN(x + Drop(FF(x)))."""

    def __init__(self, d_model, d_ff, d_sa, heads, dropout, max_len):
        super().__init__()
        self.attn = Attention(d_model, d_sa, heads, dropout, max_len)
        self.ln1 = nn.LayerNorm(d_model)
        self.ff = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Dropout(dropout),
                                nn.Linear(d_ff, d_model))
        self.ln2 = nn.LayerNorm(d_model)
        self.drop = nn.Dropout(dropout)

    def forward(self, x, cache=None, pos: int = 0):
        x = self.ln1(x + self.drop(self.attn(x, cache, pos)))
        return self.ln2(x + self.drop(self.ff(x)))


class GPTCore(nn.Module):
    def __init__(self, d_model, d_ff, d_sa, layers, heads, dropout, max_len):
        super().__init__()
        self.blocks = nn.ModuleList(Block(d_model, d_ff, d_sa, heads, dropout, max_len)
                                    for _ in range(layers))
        self.shape = (heads, d_sa // heads)

    def forward(self, h, keep=None, state=None, pos: int = 0):
        # Padding only ever trails the sequence, so the causal mask already hides it from every
        # real position; `keep` matters to the recurrent cores only.
        for i, block in enumerate(self.blocks):
            h = block(h, None if state is None else state[i], pos)
        return h, state

    def init_state(self, batch, max_len, device=None, dtype=None):
        shape = (batch, *self.shape[:1], max_len, self.shape[1])
        return [(torch.zeros(shape, device=device, dtype=dtype),
                 torch.zeros(shape, device=device, dtype=dtype)) for _ in self.blocks]


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


def build(size: dict, *, vocab_size: int, dropout: float, max_len: int, pad_id: int) -> LanguageModel:
    core = GPTCore(size["d_model"], size["d_ff"], size["d_sa"], size["layers"], size["heads"],
                   dropout, max_len)
    model = LanguageModel(core, vocab_size, size["d_model"], dropout, pad_id)
    gpt2_init(model, size["layers"])
    return model
