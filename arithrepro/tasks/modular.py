"""modular: LSTM vs GPT on a ∘ b mod p, in seven studies (docs/modular.md).

Every sample of (a, b) ∈ [0, p)² (and (a, b, c) for order 3) as `BOS a ∘ b = r EOS`, padded
with PAD when orders are mixed; a seeded fraction r_train of each order trains, the rest
validates. Both sets are evaluated in full every `eval_every` steps: per-sample mean NLL over
the right-hand side (r and EOS), then the mean over samples; a sample is correct only when
every right-hand-side token is the argmax. Training minimizes the same loss: every sample has
two right-hand-side tokens, so the mean over tokens is the mean over samples.

A study is a grid over its models, the values of the keys it sweeps (`sweep`, the product of the
lists; SWEEPS names each study's keys) and its seeds, on top of `base` and the study's `set`.
Every run is a cell of the study's DVC stage, train-modular-<study>.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from arithrepro.params_reads import peek
from arithrepro.runs import Built, Config, Data, Run, records_dir, runs_dir
from arithrepro.schema import ParamsError, choice, fail, integer, list_of, number
from arithrepro.tasks.base import Task
from arithrepro.tasks.declared import Report, Stages, Takes
from arithrepro.train.batches import EpochBatches

OPERATORS = ("+", "-", "*", "/")
STUDIES = ("sanity", "data", "orders", "size", "compute", "regularization")
# The keys each study sweeps: its DVC stage (train-modular-<study>) expands over them, so a
# study sweeps these and no others (any key may be set).
SWEEPS = {"sanity": (), "data": ("r_train",), "orders": (), "size": ("layers", "d_model"),
          "compute": ("batch_size",), "regularization": ("weight_decay",)}
# How a swept key reads in a cell's name: data.r0.3, size.L2d128, compute.B64, ...
ABBREV = {"r_train": "r", "layers": "L", "d_model": "d", "heads": "h", "batch_size": "B",
          "weight_decay": "wd", "lr": "lr", "warmup_frac": "wu", "schedule": "sched",
          "beta2": "b2", "eps": "eps", "steps": "T", "p": "p", "dropout": "drop", "eval_every": "e",
          "orders": "o", "operator": "op", "norm": "norm", "grad_clip": "clip"}


# --- data ------------------------------------------------------------------------------------

class Vocab:
    """The numbers 0..p-1 are their own ids; the operator, '=', BOS, EOS and PAD follow."""

    def __init__(self, p: int, operator: str):
        self.p, self.operator = p, operator
        self.op, self.eq, self.bos, self.eos, self.pad = range(p, p + 5)
        self.size = p + 5

    def tokens(self) -> list[str]:
        return [str(i) for i in range(self.p)] + [self.operator, "=", "BOS", "EOS", "PAD"]


def combine(a, b, p: int, operator: str):
    """(a ∘ b) mod p elementwise on integer tensors; '/' multiplies by b's inverse mod p."""
    import torch

    if operator == "+":
        return (a + b) % p
    if operator == "-":
        return (a - b) % p
    if operator == "*":
        return (a * b) % p
    inverse = torch.tensor([0] + [pow(i, -1, p) for i in range(1, p)], dtype=a.dtype)
    return (a * inverse[b]) % p


def sequences(p: int, orders: list[int], operator: str):
    """Every sample of the given orders: tokens (N, 2 max(order) + 3) and each sample's order.
    Order k: all k-tuples of operands, the divisors of '/' nonzero; r = ((x1 ∘ x2) ∘ x3) mod p."""
    import torch

    v = Vocab(p, operator)
    width = 2 * max(orders) + 3
    parts, order_of = [], []
    for k in sorted(orders):
        ranges = [torch.arange(p)] + [torch.arange(1 if operator == "/" else 0, p)] * (k - 1)
        xs = torch.cartesian_prod(*ranges).reshape(-1, k)
        r = xs[:, 0]
        for j in range(1, k):
            r = combine(r, xs[:, j], p, operator)
        seq = torch.full((len(xs), width), v.pad, dtype=torch.long)
        seq[:, 0] = v.bos
        seq[:, 1:2 * k:2] = xs
        seq[:, 2:2 * k - 1:2] = v.op
        seq[:, 2 * k] = v.eq
        seq[:, 2 * k + 1] = r
        seq[:, 2 * k + 2] = v.eos
        parts.append(seq)
        order_of.append(torch.full((len(xs),), k, dtype=torch.long))
    return torch.cat(parts), torch.cat(order_of)


def encode(operands: list[int], p: int, operator: str):
    """One sample's full token sequence (a LongTensor), as `sequences` writes it."""
    import torch

    tokens, order = sequences(p, [len(operands)], operator)
    k = len(operands)
    rows = tokens[:, 1:2 * k:2]
    hit = (rows == torch.tensor(operands)).all(1).nonzero()
    if len(hit) == 0:
        raise ValueError(f"operands {operands}: not a sample of p = {p}, operator {operator!r} "
                         "(each below p; divisors nonzero)")
    return tokens[int(hit[0])]


def split(order, r_train: float, seed: int):
    """Seeded train / validation indices: a fraction r_train of each order's samples trains
    (at least one sample on each side)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    train, valid = [], []
    for k in sorted(set(order.tolist())):
        idx = torch.nonzero(order == k).squeeze(1)
        idx = idx[torch.randperm(len(idx), generator=g)]
        n = min(max(round(r_train * len(idx)), 1), len(idx) - 1)
        train.append(idx[:n])
        valid.append(idx[n:])
    return torch.cat(train), torch.cat(valid)


def inputs_targets(tokens, vocab: Vocab):
    """x = tokens[:, :-1], y = tokens[:, 1:], mask: the right-hand side's targets (every
    position from '=' on whose target is not PAD)."""
    x, y = tokens[:, :-1], tokens[:, 1:]
    mask = ((x == vocab.eq).cumsum(1) > 0) & (y != vocab.pad)
    return x, y, mask


def first_scored(mask) -> int:
    """The first position any sample scores: a model need not produce logits before it."""
    return int(mask.any(0).nonzero()[0])


def score(model, x, y, mask, outputs_from: int, batch_size: int = 4096):
    """Per-sample right-hand-side loss, correctness and logit margin (three tensors of len(x)),
    in batches of whole tensors: no loop over samples. The margin is the true class's logit
    minus the largest other one, averaged over the scored positions: how far the softmax is
    from a tie, the scale a cross-entropy keeps pushing up once every answer is right."""
    import torch
    import torch.nn.functional as F

    losses, correct, margins = [], [], []
    with torch.no_grad():
        for i in range(0, len(x), batch_size):
            xb, yb, mb = (t[i:i + batch_size] for t in (x, y, mask))
            logits = model(xb, outputs_from=outputs_from)
            yb, mb = yb[:, outputs_from:], mb[:, outputs_from:]
            nll = F.cross_entropy(logits.transpose(1, 2), yb, reduction="none")
            n = mb.sum(1)
            losses.append((nll * mb).sum(1) / n)
            correct.append(((logits.argmax(-1) == yb) | ~mb).all(1))
            true = logits.gather(-1, yb.unsqueeze(-1)).squeeze(-1)
            other = logits.scatter(-1, yb.unsqueeze(-1), float("-inf")).amax(-1)
            margins.append(((true - other) * mb).sum(1) / n)
    return torch.cat(losses), torch.cat(correct), torch.cat(margins)


@dataclass(frozen=True)
class Split:
    x: object      # (N, T) inputs
    y: object      # (N, T) next-token targets
    mask: object   # (N, T) the right-hand side's targets
    order: object  # (N,) each sample's order


class Splits:
    """One run's data: every sample, split by the seed, on the device; evaluate(model) scores
    both sets in full (the fit loop's validation hook)."""

    def __init__(self, config: dict, seed: int, device):
        self.vocab = Vocab(config["p"], config["operator"])
        self.orders = sorted(config["orders"])
        tokens, order = sequences(config["p"], self.orders, config["operator"])
        x, y, mask = inputs_targets(tokens, self.vocab)
        self.outputs_from = first_scored(mask)
        parts = split(order, config["r_train"], seed)
        self.splits = {name: Split(*(t[idx].to(device) for t in (x, y, mask, order)))
                       for name, idx in zip(("train", "val"), parts)}

    def evaluate(self, model) -> dict:
        """Both sets' loss and accuracy; then what explains a collapse (docs/modular.md): the
        training set's mean logit margin, the norms of all weights and of the output layer's,
        and how far the weights moved since the previous evaluation (`update_norm`, the
        optimizer's steps in between summed as vectors; NaN at the first)."""
        import torch

        out = {}
        for name, s in self.splits.items():
            loss, correct, margin = score(model, s.x, s.y, s.mask, self.outputs_from)
            out[f"{name}_loss"], out[f"{name}_acc"] = _mean(loss), _mean(correct)
            if name == "train":
                out["train_margin"] = _mean(margin)
            if len(self.orders) > 1:
                for k in self.orders:
                    sel = s.order == k
                    out[f"o{k}_{name}_loss"], out[f"o{k}_{name}_acc"] = _mean(loss[sel]), _mean(correct[sel])
        with torch.no_grad():
            weights = [p.detach().clone() for p in model.parameters()]
            out["param_norm"] = float(torch.sqrt(sum(w.pow(2).sum() for w in weights)))
            out["head_norm"] = float(model.head.weight.norm())
            last = getattr(self, "_last_weights", None)
            out["update_norm"] = (float(torch.sqrt(sum((w - v).pow(2).sum() for w, v in zip(weights, last))))
                                  if last is not None else float("nan"))
            self._last_weights = weights
        return out


def _mean(t) -> float:
    return float(t.float().mean())


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

def label(study: str, swept: dict) -> str:
    """A run's label: the study and its swept values ("data.r0.3", "size.L2d128", "sanity")."""
    return study + ("." + "".join(f"{ABBREV[k]}{v}" for k, v in swept.items())
                    if swept else "")


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


# --- params ----------------------------------------------------------------------------------

# The LMs a study builds from its (d_model, layers, heads)
OWN_MODELS = ("lstm-std", "gpt-sin")


def _model_names() -> tuple[str, ...]:
    return OWN_MODELS


def _prime(key, value) -> None:
    integer(2, 1000)(key, value)
    if any(value % q == 0 for q in range(2, int(math.isqrt(value)) + 1)):
        fail(key, value, "a prime (every nonzero residue needs an inverse)")


BASE = {
    "p": _prime,
    "orders": list_of(integer(2, 3)),
    "operator": choice(*OPERATORS),
    "r_train": number(0, 1, lo_open=True, hi_open=True),
    "layers": integer(1, 64),
    "d_model": integer(1),
    "heads": integer(1),
    "norm": choice("pre", "post"),
    "dropout": number(0, 1, hi_open=True),
    "lr": number(0, lo_open=True),
    "warmup_frac": number(0, 1, hi_open=True),
    "schedule": choice("constant", "linear"),
    "beta2": number(0, 1, lo_open=True, hi_open=True),
    "eps": number(0, lo_open=True),
    "weight_decay": number(0),
    "grad_clip": number(0),
    "batch_size": integer(1),
    "steps": integer(1),
    "eval_every": integer(1),
    "checkpoint_every": integer(1),
}


def _values(key, value) -> None:
    if not isinstance(value, dict):
        fail(key, value, "a mapping of params keys to values")
    for k, v in value.items():
        if k not in BASE:
            raise ParamsError(f"{key}.{k}: unknown key; allowed: {', '.join(BASE)}")
        BASE[k](f"{key}.{k}", v)


def _sweep(study: str):
    keys = SWEEPS[study]

    def check(key, value) -> None:
        if not isinstance(value, dict) or set(value) != set(keys):
            fail(key, value, f"a mapping of {', '.join(keys)} to lists of values (the keys "
                             f"train-modular-{study} expands over)" if keys else
                             "{} (the study sweeps nothing; its `set` changes any key)")
        for k in keys:
            v = value[k]
            if not isinstance(v, list) or not v:
                fail(f"{key}.{k}", v, "a non-empty list")
            for i, item in enumerate(v):
                BASE[k](f"{key}.{k}[{i}]", item)
            if len(set(v)) != len(v):
                fail(f"{key}.{k}", v, "distinct values")
    return check


def _study_schema(study: str) -> dict:
    s = {"models": list_of(lambda k, v: choice(*_model_names())(k, v)),
         "seeds": list_of(integer(0)), "set": _values, "sweep": _sweep(study)}
    if study == "compute":
        s["budgets"] = list_of(number(0, 1, lo_open=True))
    return s


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
        return {"vocab_size": v.size, "max_len": 2 * max(config["orders"]) + 2, "pad_id": v.pad}

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
                      item=(model, *values))

    def data(self, run: Run, params: dict, device, trial: bool = False) -> Data:
        """The study's splits, made in memory (a trial's are the run's own); the loop validates
        by scoring both in full, the loss and the validation from the first scored position."""
        c = run.config.settings
        splits = Splits(c, run.seed, device)
        train = splits.splits["train"]
        batches = EpochBatches(lambda idx: (train.x[idx], train.y[idx], train.mask[idx]),
                               len(train.x), c["batch_size"], 1, run.seed, device,
                               steps=c["steps"])
        return Data(batches, splits.evaluate, loop={"outputs_from": splits.outputs_from})

    def record(self, run: Run, built: Built, result: dict, summary: dict, params: dict) -> dict:
        """The source's metrics from the evaluation curve, per order when orders are mixed,
        and within each budget of the compute study (metrics/modular/runs/<study>/<run>.json)."""
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
        return out

    def curve(self, run: Run, result: dict):
        """Both sets' scores at every evaluation (`dvc plots` overlays train and validation)."""
        import pandas as pd

        return pd.DataFrame(result["val_curve"]).drop(columns="epoch")


TASK = ModularTask()


def stages() -> list:
    """A training stage per study: its models x the values it sweeps x its seeds, each run
    scored on the full train and validation sets as it trains; then the attention maps of
    the best run of modular.attention.study."""
    from arithrepro.dvcfile import Stage, item, placeholders, ref, train_stage

    out = []
    for study in STUDIES:
        s, keys = f"modular.studies.{study}", SWEEPS[study]
        run = placeholders("modular", label(study, {k: item(k) for k in keys}), group=study)
        matrix = {"model": ref(f"{s}.models"), **{k: ref(f"{s}.sweep.{k}") for k in keys},
                  "seed": ref(f"{s}.seeds")}
        params = ["modular.base", f"{s}.set"] + ([f"{s}.budgets"] if study == "compute" else [])
        out.append(train_stage(f"train-modular-{study}", run, matrix, params, deps=[],
                               outs=(str(run.record), str(run.curve)),
                               family="train-modular"))
    study = ref("modular.attention.study")
    out.append(Stage("modular-attention", "modular-attention", "modular",
                     params=["modular.base", f"modular.studies.{study}.set", "modular.attention"],
                     outs=["plots/modular/attention"],
                     deps=[str(records_dir("modular") / study), str(runs_dir("modular", study))],
                     note="the attention maps of the best run of modular.attention.study"))
    return out


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
