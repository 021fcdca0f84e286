"""abacus: reversed-digit addition for length generalization (docs/abacus.md).

A sample is `rev(a)+rev(b)=rev(a+b)$`, padded with `$`; the loss covers the answer digits and
the final `$`. Operand lengths are uniform in 1..max_digits, independently; an n-digit operand is
uniform among the numbers with exactly n digits. Training samples are drawn on the fly from a
generator seeded by the step. The evaluation sets are fixed: `per_cell` samples for every
(digits of a, digits of b) cell of the grid up to `grid_max`, and for the diagonal cells listed
in `diagonal`; they live in data/abacus/{grid,valid}.parquet as decimal strings.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from arithrepro.models.registry import MODELS
from arithrepro.schema import ParamsError, boolean, integer, list_of
from arithrepro.tasks.base import StreamTask
from arithrepro.tasks.declared import Count, Report, Stages, Takes

VOCAB = list("0123456789-+*=$")
PLUS, EQ, END = VOCAB.index("+"), VOCAB.index("="), VOCAB.index("$")
PAD = END  # the source pads with the end token; the loss mask, not the token, marks padding


# --- sampling (torch, vectorized over samples; loops run over digit positions only) ----------

def sample_operands(n1, n2, width: int, generator):
    """Digits (N, width) least-significant first of operands with exactly n1 / n2 digits."""
    import torch

    def operand(n):
        d = torch.randint(0, 10, (len(n), width), generator=generator)
        top = torch.randint(1, 10, (len(n),), generator=generator)
        i = torch.arange(width)
        d = torch.where(i < n.unsqueeze(1), d, 0)
        lead = (n - 1).clamp(min=0).unsqueeze(1)
        # The leading digit of a number with n > 1 digits is 1..9 (one digit: 0..9).
        d.scatter_(1, lead, torch.where(n > 1, top, d.gather(1, lead).squeeze(1)).unsqueeze(1))
        return d

    return operand(n1), operand(n2)


def add_digits(a, b):
    """Digit-wise sum with carries: (N, W) + (N, W) -> digits (N, W + 1) and their count (N,)."""
    import torch

    N, W = a.shape
    out = torch.zeros(N, W + 1, dtype=a.dtype)
    carry = torch.zeros(N, dtype=a.dtype)
    for i in range(W):
        s = a[:, i] + b[:, i] + carry
        out[:, i], carry = s % 10, s // 10
    out[:, W] = carry
    nonzero = out != 0
    i = torch.arange(W + 1).expand_as(out)
    length = torch.where(nonzero, i, 0).max(dim=1).values + 1
    return out, length


def render(a, n1, b, n2, s, ns):
    """Token ids (N, W) of rev(a)+rev(b)=rev(s)$ padded with $, the '=' index and the end index."""
    import torch

    N = a.size(0)
    W = a.size(1) + b.size(1) + s.size(1) + 3
    j = torch.arange(W).expand(N, W)
    n1, n2, ns = n1.unsqueeze(1), n2.unsqueeze(1), ns.unsqueeze(1)
    eq, end = n1 + n2 + 1, n1 + n2 + ns + 2

    def pick(d, start):
        return d.gather(1, (j - start).clamp(0, d.size(1) - 1))

    tok = torch.full((N, W), PAD, dtype=torch.long)
    tok = torch.where(j < n1, pick(a, 0), tok)
    tok = torch.where(j == n1, PLUS, tok)
    tok = torch.where((j > n1) & (j < eq), pick(b, n1 + 1), tok)
    tok = torch.where(j == eq, EQ, tok)
    tok = torch.where((j > eq) & (j < end), pick(s, eq + 1), tok)
    return tok, eq.squeeze(1), end.squeeze(1)


def sample(n1, n2, generator):
    a, b = sample_operands(n1, n2, int(max(n1.max(), n2.max())), generator)
    s, ns = add_digits(a, b)
    return render(a, n1, b, n2, s, ns)


# --- decimal strings <-> digits (for the saved evaluation sets) --------------------------------

def digits_to_text(d) -> np.ndarray:
    """(N, W) least-significant-first digits -> decimal strings (most significant first)."""
    d = np.asarray(d, dtype=np.uint8)
    raw = (d[:, ::-1] + ord("0")).astype(np.uint8)
    text = np.frombuffer(np.ascontiguousarray(raw).tobytes(), dtype=f"S{d.shape[1]}").astype(str)
    # Operands have exactly n digits (a leading digit 1..9 when n > 1), so stripping the zeros
    # above them leaves the number; only the one-digit 0 strips to nothing.
    text = np.char.lstrip(text, "0")
    return np.where(text == "", "0", text)


def text_to_digits(text, width: int):
    """Decimal strings -> (N, width) least-significant-first digits and their counts."""
    text = np.asarray(text, dtype=str)
    n = np.char.str_len(text)
    raw = np.frombuffer(np.char.rjust(text, width, "0").astype(f"S{width}").tobytes(),
                        dtype=np.uint8).reshape(-1, width)
    return (raw[:, ::-1] - ord("0")).astype(np.int64), n.astype(np.int64)


# --- the task ----------------------------------------------------------------------------------


class AbacusTask(StreamTask):
    name = "abacus"
    vocab = VOCAB
    pad_id = PAD
    stop_id = END
    forms = ("digit-tokens", "tokens")
    precision = "mixed"

    @classmethod
    def params_schema(cls) -> dict:
        return {
            **cls.grid_schema(),
            "data": {"eval_seed": integer(0),   # training samples: drawn from the run's seed
                     "max_digits": integer(1, 200), "grid_max": integer(1, 200),
                     "diagonal": list_of(integer(1, 1000), min_len=0), "per_cell": integer(1),
                     "n_valid": integer(1)},
            "model": MODELS["abacus"].budget_schema(),
            "train": cls.stream_train_schema(progressive=boolean),
            "eval": {"batch_size": integer(1), "recurrences": list_of(integer(1, 1024))},
        }

    @classmethod
    def check_params(cls, params: dict) -> None:
        cls.check_grid(params)
        d, key = params["abacus"]["data"], "abacus.data"
        if d["grid_max"] <= d["max_digits"]:
            raise ParamsError(f"{key}.grid_max = {d['grid_max']}: expected > max_digits "
                              f"({d['max_digits']}), or the grid has no cell beyond training")
        low = [n for n in d["diagonal"] if n <= d["grid_max"]]
        if low:
            raise ParamsError(f"{key}.diagonal = {d['diagonal']}: expected lengths > grid_max "
                              f"({d['grid_max']}); the grid already holds {low}")

    # --- data -----------------------------------------------------------------------------
    @staticmethod
    def _data(params: dict) -> dict:
        return params["abacus"]["data"]

    @staticmethod
    def _eval_cells(d: dict) -> list[tuple[int, int]]:
        g = range(1, d["grid_max"] + 1)
        return [(i, j) for i in g for j in g] + [(n, n) for n in d["diagonal"]]

    def generate(self, params: dict, out_dir: Path, progress=None) -> str:
        import pandas as pd
        import torch

        from arithrepro.io import write_frame, write_json

        d, seeds = self._data(params), params["abacus"]["data"]
        frames = []
        for n1, n2 in self._eval_cells(d):
            g = torch.Generator().manual_seed(seeds["eval_seed"] * 1_000_003 + n1 * 1009 + n2)
            k = d["per_cell"]
            a, b = sample_operands(torch.full((k,), n1), torch.full((k,), n2), max(n1, n2), g)
            frames.append(pd.DataFrame({"n1": n1, "n2": n2, "a": digits_to_text(a),
                                        "b": digits_to_text(b)}))
            if progress:
                progress(k)
        grid = pd.concat(frames, ignore_index=True).astype({"n1": "int16", "n2": "int16"})
        g = torch.Generator().manual_seed(seeds["eval_seed"] * 1_000_003 + 7)
        n = d["n_valid"]
        n1, n2 = (torch.randint(1, d["max_digits"] + 1, (n,), generator=g) for _ in range(2))
        a, b = sample_operands(n1, n2, d["max_digits"], g)
        valid = pd.DataFrame({"n1": n1.numpy().astype("int16"), "n2": n2.numpy().astype("int16"),
                              "a": digits_to_text(a), "b": digits_to_text(b)})
        if progress:
            progress(n)
        write_frame(out_dir / "grid.parquet", grid)
        write_frame(out_dir / "valid.parquet", valid)
        write_json(out_dir / "meta.json", {"vocab": VOCAB, "max_digits": d["max_digits"],
                                           "grid_max": d["grid_max"], "diagonal": d["diagonal"],
                                           "counts": {"grid": len(grid), "valid": len(valid)}})
        return f"grid {len(grid):,} ({len(self._eval_cells(d))} cells), valid {len(valid):,} -> {out_dir}"

    def generate_count(self, params: dict) -> int:
        d = self._data(params)
        return len(self._eval_cells(d)) * d["per_cell"] + d["n_valid"]

    def load(self, data_dir: Path, split: str):
        """A saved split as tensors: tokens (N, W), eq (N,), end (N,), n1 (N,), n2 (N,)."""
        import torch

        frame = self.read_split(data_dir, f"{split}.parquet", ("n1", "n2", "a", "b"))
        n1, n2 = frame["n1"].to_numpy().astype(np.int64), frame["n2"].to_numpy().astype(np.int64)
        width = int(max(n1.max(), n2.max()))
        a, _ = text_to_digits(frame["a"].to_numpy(), width)
        b, _ = text_to_digits(frame["b"].to_numpy(), width)
        a, b, n1, n2 = (torch.from_numpy(v) for v in (a, b, n1, n2))
        s, ns = add_digits(a, b)
        tokens, eq, end = render(a, n1, b, n2, s, ns)
        return {"tokens": tokens, "eq": eq, "end": end, "n1": n1, "n2": n2}

    def dims(self, params: dict) -> dict:
        d = self._data(params)  # as written to meta.json
        longest_eval = max([d["grid_max"], *d["diagonal"]])
        return {"vocab_size": len(VOCAB), "pad_id": PAD, "digit_ids": list(range(10)),
                "max_len": 3 * (longest_eval + 1) + 3,
                "train_run": d["max_digits"] + 1, "eval_run": longest_eval + 1}

    # --- batches --------------------------------------------------------------------------
    @staticmethod
    def lm_batch(tokens, eq, end):
        """Inputs, next-token targets and the mask of the answer digits and the final `$`."""
        import torch

        x, y = tokens[:, :-1], tokens[:, 1:]
        t = torch.arange(x.size(1), device=tokens.device).unsqueeze(0)
        # Input position t predicts token t + 1: the answer is eq + 1 .. end.
        return x, y, (t >= eq.unsqueeze(1)) & (t < end.unsqueeze(1))

    def train_sampler(self, params: dict, device):
        D = self._data(params)["max_digits"]

        def draw(batch_size, g):
            import torch

            from arithrepro.device import to_device

            n1, n2 = (torch.randint(1, D + 1, (batch_size,), generator=g) for _ in range(2))
            return self.lm_batch(*to_device(device, *sample(n1, n2, g)))

        return draw

    def valid_set(self, params: dict, data_dir: Path, device):
        from arithrepro.batches import rows

        v = {k: t.to(device) for k, t in self.load(data_dir, "valid").items()}
        return rows(*self.lm_batch(v["tokens"], v["eq"], v["end"]))

    # --- evaluation -----------------------------------------------------------------------
    @staticmethod
    def correct(generated, tokens, eq, end, budget):
        """The source's rule: the continuation is digits then `$` within the budget, and as a
        reversed integer equals the true sum (so trailing zeros of the reversed answer pass)."""
        import torch

        B, G = generated.shape
        is_end = generated == END
        has_end = is_end.any(1)
        m = torch.where(has_end, is_end.int().argmax(1), G)       # digits before the first `$`
        i = torch.arange(G).unsqueeze(0)
        digits_ok = ((generated < 10) | (i >= m.unsqueeze(1))).all(1)
        ns = end - eq - 1
        W = max(G, int(ns.max()))
        truth = tokens.gather(1, (eq.unsqueeze(1) + 1 + torch.arange(W)).clamp(max=tokens.size(1) - 1))
        truth = torch.where(torch.arange(W).unsqueeze(0) < ns.unsqueeze(1), truth, 0)
        gen = torch.nn.functional.pad(generated, (0, W - G))
        gen = torch.where(torch.arange(W).unsqueeze(0) < m.unsqueeze(1), gen, 0)
        return has_end & (m >= 1) & (m < budget) & digits_ok & (gen == truth).all(1)

    def evaluate(self, model, params: dict, data_dir: Path, device, progress=None):
        """Accuracy on every grid (and diagonal) cell at each inference recurrence count."""
        import torch

        from arithrepro.decoding import decode_split

        prof = params["abacus"]
        g = self.load(data_dir, "grid")
        budget = torch.maximum(g["n1"], g["n2"]) + 2
        trained, counts = self._recurrences(model, params)
        loops = self._loops(model)
        rows = []
        for r in counts:   # a model that does not loop has one count, its own
            if loops:
                model.recurrences = r
            out = decode_split(model, g["tokens"], g["eq"] + 1, budget, END,
                               prof["eval"]["batch_size"], progress)
            ok = self.correct(out, g["tokens"], g["eq"], g["end"], budget)
            rows += self._cell_rows(r, g["n1"], g["n2"], ok)
        if loops:
            model.recurrences = trained
        metrics = self._metrics(rows, trained, self._data(params))
        blocks = getattr(getattr(model, "core", None), "blocks", None)
        if blocks is not None:   # the effective depth: layers applied per token, all counts
            metrics["depth"] = trained * len(blocks)
        return metrics, rows

    @staticmethod
    def _cell_rows(r, n1, n2, ok) -> list[dict]:
        import torch

        key = n1 * 10_000 + n2
        rows = []
        for k in torch.unique(key).tolist():
            sel = ok[key == k]
            rows.append({"recurrences": r, "n1": k // 10_000, "n2": k % 10_000,
                         "n": int(sel.numel()), "accuracy": float(sel.float().mean())})
        return rows

    @staticmethod
    def _metrics(rows: list[dict], trained: int, d: dict) -> dict:
        def mean(sel):
            vals = [row["accuracy"] for row in rows if sel(row)]
            return sum(vals) / len(vals) if vals else float("nan")

        D, G = d["max_digits"], d["grid_max"]
        grid = lambda row: row["n1"] <= G and row["n2"] <= G  # noqa: E731
        ood = lambda row: grid(row) and max(row["n1"], row["n2"]) > D  # noqa: E731
        count = lambda sel: sum(row["n"] for row in rows if sel(row))  # noqa: E731
        in_range = lambda row: grid(row) and max(row["n1"], row["n2"]) <= D  # noqa: E731
        m = {"recurrences": trained,
             "id_n": count(lambda row: row["recurrences"] == trained and in_range(row)),
             "ood_n": count(lambda row: row["recurrences"] == trained and ood(row)),
             "id_acc": mean(lambda row: row["recurrences"] == trained and grid(row)
                            and max(row["n1"], row["n2"]) <= D),
             "ood_acc": mean(lambda row: row["recurrences"] == trained and ood(row))}
        for r in sorted({row["recurrences"] for row in rows}):
            m[f"acc_r{r}"] = mean(lambda row: row["recurrences"] == r and grid(row))
            m[f"ood_r{r}"] = mean(lambda row: row["recurrences"] == r and ood(row))
        for n in d["diagonal"]:
            m[f"acc_diag{n}"] = mean(lambda row: row["recurrences"] == trained and row["n1"] == n
                                     and row["n2"] == n)
        return {k: v for k, v in m.items() if v == v}

    @staticmethod
    def _recurrences(model, params: dict) -> tuple[int, list[int]]:
        """(the trained count, the counts evaluated): a block made to be applied again (input
        injection) runs at every count abacus.eval asks for; any other model (the benchmark's)
        at its own depth, written as one recurrence."""
        if not AbacusTask._loops(model):
            return 1, [1]
        trained = model.recurrences
        return trained, sorted({*params["abacus"]["eval"]["recurrences"], trained})

    @staticmethod
    def _loops(model) -> bool:
        """A block made to be applied again (input injection) and trained so (more than one
        recurrence): its recurrence count may change. A plain decoder runs at its own depth."""
        core = getattr(model, "core", None)
        return bool(getattr(core, "inject", False)) and getattr(model, "recurrences", 1) > 1

    def eval_count(self, params: dict, model) -> int:
        d = self._data(params)
        return len(self._eval_cells(d)) * d["per_cell"] * len(self._recurrences(model, params)[1])


TASK = AbacusTask()
STAGES = Stages("Abacus embeddings and depth for addition beyond the training length",
                train_blocks=("data", "model", "train"),
                plots=({"plots/abacus/eval": {"x": "n1", "y": "n2",
                                              "template": "conf/plot_templates/digit_grid.json",
                                              "x_label": "digits of the first operand",
                                              "y_label": "digits of the second operand"}},))
REPORT = Report(("id_acc", "ood_acc"), counts=(
    Count("ood_r", "recurrences", "out-of-distribution accuracy by recurrences",
          "Mean accuracy over the grid's cells beyond the training length, at each inference "
          "recurrence count (the model is trained at one count)."),
    Count("acc_r", "recurrences", "whole-grid accuracy by recurrences")))
TAKES = Takes(decodes=True)
