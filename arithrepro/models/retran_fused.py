"""ReTran's fused training layer (see retran.py): one autograd Function over a whole sequence
with the backward through time written by hand, the dropout masks it draws, and the pool of
buffers it reuses between steps.
"""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

aten = torch.ops.aten


def dropout_mask(m: torch.Tensor, p: float) -> torch.Tensor:
    """Fill m with a scaled keep mask: 1 / (1 - p) where kept (probability 1 - p), else 0.

    One uniform draw per site for the whole sequence; comparing uniforms in [0, 1) with 1 - p
    keeps each entry with probability 1 - p (and is faster than bernoulli_ here)."""
    return torch.rand(m.shape, out=m).lt_(1.0 - p).mul_(1.0 / (1.0 - p))


class Workspace:
    """Buffers for `FusedLayer`, kept between calls.

    A fresh allocation this large comes from mmap, and first touching its pages costs more here
    than the arithmetic that fills them; so a buffer goes back to the pool when the backward that
    reads it is done, and the next forward takes it again. A forward lends its buffers to one
    owner; the backward checks that the owner still has them, so backpropagating through a graph
    whose buffers a later forward has taken fails instead of reading overwritten values."""

    def __init__(self):
        self.slots = {}  # (shape, dtype, device) -> [[tensor, owner, lent]]

    def take(self, owner, shape, like: torch.Tensor) -> torch.Tensor:
        slots = self.slots.setdefault((tuple(shape), like.dtype, like.device), [])
        slot = next((s for s in slots if not s[2]), None)
        if slot is None:
            slot = [like.new_empty(shape), None, False]
            slots.append(slot)
        slot[1:] = owner, True
        return slot[0]

    def held(self, owner) -> int:
        return sum(s[1] is owner for slots in self.slots.values() for s in slots)

    def release(self, owner) -> None:
        for slots in self.slots.values():
            for s in slots:
                if s[1] is owner:
                    s[2] = False  # the owner stays recorded: a later take replaces it


def _triangle(T: int) -> list[int]:
    """Offsets of step t's p = t + 1 attention entries in a flat lower triangle."""
    return [t * (t + 1) // 2 for t in range(T + 1)]


def keep_for_backward(ctx, saving: bool, pool, owner, tensors, **state) -> None:
    """Save what a fused layer's backward reads (its pooled buffers stay taken, and the pool's
    count for `owner` is noted, so that backward can tell a later forward took them) or, with
    nothing to differentiate, give the buffers back."""
    if not saving:
        pool.release(owner)
        return
    ctx.save_for_backward(*tensors)
    for name, value in state.items():
        setattr(ctx, name, value)
    ctx.pool, ctx.owner, ctx.held = pool, owner, pool.held(owner)


def saved_for_backward(ctx, hint: str = "") -> tuple:
    """What keep_for_backward saved, once sure no later forward reused its buffers."""
    if ctx.pool.held(ctx.owner) != ctx.held:
        raise RuntimeError("a later forward of this ReTran core reused the buffers of the "
                           "graph being backpropagated: backward each graph before the next "
                           f"forward{hint}")
    return ctx.saved_tensors


class FusedLayer(torch.autograd.Function):
    """One ReTran layer over a whole sequence from a fresh state: x (T, B, d) -> y (T, B, d).

    `weights` is `fused_weights`' list. rows[t]: step t runs on rows :rows[t] only (non-increasing;
    the other rows' outputs are zero). Dropout at rate p_drop (0: none), its masks drawn here by
    `dropout_mask`: attention weights (B * nh, T (T + 1) / 2, step t's entries from t (t + 1) / 2
    on), after attention (T, B, d), after Out (T, B, d). saving: whether a backward will follow
    (else the buffers go back to the pool at once)."""

    @staticmethod
    def forward(ctx, x, rows, pool, nh, eps, p_drop, saving, *weights):
        (qw, qb, kvw, kvb, ow, ob, law, lab, wu, wb, po, pob, lfw, lfb, h0, ch0, c0) = weights
        T, B, d = x.shape
        d_sa, dff = qw.size(2), c0.numel()
        hs, BH = d_sa // nh, B * nh
        off = _triangle(T)
        owner = object()

        def new(*shape):
            return pool.take(owner, shape, x)

        am = m1 = m2 = None
        if p_drop:
            shapes = (BH, off[T]), (T, B, d), (T, B, d)
            am, m1, m2 = (dropout_mask(new(*shape), p_drop) for shape in shapes)
        Q = torch.baddbmm(qb.unsqueeze(1), x, qw, out=new(T, B, d_sa))  # no recurrence in q
        K, V = new(B, nh, T + 1, hs), new(B, nh, T + 1, hs)
        Kf, Vf = K.view(BH, T + 1, hs), V.view(BH, T + 1, hs)
        Y = x.new_zeros(T + 1, B, d)          # cache entries h0, then the outputs (not pooled:
        Y[0] = h0                             # the output is a view of it)
        kv = torch.addmm(kvb[0], Y[0], kvw[0])
        K[:, :, 0], V[:, :, 0] = kv[:, :d_sa].view(B, nh, hs), kv[:, d_sa:].view(B, nh, hs)
        Wt = new(BH, off[T])                  # softmax weights before dropout
        A = new(T, B, d_sa)                   # attention before o
        Z1, Z2 = new(T, B, d), new(T, B, d)   # LayerNorm inputs, their means and 1 / std
        S1, S2 = new(2, T, B, 1), new(2, T, B, 1)
        XH = new(T, B, 2 * d)                 # gate inputs [x | h]
        ACT = new(T, B, 4 * dff)              # i, f, o, g
        C = new(T + 1, B, dff)
        M = new(T, B, dff)                    # o * c
        if rows[-1] < B:
            # the batched weight gradients read every row: finished rows must hold zeros
            for buf in (A, Z1, Z2, S1, S2, XH, M):
                buf.zero_()
        XH[0, :, d:] = ch0
        C[0] = c0
        for t in range(T):
            p, n = t + 1, rows[t]
            nb = n * nh
            w = torch.bmm(Q[t, :n].view(nb, 1, hs), Kf[:nb, :p].transpose(1, 2)).softmax(-1)
            Wt[:nb, off[t]:off[p]] = w.view(nb, p)
            if am is not None:
                w = w * am[:nb, off[t]:off[p]].unsqueeze(1)
            torch.bmm(w, Vf[:nb, :p], out=A[t, :n].view(nb, 1, hs))
            a = torch.addmm(ob, A[t, :n], ow)
            if m1 is None:
                torch.add(x[t, :n], a, out=Z1[t, :n])
            else:
                torch.addcmul(x[t, :n], a, m1[t, :n], out=Z1[t, :n])
            XH[t, :n, :d], S1[0, t, :n], S1[1, t, :n] = torch.native_layer_norm(
                Z1[t, :n], (d,), law, lab, eps)
            x1 = XH[t, :n, :d]
            act = torch.addmm(wb, XH[t, :n], wu, out=ACT[t, :n])
            act[:, :3 * dff].sigmoid_()
            act[:, 3 * dff:].tanh_()
            i, f, o, g = act.split(dff, 1)
            torch.mul(f, C[t, :n], out=C[p, :n]).addcmul_(i, g)
            torch.mul(o, C[p, :n], out=M[t, :n])
            hout = torch.addmm(pob, M[t, :n], po)  # [next h | cell output]
            if p < T:
                XH[p, :n, d:] = hout[:, :d]
            if m2 is None:
                torch.add(x1, hout[:, d:], out=Z2[t, :n])
            else:
                torch.addcmul(x1, hout[:, d:], m2[t, :n], out=Z2[t, :n])
            Y[p, :n], S2[0, t, :n], S2[1, t, :n] = torch.native_layer_norm(Z2[t, :n], (d,), lfw,
                                                                           lfb, eps)
            kv = torch.addmm(kvb[p], Y[p, :n], kvw[p])
            K[:n, :, p], V[:n, :, p] = kv[:, :d_sa].view(n, nh, hs), kv[:, d_sa:].view(n, nh, hs)
        keep_for_backward(ctx, saving, pool, owner,
                          (x, Q, K, V, Y, Wt, A, Z1, Z2, S1, S2, XH, ACT, C, M, *weights),
                          masks=(am, m1, m2), nh=nh, rows=rows)
        return Y[1:]

    @staticmethod
    @once_differentiable
    def backward(ctx, gY):
        (x, Q, K, V, Y, Wt, A, Z1, Z2, S1, S2, XH, ACT, C, M, *weights) = saved_for_backward(
            ctx, ", or set core.fused = False")
        pool, owner = ctx.pool, ctx.owner
        (qw, qb, kvw, kvb, ow, ob, law, lab, wu, wb, po, pob, lfw, lfb, h0, ch0, c0) = weights
        T, B, d = x.shape
        nh, d_sa, dff = ctx.nh, qw.size(2), c0.numel()
        hs, BH = d_sa // nh, B * nh
        am, m1, m2 = ctx.masks
        rows = ctx.rows
        off = _triangle(T)
        mine = object()  # the backward's own buffers

        def new(*shape):
            return pool.take(mine, shape, x)

        no_affine = [True, False, False]  # the LayerNorms' own gradients come after the loop
        Kf, Vf = K.view(BH, T + 1, hs), V.view(BH, T + 1, hs)
        dK, dV = new(B, nh, T + 1, hs).zero_(), new(B, nh, T + 1, hs).zero_()
        dKf, dVf = dK.view(BH, T + 1, hs), dV.view(BH, T + 1, hs)
        DKV = new(T + 1, B, 2 * d_sa)         # of the cache entries' keys and values
        GA, GF = new(T, B, d), new(T, B, d)   # of the LayerNorm outputs
        DX = new(T, B, d)
        DAO = new(T, B, d)                    # of o's output
        DQ = new(T, B, d_sa)
        DG = new(T, B, 4 * dff)               # of the gate pre-activations
        DHO = new(T, B, 2 * d)                # of [next h | cell output]
        if rows[-1] < B:                      # finished rows: no gradient
            for buf in (GA, GF, DX, DAO, DQ, DG, DHO):
                buf.zero_()
        DHO[T - 1, :, :d] = 0
        dA = new(B, 4 * dff)
        dc = x.new_zeros(B, dff)
        gY = gY.contiguous()
        for t in reversed(range(T)):
            p, n = t + 1, rows[t]
            nb = n * nh
            # every query that reads cache entry p has been through: its gradient is complete
            DKV[p, :, :d_sa].view(B, nh, hs).copy_(dK[:, :, p])
            DKV[p, :, d_sa:].view(B, nh, hs).copy_(dV[:, :, p])
            torch.addmm(gY[t, :n], DKV[p, :n], kvw[p].t(), out=GF[t, :n])
            dz2 = aten.native_layer_norm_backward(GF[t, :n], Z2[t, :n], (d,), S2[0, t, :n],
                                                  S2[1, t, :n], lfw, None, no_affine)[0]
            if m2 is None:
                DHO[t, :n, d:] = dz2
            else:
                torch.mul(dz2, m2[t, :n], out=DHO[t, :n, d:])
            dm = DHO[t, :n] @ po.t()
            i, f, o, g = ACT[t, :n].split(dff, 1)
            dcn = torch.addcmul(dc[:n], dm, o)  # c_t's gradient: through c_{t+1} and through m
            di, df, do, dg = dA[:n].split(dff, 1)
            torch.mul(dcn, g, out=di)
            torch.mul(dcn, C[t, :n], out=df)
            torch.mul(dm, C[p, :n], out=do)
            torch.mul(dcn, i, out=dg)
            aten.sigmoid_backward.grad_input(dA[:n, :3 * dff], ACT[t, :n, :3 * dff],
                                             grad_input=DG[t, :n, :3 * dff])
            aten.tanh_backward.grad_input(dg, g, grad_input=DG[t, :n, 3 * dff:])
            torch.mul(dcn, f, out=dc[:n])
            dxh = DG[t, :n] @ wu.t()          # [x1 | h]'s gradient through the gates
            if t:
                DHO[t - 1, :n, :d] = dxh[:, d:]
            else:
                dch0 = dxh[:, d:].sum(0)
            torch.add(dxh[:, :d], dz2, out=GA[t, :n])
            dz1 = aten.native_layer_norm_backward(GA[t, :n], Z1[t, :n], (d,), S1[0, t, :n],
                                                  S1[1, t, :n], law, None, no_affine)[0]
            DX[t, :n] = dz1
            if m1 is None:
                DAO[t, :n] = dz1
            else:
                torch.mul(dz1, m1[t, :n], out=DAO[t, :n])
            dy = (DAO[t, :n] @ ow.t()).view(nb, 1, hs)
            w = Wt[:nb, off[t]:off[p]].unsqueeze(1)
            wd = w if am is None else w * am[:nb, off[t]:off[p]].unsqueeze(1)
            dw = torch.bmm(dy, Vf[:nb, :p].transpose(1, 2))
            dVf[:nb, :p].addcmul_(wd.transpose(1, 2), dy)
            if am is not None:
                dw = dw * am[:nb, off[t]:off[p]].unsqueeze(1)
            ds = aten._softmax_backward_data(dw, w, -1, w.dtype)
            torch.bmm(ds, Kf[:nb, :p], out=DQ[t, :n].view(nb, 1, hs))
            dKf[:nb, :p].addcmul_(ds.transpose(1, 2), Q[t, :n].view(nb, 1, hs))
        DKV[0, :, :d_sa].view(B, nh, hs).copy_(dK[:, :, 0])
        DKV[0, :, d_sa:].view(B, nh, hs).copy_(dV[:, :, 0])

        # everything not sequential: the weights' gradients, the input's through the queries
        def flat(t):
            return t.reshape(-1, t.size(-1))

        def ln_grads(G, Z, S):
            return (G * (Z - S[0]) * S[1]).sum((0, 1)), G.sum((0, 1))

        dx = torch.baddbmm(DX, DQ, qw.transpose(1, 2))
        dqw, dqb = torch.bmm(x.transpose(1, 2), DQ), DQ.sum(1)
        dkvw, dkvb = torch.bmm(Y.transpose(1, 2), DKV), DKV.sum(1)
        dow, dob = flat(A).t() @ flat(DAO), DAO.sum((0, 1))
        dwu, dwb = flat(XH).t() @ flat(DG), DG.sum((0, 1))
        dpo, dpob = flat(M).t() @ flat(DHO), DHO.sum((0, 1))
        dh0 = DKV[0].sum(0) @ kvw[0].t()
        grads = [dqw, dqb, dkvw, dkvb, dow, dob, *ln_grads(GA, Z1, S1), dwu, dwb, dpo, dpob,
                 *ln_grads(GF, Z2, S2), dh0, dch0, dc.sum(0)]
        pool.release(mine)
        pool.release(owner)
        return (dx, None, None, None, None, None, None, *grads)
