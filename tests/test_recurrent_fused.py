"""The fused recurrences (one autograd Function per layer, backward through time by hand) against
the per-step autograd path they replace: outputs and every gradient."""

import pytest
import torch

from arithrepro.models.recurrent import ElmanCell, GRUCell, LSTMCore, RecurrentCore
from arithrepro.train.losses import training_loss
from tests.helpers import PAD, build


def cores(layers):
    return {
        "source": lambda: LSTMCore(6, 10, layers, dropout=0.0),
        "standard": lambda: LSTMCore(7, 7, layers, dropout=0.0, standard=True),
        "elman": lambda: RecurrentCore([ElmanCell(6 if i == 0 else 7, 7) for i in range(layers)], 0.0),
        "gru": lambda: RecurrentCore([GRUCell(6 if i == 0 else 7, 7) for i in range(layers)], 0.0),
    }


def d_in(core):
    cell = core.cells[0]
    return cell.W.in_features


def run_both(core, x, keep=None, dropout=None, train=True):
    """Outputs and gradients (of x and every parameter) of the per-step and the fused path, for a
    loss that sees the real positions only; the same seed before each, so that dropout draws the
    same masks."""
    if dropout is not None:
        core.drop.p = dropout
    core.train(train)
    results = []
    for fused in (False, True):
        core.fused = fused
        torch.manual_seed(7)
        y, _ = core(x, keep)
        real = torch.ones(y.shape[:2], dtype=y.dtype) if keep is None else keep.to(y.dtype)
        y = y * real[..., None]
        w = torch.randn(y.shape, dtype=y.dtype, generator=torch.Generator().manual_seed(3))
        grads = torch.autograd.grad((y * w).sum(), [x, *core.parameters()])
        results.append((y, grads))
    return results


def assert_same(results, **tol):
    (y0, g0), (y1, g1) = results
    torch.testing.assert_close(y1, y0, **tol)
    assert len(g0) == len(g1)
    for a, b in zip(g0, g1):
        torch.testing.assert_close(b, a, **tol)


def trailing_padding(B, T, lengths):
    return torch.arange(T)[None] < torch.tensor(lengths)[:, None]


@pytest.mark.parametrize("layers", [1, 3])
@pytest.mark.parametrize("kind", ["source", "standard", "elman", "gru"])
@pytest.mark.parametrize("padded", [False, True])
def test_fused_equals_per_step_float64(kind, layers, padded):
    torch.manual_seed(0)
    core = cores(layers)[kind]().double()
    B, T = 6, 9
    x = torch.randn(B, T, d_in(core), dtype=torch.float64, requires_grad=True)
    # some sequences shorter than others, one of a single step, none reaching the last step
    keep = trailing_padding(B, T, [8, 3, 5, 1, 8, 6]) if padded else None
    assert_same(run_both(core, x, keep), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("kind", ["source", "standard", "elman", "gru"])
def test_fused_equals_per_step_with_dropout(kind):
    torch.manual_seed(1)
    core = cores(3)[kind]().double()
    x = torch.randn(5, 8, d_in(core), dtype=torch.float64, requires_grad=True)
    keep = trailing_padding(5, 8, [8, 2, 6, 7, 4])
    results = run_both(core, x, keep, dropout=0.3)
    assert_same(results, rtol=1e-10, atol=1e-12)
    # the masks did apply: without dropout the outputs differ
    torch.manual_seed(7)
    core.fused = True
    core.drop.p = 0.0
    assert not torch.allclose(core(x, keep)[0] * keep[..., None], results[1][0])


@pytest.mark.parametrize("kind", ["source", "standard", "elman", "gru"])
def test_fused_equals_per_step_in_eval_mode(kind):
    torch.manual_seed(2)
    core = cores(2)[kind]().double()
    x = torch.randn(4, 7, d_in(core), dtype=torch.float64)
    keep = trailing_padding(4, 7, [7, 3, 5, 1])
    core.eval()
    outs = []
    with torch.no_grad():
        for fused in (False, True):
            core.fused = fused
            outs.append(core(x, keep)[0] * keep[..., None])
    torch.testing.assert_close(outs[1], outs[0], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("size", ["small", "large"])
def test_expr_lstm_training_loss_gradients_float32(size):
    """The whole model through training_loss, in float32 at the expr sizes."""
    model = build("lstm", size, dropout=0.1, max_len=37)
    B, T = 16, 37
    lengths = torch.randint(11, T + 1, (B,))
    real = torch.arange(T)[None] < lengths[:, None]
    x = torch.where(real, torch.randint(4, 19, (B, T)), PAD)
    y = torch.roll(x, -1, 1)
    mask = real & (torch.arange(T)[None] >= lengths[:, None] - 6)   # the answer-like tail
    grads = []
    for fused in (False, True):
        model.core.fused = fused
        torch.manual_seed(5)
        loss = training_loss(model, x, y, mask)
        grads.append((loss, torch.autograd.grad(loss, list(model.parameters()))))
    (l0, g0), (l1, g1) = grads
    torch.testing.assert_close(l1, l0, rtol=1e-5, atol=1e-6)
    for (name, _), a, b in zip(model.named_parameters(), g0, g1):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-6, msg=name)


def test_reused_buffers_leave_results_unchanged():
    """The fused LSTM keeps its large buffers between calls: a second call, with another batch
    shape and another count of real positions, gives what a fresh process would."""
    torch.manual_seed(3)
    core = LSTMCore(6, 10, 2, dropout=0.0).double()
    first = torch.randn(6, 9, 6, dtype=torch.float64, requires_grad=True)
    run_both(core, first, trailing_padding(6, 9, [9, 9, 4, 5, 9, 2]))
    x = torch.randn(4, 9, 6, dtype=torch.float64, requires_grad=True)
    assert_same(run_both(core, x, trailing_padding(4, 9, [3, 9, 7, 1])), rtol=1e-10, atol=1e-12)


def test_a_second_backward_through_the_fused_lstm_is_refused():
    core = LSTMCore(6, 10, 1, dropout=0.0)
    y, _ = core(torch.randn(2, 5, 6, requires_grad=True))
    y.sum().backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="runs once"):
        y.sum().backward()


def test_interior_padding_runs_every_position():
    """Padding that is not trailing is not skipped: the fused path then runs every position,
    as the per-step path does in training."""
    torch.manual_seed(4)
    core = LSTMCore(6, 10, 2, dropout=0.0).double()
    x = torch.randn(3, 6, 6, dtype=torch.float64, requires_grad=True)
    keep = torch.ones(3, 6, dtype=torch.bool)
    keep[1, 2] = False
    core.train()
    outs = []
    for fused in (False, True):
        core.fused = fused
        outs.append(core(x, keep)[0])
    torch.testing.assert_close(outs[1], outs[0], rtol=1e-10, atol=1e-12)
