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
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from arithrepro.models.dropout import Dropout, dropout_scale
from arithrepro.models.hooks import Fused
from arithrepro.models.lm import LanguageModel


@dataclass(frozen=True)
class TransformerConfig:
    """A transformer core's shape and variant; its blocks and their attention read it too."""

    d_model: int
    """Width of the residual stream: the embedding, every block's input and output."""
    heads: int
    """Attention heads; the head size is d_sa / heads (even under rotary, which turns pairs)."""
    max_len: int
    """The longest sequence rotary embeddings cover (gpt, ReTran); unused without them."""
    d_ff: int = 0
    """The MLP's hidden width; 0: 4 d_model (the GPT-2 ratio gpt-sin and nanogpt use)."""
    d_sa: int = 0
    """Width of the queries, keys and values; 0: d_model (every source but expr's gpt and
    ReTran, which size it apart)."""
    layers: int = 1
    """Blocks in the stack (abacus: block_layers; looped: one block, applied per loop)."""
    dropout: float = 0.0
    """Rate on the attention weights, after the attention, inside the MLP and after it."""
    prenorm: bool = False
    """Pre-norm blocks (abacus, looped, gpt-sin, nanogpt); False: post-norm blocks (expr's gpt)."""
    final_norm: bool = True
    """A pre-norm core ends with a LayerNorm (gpt-sin, nanogpt); False: its last block's output
    goes to the head as it is (abacus, the looped task's nn.TransformerEncoder)."""
    norm_eps: float = 1e-5
    """The LayerNorms' eps (abacus: 1e-12, its source's)."""
    activation: str = "gelu"
    """The MLP's nonlinearity: "gelu" (exact) or "relu" (nn.TransformerEncoderLayer's default)."""
    attn_bias: bool = True
    """Biases in the q, k, v and output projections (False: nanogpt)."""
    rope: bool = True
    """Rotary q and k (gpt, ReTran); False: the positions come with the embedding (abacus,
    gpt-sin, nanogpt, the standard encoder) or from the window (looped)."""
    causal: bool = True
    """Each position sees itself and earlier ones (the decoders); False: every position sees
    every other (the looped task's encoders)."""
    window: int = 0
    """w > 0: position i sees i-w+1..i only, with a learned bias per offset and head (looped:
    w = 2); 0: causal or full attention."""
    recurrences: int = 1
    """How many times the block stack runs, its weights shared (abacus; looped sets its loop
    count per call). The core's `recurrences` starts here and evaluation may change it."""
    inject: bool = False
    """Add the core's input to the stack's input before every recurrence after the first
    (abacus, looped), so a deep loop does not forget the problem."""
    ff_bias: bool = True
    """Biases in the MLP's linear maps (False: gpt-sin)."""
    norm: str = "torch"
    """Which LayerNorm: "torch" (nn.LayerNorm) or "equation" (the hand-written one: gpt-sin)."""

    def __post_init__(self):
        # 0 stands for the derived width; frozen, so set through object.__setattr__
        if not self.d_ff:
            object.__setattr__(self, "d_ff", 4 * self.d_model)
        if not self.d_sa:
            object.__setattr__(self, "d_sa", self.d_model)


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


class LayerNorm(nn.Module, Fused):
    """LayerNorm from its equation: (x - mean) / sqrt(biased variance + eps) * weight + bias.

    `fused` runs F.layer_norm instead, the same maths in one kernel (tests hold the two equal);
    set it False to run the equation as written.
    """

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


def layer_norm(cfg: TransformerConfig) -> nn.Module:
    return (LayerNorm if cfg.norm == "equation" else nn.LayerNorm)(cfg.d_model, eps=cfg.norm_eps)


ACTIVATIONS = {"gelu": nn.GELU, "relu": nn.ReLU}


class SinusoidalPositions(nn.Module):
    """Fixed positions added to the token embedding: dimensions 2k and 2k + 1 hold
    sin(pos / base^(k/d)) and cos(pos / base^(k/d)), the modular source's formula (Vaswani et
    al. divide by base^(2k/d), which spans the frequencies twice as fast). No parameters; a
    buffer that is not saved."""

    def __init__(self, d_model: int, max_len: int, base: float = 10000.0):
        super().__init__()
        pos = torch.arange(max_len, dtype=torch.float32).unsqueeze(1)
        k = torch.arange((d_model + 1) // 2, dtype=torch.float32)
        freq = torch.exp(k * (-math.log(base) / d_model))
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

    One method per use: `forward` attends over its whole input (training, evaluation of whole
    sequences), `step` over a key/value cache (decoding), `suffix` answers the queries of the
    last positions only (a loss that scores those alone), `traced` also returns the weights.
    Shapes: B batch, T positions, d = d_model, nh heads of hs = d_sa / nh.
    """

    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.heads, self.head_dim, self.dropout = cfg.heads, cfg.d_sa // cfg.heads, cfg.dropout
        self.q = nn.Linear(cfg.d_model, cfg.d_sa, bias=cfg.attn_bias)
        self.k = nn.Linear(cfg.d_model, cfg.d_sa, bias=cfg.attn_bias)
        self.v = nn.Linear(cfg.d_model, cfg.d_sa, bias=cfg.attn_bias)
        self.o = nn.Linear(cfg.d_sa, cfg.d_model, bias=cfg.attn_bias)
        self.rope = rotary(self.head_dim, cfg.max_len) if cfg.rope else None
        self.causal, self.window = cfg.causal, cfg.window
        self.offset_bias = nn.Parameter(torch.zeros(cfg.heads, cfg.window)) if cfg.window else None

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
        return torch.cat([self.k.weight, self.v.weight]), _bias(self.k, self.v)

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
        b = _bias(self.q, self.k, self.v)
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
        """q (B, nh, Tq, hs), k and v (B, nh, Tk, hs) -> the output projection (B, Tq, d).
        mask: bool (True: may attend) or additive, (Tq, Tk) or (nh, Tq, Tk)."""
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

    def forward(self, x: torch.Tensor, pos: int = 0) -> torch.Tensor:
        """Self-attention over x (B, T, d) at positions pos.. -> (B, T, d): causal, full, or
        within the window."""
        q, k, v = self.qkv(x, pos)
        if self.window:
            return self.attend(q, k, v, causal=False, mask=self.local_mask(x.size(1), x.device))
        return self.attend(q, k, v, causal=self.causal)

    def step(self, x: torch.Tensor, cache, pos: int) -> torch.Tensor:
        """Decoding: x (B, n, d) at positions pos..pos + n - 1 -> (B, n, d). Its keys and values
        go into cache = (K, V), each (B, nh, max_len, hs), and its queries attend to every
        entry up to their own."""
        n = x.size(1)
        # SDPA's causal mask is aligned top-left, so a multi-token step is only right from 0.
        assert n == 1 or pos == 0, "multi-token cached steps must start at position 0"
        q, k, v = self.qkv(x, pos)
        K, V = cache
        K[:, :, pos:pos + n] = k
        V[:, :, pos:pos + n] = v
        return self.attend(q, K[:, :, :pos + n], V[:, :, :pos + n], causal=n > 1)

    def suffix(self, x: torch.Tensor, start: int) -> torch.Tensor:
        """The causal outputs at positions start.. only: x (B, T, d) -> (B, T - start, d),
        queries there, keys everywhere."""
        assert self.causal and not self.window, "suffix queries are for causal attention"
        q = self.query(x[:, start:], start)                      # (B, nh, T - start, hs)
        k, v = self.key_value(x, 0)                              # (B, nh, T, hs)
        Tq, Tk = q.size(2), k.size(2)  # a causal mask aligned bottom-right
        allowed = torch.ones(Tq, Tk, dtype=torch.bool, device=x.device).tril(Tk - Tq)
        return self.attend(q, k, v, causal=False, mask=allowed)

    def traced(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """forward by the written-out path: (output (B, T, d), weights (B, nh, T, T))."""
        assert not self.window, "weights are returned for plain self-attention"
        q, k, v = self.qkv(x, 0)
        return self.attend_manual(q, k, v, self.causal)


def _bias(*linears: nn.Linear) -> torch.Tensor | None:
    """The linears' biases stacked as one linear's (None when they have none)."""
    return None if linears[0].bias is None else torch.cat([m.bias for m in linears])


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
    ff_bias: biases in the MLP; norm: torch's LayerNorm or the hand-written one ("equation").
    Its methods are the block around each use of the attention (see Attention)."""

    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.attn = Attention(cfg)
        self.ln1 = layer_norm(cfg)
        self.ff = nn.Sequential(nn.Linear(cfg.d_model, cfg.d_ff, bias=cfg.ff_bias),
                                ACTIVATIONS[cfg.activation](),
                                Dropout(cfg.dropout),
                                nn.Linear(cfg.d_ff, cfg.d_model, bias=cfg.ff_bias))
        self.ln2 = layer_norm(cfg)
        self.drop = Dropout(cfg.dropout)
        self.prenorm = cfg.prenorm

    def forward(self, x: torch.Tensor, pos: int = 0) -> torch.Tensor:
        """x (B, T, d) at positions pos.. -> (B, T, d)."""
        return self._around(x, lambda y: self.attn(y, pos))

    def step(self, x: torch.Tensor, cache, pos: int) -> torch.Tensor:
        """Decoding: x (B, n, d) at positions pos.. -> (B, n, d), filling the cache."""
        return self._around(x, lambda y: self.attn.step(y, cache, pos))

    def suffix(self, x: torch.Tensor, start: int) -> torch.Tensor:
        """x (B, T, d) -> (B, T - start, d): the outputs at positions start.. only (the others
        attend, nothing else)."""
        return self._around(x, lambda y: self.attn.suffix(y, start), start)

    def traced(self, x: torch.Tensor, weights: list) -> torch.Tensor:
        """forward, appending the attention weights (B, nh, T, T) to `weights`."""
        def attend(y):
            out, w = self.attn.traced(y)
            weights.append(w)
            return out

        return self._around(x, attend)

    def _around(self, x: torch.Tensor, attend, start: int = 0) -> torch.Tensor:
        """The block around `attend` (x's attention, at positions start.. when start > 0):
        x (B, T, d) -> (B, T - start, d)."""
        # ln1(x) before x[:, start:]: the order of x's uses sets the order its gradients are
        # summed in, and so the last bits of a trained model
        if self.prenorm:
            a = attend(self.ln1(x))
            x = x[:, start:] + self.drop(a)
            return x + self.drop(self.ff(self.ln2(x)))
        x = self.ln1(x[:, start:] + self.drop(attend(x)))
        return self.ln2(x + self.drop(self.ff(x)))


class TransformerCore(nn.Module):
    """`layers` blocks applied `recurrences` times (weights shared across recurrences).

    inject: add the core's input (the embedded sequence) to the block stack's input at every
    recurrence after the first, so a deep loop does not forget the problem. Pre-norm cores end
    with a LayerNorm unless cfg.final_norm is False. `recurrences` is an attribute: evaluation may change it (more or fewer
    loops than in training); a decoding state is sized for the value at init_state time.
    """

    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.cfg = cfg
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.layers))
        self.norm = layer_norm(cfg) if cfg.prenorm and cfg.final_norm else nn.Identity()
        self.causal, self.recurrences, self.inject = cfg.causal, cfg.recurrences, cfg.inject

    @property
    def prunes_outputs(self) -> bool:
        """forward(outputs_from=n) computes the last block at n.. only (causal cores)."""
        return self.causal and not self.cfg.window

    def forward(self, h, keep=None, state=None, pos: int = 0, recurrences: int | None = None,
                exit_at: int | None = None, trace: dict | None = None, outputs_from: int = 0):
        """h (B, T, d) -> (B, T, d). With exit_at = n < R, returns [h after R, h after n]:
        the first n recurrences of an R-recurrence pass are an n-recurrence pass. A dict
        `trace` receives the hidden state after each block ("hidden", the input first) and
        each block's attention weights ("attention"). outputs_from > 0: the output at positions
        outputs_from.. only (B, T - outputs_from, d); the last block computes nothing else."""
        # Padding only ever trails the sequence, so the causal mask already hides it from every
        # real position; `keep` matters to the recurrent cores only.
        R = recurrences or self.recurrences
        L = len(self.blocks)
        if trace is not None:
            trace.update(hidden=[h], attention=[])
        e, exits = h, []
        for r in range(R):
            if r and self.inject:
                h = h + e
            for i, block in enumerate(self.blocks):
                if state is not None:
                    h = block.step(h, state[r * L + i], pos)
                elif trace is not None:
                    h = block.traced(h, trace["attention"])
                    trace["hidden"].append(h)
                elif outputs_from and r == R - 1 and i == L - 1:
                    # earlier blocks' outputs at every position are the last block's keys
                    h = block.suffix(h, outputs_from)
                else:
                    h = block(h, pos)
            if exit_at is not None and r + 1 == exit_at < R:
                exits.append(self.norm(h))
        h = self.norm(h)
        return ([h, *exits] if exit_at is not None else h), state

    def init_state(self, batch, max_len, device=None, dtype=None):
        """Per block application (recurrence-major): its (K, V) cache, each
        (batch, nh, max_len, hs)."""
        shape = (batch, self.cfg.heads, max_len, self.cfg.d_sa // self.cfg.heads)
        return [(torch.zeros(shape, device=device, dtype=dtype),
                 torch.zeros(shape, device=device, dtype=dtype))
                for _ in range(self.recurrences * len(self.blocks))]


def gpt2_init(model: nn.Module, layers: int) -> None:
    """The expr source's GPT-2 initialization: N(0, 0.02) everywhere, zero biases, attention
    outputs N(0, 0.02/sqrt(2L))."""
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


def normal_init(model: nn.Module, std: float = 0.02) -> None:
    """The charlm source's nanoGPT initialization: every nn.Linear and nn.Embedding weight
    N(0, std); biases keep nn.Linear's default, LayerNorms theirs, no residual scaling."""
    for m in model.modules():
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, 0.0, std)


def encoder_init(core: TransformerCore) -> None:
    """nn.TransformerEncoder's initialization of its layers, for a core built with PyTorch's
    defaults: nn.MultiheadAttention draws its packed (3 d_sa, d) in-projection
    xavier-uniform, as one matrix, with zero biases, and zeroes its output projection's bias
    (the weight keeps nn.Linear's default); the MLP and LayerNorms keep theirs. The encoder then
    deep-copies one layer, so every block starts with the same weights."""
    for block in core.blocks:
        attn = block.attn
        packed = torch.empty(3 * attn.q.out_features, attn.q.in_features)
        nn.init.xavier_uniform_(packed)
        for linear, w in zip((attn.q, attn.k, attn.v), packed.chunk(3)):
            linear.weight.data.copy_(w)
        for linear in (attn.q, attn.k, attn.v, attn.o):
            nn.init.zeros_(linear.bias)
    first = core.blocks[0].state_dict()
    for block in core.blocks[1:]:
        block.load_state_dict(first)


def build_sinusoidal(size: dict, *, dropout: float, vocab_size: int, max_len: int,
                     pad_id: int) -> LanguageModel:
    """The modular source's GPT: sinusoidal positions, blocks with the hand-written LayerNorm
    and a bias-free MLP (d_ff = 4 d), a classifier with bias. size["norm"]: "pre" (pre-norm
    blocks and a final LayerNorm) or "post" (post-norm blocks, whose last LayerNorm ends the
    stack: the homework's released Block).
    Initialization is PyTorch's default: with GPT-2's N(0, 0.02) embeddings, the tokens are
    drowned by the unit-amplitude positions and training stalls for hundreds of steps."""
    d = size["d_model"]
    core = TransformerCore(TransformerConfig(
        d_model=d, d_ff=4 * d, layers=size["layers"], heads=size["heads"], dropout=dropout,
        max_len=max_len, prenorm=size.get("norm", "pre") == "pre", rope=False, ff_bias=False,
        norm="equation"))
    model = LanguageModel(core, vocab_size, d, pad_id,
                          positions=SinusoidalPositions(d, max_len), logit_scale=False,
                          head_bias=True)
    return model  # PyTorch's default initialization: embeddings N(0, 1) stand out of the positions


def build_nanogpt(size: dict, *, dropout: float, vocab_size: int, max_len: int,
                  pad_id: int) -> LanguageModel:
    """The charlm source's nanoGPT: learned positions (block size = max_len), pre-norm blocks
    whose attention projections have no biases and whose GELU MLP 4x has, fused attention, a
    final LayerNorm, and a bias-free head tied to the token embedding; the source's
    initialization (normal_init)."""
    d, L = size["d_model"], size["layers"]
    core = TransformerCore(TransformerConfig(
        d_model=d, d_ff=4 * d, layers=L, heads=size["heads"], dropout=dropout, max_len=max_len,
        prenorm=True, rope=False, attn_bias=False))
    model = LanguageModel(core, vocab_size, d, pad_id,
                          positions=LearnedPositions(d, max_len), logit_scale=False, tie=True)
    normal_init(model)
    return model


def build(size: dict, *, dropout: float, vocab_size: int, max_len: int, pad_id: int) -> LanguageModel:
    """The expr source's GPT: post-norm blocks, rotary attention, causal, GELU MLP."""
    core = TransformerCore(TransformerConfig(
        d_model=size["d_model"], d_ff=size["d_ff"], d_sa=size["d_sa"], layers=size["layers"],
        heads=size["heads"], dropout=dropout, max_len=max_len))
    model = LanguageModel(core, vocab_size, size["d_model"], pad_id)
    gpt2_init(model, size["layers"])
    return model
