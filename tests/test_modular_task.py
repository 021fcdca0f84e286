"""The modular task: every sample and its sequence, the split, the right-hand-side mask, the
the source's loss and accuracy, the per-run metrics, the studies' cells and their params errors."""

import copy
import itertools

import pytest
import torch
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from arithrepro import config
from arithrepro.runs import thaw
from arithrepro.tasks.modular import TASK, curve_metrics
from arithrepro.tasks.modular_data import (Vocab, encode, first_scored, inputs_targets, score,
                                           sequences, split)

PRIMES = [2, 3, 5, 7, 11, 13]


def study_runs(params, study):
    """A study's runs, in dvc.yaml's order."""
    return [r for c in TASK.configs(params) if c.group == study for r in c.runs]


def run_config(params, run):
    """A run's settings: the base, its study's `set`, its swept values."""
    return thaw(run.config.settings)


def reference(xs, p, op):
    r = xs[0]
    for x in xs[1:]:
        if op == "+":
            r = (r + x) % p
        elif op == "-":
            r = (r - x) % p
        elif op == "*":
            r = (r * x) % p
        else:
            r = (r * pow(x, -1, p)) % p
    return r


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(PRIMES), st.sampled_from(["+", "-", "*", "/"]),
       st.sampled_from([[2], [3], [2, 3]]))
def test_every_sample_once_with_its_true_result(p, op, orders):
    v = Vocab(p, op)
    tokens, order = sequences(p, orders, op)
    width = 2 * max(orders) + 3
    assert tokens.shape[1] == width
    seen = set()
    for row, k in zip(tokens.tolist(), order.tolist()):
        assert row[0] == v.bos and row[2 * k] == v.eq and row[2 * k + 2] == v.eos
        assert row[2:2 * k:2] == [v.op] * (k - 1)
        assert row[2 * k + 3:] == [v.pad] * (width - 2 * k - 3)
        xs = row[1:2 * k:2]
        assert row[2 * k + 1] == reference(xs, p, op)
        seen.add(tuple(xs))
    divisors = p - 1 if op == "/" else p
    assert len(seen) == len(tokens) == sum(p * divisors ** (k - 1) for k in orders)


@settings(max_examples=30, deadline=None)
@given(st.floats(0.05, 0.95), st.integers(0, 10_000))
def test_split_is_a_seeded_partition_per_order(r, seed):
    _, order = sequences(5, [2, 3], "+")
    train, valid = split(order, r, seed)
    assert sorted(torch.cat([train, valid]).tolist()) == list(range(len(order)))
    for k, n in ((2, 25), (3, 125)):
        n_train = int((order[train] == k).sum())
        assert n_train == min(max(round(r * n), 1), n - 1)
    again, _ = split(order, r, seed)
    assert torch.equal(train, again)


def test_split_depends_on_the_seed():
    _, order = sequences(31, [2], "+")
    assert not torch.equal(split(order, 0.5, 0)[0], split(order, 0.5, 42)[0])


def test_the_mask_selects_the_right_hand_side():
    v = Vocab(5, "+")
    tokens, _ = sequences(5, [2, 3], "+")
    x, y, mask = inputs_targets(tokens, v)
    assert (mask.sum(1) == 2).all()  # r and EOS
    assert (y[mask].view(-1, 2)[:, 1] == v.eos).all()
    assert first_scored(mask) == 4  # order 2: the '=' at input position 4 predicts r
    x2, _, m2 = inputs_targets(sequences(5, [3], "+")[0], v)
    assert first_scored(m2) == 6


def test_encode_finds_the_sample_and_refuses_others():
    v = Vocab(7, "/")
    assert encode([3, 5], 7, "/").tolist() == [v.bos, 3, v.op, 5, v.eq, (3 * pow(5, -1, 7)) % 7, v.eos]
    with pytest.raises(ValueError, match="not a sample"):
        encode([3, 0], 7, "/")


class Fixed(torch.nn.Module):
    """Returns given logits, to check the scoring rules."""

    def __init__(self, logits):
        super().__init__()
        self.logits = logits

    def forward(self, x, outputs_from=0):
        return self.logits[: len(x), outputs_from:]


def test_loss_is_the_per_sample_mean_and_accuracy_needs_every_token():
    v = Vocab(5, "+")
    tokens, _ = sequences(5, [2], "+")
    x, y, mask = inputs_targets(tokens[:3], v)
    logits = torch.zeros(3, 6, len(v))
    for i in range(3):
        logits[i, 4, y[i, 4]] = 5.0        # r right for all three
        logits[i, 5, v.eos] = 5.0 if i != 1 else -5.0  # EOS wrong for the second
    loss, correct, margin = score(Fixed(logits), x, y, mask, outputs_from=4)
    assert correct.tolist() == [True, False, True]
    lp = torch.log_softmax(logits, -1)
    expected = [-(lp[i, 4, y[i, 4]] + lp[i, 5, y[i, 5]]) / 2 for i in range(3)]
    assert torch.allclose(loss, torch.stack(expected), atol=1e-6)
    # the true logit minus the best other, averaged over r and EOS: (5 + 5) / 2, and
    # (5 + (-5 - 0)) / 2 for the second, whose EOS logit lies below the zeros
    assert margin.tolist() == [5.0, 0.0, 5.0]


def test_the_evaluation_measures_norms_and_the_weights_movement():
    """head_norm is the output layer's weight norm, update_norm how far every weight moved
    since the previous evaluation (NaN at the first)."""
    import math

    from arithrepro.models.registry import build_model
    from arithrepro.tasks.modular import TASK
    from arithrepro.tasks.modular_data import Splits

    c = {"p": 5, "orders": [2], "operator": "+", "r_train": 0.5}
    data = Splits(c, 0, "cpu")
    net = build_model("gpt-sin", {"d_model": 8, "layers": 1, "heads": 2}, dropout=0.0,
                      **TASK.dims(c))
    first = data.evaluate(net)
    assert math.isnan(first["update_norm"]) and first["head_norm"] == float(net.head.weight.detach().norm())
    with torch.no_grad():
        net.head.bias.add_(3.0)   # 5 entries, each moved by 3
    second = data.evaluate(net)
    assert second["update_norm"] == pytest.approx(3.0 * math.sqrt(net.head.bias.numel()))
    assert second["train_margin"] == pytest.approx(first["train_margin"], abs=1e-5)  # a shift of every logit


def test_curve_metrics_first_step_at_the_best_value_and_budgets():
    curve = [
        {"step": 10, "train_loss": 1.0, "val_loss": 2.0, "train_acc": 0.5, "val_acc": 0.1},
        {"step": 20, "train_loss": 0.1, "val_loss": 1.5, "train_acc": 1.0, "val_acc": 0.2},
        {"step": 30, "train_loss": 0.1, "val_loss": 0.5, "train_acc": 1.0, "val_acc": 1.0},
        {"step": 40, "train_loss": 0.2, "val_loss": 0.6, "train_acc": 1.0, "val_acc": 1.0},
    ]
    m = curve_metrics(curve)
    assert (m["train_loss"], m["train_loss_step"]) == (0.1, 20)
    assert (m["val_acc"], m["val_acc_step"], m["train_acc_step"]) == (1.0, 30, 20)
    assert m["dt_acc_steps"] == 10 and m["dt_loss_steps"] == 10
    early = curve_metrics(curve, upto=25, prefix="a0.5_")
    assert early["a0.5_val_acc"] == 0.2 and early["a0.5_val_loss_step"] == 20
    with pytest.raises(ValueError, match="no evaluation"):
        curve_metrics(curve, upto=5)


@pytest.fixture(scope="module")
def params():
    return config.load("params.yaml")


def test_studies_expand_their_sweeps():
    p = config.compose(["profile=paper"])
    runs = study_runs(p, "size")
    assert len(runs) == 2 * 9 * 2
    assert {r.label for r in runs} == {f"size.L{L}d{d}" for L, d in itertools.product([1, 2, 3], [64, 128, 256])}
    r = next(r for r in runs if r.label == "size.L3d64" and r.model == "gpt-sin" and r.seed == 42)
    c = run_config(p, r)
    assert c["layers"] == 3 and c["d_model"] == 64 and c["r_train"] == 0.5
    assert r.name == "gpt-sin-size.L3d64-42" and r.group == "size"
    assert str(r.files.dir) == "runs/modular/size/gpt-sin-size.L3d64-42"
    assert str(r.files.record) == "metrics/modular/runs/size/gpt-sin-size.L3d64-42.json"
    reg = study_runs(p, "regularization")
    assert {r.model for r in reg} == {"lstm-std"} and all(run_config(p, r)["steps"] == 40001 for r in reg)
    compute = study_runs(p, "compute")
    assert all(run_config(p, r)["steps"] == 20001 for r in compute)
    orders = study_runs(p, "orders")
    assert orders[0].label == "orders" and run_config(p, orders[0])["p"] == 11


def test_the_profile_overrides_key_by_key():
    p = config.compose(["profile=smoke"])
    sanity = study_runs(p, "sanity")
    assert all(run_config(p, r)["steps"] == 8 for r in sanity)
    assert all(run_config(p, r)["operator"] == "+" for r in sanity)  # not overridden: the top-level value
    orders = run_config(p, study_runs(p, "orders")[0])
    assert orders["orders"] == [2, 3] and orders["p"] == 5


def test_a_study_follows_the_blocks_models_and_seeds_unless_it_names_its_own():
    p = config.compose(["profile=cpu", "modular.seeds=[103,104]", "modular.models=[gpt-sin]"])
    s = p["modular"]["studies"]
    assert (s["data"]["models"], s["data"]["seeds"]) == (["gpt-sin"], [103, 104])
    assert s["sanity"]["seeds"] == [100, 101, 102, 103, 104] and s["size"]["models"] == ["gpt-sin"]


def bad(params, path, value):
    p = copy.deepcopy(params)
    node = p
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value
    return p


@pytest.mark.parametrize("path,value,message", [
    (("modular", "base", "p"), 12, "modular.base.p = 12: expected a prime"),
    (("modular", "base", "heads"), 3, "d_model = 128 is not a multiple of heads = 3"),
    (("modular", "studies", "data", "sweep"), {"r_trian": [0.5]}, "modular.studies.data.sweep = .*: expected a mapping of r_train to lists"),
    (("modular", "studies", "sanity", "sweep"), {"lr": [0.1]}, "modular.studies.sanity.sweep = .*the study sweeps nothing"),
    (("modular", "studies", "data", "sweep"), {"r_train": [0.5, 0.5]}, "modular.studies.data.sweep.r_train = .*distinct"),
    (("modular", "studies", "data", "set"), {"r_trian": 0.5}, "modular.studies.data.set.r_trian: unknown key"),
    (("modular", "studies", "data", "sweep"), {"r_train": [1.5]}, r"r_train\[0\] = 1.5"),
    (("modular", "studies", "size", "models"), ["gpt"], "expected one of lstm-std, gpt-sin"),
    (("modular", "attention", "samples"), [[3, 40]], "modular.attention.samples\\[0\\]"),
    (("modular", "attention", "samples"), [[3, 4, 5]], "expected 2 operands below p = 31"),
    # the samples stay, the orders they were written for change: the message names the orders
    (("modular", "base", "orders"), [3], r"modular.base.orders = \[3\]"),
    (("modular", "base", "lr"), -1, "modular.base.lr = -1"),
    (("modular", "bogus"), 1, "modular.bogus: unknown key"),
    (("modular", "base", "beta2"), 1.0, "modular.base.beta2 = 1.0: expected a number in"),
    (("modular", "base", "eps"), 0, "modular.base.eps = 0: expected a number"),
])
def test_params_errors_name_the_key(params, path, value, message):
    with pytest.raises(config.ParamsError, match=message):
        config.validate(bad(params, path, value))


def test_the_modular_task_is_not_a_grid_task(params):
    with pytest.raises(config.ParamsError, match="not a grid task"):
        config.grid_task("modular")


def test_an_unknown_run_is_one_line_naming_the_runs():
    from arithrepro.lookup import find
    from arithrepro.tasks.modular import TASK

    with pytest.raises(config.ParamsError, match=r"run gpt-sin-data.r0.5-0: not a run of modular .*"
                                         r"lstm-std-sanity-0"):
        find(TASK, config.compose(["profile=smoke"]), "gpt-sin-data.r0.5-0")


def test_the_paper_profile_keeps_the_sources_defaults():
    base = config.compose(["profile=paper"])["modular"]["base"]
    assert (base["p"], base["r_train"], base["lr"], base["weight_decay"], base["batch_size"],
            base["steps"], base["warmup_frac"], base["beta2"]) == (31, 0.5, 0.001, 1.0, 512, 10001,
                                                                    0.0, 0.999)


def test_attention_samples_must_be_samples_of_the_data(params):
    p = bad(params, ("modular", "base", "operator"), "/")
    p["modular"]["attention"]["samples"] = [[3, 0]]
    with pytest.raises(config.ParamsError, match="divisors nonzero"):
        config.validate(p)


def test_the_loop_gets_the_cells_warmup_beta2_and_eps(params):
    from arithrepro.runner import build
    from arithrepro.runs import Placement
    from arithrepro.tasks.modular import TASK

    p = config.compose(["profile=smoke"])
    p["modular"]["base"].update(warmup_frac=0.25, beta2=0.95, eps=1e-6, schedule="linear")
    run = study_runs(p, "sanity")[0]
    cfg = build(TASK, run, p, Placement("cpu", "fp32", False)).cfg
    assert (cfg.warmup_frac, cfg.beta2, cfg.eps, cfg.schedule, cfg.optimizer) == (
        0.25, 0.95, 1e-6, "linear", "adamw")


# --- the attention figure's samples ------------------------------------------------------------

@pytest.mark.parametrize("orders, seed", [([2], 0), ([2], 42), ([2, 3], 7)])
def test_sample_side_is_the_side_the_runs_data_put_it_on(orders, seed):
    from arithrepro.stages.modular_attention import sample_side
    from arithrepro.tasks.modular_data import Splits

    c = {"p": 5, "orders": orders, "operator": "+", "r_train": 0.4}
    train = {tuple(row) for row in Splits(c, seed, "cpu").splits["train"].x.tolist()}
    sides = set()
    for k in orders:
        for operands in itertools.product(range(5), repeat=k):
            row = encode(list(operands), 5, "+")  # padded to the mixed width, then the input
            row = torch.cat([row, torch.full((2 * max(orders) + 3 - len(row),), Vocab(5, "+").pad)])
            row = row[:-1]
            side = sample_side(list(operands), c, seed)
            assert side == ("training" if tuple(row.tolist()) in train else "validation"), operands
            sides.add(side)
    assert sides == {"training", "validation"}


def test_the_attention_figure_says_whether_its_sample_was_trained_on(tmp_path, monkeypatch):
    """An untrained GPT saved as the sanity study's runs (no training): each figure's title
    names the side of the run's split its sample is on, whichever the params chose."""
    from click.testing import CliRunner

    from arithrepro.cli import main
    from arithrepro.models.registry import build_model
    from arithrepro.report import plotting
    from arithrepro.stages.modular_attention import sample_side
    from arithrepro.tasks.modular import TASK

    p = config.compose(["profile=smoke"])
    a = p["modular"]["attention"]
    runs = [r for r in study_runs(p, a["study"]) if r.model == a["model"]]
    c = run_config(p, runs[0])
    sides = {s: sample_side(list(s), c, runs[0].seed)
             for s in itertools.product(range(c["p"]), repeat=2)}
    a["samples"] = [list(next(s for s, side in sides.items() if side == want))
                    for want in ("validation", "training")]
    monkeypatch.chdir(tmp_path)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(p, allow_unicode=True))
    for i, run in enumerate(runs):
        run.files.record.parent.mkdir(parents=True, exist_ok=True)
        run.files.record.write_text(f'{{"val_acc": {0.5 + i / 10}, "val_acc_last": {0.4 + i / 10}, '
                                    f'"val_loss": 1.0}}')
        size = {k: c[k] for k in ("d_model", "layers", "heads")}
        net = build_model(run.model, size, dropout=0.0, **TASK.dims(c))
        run.files.dir.mkdir(parents=True)
        torch.save({"model": run.model, "size": size, "dropout": 0.0, "dims": TASK.dims(c),
                    "state_dict": net.state_dict(), "vocab": Vocab(c["p"], c["operator"]).tokens()},
                   run.files.dir / "model.pt")
    titles = []

    def save(plt, fig, path, real=plotting.save):
        titles.append(fig._suptitle.get_text())
        return real(plt, fig, path)

    monkeypatch.setattr(plotting, "save", save)
    result = CliRunner().invoke(main, ["modular-attention"])
    assert result.exit_code == 0, result.output
    assert len(titles) == 2
    assert titles[0].endswith("a validation sample: not in the run's training split")
    assert titles[1].endswith("a training sample (in the run's training split)")
    assert titles[0].startswith(runs[-1].name)  # the best run's split
    assert (tmp_path / "plots/modular/attention/sample2.png").is_file()


def test_the_paper_profiles_data_and_regularization_studies_train_as_one_ensemble_per_model():
    """Config.ensemble_key at the source's settings: each model's sanity and data
    configurations (r_train alone differs), with the size study's base-sized one, are one
    ensemble, the regularization study's weight decays another; other sizes, batch sizes and
    orders change a step's shapes and stay apart."""
    p = config.compose(["profile=paper"])
    groups = {}
    for c in TASK.configs(p):
        groups.setdefault(c.ensemble_key, []).append(c)
    together = sorted(sorted({c.group for c in g}) + [g[0].model] for g in groups.values() if len(g) > 1)
    assert together == [["data", "sanity", "size", "gpt-sin"], ["data", "sanity", "size", "lstm-std"],
                        ["regularization", "lstm-std"]]
    sizes = {len(g) for g in groups.values() if g[0].group == "sanity"}
    assert sizes == {len(p["modular"]["studies"]["data"]["sweep"]["r_train"]) + 2}
