"""The training package's shape: fit reads on a screen, no module grows past what a reader
holds, the loop and the ensemble ask models what they declare (models/hooks.py) and never probe
an attribute by its name, and the modes table refuses before anything trains."""

import ast
import inspect
from pathlib import Path

import pytest
import torch

import arithrepro.stacking
import arithrepro.train
from arithrepro.train.config import TrainConfig
from arithrepro.train.loop import fit
from arithrepro.train.parts import Parts
from arithrepro.train.step import Step
from arithrepro.train import modes

TRAIN = Path(arithrepro.train.__file__).parent


def test_fit_fits_on_a_screen():
    assert len(inspect.getsource(fit).splitlines()) <= 60


@pytest.mark.parametrize("path", sorted(TRAIN.glob("*.py")), ids=lambda p: p.name)
def test_no_module_of_the_loop_is_long(path):
    assert len(path.read_text().splitlines()) <= 250, path.name


@pytest.mark.parametrize("path", [*sorted(TRAIN.glob("*.py")), Path(arithrepro.stacking.__file__)],
                         ids=lambda p: p.name)
def test_nothing_probes_a_model_by_attribute_name(path):
    calls = [n.func.id for n in ast.walk(ast.parse(path.read_text()))
             if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)]
    assert "hasattr" not in calls, path.name
    # getattr only for the observers' hooks (observers.Observer declares every one)
    probes = [n for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Call)
              and isinstance(n.func, ast.Name) and n.func.id == "getattr"
              and not (isinstance(n.args[0], ast.Name) and n.args[0].id == "o")
              and not (isinstance(n.args[0], ast.Name) and n.args[0].id == "self")]
    assert probes == [], path.name


def _modes(**over):
    base = dict(stacked=False, device="cpu", world=1, precision="fp32", graphs=False,
                micro_batches=1, plain_loss=True, causal=True)
    return modes.Modes(**{**base, **over})


@pytest.mark.parametrize("over, words", [
    ({"micro_batches": 2, "causal": False}, "needs a causal model"),
    ({"micro_batches": 2, "plain_loss": False}, "the plain loss"),
    ({"micro_batches": 2, "stacked": True}, "an ensemble's copies run whole"),
    ({"precision": "fp16", "stacked": True}, "an ensemble trains in fp32 or bf16"),
    ({"graphs": True, "world": 2}, "graphs: one process"),
    ({"graphs": True, "precision": "fp16"}, "graphs: fp16"),
    ({"graphs": True, "micro_batches": 2}, "graphs: micro_batches"),
])
def test_each_refused_combination_names_itself_in_one_line(over, words):
    with pytest.raises(ValueError, match=words) as err:
        modes.check(_modes(**over))
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("over", [
    {}, {"precision": "bf16"}, {"precision": "fp16"}, {"micro_batches": 4},
    {"stacked": True, "precision": "bf16"}, {"graphs": True, "precision": "bf16"},
    {"micro_batches": 4, "device": "cuda", "stacked": True},  # a GPU runs batches whole
    {"graphs": True, "stacked": True}, {"world": 4, "micro_batches": 2},
])
def test_the_combinations_the_loop_runs_pass(over):
    modes.check(_modes(**over))


def test_a_refused_combination_trains_nothing(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(5, 4), torch.nn.Linear(4, 5))
    before = [p.detach().clone() for p in model.parameters()]
    cfg = TrainConfig(lr=1e-2, seed=0, optimizer="adam", graphs=True, precision="fp16")
    with pytest.raises(ValueError, match="graphs: fp16"):
        Step(Parts.of(model, cfg, 10, 1), cfg, 0, 1)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
