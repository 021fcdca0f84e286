"""Ensembles (arithrepro/stacking.py): E copies trained as one stacked model.

Exactness: without dropout, each copy of an ensemble trained on its own batches ends with the
weights its standalone run ends with (float tolerance), for every registered model and for each
optimizer; the forward of a copy is its standalone model's. With dropout the copies draw
independent masks. What the ensemble refuses is refused with a message naming it.
"""

from __future__ import annotations

from dataclasses import replace

import json

import pytest
import torch
import torch.nn.functional as F

from arithrepro.stacking import CopiesBatches, Ensemble, attention_kernels, stack_inputs
from arithrepro.models.registry import MODELS, build_model
from arithrepro.observers import NonFiniteLoss
from arithrepro.train.config import TrainConfig
from arithrepro.train.loop import fit
from arithrepro.train.parts import make_optimizer
from tests import helpers
from tests.helpers import CONTRACT_DIMS as DIMS, CONTRACT_SIZES as SIZES

E = 3


def copies(name: str, dropout: float = 0.0) -> list:
    """The model at seeds 0..E-1, its training forward deterministic without dropout (Abacus
    offsets off: they are a training draw like dropout's)."""
    out = []
    for seed in range(E):
        torch.manual_seed(seed)
        model = build_model(name, SIZES[name], dropout=dropout, **DIMS[MODELS[name].form])
        if name == "abacus":
            model.positions.offset_k = 1
        out.append(model)
    return out


def batch(name: str, seed: int, B: int = 4):
    """(x, y, mask) for the model's form, trailing padding in a language model's rows."""
    g = torch.Generator().manual_seed(100 + seed)
    dims = DIMS[MODELS[name].form]
    form = MODELS[name].form
    if form == "pairs":
        x = torch.randint(0, dims["base"], (B, 6, 2), generator=g)
        y = torch.randint(0, dims["classes"], (B, 6), generator=g)
        return x, y, torch.ones(B, 6, dtype=torch.bool)
    T = 8 - seed % 3  # the copies' batches differ in width
    x = torch.randint(0, 10, (B, T), generator=g)
    y = torch.randint(0, 10, (B, T), generator=g)
    lengths = torch.randint(2, T + 1, (B,), generator=g)
    mask = torch.arange(T) < lengths[:, None]
    if form == "digit-tokens":  # digit runs no longer than the Abacus table's training reach
        x[:, 2::3] = 10
    x[~mask] = dims["pad_id"]
    return x, y, mask


def loss_of(logits, y, mask):
    return F.cross_entropy(logits[mask], y[mask])


def pad_of(name: str):
    form = MODELS[name].form
    return None if form == "pairs" else {"x": DIMS[form]["pad_id"]}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_a_copys_forward_is_its_standalone_models(name):
    models = copies(name)
    ens = Ensemble(models).train()  # the training forward, which an ensemble runs
    batches = [batch(name, 0) for _ in range(E)]  # one width: compare every position
    X, _, _ = stack_inputs(batches)
    out = ens(X)
    for e, m in enumerate(models):
        # at the real positions: a fused recurrence leaves padding's outputs zero
        mask = batches[e][2]
        torch.testing.assert_close(out[e][mask], m.train()(batches[e][0])[mask], rtol=1e-5,
                                   atol=1e-6)


@pytest.mark.parametrize("optimizer", ["lamb", "adamw", "adam"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_an_ensemble_trains_to_its_standalone_runs_weights(name, optimizer):
    cfg = TrainConfig(lr=3e-3, seed=0, optimizer=optimizer, weight_decay=0.01)
    steps = 3
    standalone = copies(name)
    ens = Ensemble(copies(name)).train()
    opt = make_optimizer(ens, cfg)
    for step in range(steps):
        batches = [batch(name, e + 10 * step) for e in range(E)]
        X, Y, M = stack_inputs(batches, pad_of(name))
        opt.zero_grad()
        logits = ens(X)
        sum(loss_of(logits[e], Y[e], M[e]) for e in range(E)).backward()
        opt.step()
    for e, model in enumerate(standalone):
        model.train()
        opt_e = make_optimizer(model, cfg)
        for step in range(steps):
            x, y, mask = batch(name, e + 10 * step)
            opt_e.zero_grad()
            loss_of(model(x), y, mask).backward()
            opt_e.step()
        mine = ens.state_of(e)
        for n, p in model.named_parameters():
            if n.endswith("attn.k.bias"):
                # Its exact gradient is zero (a bias shared by every key adds the same score to
                # all of a query's keys, which the softmax ignores); Adam's normalized step
                # turns the rounding left in it into full-size steps of either sign.
                continue
            torch.testing.assert_close(mine[n], p.detach(), rtol=1e-4, atol=1e-5, msg=lambda m: f"{n}: {m}")


def test_copies_draw_independent_dropout_masks():
    ens = Ensemble(copies("gpt", dropout=0.5))
    ens.load_state_of(1, ens.state_of(0))   # copies 0 and 1 now hold the same weights
    X, _, _ = stack_inputs([batch("gpt", 0)] * E)
    out = ens.train()(X)
    assert not torch.allclose(out[0], out[1])
    assert torch.allclose(ens.eval()(X)[0], ens(X)[1])


def test_a_copy_comes_back_as_the_standalone_model():
    models = copies("lstm")
    ens = Ensemble(models)
    back = ens.copy_of(2)
    assert back.core.skip_padding and not back.core.cells[0].vmapped
    assert not ens.template.core.skip_padding and ens.template.core.cells[0].vmapped
    for (n, p), (_, q) in zip(back.named_parameters(), models[2].named_parameters()):
        assert torch.equal(p, q), n
    x, _, _ = batch("lstm", 0)
    torch.testing.assert_close(back.eval()(x), models[2].eval()(x))


def test_lamb_gets_a_trust_ratio_per_copy_and_gate():
    ens = Ensemble(copies("lstm"))
    blocks = ens.lamb_blocks()
    cell = dict(zip(ens.names, ens.stacked))
    assert blocks[cell["core.cells.0.W.weight"]] == 4 * E
    assert blocks[cell["core.cells.0.P.weight"]] == E
    assert blocks[cell["embed.weight"]] == E


def test_other_architectures_are_refused():
    torch.manual_seed(0)
    a = build_model("gpt", SIZES["gpt"], dropout=0.0, **DIMS["tokens"])
    b = build_model("gpt", {**SIZES["gpt"], "d_ff": 32}, dropout=0.0, **DIMS["tokens"])
    with pytest.raises(ValueError, match="copy 1: not the same architecture"):
        Ensemble([a, b])


def test_an_encoders_batches_must_share_a_width():
    x = torch.zeros(2, 5, 2, dtype=torch.long)
    y = torch.zeros(2, 5, dtype=torch.long)
    m = torch.ones(2, 5, dtype=torch.bool)
    with pytest.raises(ValueError, match="one width"):
        stack_inputs([(x, y, m), (x[:, :4], y[:, :4], m[:, :4])])


def test_the_looped_encoders_copies_share_the_drawn_loop_count():
    models = copies("looped")
    for m in models:
        m.extra_loops = 3
    ens = Ensemble(models).train()
    X, _, _ = stack_inputs([batch("looped", e) for e in range(E)])
    torch.manual_seed(5)
    drawn = ens.template.shared_draw(X[0])["loops"]
    torch.manual_seed(5)
    seen = []
    core = ens.template.core
    original = core.forward
    core.forward = lambda h, **kw: (seen.append(kw["recurrences"]), original(h, **kw))[1]
    ens(X)
    assert seen == [drawn]


# --- the training loop -------------------------------------------------------------------------

def _seeded(name: str, seed: int):
    return helpers.build(name, seed=seed)


def _loop_cfg(**over) -> TrainConfig:
    base = dict(lr=3e-3, seed=0, optimizer="lamb", val_every=3, checkpoint_every=4, sync_every=2,
                validate_epochs=False)
    return TrainConfig(**{**base, **over})


def _ensemble_fit(tmp_path, name, cfg, models, halt_after=None):
    sources = [helpers.sources(replace(cfg, seed=s), 16, 2) for s in range(len(models))]
    batches = CopiesBatches([b for b, _ in sources], {"x": helpers.PAD})
    ens = Ensemble(models)
    halt = (helpers.Halt(halt_after),) if halt_after is not None else ()
    try:
        results = fit(ens, batches, sources[0][1], cfg, tmp_path / "checkpoint.pt", "fp",
                      spec=MODELS[name], progress=False, observers=halt)
    except helpers.Halted:
        results = None
    return ens, results


@pytest.mark.parametrize("name", ["gpt", "lstm", "retran"])
def test_fit_trains_each_copy_as_its_standalone_run(tmp_path, name):
    cfg = _loop_cfg()
    ens, results = _ensemble_fit(tmp_path, name, cfg, [_seeded(name, s) for s in range(E)])
    for s in range(E):
        cfg_s = replace(cfg, seed=s)
        batches, valid = helpers.sources(cfg_s, 16, 2)
        model = _seeded(name, s)
        alone = fit(model, batches, valid, cfg_s, tmp_path / f"alone{s}.pt", "fp",
                    spec=MODELS[name], progress=False)
        mine = results[s]
        assert mine["best_step"] == alone["best_step"] and mine["steps"] == alone["steps"]
        for key in ("train_curve", "val_curve"):
            a = [r.get("loss", r.get("val_loss")) for r in alone[key]]
            b = [r.get("loss", r.get("val_loss")) for r in mine[key]]
            assert b == pytest.approx(a, rel=1e-4), key
        state = ens.state_of(s)
        for n, p in model.named_parameters():
            torch.testing.assert_close(state[n], p.detach(), rtol=1e-4, atol=1e-5)


def test_a_resumed_ensemble_finishes_as_an_uninterrupted_one(tmp_path):
    cfg = _loop_cfg()
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    whole, _ = _ensemble_fit(tmp_path / "a", "gpt", cfg, [_seeded("gpt", s) for s in range(E)])
    _, cut = _ensemble_fit(tmp_path / "b", "gpt", cfg, [_seeded("gpt", s) for s in range(E)],
                           halt_after=5)
    assert cut is None
    resumed, results = _ensemble_fit(tmp_path / "b", "gpt", cfg,
                                     [_seeded("gpt", s) for s in range(E)])
    for a, b in zip(whole.stacked, resumed.stacked):
        assert torch.equal(a, b)


def test_a_copy_that_diverges_stops_alone(tmp_path):
    cfg = _loop_cfg()
    models = [_seeded("gpt", s) for s in range(E)]
    with torch.no_grad():
        models[1].head.weight.fill_(float("inf"))
    ens, results = _ensemble_fit(tmp_path, "gpt", cfg, models)
    assert "loss became" in results[1]["failed"]
    cfg_0 = replace(cfg, seed=0)
    batches, valid = helpers.sources(cfg_0, 16, 2)
    model = _seeded("gpt", 0)
    fit(model, batches, valid, cfg_0, tmp_path / "alone.pt", "fp", spec=MODELS["gpt"],
        progress=False)
    for n, p in model.named_parameters():
        torch.testing.assert_close(ens.state_of(0)[n], p.detach(), rtol=1e-4, atol=1e-5)
    assert results[2]["steps"] == results[0]["steps"]


def test_every_copy_diverging_stops_the_run(tmp_path):
    models = [_seeded("gpt", s) for s in range(E)]
    with torch.no_grad():
        for m in models:
            m.head.weight.fill_(float("inf"))
    with pytest.raises(NonFiniteLoss, match="every copy stopped"):
        _ensemble_fit(tmp_path, "gpt", _loop_cfg(), models)


@pytest.mark.parametrize("over, match", [({"micro_batches": 2}, "micro_batches"),
                                         ({"precision": "fp16"}, "fp16")])
def test_what_an_ensemble_cannot_run_is_refused(tmp_path, over, match):
    with pytest.raises(ValueError, match=match):
        _ensemble_fit(tmp_path, "gpt", _loop_cfg(**over), [_seeded("gpt", s) for s in range(2)])


# --- the runner: a configuration's seeds as one ensemble, written as separate runs -------------

def test_runs_trained_as_one_ensemble_are_written_as_if_trained_alone(tmp_path, monkeypatch, tiny_expr):
    from arithrepro import runner
    from arithrepro.runs import Placement
    from arithrepro.tasks.registry import TASKS

    params, data_dir = tiny_expr
    params["expr"].update(models=["lstm"], sizes=["small"], seeds=[0, 1])
    params["models"]["lstm"]["dropout"] = 0.0
    task, where = TASKS["expr"], Placement("cpu", "fp32", False)
    runs = task.runs(params)
    assert [r.seed for r in runs] == [0, 1]
    for folder in ("alone", "ensemble"):
        (tmp_path / folder / "data").mkdir(parents=True)
        (tmp_path / folder / "data" / "expr").symlink_to(data_dir)
    monkeypatch.chdir(tmp_path / "alone")
    alone = [runner.train(task, [r], params, where)[0] for r in runs]
    monkeypatch.chdir(tmp_path / "ensemble")
    ensemble = runner.train(task, runs, params, where)
    assert not (tmp_path / "ensemble" / runs[0].files.checkpoint).exists()
    for run, a, b in zip(runs, alone, ensemble):
        assert b["trained_with"] == 2 and b["seed"] == run.seed
        assert b["best_step"] == a["best_step"] and b["params"] == a["params"]
        assert b["best_val_loss"] == pytest.approx(a["best_val_loss"], rel=1e-4)
        mine = torch.load(tmp_path / "ensemble" / run.files.model, weights_only=False)
        theirs = torch.load(tmp_path / "alone" / run.files.model, weights_only=False)
        assert {k: v for k, v in mine.items() if k != "state_dict"} == \
               {k: v for k, v in theirs.items() if k != "state_dict"}
        for k, v in theirs["state_dict"].items():
            torch.testing.assert_close(mine["state_dict"][k], v, rtol=1e-4, atol=1e-5)
        assert (tmp_path / "ensemble" / run.files.live / "metrics.json").is_file()


def test_runs_that_cannot_share_a_step_train_apart(tmp_path, monkeypatch, tiny_expr):
    """Two sizes of one model: two architectures, so two groups of one, each written as its
    own run."""
    from arithrepro import runner
    from arithrepro.runs import Placement
    from arithrepro.stacking import ensembles
    from arithrepro.tasks.registry import TASKS

    params, data_dir = tiny_expr
    params["expr"].update(models=["lstm"], sizes=["small", "medium"], seeds=[0])
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "expr").symlink_to(data_dir)
    monkeypatch.chdir(tmp_path)
    runs, where = TASKS["expr"].runs(params), Placement("cpu", "fp32", False)
    assert ensembles([runner.build(TASKS["expr"], r, params, where) for r in runs]) == [[0], [1]]
    written = runner.train(TASKS["expr"], runs, params, where)
    assert [w["size"] for w in written] == ["small", "medium"]
    assert not any("trained_with" in w for w in written)


# --- configurations that differ in rate, decay or data: one ensemble ---------------------------

def _modular(tmp_path, monkeypatch):
    """The smoke profile's modular task on data enough for batches of 32 rows, without dropout
    (an ensemble's copies draw their own masks)."""
    from arithrepro import config

    params = config.compose(["profile=smoke"])
    params["modular"]["base"].update(p=11, batch_size=32, steps=8, eval_every=4, dropout=0.0,
                                     lr=0.003)
    monkeypatch.chdir(tmp_path)
    return params


def _fused_runs(params):
    """lstm-std at two r_train (the data study) and, at another rate, two weight decays
    (regularization), on seeds 0 and 1: four configurations of one architecture."""
    from arithrepro.tasks.registry import TASKS

    studies = params["modular"]["studies"]
    studies["data"].update(models=["lstm-std"], seeds=[0, 1], sweep={"r_train": [0.2, 0.6]})
    studies["regularization"].update(models=["lstm-std"], seeds=[1], set={"steps": 8, "lr": 0.01},
                                     sweep={"weight_decay": [0.0, 0.3]})
    return [r for c in TASKS["modular"].configs(params) if c.group in ("data", "regularization")
            for r in c.runs]


def test_configurations_that_differ_in_rate_decay_or_data_train_as_one(tmp_path, monkeypatch):
    """Each copy of the fused ensemble ends with its standalone run's weights, curves and record
    (to float rounding): its own training set (of its own size: fewer rows padded), rate and
    decay."""
    from arithrepro import runner
    from arithrepro.runs import Placement
    from arithrepro.stacking import ensembles
    from arithrepro.tasks.registry import TASKS

    params, task, where = _modular(tmp_path, monkeypatch), TASKS["modular"], Placement("cpu", "fp32", False)
    runs = _fused_runs(params)
    assert len({r.config.name for r in runs}) == 4 and len(runs) == 6
    assert ensembles([runner.build(task, r, params, where) for r in runs]) == [list(range(6))]
    for folder in ("alone", "fused"):
        (tmp_path / folder).mkdir()
    monkeypatch.chdir(tmp_path / "alone")
    alone = [runner.train(task, [r], params, where)[0] for r in runs]
    monkeypatch.chdir(tmp_path / "fused")
    fused = runner.train(task, runs, params, where)
    for run, a, b in zip(runs, alone, fused):
        assert b["trained_with"] == 6 and (b["model"], b["size"], b["seed"]) == (a["model"], a["size"], a["seed"])
        assert b["best_val_loss"] == pytest.approx(a["best_val_loss"], rel=1e-4)
        mine = torch.load(tmp_path / "fused" / run.files.model, weights_only=False)["state_dict"]
        theirs = torch.load(tmp_path / "alone" / run.files.model, weights_only=False)["state_dict"]
        for k, v in theirs.items():
            torch.testing.assert_close(mine[k], v, rtol=1e-4, atol=1e-5, msg=lambda m: f"{run.name} {k}: {m}")
        ra, rb = (json.loads((tmp_path / f / run.files.record).read_text()) for f in ("alone", "fused"))
        assert rb["val_acc_last"] == ra["val_acc_last"] and rb["r_train"] == ra["r_train"]
        assert rb["weight_decay"] == ra["weight_decay"]
        rates = [(tmp_path / f / run.files.live / "plots/metrics/train/lr.tsv").read_text()
                 for f in ("alone", "fused")]
        assert rates[0] == rates[1]


def test_a_fused_copy_at_anothers_rate_is_not_its_run(tmp_path, monkeypatch):
    """The comparison above can fail: the same copies stepped at the first copy's rate end
    elsewhere than the runs at their own."""
    from dataclasses import replace

    from arithrepro import runner
    from arithrepro.runs import Placement
    from arithrepro.stacking import stacked
    from arithrepro.tasks.registry import TASKS
    from arithrepro.train.loop import fit

    params, task, where = _modular(tmp_path, monkeypatch), TASKS["modular"], Placement("cpu", "fp32", False)
    runs = [r for r in _fused_runs(params) if r.config.group == "regularization"]
    builts = [runner.build(task, r, params, where) for r in runs]
    alone = runner.build(task, runs[1], params, where)
    fit(alone.net, alone.data.batches, alone.data.valid, alone.cfg, tmp_path / "a.pt", "a",
        progress=False)
    net, batches = stacked(builts)
    fit(net, batches, [b.data.valid for b in builts],
        [builts[0].cfg, replace(builts[1].cfg, lr=builts[1].cfg.lr / 3)],
        tmp_path / "b.pt", "b", progress=False)
    gap = max(float((net.state_of(1)[n] - p.detach()).abs().max()) for n, p in alone.net.named_parameters())
    assert gap > 1e-4


# --- the fused recurrences' ensemble form ------------------------------------------------------

def _grads(fn, tensors):
    out = fn(*tensors)
    g = torch.Generator().manual_seed(7)
    weight = torch.randn(out.shape, generator=g, dtype=out.dtype)
    return out, torch.autograd.grad((out * weight).sum(), [t for t in tensors if t is not None])


@pytest.mark.parametrize("cell", ["source", "standard", "elman", "gru"])
def test_the_copies_recurrence_is_each_copys_own(cell):
    """Each recurrence's copies Function, forward and every gradient, against the single-model
    Function run copy by copy (float64, every row a full sequence)."""
    from arithrepro.models import recurrence as single
    from arithrepro.models import recurrence_copies as copies

    g = torch.Generator().manual_seed(0)
    E, B, T, d = 3, 4, 5, 6

    def r(*shape):
        return (0.5 * torch.randn(E, *shape, generator=g, dtype=torch.float64)).requires_grad_()

    if cell in ("source", "standard"):
        F = d if cell == "standard" else 8
        args = [r(B, T, d), r(4 * F, d), r(4 * F), r(4 * F, d)]
        if cell == "source":
            args += [r(d, F), r(d), r(B, d), r(B, F), r(d, F), r(d)]
        else:
            args += [None] * 6
        rows = single.Rows.full(B, T, "cpu")

        def one(e):
            return lambda *a: single.LSTMRecurrence.apply(a[0], rows, *a[1:])

        together = copies.LSTMCopies.apply
    else:
        width = 3 * d if cell == "gru" else d
        args = [r(B, T, width), r(width, d)]
        fn = single.GRURecurrence if cell == "gru" else single.ElmanRecurrence
        together = (copies.GRUCopies if cell == "gru" else copies.ElmanCopies).apply

        def one(e):
            return fn.apply

    out, grads = _grads(together, args)
    for e in range(E):
        mine = [None if a is None else a[e].detach().clone().requires_grad_() for a in args]
        ref, ref_grads = _grads(one(e), mine)
        torch.testing.assert_close(out[e], ref)
    # the gradients of the whole: each copy's part is that copy's own
    for e in range(E):
        mine = [None if a is None else a[e].detach().clone().requires_grad_() for a in args]
        g = torch.Generator().manual_seed(7)
        weight = torch.randn(out.shape, generator=g, dtype=out.dtype)[e]
        ref = one(e)(*mine)
        ref_grads = torch.autograd.grad((ref * weight).sum(), [t for t in mine if t is not None])
        for a, b in zip(grads, ref_grads):
            torch.testing.assert_close(a[e], b)


@pytest.mark.parametrize("dropout", [0.0, 0.3])
def test_retrans_copies_layer_is_each_copys_fused_layer(dropout):
    """The ensemble's ReTran (its fused layer's ensemble form) against each copy's own fused
    layers: outputs and every parameter's gradient; with dropout, the copies' masks are drawn
    together, so the check is at rate 0 and the run at 0.3 only has to match itself in shape."""
    models = copies("retran", dropout=dropout)
    ens = Ensemble(models).train()
    assert ens.template.core.vmapped and ens.template.core.fused
    X, Y, M = stack_inputs([batch("retran", e) for e in range(E)], pad_of("retran"))
    out = ens(X)
    (out * M.unsqueeze(-1)).sum().backward()
    if dropout:
        assert out.shape == (E, *X.shape[1:], DIMS["tokens"]["vocab_size"])
        return
    for e, m in enumerate(models):
        ref = m.train()(X[e])
        torch.testing.assert_close(out[e][M[e]], ref[M[e]], rtol=1e-5, atol=1e-6)
        (ref * M[e].unsqueeze(-1)).sum().backward()
        grads = dict(zip(ens.names, (p.grad for p in ens.stacked)))
        for n, p in m.named_parameters():
            torch.testing.assert_close(grads[n][e], p.grad, rtol=1e-4, atol=1e-5,
                                       msg=lambda msg: f"{n}: {msg}")


def test_a_stopped_copy_stays_stopped_when_the_run_resumes(tmp_path):
    cfg = _loop_cfg()

    def models():
        out = [_seeded("gpt", s) for s in range(E)]
        with torch.no_grad():
            out[1].head.weight.fill_(float("inf"))
        return out

    _, cut = _ensemble_fit(tmp_path, "gpt", cfg, models(), halt_after=5)
    assert cut is None
    fixed = models()
    with torch.no_grad():  # were the copy not remembered as stopped, it would now train
        fixed[1].head.weight.normal_()
    _, results = _ensemble_fit(tmp_path, "gpt", cfg, fixed)
    assert "loss became" in results[1]["failed"]
    assert "failed" not in results[0] and "failed" not in results[2]


def test_a_copy_without_a_finite_validation_is_a_failed_copy_not_a_failed_run(tmp_path):
    cfg = _loop_cfg()
    sources = [helpers.sources(replace(cfg, seed=s), 16, 2) for s in range(E)]
    batches = CopiesBatches([b for b, _ in sources], {"x": helpers.PAD})
    make, n = sources[0][1]
    calls = []

    def nan_for_copy_2(model):
        calls.append(1)
        from arithrepro.train.losses import validation_loss
        v = validation_loss(model, make, n, 64)
        return {"val_loss": float("nan") if len(calls) % E == 0 else v}

    results = fit(Ensemble([_seeded("gpt", s) for s in range(E)]), batches,
                  [nan_for_copy_2] * E, cfg, tmp_path / "c.pt", "fp", spec=MODELS["gpt"],
                  progress=False)
    assert "no validation loss was finite" in results[2]["failed"]
    assert results[0]["best_step"] > 0 and results[1]["best_step"] > 0


def test_copies_attend_with_the_plain_kernel_on_cuda_and_torchs_choice_elsewhere():
    """On CUDA the memory-efficient kernel's backward refuses the log-sum-exp vmap hands it
    (tests/test_cuda.py trains such an ensemble); the switch is global state, so it is checked
    here without a device."""
    chosen = lambda: (torch.backends.cuda.math_sdp_enabled(),
                      torch.backends.cuda.mem_efficient_sdp_enabled(),
                      torch.backends.cuda.flash_sdp_enabled())
    before = chosen()
    with attention_kernels(torch.device("cuda")):
        assert chosen() == (True, False, False)
    assert chosen() == before
    with attention_kernels(torch.device("cpu")):
        assert chosen() == before


@pytest.mark.parametrize("name", ["gpt-sin", "lstm-std"])
def test_gradient_clipping_is_per_copy_as_each_standalone_run_clips(name):
    """TrainConfig.grad_clip: an ensemble's copies are each clipped by their own norm, exactly
    as torch's clip_grad_norm_ clips the standalone model (the copies' norms differ, so one
    norm over the stack would scale them all alike)."""
    from arithrepro.train.ensembles import clip_gradients

    standalone = copies(name)
    ens = Ensemble(copies(name)).train()
    batches = [batch(name, e) for e in range(E)]
    X, Y, M = stack_inputs(batches, pad_of(name))
    logits = ens(X)
    sum(10 * loss_of(logits[e], Y[e], M[e]) for e in range(E)).backward()
    clip_gradients(ens, 0.5)
    for e, model in enumerate(standalone):
        model.train()
        x, y, mask = batches[e]
        (10 * loss_of(model(x), y, mask)).backward()
        norm = torch.nn.utils.clip_grad_norm_(list(model.parameters()), 0.5)
        assert norm > 0.5   # it clipped
        stacked = {n: p.grad[e] for n, p in zip(ens.names, ens.stacked)}
        for n, p in model.named_parameters():
            torch.testing.assert_close(stacked[n], p.grad, rtol=1e-4, atol=1e-6, msg=n)


def test_copies_that_differ_in_more_than_rate_decay_and_seed_are_refused_naming_it():
    from arithrepro.train.config import TrainConfig, shared

    a = TrainConfig(lr=1e-3, seed=0, weight_decay=0.1)
    assert shared([a, replace(a, lr=3e-3, seed=1, weight_decay=0.0)]) is a
    with pytest.raises(ValueError, match=r"copy 1: .* in grad_clip; copies may differ in seed, lr, weight_decay only"):
        shared([a, replace(a, grad_clip=1.0)])
