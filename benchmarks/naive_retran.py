"""A naive, exact, per-token ReTran: the reference the fast core is measured and tested against.

It reads the same parameters as arithrepro.models.retran.ReTranCore but does everything the
straightforward way: the cache is a Python list of layer outputs, re-stacked and re-projected to
keys/values at every step, and each gate is its own matmul.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def naive_retran(core, x: torch.Tensor, masks=None) -> torch.Tensor:
    """x (B, T, d) embedded inputs -> (B, T, d) outputs, with dropout as in core.training; or,
    given `masks`, with those scaled keep masks instead, per layer (attention weights
    (B * nh, T (T + 1) / 2, position t's from t (t + 1) / 2 on), after attention (T, B, d),
    after Out (T, B, d)), as the fused core draws them (tests)."""
    B, T, _ = x.shape
    caches = [[layer.h0.expand(B, -1)] for layer in core.layers]
    states = [list(layer.cell.initial(B)) for layer in core.layers]
    outs = []
    for t in range(T):
        xt = x[:, t]
        for li, (layer, cache, st) in enumerate(zip(core.layers, caches, states)):
            attn = layer.attn
            mem = torch.stack(cache, dim=1)                                 # (B, n, d)
            n = mem.size(1)
            q = attn.rope(attn._heads(attn.q(xt).unsqueeze(1)),
                          input_pos=torch.tensor([n])).transpose(1, 2)   # (B, nh, 1, hs)
            k = attn.rope(attn._heads(attn.k(mem)), input_pos=torch.arange(n)).transpose(1, 2)
            v = attn._heads(attn.v(mem)).transpose(1, 2)
            w = (q @ k.transpose(-1, -2) / attn.head_dim ** 0.5).softmax(-1)
            if masks is None:
                w = F.dropout(w, attn.dropout, layer.training)
            else:
                off = t * (t + 1) // 2
                w = w * masks[li][0][:, off:off + n].reshape(B, attn.heads, 1, n)
            a = attn.o((w @ v).transpose(1, 2).flatten(2))[:, 0]
            xt = layer.ln_a(xt + (layer.drop(a) if masks is None else a * masks[li][1][t]))
            cell = layer.cell
            h, c = st
            Wi, Wf, Wo, Wg = cell.W.weight.split(cell.d_ff)
            bi, bf, bo, bg = cell.W.bias.split(cell.d_ff)
            Ui, Uf, Uo, Ug = cell.U.weight.split(cell.d_ff)
            i = torch.sigmoid(xt @ Wi.T + bi + h @ Ui.T)
            f = torch.sigmoid(xt @ Wf.T + bf + h @ Uf.T)
            o = torch.sigmoid(xt @ Wo.T + bo + h @ Uo.T)
            g = torch.tanh(xt @ Wg.T + bg + h @ Ug.T)
            c = f * c + i * g
            h = cell.P(o * c)
            st[0], st[1] = h, c
            out = cell.out(o * c)
            xt = layer.ln_f(xt + (layer.drop(out) if masks is None else out * masks[li][2][t]))
            cache.append(xt)
        outs.append(xt)
    return torch.stack(outs, dim=1)
