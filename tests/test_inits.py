"""Every model's initialization and layer defaults, parameter group by parameter group, as its
source builds them (the tables in docs/<task>.md). Parameter counts are in the model tests."""

import inspect
import math

import pytest
import torch
from torch import nn

from arithrepro.models.registry import MODELS
from arithrepro.models.transformer import ACTIVATIONS
from tests.helpers import build


def uniform(t: torch.Tensor, bound: float) -> None:
    """t looks drawn from U(-bound, bound): inside it, reaching near it, with its std."""
    assert t.abs().max() <= bound * (1 + 1e-6), f"max {t.abs().max():.4g} > {bound:.4g}"
    reach = max(0.5, 1 - 6 / t.numel())  # the max of n draws falls short by ~bound / n
    assert t.abs().max() > reach * bound, f"max {t.abs().max():.4g} well inside {bound:.4g}"
    # four standard errors of a sample std (uniform: 0.45 / sqrt(n)), at least 5 %
    assert t.std().item() == pytest.approx(bound / math.sqrt(3), rel=max(0.05, 1.8 / math.sqrt(t.numel())))


def normal(t: torch.Tensor, std: float, mean_tol: float = 0.1) -> None:
    n = t.numel()
    assert t.std().item() == pytest.approx(std, rel=max(0.05, 2.9 / math.sqrt(n)))
    assert abs(t.mean().item()) < max(mean_tol, 4 / math.sqrt(n)) * std


def zero(t: torch.Tensor) -> None:
    assert t is not None and not t.any()


def layer_norms(model, eps=1e-5):
    norms = [m for m in model.modules() if isinstance(m, nn.LayerNorm)]
    assert norms
    for m in norms:
        assert torch.equal(m.weight, torch.ones_like(m.weight)) and not m.bias.any()
        assert m.eps == eps


def linears(model):
    return [m for m in model.modules() if isinstance(m, nn.Linear)]


# expr ---------------------------------------------------------------------------------------

def test_gpt_is_gpt2_initialized():
    model = build("gpt", "large")
    L = 6
    for block in model.core.blocks:
        for lin in (block.attn.q, block.attn.k, block.attn.v, block.ff[0], block.ff[-1]):
            normal(lin.weight, 0.02)
            zero(lin.bias)
        normal(block.attn.o.weight, 0.02 / math.sqrt(2 * L))
        zero(block.attn.o.bias)
        assert isinstance(block.ff[1], nn.GELU) and block.ff[1].approximate == "none"
    normal(model.embed.weight, 0.02)
    normal(model.head.weight, 0.02)
    assert model.head.bias is None and model.head.weight is not model.embed.weight
    layer_norms(model)
    assert isinstance(model.core.norm, nn.Identity)  # post-norm: no final LayerNorm


@pytest.mark.parametrize("size", ["small", "large"])
def test_lstm_cells_are_the_sources(size):
    """The source's cell with init_kai: recurrent weights and P orthogonal, input weights and
    Out kaiming_uniform_ at its defaults, forget bias 1, every other bias and the initial states
    0; the wrapper's embedding and head at PyTorch's defaults."""
    model = build("lstm", size)
    d = model.embed.embedding_dim
    normal(model.embed.weight, 1.0)
    uniform(model.head.weight, d ** -0.5)
    assert model.head.bias is None
    for cell in model.core.cells:
        d_ff = cell.d_ff
        for gate in cell.U.weight.split(d_ff):  # (d_ff, d): orthonormal columns
            torch.testing.assert_close(gate.T @ gate, torch.eye(d), atol=1e-5, rtol=0)
        # P (d, d_ff): orthonormal rows
        torch.testing.assert_close(cell.P.weight @ cell.P.weight.T, torch.eye(d), atol=1e-5, rtol=0)
        uniform(cell.W.weight, math.sqrt(6 / d))
        uniform(cell.out.weight, math.sqrt(6 / d_ff))
        assert torch.equal(cell.W.bias[d_ff:2 * d_ff], torch.ones(d_ff))
        zero(cell.W.bias[:d_ff]), zero(cell.W.bias[2 * d_ff:])
        zero(cell.P.bias), zero(cell.out.bias), zero(cell.h0), zero(cell.c0)


def test_retran_is_the_sources():
    """init_kai off inside ReTran: input weights and Out N(0, 0.02); attention as GPT's, the
    output projection scaled by the depth; the wrapper at PyTorch's defaults."""
    model = build("retran", "large")
    L = len(model.core.layers)
    normal(model.embed.weight, 1.0)
    uniform(model.head.weight, model.embed.embedding_dim ** -0.5)
    for layer in model.core.layers:
        cell, attn = layer.cell, layer.attn
        d, d_ff = cell.P.weight.shape
        for gate in cell.U.weight.split(d_ff):
            torch.testing.assert_close(gate.T @ gate, torch.eye(d), atol=1e-5, rtol=0)
        torch.testing.assert_close(cell.P.weight @ cell.P.weight.T, torch.eye(d), atol=1e-5, rtol=0)
        normal(cell.W.weight, 0.02)
        normal(cell.out.weight, 0.02)
        zero(cell.P.bias), zero(cell.out.bias), zero(layer.h0)
        for lin in (attn.q, attn.k, attn.v):
            normal(lin.weight, 0.02)
            zero(lin.bias)
        normal(attn.o.weight, 0.02 / math.sqrt(2 * L))
        zero(attn.o.bias)
    layer_norms(model)


# the embedded input goes to the core as it is -------------------------------------------------

@pytest.mark.parametrize("name", sorted(MODELS))
def test_no_dropout_on_the_embedded_input(name):
    """No source drops its embedded tokens: the core's input in training mode, at dropout 0.5,
    is the embedding (plus positions) itself."""
    if MODELS[name].causal is False:  # the looped task's encoders
        model = build(name, {"d_model": 32, "d_ff": 64, "layers": 2, "heads": 4, "loop_offset": 1},
                      dropout=0.5).train()
        x = torch.randint(0, 10, (3, 5, 2))
        seen = []
        model.core.register_forward_pre_hook(lambda m, args: seen.append(args[0]))
        model(x)
        h = model.embed(nn.functional.one_hot(x, 10).flatten(2).float())
        if model.positions is not None:
            h = h + model.positions.weight[:5]
        assert torch.equal(seen[0], h)
        return
    size = {"d_model": 16, "d_ff": 32, "d_sa": 16, "layers": 2, "heads": 2, "d_embed": 8,
            "block_layers": 1, "recurrences": 2}
    fields = {k: size[k] for k in MODELS[name].size_fields}
    if name == "abacus":  # its width comes from the task's block
        fields.update(d_model=16, d_ff=32, heads=2, offset_k=4)
    model = build(name, fields, dropout=0.5).train()
    x = torch.randint(0, 10, (3, 6))
    seen = []
    model.core.register_forward_pre_hook(lambda m, args: seen.append(args[0]))
    model(x)
    h = model.embed(x)
    if model.positions is not None:
        if name == "abacus":  # the same random offsets as the forward pass drew
            nn.init.zeros_(model.positions.embed.weight)
            seen.clear()
            model(x)
        h = h + model.positions(x)
    assert torch.equal(seen[0], h)


# abacus -------------------------------------------------------------------------------------

def test_abacus_is_pytorchs_defaults_with_the_sources_options():
    """The reproduction's layers as PyTorch builds them: every Linear U(±1/sqrt(fan_in)) with its
    bias, the embeddings (tokens and the Abacus table) N(0, 1), LayerNorm eps 1e-12, no final
    LayerNorm, a head with bias."""
    d, d_ff = 64, 256
    model = build("abacus", {"block_layers": 2, "recurrences": 2, "d_model": d, "d_ff": d_ff,
                             "heads": 4, "offset_k": 8})
    normal(model.embed.weight, 1.0)
    uniform(model.head.weight, d ** -0.5)
    uniform(model.head.bias, d ** -0.5)
    for block in model.core.blocks:
        for lin in (block.attn.q, block.attn.k, block.attn.v, block.attn.o, block.ff[0]):
            uniform(lin.weight, d ** -0.5)
            assert lin.bias.abs().max() <= d ** -0.5 and lin.bias.any()
        uniform(block.ff[-1].weight, d_ff ** -0.5)
        assert isinstance(block.ff[1], nn.GELU)
    layer_norms(model, eps=1e-12)
    assert isinstance(model.core.norm, nn.Identity)
    normal(model.positions.embed.weight, 1.0)


# looped -------------------------------------------------------------------------------------

NOTEBOOK = {"d_model": 128, "d_ff": 2048, "layers": 4, "heads": 4}


def test_the_standard_encoder_is_torchs_transformer_encoder():
    """The source's nn.TransformerEncoder(nn.TransformerEncoderLayer(128, 4, batch_first=True,
    norm_first=True), 4): given our weights it computes our core's outputs, in evaluation and
    (same dropout masks aside) shape; so d_ff, ReLU, the norms and the missing final norm match."""
    model = build("standard", NOTEBOOK, dropout=0.1).eval()
    ref = nn.TransformerEncoder(nn.TransformerEncoderLayer(128, 4, batch_first=True, norm_first=True),
                                4, enable_nested_tensor=False).eval()
    with torch.no_grad():
        for ours, theirs in zip(model.core.blocks, ref.layers):
            a = ours.attn
            theirs.self_attn.in_proj_weight.copy_(torch.cat([a.q.weight, a.k.weight, a.v.weight]))
            theirs.self_attn.in_proj_bias.copy_(torch.cat([a.q.bias, a.k.bias, a.v.bias]))
            theirs.self_attn.out_proj.load_state_dict(a.o.state_dict())
            theirs.linear1.load_state_dict(ours.ff[0].state_dict())
            theirs.linear2.load_state_dict(ours.ff[-1].state_dict())
            theirs.norm1.load_state_dict(ours.ln1.state_dict())
            theirs.norm2.load_state_dict(ours.ln2.state_dict())
    h = torch.randn(3, 9, 128)
    torch.testing.assert_close(model.core(h)[0], ref(h), atol=1e-5, rtol=1e-5)
    assert ref.norm is None and isinstance(model.core.norm, nn.Identity)


def test_the_standard_encoder_starts_as_torch_initializes_it():
    """nn.MultiheadAttention: the packed (3d, d) in-projection xavier-uniform, zero biases, the
    output projection nn.Linear's default weight and a zero bias; the MLP at nn.Linear's
    defaults; every layer a copy of the first; positions randn * 0.1; embedding and head
    nn.Linear's defaults."""
    d, d_ff = 128, 2048
    model = build("standard", NOTEBOOK)
    blocks = model.core.blocks
    a = blocks[0].attn
    uniform(torch.cat([a.q.weight, a.k.weight, a.v.weight]), math.sqrt(6 / (d + 3 * d)))
    for lin in (a.q, a.k, a.v, a.o):
        zero(lin.bias)
    uniform(a.o.weight, d ** -0.5)
    uniform(blocks[0].ff[0].weight, d ** -0.5)
    uniform(blocks[0].ff[0].bias, d ** -0.5)
    uniform(blocks[0].ff[-1].weight, d_ff ** -0.5)
    assert isinstance(blocks[0].ff[1], nn.ReLU)
    for block in blocks[1:]:
        for (name, p), q in zip(blocks[0].named_parameters(), block.parameters()):
            assert torch.equal(p, q), name
    normal(model.positions.weight, 0.1)
    uniform(model.embed.weight, 20 ** -0.5)
    uniform(model.head.weight, d ** -0.5)
    layer_norms(model)


def test_the_notebook_size_is_torchs_encoder_layer_defaults(params):
    """The source passes no dim_feedforward, dropout or activation: the profiles keep them."""
    defaults = inspect.signature(nn.TransformerEncoderLayer).parameters
    std = params["models"]["standard"]
    assert std["sizes"]["notebook"]["d_ff"] == defaults["dim_feedforward"].default
    assert std["dropout"] == defaults["dropout"].default
    assert defaults["activation"].default is nn.functional.relu and "relu" in ACTIVATIONS


def test_the_looped_block_keeps_the_projects_design():
    """The source's looped class never runs (docs/looped.md): the block is GELU, pre-norm with a
    final LayerNorm, GPT-2 initialized, its offset biases zero."""
    model = build("looped", {"d_model": 128, "d_ff": 512, "heads": 4, "loop_offset": 4})
    block = model.core.blocks[0]
    assert isinstance(block.ff[1], nn.GELU) and isinstance(model.core.norm, nn.LayerNorm)
    normal(block.attn.q.weight, 0.02)
    normal(block.attn.o.weight, 0.02 / math.sqrt(2))
    zero(block.attn.offset_bias)


# charlm -------------------------------------------------------------------------------------

CHARLM = {"rnn": {"d_embed": 64, "d_model": 256, "layers": 2},
          "gru": {"d_embed": 64, "d_model": 256, "layers": 2}}


@pytest.mark.parametrize("name", ["rnn", "gru"])
def test_recurrent_lms_keep_nn_linears_defaults(name):
    """The source's cells are nn.Linear layers at their defaults: the input map U(±1/sqrt(d_in)),
    the recurrent one U(±1/sqrt(d)), biases alike (Elman) or none (GRU)."""
    model = build(name, CHARLM[name])
    e, d = 64, 256
    normal(model.embed.weight, 1.0)
    uniform(model.head.weight, d ** -0.5)
    uniform(model.head.bias, d ** -0.5)
    for i, cell in enumerate(model.core.cells):
        d_in = e if i == 0 else d
        uniform(cell.W.weight, d_in ** -0.5)
        uniform(cell.U.weight, d ** -0.5)
        if name == "rnn":
            uniform(cell.W.bias, d_in ** -0.5)
            uniform(cell.U.bias, d ** -0.5)
        else:
            assert cell.W.bias is None and cell.U.bias is None


def test_nanogpt_is_the_sources():
    """Bias-free attention projections, every Linear and Embedding weight N(0, 0.02) with no
    residual scaling, the MLP's biases at nn.Linear's default, the head tied to the embedding."""
    d = 128
    model = build("nanogpt", {"d_model": d, "layers": 8, "heads": 4})
    assert model.head.weight is model.embed.weight and model.head.bias is None
    normal(model.embed.weight, 0.02)
    normal(model.positions.table.weight, 0.02)
    for block in model.core.blocks:
        a = block.attn
        for lin in (a.q, a.k, a.v, a.o):
            assert lin.bias is None
        for w in (a.q.weight, a.o.weight, block.ff[0].weight, block.ff[-1].weight):
            normal(w, 0.02)
        uniform(block.ff[0].bias, d ** -0.5)
        uniform(block.ff[-1].bias, (4 * d) ** -0.5)
        assert isinstance(block.ff[1], nn.GELU)
    layer_norms(model)


# modular ------------------------------------------------------------------------------------

def test_modular_lstm_gates_are_linear_layers_on_input_and_state():
    """Each gate is nn.Linear(d_x + d_h, d_h) on [x; h]: weights and bias U(±1/sqrt(d_x + d_h))."""
    d = 128
    model = build("lstm-std", {"d_model": d, "layers": 2})
    normal(model.embed.weight, 1.0)
    uniform(model.head.weight, d ** -0.5)
    for cell in model.core.cells:
        for p in (cell.W.weight, cell.W.bias, cell.U.weight):
            uniform(p, (2 * d) ** -0.5)


def test_modular_gpt_keeps_pytorchs_defaults():
    d = 128
    model = build("gpt-sin", {"d_model": d, "layers": 2, "heads": 4})
    normal(model.embed.weight, 1.0)
    for block in model.core.blocks:
        for lin in (block.attn.q, block.attn.o, block.ff[0]):
            uniform(lin.weight, d ** -0.5)
        uniform(block.ff[-1].weight, (4 * d) ** -0.5)
        assert block.ff[0].bias is None
    uniform(model.head.weight, d ** -0.5)
