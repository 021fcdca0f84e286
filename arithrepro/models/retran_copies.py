"""ReTran's fused layer (retran_fused.py) for an ensemble's copies (arithrepro/stacking.py): the
same forward and hand-written backward through time with a copy dimension E beside the batch,
so that each step runs once for all copies. Attention over the cache is per (copy, row, head)
and batches them all; the projections batch the copies' own weights (bmm); the LayerNorms
normalize without their affine maps and apply each copy's after. Every row runs at every step
(an ensemble's template does not skip padding). Tests compare it with FusedLayer copy by copy.
"""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

from arithrepro.models.recurrence_copies import _bmm_t, vmapped
from arithrepro.models.retran_fused import (_triangle, dropout_mask, keep_for_backward,
                                            saved_for_backward)

aten = torch.ops.aten


def _per_step(a: torch.Tensor) -> torch.Tensor:
    """(E, S, ...) -> (E * S, ...): one matrix per copy and step, for a bmm."""
    return a.reshape(a.size(0) * a.size(1), *a.shape[2:])


def _layer_norm(z, w, b, eps):
    """LayerNorm with each copy's affine map: z (E, B, d), w and b (E, d) -> (out, mean, rstd)."""
    out, mean, rstd = torch.native_layer_norm(z, (z.size(-1),), None, None, eps)
    return torch.addcmul(b.unsqueeze(1), out, w.unsqueeze(1)), mean, rstd


def _layer_norm_grad(g, z, mean, rstd, w):
    """The input's gradient of _layer_norm, given its output's g."""
    return aten.native_layer_norm_backward(g * w.unsqueeze(1), z, (z.size(-1),), mean, rstd,
                                           None, None, [True, False, False])[0]


class ReTranCopies(torch.autograd.Function):
    """FusedLayer per copy: x (E, T, B, d) and FusedLayer's weights, each with a leading E ->
    y (T, E, B, d). rows is FusedLayer's and unused here: every row runs."""

    @staticmethod
    def forward(ctx, x, rows, pool, nh, eps, p_drop, saving, *weights):
        (qw, qb, kvw, kvb, ow, ob, law, lab, wu, wb, po, pob, lfw, lfb, h0, ch0, c0) = weights
        E, T, B, d = x.shape
        d_sa, dff = qw.size(-1), c0.size(-1)
        hs, EBH = d_sa // nh, E * B * nh
        off = _triangle(T)
        owner = object()

        def new(*shape):
            return pool.take(owner, shape, x)

        am = m1 = m2 = None
        if p_drop:
            shapes = (EBH, off[T]), (T, E, B, d), (T, E, B, d)
            am, m1, m2 = (dropout_mask(new(*shape), p_drop) for shape in shapes)
        X = x.transpose(0, 1)                                           # (T, E, B, d)
        Q = torch.baddbmm(_per_step(qb).unsqueeze(1), _per_step(x), _per_step(qw))
        Q = Q.view(E, T, B, d_sa).transpose(0, 1).contiguous()         # (T, E, B, d_sa)
        K, V = new(E, B, nh, T + 1, hs), new(E, B, nh, T + 1, hs)
        Kf, Vf = K.view(EBH, T + 1, hs), V.view(EBH, T + 1, hs)
        Y = x.new_empty(T + 1, E, B, d)
        Y[0] = h0.unsqueeze(1)

        def cache(p):
            kv = torch.baddbmm(kvb[:, p].unsqueeze(1), Y[p], kvw[:, p])  # (E, B, 2 d_sa)
            K[:, :, :, p] = kv[..., :d_sa].view(E, B, nh, hs)
            V[:, :, :, p] = kv[..., d_sa:].view(E, B, nh, hs)

        cache(0)
        Wt = new(EBH, off[T])
        A = new(T, E, B, d_sa)
        Z1, Z2 = new(T, E, B, d), new(T, E, B, d)
        S1, S2 = new(2, T, E, B, 1), new(2, T, E, B, 1)
        XH = new(T, E, B, 2 * d)
        ACT = new(T, E, B, 4 * dff)
        C = new(T + 1, E, B, dff)
        M = new(T, E, B, dff)
        XH[0, ..., d:] = ch0.unsqueeze(1)
        C[0] = c0.unsqueeze(1)
        for t in range(T):
            p = t + 1
            w = torch.bmm(Q[t].view(EBH, 1, hs), Kf[:, :p].transpose(1, 2)).softmax(-1)
            Wt[:, off[t]:off[p]] = w.view(EBH, p)
            if am is not None:
                w = w * am[:, off[t]:off[p]].unsqueeze(1)
            torch.bmm(w, Vf[:, :p], out=A[t].view(EBH, 1, hs))
            a = torch.baddbmm(ob.unsqueeze(1), A[t], ow)
            if m1 is None:
                torch.add(X[t], a, out=Z1[t])
            else:
                torch.addcmul(X[t], a, m1[t], out=Z1[t])
            XH[t, ..., :d], S1[0, t], S1[1, t] = _layer_norm(Z1[t], law, lab, eps)
            x1 = XH[t, ..., :d]
            act = torch.baddbmm(wb.unsqueeze(1), XH[t], wu, out=ACT[t])
            act[..., :3 * dff].sigmoid_()
            act[..., 3 * dff:].tanh_()
            i, f, o, g = act.split(dff, -1)
            torch.mul(f, C[t], out=C[p]).addcmul_(i, g)
            torch.mul(o, C[p], out=M[t])
            hout = torch.baddbmm(pob.unsqueeze(1), M[t], po)            # [next h | cell output]
            if p < T:
                XH[p, ..., d:] = hout[..., :d]
            if m2 is None:
                torch.add(x1, hout[..., d:], out=Z2[t])
            else:
                torch.addcmul(x1, hout[..., d:], m2[t], out=Z2[t])
            Y[p], S2[0, t], S2[1, t] = _layer_norm(Z2[t], lfw, lfb, eps)
            cache(p)
        keep_for_backward(ctx, saving, pool, owner,
                          (x, Q, K, V, Y, Wt, A, Z1, Z2, S1, S2, XH, ACT, C, M, *weights),
                          masks=(am, m1, m2), nh=nh)
        return Y[1:]

    @staticmethod
    @once_differentiable
    def backward(ctx, gY):
        (x, Q, K, V, Y, Wt, A, Z1, Z2, S1, S2, XH, ACT, C, M, *weights) = saved_for_backward(ctx)
        pool, owner = ctx.pool, ctx.owner
        (qw, qb, kvw, kvb, ow, ob, law, lab, wu, wb, po, pob, lfw, lfb, h0, ch0, c0) = weights
        E, T, B, d = x.shape
        nh, d_sa, dff = ctx.nh, qw.size(-1), c0.size(-1)
        hs, EBH = d_sa // nh, E * B * nh
        am, m1, m2 = ctx.masks
        off = _triangle(T)
        mine = object()

        def new(*shape):
            return pool.take(mine, shape, x)

        Kf, Vf = K.view(EBH, T + 1, hs), V.view(EBH, T + 1, hs)
        dK, dV = new(E, B, nh, T + 1, hs).zero_(), new(E, B, nh, T + 1, hs).zero_()
        dKf, dVf = dK.view(EBH, T + 1, hs), dV.view(EBH, T + 1, hs)
        DKV = new(T + 1, E, B, 2 * d_sa)
        GA, GF, DX, DAO = (new(T, E, B, d) for _ in range(4))
        DQ = new(T, E, B, d_sa)
        DG = new(T, E, B, 4 * dff)
        DHO = new(T, E, B, 2 * d)
        DHO[T - 1, ..., :d] = 0
        dA = new(E, B, 4 * dff)
        dc = x.new_zeros(E, B, dff)
        gY = gY.contiguous()

        def cached(p):  # every query that reads entry p is done: its gradient is complete
            DKV[p, ..., :d_sa].view(E, B, nh, hs).copy_(dK[:, :, :, p])
            DKV[p, ..., d_sa:].view(E, B, nh, hs).copy_(dV[:, :, :, p])

        for t in reversed(range(T)):
            p = t + 1
            cached(p)
            torch.baddbmm(gY[t], DKV[p], kvw[:, p].transpose(1, 2), out=GF[t])
            dz2 = _layer_norm_grad(GF[t], Z2[t], S2[0, t], S2[1, t], lfw)
            if m2 is None:
                DHO[t, ..., d:] = dz2
            else:
                torch.mul(dz2, m2[t], out=DHO[t, ..., d:])
            dm = torch.bmm(DHO[t], po.transpose(1, 2))
            i, f, o, g = ACT[t].split(dff, -1)
            dcn = torch.addcmul(dc, dm, o)
            di, df, do, dg = dA.split(dff, -1)
            torch.mul(dcn, g, out=di)
            torch.mul(dcn, C[t], out=df)
            torch.mul(dm, C[p], out=do)
            torch.mul(dcn, i, out=dg)
            aten.sigmoid_backward.grad_input(dA[..., :3 * dff], ACT[t, ..., :3 * dff],
                                             grad_input=DG[t, ..., :3 * dff])
            aten.tanh_backward.grad_input(dg, g, grad_input=DG[t, ..., 3 * dff:])
            torch.mul(dcn, f, out=dc)
            dxh = torch.bmm(DG[t], wu.transpose(1, 2))
            if t:
                DHO[t - 1, ..., :d] = dxh[..., d:]
            else:
                dch0 = dxh[..., d:].sum(1)
            torch.add(dxh[..., :d], dz2, out=GA[t])
            dz1 = _layer_norm_grad(GA[t], Z1[t], S1[0, t], S1[1, t], law)
            DX[t] = dz1
            if m1 is None:
                DAO[t] = dz1
            else:
                torch.mul(dz1, m1[t], out=DAO[t])
            dy = torch.bmm(DAO[t], ow.transpose(1, 2)).view(EBH, 1, hs)
            w = Wt[:, off[t]:off[p]].unsqueeze(1)
            wd = w if am is None else w * am[:, off[t]:off[p]].unsqueeze(1)
            dw = torch.bmm(dy, Vf[:, :p].transpose(1, 2))
            dVf[:, :p].addcmul_(wd.transpose(1, 2), dy)
            if am is not None:
                dw = dw * am[:, off[t]:off[p]].unsqueeze(1)
            ds = aten._softmax_backward_data(dw, w, -1, w.dtype)
            torch.bmm(ds, Kf[:, :p], out=DQ[t].view(EBH, 1, hs))
            dKf[:, :p].addcmul_(ds.transpose(1, 2), Q[t].view(EBH, 1, hs))
        cached(0)

        def ln_grads(G, Z, S):
            return (G * (Z - S[0]) * S[1]).sum((0, 2)), G.sum((0, 2))

        DQe = DQ.transpose(0, 1)                                         # (E, T, B, d_sa)
        dx = torch.bmm(_per_step(DQe), _per_step(qw).transpose(1, 2)).view(E, T, B, d)
        dx = dx + DX.transpose(0, 1)
        dqw = torch.bmm(_per_step(x).transpose(1, 2), _per_step(DQe)).view(qw.shape)
        dqb = DQe.sum(2)
        DKVe, Ye = DKV.transpose(0, 1), Y.transpose(0, 1)               # (E, T + 1, B, .)
        dkvw = torch.bmm(_per_step(Ye).transpose(1, 2), _per_step(DKVe)).view(kvw.shape)
        dkvb = DKVe.sum(2)
        dh0 = torch.bmm(DKV[0].sum(1).unsqueeze(1), kvw[:, 0].transpose(1, 2)).squeeze(1)
        grads = [dqw, dqb, dkvw, dkvb, _bmm_t(A, DAO), DAO.sum((0, 2)), *ln_grads(GA, Z1, S1),
                 _bmm_t(XH, DG), DG.sum((0, 2)), _bmm_t(M, DHO), DHO.sum((0, 2)),
                 *ln_grads(GF, Z2, S2), dh0, dch0, dc.sum(1)]
        pool.release(mine)
        pool.release(owner)
        return (dx, None, None, None, None, None, None, *grads)


def _saving(args: list) -> list:
    """FusedLayer's `saving` (whether a backward follows), decided on the stacked tensors: under
    vmap the caller cannot see which require gradients."""
    needs = torch.is_grad_enabled() and any(isinstance(a, torch.Tensor) and a.requires_grad
                                            for a in args)
    return [*args[:6], needs, *args[7:]]


VmappedReTran = vmapped(ReTranCopies, out_dim=1, prepare=_saving)
