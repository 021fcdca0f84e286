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
