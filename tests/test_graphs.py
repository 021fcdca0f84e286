"""The static step (TrainConfig.graphs): what a CUDA graph of the whole training step captures.

On the CPU the static step runs eagerly: each batch padded to the largest shape seen, the loss
over every position with the unscored ones zeroed, the recurrences over every row, the host's
draws made before the step. These tests hold it to the eager step's weights for every family of
model, and hold it to reading nothing back from the device (no .item(), no shape that depends on
a tensor's values), which a graph could not capture. The capture itself needs CUDA
(tests/test_cuda.py).
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from arithrepro.stacking import CopiesBatches, Ensemble
from arithrepro.models.registry import MODELS
from arithrepro.train.config import TrainConfig
from arithrepro.train.ensembles import ensemble_of
from arithrepro.train.loop import fit
from arithrepro.train.parts import Parts
from arithrepro.train.step import Step
from arithrepro.train.losses import scored
from tests import helpers
from tests.helpers import CONTRACT_DIMS as DIMS, CONTRACT_SIZES as SIZES

# ops that read a tensor's values on the host, or size a result by them
HOST_READS = {"_local_scalar_dense", "nonzero", "masked_select", "equal", "is_nonzero", "item"}


class Reads(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.seen = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if name in HOST_READS:
            self.seen.add(name)
        return func(*args, **(kwargs or {}))


def _cfg(**over):
    base = dict(lr=3e-3, seed=0, optimizer="lamb", val_every=3, checkpoint_every=100,
                validate_epochs=False, sync_every=2)
    return TrainConfig(**{**base, **over})


@pytest.mark.parametrize("name", ["gpt", "lstm", "retran"])
@pytest.mark.parametrize("optimizer", ["lamb", "adamw"])
def test_the_static_step_trains_to_the_eager_steps_weights(tmp_path, name, optimizer):
    """Batches of 20 from 96 problems: widths vary and each epoch ends with a short batch, so
    rows and columns are padded."""
    weights = {}
    for graphs in (False, True):
        cfg = _cfg(optimizer=optimizer, graphs=graphs)
        batches, valid = helpers.sources(cfg, 20, 2)
        model = helpers.build(name)
        result = fit(model, batches, valid, cfg, tmp_path / f"{graphs}.pt", "fp",
                     spec=MODELS[name], progress=False)
        weights[graphs] = (dict(model.named_parameters()), result)
    (eager, a), (static, b) = weights[False], weights[True]
    assert [r["loss"] for r in b["train_curve"]] == pytest.approx(
        [r["loss"] for r in a["train_curve"]], rel=1e-4)
    assert b["best_step"] == a["best_step"]
    for n, p in eager.items():
        torch.testing.assert_close(static[n], p, rtol=1e-4, atol=1e-5, msg=lambda m: f"{n}: {m}")


@pytest.mark.parametrize("optimizer", ["lamb", "adamw"])
@pytest.mark.parametrize("own", [False, True])
def test_an_ensembles_static_step_trains_each_copy_as_alone(tmp_path, optimizer, own):
    """own: the copies at their own rates and weight decays (fused configurations)."""
    cfgs = [_cfg(graphs=True, optimizer=optimizer, seed=s, weight_decay=0.05 * s * own,
                 lr=3e-3 / (1 + s * own)) for s in range(2)]
    sources = [helpers.sources(c, 20, 1) for c in cfgs]
    ens = Ensemble([helpers.build("gpt", seed=s) for s in range(2)])
    fit(ens, CopiesBatches([b for b, _ in sources], {"x": helpers.PAD}), sources[0][1], cfgs,
        tmp_path / "e.pt", "fp", spec=MODELS["gpt"], progress=False)
    for s, cfg in enumerate(cfgs):
        model = helpers.build("gpt", seed=s)
        fit(model, *helpers.sources(replace(cfg, graphs=False), 20, 1),
            replace(cfg, graphs=False), tmp_path / f"{s}.pt", "fp", spec=MODELS["gpt"],
            progress=False)
        for n, p in model.named_parameters():
            torch.testing.assert_close(ens.state_of(s)[n], p.detach(), rtol=1e-4, atol=1e-5)


def _tiny_batch(name: str, B: int = 6):
    form = MODELS[name].form
    dims = DIMS[form]
    g = torch.Generator().manual_seed(0)
    if form == "pairs":
        x = torch.randint(0, dims["base"], (B, 5, 2), generator=g)
        return x, torch.randint(0, dims["classes"], (B, 5), generator=g), torch.ones(B, 5, dtype=torch.bool)
    T = 9
    x = torch.randint(0, 10, (B, T), generator=g)
    x[:, 2::3] = 11 if form == "digit-tokens" else x[:, 2::3]
    mask = torch.arange(T) < torch.randint(3, T + 1, (B, 1), generator=g)
    x[~mask] = dims["pad_id"]
    return x, torch.randint(0, 10, (B, T), generator=g), mask


@pytest.mark.parametrize("name", sorted(MODELS))
def test_the_static_step_reads_nothing_from_the_device(name):
    progressive = name == "abacus"
    cfg = _cfg(graphs=True, progressive=progressive)
    model = helpers.build(name, SIZES[name], dropout=0.1, **DIMS[MODELS[name].form]).train()
    if name == "looped":
        model.extra_loops = 2
    parts = Parts.of(model, cfg, 10, 1, MODELS[name])
    step = Step(parts, cfg, 0, 1, MODELS[name])
    x, y, mask = step.batch._pad(*ensemble_of(model).stack(*_tiny_batch(name)))
    kw = {"exit_at": 1} if progressive else {}
    if name == "looped":
        kw["drawn"] = {"loops": 7}
    with Reads() as reads:
        step._body(x, y, mask, scored(mask), kw)
    assert reads.seen == set(), name


def test_what_the_static_step_cannot_run_is_refused():
    model = helpers.build("gpt")
    for over, match in (({"precision": "fp16"}, "fp16"), ({"micro_batches": 2}, "micro_batches")):
        cfg = _cfg(graphs=True, **over)
        with pytest.raises(ValueError, match=match):
            Step(Parts.of(model, cfg, 10, 1, MODELS["gpt"]), cfg, 0, 1, MODELS["gpt"])


@pytest.mark.parametrize("optimizer", ["lamb", "adamw", "adam"])
def test_making_the_optimizers_state_before_a_capture_moves_nothing(optimizer):
    """Fresh: the state exists, zeroed, step 0, the weights untouched (Adam's L2 decay would
    otherwise put w * wd in its first moments). Resumed: every tensor of the state as it was."""
    from arithrepro.train.graphs import init_optimizer_state
    from arithrepro.train.parts import make_optimizer

    model = helpers.build("gpt")
    opt = make_optimizer(model, _cfg(optimizer=optimizer, weight_decay=0.1))
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    init_optimizer_state(opt)
    for n, p in model.named_parameters():
        assert torch.equal(p, before[n]), n
        st = opt.state[p]
        assert int(st["step"]) == 0
        assert all(not v.any() for k, v in st.items() if torch.is_tensor(v) and k != "step")
    x, y, mask = _tiny_batch_lm()
    for _ in range(2):
        opt.zero_grad()
        from arithrepro.train.losses import training_loss
        training_loss(model, x, y, mask).backward()
        opt.step()
    saved = {id(p): {k: (v.clone() if torch.is_tensor(v) else v) for k, v in opt.state[p].items()}
             for p in model.parameters()}
    weights = [p.detach().clone() for p in model.parameters()]
    init_optimizer_state(opt)  # a resumed run: nothing to make, nothing changes
    for p, w in zip(model.parameters(), weights):
        assert torch.equal(p, w)
        for k, v in saved[id(p)].items():
            now = opt.state[p][k]
            assert torch.equal(now, v) if torch.is_tensor(v) else now == v


def _tiny_batch_lm():
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 10, (4, 7), generator=g)
    return x, torch.randint(0, 10, (4, 7), generator=g), torch.ones(4, 7, dtype=torch.bool)


def test_the_static_step_gives_the_model_back_skipping_padding(tmp_path):
    cfg = _cfg(graphs=True)
    model = helpers.build("lstm")
    fit(model, *helpers.sources(cfg, 20, 1), cfg, tmp_path / "c.pt", "fp", spec=MODELS["lstm"],
        progress=False)
    assert model.core.skip_padding and "skip_padding" not in vars(model.core)


@pytest.mark.parametrize("optimizer", ["lamb", "adamw", "adam"])
def test_copies_own_rates_make_their_state_before_a_capture_moving_nothing(optimizer):
    """The per-copy optimizers (arithrepro/optim.py) under init_optimizer_state: state made,
    zeroed, the weights untouched."""
    from arithrepro.train.graphs import init_optimizer_state
    from arithrepro.train.parts import make_optimizer

    ens = Ensemble([helpers.build("gpt", seed=s) for s in range(2)])
    cfgs = [_cfg(optimizer=optimizer, seed=s, weight_decay=0.1 * (s + 1), lr=1e-3 * (s + 1))
            for s in range(2)]
    opt = make_optimizer(ens, cfgs[0], cfgs)
    before = [p.detach().clone() for p in ens.parameters()]
    init_optimizer_state(opt)
    for p, b in zip(ens.parameters(), before):
        assert torch.equal(p, b)
        st = opt.state[p]
        assert int(st["step"]) == 0
        assert all(not v.any() for k, v in st.items() if torch.is_tensor(v) and k != "step")
