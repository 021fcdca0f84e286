"""ReTran: a transformer whose feed-forward is the source's LSTM cell, run one position at a time.

Layer l keeps a key/value cache that starts with a learned vector h0_l (rotary position 0); the
layer's output at token position p is appended at cache position p + 1, and the query of
position p also sits at p + 1, so it is one step from the latest entry. At each position:
    x = LN_a(x + Drop(Attn(x, cache_l)));  x = LN_f(x + Drop(Out(o * c)));  cache_l += [x]

The computation is sequential in time by construction, but each layer depends only on the whole
sequence of the layer below, so a sequence runs layer by layer.

Training (state None) runs each layer as one autograd function, `FusedLayer` (retran_fused.py), with a
hand-written backward through time: the autograd graph of T x ~40 small ops per layer costs more
than the arithmetic at these sizes. Its forward does the minimum per step and stores what the
backward needs in (T, B, ...) buffers; the backward walks time in reverse carrying dh, dc and the
cache gradients (the gradient of cache entry p is complete once every later position is done),
and leaves every weight gradient to a few large matmuls after the loop. Two foldings keep the
per-step op count low, both exact up to rounding:
  - rotary position p is a fixed linear map R_p per head, so R_p (W x + b) = (R_p W) x + R_p b:
    the query and key weights are rotated for every position once per forward, by torchtune's
    own rope module applied to the weight rows, and autograd carries their gradients back
    through it; the query scale 1/sqrt(head_dim) rides along.
  - [W | U] for the gates and [P; Out] for the cell's two outputs are one matmul each.
Dropout masks (attention weights, after the attention's output projection, after Out) are drawn
for the whole sequence up front by `dropout_mask`, as scaled keep masks the backward reuses.
Rows run sorted by length, and each step runs on the rows that still have a real token at or
after it: nothing after a row's last real token reaches a real output, so those positions are
not computed (the core's output there is zero; `skip_padding = False` computes them).
The per-sequence buffers are reused from step to step (`Workspace`).
`ReTranCore.fused = False` runs the per-op path instead (tests compare the two).

Decoding (a state given) and the per-op path keep keys and values in preallocated buffers written
in place. Autograd's saved-tensor version check would reject those in-place writes even though
every saved view covers only entries that are never written again, so the per-op training
forward runs under identity saved-tensor hooks, which skip that check (tests compare its
gradients with a naive list-based implementation).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from arithrepro.models.hooks import Fused, SkipsPadding, Vmapped
from arithrepro.models.lm import LanguageModel
from arithrepro.models.recurrence import Rows
from arithrepro.models.recurrent import SourceLSTMCell
from arithrepro.models.retran_copies import VmappedReTran
from arithrepro.models.retran_fused import FusedLayer, Workspace
from arithrepro.models.transformer import Attention, TransformerConfig, gpt2_init


@dataclass(frozen=True)
class ReTranConfig:
    """ReTran's shape, as the expr source sizes it."""

    d_model: int
    """Width of the residual stream, the cell's short state h and output, each cache entry."""
    d_ff: int
    """Width of the cell's long state c (where a transformer has its MLP)."""
    d_sa: int
    """Width of the queries, keys and values."""
    layers: int
    """Layers, each an attention over its own cache and a cell."""
    heads: int
    """Attention heads; the head size d_sa / heads is even (rotary turns pairs)."""
    dropout: float
    """Rate on the attention weights, after the attention and after the cell's output."""
    max_len: int
    """The longest sequence; a cache holds max_len + 1 entries, h0_l first."""

    def attention(self) -> TransformerConfig:
        # rotary positions over the cache's max_len + 1 entries; the core calls `attend` on the
        # cache itself, so the causal and window fields play no part
        return TransformerConfig(d_model=self.d_model, d_sa=self.d_sa, heads=self.heads,
                                 dropout=self.dropout, max_len=self.max_len + 1)


class ReTranLayer(nn.Module):
    def __init__(self, cfg: ReTranConfig):
        super().__init__()
        self.attn = Attention(cfg.attention())
        self.ln_a = nn.LayerNorm(cfg.d_model)
        self.cell = SourceLSTMCell(cfg.d_model, cfg.d_model, cfg.d_ff, input_init="normal")
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.drop = nn.Dropout(cfg.dropout)
        self.h0 = nn.Parameter(torch.zeros(cfg.d_model))

    def fused_weights(self, T: int, positions: torch.Tensor) -> list[torch.Tensor]:
        """The layer's parameters as `FusedLayer` takes them, built with autograd so that their
        gradients flow back to the parameters: query and key weights rotated for every position."""
        attn, cell = self.attn, self.cell
        nh, hs = attn.heads, attn.head_dim

        def rotated(linear, pos):
            # rows of [W^T; b] are vectors in the projection's output space, rotated like one
            wb = torch.cat([linear.weight.t(), linear.bias.unsqueeze(0)])       # (d + 1, d_sa)
            wb = wb.view(-1, 1, nh, hs).expand(-1, len(pos), nh, hs)
            r = attn.rope(wb, input_pos=pos).flatten(2).transpose(0, 1)      # (P, d + 1, d_sa)
            return r[:, :-1], r[:, -1]

        qw, qb = rotated(attn.q, positions[1:T + 1])
        scale = 1.0 / math.sqrt(hs)
        kw, kb = rotated(attn.k, positions[:T + 1])
        vw, vb = attn.v.weight.t(), attn.v.bias
        kvw = torch.cat([kw, vw.expand(T + 1, -1, -1)], 2)                   # (T + 1, d, 2 d_sa)
        kvb = torch.cat([kb, vb.expand(T + 1, -1)], 1)
        wu = torch.cat([cell.W.weight, cell.U.weight], 1).t()                # (2 d, 4 d_ff)
        po = torch.cat([cell.P.weight, cell.out.weight]).t()                 # (d_ff, 2 d)
        pob = torch.cat([cell.P.bias, cell.out.bias])
        return [qw * scale, qb * scale, kvw, kvb, attn.o.weight.t(), attn.o.bias,
                self.ln_a.weight, self.ln_a.bias, wu, cell.W.bias, po, pob,
                self.ln_f.weight, self.ln_f.bias, self.h0, cell.h0, cell.c0]


class ReTranCore(nn.Module, Fused, SkipsPadding, Vmapped):
    # runs eager under torch.compile (the registry's `eager` says why)
    # fused False: the per-op path from a fresh state too (the fused one's reference)
    fused_copies = True  # its fused layer has an ensemble form (retran_copies.py)
    # skip_padding: the fused path computes no position after a row's last real token (its
    # outputs there are zeros; the per-op path computes them, and they never reach a real
    # position's output)

    def __init__(self, cfg: ReTranConfig):
        super().__init__()
        self.layers = nn.ModuleList(ReTranLayer(cfg) for _ in range(cfg.layers))
        self.d_model, self.heads, self.head_dim = cfg.d_model, cfg.heads, cfg.d_sa // cfg.heads
        self.dropout = cfg.dropout
        self.register_buffer("positions", torch.arange(cfg.max_len + 1), persistent=False)
        self._workspace = Workspace()

    def init_state(self, batch, max_len, device=None, dtype=None):
        """Per layer: [K, V, h, c] with K, V (B, nh, max_len + 1, hs) holding h0_l at 0."""
        state = []
        shape = (batch, self.heads, max_len + 1, self.head_dim)
        for layer in self.layers:
            k0, v0 = layer.attn.key_value(layer.h0.view(1, 1, -1), 0)
            # made from k0: under an ensemble's vmap the cache is then per copy, like h0
            K = k0.new_zeros(shape, device=device, dtype=dtype)
            V = k0.new_zeros(shape, device=device, dtype=dtype)
            K[:, :, :1] = k0
            V[:, :, :1] = v0
            h, c = layer.cell.initial(batch)
            state.append([K, V, h, c])
        return state

    def forward(self, x, keep=None, state=None, pos: int = 0):
        """x (B, T, d) -> (B, T, d); with a state, that state is advanced in place."""
        B, T, _ = x.shape
        if state is None:
            # From a fresh state only trailing padding exists, and no real position comes after
            # it: holding the state there cannot change any real output, so skip the masking.
            if self.fused:
                return self._run_fused(x, keep), None
            keep = None
            if torch.is_grad_enabled():
                with torch.autograd.graph.saved_tensors_hooks(_same, _same):
                    return self._run(x, keep, self.init_state(B, T, x.device, x.dtype), 0), None
            return self._run(x, keep, self.init_state(B, T, x.device, x.dtype), 0), None
        return self._run(x, keep, state, pos), state

    def _run_fused(self, x, keep):
        B, T, _ = x.shape
        rows, order = [B] * T, None
        if keep is not None and self.skip_padding:
            # Nothing after a row's last real token reaches a real output: sorted by length (the
            # recurrent cores' Rows), the rows still running at a step are a prefix, and each
            # step runs on those alone.
            live = Rows.of(keep, B, T, x.device)
            if sum(live.n) < B * T:
                rows, order = live.n + [0] * (T - len(live.n)), live.perm
                x = x.index_select(0, order)
        p = self.dropout if self.training else 0.0
        saving = torch.is_grad_enabled() and (x.requires_grad or
                                              any(w.requires_grad for w in self.parameters()))
        h = x.transpose(0, 1).contiguous()  # (T, B, d): one time step is one contiguous block
        fn = VmappedReTran if self.vmapped else FusedLayer
        for layer in self.layers:
            h = fn.apply(h, rows, self._workspace, self.heads, layer.ln_a.eps, p, saving,
                                  *layer.fused_weights(T, self.positions))
        h = h.transpose(0, 1)
        return h if order is None else h.index_select(0, order.argsort())

    def _run(self, x, keep, state, pos):
        B, T, _ = x.shape
        out = x.new_empty(B, T, self.d_model)
        kv = [layer.attn.kv_weights() for layer in self.layers]
        inputs = x.unsqueeze(2).unbind(1)  # (B, 1, d) each; unbind's backward is one stack
        for t in range(T):
            p = pos + t + 1                      # cache position of this token (h0 is 0)
            where = self.positions[p:p + 1]
            xt = inputs[t]
            kt = None if keep is None else keep[:, t]
            for layer, st, kvw in zip(self.layers, state, kv):
                K, V, h, c = st
                q = layer.attn.query(xt, where)
                a = layer.attn.attend(q, K[:, :, :p], V[:, :, :p], causal=False)
                xt = layer.ln_a(xt + layer.drop(a))
                m, h, c = layer.cell.step(layer.cell.W(xt[:, 0]), h, c, kt)
                xt = layer.ln_f(xt + layer.drop(layer.cell.out(m).unsqueeze(1)))
                k, v = layer.attn.key_value(xt, where, kvw)
                K[:, :, p:p + 1] = k
                V[:, :, p:p + 1] = v
                st[2], st[3] = h, c
            out[:, t:t + 1] = xt
        return out


def _same(t):
    return t


def build(size: dict, *, vocab_size: int, dropout: float, max_len: int, pad_id: int) -> LanguageModel:
    core = ReTranCore(ReTranConfig(
        d_model=size["d_model"], d_ff=size["d_ff"], d_sa=size["d_sa"], layers=size["layers"],
        heads=size["heads"], dropout=dropout, max_len=max_len))
    model = LanguageModel(core, vocab_size, size["d_model"], pad_id)
    # "Attention init as GPT"; the cell's input weights N(0, 0.02); the wrapper keeps defaults.
    for layer in core.layers:
        gpt2_init(layer.attn, size["layers"])
    return model
