"""ForeachLamb makes torch-optimizer's Lamb updates, over all parameters at once."""

import pytest
import torch
import torch_optimizer

from arithrepro.optim import ForeachLamb


def params(seed):
    g = torch.Generator().manual_seed(seed)
    shapes = [(7, 5), (5,), (3, 4, 2), (1,)]
    ps = [torch.nn.Parameter(torch.randn(s, generator=g, dtype=torch.float64)) for s in shapes]
    ps[1].data.zero_()  # a zero weight norm: trust ratio 1
    return ps


@pytest.mark.parametrize("kw", [{}, {"weight_decay": 0.1}, {"debias": True}, {"adam": True},
                                {"clamp_value": 0.5}])
def test_foreach_lamb_equals_torch_optimizers(kw):
    a, b = params(0), params(0)
    ref = torch_optimizer.Lamb(a, lr=0.01, **kw)
    new = ForeachLamb(b, lr=0.01, **kw)
    g = torch.Generator().manual_seed(1)
    for step in range(5):
        for pa, pb in zip(a, b):
            grad = torch.randn(pa.shape, generator=g, dtype=torch.float64)
            if step == 0 and pa.dim() == 3:
                grad.zero_()  # a zero Adam step: trust ratio 1
            pa.grad, pb.grad = grad.clone(), grad.clone()
        ref.step()
        new.step()
        for pa, pb in zip(a, b):
            torch.testing.assert_close(pb, pa, rtol=1e-12, atol=1e-14)
    for pa, pb in zip(a, b):
        sa, sb = ref.state[pa], new.state[pb]
        assert sa["step"] == sb["step"] == 5
        torch.testing.assert_close(sb["exp_avg_sq"], sa["exp_avg_sq"])


def test_state_dict_loads_into_either():
    a, b = params(0), params(0)
    new = ForeachLamb(b, lr=0.01)
    for p in b:
        p.grad = torch.ones_like(p)
    new.step()
    ref = torch_optimizer.Lamb(a, lr=0.01)
    ref.load_state_dict(new.state_dict())
    assert ref.state[a[0]]["step"] == 1


def test_lstm_gates_get_the_sources_per_gate_trust_ratios():
    """The expr source keeps each gate's input and recurrent maps as separate nn.Linear layers,
    so torch-optimizer's Lamb gives each its own trust ratio; one cell with all gates in one
    matrix, told its blocks, takes the same steps."""
    from arithrepro.models.recurrent import SourceLSTMCell

    torch.manual_seed(0)
    cell = SourceLSTMCell(6, 4, 8).double()
    blocks = cell.lamb_blocks()
    ours = list(cell.parameters())
    # the source's layout: every gate's block its own tensor
    ref = [torch.nn.Parameter(piece.detach().clone())
           for p in ours for piece in (p.chunk(blocks[p]) if p in blocks else [p])]
    opt_ref = torch_optimizer.Lamb(ref, lr=0.05)
    opt_ours = ForeachLamb(ours, lr=0.05, blocks=blocks)
    merged = ForeachLamb([torch.nn.Parameter(p.detach().clone()) for p in ours], lr=0.05)
    g = torch.Generator().manual_seed(1)
    for _ in range(3):
        grads = [torch.randn(p.shape, generator=g, dtype=torch.float64) for p in ours]
        for p, grad in zip(ours, grads):
            p.grad = grad.clone()
        for q, grad in zip(merged.param_groups[0]["params"], grads):
            q.grad = grad.clone()
        pieces = [piece for p, grad in zip(ours, grads)
                  for piece in (grad.chunk(blocks[p]) if p in blocks else [grad])]
        for r, grad in zip(ref, pieces):
            r.grad = grad.clone()
        opt_ref.step()
        opt_ours.step()
        merged.step()
    torch.testing.assert_close(torch.cat([p.flatten() for p in ours]),
                               torch.cat([r.flatten() for r in ref]), rtol=1e-12, atol=1e-14)
    # one trust ratio for all four gates would not have taken these steps
    bias = next(i for i, p in enumerate(ours) if p is cell.W.bias)
    assert not torch.allclose(cell.W.bias, merged.param_groups[0]["params"][bias])


def test_the_lstms_optimizer_knows_each_cells_gate_blocks():
    from arithrepro.train.config import TrainConfig
    from arithrepro.train.parts import make_optimizer
    from tests.helpers import build

    model = build("lstm", {"d_model": 8, "d_ff": 16, "layers": 2})
    opt = make_optimizer(model, TrainConfig(lr=0.01, seed=0, optimizer="lamb"))
    cells = model.core.cells
    assert opt.blocks == {id(p): 4 for c in cells for p in (c.W.weight, c.W.bias, c.U.weight)}


@pytest.mark.parametrize("kw", [{}, {"weight_decay": 0.1}, {"debias": True}])
def test_capturable_lamb_takes_the_same_steps_reading_nothing_from_the_host(kw):
    """Step counts on the device and the learning rate a tensor the scheduler fills in place:
    the updates of the plain optimizer under the same schedule."""
    a, b = params(0), params(0)
    plain = ForeachLamb(a, lr=0.01, **kw)
    dev = ForeachLamb(b, lr=torch.tensor(0.01, dtype=torch.float64), capturable=True, **kw)
    sa = torch.optim.lr_scheduler.LambdaLR(plain, lambda s: (s + 1) / 4)
    sb = torch.optim.lr_scheduler.LambdaLR(dev, lambda s: (s + 1) / 4)
    lr = dev.param_groups[0]["lr"]
    g = torch.Generator().manual_seed(1)
    for _ in range(4):
        for pa, pb in zip(a, b):
            grad = torch.randn(pa.shape, generator=g, dtype=torch.float64)
            pa.grad, pb.grad = grad.clone(), grad.clone()
        plain.step()
        dev.step()
        sa.step()
        sb.step()
        assert dev.param_groups[0]["lr"] is lr  # filled in place, never replaced
        for pa, pb in zip(a, b):
            torch.testing.assert_close(pb, pa, rtol=1e-12, atol=1e-14)
    assert all(torch.is_tensor(dev.state[p]["step"]) for p in b)
    again = ForeachLamb(params(0), lr=0.01)
    again.load_state_dict(dev.state_dict())  # a capturable run's checkpoint resumes plainly
    for p in again.param_groups[0]["params"]:
        p.grad = torch.ones_like(p)
    again.step()
    assert all(again.state[p]["step"] == 5 for p in again.param_groups[0]["params"])


def _copies_against_standalone(make_stacked, make_one, lrs, wds, steps=5, factor=lambda s: (s + 1) / 4,
                               blocks=1):
    """Per-copy parameters stacked as an ensemble's, stepped by `make_stacked` under a schedule
    whose base rate is 1, against each copy alone under `make_one(params, lr, wd)` at its own
    rate: returns the largest difference."""
    E, g = len(lrs), torch.Generator().manual_seed(3)
    ones = [[torch.randn(4 * blocks, 3, generator=g, dtype=torch.float64).requires_grad_()
             for _ in range(2)] for _ in range(E)]
    stacked = [torch.stack([ones[e][j].detach() for e in range(E)]).requires_grad_() for j in range(2)]
    opt = make_stacked(stacked)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, factor)
    alone = [make_one(ones[e], lrs[e], wds[e]) for e in range(E)]
    scheds = [torch.optim.lr_scheduler.LambdaLR(o, factor) for o in alone]
    for _ in range(steps):
        for j in range(2):
            grad = torch.randn(E, 4 * blocks, 3, generator=g, dtype=torch.float64)
            stacked[j].grad = grad.clone()
            for e in range(E):
                ones[e][j].grad = grad[e].clone()
        for o in (opt, *alone):
            o.step()
        for s in (sched, *scheds):
            s.step()
    return max(float((stacked[j][e] - ones[e][j]).abs().max().detach()) for j in range(2) for e in range(E))


@pytest.mark.parametrize("decoupled", [True, False])
@pytest.mark.parametrize("capturable", [False, True])
def test_each_copy_steps_as_torchs_adam_at_its_own_rate_and_decay(decoupled, capturable):
    from arithrepro.optim import CopiesAdam

    lrs, wds = [0.01, 0.003, 0.02], [0.0, 0.1, 1.0]
    kind = torch.optim.AdamW if decoupled else torch.optim.Adam
    worst = _copies_against_standalone(
        lambda ps: CopiesAdam(ps, lrs, wds, decoupled=decoupled, betas=(0.9, 0.98), eps=1e-9,
                              capturable=capturable),
        lambda ps, lr, wd: kind(ps, lr=lr, weight_decay=wd, betas=(0.9, 0.98), eps=1e-9),
        lrs, wds)
    # capturable: float32 step counts on the device, as torch's own capturable Adam keeps them
    assert worst < (1e-6 if capturable else 1e-12)


def test_per_copy_rates_matter():
    """The comparison above can fail: copies stepped at one shared rate are not the runs at
    their own."""
    from arithrepro.optim import CopiesAdam

    worst = _copies_against_standalone(
        lambda ps: CopiesAdam(ps, [0.01] * 2, [0.1] * 2, decoupled=True),
        lambda ps, lr, wd: torch.optim.AdamW(ps, lr=lr, weight_decay=wd), [0.01, 0.03], [0.1, 0.1])
    assert worst > 1e-4


@pytest.mark.parametrize("capturable", [False, True])
@pytest.mark.parametrize("blocks", [1, 4])
def test_each_copy_steps_as_lamb_at_its_own_rate_and_decay(capturable, blocks):
    """LAMB's trust ratios stay per copy (and per gate block within one) while each copy takes
    its own rate and decay."""
    lrs, wds = [0.01, 0.003], [0.0, 0.1]

    def stacked(ps):
        return ForeachLamb(ps, lr=torch.tensor(1.0, dtype=torch.float64) if capturable else 1.0,
                           capturable=capturable, copies=(lrs, wds),
                           blocks={p: 2 * blocks for p in ps})

    def one(ps, lr, wd):
        return ForeachLamb(ps, lr=lr, weight_decay=wd, blocks={p: blocks for p in ps})

    assert _copies_against_standalone(stacked, one, lrs, wds, blocks=blocks) < 1e-12
