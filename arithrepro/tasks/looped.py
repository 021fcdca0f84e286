"""looped: aligned, non-autoregressive addition (docs/looped.md, Fan et al. 2024's notebook).

Decimal variant: operands uniform in 0..10^L - 1; L + 1 positions, position i holding the digit
pair (a_i, b_i) (least significant first, 0 beyond the operand) and, as target, digit i of the
sum (the last position receives the final carry). Binary variant: `L` bit positions, target bit
i of a + b truncated to L bits. Training samples are drawn on the fly at the training length;
the evaluation sets (`per_length` samples at each length of `eval_digits`) are fixed and saved
in data/looped/eval.parquet as digit strings.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from arithrepro.schema import ParamsError, choice, integer, list_of
from arithrepro.tasks.base import StreamTask
from arithrepro.tasks.declared import Count, Report, Stages, Takes


def sample_pairs(n: int, digits: int, base: int, generator):
    """Operand digits (n, digits) least significant first: uniform operands in 0..base^L - 1."""
    import torch

    return (torch.randint(0, base, (n, digits), generator=generator),
            torch.randint(0, base, (n, digits), generator=generator))


def pairs_and_targets(a, b, base: int, carry_position: bool):
    """Inputs (N, T, 2) and per-position targets (N, T) of a + b, T = L + 1 with the carry
    position, else L (the sum truncated)."""
    import torch

    N, L = a.shape
    if carry_position:
        a, b = (torch.nn.functional.pad(v, (0, 1)) for v in (a, b))
    out = torch.empty_like(a)
    carry = torch.zeros(N, dtype=a.dtype)
    for i in range(a.size(1)):
        s = a[:, i] + b[:, i] + carry
        out[:, i], carry = s % base, s // base
    return torch.stack([a, b], dim=2), out


class LoopedTask(StreamTask):
    name = "looped"
    forms = ("pairs",)

    @classmethod
    def params_schema(cls) -> dict:
        return {
            **cls.grid_schema(),
            "data": {"variant": choice("decimal", "binary"), "train_digits": integer(1, 1000),
                     "eval_digits": list_of(integer(1, 1000)), "max_positions": integer(2, 10_000),
                     "eval_seed": integer(0),   # training samples: drawn from the run's seed
                     "per_length": integer(1), "n_valid": integer(1)},
            "train": cls.stream_train_schema(),
            "eval": {"batch_size": integer(1)},
        }

    @classmethod
    def check_params(cls, params: dict) -> None:
        cls.check_grid(params)
        d = params["looped"]["data"]
        longest = max(d["eval_digits"] + [d["train_digits"]]) + 1
        if longest > d["max_positions"]:
            raise ParamsError(f"looped.data.max_positions = {d['max_positions']}: expected >= "
                              f"{longest} (the longest evaluation length plus the carry position)")

    # --- data -----------------------------------------------------------------------------
    @staticmethod
    def _base(d: dict) -> int:
        return 10 if d["variant"] == "decimal" else 2

    def generate(self, params: dict, out_dir: Path, progress=None) -> str:
        import pandas as pd
        import torch

        from arithrepro.io import write_frame, write_json

        d = params["looped"]["data"]
        n = params["looped"]["data"]
        base, frames = self._base(d), {}
        for split, lengths, count in (("eval", d["eval_digits"], n["per_length"]),
                                      ("valid", [d["train_digits"]], n["n_valid"])):
            parts = []
            for L in lengths:
                g = torch.Generator().manual_seed(d["eval_seed"] * 1_000_003 + L * 2 + (split == "valid"))
                a, b = sample_pairs(count, L, base, g)
                parts.append(pd.DataFrame({"digits": L, "a": _text(a), "b": _text(b)}))
                if progress:
                    progress(count)
            frames[split] = pd.concat(parts, ignore_index=True).astype({"digits": "int16"})
            write_frame(out_dir / f"{split}.parquet", frames[split])
        write_json(out_dir / "meta.json", {"variant": d["variant"], "base": base,
                                           "train_digits": d["train_digits"],
                                           "counts": {k: len(v) for k, v in frames.items()}})
        return ", ".join(f"{k} {len(v):,}" for k, v in frames.items()) + f" -> {out_dir}"

    def generate_count(self, params: dict) -> int:
        n = params["looped"]["data"]
        return n["per_length"] * len(params["looped"]["data"]["eval_digits"]) + n["n_valid"]

    def load(self, data_dir: Path, split: str) -> dict:
        """{digits: {"x": (N, T, 2), "y": (N, T)}} for each length in the split."""
        import torch

        meta = self.read_meta(data_dir, ("base", "variant"))
        frame = self.read_split(data_dir, f"{split}.parquet", ("digits", "a", "b"))
        out = {}
        for L, part in frame.groupby("digits", sort=True):
            a, b = (torch.from_numpy(_digits(part[c].to_numpy(), L)) for c in ("a", "b"))
            x, y = pairs_and_targets(a, b, meta["base"], meta["variant"] == "decimal")
            out[int(L)] = {"x": x, "y": y}
        return out

    def dims(self, params: dict) -> dict:
        base = self._base(params["looped"]["data"])
        return {"base": base, "classes": base, "max_len": params["looped"]["data"]["max_positions"]}

    # --- batches --------------------------------------------------------------------------
    def train_sampler(self, params: dict, device):
        import torch

        d = params["looped"]["data"]
        base, L = self._base(d), d["train_digits"]

        def draw(batch_size, g):
            from arithrepro.device import to_device

            x, y = to_device(device, *pairs_and_targets(*sample_pairs(batch_size, L, base, g), base,
                                                        base == 10))
            return x, y, torch.ones_like(y, dtype=torch.bool)

        return draw

    def valid_set(self, params: dict, data_dir: Path, device):
        import torch

        from arithrepro.batches import rows

        (v,) = self.load(data_dir, "valid").values()
        x, y = v["x"].to(device), v["y"].to(device)
        return rows(x, y, torch.ones_like(y, dtype=torch.bool))

    # --- evaluation -----------------------------------------------------------------------
    def eval_count(self, params: dict, model) -> int:
        n = params["looped"]["data"]["per_length"]
        return n * len(params["looped"]["data"]["eval_digits"])

    def evaluate(self, model, params: dict, data_dir: Path, device, progress=None):
        """Per-digit accuracy and whole-number exact match at every evaluation length."""
        import torch

        batch = params["looped"]["eval"]["batch_size"]
        train_L = params["looped"]["data"]["train_digits"]
        rows = []
        with torch.no_grad():
            for L, v in self.load(data_dir, "eval").items():
                pred = torch.cat([model(v["x"][i:i + batch].to(device)).argmax(-1).cpu()
                                  for i in range(0, len(v["y"]), batch)])
                hit = pred == v["y"]
                rows.append({"digits": L, "n": len(hit), "digit_acc": float(hit.float().mean()),
                             "accuracy": float(hit.all(1).float().mean())})
                if progress:
                    progress(len(hit))
        metrics = {"id_acc": _mean(r["accuracy"] for r in rows if r["digits"] <= train_L),
                   "ood_acc": _mean(r["accuracy"] for r in rows if r["digits"] > train_L)}
        for r in rows:
            metrics[f"acc_len{r['digits']}"] = r["accuracy"]
            metrics[f"digit_acc_len{r['digits']}"] = r["digit_acc"]
        return {k: v for k, v in metrics.items() if v == v}, rows


def _text(d) -> np.ndarray:
    """(N, L) digits least significant first -> strings most significant first (zero-padded)."""
    raw = (np.asarray(d, dtype=np.uint8)[:, ::-1] + ord("0")).astype(np.uint8)
    return np.frombuffer(np.ascontiguousarray(raw).tobytes(), dtype=f"S{d.shape[1]}").astype(str)


def _digits(text, L: int) -> np.ndarray:
    raw = np.frombuffer(np.asarray(text, dtype=str).astype(f"S{L}").tobytes(),
                        dtype=np.uint8).reshape(-1, L)
    return (raw[:, ::-1] - ord("0")).astype(np.int64)


def _mean(values) -> float:
    values = list(values)
    return sum(values) / len(values) if values else float("nan")


TASK = LoopedTask()
STAGES = Stages("a looped vs a standard transformer on addition by length",
                plots=({"plots/looped/eval": {"x": "digits", "y": ["accuracy", "digit_acc"],
                                              "x_label": "digits per operand",
                                              "y_label": "accuracy (exact match, per digit)"}},))
REPORT = Report(("id_acc", "ood_acc"), counts=(
    Count("acc_len", "digits", "exact match by length",
          "Mean ± std over seeds; whole-number exact match, then per-digit accuracy."),
    Count("digit_acc_len", "digits", "per-digit accuracy by length")))
TAKES = Takes()
