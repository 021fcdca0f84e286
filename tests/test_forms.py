"""Tasks and models meet through forms (arithrepro/models/forms.py): which pairs meet, how the
pairs adapter turns a token model into a per-position classifier, and that an adapted or
cross-task model trains, saves, loads and is scored through the stages' own code."""

from __future__ import annotations

import pytest
import torch

from arithrepro.models.forms import ADAPTERS, FORMS, meeting
from arithrepro.models.pairs import PairsAsTokens
from arithrepro.models.registry import MODELS, build_model, load_model, spec_of
from arithrepro.schema import ParamsError
from arithrepro.tasks.base import form_for
from arithrepro.tasks.registry import GRID_TASKS, TASKS, cross_models, models_of
from tests.helpers import CONTRACT_SIZES

TOKEN_MODELS = ["gpt", "lstm", "retran", "abacus"]
PAIRS = {"base": 5, "classes": 5, "max_len": 9}


def test_which_grid_models_meet_which_task():
    """A task's own grid trains the models of its first form; every other grid model that takes
    one of its forms, directly or through the adapter, is the benchmark's; the encoders, which
    see both ways, meet no token task."""
    assert models_of(TASKS["expr"]) == ["gpt", "lstm", "retran"]
    assert cross_models(TASKS["expr"]) == ["abacus"]
    assert models_of(TASKS["abacus"]) == ["abacus"]
    assert cross_models(TASKS["abacus"]) == ["gpt", "lstm", "retran"]
    assert models_of(TASKS["looped"]) == ["standard", "looped"]
    assert cross_models(TASKS["looped"]) == TOKEN_MODELS
    for name in TOKEN_MODELS:
        form, adapter = meeting(MODELS[name], TASKS["looped"].forms)
        assert form == "pairs" and adapter is ADAPTERS[(MODELS[name].form, "pairs")]
    assert meeting(MODELS["abacus"], TASKS["expr"].forms) == ("digit-tokens", None)
    assert meeting(MODELS["gpt"], TASKS["abacus"].forms) == ("tokens", None)


def test_every_task_offers_the_dims_of_its_forms(params):
    for task in GRID_TASKS.values():
        dims = task.dims(params)
        for form in task.forms:
            assert set(FORMS[form].dims) <= set(dims), (task.name, form)


@pytest.mark.parametrize("task,model,message", [
    ("expr", "looped", "expr.models: model looped takes pairs (aligned digit pairs, a class per "
                       "position); task expr offers tokens / digit-tokens, and no adapter"),
    ("abacus", "standard", "abacus.models: model standard takes pairs"),
    ("abacus", "gpt", "abacus.models: gpt takes tokens, not abacus's own form (digit-tokens); "
                      "the benchmark trains it on abacus"),
])
def test_a_pair_outside_a_tasks_own_grid_is_refused_in_one_line(params, task, model, message):
    from arithrepro import config

    params[task]["models"] = [model]
    with pytest.raises(ParamsError) as err:
        config.validate(params)
    assert "\n" not in str(err.value) and str(err.value).startswith(message)


@pytest.mark.parametrize("task,model", [("expr", "looped"), ("abacus", "standard")])
def test_a_model_that_cannot_take_a_tasks_samples_is_not_built_for_it(task, model):
    with pytest.raises(TypeError, match=f"model {model} takes pairs.*task {task} offers"):
        form_for(TASKS[task], model)


def test_a_model_that_sees_both_ways_gets_no_token_adapter(monkeypatch):
    from dataclasses import replace

    monkeypatch.setitem(MODELS, "gpt", replace(MODELS["gpt"], causal=False, form="pairs",
                                               traces=False, prunes_outputs=False))
    assert meeting(MODELS["gpt"], ("tokens",)) is None


@pytest.mark.parametrize("name", TOKEN_MODELS)
def test_pairs_adapter_classifies_each_position_from_the_pairs_up_to_it(name):
    torch.manual_seed(0)
    net = build_model(name, CONTRACT_SIZES[name], dropout=0.0, form="pairs", **PAIRS).eval()
    g = torch.Generator().manual_seed(1)
    x = torch.randint(0, 5, (3, 9, 2), generator=g)
    out = net(x)
    assert out.shape == (3, 9, 5)
    for p in (0, 4, 8):
        y = x.clone()
        y[:, p, 1] = (y[:, p, 1] + 1) % 5
        changed = (net(y) - out).abs().amax(dim=(0, 2))
        assert torch.all(changed[:p] == 0), f"{name}: a change at {p} reached an earlier position"
        assert changed[p] > 0, f"{name}: position {p} ignores its own pair"


@pytest.mark.parametrize("name", TOKEN_MODELS)
def test_pairs_adapter_keeps_the_models_own_head_rows_and_parameters(name):
    """The adapted head is the first `classes` rows of the head the model's builder drew, and
    every other weight is the model's: the same seed gives the same numbers."""
    torch.manual_seed(0)
    plain = build_model(name, CONTRACT_SIZES[name], dropout=0.0, vocab_size=26, max_len=9,
                        pad_id=25, digit_ids=list(range(25)), train_run=9, eval_run=9)
    torch.manual_seed(0)
    adapted = build_model(name, CONTRACT_SIZES[name], dropout=0.0, form="pairs", **PAIRS)
    assert isinstance(adapted, PairsAsTokens)
    state = adapted.model.state_dict()
    for key, value in plain.state_dict().items():
        expected = value[:5] if key.startswith("head.") else value
        assert torch.equal(state[key], expected), key
    head = plain.head.weight.numel() + (plain.head.bias.numel() if plain.head.bias is not None else 0)
    cut = adapted.model.head.weight.numel() + (5 if plain.head.bias is not None else 0)
    assert (sum(p.numel() for p in plain.parameters()) - head + cut
            == sum(p.numel() for p in adapted.parameters()))


def test_adapted_spec_is_what_the_loop_and_tasks_read():
    spec = spec_of({"model": "gpt", "form": "pairs"})
    assert (spec.form, spec.causal, spec.prunes_outputs, spec.decodes, spec.traces) == \
        ("pairs", False, False, False, False)
    assert spec_of({"model": "gpt"}) is MODELS["gpt"]
    assert spec_of({"model": "gpt", "form": "tokens"}) is MODELS["gpt"]


def test_unknown_adapter_is_refused():
    with pytest.raises(TypeError, match="model standard takes pairs; no adapter gives it tokens"):
        build_model("standard", {"d_model": 8, "d_ff": 16, "layers": 1, "heads": 2},
                    dropout=0.0, form="tokens", vocab_size=5, max_len=8, pad_id=4)


def _train_and_score(task, params, data_dir, model, tmp_path):
    """A cell as the train and evaluate stages run it: built by the task, trained, saved,
    loaded from the registry, scored."""
    from arithrepro import bench
    from arithrepro.io import save_torch
    from arithrepro.runner import build
    from arithrepro.runs import Placement
    from arithrepro.train.loop import fit

    (run,) = [r for r in bench.runs(task, params) if r.model == model]
    built = build(task, run, params, Placement("cpu", "fp32", False))
    result = fit(built.net, built.data.batches, built.data.valid, built.cfg, tmp_path / "ck.pt", "fp",
                 progress=False, spec=spec_of(built.arch))
    assert result["steps"] == built.data.batches.steps > 0
    save_torch(tmp_path / "model.pt", {**built.arch, "state_dict": built.net.state_dict()})
    loaded, saved = load_model(tmp_path / "model.pt")
    assert type(loaded) is type(built.net) and saved["form"] == built.arch["form"]
    for (k, a), b in zip(built.net.state_dict().items(), loaded.state_dict().values()):
        assert torch.equal(a, b), k
    metrics, rows = task.evaluate(loaded.eval(), params, data_dir, "cpu")
    return built, metrics, rows


@pytest.mark.parametrize("task,model", [("looped", "lstm"), ("abacus", "gpt"), ("abacus", "retran")])
def test_a_token_model_trains_and_is_scored_on_a_streamed_task(tmp_path, smoke_params,
                                                               monkeypatch, task, model):
    """An LSTM on aligned pairs through the adapter, scored at every length; a GPT and ReTran
    on the abacus task's tokens, trained with the plain loss (the progressive one exits a looped
    block early, and they have none) and scored at their own depth."""
    from arithrepro import config

    monkeypatch.chdir(tmp_path)
    p = smoke_params
    p["bench"]["seeds"] = [0]
    p["models"][model]["sizes"]["small"] = CONTRACT_SIZES[model]
    config.validate(p)
    data = tmp_path / "data" / task
    TASKS[task].generate(p, data)
    built, metrics, rows = _train_and_score(TASKS[task], p, data, model, tmp_path)
    assert 0 <= metrics["id_acc"] <= 1 and 0 <= metrics["ood_acc"] <= 1
    if task == "looped":
        assert built.arch["form"] == "pairs" and isinstance(built.net, PairsAsTokens)
        assert {r["digits"] for r in rows} == set(p["looped"]["data"]["eval_digits"])
    else:
        assert built.arch["form"] == "tokens" and p["abacus"]["train"]["progressive"]
        assert not built.cfg.progressive
        assert {r["recurrences"] for r in rows} == {1} and metrics["recurrences"] == 1


def test_abacus_positions_train_and_decode_on_expressions(tmp_path, tiny_expr, monkeypatch):
    """The Abacus decoder on expr: its digit-tokens form, its width from abacus.model."""
    monkeypatch.chdir(tmp_path)
    params, data_dir = tiny_expr
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "expr").symlink_to(data_dir)  # where the task's cells read it
    params["bench"]["seeds"] = [0]
    params["models"]["abacus"]["sizes"]["l2r2"] = {"block_layers": 1, "recurrences": 2}
    params["abacus"]["model"].update(d_model=8, d_ff=16, heads=2)
    from arithrepro import config

    config.validate(params)
    built, metrics, rows = _train_and_score(TASKS["expr"], params, data_dir, "abacus", tmp_path)
    assert built.arch["form"] == "digit-tokens"
    assert built.arch["size"]["d_model"] == 8 and built.arch["size"]["offset_k"] == \
        params["abacus"]["model"]["offset_k"]
    assert 0 <= metrics["test_acc"] <= 1 and {r["split"] for r in rows} == {"test", "ood"}
