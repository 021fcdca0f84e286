"""The transformer family: one attention, one block, one core, in the variants the sources use.

- gpt (expr): post-norm blocks, rotary attention (torchtune), causal, GELU MLP.
- abacus: pre-norm blocks, no rotary (Abacus embeddings carry the positions), a block of
  `block_layers` layers applied `recurrences` times with input injection, final LayerNorm.
- standard / looped (looped.py): the same core as a non-causal encoder, with full attention, or
  with local attention (each position sees itself and its predecessor) looped per input length.
- gpt-sin (modular): pre-norm blocks with the hand-written LayerNorm, fixed sinusoidal positions,
  a bias-free MLP, a linear classifier with bias; it can return its hidden states and attention
  weights.
- nanogpt (charlm): pre-norm blocks with biases, learned positions, a head tied to the embedding.

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

from arithrepro.models.dropout import Dropout, dropout_scale
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
                # registered like any import: torch.compile re-imports the module by name
                sys.modules[mod_spec.name] = module
                mod_spec.loader.exec_module(module)
                return module.RotaryPositionalEmbeddings
    from torchtune.modules import RotaryPositionalEmbeddings

    return RotaryPositionalEmbeddings


def rotary(head_dim: int, max_len: int) -> nn.Module:
    return _rotary_class()(dim=head_dim, max_seq_len=max_len)


class LayerNorm(nn.Module):
    """LayerNorm from its equation: (x - mean) / sqrt(biased variance + eps) * weight + bias.

    `fused` runs F.layer_norm instead, the same maths in one kernel (tests hold the two equal);
    set it False to run the equation as written.
    """

    fused = True

    def __init__(self, d: int, eps: float = 1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.bias = nn.Parameter(torch.zeros(d))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.fused:
            return F.layer_norm(x, x.shape[-1:], self.weight, self.bias, self.eps)
        mean = x.mean(-1, keepdim=True)
        var = (x - mean).pow(2).mean(-1, keepdim=True)  # biased: divide by d, not d - 1
        return (x - mean) / torch.sqrt(var + self.eps) * self.weight + self.bias


class SinusoidalPositions(nn.Module):
    """Fixed positions added to the token embedding: sin on even, cos on odd dimensions,
    frequencies base^(-2i/d). No parameters; a buffer that is not saved."""

    def __init__(self, d_model: int, max_len: int, base: float = 10000.0):
        super().__init__()
        pos = torch.arange(max_len, dtype=torch.float32).unsqueeze(1)
        freq = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(base) / d_model))
        table = torch.zeros(max_len, d_model)
        table[:, 0::2] = torch.sin(pos * freq)
        table[:, 1::2] = torch.cos(pos * freq[: d_model // 2])
        self.register_buffer("table", table, persistent=False)

    def forward(self, tokens: torch.Tensor, state: list | None = None) -> torch.Tensor:
        """The positions of `tokens`; while decoding, `state` = [next position], advanced here."""
        start = 0 if state is None else state[0]
        if state is not None:
            state[0] += tokens.size(1)
        return self.table[start:start + tokens.size(1)]

    def init_state(self, batch: int, device=None) -> list:
        return [0]


class LearnedPositions(nn.Module):
    """A learned vector per position up to max_len, added to the token embedding (GPT-2)."""

    def __init__(self, d_model: int, max_len: int):
        super().__init__()
        self.table = nn.Embedding(max_len, d_model)

    def forward(self, tokens: torch.Tensor, state: list | None = None) -> torch.Tensor:
        start = 0 if state is None else state[0]
        if state is not None:
            state[0] += tokens.size(1)
        if start + tokens.size(1) > self.table.num_embeddings:
            raise ValueError(f"position {start + tokens.size(1) - 1} is past the block size "
                             f"{self.table.num_embeddings}")
        return self.table(torch.arange(start, start + tokens.size(1), device=tokens.device))

    def init_state(self, batch: int, device=None) -> list:
        return [0]


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

    def qkv(self, x: torch.Tensor, pos: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q, k, v (B, nh, T, hs) of x at positions pos..: one matmul, and one rotary call for
        q and k together (the rotation is per head slot, so stacking q's and k's heads is the
        same as rotating each). Without rotary embeddings the separate projections are as fast
        (measured on the abacus step), and those are kept."""
        if self.rope is None:
            return (self.query(x, pos), *self.key_value(x, pos))
        w = torch.cat([self.q.weight, self.k.weight, self.v.weight])
        b = torch.cat([self.q.bias, self.k.bias, self.v.bias])
        heads = F.linear(x, w, b).view(*x.shape[:-1], 3 * self.heads, self.head_dim)
        # split, not slicing: a slice's backward fills a zero tensor of the whole input
        qk, v = heads.split([2 * self.heads, self.heads], dim=2)
        q, k = self._rope(qk, pos).split(self.heads, dim=1)            # (B, nh, T, hs) each
        return q, k, v.transpose(1, 2)

    def local_mask(self, T: int, device) -> torch.Tensor:
        """(nh, T, T) additive mask: the offset's bias inside the window, -inf outside."""
        i = torch.arange(T, device=device)
        offset = i.unsqueeze(1) - i.unsqueeze(0)                    # query - key
        inside = (offset >= 0) & (offset < self.window)
        bias = self.offset_bias[:, offset.clamp(0, self.window - 1)]  # (nh, T, T)
        return bias.masked_fill(~inside, float("-inf"))

    def attend(self, q, k, v, causal: bool, mask: torch.Tensor | None = None) -> torch.Tensor:
        p = self.dropout if self.training else 0.0
        if p and q.device.type == "cpu" and (mask is None or mask.dtype == torch.bool):
            Tq, Tk = q.size(2), k.size(2)
            bias = (_causal_bias(Tq, Tk, q.dtype, q.device) if causal else
                    None if mask is None else
                    torch.zeros(mask.shape, dtype=q.dtype, device=q.device).masked_fill_(~mask, float("-inf")))
            y = _attention_with_dropout(q, k, v, bias, p)
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p,
                                               is_causal=causal)  # (B, nh, Tq, hs)
        return self.o(y.transpose(1, 2).flatten(2))

    def attend_manual(self, q, k, v, causal: bool, mask: torch.Tensor | None = None):
        """softmax(q k^T / sqrt(hs) + mask) v written out, returning the weights too
        (B, nh, Tq, Tk); equal to `attend` (tests), which never materializes them."""
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        if causal:
            Tq, Tk = scores.shape[-2:]
            future = torch.ones(Tq, Tk, dtype=torch.bool, device=q.device).triu(Tk - Tq + 1)
            scores = scores.masked_fill(future, float("-inf"))
        if mask is not None:
            scores = scores + mask
        weights = scores.softmax(-1)
        p = self.dropout if self.training else 0.0
        y = F.dropout(weights, p) @ v
        return self.o(y.transpose(1, 2).flatten(2)), weights

    def forward(self, x: torch.Tensor, cache=None, pos: int = 0, causal: bool = True,
                weights: list | None = None, q_from: int = 0) -> torch.Tensor:
        """Self-attention over x (B, T, d); with a (K, V) cache, x sits at pos.. With a list
        `weights`, attend by the written-out path and append the attention weights to it.
        q_from > 0: outputs for positions q_from.. only (queries there, keys everywhere)."""
        if q_from:
            assert cache is None and weights is None and not self.window and causal
            q = self.query(x[:, q_from:], pos + q_from)
            k, v = self.key_value(x, pos)
            Tq, Tk = q.size(2), k.size(2)  # a causal mask aligned bottom-right
            allowed = torch.ones(Tq, Tk, dtype=torch.bool, device=x.device).tril(Tk - Tq)
            return self.attend(q, k, v, causal=False, mask=allowed)
        q, k, v = self.qkv(x, pos)
        if weights is not None:
            assert cache is None and not self.window, "weights are returned for plain self-attention"
            y, w = self.attend_manual(q, k, v, causal)
            weights.append(w)
            return y
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


def _attention_with_dropout(q, k, v, bias: torch.Tensor | None, p: float) -> torch.Tensor:
    """softmax(q k^T / sqrt(hs) + bias) with dropout of rate p on the weights, times v; bias
    (Tq, Tk) is additive (0 or -inf), or None.

    On a CPU, SDPA with dropout falls back to its unfused maths and draws the mask with
    bernoulli_; here the scores come from one baddbmm with the mask as its additive term and the
    dropout mask from `dropout_scale`. Equal to `attend_manual` given the same mask (tests)."""
    B, nh, Tq, hs = q.shape
    Tk = k.size(2)
    q3, k3 = q.reshape(B * nh, Tq, hs), k.reshape(B * nh, Tk, hs)
    if bias is not None:
        scores = torch.baddbmm(bias.expand(B * nh, Tq, Tk), q3, k3.transpose(1, 2), alpha=hs ** -0.5)
    else:
        scores = torch.bmm(q3, k3.transpose(1, 2)).mul_(hs ** -0.5)
    weights = scores.softmax(-1)
    y = torch.bmm(weights * dropout_scale(weights, p), v.reshape(B * nh, Tk, hs))
    return y.view(B, nh, Tq, hs)


@functools.lru_cache(maxsize=64)
def _causal_bias(Tq: int, Tk: int, dtype, device) -> torch.Tensor:
    """(Tq, Tk): 0 where query i may see key j <= i (aligned top-left, as SDPA's is_causal),
    -inf elsewhere."""
    return torch.full((Tq, Tk), float("-inf"), dtype=dtype, device=device).triu(1)


class Block(nn.Module):
    """post: x = LN(x + Drop(Attn(x))); x = LN(x + Drop(FF(x))).
    pre:  x = x + Drop(Attn(LN(x)));  x = x + Drop(FF(LN(x))).
    ff_bias: biases in the MLP; norm: torch's LayerNorm or the hand-written one ("equation")."""

    def __init__(self, d_model, d_ff, d_sa, heads, dropout, max_len, prenorm=False, rope=True,
                 window=0, ff_bias=True, norm="torch"):
        super().__init__()
        Norm = LayerNorm if norm == "equation" else nn.LayerNorm
        self.attn = Attention(d_model, d_sa, heads, dropout, max_len, rope=rope, window=window)
        self.ln1 = Norm(d_model)
        self.ff = nn.Sequential(nn.Linear(d_model, d_ff, bias=ff_bias), nn.GELU(),
                                Dropout(dropout), nn.Linear(d_ff, d_model, bias=ff_bias))
        self.ln2 = Norm(d_model)
        self.drop = Dropout(dropout)
        self.prenorm = prenorm

    def forward(self, x, cache=None, pos: int = 0, causal: bool = True, weights=None,
                q_from: int = 0):
        """q_from > 0: the outputs at positions q_from.. only (the others attend, nothing else)."""
        if self.prenorm:
            a = self.attn(self.ln1(x), cache, pos, causal, weights, q_from)
            x = x[:, q_from:] + self.drop(a)
            return x + self.drop(self.ff(self.ln2(x)))
        x = self.ln1(x[:, q_from:] + self.drop(self.attn(x, cache, pos, causal, weights, q_from)))
        return self.ln2(x + self.drop(self.ff(x)))


class TransformerCore(nn.Module):
    """`layers` blocks applied `recurrences` times (weights shared across recurrences).

    inject: add the core's input (the embedded sequence) to the block stack's input at every
    recurrence after the first, so a deep loop does not forget the problem. Pre-norm cores end
    with a LayerNorm. `recurrences` is an attribute: evaluation may change it (more or fewer
    loops than in training); a decoding state is sized for the value at init_state time.
    """

    prunes_outputs = True  # forward(outputs_from=n) computes the last block at n.. only

    def __init__(self, d_model, d_ff, d_sa, layers, heads, dropout, max_len, *, prenorm=False,
                 rope=True, causal=True, window=0, recurrences=1, inject=False, ff_bias=True,
                 norm="torch"):
        super().__init__()
        self.blocks = nn.ModuleList(Block(d_model, d_ff, d_sa, heads, dropout, max_len, prenorm,
                                          rope, window, ff_bias, norm) for _ in range(layers))
        Norm = LayerNorm if norm == "equation" else nn.LayerNorm
        self.norm = Norm(d_model) if prenorm else nn.Identity()
        self.shape = (heads, d_sa // heads)
        self.causal, self.recurrences, self.inject = causal, recurrences, inject

    def forward(self, h, keep=None, state=None, pos: int = 0, recurrences: int | None = None,
                exit_at: int | None = None, trace: dict | None = None, outputs_from: int = 0):
        """h (B, T, d) -> (B, T, d). With exit_at = n < R, returns [h after R, h after n]:
        the first n recurrences of an R-recurrence pass are an n-recurrence pass. A dict
        `trace` receives the hidden state after each block ("hidden", the input first) and
        each block's attention weights ("attention"). outputs_from > 0: the output at positions
        outputs_from.. only; the last block computes nothing else (causal cores)."""
        # Padding only ever trails the sequence, so the causal mask already hides it from every
        # real position; `keep` matters to the recurrent cores only.
        R = recurrences or self.recurrences
        e, exits = h, []
        weights = None
        if trace is not None:
            trace.update(hidden=[h], attention=[])
            weights = trace["attention"]
        for r in range(R):
            if r and self.inject:
                h = h + e
            for i, block in enumerate(self.blocks):
                cache = None if state is None else state[r * len(self.blocks) + i]
                last = r == R - 1 and i == len(self.blocks) - 1
                h = block(h, cache, pos, self.causal, weights, outputs_from if last else 0)
                if trace is not None:
                    trace["hidden"].append(h)
            if exit_at is not None and r + 1 == exit_at < R:
                exits.append(self.norm(h))
        h = self.norm(h)
        return ([h, *exits] if exit_at is not None else h), state

    def init_state(self, batch, max_len, device=None, dtype=None):
        shape = (batch, self.shape[0], max_len, self.shape[1])
        return [(torch.zeros(shape, device=device, dtype=dtype),
                 torch.zeros(shape, device=device, dtype=dtype))
                for _ in range(self.recurrences * len(self.blocks))]



def gpt2_init(model: nn.Module, layers: int, mlp_out: bool = False) -> None:
    """GPT-2 initialization: N(0, 0.02) everywhere, attention outputs N(0, 0.02/sqrt(2L)), and
    with mlp_out (nanoGPT) the MLP's output projections too."""
    for m in model.modules():
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, 0.0, 0.02)
            if getattr(m, "bias", None) is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, (nn.LayerNorm, LayerNorm)):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
    for m in model.modules():
        if isinstance(m, Attention):
            nn.init.normal_(m.o.weight, 0.0, 0.02 / math.sqrt(2 * layers))
        if mlp_out and isinstance(m, Block):
            nn.init.normal_(m.ff[-1].weight, 0.0, 0.02 / math.sqrt(2 * layers))


def build_sinusoidal(size: dict, *, dropout: float, vocab_size: int, max_len: int,
                     pad_id: int) -> LanguageModel:
    """The modular source's GPT: sinusoidal positions, pre-norm blocks with the hand-written
    LayerNorm and a bias-free MLP (d_ff = 4 d), a final LayerNorm, a classifier with bias.
    Initialization is PyTorch's default: with GPT-2's N(0, 0.02) embeddings, the tokens are
    drowned by the unit-amplitude positions and training stalls for hundreds of steps."""
    d = size["d_model"]
    core = TransformerCore(d, 4 * d, d, size["layers"], size["heads"], dropout, max_len,
                           prenorm=True, rope=False, ff_bias=False, norm="equation")
    model = LanguageModel(core, vocab_size, d, dropout, pad_id,
                          positions=SinusoidalPositions(d, max_len), logit_scale=False,
                          head_bias=True)
    return model  # PyTorch's default initialization: embeddings N(0, 1) stand out of the positions


def build_nanogpt(size: dict, *, dropout: float, vocab_size: int, max_len: int,
                  pad_id: int) -> LanguageModel:
    """The charlm source's nanoGPT: learned positions (block size = max_len), pre-norm blocks
    with biases everywhere and a GELU MLP 4x, fused attention, a final LayerNorm, and a bias-free
    head tied to the token embedding; nanoGPT's initialization."""
    d, L = size["d_model"], size["layers"]
    core = TransformerCore(d, 4 * d, d, L, size["heads"], dropout, max_len, prenorm=True,
                           rope=False)
    model = LanguageModel(core, vocab_size, d, dropout, pad_id,
                          positions=LearnedPositions(d, max_len), logit_scale=False, tie=True)
    gpt2_init(model, L, mlp_out=True)
    return model


def build(size: dict, *, dropout: float, vocab_size: int, max_len: int, pad_id: int) -> LanguageModel:
    core = TransformerCore(size["d_model"], size["d_ff"], size["d_sa"], size["layers"],
                           size["heads"], dropout, max_len)
    model = LanguageModel(core, vocab_size, size["d_model"], dropout, pad_id)
    gpt2_init(model, size["layers"])
    return model
