"""The recurrent cells, written from their equations, and the one core that runs any of them.

- source (expr): short state h (d_model), long state c (d_ff), h <- P(o * c). Unlike
  torch.nn.LSTM there is no tanh on the output, the long state is wider than the short one, the
  cell's output is a second projection Out(o * c), and the initial state is learned. ReTran
  (retran.py) reuses the cell.
- standard (modular, `lstm-std`): the textbook cell, h = o * tanh(c) with c as wide as h, a zero
  initial state, torch.nn.LSTM's initialization; equal to torch.nn.LSTM (tests).
- Elman and GRU (charlm, `rnn` / `gru`): h = tanh(W x + U h) with biases, and the bias-free GRU;
  equal to torch.nn.RNN and torch.nn.GRU(bias=False) (tests).

Each cell's `step` is the reference (and what decoding from a state runs). From a fresh state
(training, whole-sequence evaluation) a layer runs as one autograd Function whose backward
through time is written by hand, instead of a graph of a dozen small nodes per step: its forward
keeps gates and states in preallocated buffers, its backward runs only the sequential products
per step and each weight gradient as one matmul over all steps. The LSTMs' Function also skips
trailing padding: sequences sorted by length, each step runs on the rows not yet ended, and the
outputs at padding are zero (no real position sees them). Tests compare both paths.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn
from torch.autograd.function import once_differentiable

from arithrepro.models.dropout import Dropout
from arithrepro.models.lm import LanguageModel


class SourceLSTMCell(nn.Module):
    def __init__(self, d_in: int, d_model: int, d_ff: int, input_init: str = "kaiming",
                 standard: bool = False):
        super().__init__()
        self.d_ff, self.standard, self.zero_start = d_ff, standard, standard
        self.W = nn.Linear(d_in, 4 * d_ff)               # input weights; carries the gate biases
        self.U = nn.Linear(d_model, 4 * d_ff, bias=False)  # recurrent weights
        if standard:
            assert d_ff == d_model, "the standard cell's long state is as wide as its short one"
            self.register_buffer("h0", torch.zeros(d_model), persistent=False)
            self.register_buffer("c0", torch.zeros(d_ff), persistent=False)
            bound = d_model ** -0.5  # torch.nn.LSTM's U(-1/sqrt(d), 1/sqrt(d))
            for p in (self.W.weight, self.W.bias, self.U.weight):
                nn.init.uniform_(p, -bound, bound)
            return
        self.P = nn.Linear(d_ff, d_model)                # next short state
        self.out = nn.Linear(d_ff, d_model)              # the cell's output
        self.h0 = nn.Parameter(torch.zeros(d_model))
        self.c0 = nn.Parameter(torch.zeros(d_ff))
        self.reset_gates(input_init)

    def reset_gates(self, input_init: str) -> None:
        for gate in self.U.weight.data.split(self.d_ff):  # gate order: i, f, o, g
            nn.init.orthogonal_(gate)
        if input_init == "kaiming":
            nn.init.kaiming_uniform_(self.W.weight)
        else:
            nn.init.normal_(self.W.weight, 0.0, 0.02)
        nn.init.zeros_(self.W.bias)
        nn.init.ones_(self.W.bias.data[self.d_ff:2 * self.d_ff])  # forget gate starts open

    def initial(self, batch: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.h0.expand(batch, -1), self.c0.expand(batch, -1)

    def inputs(self, x: torch.Tensor) -> torch.Tensor:
        return self.W(x)

    def finish(self, x: torch.Tensor) -> torch.Tensor:
        return x if self.standard else self.out(x)  # the output map, for all steps in one matmul

    def sequence(self, x: torch.Tensor, rows: "_Rows") -> torch.Tensor:
        """The finished outputs of all steps from the initial state, zero at padding (rows)."""
        W, U = self.W, self.U.weight
        if self.standard:
            return _fused(_LSTMRecurrence, x, rows, W.weight, W.bias, U, *[None] * 6)
        h0, c0 = self.initial(x.size(0))
        return _fused(_LSTMRecurrence, x, rows, W.weight, W.bias, U, self.P.weight, self.P.bias,
                      h0, c0, self.out.weight, self.out.bias)

    def step(self, xw, h, c, keep=None):
        """One time step given xw = W(x_t) (B, 4 d_ff). Returns (output, h, c): the output is
        o * c (source) or h = o * tanh(c) (standard)."""
        # h = c = None: the zero initial state, whose products need not be computed
        gates = xw if h is None else torch.addmm(xw, h, self.U.weight.t())
        ifo = gates[:, :3 * self.d_ff].sigmoid()
        g = gates[:, 3 * self.d_ff:].tanh()
        i, f, o = ifo.chunk(3, dim=1)
        c_new = i * g if c is None else torch.addcmul(f * c, i, g)
        if self.standard:
            m = h_new = o * c_new.tanh()
        else:
            m = o * c_new
            h_new = self.P(m)
        if keep is not None:  # padding leaves the state as it was
            k = keep.unsqueeze(1)
            h_new, c_new = torch.where(k, h_new, h), torch.where(k, c_new, c)
        return m, h_new, c_new


class _ZeroStartCell(nn.Module):
    """A cell whose state is one vector h that starts at zero (its products are skipped), with
    torch.nn.RNN's initialization U(-1/sqrt(d), 1/sqrt(d)) of every parameter."""

    zero_start = True

    def __init__(self, W: nn.Linear, U: nn.Linear, d_model: int):
        super().__init__()
        self.d, self.W, self.U = d_model, W, U
        self.register_buffer("h0", torch.zeros(d_model), persistent=False)
        bound = d_model ** -0.5
        for p in self.parameters():
            nn.init.uniform_(p, -bound, bound)

    def initial(self, batch: int) -> tuple[torch.Tensor]:
        return (self.h0.expand(batch, -1),)

    def finish(self, x: torch.Tensor) -> torch.Tensor:
        return x

    @staticmethod
    def kept(h_new, h, keep):
        """Padding leaves the state as it was."""
        return h_new if keep is None else torch.where(keep.unsqueeze(1), h_new, h)


class ElmanCell(_ZeroStartCell):
    """h = tanh(W_ih x + b_ih + W_hh h + b_hh), torch.nn.RNN's equation."""

    def __init__(self, d_in: int, d_model: int):
        super().__init__(nn.Linear(d_in, d_model), nn.Linear(d_model, d_model), d_model)

    def inputs(self, x: torch.Tensor) -> torch.Tensor:
        # both biases join the input half, for all steps in one op
        return self.W(x) + self.U.bias

    def sequence(self, x: torch.Tensor, rows: "_Rows") -> torch.Tensor:
        return _fused(_ElmanRecurrence, self.inputs(x), self.U.weight)

    def step(self, xw, h, keep=None):
        h_new = self.kept((xw if h is None else torch.addmm(xw, h, self.U.weight.t())).tanh(),
                          h, keep)
        return h_new, h_new


class GRUCell(_ZeroStartCell):
    """The bias-free GRU: r = σ(W_r x + U_r h), z = σ(W_z x + U_z h),
    n = tanh(W_n x + r ⊙ (U_n h)), h = (1 - z) ⊙ n + z ⊙ h; equal to torch.nn.GRU(bias=False)
    (tests), whose gate order (r, z, n) it keeps."""

    def __init__(self, d_in: int, d_model: int):
        super().__init__(nn.Linear(d_in, 3 * d_model, bias=False),
                         nn.Linear(d_model, 3 * d_model, bias=False), d_model)

    def inputs(self, x: torch.Tensor) -> torch.Tensor:
        return self.W(x)

    def sequence(self, x: torch.Tensor, rows: "_Rows") -> torch.Tensor:
        return _fused(_GRURecurrence, self.inputs(x), self.U.weight)

    def step(self, xw, h, keep=None):
        d = self.d
        if h is None:  # U h = 0
            z = xw[:, d:2 * d].sigmoid()
            n = xw[:, 2 * d:].tanh()
            h_new = n - z * n
        else:
            hu = h @ self.U.weight.t()
            r, z = (xw[:, :2 * d] + hu[:, :2 * d]).sigmoid().chunk(2, dim=1)
            n = torch.addcmul(xw[:, 2 * d:], r, hu[:, 2 * d:]).tanh()
            h_new = self.kept(torch.addcmul(n, z, h - n), h, keep)
        return h_new, h_new


def _fused(recurrence, x, *args):
    """Run a recurrence Function. Its steps write into preallocated buffers of one dtype, so under
    autocast it runs in the weights' dtype."""
    dtype = next(a for a in args if isinstance(a, torch.Tensor)).dtype
    with torch.autocast(x.device.type, enabled=False):
        return recurrence.apply(x.to(dtype), *args)


class _Scratch:
    """Large (rows, cols) buffers kept from one call to the next. On CPU a fresh allocation is
    mapped page by page on first touch, which here costs more than the steps that fill it;
    accelerators' caching allocators already reuse memory, so only CPU buffers are kept. The
    number of rows varies with the batch's real positions: a buffer serves any request for as
    many rows or fewer. A buffer comes back only once nothing that escaped the Function sees it."""

    def __init__(self, limit: int = 64):
        self.free: dict[tuple, list[torch.Tensor]] = {}
        self.limit = limit

    def take(self, like: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
        bufs = self.free.get((cols, like.dtype, like.device), [])
        for j, buf in enumerate(bufs):
            if buf.size(0) >= rows:
                return bufs.pop(j)[:rows]
        return like.new_empty(rows, cols)

    def give(self, *views) -> None:
        if sum(map(len, self.free.values())) > self.limit:  # shapes come and go: start over
            self.free.clear()
        for v in views:
            if v is not None and v.device.type == "cpu":
                buf = v if v._base is None else v._base
                self.free.setdefault((buf.size(1), buf.dtype, buf.device), []).append(buf)


_scratch = _Scratch()


def _tanh(x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """tanh x = 2 sigmoid(2x) - 1: on CPU torch's tanh is several times slower than its sigmoid,
    and this is within 2e-7 of it in float32."""
    return torch.mul(x, 2, out=out).sigmoid_().mul_(2).sub_(1)


class _Rows(NamedTuple):
    """Which rows each step runs: sequences sorted longest first, so that at step t the rows
    still inside their sequence are the first n[t]; step t's rows are packed at rows
    start[t]: start[t] + n[t] of every (N, .) buffer, N the number of real positions."""
    n: list[int]
    start: list[int]
    perm: torch.Tensor     # (B,) sorted position -> batch row
    index: torch.Tensor    # (N,) packed row -> row of x.reshape(B * T, d)

    @staticmethod
    def of(keep: torch.Tensor | None, B: int, T: int, device) -> "_Rows":
        """keep (B, T): False at trailing padding, whose outputs no real position sees (they are
        left zero). Without it, or if padding is not trailing, every position is real."""
        steps = torch.arange(T, device=device)
        lengths = None if keep is None else keep.sum(1)
        if lengths is None or not torch.equal(keep, steps < lengths[:, None]):
            lengths = torch.full((B,), T, device=device)
        lengths = lengths.clamp(min=1)  # every sequence has a first step
        lengths, perm = lengths.sort(descending=True, stable=True)
        live = lengths > steps[:, None]                         # (T, B) in sorted order
        n = [k for k in live.sum(1).tolist() if k]
        start = [0]
        for k in n[:-1]:
            start.append(start[-1] + k)
        index = (perm * T + steps[:, None])[live]
        return _Rows(n, start, perm, index)


class _LSTMRecurrence(torch.autograd.Function):
    """All steps of a SourceLSTMCell from its initial state, input and output maps included,
    with backpropagation through time written by hand: per step only the truly sequential
    products on the rows still inside their sequence, every weight gradient one matmul over all
    steps.

    forward(x (B, T, d_in), rows (_Rows), W (4F, d_in), W_bias, U (4F, D), P (D, F), P_bias,
            h0 (B, D), c0 (B, F), O (D_out, F), O_bias) -> Out(o * c) (B, T, D_out);
    for the standard cell P, P_bias, h0, c0, O, O_bias are None (zero start) and the output is
    h = o * tanh(c) (B, T, F). Zero at padding.

    Buffers are packed (N, .) rows, each step's contiguous (see _Rows). The derivative factors
    are computed per step in the backward while the step's values are in cache: a pass over a
    whole (N, 4F) buffer costs more here."""

    @staticmethod
    def forward(ctx, x, rows, W, Wb, U, P, Pb, h0, c0, O, Ob):
        standard = P is None
        B, T, d_in = x.shape
        F, D = U.size(0) // 4, U.size(1)
        n, start = rows.n, rows.start
        N = start[-1] + n[-1]
        xp = _scratch.take(x, N, d_in)
        torch.index_select(x.reshape(B * T, d_in), 0, rows.index, out=xp)
        A = _scratch.take(x, N, 4 * F)              # pre-activations, then gates i, f, o, g
        torch.addmm(Wb, xp, W.t(), out=A)           # the input half, all steps at once
        C = _scratch.take(x, B + N, F)              # c_{-1}, then c_t at B + start[t]
        H = _scratch.take(x, N, D)                  # h_{t-1} at start[t]
        Mp = _scratch.take(x, N, F)                 # outputs
        TC = _scratch.take(x, N, F) if standard else None   # tanh(c_t)
        if standard:
            C[:B].zero_()
        else:
            torch.index_select(c0, 0, rows.perm, out=C[:B])
            torch.index_select(h0, 0, rows.perm, out=H[:B])
            Pt = P.t()
        Ut = U.t()
        # each step's views, made once (per-step slicing would cost more than some steps' ops)
        a, c, h, m = A.split(n), C[B:].split(n), H.split(n), Mp.split(n)
        sig, tan = A[:, :3 * F].split(n), A[:, 3 * F:].split(n)
        i, f, o, g = (A[:, j * F:(j + 1) * F].split(n) for j in range(4))
        tc = TC.split(n) if standard else None
        c_prev = C[:B]
        for t, k in enumerate(n):
            if not (standard and t == 0):           # U h_{-1} = 0
                a[t].addmm_(h[t], Ut)
            sig[t].sigmoid_()
            _tanh(tan[t], tan[t])
            torch.mul(f[t], c_prev[:k], out=c[t]).addcmul_(i[t], g[t])
            if standard:
                torch.mul(o[t], _tanh(c[t], tc[t]), out=m[t])
            else:
                torch.mul(o[t], c[t], out=m[t])
            if t + 1 < len(n):                      # h_t, for the rows that go on
                k1 = n[t + 1]
                if standard:
                    h[t + 1].copy_(m[t][:k1])
                else:
                    torch.addmm(Pb, m[t][:k1], Pt, out=h[t + 1])
            c_prev = c[t]
        # the output map on the real rows only (the standard cell's output is m itself)
        Y = Mp if standard else torch.addmm(Ob, Mp, O.t())
        Y = x.new_zeros(B * T, Y.size(1)).index_copy_(0, rows.index, Y).view(B, T, -1)
        buffers = (xp, A, C, H, Mp, TC)
        if any(ctx.needs_input_grad):
            ctx.standard, ctx.rows, ctx.buffers = standard, rows, buffers
            ctx.save_for_backward(W, U, P, O)
        else:
            _scratch.give(*buffers)
        return Y

    @staticmethod
    @once_differentiable
    def backward(ctx, dY):
        if not hasattr(ctx, "buffers"):
            raise RuntimeError("the fused LSTM's backward runs once (no retain_graph)")
        standard, rows, (xp, A, C, H, Mp, TC) = ctx.standard, ctx.rows, ctx.buffers
        W, U, P, O = ctx.saved_tensors
        del ctx.buffers
        n = rows.n
        B, T, Dy = dY.shape
        N, F4 = A.shape
        F, D = F4 // 4, U.size(1)
        with torch.autocast(dY.device.type, enabled=False):
            dYp = torch.index_select(dY.reshape(B * T, Dy), 0, rows.index)
            d = _scratch.take(A, N, F)              # the gradient of m, accumulated in place
            if standard:
                d.copy_(dYp)
            else:
                torch.mm(dYp, O, out=d)
            dG = _scratch.take(A, N, F4)            # gradients of the pre-activations
            # dH at start[t]: the gradient of h_t (rows that go on; the others stay zero), lined
            # up with m_t for dP; h_{-1}'s is dh0.
            dH = None if standard else _scratch.take(A, N, D).zero_()
            dh0 = None if standard else A.new_empty(B, D)
            dc, k3, kg = A.new_zeros(B, F), A.new_empty(B, 3 * F), A.new_empty(B, F)
            ki, kf, ko = k3.split(F, dim=1)
            sig, c, dm, dg = A[:, :3 * F].split(n), C[B:].split(n), d.split(n), dG.split(n)
            i, f, o, g = (A[:, j * F:(j + 1) * F].split(n) for j in range(4))
            dgi, dgf, dgo, dgg = (dG[:, j * F:(j + 1) * F].split(n) for j in range(4))
            dh = None if standard else dH.split(n)
            tc = TC.split(n) if standard else None
            for t in reversed(range(len(n))):
                k = n[t]
                dct, kgt = dc[:k], kg[:k]
                c_prev = c[t - 1][:k] if t else C[:k]
                if t + 1 < len(n):                  # dm_t += dh_t P
                    k1 = n[t + 1]
                    if standard:
                        dm[t][:k1].addmm_(dg[t + 1], U)
                    else:
                        dm[t][:k1].addmm_(dh[t][:k1], P)
                torch.addcmul(sig[t], sig[t], sig[t], value=-1, out=k3[:k])  # sigmoid' = s - s^2
                if standard:                        # dc_t += dh_t o (1 - tanh^2 c_t)
                    torch.addcmul(o[t], o[t], torch.mul(tc[t], tc[t], out=kgt), value=-1, out=kgt)
                    dct.addcmul_(dm[t], kgt)
                    torch.mul(dm[t], tc[t], out=dgo[t]).mul_(ko[:k])
                else:                               # dc_t += dm_t o
                    dct.addcmul_(dm[t], o[t])
                    torch.mul(dm[t], c[t], out=dgo[t]).mul_(ko[:k])
                torch.mul(dct, g[t], out=dgi[t]).mul_(ki[:k])
                torch.mul(dct, c_prev, out=dgf[t]).mul_(kf[:k])
                torch.addcmul(i[t], i[t], torch.mul(g[t], g[t], out=kgt), value=-1, out=kgt)
                torch.mul(dct, kgt, out=dgg[t])     # tanh' = 1 - g^2, times i
                if not standard:                    # dh_{t-1} = dgates_t U
                    torch.mm(dg[t], U, out=dh[t - 1][:k] if t else dh0)
                dct.mul_(f[t])
            dx = None
            if ctx.needs_input_grad[0]:
                dx = dY.new_zeros(B * T, W.size(1)).index_copy_(0, rows.index, dG @ W)
                dx = dx.view(B, T, -1)
            grads = [dx, None, dG.t() @ xp, dG.sum(0)]
            if standard:
                # h_{-1} = 0 (its H rows were never written): only later steps count
                grads += [dG[n[0]:].t() @ H[n[0]:]] + [None] * 6
            else:
                grads += [dG.t() @ H, dH.t() @ Mp, dH.sum(0),
                          torch.empty_like(dh0).index_copy_(0, rows.perm, dh0),
                          torch.empty_like(dc).index_copy_(0, rows.perm, dc),
                          dYp.t() @ Mp, dYp.sum(0)]
            _scratch.give(xp, A, C, H, Mp, TC, d, dG, dH)
            return tuple(grads)


class _ElmanRecurrence(torch.autograd.Function):
    """h_t = tanh(xw_t + h_{t-1} U^T) from h = 0 for all T steps, backward through time by hand
    (see _LSTMRecurrence): xw (B, T, d) -> h (B, T, d)."""

    @staticmethod
    def forward(ctx, xw, U):
        H = xw.transpose(0, 1).contiguous()
        hs, Ut = H.unbind(0), U.t()
        for t in range(len(hs)):
            if t:
                hs[t].addmm_(hs[t - 1], Ut)
            hs[t].tanh_()
        ctx.H = H
        ctx.save_for_backward(U)
        return H.transpose(0, 1).contiguous()  # batch-major, as dropout masks are drawn

    @staticmethod
    @once_differentiable
    def backward(ctx, dout):
        H, (U,) = ctx.H, ctx.saved_tensors
        del ctx.H
        with torch.autocast(dout.device.type, enabled=False):
            dM = dout.transpose(0, 1)
            K = 1 - H * H
            dA = torch.empty_like(H)                    # gradients of the pre-activations
            da, k = dA.unbind(0), K.unbind(0)
            T = len(da)
            torch.mul(dM[T - 1], k[T - 1], out=da[T - 1])
            for t in reversed(range(T - 1)):
                torch.addmm(dM[t], da[t + 1], U, out=da[t]).mul_(k[t])
            dU = dA[1:].flatten(0, 1).t() @ H[:-1].flatten(0, 1)
            return dA.transpose(0, 1), dU


class _GRURecurrence(torch.autograd.Function):
    """The bias-free GRU (GRUCell) from h = 0 for all T steps, backward through time by hand
    (see _LSTMRecurrence): xw (B, T, 3d) -> h (B, T, d)."""

    @staticmethod
    def forward(ctx, xw, U):
        B, T, d3 = xw.shape
        d = d3 // 3
        G = xw.transpose(0, 1).contiguous()                         # pre-activations, then r, z, n
        HU = torch.empty_like(G)                    # U h_{t-1}
        H = xw.new_empty(T + 1, B, d)               # H[t + 1] = h_t
        HU[0].zero_()
        H[0].zero_()
        Ut = U.t()
        rz, r, z = G[..., :2 * d].unbind(0), G[..., :d].unbind(0), G[..., d:2 * d].unbind(0)
        n, hu_rz, hu_n = G[..., 2 * d:].unbind(0), HU[..., :2 * d].unbind(0), HU[..., 2 * d:].unbind(0)
        for t in range(T):
            if t:
                torch.mm(H[t], Ut, out=HU[t])
            rz[t].add_(hu_rz[t]).sigmoid_()
            n[t].addcmul_(r[t], hu_n[t]).tanh_()
            torch.addcmul(n[t], z[t], torch.sub(H[t], n[t], out=H[t + 1]), out=H[t + 1])
        ctx.buffers = G, HU, H
        ctx.save_for_backward(U)
        return H[1:].transpose(0, 1).contiguous()

    @staticmethod
    @once_differentiable
    def backward(ctx, dout):
        (G, HU, H), (U,) = ctx.buffers, ctx.saved_tensors
        del ctx.buffers
        T, _, d3 = G.shape
        d = d3 // 3
        with torch.autocast(dout.device.type, enabled=False):
            dM = dout.transpose(0, 1)
            r, z, n = G[..., :d], G[..., d:2 * d], G[..., 2 * d:]
            # K: d(pre-activations r, z, n)/dh_t for all steps at once; K2 the same for U h_{t-1}
            # (its n part passes through r)
            K = torch.empty_like(G)
            kr, kz, kn = K[..., :d], K[..., d:2 * d], K[..., 2 * d:]
            torch.mul(1 - z, 1 - n * n, out=kn)
            torch.mul((H[:-1] - n) * z, 1 - z, out=kz)
            torch.mul(kn * HU[..., 2 * d:], r * (1 - r), out=kr)
            K2 = K.clone()
            K2[..., 2 * d:].mul_(r)
            dH = torch.empty_like(H[1:])                # dH[t]: the gradient of h_t
            dHU = torch.empty_like(G)
            dh, zs = dH.unbind(0), z.unbind(0)
            k2, dhu = K2.unflatten(-1, (3, d)).unbind(0), dHU.unflatten(-1, (3, d)).unbind(0)
            dh[T - 1].copy_(dM[T - 1])
            for t in reversed(range(T)):
                torch.mul(k2[t], dh[t].unsqueeze(1), out=dhu[t])
                if t:
                    torch.addmm(dM[t - 1], dHU[t], U, out=dh[t - 1]).addcmul_(dh[t], zs[t])
            dxw = (K.unflatten(-1, (3, d)) * dH.unsqueeze(2)).flatten(-2)
            dU = dHU[1:].flatten(0, 1).t() @ H[1:T].flatten(0, 1)
            return dxw.transpose(0, 1), dU


class RecurrentCore(nn.Module):
    """Stacked cells run step by step, dropout between layers (not after the last).

    A cell provides inputs(x) (its input half for all steps at once), initial(batch) (its
    state, a tuple), step(xw_t, *state, keep) -> (output, *state) and finish(outputs); cells
    with zero_start begin from a zero state whose products are skipped.

    From a fresh state (training, and evaluation of whole sequences) a cell's
    sequence(x, rows) -> finished outputs runs all its steps as one autograd Function (rows: the
    real positions, see _Rows); `fused = False` runs `step` instead, the reference the Functions
    are tested against. Under torch.compile the steps run, as before."""

    fused = True

    def __init__(self, cells, dropout: float):
        super().__init__()
        self.cells = nn.ModuleList(cells)
        self.drop = Dropout(dropout)

    def forward(self, x, keep=None, state=None, pos: int = 0, outputs_from: int = 0):
        B, T, _ = x.shape
        fused = state is None and self.fused and not torch.compiler.is_compiling()
        if fused:
            rows = _Rows.of(keep, B, T, x.device)
        if state is None:
            keep = None  # as in ReTran: trailing padding cannot change a real position's output
        for li, cell in enumerate(self.cells):
            if state is not None:
                s = state[li]
            else:
                s = cell.initial(B)
                if cell.zero_start:
                    s = (None,) * len(s)
            if fused:
                x = cell.sequence(x, rows)
            else:
                # unbind, not xw[:, t]: each slice's backward would materialize a zero gradient
                # the size of all of xw.
                xw = cell.inputs(x).unbind(1)
                ms = []
                for t in range(T):
                    m, *s = cell.step(xw[t], *s, None if keep is None else keep[:, t])
                    ms.append(m)
                if state is not None:
                    state[li] = tuple(s)
                x = cell.finish(torch.stack(ms, dim=1))
            if li < len(self.cells) - 1:
                x = self.drop(x)
        return x[:, outputs_from:], state

    def init_state(self, batch, max_len, device=None, dtype=None):
        return [tuple(s.detach().clone() for s in cell.initial(batch)) for cell in self.cells]


class LSTMCore(RecurrentCore):
    def __init__(self, d_model: int, d_ff: int, layers: int, dropout: float, standard: bool = False):
        super().__init__((SourceLSTMCell(d_model, d_model, d_ff, standard=standard)
                          for _ in range(layers)), dropout)


def build(size: dict, *, vocab_size: int, dropout: float, max_len: int, pad_id: int) -> LanguageModel:
    core = LSTMCore(size["d_model"], size["d_ff"], size["layers"], dropout)
    return LanguageModel(core, vocab_size, size["d_model"], dropout, pad_id)


def build_standard(size: dict, *, vocab_size: int, dropout: float, max_len: int,
                   pad_id: int) -> LanguageModel:
    """The modular source's LSTM LM: embedding d -> L standard layers (hidden d) -> classifier
    d -> V with bias."""
    d = size["d_model"]
    core = LSTMCore(d, d, size["layers"], dropout, standard=True)
    return LanguageModel(core, vocab_size, d, dropout, pad_id, logit_scale=False, head_bias=True)


def build_rnn(size: dict, *, vocab_size: int, dropout: float, max_len: int, pad_id: int,
              cell: str = "elman") -> LanguageModel:
    """The charlm source's recurrent LMs: embedding d_embed -> `layers` cells (hidden d_model)
    -> linear head with bias. Elman cells (one layer: SimpleRNN; more: the multi-layer RNN) or
    bias-free GRU cells."""
    Cell = {"elman": ElmanCell, "gru": GRUCell}[cell]
    e, d = size["d_embed"], size["d_model"]
    core = RecurrentCore((Cell(e if i == 0 else d, d) for i in range(size["layers"])), dropout)
    return LanguageModel(core, vocab_size, d, dropout, pad_id, logit_scale=False, head_bias=True,
                         d_embed=e)


def build_gru(size: dict, **kwargs) -> LanguageModel:
    return build_rnn(size, cell="gru", **kwargs)
