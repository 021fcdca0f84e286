"""The training loop: schedule, resume bit-identical to an uninterrupted run, NaN stop, best state."""

import math

import pytest
import torch

from arithrepro.observers import NonFiniteLoss
from arithrepro.train.config import TrainConfig, lr_factor
from tests.helpers import build, run


def test_schedule_warms_up_from_zero_then_decays_to_zero():
    total, warmup = 100, 10
    f = [lr_factor(s, total, warmup) for s in range(total)]
    assert f[0] == 0 and f[5] == pytest.approx(0.5) and f[10] == 1.0
    assert all(a <= b for a, b in zip(f[:11], f[1:11]))
    assert all(a >= b for a, b in zip(f[10:], f[11:]))
    assert f[-1] == pytest.approx(1 / 90) and lr_factor(total, total, warmup) == 0


def test_schedule_is_the_expr_sources_at_its_budget():
    # 10 epochs of 1280 batches, warm-up steps // 10: the source's linear_scheduler values
    total, warmup = 12800, 12800 // 10
    assert lr_factor(0, total, warmup) == 0 and lr_factor(640, total, warmup) == 0.5
    assert lr_factor(1280, total, warmup) == 1 and lr_factor(12799, total, warmup) == 1 / 11520


def test_no_warmup_starts_at_the_full_rate():
    assert lr_factor(0, 50, 0) == 1.0 and lr_factor(0, 50, 0, "constant") == 1.0


@pytest.mark.parametrize("name", ["gpt", "lstm", "retran"])
def test_killed_run_resumes_bit_identical(tmp_path, name):
    cfg = TrainConfig(lr=0.01, seed=3, val_every=4, checkpoint_every=5)
    straight, r1 = run(tmp_path / "a", name, cfg)
    # "Kill" after step 8: the last checkpoint is from step 5, so steps 6-8 are redone.
    _, halted = run(tmp_path / "b", name, cfg, halt_after=8)
    assert halted is None
    torch.manual_seed(12345)  # a resumed process starts from another global RNG state
    resumed, r2 = run(tmp_path / "b", name, cfg)
    for (k, a), (_, b) in zip(straight.state_dict().items(), resumed.state_dict().items()):
        assert torch.equal(a, b), k
    assert [r["loss"] for r in r1["train_curve"]] == [r["loss"] for r in r2["train_curve"]]
    assert r1["val_curve"] == r2["val_curve"]
    assert r1["best_val_loss"] == r2["best_val_loss"] and r1["steps"] == r2["steps"] == 12


def test_best_validation_state_is_restored(tmp_path):
    cfg = TrainConfig(lr=0.01, seed=0, val_every=2, checkpoint_every=50)
    model, result = run(tmp_path, "lstm", cfg)
    best = min(result["val_curve"], key=lambda r: r["val_loss"])
    assert result["best_val_loss"] == best["val_loss"] and result["best_step"] == best["step"]
    ck = torch.load(tmp_path / "checkpoint.pt", weights_only=False)
    for k, v in model.state_dict().items():
        assert torch.equal(v, ck["best_state"][k])


def test_non_finite_loss_stops_with_a_clear_message(tmp_path):
    model = build("gpt", "small")
    with torch.no_grad():
        model.head.weight.fill_(math.inf)
    cfg = TrainConfig(lr=0.01, seed=0)
    with pytest.raises(NonFiniteLoss, match="loss became nan at step 0"):
        run(tmp_path, "gpt", cfg, model=model, epochs=1)


def test_other_fingerprint_starts_afresh(tmp_path):
    cfg = TrainConfig(lr=0.01, seed=0, checkpoint_every=2)
    run(tmp_path, "lstm", cfg, halt_after=4, epochs=1)
    _, result = run(tmp_path, "lstm", cfg, epochs=1, fp="another")
    assert result["train_curve"][0]["step"] == 1


def test_constant_schedule_after_warmup():
    assert [lr_factor(s, 10, 2, "constant") for s in range(10)] == [0.0, 0.5] + [1.0] * 8


@pytest.mark.parametrize("name", ["adam", "adamw"])
def test_adam_takes_beta2_and_eps_from_the_config(name):
    from arithrepro.train.parts import make_optimizer

    net = torch.nn.Linear(2, 2)
    opt = make_optimizer(net, TrainConfig(lr=1e-3, seed=0, optimizer=name, beta2=0.98, eps=1e-5))
    assert (opt.param_groups[0]["betas"], opt.param_groups[0]["eps"]) == ((0.9, 0.98), 1e-5)
    plain = make_optimizer(net, TrainConfig(lr=1e-3, seed=0, optimizer=name)).param_groups[0]
    assert (plain["betas"], plain["eps"]) == ((0.9, 0.999), 1e-8)   # torch's defaults
