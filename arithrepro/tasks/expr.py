"""expr: arithmetic expressions from the ReTran paper's grammar (docs/expr.md).

A sample is `<start> problem = answer <stop> <pad>...`; the loss covers the answer and <stop>.
Files under data/expr/: {train,valid,test,ood}.parquet (problem, answer, length),
lengths.csv (the length distribution) and meta.json (widths and counts).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from arithrepro.schema import ParamsError, choice, integer
from arithrepro.tasks.base import GridTask, train_schema
from arithrepro.tasks.declared import Report, Stages, Takes

VOCAB = ["<start>", "=", "<stop>", "<pad>", *"0123456789", "-", "+", "*", "(", ")"]
START, EQ, STOP, PAD = 0, 1, 2, 3
SPLITS = ("train", "valid", "test", "ood")
COUNTS = ("n_train", "n_valid", "n_test", "n_ood")
# Single characters standing for the special tokens inside encoded byte strings.
_CHARS = {"<start>": "^", "<stop>": "$", "<pad>": "\0"}


def data_params(params: dict) -> dict:
    """expr.data: the problems' lengths, counts and seeds."""
    return params["expr"]["data"]


def _lookup() -> np.ndarray:
    table = np.full(256, 255, dtype=np.uint8)
    for i, tok in enumerate(VOCAB):
        table[ord(_CHARS.get(tok, tok))] = i
    return table


_LUT = _lookup()


def encode(problems, answers, width: int) -> np.ndarray:
    """Token ids (N, width) uint8: <start> problem = answer <stop>, right-padded with <pad>."""
    text = np.char.add(np.char.add(np.char.add("^", np.asarray(problems, dtype=str)), "="),
                       np.char.add(np.asarray(answers, dtype=str), "$"))
    longest = int(np.char.str_len(text).max()) if len(text) else 0
    if longest > width:
        raise ValueError(f"a sample of {longest} tokens does not fit the width {width}")
    raw = np.frombuffer(text.astype(f"S{width}").tobytes(), dtype=np.uint8).reshape(-1, width)
    ids = _LUT[raw]
    if (ids == 255).any():
        raise ValueError("a problem or answer holds a character outside the expr vocabulary")
    return ids


def decode(ids) -> str:
    """Token ids back to text, special tokens spelled out (padding dropped)."""
    return "".join(VOCAB[i] for i in np.asarray(ids).tolist() if i != PAD)


@dataclass
class Split:
    """One split as tensors: tokens (N, W) int64, eq (N,) index of '=', lengths (N,) problem chars."""
    tokens: "object"
    eq: "object"
    lengths: "object"

    def __len__(self) -> int:
        return self.tokens.shape[0]

    def to(self, device) -> "Split":
        return Split(self.tokens.to(device), self.eq.to(device), self.lengths.to(device))


class ExprTask(GridTask):
    name = "expr"
    forms = ("tokens", "digit-tokens")
    vocab = VOCAB
    pad_id = PAD
    stop_id = STOP

    # --- params ---------------------------------------------------------------------------
    @classmethod
    def params_schema(cls) -> dict:
        return {
            **cls.grid_schema(),
            "train": train_schema(loss_on=choice("answer", "all"), batch_size=integer(1),
                                  epochs=integer(1), val_every=integer(0),
                                  checkpoint_every=integer(1)),
            "data": {
                "min_in": integer(1), "max_in": integer(1),
                "min_out": integer(0), "max_out": integer(1),
                "ood_min_in": integer(1), "ood_max_in": integer(1),
                "n_train": integer(1), "n_valid": integer(1), "n_test": integer(1),
                "n_ood": integer(1),
                "gen_seed": integer(0), "split_seed": integer(0),
                "workers": integer(1, 64),
            },
            "eval": {"batch_size": integer(1)},
        }

    @classmethod
    def check_params(cls, params: dict) -> None:
        cls.check_grid(params)
        d = params["expr"]["data"]
        for lo, hi in (("min_in", "max_in"), ("min_out", "max_out"), ("ood_min_in", "ood_max_in")):
            if d[lo] > d[hi]:
                raise ParamsError(f"expr.data.{lo} = {d[lo]}: expected <= expr.data.{hi} ({d[hi]})")
        if d["ood_min_in"] <= d["max_in"]:
            raise ParamsError(f"expr.data.ood_min_in = {d['ood_min_in']}: expected > "
                              f"expr.data.max_in ({d['max_in']}), or the OOD set is not out "
                              "of distribution")

    # --- data -----------------------------------------------------------------------------
    @staticmethod
    def widths(d: dict) -> dict:
        """Tokens per sample: <start> + problem + '=' + answer + <stop>."""
        return {"in": d["max_in"] + d["max_out"] + 3, "ood": d["ood_max_in"] + d["max_out"] + 3}

    def generate(self, params: dict, out_dir: Path, progress=None) -> str:
        import pandas as pd

        from arithrepro.io import write_frame, write_json
        from arithrepro.tasks.expr_grammar import generate_unique

        d = data_params(params)
        pool_n = d["n_train"] + d["n_valid"] + d["n_test"]
        common = dict(seed=d["gen_seed"], min_out=d["min_out"], max_out=d["max_out"],
                      workers=d["workers"], progress=progress)
        problems, answers = generate_unique(pool_n, stream="pool", min_in=d["min_in"],
                                            max_in=d["max_in"], **common)
        ood_p, ood_a = generate_unique(d["n_ood"], stream="ood", min_in=d["ood_min_in"],
                                       max_in=d["ood_max_in"], **common)
        order = np.random.default_rng(d["split_seed"]).permutation(pool_n)
        cuts = np.cumsum([d["n_train"], d["n_valid"]])
        parts = dict(zip(("train", "valid", "test"), np.split(order, cuts)))
        pool = pd.DataFrame({"problem": problems, "answer": answers})
        frames = {name: pool.iloc[idx].reset_index(drop=True) for name, idx in parts.items()}
        frames["ood"] = pd.DataFrame({"problem": ood_p, "answer": ood_a})
        rows = []
        for name, frame in frames.items():
            frame["length"] = frame["problem"].str.len().astype("int16")
            write_frame(out_dir / f"{name}.parquet", frame)
            counts = frame["length"].value_counts().sort_index()
            rows += [{"split": name, "length": int(k), "count": int(v),
                      "percent": 100.0 * v / len(frame)} for k, v in counts.items()]
        write_frame(out_dir / "lengths.csv", pd.DataFrame(rows))
        write_json(out_dir / "meta.json", {"vocab": VOCAB, "widths": self.widths(d),
                                           "counts": {k: len(v) for k, v in frames.items()}})
        return ", ".join(f"{k} {len(v):,}" for k, v in frames.items()) + f" -> {out_dir}"

    def generate_count(self, params: dict) -> int:
        return sum(data_params(params)[k] for k in COUNTS)

    def dims(self, params: dict) -> dict:
        d = data_params(params)
        widths = self.widths(d)  # as written to meta.json
        # digit-tokens: a run of digits is at most a whole problem or answer
        return {"vocab_size": len(VOCAB), "max_len": max(widths.values()), "pad_id": PAD,
                "digit_ids": [VOCAB.index(c) for c in "0123456789"],
                "train_run": max(d["max_in"], d["max_out"]),
                "eval_run": max(d["ood_max_in"], d["max_out"])}

    def load(self, data_dir: Path, split: str) -> Split:
        import torch

        widths = self.read_meta(data_dir, ("widths",))["widths"]
        frame = self.read_split(data_dir, f"{split}.parquet", ("problem", "answer", "length"))
        ids = encode(frame["problem"].to_numpy(), frame["answer"].to_numpy(),
                     widths["ood" if split == "ood" else "in"])
        lengths = frame["length"].to_numpy().astype(np.int64)
        return Split(torch.from_numpy(ids.astype(np.int64)), torch.from_numpy(lengths + 1),
                     torch.from_numpy(lengths))

    # --- batches and scoring --------------------------------------------------------------
    def batch(self, split: Split, idx, loss_on: str = "answer"):
        """Inputs, next-token targets and the loss mask for the rows `idx`."""
        import torch

        tok = split.tokens[idx]
        x, y = tok[:, :-1], tok[:, 1:]
        mask = y != PAD
        if loss_on == "answer":
            # Input position t predicts token t + 1: the answer starts right after '='.
            t = torch.arange(x.size(1), device=tok.device)
            mask &= t.unsqueeze(0) >= split.eq[idx].unsqueeze(1)
        return x, y, mask

    def train_batches(self, params: dict, data_dir: Path, seed: int, device):
        split = self.load(data_dir, "train").to(device)
        return self._epochs(params, split, len(split), seed, device)

    def sample_batches(self, params: dict, seed: int, device):
        """The training run's batches (steps, epochs) drawn from one batch of problems made in
        memory: no files needed, for timing training before the data exist."""
        import torch

        from arithrepro.tasks.expr_grammar import generate_unique

        d = data_params(params)
        batch = params["expr"]["train"]["batch_size"]
        problems, answers = generate_unique(batch, seed=seed, stream="pool", min_in=d["min_in"],
                                            max_in=d["max_in"], min_out=d["min_out"],
                                            max_out=d["max_out"], workers=1)
        ids = encode(problems, answers, self.widths(d)["in"]).astype(np.int64)
        lengths = np.char.str_len(np.asarray(problems, dtype=str)).astype(np.int64)
        split = Split(*(torch.from_numpy(v) for v in (ids, lengths + 1, lengths))).to(device)
        n = params["expr"]["data"]["n_train"]
        return self._epochs(params, split, n, seed, device)

    def _epochs(self, params: dict, split: Split, n: int, seed: int, device):
        """Epochs over n rows; row i is split's row i mod len(split)."""
        from arithrepro.batches import EpochBatches

        t = params["expr"]["train"]
        loss_on = params["expr"]["train"]["loss_on"]
        return EpochBatches(lambda idx: self.batch(split, idx % len(split), loss_on), n,
                            t["batch_size"], t["epochs"], seed, device)

    def valid_set(self, params: dict, data_dir: Path, device):
        split = self.load(data_dir, "valid").to(device)
        loss_on = params["expr"]["train"]["loss_on"]
        return (lambda idx: self.batch(split, idx.to(device), loss_on)), len(split)

    def prompts(self, split: Split):
        """Prompt = <start> problem '='; the model must then write answer <stop>."""
        return split.tokens, split.eq + 1

    def max_new_tokens(self, params: dict) -> int:
        return data_params(params)["max_out"] + 1

    def score(self, split: Split, generated):
        """Exact match of the generated continuation with `answer <stop>`: (N,) bool."""
        import torch

        width = generated.size(1)
        start = (split.eq + 1).unsqueeze(1) + torch.arange(width).unsqueeze(0)
        truth = split.tokens.gather(1, start.clamp(max=split.tokens.size(1) - 1))
        stop_at = (truth == STOP).int().argmax(1)  # the true answer always ends in <stop>
        relevant = torch.arange(width).unsqueeze(0) <= stop_at.unsqueeze(1)
        return ((generated == truth) | ~relevant).all(1)


    # --- evaluation -----------------------------------------------------------------------
    def eval_count(self, params: dict, model) -> int:
        n = params["expr"]["data"]
        return n["n_test"] + n["n_ood"]

    def evaluate(self, model, params: dict, data_dir: Path, device, progress=None):
        """Exact match on the test and OOD sets, overall and by problem length."""
        from arithrepro.decoding import accuracy_by, decode_split

        batch = params["expr"]["eval"]["batch_size"]
        metrics, rows = {}, []
        for name in ("test", "ood"):
            split = self.load(data_dir, name)
            generated = decode_split(model, *self.prompts(split), self.max_new_tokens(params),
                                     STOP, batch, progress=progress)
            correct = self.score(split, generated)
            metrics[f"{name}_acc"] = float(correct.float().mean())
            metrics[f"{name}_n"] = len(split)
            rows += [{"split": name, **r} for r in accuracy_by(correct, split.lengths)]
        metrics["majority_acc"] = self.majority_acc(data_dir)
        return metrics, rows

    def majority_acc(self, data_dir: Path) -> float:
        """The trivial baseline: the share of test problems whose answer is the training set's
        most common answer (what a model that always gives it scores)."""
        train = self.read_split(data_dir, "train.parquet", ("answer",))["answer"]
        test = self.read_split(data_dir, "test.parquet", ("answer",))["answer"]
        return float((test == train.mode().iloc[0]).mean())


TASK = ExprTask()
STAGES = Stages("ReTran vs GPT vs LSTM on arithmetic expressions",
                plots=({"plots/expr/eval": {"x": "length", "y": "accuracy",
                                            "x_label": "problem length (test 8-30, OOD 31-40)",
                                            "y_label": "exact-match accuracy"}},))
REPORT = Report(("test_acc", "ood_acc"))
TAKES = Takes(decodes=True)
