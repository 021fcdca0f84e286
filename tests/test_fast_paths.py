"""The transformer's fast training pieces against their straightforward versions: dropout drawn
from torch.rand, attention with dropout outside SDPA, q/k/v in one matmul and one rotary call."""

import math

import pytest
import torch
import torch.nn.functional as F

from arithrepro.models import dropout as dropout_module
from arithrepro.models import transformer
from arithrepro.models.dropout import Dropout, dropout_scale
from arithrepro.models.transformer import Attention, TransformerConfig


def test_dropout_keeps_one_minus_p_and_scales_the_kept():
    torch.manual_seed(0)
    x = torch.ones(400_000)
    m = dropout_scale(x, 0.1)
    kept = m > 0
    values = m.unique().tolist()
    assert len(values) == 2 and values[0] == 0.0 and values[1] == pytest.approx(1 / 0.9)
    assert kept.float().mean().item() == pytest.approx(0.9, abs=0.002)
    layer = Dropout(0.1)
    assert torch.equal(layer.eval()(x), x)  # eval: identity
    xg = torch.randn(1000, requires_grad=True)
    torch.manual_seed(1)
    y = layer.train()(xg)
    y.sum().backward()
    torch.manual_seed(1)
    expected = dropout_scale(xg.detach(), 0.1)
    torch.testing.assert_close(y.detach(), xg.detach() * expected)
    torch.testing.assert_close(xg.grad, expected)  # d(x * mask * scale)/dx


def fixed_masks(monkeypatch, seed=0):
    """dropout_scale replaced by a seeded draw that the test can repeat."""
    drawn = []

    def scale(x, p):
        g = torch.Generator().manual_seed(seed + len(drawn))
        m = (torch.rand(x.shape, generator=g, dtype=x.dtype) >= p).to(x.dtype) / (1 - p)
        drawn.append(m)
        return m

    monkeypatch.setattr(transformer, "dropout_scale", scale)
    monkeypatch.setattr(dropout_module, "dropout_scale", scale)
    return drawn


@pytest.mark.parametrize("causal,masked", [(True, False), (False, False), (False, True)])
def test_attention_with_dropout_equals_the_written_out_one(monkeypatch, causal, masked):
    torch.manual_seed(0)
    B, nh, T, hs = 3, 2, 7, 4
    cfg = TransformerConfig(d_model=nh * hs, heads=nh, dropout=0.3, max_len=16)
    attn = Attention(cfg).double().train()
    q, k, v = (torch.randn(B, nh, T, hs, dtype=torch.float64, requires_grad=True) for _ in range(3))
    allowed = torch.rand(T, T) > 0.3 if masked else None
    if masked:
        allowed[:, 0] = True
    drawn = fixed_masks(monkeypatch)
    y = attn.attend(q, k, v, causal, allowed)
    grads = torch.autograd.grad(y.square().sum(), [q, k, v, attn.o.weight])
    # the same maths written out, with the mask the fast path drew
    scores = q @ k.transpose(-2, -1) / math.sqrt(hs)
    if causal:
        scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    if masked:
        scores = scores.masked_fill(~allowed, float("-inf"))
    w = scores.softmax(-1) * drawn[0].view(B, nh, T, T)
    ref = attn.o((w @ v).transpose(1, 2).flatten(2))
    ref_grads = torch.autograd.grad(ref.square().sum(), [q, k, v, attn.o.weight])
    torch.testing.assert_close(y, ref)
    for a, b in zip(grads, ref_grads):
        torch.testing.assert_close(a, b)


def test_attention_without_dropout_is_sdpa():
    torch.manual_seed(0)
    attn = Attention(TransformerConfig(d_model=16, heads=4, max_len=16)).train()
    q, k, v = (torch.randn(2, 4, 5, 4) for _ in range(3))
    ref = attn.o(F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).flatten(2))
    torch.testing.assert_close(attn.attend(q, k, v, True), ref)


@pytest.mark.parametrize("rope,pos", [(True, 0), (True, 3), (False, 0)])
def test_qkv_in_one_matmul_equals_separate_projections(rope, pos):
    torch.manual_seed(0)
    attn = Attention(TransformerConfig(d_model=24, d_sa=16, heads=4, max_len=32, rope=rope)).double()
    for lin in (attn.q, attn.k, attn.v):
        torch.nn.init.normal_(lin.bias)
    x = torch.randn(3, 6, 24, dtype=torch.float64, requires_grad=True)
    fused = attn.qkv(x, pos)
    separate = (attn.query(x, pos), *attn.key_value(x, pos))
    for a, b in zip(fused, separate):
        torch.testing.assert_close(a, b)
    gf = torch.autograd.grad(sum(t.sin().sum() for t in fused), [x, attn.q.weight, attn.k.bias])
    gs = torch.autograd.grad(sum(t.sin().sum() for t in separate), [x, attn.q.weight, attn.k.bias])
    for a, b in zip(gf, gs):
        torch.testing.assert_close(a, b)
