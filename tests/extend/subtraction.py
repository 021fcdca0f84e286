"""subtraction: a - b mod 10^L digit by digit, least significant digit first, each position
classified from its digit pair; a toy task, added to a clone by
tests/test_pipeline_extend.py through the checklist of docs/design.md ("Add a task").

Training samples are drawn fresh every step at `train_digits`; the evaluation sets
(`per_length` problems at each of `eval_digits`) and the validation set are fixed, saved in
data/subtraction/sets.pt.
"""

from __future__ import annotations

from pathlib import Path

from arithrepro.batches import rows
from arithrepro.schema import integer, list_of
from arithrepro.tasks.base import StreamTask
from arithrepro.tasks.declared import Report, Stages, Takes


def problems(n: int, digits: int, generator):
    """Digit pairs (n, digits, 2) and the difference's digits (n, digits)."""
    import torch

    a = torch.randint(0, 10, (n, digits), generator=generator)
    b = torch.randint(0, 10, (n, digits), generator=generator)
    out, borrow = torch.empty_like(a), torch.zeros(n, dtype=a.dtype)
    for i in range(digits):
        d = a[:, i] - b[:, i] - borrow
        out[:, i], borrow = d % 10, (d < 0).long()
    return torch.stack([a, b], 2), out


class SubtractionTask(StreamTask):
    name = "subtraction"
    forms = ("pairs",)

    @classmethod
    def params_schema(cls) -> dict:
        return {**cls.grid_schema(),
                "data": {"train_digits": integer(1), "eval_digits": list_of(integer(1)),
                         "per_length": integer(1), "n_valid": integer(1), "eval_seed": integer(0)},
                "train": cls.stream_train_schema(), "eval": {"batch_size": integer(1)}}

    @classmethod
    def check_params(cls, params: dict) -> None:
        cls.check_grid(params)

    def dims(self, params: dict) -> dict:
        d = params[self.name]["data"]
        return {"base": 10, "classes": 10, "max_len": max(d["eval_digits"] + [d["train_digits"]])}

    def generate(self, params: dict, out_dir: Path, progress=None) -> str:
        import torch

        from arithrepro.io import save_torch

        d = params[self.name]["data"]
        g = torch.Generator().manual_seed(d["eval_seed"])
        sets = {"valid": problems(d["n_valid"], d["train_digits"], g),
                **{L: problems(d["per_length"], L, g) for L in d["eval_digits"]}}
        save_torch(Path(out_dir) / "sets.pt", sets)
        return f"{len(sets)} sets -> {out_dir}"

    def load(self, data_dir: Path) -> dict:
        import torch

        return torch.load(self.require(data_dir, "sets.pt"))

    def train_sampler(self, params: dict, device):
        import torch

        L = params[self.name]["data"]["train_digits"]

        def draw(batch_size, g):
            x, y = problems(batch_size, L, g)
            return x.to(device), y.to(device), torch.ones_like(y, dtype=torch.bool, device=device)

        return draw

    def valid_set(self, params: dict, data_dir: Path, device):
        import torch

        x, y = (v.to(device) for v in self.load(data_dir)["valid"])
        return rows(x, y, torch.ones_like(y, dtype=torch.bool))

    def evaluate(self, model, params: dict, data_dir: Path, device, progress=None):
        """Exact match at every evaluation length; id_acc / ood_acc within / beyond training."""
        import torch

        train_L = params[self.name]["data"]["train_digits"]
        rows = []
        with torch.no_grad():
            for L, (x, y) in self.load(data_dir).items():
                if L != "valid":
                    hit = (model(x.to(device)).argmax(-1).cpu() == y).all(1)
                    rows.append({"digits": L, "accuracy": float(hit.float().mean())})
        mean = lambda rs: sum(r["accuracy"] for r in rs) / len(rs) if rs else float("nan")
        metrics = {"id_acc": mean([r for r in rows if r["digits"] <= train_L]),
                   "ood_acc": mean([r for r in rows if r["digits"] > train_L])}
        return {k: v for k, v in metrics.items() if v == v}, rows


TASK = SubtractionTask()
STAGES = Stages("digit-by-digit subtraction, a toy task")
REPORT = Report(("id_acc", "ood_acc"))
TAKES = Takes()
