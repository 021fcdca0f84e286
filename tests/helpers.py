"""Helpers several test modules share: building any registered model the way its task does,
the expr grid's language models at the source's sizes and their parameter counts, small expr
splits, a short training run on them, and brute-force decoding.

They are plain functions rather than fixtures because they are called with different arguments
several times in one test, inside worker processes (test_ddp spawns workers that train), and at
import time (parametrize lists). Fixtures (tests/conftest.py) hold what a test only sets up.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from arithrepro.models.registry import MODELS
from arithrepro.tasks.expr import TASK, Split, encode
from arithrepro.observers import Observer
from arithrepro.batches import EpochBatches

# The expr grid's language models and the source's sizes for them, as the fields
from arithrepro.train.loop import fit
# (d_model, d_ff, d_sa, layers, heads) or (d_model, d_ff, layers) in the source's order.
LM_NAMES = ["gpt", "lstm", "retran"]
SIZES = {
    "gpt": {"small": (32, 128, 32, 3, 8), "medium": (64, 256, 64, 4, 8), "large": (128, 512, 128, 6, 8)},
    "retran": {"small": (16, 64, 16, 3, 8), "medium": (32, 128, 32, 4, 8), "large": (64, 256, 64, 6, 8)},
    "lstm": {"small": (16, 64, 3), "medium": (32, 128, 4), "large": (64, 256, 6)},
}
# The source's parameter counts at those sizes (untied embeddings, the expr vocabulary).
EXPECTED = {
    ("gpt", "small"): 39_328, ("gpt", "medium"): 202_368, ("gpt", "large"): 1_194_496,
    ("retran", "small"): 35_936, ("retran", "medium"): 185_536, ("retran", "large"): 1_096_064,
    ("lstm", "small"): 32_432, ("lstm", "medium"): 168_000, ("lstm", "large"): 994_304,
}
VOCAB_SIZE, PAD = 19, 3  # the expr vocabulary and its <pad>

# The dims each model's task hands it, as the model tests build it: the expr vocabulary; the
# abacus vocabulary (digits 0-9 first, padded with the end token "$" as the source does) with
# the source's digit runs; the looped task's digit pairs at the notebook's 100 positions; the
# modular vocabulary (<pad> last); the charlm vocabulary at which the source quotes its counts, at
# block size 100 (no padding).
DIMS = {
    **dict.fromkeys(LM_NAMES, {"vocab_size": VOCAB_SIZE, "max_len": 48, "pad_id": PAD}),
    "abacus": {"vocab_size": 15, "max_len": 64, "pad_id": 14, "digit_ids": list(range(10)),
               "train_run": 6, "eval_run": 12},
    **dict.fromkeys(["standard", "looped"], {"base": 10, "classes": 10, "max_len": 100}),
    **dict.fromkeys(["lstm-std", "gpt-sin"], {"vocab_size": 36, "max_len": 8, "pad_id": 35}),
    **dict.fromkeys(["rnn", "gru", "nanogpt"], {"vocab_size": 92, "max_len": 100, "pad_id": -1}),
}


def build(name, size="small", dropout=0.0, seed=0, **dims):
    """The registered model `name`, seeded by `seed` (two calls give the same weights), at
    `size`: one of the source's sizes in SIZES, or a dict of the model's size fields. Its dims are DIMS[name]
    with any of them replaced by `dims` (a model registered only for a test passes them all).
    Without dropout unless asked, so that outputs depend on the input alone in training mode too;
    training runs (`run`) pass the source's 0.1."""
    spec = MODELS[name]
    if isinstance(size, str):
        size = dict(zip(spec.size_fields, SIZES[name][size]))
    torch.manual_seed(seed)
    return spec.build(size, dropout=dropout, **{**DIMS.get(name, {}), **dims})


def split_of(pairs, width=38):
    """An expr Split of (problem, answer) pairs."""
    ids = encode([p for p, _ in pairs], [a for _, a in pairs], width)
    lengths = torch.tensor([len(p) for p, _ in pairs])
    return Split(torch.from_numpy(ids.astype(np.int64)), lengths + 1, lengths)


def tiny_splits(n_train=96, n_valid=16):
    """Two-operand additions a + b (a, b < 100): a training and a validation split."""
    g = torch.Generator().manual_seed(0)
    pairs = []
    for i in range(n_train + n_valid):
        a, b = torch.randint(0, 100, (2,), generator=g).tolist()
        pairs.append((f"{a}+{b}", str(a + b)))
    return split_of(pairs[:n_train]), split_of(pairs[n_train:])


def sources(cfg, batch_size, epochs):
    """The training batches and the validation set of the tiny splits, as `fit` takes them."""
    train, valid = tiny_splits()
    batches = EpochBatches(lambda idx: TASK.batch(train, idx), len(train), batch_size, epochs,
                           cfg.seed, "cpu")
    return batches, (lambda idx: TASK.batch(valid, idx), len(valid))


class Halted(Exception):
    pass


class Halt(Observer):
    """Stops the run after a step, as if its process were killed there."""

    def __init__(self, after: int):
        self.after = after

    def step(self, state):
        if state.step >= self.after:
            raise Halted


def run(tmp_path, name, cfg, halt_after=None, model=None, batch_size=16, epochs=2, fp="fp",
        dropout=0.1, series=None):
    """Train `model` (default: `name` at its small size) on the tiny splits, checkpointing to
    tmp_path/checkpoint.pt. Returns (model, fit's result); the result is None when the run
    was halted after step `halt_after`."""
    batches, valid = sources(cfg, batch_size, epochs)
    torch.manual_seed(cfg.seed)
    model = model or build(name, "small", dropout=dropout)
    halt = (Halt(halt_after),) if halt_after is not None else ()
    try:
        result = fit(model, batches, valid, cfg, tmp_path / "checkpoint.pt", fp,
                     spec=MODELS.get(name), progress=False, series=series, observers=halt)
    except Halted:
        result = None
    return model, result


def brute_force(model, prompt: torch.Tensor, max_new: int, stop: int) -> list[int]:
    """Greedy decoding that recomputes the whole forward pass for every new token of a single
    sample (no cache): the reference for cached decoding."""
    seq = prompt.tolist()
    out = []
    for _ in range(max_new):
        with torch.no_grad():
            nxt = int(model(torch.tensor([seq]))[0, -1].argmax())
        out.append(nxt)
        seq.append(nxt)
        if nxt == stop:
            break
    return out + [stop] * (max_new - len(out))


def overridden(block: dict, over: dict) -> dict:
    """block with over's keys replacing its own, mappings merged key by key and lists replaced:
    what a profile file or `-S key=value` does to a block when params.yaml is composed."""
    import copy

    out = copy.deepcopy(block)
    for k, v in over.items():
        out[k] = overridden(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) \
            else copy.deepcopy(v)
    return out


# The registered models' test shapes (tests/test_model_contract.py checks every model at them).
CONTRACT_DIMS = {
    "tokens": {"vocab_size": 11, "max_len": 12, "pad_id": 10},
    # Digits 0-9, then two other tokens and <pad>. eval_run (4) >= offset_k - 1 + train_run
    # (2 - 1 + 3): the Abacus table has eval_run + 1 rows (row 0: not a digit), and runs of
    # eval_run digits reach every row.
    "digit-tokens": {"vocab_size": 13, "max_len": 12, "pad_id": 12, "digit_ids": list(range(10)),
                  "train_run": 3, "eval_run": 4},
    "pairs": {"base": 5, "classes": 5, "max_len": 8},
}

# Each registered model at its test size: width d = 8 throughout.
CONTRACT_SIZES = {
    "gpt": {"d_model": 8, "d_ff": 16, "d_sa": 8, "layers": 2, "heads": 2},
    "lstm": {"d_model": 8, "d_ff": 16, "layers": 2},
    "retran": {"d_model": 8, "d_ff": 16, "d_sa": 8, "layers": 2, "heads": 2},
    "abacus": {"block_layers": 1, "recurrences": 2, "d_model": 8, "d_ff": 16, "heads": 2,
               "offset_k": 2},
    "standard": {"d_model": 8, "d_ff": 16, "layers": 2, "heads": 2},
    "looped": {"d_model": 8, "d_ff": 16, "heads": 2, "loop_offset": 1},
    "lstm-std": {"d_model": 8, "layers": 2},
    "gpt-sin": {"d_model": 8, "layers": 2, "heads": 2},
    "rnn": {"d_embed": 4, "d_model": 8, "layers": 2},
    "gru": {"d_embed": 4, "d_model": 8, "layers": 2},
    "nanogpt": {"d_model": 8, "layers": 2, "heads": 2},
}


# --- stages on a tiny workspace (smoke profile) ----------------------------------------------
# (the workspace itself, looped's data and one trained cell: the `trained` and `ws` fixtures)

LOOPED = ["--task", "looped", "standard-notebook-0"]
TRAIN_LOOPED = ["--task", "looped", "standard-notebook-0"]
RUN_DIR = Path("runs/looped/standard-notebook-0")


def write_params(dest: Path, **blocks) -> None:
    """The smoke profile's params in `dest`, each task block updated with `blocks[task]`."""
    import yaml

    from arithrepro import config

    params = config.compose(["profile=smoke"], Path(__file__).resolve().parents[1] / "conf")
    for task, over in blocks.items():
        params[task].update(over)
    params["charlm"]["models"] = ["rnn"]
    (dest / "params.yaml").write_text(yaml.safe_dump(params, allow_unicode=True))


def cli(*args):
    """`arithrepro ARGS` in this process (click's test runner)."""
    from click.testing import CliRunner

    from arithrepro.cli import main

    return CliRunner().invoke(main, list(args))


def ok(*args):
    result = cli(*args)
    assert result.exit_code == 0, result.output
    return result


def work_in_copy(src: Path, tmp_path: Path, monkeypatch) -> Path:
    """A per-test copy of a module's workspace, made the working directory."""
    import shutil

    dest = tmp_path / "ws"
    shutil.copytree(src, dest)
    monkeypatch.chdir(dest)
    return dest
