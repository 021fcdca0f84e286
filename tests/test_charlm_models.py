"""The charlm models: parameter counts at the source's sizes, the hand-written cells against
PyTorch's, weight tying, the block size, and sampling with the cache. (Shapes, causality,
gradients, decoding and the trace's attention of every model: test_model_contract.)"""

import pytest
import torch

from arithrepro.decoding import sample
from arithrepro.models.lm import count_params
from tests.helpers import DIMS, build

V = DIMS["nanogpt"]["vocab_size"]  # the vocabulary at which the source quotes its transformer counts
# The source's sizes, one layer: nanoGPT's n_embd 128 with 4 heads; the recurrent nets' embedding
# 64 and hidden 256.
SPEC = {"nanogpt": {"d_model": 128, "heads": 4, "layers": 1},
        "rnn": {"d_embed": 64, "d_model": 256, "layers": 1},
        "gru": {"d_embed": 64, "d_model": 256, "layers": 1}}


def charlm(name, **fields):
    """`name` at the source's size with `fields` replaced; vocab_size and max_len, when given,
    replace the dims of DIMS."""
    dims = {k: fields.pop(k) for k in ("vocab_size", "max_len") if k in fields}
    return build(name, {**SPEC[name], **fields}, **dims)


@pytest.mark.parametrize("layers,expected", [(1, 222_592), (8, 1_606_912)])
def test_transformer_counts_are_the_sources(layers, expected):
    """The source prints 222,592 (1 layer) and 1.6e+06 (8 layers) at block 100, n_embd 128, tied
    head: its architecture gives exactly these at a vocabulary of 92 characters."""
    model = charlm("nanogpt", layers=layers)
    d, T = 128, 100
    # token embedding (= the head), positions, per block bias-free q/k/v/o + 2 LayerNorms + a 4d
    # MLP with biases, a final LayerNorm
    assert count_params(model) == V * d + T * d + layers * (12 * d * d + 9 * d) + 2 * d == expected


@pytest.mark.parametrize("layers", [1, 3])
def test_rnn_counts(layers):
    e, d = 64, 256
    rnn = charlm("rnn", layers=layers)
    cells = (e * d + d * d + 2 * d) + (layers - 1) * (2 * d * d + 2 * d)
    assert count_params(rnn) == V * e + cells + d * V + V
    gru = charlm("gru", layers=layers)
    assert count_params(gru) == V * e + 3 * (e * d + d * d) + (layers - 1) * 6 * d * d + d * V + V


@pytest.mark.parametrize("name,Torch", [("rnn", torch.nn.RNN), ("gru", torch.nn.GRU)])
def test_cells_equal_torchs(name, Torch):
    e, d, L = 8, 16, 2
    model = charlm(name, vocab_size=11, d_embed=e, d_model=d, layers=L)
    bias = name == "rnn"
    ref = Torch(e, d, num_layers=L, batch_first=True, bias=bias)
    with torch.no_grad():
        for i, cell in enumerate(model.core.cells):
            getattr(ref, f"weight_ih_l{i}").copy_(cell.W.weight)
            getattr(ref, f"weight_hh_l{i}").copy_(cell.U.weight)
            if bias:
                getattr(ref, f"bias_ih_l{i}").copy_(cell.W.bias)
                getattr(ref, f"bias_hh_l{i}").copy_(cell.U.bias)
    x = torch.randint(0, 11, (4, 9))
    h = model.embed(x)
    ours, _ = model.core(h)
    theirs, _ = ref(h)
    assert torch.allclose(ours, theirs, atol=1e-6)
    g_ours = torch.autograd.grad(ours.square().sum(), h)[0]
    g_theirs = torch.autograd.grad(theirs.square().sum(), h)[0]
    assert torch.allclose(g_ours, g_theirs, atol=1e-5)


def test_positions_past_the_block_are_refused():
    model = charlm("nanogpt", vocab_size=13, max_len=8, d_model=16, heads=2)
    with pytest.raises(ValueError, match="block size 8"):
        model(torch.zeros(1, 9, dtype=torch.long))


def _naive_sample(model, prompt, n, temperature, generator, context):
    """Every step a full forward over the last `context` tokens: the reference for the cache."""
    ids = prompt.tolist()
    for _ in range(n):
        with torch.no_grad():
            logits = model(torch.tensor([ids[-context:]]))[0, -1]
        ids.append(int(torch.multinomial(torch.softmax(logits / temperature, -1), 1,
                                         generator=generator)))
    return ids[len(prompt):]


def test_sampling_with_the_cache_equals_recomputing_past_the_block():
    model = charlm("nanogpt", vocab_size=13, max_len=8, d_model=16, heads=2, layers=2).eval()
    prompt = torch.tensor([1, 2, 3])
    ours = sample(model, prompt, 20, 0.9, torch.Generator().manual_seed(5), context=8)
    ref = _naive_sample(model, prompt, 20, 0.9, torch.Generator().manual_seed(5), 8)
    assert ours.tolist() == ref


@pytest.mark.parametrize("name", ["rnn", "gru"])
def test_sampling_is_seeded_and_cold_sampling_is_greedy(name):
    model = charlm(name, vocab_size=13, d_embed=8, d_model=32).eval()
    prompt = torch.tensor([4, 5])
    a = sample(model, prompt, 30, 1.0, torch.Generator().manual_seed(1))
    b = sample(model, prompt, 30, 1.0, torch.Generator().manual_seed(1))
    c = sample(model, prompt, 30, 1.0, torch.Generator().manual_seed(2))
    assert a.tolist() == b.tolist() and a.tolist() != c.tolist()
    cold = sample(model, prompt, 10, 1e-4, torch.Generator().manual_seed(1))
    ids = prompt.tolist()
    with torch.no_grad():
        for _ in range(10):
            ids.append(int(model(torch.tensor([ids]))[0, -1].argmax()))
    assert cold.tolist() == ids[2:]
