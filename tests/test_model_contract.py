"""The contract every model in the registry keeps, checked for each registered name at a tiny
size: output shapes; causal language models see the past and only the past, encoders let a
change travel; every parameter learns from a loss over all outputs; a model that declares
`decodes` gives the full forward's logits token by token from its `init_state`; a model that
declares `traces` returns one attention map per attention applied; parameter counts match
their formulas.

The checks are plain functions of (model, spec), so that a model registered anywhere (see
test_a_new_model_is_one_file_and_one_registry_line) is held to the same contract. Checks of one
model or one source's sizes live in that model's test file (test_models, test_length_models,
test_modular_models, test_charlm_models).
"""

from __future__ import annotations

import importlib
import math
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from arithrepro.models.lm import count_params
from arithrepro.models.registry import MODELS, Builder, ModelSpec, builder_module
from arithrepro.models.transformer import Attention
from tests import helpers

# What a task hands each form of model, shrunk. The sequences the checks feed are max_len long:
# learned positions (nanogpt, standard) get a gradient only at the positions a batch reaches.
DIMS, SIZES = helpers.CONTRACT_DIMS, helpers.CONTRACT_SIZES

# Parameter counts at those sizes. d = 8, L = 2 layers, V = 11 tokens (abacus: 13).
# A transformer block with d_sa = d and a biased MLP of width f:
#   q, k, v, o 4 (d^2 + d) = 288, two LayerNorms 2 * 2d = 32, MLP d f + f + f d + d; f = 16: 600.
COUNTS = {
    # embedding V d + L blocks + a bias-free head V d: 88 + 2 * 600 + 88
    "gpt": 1_376,
    # embedding V d + L source cells + head V d, a cell with long state F = d_ff = 16:
    # W d 4F + 4F = 576, U d 4F = 512, P F d + d = 136, Out F d + d = 136, h0 d, c0 F: 1,384
    # 88 + 2 * 1_384 + 88
    "lstm": 2_944,
    # per layer: attention 288, two LayerNorms 32, a source cell 1,384, h0 8 = 1,712
    # 88 + 2 * 1_712 + 88
    "retran": 3_600,
    # embedding 13 d + Abacus table (4 + 1) d + one block (shared by both recurrences) 600
    # + head with bias 13 d + 13, no final LayerNorm: 104 + 40 + 600 + 117
    "abacus": 861,
    # pair embedding (2 base) d + d, positions max_len d, L blocks, no final LayerNorm,
    # head d classes + classes: 88 + 64 + 1_200 + 45
    "standard": 1_397,
    # one block, the window's per-offset bias heads * 2, no positions: 88 + 600 + 4 + 16 + 45
    "looped": 753,
    # embedding + L (8 d^2 + 4 d) + head with bias V d + V: 88 + 2 * 544 + 99
    "lstm-std": 1_275,
    # embedding + L (12 d^2 + 8 d: biased attention, two LayerNorms, bias-free 4d MLP)
    # + final LayerNorm + head with bias; sinusoidal positions are fixed: 88 + 2 * 832 + 16 + 99
    "gpt-sin": 1_867,
    # embedding V e (e = 4) + Elman cells (W and U with biases: e d + d + d^2 + d, then
    # 2 (d^2 + d)) + head with bias: 44 + 112 + 144 + 99
    "rnn": 399,
    # embedding + bias-free GRU cells 3 (e d + d^2), then 3 (2 d^2) + head with bias:
    # 44 + 288 + 384 + 99
    "gru": 815,
    # embedding V d (the head is the same matrix) + positions max_len d + L (12 d^2 + 9 d:
    # bias-free attention, a 4d MLP with biases) + final LayerNorm: 88 + 96 + 2 * 840 + 16
    "nanogpt": 1_880,
}

LANGUAGE_MODELS = [n for n, s in MODELS.items() if s.causal]
ENCODERS = [n for n, s in MODELS.items() if not s.causal]
DECODERS = [n for n, s in MODELS.items() if s.decodes]
TRACERS = [n for n, s in MODELS.items() if s.traces]


# --- inputs ----------------------------------------------------------------------------------

def build(name: str, size: dict) -> nn.Module:
    """The registered model at `size` with its form's test dims, seeded, without dropout and in
    eval mode (the abacus positions then get no random offset), so its outputs depend on its
    input alone."""
    return helpers.build(name, size, dropout=0.0, **DIMS[MODELS[name].form]).eval()


def registered(name: str) -> nn.Module:
    if name not in SIZES:
        pytest.fail(f"{name}: no test size in SIZES")
    return build(name, SIZES[name])


def token_groups(form: str) -> list[list[int]]:
    """Tokens that may stand in for each other in a test input. <pad> is none of them: a model
    meets it only as trailing padding (no real output reads it, the recurrent cores skip it), and
    in the middle it would hold a recurrent state while decoding but not in a full forward.
    Abacus inputs keep digits apart from other tokens, so that digit runs keep their length."""
    d = DIMS[form]
    tokens = [t for t in range(d["vocab_size"]) if t != d["pad_id"]]
    if form == "digit-tokens":
        return [d["digit_ids"], [t for t in tokens if t not in d["digit_ids"]]]
    return [tokens]


def inputs(form: str, batch: int = 3, seed: int = 0) -> torch.Tensor:
    """A batch of max_len positions holding every token but <pad> (every digit in both operands
    for an encoder), so that every row of every embedding table is read: language models
    (batch, max_len) token ids, encoders (batch, max_len, 2) digit pairs."""
    d = DIMS[form]
    T = d["max_len"]
    g = torch.Generator().manual_seed(seed)
    if form == "pairs":
        base = d["base"]
        assert T >= base, "a row must hold every digit"
        x = torch.randint(0, base, (batch, T, 2), generator=g)
        x[0, :, 0] = torch.arange(T) % base
        x[0, :, 1] = torch.arange(T).flip(0) % base
        return x
    if form == "digit-tokens":
        # runs of eval_run digits (the table's last row) split by one other token, each row
        # starting elsewhere in the digits
        digits, others = token_groups(form)
        run = d["eval_run"]
        x = torch.empty(batch, T, dtype=torch.long)
        for b in range(batch):
            n_digits = n_others = 0
            for t in range(T):
                if (t + 1) % (run + 1):
                    x[b, t] = digits[(n_digits + 3 * b) % len(digits)]
                    n_digits += 1
                else:
                    x[b, t] = others[(n_others + b) % len(others)]
                    n_others += 1
        return x
    (tokens,) = token_groups(form)
    assert len(tokens) <= T, "a row must hold every token"
    x = torch.tensor(tokens)[torch.randint(0, len(tokens), (batch, T), generator=g)]
    x[0, :len(tokens)] = torch.tensor(tokens)
    return x


def changed_at(form: str, x: torch.Tensor, p: int) -> torch.Tensor:
    """x with position p of every row changed: another token of the same group, or the first
    digit of an encoder's pair plus one."""
    y = x.clone()
    if form == "pairs":
        y[:, p, 0] = (y[:, p, 0] + 1) % DIMS[form]["base"]
        return y
    for group in token_groups(form):
        for i, t in enumerate(group):
            y[:, p][x[:, p] == t] = group[(i + 1) % len(group)]
    assert (y[:, p] != x[:, p]).all()
    return y


def changes(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """(batch, positions): the largest change of any output at each position."""
    return (a - b).abs().amax(-1)


# An output that reads a change differs by more than this: float32 rounding at these outputs'
# magnitudes (below 1) is smaller, and the smallest real difference at these sizes is about
# 4e-6 (the GPT: its GPT-2 initialization makes attention weak). One that does not read it
# comes out bitwise the same.
CHANGED = 1e-7


# --- the checks ------------------------------------------------------------------------------

def check_shapes(model: nn.Module, spec: ModelSpec) -> None:
    """(batch, positions, classes or vocabulary) logits, all finite, at max_len positions and at
    fewer (tasks' batches are mostly shorter than a model's longest)."""
    d = DIMS[spec.form]
    classes = d["classes"] if spec.form == "pairs" else d["vocab_size"]
    x = inputs(spec.form)
    for T in (d["max_len"], d["max_len"] // 2 + 1):
        with torch.no_grad():
            out = model(x[:, :T])
        assert out.shape == (x.size(0), T, classes)
        assert torch.isfinite(out).all()


def check_causal(model: nn.Module, spec: ModelSpec) -> None:
    """A change at position p leaves every output before p as it was (nothing flows from the
    future) and changes the output at p and at every later position (the model reads its
    context: one that ignored it would change at p alone)."""
    x = inputs(spec.form)
    T = x.size(1)
    with torch.no_grad():
        out = model(x)
        for p in (1, T // 2, T - 1):
            new = model(changed_at(spec.form, x, p))
            torch.testing.assert_close(new[:, :p], out[:, :p], rtol=0, atol=1e-6)
            moved = changes(new, out)[:, p:]
            assert (moved > CHANGED).all(), f"a change at {p} does not reach: {moved}"


def check_encoder_reach(model: nn.Module, spec: ModelSpec) -> None:
    """An encoder classifies each position from more than that position: a change at position p
    changes the outputs at p and p + 1. (Not every position: the looped encoder moves a change
    one position per loop, shrinking it each time, and at these sizes it fades below float32's
    resolution within a few positions.)"""
    x = inputs(spec.form)
    p = x.size(1) // 2
    with torch.no_grad():
        moved = changes(model(changed_at(spec.form, x, p)), model(x))[:, p:p + 2]
    assert (moved > CHANGED).all(), f"a change at {p} does not reach {p} and {p + 1}: {moved}"


def check_gradients(model: nn.Module, spec: ModelSpec) -> None:
    """One backward of a cross-entropy over every output gives every parameter a gradient that
    is not all zeros, and every row of every embedding table one too. A row gets a gradient only
    if the batch reads it, so the batch reads them all (see inputs and DIMS): every token, every
    learned position (sequences are max_len long), every Abacus position (runs as long as the
    table, no random training offset in eval mode), every digit in both slots of an encoder's
    pairs. One row is exempt: <pad>'s token row, as the batch holds no <pad> (see token_groups)."""
    x = inputs(spec.form)
    g = torch.Generator().manual_seed(1)
    model.zero_grad(set_to_none=True)
    logits = model(x)
    targets = torch.randint(0, logits.size(-1), logits.shape[:-1], generator=g)
    F.cross_entropy(logits.flatten(0, -2), targets.flatten()).backward()
    params = dict(model.named_parameters())
    assert not [n for n, p in params.items() if p.grad is None], "parameters without gradient"
    zero = [n for n, p in params.items() if not p.grad.any()]
    assert not zero, f"parameters whose gradient is all zeros: {zero}"
    for name, module in model.named_modules():
        if not isinstance(module, nn.Embedding):
            continue
        unread = (module.weight.grad == 0).all(1).nonzero().flatten().tolist()
        if module is getattr(model, "embed", None) and spec.form != "pairs":
            unread = [t for t in unread if t != DIMS[spec.form]["pad_id"]]
        assert not unread, f"{name}: rows {unread} get no gradient"


def check_decoding(model: nn.Module, spec: ModelSpec) -> None:
    """Declared `decodes`: from init_state, a prompt in one call then one token per call gives
    the full forward's logits. The state is made for more positions than the sequence fills, as
    greedy decoding makes it for the longest prompt plus the answer."""
    assert callable(getattr(model, "init_state", None)), "declares decodes but has no init_state"
    x = inputs(spec.form)
    B, T = x.shape
    with torch.no_grad():
        full = model(x)
        state = model.init_state(B, T + 4)
        first, state = model(x[:, :3], state, 0)
        steps = [first] + [model(x[:, t:t + 1], state, t)[0] for t in range(3, T)]
    torch.testing.assert_close(torch.cat(steps, 1), full, rtol=1e-5, atol=1e-5)


def check_trace(model: nn.Module, spec: ModelSpec) -> None:
    """Declared `traces`: trace() returns the forward's logits, and one causal attention map
    (batch, heads, T, T) per attention the forward applies (every layer, every recurrence), each
    with its attention's heads, with the hidden state (batch, T, d) before and after each."""
    x = inputs(spec.form)
    B, T = x.shape
    applied = []  # the heads of each attention applied, in order
    hooks = [m.register_forward_hook(lambda m, *_: applied.append(m.heads))
             for m in model.modules() if isinstance(m, Attention)]
    with torch.no_grad():
        out = model(x)
    for h in hooks:
        h.remove()
    trace = model.trace(x)
    assert {"logits", "hidden", "attention"} <= set(trace)
    torch.testing.assert_close(trace["logits"], out, rtol=1e-5, atol=1e-5)
    assert len(trace["attention"]) == len(applied) > 0
    assert len(trace["hidden"]) == len(applied) + 1
    d = model.head.in_features
    assert all(h.shape == (B, T, d) for h in trace["hidden"])
    for w, heads in zip(trace["attention"], applied):
        assert w.shape == (B, heads, T, T)
        torch.testing.assert_close(w.sum(-1), torch.ones(w.shape[:-1]))
        assert (w.triu(1) == 0).all()


def check_contract(name: str, size: dict, expected_params: int) -> None:
    """Every check that applies to the registered model's form and capabilities."""
    spec = MODELS[name]
    model = build(name, size)
    assert count_params(model) == expected_params
    check_shapes(model, spec)
    if spec.causal:
        check_causal(model, spec)
    else:
        check_encoder_reach(model, spec)
    if spec.decodes:
        check_decoding(model, spec)
    if spec.traces:
        check_trace(model, spec)
    check_gradients(model, spec)


# --- the registry, model by model ------------------------------------------------------------

def test_every_registered_model_has_a_test_size_and_a_count():
    """A new model needs its test size and parameter count here (and a removed one leaves)."""
    assert set(SIZES) == set(MODELS), "SIZES must name exactly the registered models"
    assert set(COUNTS) == set(MODELS), "COUNTS must name exactly the registered models"


@pytest.mark.parametrize("name", MODELS)
def test_parameter_count(name):
    assert count_params(registered(name)) == COUNTS[name]


@pytest.mark.parametrize("name", MODELS)
def test_output_shapes(name):
    check_shapes(registered(name), MODELS[name])


@pytest.mark.parametrize("name", MODELS)
def test_the_loop_reads_what_the_model_does(name):
    """fit reads a model's capabilities from its registry entry: one declared to prune the
    outputs before `outputs_from` has a core that does, and only such a one."""
    core = registered(name).core
    assert MODELS[name].prunes_outputs == getattr(core, "prunes_outputs", False)


@pytest.mark.parametrize("name", LANGUAGE_MODELS)
def test_language_models_see_the_past_and_only_the_past(name):
    check_causal(registered(name), MODELS[name])


@pytest.mark.parametrize("name", ENCODERS)
def test_encoders_carry_a_change_beyond_its_position(name):
    check_encoder_reach(registered(name), MODELS[name])


@pytest.mark.parametrize("name", MODELS)
def test_every_parameter_gets_a_nonzero_gradient(name):
    check_gradients(registered(name), MODELS[name])


@pytest.mark.parametrize("name", DECODERS)
def test_decoding_step_by_step_equals_the_full_forward(name):
    check_decoding(registered(name), MODELS[name])


@pytest.mark.parametrize("name", TRACERS)
def test_trace_returns_attention_of_every_layer(name):
    check_trace(registered(name), MODELS[name])


# --- a new model -----------------------------------------------------------------------------

TOY_MODULE = '''
"""A toy language model: token embedding -> GRU layers -> head."""

import torch
from torch import nn

from arithrepro.models.lm import LanguageModel


class GRUCore(nn.Module):
    def __init__(self, d_model, layers):
        super().__init__()
        self.gru = nn.GRU(d_model, d_model, layers, batch_first=True)

    def forward(self, h, keep=None, state=None, pos=0):
        out, last = self.gru(h, None if state is None else state[0])
        if state is not None:
            state[0] = last  # decoding: the state advances in place
        return out, state

    def init_state(self, batch, max_len, device=None, dtype=None):
        shape = (self.gru.num_layers, batch, self.gru.hidden_size)
        return [torch.zeros(shape, device=device, dtype=dtype)]


def build(size, *, dropout, vocab_size, max_len, pad_id):
    d = size["d_model"]
    return LanguageModel(GRUCore(d, size["layers"]), vocab_size, d, pad_id)
'''

TOY_SIZE = {"d_model": 8, "layers": 2}
# embedding V d + per layer torch.nn.GRU's 3d x d input and hidden weights and two 3d biases
# (6 d^2 + 6 d = 432) + bias-free head V d: 88 + 2 * 432 + 88
TOY_COUNT = 1_040


def test_a_new_model_is_one_file_and_one_registry_line(tmp_path, monkeypatch, params, tiny_expr):
    """A model module written anywhere and one registry line: params accept it as an expr model,
    it keeps the contract, and the expr task trains, saves, loads and scores it through the
    stages' own code."""
    from arithrepro import config
    from arithrepro.io import save_torch
    from arithrepro.models.registry import build_model, load_model
    from arithrepro.schema import ParamsError
    from arithrepro.runner import configure
    from arithrepro.runs import Placement, Run
    from arithrepro.tasks.registry import TASKS
    from arithrepro.train.loop import fit

    (tmp_path / "toy_lm.py").write_text(textwrap.dedent(TOY_MODULE))
    monkeypatch.syspath_prepend(str(tmp_path))
    toy = importlib.import_module("toy_lm")
    monkeypatch.setitem(sys.modules, "toy_lm", toy)  # forgotten after the test

    # params: the expr grid names it; models.toy gives its lr, dropout and a size for each size
    # the expr grid names
    tiny = {"d_model": 8, "layers": 1}
    for p in (params, tiny_expr[0]):
        p["expr"]["models"].append("toy")
        p["models"]["toy"] = {"lr": 0.01, "dropout": 0.0, "micro_batches": 1,
                              "sizes": {s: tiny for s in ("small", "medium", "large")}}
        p["bench"]["sizes"]["toy"] = "small"
    with pytest.raises(ParamsError, match=r"models\.toy: unknown key"):  # not a model yet
        config.validate(params)

    # the one registry line
    monkeypatch.setitem(MODELS, "toy", ModelSpec(toy.build, "tokens", ("d_model", "layers")))

    config.validate(params)
    from arithrepro.lookup import find

    name = f"toy-small-{params['expr']['seeds'][0]}"
    assert find(TASKS["expr"], params, name).name == name

    # the benchmark: its cells on every task whose form it takes (the abacus task's tokens, the
    # looped task's pairs through the adapter), as stages of dvc.yaml
    from arithrepro import bench, pipeline

    assert [t for t, m in bench.pairs() if m == "toy"] == ["abacus", "looped"]
    params["bench"]["seeds"] = [0]
    assert [s.files.dir.as_posix() for s in bench.runs(TASKS["looped"], params) if s.model == "toy"] \
        == ["runs/looped/bench/toy-small-0"]
    dvc_yaml = pipeline.as_yaml()
    for stage in ("train-bench-abacus-toy:", "evaluate-bench-looped-toy:"):
        assert f"\n  {stage}\n" in dvc_yaml

    # the contract
    check_contract("toy", TOY_SIZE, TOY_COUNT)

    # the expr task, as the train and evaluate stages run a cell
    params, data_dir = tiny_expr
    task = TASKS["expr"]
    arch, cfg = configure(task.config(params, "toy", "small", seeds=(0,)).runs[0],
                          Placement("cpu", "fp32", False))
    assert arch["size"] == tiny and arch["dims"] == task.dims(params)
    batches = task.train_batches(params, data_dir, 0, "cpu")
    valid = task.valid_set(params, data_dir, "cpu")
    torch.manual_seed(0)
    net = build_model("toy", arch["size"], dropout=arch["dropout"], **arch["dims"])
    result = fit(net, batches, valid, cfg, tmp_path / "checkpoint.pt", "toy", progress=False)
    assert result["steps"] == batches.steps > 0
    assert math.isfinite(result["best_val_loss"])
    save_torch(tmp_path / "model.pt", {**arch, "state_dict": net.state_dict()})
    loaded, saved = load_model(tmp_path / "model.pt")  # built again from the registry
    assert saved["model"] == "toy" and type(loaded.core).__name__ == "GRUCore"
    for (k, a), b in zip(net.state_dict().items(), loaded.state_dict().values()):
        assert torch.equal(a, b), k
    metrics, rows = task.evaluate(loaded.eval(), params, data_dir, "cpu")
    assert 0 <= metrics["test_acc"] <= 1 and 0 <= metrics["ood_acc"] <= 1
    assert {r["split"] for r in rows} == {"test", "ood"}


@pytest.mark.parametrize("change,message", [
    ({"cost": "", "gates": 0}, "charlm prices its models, but gru declares no cost formula"),
    ({"sizes": "models"}, "charlm builds gru, a tokens model sized by models; it offers tokens "
                          "and takes models sized by the run"),
    ({"decodes": False}, "charlm decodes token by token, but model gru declares decodes=False"),
])
def test_a_task_refuses_a_model_that_lacks_what_it_needs(monkeypatch, change, message):
    """The registry names no task: a model declares where its sizes come from and what it can
    do, and the task registry checks each task's models against what the task needs."""
    from dataclasses import replace

    from arithrepro.tasks import registry

    monkeypatch.setitem(MODELS, "gru", replace(MODELS["gru"], **change))
    with pytest.raises(TypeError, match=f"task registry: {message}"):
        registry._check()


@pytest.mark.parametrize("budget_from", ["expr.model", "abacus.train", "nowhere.model"])
def test_a_borrowed_width_names_a_block_that_sets_it(monkeypatch, budget_from):
    """A model that borrows fields from a task's budget names the block in its own registry line
    (no task is searched for it); a block that does not declare those fields is refused."""
    from dataclasses import replace

    from arithrepro.tasks import registry

    monkeypatch.setitem(MODELS, "abacus", replace(MODELS["abacus"], budget_from=budget_from))
    with pytest.raises(TypeError, match=f"task registry: abacus borrows d_model, d_ff, heads, "
                                        f"offset_k from {budget_from}, which no grid task"):
        registry._check()
    with pytest.raises(TypeError, match="budget fields need the block that sets them"):
        replace(MODELS["abacus"], budget_from="").check("abacus")


def test_the_model_registry_names_no_task():
    import dataclasses

    assert "task" not in {f.name for f in dataclasses.fields(ModelSpec)}
    assert {s.sizes for s in MODELS.values()} == {"models", "run"}


def test_every_builder_names_a_function_of_a_model_module():
    """The table names its builders (imported on first use), so a misspelt one would fail only
    when a stage builds that model: here it fails at once."""
    for name, spec in MODELS.items():
        module = importlib.import_module(builder_module(spec.build))
        assert module.__name__.startswith("arithrepro.models."), name
        if isinstance(spec.build, Builder):
            assert callable(getattr(module, spec.build.function, None)), f"{name}: {spec.build}"


def test_reading_the_params_imports_no_torch():
    """Every command checks the params against the registries; only a command that builds a
    model should pay for importing torch (3 s of CPU per process)."""
    import subprocess

    code = ("import sys; from arithrepro import config; config.load('params.yaml'); "
            "config.compose(['profile=smoke'], 'conf'); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch'))")
    out = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[1],
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout[:500]

