"""Parameter counts, shapes, causality, padding and the exactness of the fast ReTran."""

import pytest
import torch

from arithrepro.models import MODELS
from arithrepro.models.lm import count_params
from benchmarks.naive_retran import naive_retran

SIZES = {
    "gpt": {"small": (32, 128, 32, 3, 8), "medium": (64, 256, 64, 4, 8), "large": (128, 512, 128, 6, 8)},
    "retran": {"small": (16, 64, 16, 3, 8), "medium": (32, 128, 32, 4, 8), "large": (64, 256, 64, 6, 8)},
    "lstm": {"small": (16, 64, 3), "medium": (32, 128, 4), "large": (64, 256, 6)},
}
# The source's counts (untied embeddings, vocabulary 19).
EXPECTED = {
    ("gpt", "small"): 39_328, ("gpt", "medium"): 202_368, ("gpt", "large"): 1_194_496,
    ("retran", "small"): 35_936, ("retran", "medium"): 185_536, ("retran", "large"): 1_096_064,
    ("lstm", "small"): 32_432, ("lstm", "medium"): 168_000, ("lstm", "large"): 994_304,
}
PAD = 3


LM_NAMES = ["gpt", "lstm", "retran"]


def build(name, size="small", dropout=0.1, max_len=48):
    spec = MODELS[name]
    torch.manual_seed(0)
    return spec.build(dict(zip(spec.size_fields, SIZES[name][size])), vocab_size=19,
                      dropout=dropout, max_len=max_len, pad_id=PAD)


def test_every_registered_model_is_tested():
    from tests.test_charlm_models import CHARLM_MODELS
    from tests.test_length_models import LENGTH_MODELS
    from tests.test_modular_models import MODULAR_MODELS

    assert set(MODELS) == set(LM_NAMES) | set(LENGTH_MODELS) | set(MODULAR_MODELS) | set(CHARLM_MODELS)


@pytest.mark.parametrize("name,size", sorted(EXPECTED))
def test_parameter_counts_match_the_source(name, size):
    assert count_params(build(name, size)) == EXPECTED[(name, size)]


@pytest.mark.parametrize("name", LM_NAMES)
def test_shapes_and_gradients(name):
    model = build(name)
    x = torch.randint(4, 19, (5, 11))
    logits = model(x)
    assert logits.shape == (5, 11, 19)
    logits.sum().backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None]
    assert not missing, f"parameters without gradient: {missing}"


@pytest.mark.parametrize("name", LM_NAMES)
def test_causal_future_tokens_do_not_change_the_past(name):
    model = build(name).eval()
    x = torch.randint(4, 19, (3, 12))
    y = x.clone()
    y[:, 7:] = torch.randint(4, 19, (3, 5))
    with torch.no_grad():
        a, b = model(x), model(y)
    torch.testing.assert_close(a[:, :7], b[:, :7])
    assert not torch.allclose(a[:, 7:], b[:, 7:])


@pytest.mark.parametrize("name", LM_NAMES)
def test_trailing_padding_leaves_real_positions_alone(name):
    model = build(name).eval()
    x = torch.randint(4, 19, (2, 9))
    padded = torch.cat([x, torch.full((2, 4), PAD)], dim=1)
    with torch.no_grad():
        torch.testing.assert_close(model(padded)[:, :9], model(x))


@pytest.mark.parametrize("name", LM_NAMES)
def test_cached_steps_equal_the_full_forward(name):
    model = build(name, "medium").eval()
    x = torch.randint(4, 19, (4, 14))
    with torch.no_grad():
        full = model(x)
        state = model.init_state(4, 20)
        first, _ = model(x[:, :5], state, 0)
        steps = [first] + [model(x[:, t:t + 1], state, t)[0] for t in range(5, 14)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)


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
    params = [x, *model.core.parameters()]
    g_fast = torch.autograd.grad(fast.pow(2).sum(), params, allow_unused=True)
    g_slow = torch.autograd.grad(slow.pow(2).sum(), params, allow_unused=True)
    for gf, gs in zip(g_fast, g_slow):
        if gs is None:
            assert gf is None or not gf.any()
        else:
            torch.testing.assert_close(gf, gs, atol=1e-4, rtol=1e-4)


def test_gpt_initialization_is_gpt2():
    model = build("gpt", "large")
    layers = SIZES["gpt"]["large"][3]
    o = model.core.blocks[0].attn.o.weight
    q = model.core.blocks[0].attn.q.weight
    assert abs(q.std().item() - 0.02) < 0.002
    assert abs(o.std().item() - 0.02 / (2 * layers) ** 0.5) < 0.001
    assert not model.core.blocks[0].attn.q.bias.any()


def test_lstm_cell_initialization():
    cell = build("lstm").core.cells[0]
    d_ff = cell.d_ff
    assert torch.equal(cell.W.bias[d_ff:2 * d_ff], torch.ones(d_ff))
    assert not cell.W.bias[:d_ff].any() and not cell.W.bias[2 * d_ff:].any()
    for gate in cell.U.weight.split(d_ff):  # (d_ff, d_model): orthonormal columns
        torch.testing.assert_close(gate.T @ gate, torch.eye(gate.size(1)), atol=1e-5, rtol=0)


def test_rotary_is_torchtunes_and_matches_the_package_import():
    from torchtune.modules import RotaryPositionalEmbeddings

    from arithrepro.models.transformer import rotary

    ours, theirs = rotary(8, 40), RotaryPositionalEmbeddings(dim=8, max_seq_len=40)
    assert type(ours).__name__ == "RotaryPositionalEmbeddings"
    x = torch.randn(2, 7, 3, 8)
    pos = torch.arange(5, 12)
    torch.testing.assert_close(ours(x, input_pos=pos), theirs(x, input_pos=pos))
