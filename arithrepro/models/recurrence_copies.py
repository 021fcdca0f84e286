"""The fused recurrences (recurrence.py) for an ensemble's copies (arithrepro/stacking.py): the
same equations and hand-written backward through time, every weight and state with a leading
copy dimension E, so that each step runs once for all copies (batched matmuls) instead of once
per copy.

An ensemble runs its template under torch.func.vmap, where a cell calls `vmapped(fn)`: an
autograd Function whose vmap rule hands the copies' stacked tensors to the Function here. Each
runs every row at every step (the template's skip_padding is off: which rows end where differs
between copies), in time-major buffers (T, E, B, .) whose steps are contiguous. Tests compare
each with the single-model Function run copy by copy.
"""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

from arithrepro.models.recurrence import _scratch, _tanh


def _bmm_t(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """sum over steps and rows of a^T b, per copy: a (T, E, B, m), b (T, E, B, n) -> (E, m, n)."""
    E = a.size(1)
    return torch.bmm(a.transpose(0, 1).reshape(E, -1, a.size(-1)).transpose(1, 2),
                     b.transpose(0, 1).reshape(E, -1, b.size(-1)))


def _rows(t: torch.Tensor) -> torch.Tensor:
    """(T, E, B, n) -> (E, T * B, n): each copy's rows, for one matmul over all steps."""
    return t.transpose(0, 1).reshape(t.size(1), -1, t.size(-1))


def _steps(t: torch.Tensor, T: int) -> torch.Tensor:
    """(E, T * B, n) -> (T, E, B, n)."""
    return t.view(t.size(0), T, -1, t.size(-1)).transpose(0, 1).contiguous()


class ElmanCopies(torch.autograd.Function):
    """ElmanRecurrence per copy: xw (E, B, T, d), U (E, d, d) -> h (E, B, T, d)."""

    @staticmethod
    def forward(ctx, xw, U):
        H = xw.permute(2, 0, 1, 3).contiguous()         # (T, E, B, d)
        Ut = U.transpose(1, 2)
        for t in range(H.size(0)):
            if t:
                H[t].baddbmm_(H[t - 1], Ut)
            H[t].tanh_()
        ctx.H = H
        ctx.save_for_backward(U)
        return H.permute(1, 2, 0, 3).contiguous()

    @staticmethod
    @once_differentiable
    def backward(ctx, dout):
        H, (U,) = ctx.H, ctx.saved_tensors
        del ctx.H
        with torch.autocast(dout.device.type, enabled=False):
            dM = dout.permute(2, 0, 1, 3)
            K = 1 - H * H
            dA = torch.empty_like(H)
            T = H.size(0)
            torch.mul(dM[T - 1], K[T - 1], out=dA[T - 1])
            for t in reversed(range(T - 1)):
                torch.baddbmm(dM[t], dA[t + 1], U, out=dA[t]).mul_(K[t])
            return dA.permute(1, 2, 0, 3), _bmm_t(dA[1:], H[:-1])


class GRUCopies(torch.autograd.Function):
    """GRURecurrence per copy: xw (E, B, T, 3d), U (E, 3d, d) -> h (E, B, T, d)."""

    @staticmethod
    def forward(ctx, xw, U):
        E, B, T, d3 = xw.shape
        d = d3 // 3
        G = xw.permute(2, 0, 1, 3).contiguous()          # (T, E, B, 3d): r, z, n
        HU = torch.empty_like(G)
        H = xw.new_empty(T + 1, E, B, d)
        HU[0].zero_()
        H[0].zero_()
        Ut = U.transpose(1, 2)
        for t in range(T):
            if t:
                torch.bmm(H[t], Ut, out=HU[t])
            g, hu = G[t], HU[t]
            g[..., :2 * d].add_(hu[..., :2 * d]).sigmoid_()
            n = g[..., 2 * d:]
            n.addcmul_(g[..., :d], hu[..., 2 * d:]).tanh_()
            torch.addcmul(n, g[..., d:2 * d], torch.sub(H[t], n, out=H[t + 1]), out=H[t + 1])
        ctx.buffers = G, HU, H
        ctx.save_for_backward(U)
        return H[1:].permute(1, 2, 0, 3).contiguous()

    @staticmethod
    @once_differentiable
    def backward(ctx, dout):
        (G, HU, H), (U,) = ctx.buffers, ctx.saved_tensors
        del ctx.buffers
        T, _, _, d3 = G.shape
        d = d3 // 3
        with torch.autocast(dout.device.type, enabled=False):
            dM = dout.permute(2, 0, 1, 3)
            r, z, n = G[..., :d], G[..., d:2 * d], G[..., 2 * d:]
            K = torch.empty_like(G)
            kr, kz, kn = K[..., :d], K[..., d:2 * d], K[..., 2 * d:]
            torch.mul(1 - z, 1 - n * n, out=kn)
            torch.mul((H[:-1] - n) * z, 1 - z, out=kz)
            torch.mul(kn * HU[..., 2 * d:], r * (1 - r), out=kr)
            K2 = K.clone()
            K2[..., 2 * d:].mul_(r)
            dH = torch.empty_like(H[1:])
            dHU = torch.empty_like(G)
            k2, dhu = K2.unflatten(-1, (3, d)), dHU.unflatten(-1, (3, d))
            dH[T - 1].copy_(dM[T - 1])
            for t in reversed(range(T)):
                torch.mul(k2[t], dH[t].unsqueeze(-2), out=dhu[t])
                if t:
                    torch.baddbmm(dM[t - 1], dHU[t], U, out=dH[t - 1]).addcmul_(dH[t], z[t])
            dxw = (K.unflatten(-1, (3, d)) * dH.unsqueeze(-2)).flatten(-2)
            return dxw.permute(1, 2, 0, 3), _bmm_t(dHU[1:], H[1:T])


class LSTMCopies(torch.autograd.Function):
    """LSTMRecurrence per copy over every row (no padding skipped): x (E, B, T, d_in), W
    (E, 4F, d_in), W_bias (E, 4F), U (E, 4F, D), then for the source cell P (E, D, F), P_bias,
    h0 (E, B, D), c0 (E, B, F), O (E, D_out, F), O_bias (the standard cell: None) ->
    (E, B, T, D_out).

    Buffers are (E, T, B, .), taken from the single-model Function's pool (recurrence._scratch):
    a copy's steps one after another, so that a whole-sequence matmul reads a copy's buffer as
    one (T * B, .) matrix and a step's slice is E blocks of B contiguous rows."""

    @staticmethod
    def forward(ctx, x, W, Wb, U, P, Pb, h0, c0, O, Ob):
        standard = P is None
        E, B, T, d_in = x.shape
        F, D = U.size(1) // 4, U.size(2)

        def new(steps, cols):
            return _scratch.take(x, E * steps * B, cols).view(E, steps, B, cols)

        X = new(T, d_in)
        X.copy_(x.transpose(1, 2))
        A = new(T, 4 * F)                                     # pre-activations, then i, f, o, g
        torch.baddbmm(Wb.unsqueeze(1), X.view(E, T * B, d_in), W.transpose(1, 2),
                      out=A.view(E, T * B, 4 * F))
        C = new(T + 1, F)                                     # c_{t-1} at t
        H = new(T, D)                                         # h_{t-1} at t
        M = new(T, F)                                         # outputs m_t
        TC = new(T, F) if standard else None                  # tanh(c_t)
        if standard:
            C[:, 0].zero_()
        else:
            C[:, 0].copy_(c0)
            H[:, 0].copy_(h0)
            Pt = P.transpose(1, 2)
        Ut = U.transpose(1, 2)
        for t in range(T):
            a = A[:, t]
            if not (standard and t == 0):                     # U h_{-1} = 0
                a.baddbmm_(H[:, t], Ut)
            a[..., :3 * F].sigmoid_()
            _tanh(a[..., 3 * F:], a[..., 3 * F:])
            i, f, o, g = a.split(F, dim=-1)
            torch.mul(f, C[:, t], out=C[:, t + 1]).addcmul_(i, g)
            if standard:
                torch.mul(o, _tanh(C[:, t + 1], TC[:, t]), out=M[:, t])
            else:
                torch.mul(o, C[:, t + 1], out=M[:, t])
            if t + 1 < T:
                if standard:
                    H[:, t + 1].copy_(M[:, t])
                else:
                    torch.baddbmm(Pb.unsqueeze(1), M[:, t], Pt, out=H[:, t + 1])
        Mr = M.view(E, T * B, F)
        Y = Mr if standard else torch.baddbmm(Ob.unsqueeze(1), Mr, O.transpose(1, 2))
        # a copy, never a view: the standard cell's Y is M, which goes back to the pool
        Y = x.new_empty(E, B, T, Y.size(-1)).copy_(Y.view(E, T, B, -1).transpose(1, 2))
        buffers = (X, A, C, H, M, TC)
        if any(ctx.needs_input_grad):
            ctx.standard, ctx.buffers = standard, buffers
            ctx.save_for_backward(W, U, P, O)
        else:
            _scratch.give(*buffers)
        return Y

    @staticmethod
    @once_differentiable
    def backward(ctx, dY):
        if not hasattr(ctx, "buffers"):
            raise RuntimeError("the copies' fused LSTM's backward runs once (no retain_graph)")
        standard, (X, A, C, H, M, TC) = ctx.standard, ctx.buffers
        W, U, P, O = ctx.saved_tensors
        del ctx.buffers
        E, T, B, F4 = A.shape
        F, D = F4 // 4, U.size(2)

        def new(steps, cols):
            return _scratch.take(A, E * steps * B, cols).view(E, steps, B, cols)

        with torch.autocast(dY.device.type, enabled=False):
            dYr = new(T, dY.size(-1))
            dYr.copy_(dY.transpose(1, 2))
            if standard:
                d = dYr                                       # the gradient of m_t
            else:
                d = new(T, F)
                torch.bmm(dYr.view(E, T * B, -1), O, out=d.view(E, T * B, F))
            dG = new(T, F4)
            dHin = None if standard else new(T, D)            # the gradient of H[:, t]
            dc = A.new_zeros(E, B, F)
            for t in reversed(range(T)):
                a, dm = A[:, t], d[:, t]
                i, f, o, g = a.split(F, dim=-1)
                if t + 1 < T:                                  # dm_t += dh_t . (h_t's map)
                    if standard:
                        dm.baddbmm_(dG[:, t + 1], U)
                    else:
                        dm.baddbmm_(dHin[:, t + 1], P)
                k = a[..., :3 * F] - a[..., :3 * F] ** 2       # sigmoid'
                ki, kf, ko = k.split(F, dim=-1)
                dgi, dgf, dgo, dgg = dG[:, t].split(F, dim=-1)
                if standard:
                    tc = TC[:, t]
                    dc.addcmul_(dm, o * (1 - tc * tc))
                    torch.mul(dm, tc, out=dgo).mul_(ko)
                else:
                    dc.addcmul_(dm, o)
                    torch.mul(dm, C[:, t + 1], out=dgo).mul_(ko)
                torch.mul(dc, g, out=dgi).mul_(ki)
                torch.mul(dc, C[:, t], out=dgf).mul_(kf)
                torch.mul(dc, i * (1 - g * g), out=dgg)
                if not standard:
                    torch.bmm(dG[:, t], U, out=dHin[:, t])      # dh_{t-1}
                dc.mul_(f)
            dGr = dG.view(E, T * B, F4)
            dx = torch.bmm(dGr, W).view(E, T, B, -1).transpose(1, 2)
            grads = [dx, dGr.transpose(1, 2) @ X.view(E, T * B, -1), dGr.sum(1)]
            if standard:
                grads += [_copy_bmm_t(dG[:, 1:], H[:, 1:])] + [None] * 6
            else:
                grads += [_copy_bmm_t(dG, H), _copy_bmm_t(dHin[:, 1:], M[:, :-1]),
                          dHin[:, 1:].sum((1, 2)), dHin[:, 0].clone(), dc,
                          dYr.view(E, T * B, -1).transpose(1, 2) @ M.view(E, T * B, F),
                          dYr.sum((1, 2))]
            _scratch.give(X, A, C, H, M, TC, dYr, None if standard else d, dG, dHin)
            return tuple(grads)


def _copy_bmm_t(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """sum over steps and rows of a^T b per copy, copy-major: a (E, S, B, m), b (E, S, B, n) ->
    (E, m, n)."""
    E = a.size(0)
    return torch.bmm(a.reshape(E, -1, a.size(-1)).transpose(1, 2), b.reshape(E, -1, b.size(-1)))


def _stacked(info, in_dims, args):
    """The vmapped arguments with the copy dimension first (an unbatched tensor expanded)."""
    out = []
    for a, dim in zip(args, in_dims):
        if not isinstance(a, torch.Tensor):
            out.append(a)
        elif dim is None:
            out.append(a.expand(info.batch_size, *a.shape))
        else:
            out.append(a.movedim(dim, 0))
    return out


def vmapped(copies: type[torch.autograd.Function], out_dim: int = 0,
            prepare=None) -> type[torch.autograd.Function]:
    """An autograd Function that runs only under an ensemble's vmap, where its rule calls
    `copies` on the stacked tensors (copy dimension first; `prepare(args) -> args` may adjust
    them, seeing what vmap hides, such as which tensors require gradients) and returns its
    output, whose copy dimension is `out_dim`."""

    class Vmapped(torch.autograd.Function):
        @staticmethod
        def forward(*args):
            raise RuntimeError(f"{copies.__name__} runs under an ensemble's vmap only")

        @staticmethod
        def setup_context(ctx, inputs, output):
            pass

        @staticmethod
        def backward(ctx, *grads):
            raise RuntimeError(f"{copies.__name__} runs under an ensemble's vmap only")

        @staticmethod
        def vmap(info, in_dims, *args):
            args = _stacked(info, in_dims, args)
            return copies.apply(*(prepare(args) if prepare else args)), out_dim

    Vmapped.__name__ = f"Vmapped{copies.__name__}"
    return Vmapped


VmappedElman, VmappedGRU, VmappedLSTM = (vmapped(f) for f in (ElmanCopies, GRUCopies, LSTMCopies))
