"""The fused ReTran training path (one autograd function per layer, hand-written backward) against
the per-op path and against a naive reference that applies the fused path's own dropout masks."""

import pytest
import torch
import torch.nn.functional as F

from arithrepro.models import retran, retran_fused
from arithrepro.models.lm import count_params
from benchmarks.naive_retran import naive_retran
from tests.helpers import EXPECTED, build

SIZES = ["small", "medium", "large"]


def outputs_and_grads(model, x, fused: bool):
    model.core.fused = fused
    out, _ = model.core(x)
    params = [x, *model.core.parameters()]
    # a loss that weighs every output differently, so no gradient cancels by symmetry
    weights = torch.linspace(-1, 2, out.numel(), dtype=out.dtype).view_as(out)
    grads = torch.autograd.grad((out * weights).sum() + out.pow(2).sum(), params)
    return out, grads


def assert_same(a, b, names):
    (out_a, grads_a), (out_b, grads_b) = a, b
    torch.testing.assert_close(out_a, out_b, rtol=1e-4, atol=1e-5)
    for name, ga, gb in zip(names, grads_a, grads_b):
        torch.testing.assert_close(ga, gb, rtol=1e-4, atol=1e-5, msg=lambda m: f"{name}: {m}")


def double_model(size, dropout=0.1, train=False):
    model = build("retran", size, dropout=dropout).double()
    return model.train(train)


def names(model):
    return ["input", *(n for n, _ in model.core.named_parameters())]


@pytest.mark.parametrize("size", ["small", "large"])
@pytest.mark.parametrize("mode", ["eval", "train-without-dropout"])
def test_fused_equals_per_op_without_dropout(size, mode):
    model = double_model(size, dropout=0.0 if mode != "eval" else 0.1, train=mode != "eval")
    x = torch.randn(3, 9, model.embed.embedding_dim, dtype=torch.float64, requires_grad=True)
    assert_same(outputs_and_grads(model, x, True), outputs_and_grads(model, x, False), names(model))


def test_fused_equals_the_per_op_path_in_float32():
    model = build("retran", "medium").eval()
    x = torch.randn(4, 12, model.embed.embedding_dim, requires_grad=True)
    model.core.fused = True
    fast, _ = model.core(x)
    model.core.fused = False
    slow, _ = model.core(x)
    torch.testing.assert_close(fast, slow, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("size", ["small", "medium"])
def test_fused_with_dropout_equals_the_reference_with_the_same_masks(size, monkeypatch):
    model = double_model(size, dropout=0.1, train=True)
    x = torch.randn(3, 9, model.embed.embedding_dim, dtype=torch.float64, requires_grad=True)
    drawn, original = [], retran_fused.dropout_mask

    def recording(m, p):
        drawn.append(original(m, p).clone())
        return m

    monkeypatch.setattr(retran_fused, "dropout_mask", recording)
    fused = outputs_and_grads(model, x, True)
    masks = [tuple(drawn[3 * i:3 * i + 3]) for i in range(len(model.core.layers))]
    assert len(drawn) == 3 * len(model.core.layers)
    assert any((m == 0).any() for m in drawn)  # dropout did drop something
    ref = naive_retran(model.core, x, masks)
    weights = torch.linspace(-1, 2, ref.numel(), dtype=ref.dtype).view_as(ref)
    grads = torch.autograd.grad((ref * weights).sum() + ref.pow(2).sum(),
                                [x, *model.core.parameters()])
    assert_same(fused, (ref, grads), names(model))



def test_dropout_masks_keep_at_rate_one_minus_p_scaled():
    torch.manual_seed(0)
    p = 0.1
    m = retran_fused.dropout_mask(torch.empty(1_000_000), p)
    kept = m != 0
    assert torch.equal(m[kept], torch.full_like(m[kept], 1 / (1 - p)))
    rate = kept.double().mean().item()
    assert abs(rate - (1 - p)) < 5 * (p * (1 - p) / m.numel()) ** 0.5  # five standard errors
    assert abs(m.double().mean().item() - 1) < 3e-3  # expectation preserved


def test_dropout_is_applied_in_training_and_not_in_eval():
    model = build("retran", "small", dropout=0.1)
    x = torch.randn(2, 7, model.embed.embedding_dim)
    with torch.no_grad():
        model.eval()
        a, b = model.core(x)[0], model.core(x)[0]
        assert torch.equal(a, b)
        model.train()
        c = model.core(x)[0]
        assert not torch.allclose(a, c)


@pytest.mark.parametrize("size", SIZES)
def test_parameters_and_state_dict_are_unchanged(size):
    model = build("retran", size)
    assert count_params(model) == EXPECTED[("retran", size)]
    assert set(model.state_dict()) == {n for n, _ in model.named_parameters()}


def test_no_grad_forward_equals_the_training_forward():
    model = build("retran", "small").eval()
    x = torch.randn(3, 8, model.embed.embedding_dim)
    with torch.no_grad():
        a, _ = model.core(x)
    b, _ = model.core(x.requires_grad_())
    torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_reused_buffers_give_the_same_gradients_as_fresh_ones():
    torch.manual_seed(1)
    model = double_model("small")
    xs = [torch.randn(4, 10, model.embed.embedding_dim, dtype=torch.float64, requires_grad=True)
          for _ in range(2)]
    first = [outputs_and_grads(model, x, True) for x in xs]   # the second reuses the buffers
    model.core._workspace = retran_fused.Workspace()
    fresh = outputs_and_grads(model, xs[1], True)
    assert_same(first[1], fresh, names(model))


def test_backward_after_a_later_forward_took_the_buffers_fails_loudly():
    model = build("retran", "small").eval()
    x = torch.randn(2, 6, model.embed.embedding_dim, requires_grad=True)
    out1, _ = model.core(x)
    out2, _ = model.core(x)    # holds its own buffers: out1's stay valid
    out1.sum().backward(retain_graph=True)  # done: its buffers go back to the pool
    out3, _ = model.core(x)    # takes them again
    (out2.sum() + out3.sum()).backward()
    with pytest.raises(RuntimeError, match="reused the buffers"):
        out1.sum().backward()


def padded_tokens():
    tokens = torch.randint(4, 19, (6, 13))
    for row, length in enumerate([13, 9, 1, 12, 5, 9]):  # trailing padding of mixed lengths
        tokens[row, length:] = 3
    return tokens


def logits_and_grads(model, tokens, fused, real_only):
    model.core.fused = fused
    logits = model(tokens)
    scored = tokens != 3 if real_only else torch.ones_like(tokens, dtype=torch.bool)
    targets = tokens.roll(-1, 1)
    loss = F.cross_entropy(logits[scored], targets[scored])
    return logits, torch.autograd.grad(loss, list(model.parameters()))


def test_full_model_with_padding_computed_matches_everywhere(monkeypatch):
    monkeypatch.setattr(retran.ReTranCore, "skip_padding", False)
    model = build("retran", "small").double().eval()
    tokens = padded_tokens()
    assert_same(logits_and_grads(model, tokens, True, False),
                logits_and_grads(model, tokens, False, False),
                ["logits", *(n for n, _ in model.named_parameters())])


@pytest.mark.parametrize("train", [False, True])
def test_skipped_padding_leaves_real_positions_and_their_gradients_alone(train):
    model = build("retran", "medium", dropout=0.0).double().train(train)
    tokens = padded_tokens()
    (fast, g_fast), (slow, g_slow) = (logits_and_grads(model, tokens, fused, True)
                                      for fused in (True, False))
    real = tokens != 3
    torch.testing.assert_close(fast[real], slow[real], rtol=1e-4, atol=1e-5)
    assert not fast[~real].any()  # not computed: the core's output there is zero
    for (name, _), a, b in zip(model.named_parameters(), g_fast, g_slow):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5, msg=lambda m: f"{name}: {m}")
