"""running: the running sum of a digit string mod m, at every position; a toy task scored as it
trains (like modular and charlm), added to a clone by tests/test_pipeline_extend.py through the
checklist of docs/design.md ("Add a task").

Every run draws its training and validation strings from its seed, in memory; the loop scores
the validation set every `eval_every` steps (loss and exact-position accuracy), and the run's
record is read off that curve.
"""

from __future__ import annotations

from arithrepro.runs import Built, Config, Data, Run
from arithrepro.schema import choice, integer, list_of, number
from arithrepro.tasks.base import Task
from arithrepro.tasks.declared import Report, Stages, Takes
from arithrepro.batches import EpochBatches, rows


def strings(n: int, length: int, modulus: int, generator):
    """Digit strings (n, length) and their running sums mod `modulus`."""
    import torch

    x = torch.randint(0, modulus, (n, length), generator=generator)
    return x, x.cumsum(1) % modulus


class Scorer:
    """The validation set, scored in full: mean loss and the share of positions right."""

    def __init__(self, x, y):
        self.x, self.y = x, y

    def __call__(self, model) -> dict:
        import torch
        import torch.nn.functional as F

        with torch.no_grad():
            logits = model(self.x)
        loss = F.cross_entropy(logits.flatten(0, 1), self.y.flatten())
        return {"val_loss": float(loss), "val_acc": float((logits.argmax(-1) == self.y).float().mean())}


class RunningTask(Task):
    name = "running"

    @classmethod
    def params_schema(cls) -> dict:
        return {"models": list_of(choice(*TAKES.own)), "seeds": list_of(integer(0)),
                "base": {"modulus": integer(2), "length": integer(1), "n_train": integer(1),
                         "n_valid": integer(1), "d_model": integer(1), "layers": integer(1),
                         "heads": integer(1), "lr": number(0, lo_open=True),
                         "batch_size": integer(1), "steps": integer(1),
                         "eval_every": integer(1)}}

    def dims(self, values: dict) -> dict:
        return {"vocab_size": values["modulus"] + 1, "max_len": values["length"],
                "pad_id": values["modulus"]}

    def listed(self, params: dict) -> list[tuple[tuple, tuple]]:
        p = params["running"]
        return [((model,), tuple(p["seeds"])) for model in p["models"]]

    def config(self, params: dict, model: str, seeds=()) -> Config:
        b = params["running"]["base"]
        arch = {"model": model, "dropout": 0.0, "dims": self.dims(b),
                "size": {"d_model": b["d_model"], "layers": b["layers"], "heads": b["heads"]}}
        loop = dict(lr=b["lr"], optimizer="adam", schedule="constant", warmup_frac=0.0,
                    val_every=b["eval_every"], checkpoint_every=b["eval_every"],
                    validate_epochs=False, restore_best=False)
        return Config(self.name, model, "base", seeds, arch, loop, {"base": b}, key=(model,),
                      stage="train-running", item=(model,))

    def data(self, run: Run, params: dict, device, trial: bool = False) -> Data:
        import torch

        b = run.config.settings["base"]
        g = torch.Generator().manual_seed(run.seed)
        x, y = strings(b["n_train"], b["length"], b["modulus"], g)
        vx, vy = strings(b["n_valid"], b["length"], b["modulus"], g)
        x, y, vx, vy = (t.to(device) for t in (x, y, vx, vy))
        mask = torch.ones_like(y, dtype=torch.bool)
        batches = EpochBatches(*rows(x, y, mask), b["batch_size"], 1, run.seed, device,
                               steps=b["steps"])
        return Data(batches, Scorer(vx, vy))

    def scores(self, run: Run, built: Built, result: dict, summary: dict, params: dict):
        import pandas as pd

        last = result["val_curve"][-1]
        return ({"params": summary["params"], "steps": result["steps"], "val_acc": last["val_acc"],
                 "val_loss": last["val_loss"], "best_val_loss": result["best_val_loss"],
                 "train_seconds": result["train_seconds"]},
                pd.DataFrame(result["val_curve"]).drop(columns="epoch"))


TASK = RunningTask()


def stages() -> list:
    """One training stage over models x seeds, each run's record and curve its outputs."""
    from arithrepro.dvcfile import placeholders, ref, train_stage

    run = placeholders("running", "base")
    return [train_stage("train-running", run, {"model": ref("running.models"),
                                                "seed": ref("running.seeds")},
                        ["running.base"], deps=[], outs=(str(run.record), str(run.curve)))]


STAGES = Stages("running sums mod m, a toy task scored as it trains",
                run_keys=("models", "seeds"), make=stages)
REPORT = Report(("val_acc",))
TAKES = Takes(own=("gpt-sin",))
