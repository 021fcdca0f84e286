"""Recurrences run as one autograd Function per layer, with backpropagation through time written
by hand (see recurrent.py, whose cells call these from `sequence`): the LSTMs' (source and
standard), the Elman cell's and the bias-free GRU's, plus the row bookkeeping that lets the LSTMs
skip trailing padding and the buffers kept between calls.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch.autograd.function import once_differentiable


def run_fused(recurrence, x, *args):
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


class Rows(NamedTuple):
    """Which rows each step runs: sequences sorted longest first, so that at step t the rows
    still inside their sequence are the first n[t]; step t's rows are packed at rows
    start[t]: start[t] + n[t] of every (N, .) buffer, N the number of real positions."""
    n: list[int]
    start: list[int]
    perm: torch.Tensor     # (B,) sorted position -> batch row
    index: torch.Tensor    # (N,) packed row -> row of x.reshape(B * T, d)

    @staticmethod
    def of(keep: torch.Tensor | None, B: int, T: int, device) -> "Rows":
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
        return Rows(n, start, perm, index)

    @staticmethod
    def full(B: int, T: int, device) -> "Rows":
        """Every row at every step, in batch order: what `of` gives without padding, made
        without reading the batch (a step that must not wait for the device: a CUDA graph)."""
        perm = torch.arange(B, device=device)
        index = (perm[None, :] * T + torch.arange(T, device=device)[:, None]).flatten()
        return Rows([B] * T, [t * B for t in range(T)], perm, index)


class LSTMRecurrence(torch.autograd.Function):
    """All steps of a SourceLSTMCell from its initial state, input and output maps included,
    with backpropagation through time written by hand: per step only the truly sequential
    products on the rows still inside their sequence, every weight gradient one matmul over all
    steps.

    forward(x (B, T, d_in), rows (Rows), W (4F, d_in), W_bias, U (4F, D), P (D, F), P_bias,
            h0 (B, D), c0 (B, F), O (D_out, F), O_bias) -> Out(o * c) (B, T, D_out);
    for the standard cell P, P_bias, h0, c0, O, O_bias are None (zero start) and the output is
    h = o * tanh(c) (B, T, F). Zero at padding.

    Buffers are packed (N, .) rows, each step's contiguous (see Rows). The derivative factors
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


class ElmanRecurrence(torch.autograd.Function):
    """h_t = tanh(xw_t + h_{t-1} U^T) from h = 0 for all T steps, backward through time by hand
    (see LSTMRecurrence): xw (B, T, d) -> h (B, T, d)."""

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


class GRURecurrence(torch.autograd.Function):
    """The bias-free GRU (GRUCell) from h = 0 for all T steps, backward through time by hand
    (see LSTMRecurrence): xw (B, T, 3d) -> h (B, T, d)."""

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
