"""The expr grid's models at the source's sizes: parameter counts, padding, and the exactness of
the fast ReTran. (Shapes, causality, gradients and decoding of every model: test_model_contract;
initialization: test_inits.)"""

import pytest
import torch

from arithrepro.models.lm import count_params
from benchmarks.naive_retran import naive_retran
from tests.helpers import EXPECTED, LM_NAMES, PAD, build


@pytest.mark.parametrize("name,size", sorted(EXPECTED))
def test_parameter_counts_match_the_source(name, size):
    assert count_params(build(name, size)) == EXPECTED[(name, size)]


@pytest.mark.parametrize("name", LM_NAMES)
def test_trailing_padding_leaves_real_positions_alone(name):
    model = build(name).eval()
    x = torch.randint(4, 19, (2, 9))
    padded = torch.cat([x, torch.full((2, 4), PAD)], dim=1)
    with torch.no_grad():
        torch.testing.assert_close(model(padded)[:, :9], model(x))


def test_lstm_padding_leaves_the_state_unchanged():
    model = build("lstm").eval()
    x = torch.randint(4, 19, (2, 6))
    with torch.no_grad():
        s1, s2 = model.init_state(2, 10), model.init_state(2, 10)
        model(x, s1, 0)
        model(torch.cat([x, torch.full((2, 3), PAD)], 1), s2, 0)
    for (h1, c1), (h2, c2) in zip(s1, s2):
        assert torch.equal(h1, h2) and torch.equal(c1, c2)


@pytest.mark.parametrize("size", ["small", "large"])
def test_fast_retran_equals_the_naive_one_values_and_gradients(size):
    model = build("retran", size).eval()  # dropout off: the two draw random numbers differently
    x = torch.randn(3, 9, model.embed.embedding_dim, requires_grad=True)
    fast, _ = model.core(x)
    slow = naive_retran(model.core, x)
    torch.testing.assert_close(fast, slow, atol=1e-5, rtol=1e-5)
    names = ["input", *(n for n, _ in model.core.named_parameters())]
    params = [x, *model.core.parameters()]
    g_fast = torch.autograd.grad(fast.pow(2).sum(), params)
    g_slow = torch.autograd.grad(slow.pow(2).sum(), params)
    for name, gf, gs in zip(names, g_fast, g_slow):
        assert gs.any(), f"{name}: no gradient to compare"  # the loss reaches every parameter
        torch.testing.assert_close(gf, gs, atol=1e-4, rtol=1e-4, msg=lambda m: f"{name}: {m}")


def test_rotary_is_torchtunes_and_matches_the_package_import():
    from torchtune.modules import RotaryPositionalEmbeddings

    from arithrepro.models.transformer import rotary

    ours, theirs = rotary(8, 40), RotaryPositionalEmbeddings(dim=8, max_seq_len=40)
    assert type(ours).__name__ == "RotaryPositionalEmbeddings"
    x = torch.randn(2, 7, 3, 8)
    pos = torch.arange(5, 12)
    torch.testing.assert_close(ours(x, input_pos=pos), theirs(x, input_pos=pos))
