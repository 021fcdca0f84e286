"""The modular studies' models, written from their equations: each hand-written piece against
PyTorch's own, parameter counts P, the pruned last layer. (Shapes, causality, gradients,
decoding and the trace's attention and hidden states of every model: test_model_contract.)"""

import math

import pytest
import torch
import torch.nn.functional as F

from arithrepro.models.lm import count_params
from arithrepro.models.recurrent import LSTMCore
from arithrepro.models.transformer import Attention, LayerNorm, SinusoidalPositions, TransformerConfig
from arithrepro.tasks.modular import embedding_params
from tests.helpers import DIMS, build

MODULAR_MODELS = ["lstm-std", "gpt-sin"]
V = DIMS["gpt-sin"]["vocab_size"]


def size(d=32, layers=2):
    """The modular models' size fields (the LSTM ignores heads)."""
    return {"d_model": d, "layers": layers, "heads": 4}


def test_parameter_counts_exclude_the_embedding():
    for d, L in ((128, 2), (64, 1), (256, 3)):
        head = d * V + V
        lstm = build("lstm-std", size(d, L))
        assert count_params(lstm) - embedding_params(lstm) == L * (8 * d * d + 4 * d) + head
        gpt = build("gpt-sin", size(d, L))
        # per block: q, k, v, o with bias, two LayerNorms, a bias-free 4d MLP; a final LayerNorm
        assert count_params(gpt) - embedding_params(gpt) == L * (12 * d * d + 8 * d) + 2 * d + head
        assert embedding_params(gpt) == V * d  # the sinusoidal positions have no parameters
        # post-norm blocks (the homework's released Block): the last block's LayerNorm ends it
        post = build("gpt-sin", {**size(d, L), "norm": "post"})
        assert count_params(post) - embedding_params(post) == L * (12 * d * d + 8 * d) + head
        assert not post.core.blocks[0].prenorm


@pytest.mark.parametrize("name", MODULAR_MODELS)
def test_outputs_from_equals_the_full_forwards_tail(name):
    """The last block computed at the scored positions only: the same logits and gradients."""
    m = build(name, size())
    x = torch.randint(0, 31, (7, 6))
    full = m(x)
    tail = m(x, outputs_from=4)
    assert tail.shape == (7, 2, V)
    assert torch.allclose(full[:, 4:], tail, atol=1e-5)
    names = [n for n, _ in m.named_parameters()]
    g_full = torch.autograd.grad(full[:, 4:].square().sum(), list(m.parameters()))
    g_tail = torch.autograd.grad(tail.square().sum(), list(m.parameters()))
    for name, a, b in zip(names, g_full, g_tail):
        assert a.any(), f"{name}: no gradient to compare"  # every parameter reaches the tail
        assert torch.allclose(a, b, atol=1e-5), name


def test_standard_lstm_equals_torch_lstm():
    """The hand-written cell (gates i, f, o, g; one bias) against torch.nn.LSTM (i, f, g, o; two
    biases), with the same weights: outputs to 1e-5."""
    torch.manual_seed(1)
    d, L = 24, 2
    core = LSTMCore(d, d, L, dropout=0.0, standard=True)
    ref = torch.nn.LSTM(d, d, L, batch_first=True)
    with torch.no_grad():
        for i, cell in enumerate(core.cells):
            def reorder(w):  # i, f, g, o -> i, f, o, g
                i_, f_, g_, o_ = w.chunk(4)
                return torch.cat([i_, f_, o_, g_])
            cell.W.weight.copy_(reorder(getattr(ref, f"weight_ih_l{i}")))
            cell.U.weight.copy_(reorder(getattr(ref, f"weight_hh_l{i}")))
            cell.W.bias.copy_(reorder(getattr(ref, f"bias_ih_l{i}") + getattr(ref, f"bias_hh_l{i}")))
    x = torch.randn(4, 7, d)
    ours, _ = core(x)
    theirs, _ = ref(x)
    assert torch.allclose(ours, theirs, atol=1e-5)


def test_layernorm_from_its_equation_equals_torch():
    torch.manual_seed(0)
    x = torch.randn(3, 5, 16) * 4 + 2
    ours = LayerNorm(16)
    with torch.no_grad():
        ours.weight.uniform_(0.5, 1.5)
        ours.bias.uniform_(-1, 1)
    ref = torch.nn.LayerNorm(16)
    ref.load_state_dict(ours.state_dict())
    try:
        LayerNorm.fused = False
        manual = ours(x)
        # the biased variance: dividing by d - 1 would differ by far more than the tolerance
        unbiased = (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, keepdim=True) + 1e-5)
        assert not torch.allclose(manual, unbiased * ours.weight + ours.bias, atol=1e-3)
    finally:
        LayerNorm.fused = True
    assert torch.allclose(manual, ref(x), atol=1e-5)
    assert torch.allclose(ours(x), manual, atol=1e-5)


def test_manual_attention_equals_the_fused_one_and_returns_weights():
    torch.manual_seed(0)
    att = Attention(TransformerConfig(d_model=32, heads=4, max_len=8, rope=False)).eval()
    x = torch.randn(3, 6, 32)
    weights = []
    manual, w = att.traced(x)
    weights.append(w)
    assert torch.allclose(manual, att(x), atol=1e-5)
    w = weights[0]
    assert w.shape == (3, 4, 6, 6)
    assert torch.allclose(w.sum(-1), torch.ones(3, 4, 6), atol=1e-6)
    assert (w.triu(1) == 0).all()  # causal: nothing above the diagonal


def test_sinusoidal_positions():
    pe = SinusoidalPositions(8, 16)
    table = pe(torch.zeros(1, 5, dtype=torch.long))
    for pos in range(5):
        for i in range(4):
            angle = pos / 10000 ** (i / 8)  # the source's 10000^(k/d) for dimensions 2k, 2k+1
            assert math.isclose(table[pos, 2 * i].item(), math.sin(angle), abs_tol=1e-6)
            assert math.isclose(table[pos, 2 * i + 1].item(), math.cos(angle), abs_tol=1e-6)
    state = pe.init_state(1)
    first, second = pe(torch.zeros(1, 3, dtype=torch.long), state), pe(torch.zeros(1, 2, dtype=torch.long), state)
    assert torch.equal(torch.cat([first, second]), table)
    assert not pe.state_dict()  # fixed: nothing to save


def test_gpt_uses_the_hand_written_layernorm_and_a_bias_free_mlp():
    m = build("gpt-sin", size())
    block = m.core.blocks[0]
    assert isinstance(block.ln1, LayerNorm) and isinstance(m.core.norm, LayerNorm)
    assert block.ff[0].bias is None and block.ff[-1].bias is None
    assert block.ff[0].out_features == 4 * 32
    assert m.head.bias is not None


def test_training_step_uses_the_right_hand_side_only():
    """The fit loop's loss with outputs_from equals the masked loss of the full forward."""
    from arithrepro.train.losses import training_loss

    m = build("gpt-sin", size())
    x = torch.randint(0, 31, (4, 6))
    y = torch.randint(0, 31, (4, 6))
    mask = torch.zeros(4, 6, dtype=torch.bool)
    mask[:, 4:] = True
    full = F.cross_entropy(m(x)[mask], y[mask])
    assert torch.allclose(training_loss(m, x, y, mask, 0, outputs_from=4), full, atol=1e-6)
