"""modular: LSTM vs GPT on a ∘ b mod p, in seven studies (docs/modular.md; the samples, their
splits and scoring: modular_data.py).

A study is a grid over its models, the values of the keys it sweeps (`sweep`, the product of the
lists; SWEEPS names each study's keys) and its seeds, on top of `base` and the study's `set`.
A configuration is a model at one point of the sweep; its runs are cells of the study's DVC
stage, train-modular-<study>.
"""

from __future__ import annotations

import itertools

from arithrepro.params_reads import peek
from arithrepro.runs import Built, Config, Data, Run, records_dir
from arithrepro.schema import ParamsError, choice, integer, list_of
from arithrepro.tasks.base import Task
from arithrepro.tasks.declared import Report, Stages, Takes
from arithrepro.tasks.modular_data import Splits, Vocab
from arithrepro.tasks.modular_params import (BASE, FREE, OWN_MODELS, STUDIES, SWEEPS, _model_names,
                                             _study_schema, label)
from arithrepro.tasks.modular_stages import stages


def embedding_params(model) -> int:
    """Parameters of the token and learned positional embeddings (excluded from P)."""
    import torch

    return sum(p.numel() for m in model.modules() if isinstance(m, torch.nn.Embedding)
               for p in m.parameters())


# --- metrics ---------------------------------------------------------------------------------

def curve_metrics(curve: list[dict], upto: int | None = None, prefix: str = "") -> dict:
    """The source's per-run metrics from the evaluation curve (rows: step, train_loss, val_loss,
    train_acc, val_acc), over the steps <= upto when given: the best value of each (minimum
    loss, maximum accuracy), the first step reaching it (<name>_step: the source's t_f), and
    dt_loss_steps / dt_acc_steps (Δt), how many steps validation lagged behind training."""
    rows = [r for r in curve if upto is None or r["step"] <= upto]
    if not rows:
        raise ValueError(f"no evaluation at or before step {upto}")
    out = {}
    for name, best in (("train_loss", min), ("val_loss", min), ("train_acc", max), ("val_acc", max)):
        value = best(r[name] for r in rows)
        out[f"{prefix}{name}"] = value
        out[f"{prefix}{name}_step"] = next(r["step"] for r in rows if r[name] == value)
    out[f"{prefix}dt_loss_steps"] = out[f"{prefix}val_loss_step"] - out[f"{prefix}train_loss_step"]
    out[f"{prefix}dt_acc_steps"] = out[f"{prefix}val_acc_step"] - out[f"{prefix}train_acc_step"]
    return out


def fallback(curve: list[dict], key: str, level: float = 0.99) -> float | None:
    """How far `key` fell below `level` after it first reached it (0: never below again;
    None: never reached): the depth of a collapse."""
    reached = [i for i, r in enumerate(curve) if r[key] >= level]
    if not reached:
        return None
    return max(0.0, level - min(r[key] for r in curve[reached[0]:]))


# --- studies ---------------------------------------------------------------------------------

def study_configs(params: dict, study: str) -> list[tuple[tuple, tuple]]:
    """(key, seeds) of a study's configurations, in dvc.yaml's order (models, then the swept
    values in the order of SWEEPS[study]); a key is (study, model, its swept values)."""
    s = params["modular"]["studies"][study]
    return [((study, model, values), tuple(s["seeds"]))
            for model in s["models"]
            for values in itertools.product(*(s["sweep"][k] for k in SWEEPS[study]))]


def settings(params: dict, study: str, values) -> dict:
    """A configuration's settings: the base, its study's `set`, its swept values."""
    m = params["modular"]
    return {**m["base"], **m["studies"][study]["set"], **dict(zip(SWEEPS[study], values))}


class ModularTask(Task):
    name = "modular"

    @classmethod
    def params_schema(cls) -> dict:
        return {
            "models": list_of(lambda k, v: choice(*_model_names())(k, v)),
            "seeds": list_of(integer(0)),
            "base": dict(BASE),
            "studies": {s: _study_schema(s) for s in STUDIES},
            "attention": {"study": choice(*STUDIES), "model": lambda k, v: choice(*_model_names())(k, v),
                          "samples": list_of(list_of(integer(0), unique=False))},
        }

    @classmethod
    def check_params(cls, params: dict) -> None:
        m = params["modular"]
        for (study, model, values), _ in TASK.listed(params):
            c = settings(params, study, values)
            if c["d_model"] % c["heads"]:
                name = f"{model}-{label(study, dict(zip(SWEEPS[study], values)))}"
                raise ParamsError(f"modular.studies.{study}: d_model = {c['d_model']} is not a "
                                  f"multiple of heads = {c['heads']} (configuration {name})")
        a = m["attention"]
        c = {**m["base"], **m["studies"][a["study"]]["set"]}
        p, divide = c["p"], c["operator"] == "/"
        # where the study's orders and p are set: its own block, else the base
        source = {k: f"modular.studies.{a['study']}.set.{k}" if k in m["studies"][a["study"]]["set"]
                  else f"modular.base.{k}" for k in ("orders", "p")}
        for i, sample in enumerate(a["samples"]):
            if len(sample) not in c["orders"] or any(x >= p for x in sample) \
                    or (divide and 0 in sample[1:]):
                raise ParamsError(
                    f"modular.attention.samples[{i}] = {sample}: expected "
                    f"{' or '.join(map(str, c['orders']))} operands below p = {p}"
                    + (", divisors nonzero" if divide else "") + f" (the {a['study']} study's "
                    f"data: {source['orders']} = {c['orders']}, {source['p']} = {p})")

    def dims(self, config: dict) -> dict:
        v = Vocab(config["p"], config["operator"])
        return {"vocab_size": len(v), "max_len": 2 * max(config["orders"]) + 2, "pad_id": v.pad}

    def listed(self, params: dict) -> list[tuple[tuple, tuple]]:
        return [item for study in STUDIES for item in study_configs(params, study)]

    def config(self, params: dict, study: str, model: str, values, seeds=()) -> Config:
        """`model` under the base, the study's `set` and its swept `values`: the source's AdamW,
        its schedule and clipping, the last state kept."""
        c = settings(params, study, values)
        size = {"d_model": c["d_model"], "layers": c["layers"], "heads": c["heads"],
                "norm": c["norm"]}
        arch = {"model": model, "size": size, "dropout": float(c["dropout"]),
                "dims": self.dims(c), "vocab": Vocab(c["p"], c["operator"]).tokens()}
        loop = dict(lr=float(c["lr"]), optimizer="adamw", schedule=c["schedule"],
                    warmup_frac=float(c["warmup_frac"]), beta2=float(c["beta2"]),
                    eps=float(c["eps"]), weight_decay=float(c["weight_decay"]),
                    grad_clip=float(c["grad_clip"]), val_every=c["eval_every"],
                    checkpoint_every=c["checkpoint_every"], validate_epochs=False,
                    restore_best=False)
        swept = dict(zip(SWEEPS[study], values))
        return Config("modular", model, label(study, swept), seeds, arch, loop, c, group=study,
                      key=(study, model, tuple(values)), stage=f"train-modular-{study}",
                      item=(model, *values), free=FREE)

    def data(self, run: Run, params: dict, device, trial: bool = False) -> Data:
        """The study's splits, made in memory (a trial's are the run's own); the loop validates
        by scoring both in full, the loss and the validation from the first scored position."""
        from arithrepro.batches import EpochBatches, rows

        c = run.config.settings
        splits = Splits(c, run.seed, device)
        train = splits.splits["train"]
        batches = EpochBatches(*rows(train.x, train.y, train.mask), c["batch_size"], 1, run.seed,
                               device, steps=c["steps"])
        return Data(batches, splits.evaluate, loop={"outputs_from": splits.outputs_from})

    def scores(self, run: Run, built: Built, result: dict, summary: dict, params: dict):
        """The source's metrics from the evaluation curve, per order when orders are mixed,
        and within each budget of the compute study (metrics/modular/runs/<study>/<run>.json),
        and both sets' scores at every evaluation (`dvc plots` overlays train and validation)."""
        import pandas as pd

        c, curve = built.read["settings"], result["val_curve"]
        out = {"params": summary["params"] - embedding_params(built.net),
               **{k: v for k, v in c.items() if isinstance(v, (int, float)) and not isinstance(v, bool)},
               **curve_metrics(curve)}
        orders = sorted(c["orders"])
        for order in orders if len(orders) > 1 else []:
            sub = [{"step": r["step"], **{k: r[f"o{order}_{k}"] for k in
                                          ("train_loss", "val_loss", "train_acc", "val_acc")}}
                   for r in curve]
            out.update({k: v for k, v in curve_metrics(sub, prefix=f"o{order}_").items()
                        if not k.startswith(f"o{order}_dt_")})
        out.update(train_acc_last=curve[-1]["train_acc"], val_acc_last=curve[-1]["val_acc"])
        for split in ("train", "val"):   # none where the accuracy never reached 0.99
            fell = fallback(curve, f"{split}_acc")
            if fell is not None:
                out[f"{split}_fallback"] = fell
        out.update(param_norm=curve[-1]["param_norm"], train_seconds=result["train_seconds"],
                   s_per_step=result["train_seconds"] / max(result["steps"], 1))
        has_budgets = "budgets" in peek(params, "modular", "studies", run.group)
        for alpha in params["modular"]["studies"][run.group]["budgets"] if has_budgets else []:
            out.update(curve_metrics(curve, upto=int(alpha * c["steps"]), prefix=f"a{alpha:g}_"))
        return out, pd.DataFrame(curve).drop(columns="epoch")


TASK = ModularTask()


STAGES = Stages(
    "LSTM vs GPT scaling studies on modular arithmetic", run_keys=("studies",),
    plots=({"plots/modular/curves": {"x": "step", "y": ["train_acc", "val_acc"],
                                     "y_label": "accuracy on the full train and validation sets"}},
           {"plots/modular/curves/orders": {"x": "step", "y": ["val_acc", "o2_val_acc", "o3_val_acc"],
                                            "y_label": "validation accuracy, all orders and per order"}}),
    images=("plots/modular/attention",),
    records=tuple(str(records_dir("modular") / study) for study in STUDIES),
    tables=("metrics/modular.md", "metrics/modular.tex"), make=stages)
# the sanity study: each model at the base configuration
REPORT = Report(("val_acc",), headline_sizes="^sanity$")
TAKES = Takes(own=OWN_MODELS)
