"""The modular task's findings: the homework's claims that its studies test
(claims/modular.yaml names the claims; docs/modular.md repeats the table)."""

from __future__ import annotations

import statistics
from dataclasses import replace

from arithrepro import stats
from arithrepro.findings.base import SMALL, Finding, Part, each, missing, values
from arithrepro.params_reads import peek
from arithrepro.runs import CONFIG_KEY


GENERALIZED = 0.9   # the source's own bar: a run generalizes once A_val reaches 0.9 (data study)
# "late": in the run's last tenth, which holds the earliest minimum the source calls late (the
# GPT's training loss at about 9,750 of 10,001 steps, 0.975; the LSTM's fall on the last step)
LATE = 0.9


def _study(rows, study: str):
    return rows[[s.split(".")[0] == study for s in rows["size"]]]


def _per_model(study: str, judge, models: tuple[str, ...] = ()):
    """A check on one study's records: judge(a model's runs, params) -> that model's Parts, the
    parts of every model (of `models`, where given) decided as one claim (findings.each)."""
    def check(rows, params):
        sub = _study(rows, study)
        if models:
            sub = sub[sub["model"].isin(models)]
        if not len(sub):
            return missing(f"the {study} study" + (f" of {', '.join(models)}" if models else ""))
        parts = [replace(p, label=f"{model}: {p.label}")
                 for model, g in sub.groupby("model", sort=False) for p in judge(g, params)]
        v = each(parts, f"the {study} study")
        return replace(v, measured=v.measured + _cost(sub)) if v.outcome == SMALL else v

    return check


def _cost(sub) -> str:
    """What deciding a study judged on too few seeds costs here: three seeds per configuration
    (the fewest with which the permutation test can reach 0.05), at the study's mean training
    time per run on this machine."""
    if "train_seconds" not in sub or not len(sub):
        return ""
    runs = sub.groupby(CONFIG_KEY)["seed"].nunique()
    more = int(sum(max(0, 3 - n) for n in runs))
    minutes = more * float(sub["train_seconds"].mean()) / 60
    return (f" ({more} more runs, about {minutes:.0f} min of training on the machine these ran "
            "on)" if more else "")


def _late(g, params):
    """Memorize first, generalize later: A_val reaches the source's 0.9, and run by run the
    first step at the best A_val comes after the first step at the best A_train."""
    return [Part("A_val", stats.above(g["val_acc"], GENERALIZED), len(g), 1, ""),
            Part("t_f(A_val) − t_f(A_train)",
                 stats.paired(g["val_acc_step"], g["train_acc_step"]), len(g), 1, " steps")]


def _losses_late(g, params):
    """Run by run, where in the run its best losses fall (the step over the run's steps): the
    LSTM's training and validation minima, the GPT's training minimum, in the last tenth."""
    lstm = g["model"].iloc[0].startswith("lstm")
    return [Part(f"t_f({name}) / T", stats.above(g[f"{key}_step"] / g["steps"], LATE), len(g),
                 1, "") for key, name in (("train_loss", "L_train"), ("val_loss", "L_val"))
            if lstm or key == "train_loss"]


def _between_models(metric: str, ahead: str, label: str, scale: float = 1, unit: str = ""):
    """A sanity-study check: the `ahead` model's `metric` above the other model's, over seeds
    (exact permutation test, one-sided); `label` names the difference, ahead's first."""
    def check(rows, params):
        sub = _study(rows, "sanity")
        runs = {m: values(sub, metric, model=m) for m in ("lstm-std", "gpt-sin")}
        if not all(runs.values()):
            return missing("both models in the sanity study")
        behind = next(m for m in runs if m != ahead)
        return each([Part(label, stats.compare(runs[ahead], runs[behind]),
                          min(map(len, runs.values())), scale, unit)], "")

    return check


def _swept(key: str, metric: str, lower_is_better: bool, name: str):
    """Between the smallest and the largest swept value of `key`: the metric of the larger
    value above (or below) the smaller's, by the exact permutation test."""
    def judge(g, params):
        lo, hi = g[key].min(), g[key].max()
        a, b = g[g[key] == hi][metric].dropna(), g[g[key] == lo][metric].dropna()
        c = stats.compare(b, a) if lower_is_better else stats.compare(a, b)
        first, second = (lo, hi) if lower_is_better else (hi, lo)
        scale, unit = next(v for k, v in (("step", (1, " steps")), ("loss", (1, " nats")),
                                          ("norm", (1, "")), ("", (100, " points")))
                           if k in metric)
        return [Part(f"{name} at {key} {first:g} − at {second:g}", c, min(len(a), len(b)),
                     scale, unit)]

    return judge


def _size(g, params):
    """The largest (L, d) reaches its best A_val in fewer steps than the smallest."""
    cells = sorted({(int(r.layers), int(r.d_model)) for r in g.itertuples()})
    small, large = cells[0], cells[-1]
    pick = lambda c: g[(g["layers"] == c[0]) & (g["d_model"] == c[1])]["val_acc_step"]  # noqa: E731
    a, b = pick(small), pick(large)
    return [Part(f"t_f(A_val), L{small[0]} d{small[1]} − L{large[0]} d{large[1]}",
                 stats.compare(a, b), min(len(a), len(b)), 1, " steps")]


def _budgets(params) -> list[float]:
    """The compute study's budget fractions α, smallest first."""
    return sorted(peek(params, "modular", "studies", "compute", "budgets") or [])


def _smallest_budget(params) -> float | None:
    budgets = _budgets(params)
    return budgets[0] if budgets else None


def _compute(g, params):
    """At the smallest budget α, the smallest batch above the largest in A_val."""
    alpha = _smallest_budget(params)
    if alpha is None:
        return []
    col = f"a{alpha:g}_val_acc"
    lo, hi = g["batch_size"].min(), g["batch_size"].max()
    a, b = g[g["batch_size"] == lo][col], g[g["batch_size"] == hi][col]
    return [Part(f"A_val within α = {alpha:g}, B {lo} − B {hi}", stats.compare(a, b),
                 min(len(a), len(b)), unit=" points")]


def _depth(g, params):
    """At each width, the deepest GPT above the shallowest in A_val."""
    g = g[g["model"] == "gpt-sin"]
    parts = []
    for d, at in g.groupby("d_model"):
        lo, hi = at["layers"].min(), at["layers"].max()
        if lo == hi:
            continue
        a, b = at[at["layers"] == hi]["val_acc"], at[at["layers"] == lo]["val_acc"]
        parts.append(Part(f"A_val at d {int(d)}, L {int(hi)} − L {int(lo)}", stats.compare(a, b),
                          min(len(a), len(b)), unit=" points"))
    return parts


def _compute_loss(g, params):
    """L_val within α·T: at the smallest α, the largest B above the smallest; at the smallest
    B, the smallest α above the largest."""
    budgets = _budgets(params)
    if len(budgets) < 2:
        return []
    lo_a, hi_a = budgets[0], budgets[-1]
    lo_b, hi_b = g["batch_size"].min(), g["batch_size"].max()
    loss = lambda alpha, b: g[g["batch_size"] == b][f"a{alpha:g}_val_loss"]  # noqa: E731
    by_b, by_a = (loss(lo_a, hi_b), loss(lo_a, lo_b)), (loss(lo_a, lo_b), loss(hi_a, lo_b))
    return [Part(f"L_val within α = {lo_a:g}, B {hi_b} − B {lo_b}", stats.compare(*by_b),
                 min(map(len, by_b)), 1, " nats"),
            Part(f"L_val at B {lo_b}, within α = {lo_a:g} − within {hi_a:g}",
                 stats.compare(*by_a), min(map(len, by_a)), 1, " nats")]


MODELS = ("lstm-std", "gpt-sin")


def _over_batches(g, col: str, how: str) -> list[float]:
    """Per seed, one model's `col` across the compute study's batch sizes: its value at the
    largest B − at the smallest ("rise"), or its largest − smallest over every B ("range");
    seeds without every B left out."""
    by_seed = g.pivot_table(index="seed", columns="batch_size", values=col).dropna()
    if how == "rise":
        return list(by_seed[by_seed.columns.max()] - by_seed[by_seed.columns.min()])
    return list(by_seed.max(axis=1) - by_seed.min(axis=1))


def _batch_contrast(metric: str, name: str, how: str, ahead: str, scale: float, unit: str,
                    own: str = ""):
    """The compute study at its smallest budget α: per seed, each model's `metric` within α·T
    over the batch sizes (`how`: its rise from the smallest B to the largest, or its range),
    the `ahead` model's above the other's (exact permutation test over seeds, one-sided); `own`
    ("up" or "down"): also the first model of MODELS's own rise above 0 or below it (its
    metric at the largest B against the smallest, the permutation test)."""
    def check(rows, params):
        alpha = _smallest_budget(params)
        sub = _study(rows, "compute")
        col = f"a{alpha:g}_{metric}" if alpha is not None else ""
        if alpha is None or col not in sub or not all((sub["model"] == m).any() for m in MODELS):
            return missing("both models in the compute study")
        per = {m: _over_batches(sub[sub["model"] == m], col, how) for m in MODELS}
        if not all(per.values()):
            return missing("both models at two batch sizes in the compute study")
        behind = next(m for m in MODELS if m != ahead)
        word = "rise, B max − B min" if how == "rise" else "range over B"
        parts = []
        if own:
            g = sub[sub["model"] == MODELS[0]]
            lo, hi = int(g["batch_size"].min()), int(g["batch_size"].max())
            a, b = (g[g["batch_size"] == x][col].dropna() for x in (hi, lo))
            parts.append(Part(f"{MODELS[0]}: {name} within α = {alpha:g}, B {hi} − B {lo}"
                              if own == "up" else
                              f"{MODELS[0]}: {name} within α = {alpha:g}, B {lo} − B {hi}",
                              stats.compare(a, b) if own == "up" else stats.compare(b, a),
                              min(len(a), len(b)), scale, unit))
        parts.append(Part(f"{name} within α = {alpha:g}, {word}: {ahead} − {behind}",
                          stats.compare(per[ahead], per[behind]),
                          min(map(len, per.values())), scale, unit))
        return each(parts, "")

    return check


def _decay_scores(g, params):
    """A larger weight decay: a lower L_val and a higher A_val."""
    return [*_swept("weight_decay", "val_loss", True, "L_val")(g, params),
            *_swept("weight_decay", "val_acc", False, "A_val")(g, params)]


def _decay(g, params):
    """A larger weight decay: an earlier t_f(A_val) and a smaller final ‖θ‖₂."""
    return [*_swept("weight_decay", "val_acc_step", True, "t_f(A_val)")(g, params),
            *_swept("weight_decay", "param_norm", True, "final ‖θ‖₂")(g, params)]


def _orders(g, params):
    """Run by run, the binary sums reach their best validation accuracy before the ternary."""
    return [Part("t_f(A_val), ternary − binary",
                 stats.paired(g["o3_val_acc_step"], g["o2_val_acc_step"]), len(g), 1, " steps")]


def attention_shape(net, tokens) -> list[tuple[float, float, float]]:
    """Where a model's attention goes on one input (tokens, 1-d), per layer, averaged over its
    heads and the query positions with at least four keys (the earlier ones can attend nowhere
    but the start and the recent): (the weight on the start and the two most recent positions,
    the query's own and the one before; that weight under uniform attention; the evenness, the
    row's entropy over the largest it could have, 0 on one key, 1 uniform)."""
    import math

    import torch

    with torch.no_grad():
        trace = net.trace(tokens.unsqueeze(0))
    out = []
    for w in trace["attention"]:
        w = w[0].double()                       # (heads, T, T), each row a distribution
        focus, share, even = [], [], []
        for q in range(3, w.shape[-1]):
            row = w[:, q, :q + 1]
            focus.append(float((row[:, 0] + row[:, q - 1] + row[:, q]).mean()))
            share.append(3 / (q + 1))
            h = -(row * row.clamp_min(1e-300).log()).sum(-1) / math.log(q + 1)
            even.append(float(h.mean()))
        out.append((statistics.fmean(focus), statistics.fmean(share), statistics.fmean(even)))
    return out


ATTENTION = "plots/modular/attention/measures.json"   # modular-attention's, of every run


def _attention(index: int):
    """modular-attention's measures of the study's runs whose last state (model.pt, the state
    traced) generalized (A_val ≥ GENERALIZED) on sample `index` of modular.attention.samples: run by run, the first layer's weight on the
    start and the recent positions above its uniform share, and the last layer's evenness above
    the first's (exact sign-flip tests, one-sided). The watched seeds' records are the ledger's
    to set apart: only the runs of `rows` are read."""
    def check(rows, params):
        import os

        from arithrepro.io import read_json

        if not os.path.exists(ATTENTION):
            return missing(f"attention measures ({ATTENTION})")
        data = read_json(ATTENTION, ("samples", "runs"))
        if index >= len(data["samples"]):
            return missing(f"a sample {index + 1} in modular.attention.samples")
        sub = _study(rows, data.get("study", "sanity"))
        seeds = set(int(x) for x in sub[sub["model"] == data.get("model", "gpt-sin")]["seed"])
        runs = [r for r in data["runs"] if r["seed"] in seeds]
        kept = [r for r in runs if r["val_acc"] >= GENERALIZED]
        left = f"; left out, A_val under {GENERALIZED:g}: {len(runs) - len(kept)} of {len(runs)}" \
            if len(kept) < len(runs) else ""
        if not kept:
            return missing(f"a run of the {data.get('study', 'sanity')} study that generalized{left}")
        first = [r["samples"][index][0] for r in kept]
        last = [r["samples"][index][-1] for r in kept]
        v = each([Part("layer 1, weight on the start and the recent positions − its uniform share",
                       stats.paired([f for f, _, _ in first], [u for _, u, _ in first]),
                       len(kept), 100, " points"),
                  Part(f"evenness, layer {len(kept[0]['samples'][index])} − layer 1",
                       stats.paired([e for _, _, e in last], [e for _, _, e in first]),
                       len(kept), 1, "")], "")
        text = f" {data.get('operator') or '+'} ".join(map(str, data["samples"][index]))
        return replace(v, measured=f"sample {text} = r: {v.measured}{left}")

    return check


FINDINGS = (
    Finding("modular.late", "memorize first, generalize later",
            "each model: A_val above the source's 0.9 (one-sample t, one-sided) and, run by run, "
            "t_f(A_val) after t_f(A_train) (exact sign-flip test, one-sided), p ≤ 0.05 each",
            _per_model("sanity", _late)),
    Finding("modular.losses-late", "the best losses come late in the run, still falling near its end",
            f"run by run in the sanity study, the step of the minimum over the run's steps: the "
            f"LSTM's L_train and L_val and the GPT's L_train each above {LATE:g}, the run's last "
            "tenth (one-sample t, or the exact sign test where the seeds agree; one-sided, "
            "p ≤ 0.05 each)", _per_model("sanity", _losses_late)),
    Finding("modular.gpt-fits-faster", "the GPT memorizes the training set sooner than the LSTM",
            "t_f(A_train), LSTM − GPT in the sanity study: exact permutation test over seeds, "
            "one-sided, p ≤ 0.05",
            _between_models("train_acc_step", "lstm-std", "t_f(A_train), LSTM − GPT",
                            unit=" steps")),
    Finding("modular.lstm-generalizes-sooner",
            "the LSTM reaches its best validation accuracy sooner than the GPT",
            "t_f(A_val), GPT − LSTM in the sanity study: exact permutation test over seeds, "
            "one-sided, p ≤ 0.05",
            _between_models("val_acc_step", "gpt-sin", "t_f(A_val), GPT − LSTM",
                            unit=" steps")),
    Finding("modular.lstm-lower-val-loss",
            "the LSTM reaches a lower validation loss than the GPT",
            "L_val, GPT − LSTM in the sanity study: exact permutation test over seeds, one-sided, "
            "p ≤ 0.05",
            _between_models("val_loss", "gpt-sin", "L_val, GPT − LSTM", unit=" nats")),
    Finding("modular.lstm-higher-val-acc",
            "the LSTM reaches a higher validation accuracy than the GPT",
            "A_val, LSTM − GPT in the sanity study: exact permutation test over seeds, one-sided, "
            "p ≤ 0.05",
            _between_models("val_acc", "lstm-std", "A_val, LSTM − GPT", 100, " points")),
    Finding("modular.gpt-val-loss-first",
            "the GPT's validation loss bottoms out earlier, relative to its training loss, than "
            "the LSTM's",
            "Δt(L) = t_f(L_val) − t_f(L_train), LSTM − GPT in the sanity study: exact permutation "
            "test over seeds, one-sided, p ≤ 0.05",
            _between_models("dt_loss_steps", "lstm-std", "Δt(L), LSTM − GPT",
                            unit=" steps")),
    Finding("modular.data", "more training data generalizes better",
            "each model: A_val at the largest r_train − at the smallest: exact permutation test "
            "over seeds, one-sided, p ≤ 0.05",
            _per_model("data", _swept("r_train", "val_acc", False, "A_val"))),
    Finding("modular.orders", "the GPT learns binary sums before ternary ones",
            "the GPT, run by run: t_f(A_val) of the ternary samples after the binary's (exact "
            "sign-flip test, one-sided, p ≤ 0.05)", _per_model("orders", _orders, ("gpt-sin",))),
    Finding("modular.size", "a larger model generalizes sooner",
            "each model: t_f(A_val) of the smallest (L, d) − of the largest: exact permutation "
            "test over seeds, one-sided, p ≤ 0.05", _per_model("size", _size)),
    Finding("modular.gpt-depth", "at a fixed width a deeper GPT generalizes better",
            "the GPT at each width of the size study: A_val of the deepest − of the shallowest: "
            "exact permutation test over seeds, one-sided, p ≤ 0.05 each",
            _per_model("size", _depth)),
    Finding("modular.compute", "small batches generalize better at small budgets",
            "each model: A_val within the smallest budget α·T, the smallest B − the largest: "
            "exact permutation test over seeds, one-sided, p ≤ 0.05",
            _per_model("compute", _compute)),
    Finding("modular.compute-val-loss",
            "validation loss is lowest with small batches and large budgets",
            "each model: L_val within the smallest budget α·T, the largest B − the smallest; "
            "and at the smallest B, L_val within the smallest α − within the largest: exact "
            "permutation tests over seeds, one-sided, p ≤ 0.05 each",
            _per_model("compute", _compute_loss)),
    Finding("modular.compute-lstm-train-loss",
            "at the smallest budget the LSTM's best training loss grows with the batch, the "
            "GPT's less",
            "at the smallest α: the LSTM's L_train within α·T at the largest B − at the smallest; "
            "and per seed that rise, the LSTM's − the GPT's: exact permutation tests over seeds, "
            "one-sided, p ≤ 0.05 each",
            _batch_contrast("train_loss", "L_train", "rise", "lstm-std", 1, " nats", own="up")),
    Finding("modular.compute-lstm-val-acc",
            "at the smallest budget the LSTM's validation accuracy drops as the batch grows, the "
            "GPT's less",
            "at the smallest α: the LSTM's A_val within α·T at the smallest B − at the largest; "
            "and per seed the rise from the smallest B to the largest, the GPT's − the LSTM's "
            "(the LSTM's drop the larger): exact permutation tests over seeds, one-sided, "
            "p ≤ 0.05 each",
            _batch_contrast("val_acc", "A_val", "rise", "gpt-sin", 100, " points", own="down")),
    Finding("modular.compute-lstm-val-loss-steeper",
            "at the smallest budget the LSTM's best validation loss rises more steeply with the "
            "batch than the GPT's",
            "at the smallest α, per seed: L_val within α·T at the largest B − at the smallest, "
            "the LSTM's − the GPT's: exact permutation test over seeds, one-sided, p ≤ 0.05",
            _batch_contrast("val_loss", "L_val", "rise", "lstm-std", 1, " nats")),
    Finding("modular.compute-gpt-train-step-varies",
            "at the smallest budget the GPT's step of least training loss varies more with the "
            "batch than the LSTM's",
            "at the smallest α, per seed: the range over B of t_f(L_train) within α·T, the "
            "GPT's − the LSTM's: exact permutation test over seeds, one-sided, p ≤ 0.05",
            _batch_contrast("train_loss_step", "t_f(L_train)", "range", "gpt-sin", 1, " steps")),
    Finding("modular.decay-scores", "a higher weight decay lowers the loss and raises the accuracy",
            "the LSTM: L_val at the smallest weight decay − at the largest, and A_val at the "
            "largest − at the smallest: exact permutation tests over seeds, one-sided, p ≤ 0.05 "
            "each", _per_model("regularization", _decay_scores)),
    Finding("modular.decay", "a higher weight decay generalizes sooner and shrinks the norm",
            "the LSTM: t_f(A_val) and the final ‖θ‖₂, at the smallest weight decay − at the "
            "largest: exact permutation tests over seeds, one-sided, p ≤ 0.05 each",
            _per_model("regularization", _decay)),
    *(Finding(f"modular.attention-{i + 1}", f"on the source's {word} sample the first layer "
              "attends to the start and the recent tokens, the last layer more evenly",
              f"the sanity study's GPT runs whose last state, the one traced, generalized "
              f"(A_val ≥ {GENERALIZED:g}), run by run on modular.attention's sample {i + 1}, the "
              "query positions with at least four "
              "keys, averaged over heads: the first layer's attention weight on the start and the "
              "two most recent positions above its share under uniform attention, and the last "
              "layer's evenness (normalized entropy) above the first's: exact sign-flip tests, "
              "one-sided, p ≤ 0.05 each", _attention(i))
      for i, word in enumerate(("first", "second"))),
)
