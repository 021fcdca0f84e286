"""The modular task's findings: the homework's claims that its studies test
(claims/modular.yaml names the claims; docs/modular.md repeats the table)."""

from __future__ import annotations

from arithrepro import stats
from arithrepro.findings.base import (UNTESTED, Finding, Verdict, combine, fewest, missing, outcome,
                                     values)
from arithrepro.params_reads import peek


GENERALIZED = 0.9   # the source's own bar: a run generalizes once A_val reaches 0.9 (data study)


def _study(rows, study: str):
    return rows[[s.split(".")[0] == study for s in rows["size"]]]


def _per_model(study: str, judge):
    """A check on one study's records: judge(a model's runs, params) -> (outcome, words) for
    each model, combined over the models (findings.combine)."""
    def check(rows, params):
        sub = _study(rows, study)
        if not len(sub):
            return missing(f"the {study} study")
        judged = [(model, *judge(g, params)) for model, g in sub.groupby("model", sort=False)]
        return Verdict(combine([o for _, o, _ in judged]),
                       "; ".join(f"{m}: {words}" for m, _, words in judged), fewest(sub))

    return check


def _late(g, params):
    """Memorize first, generalize later: A_val reaches the source's 0.9, and run by run the
    first step at the best A_val comes after the first step at the best A_train."""
    reach = stats.above(g["val_acc"], GENERALIZED)
    later = stats.paired(g["val_acc_step"], g["train_acc_step"])
    return (combine([outcome(reach.outcome), outcome(later.outcome)]),
            f"A_val {reach.words()}; t_f(A_val) − t_f(A_train) {later.words(1, ' steps')}")


def _gpt_fits_faster(rows, params):
    """The GPT reaches its best training accuracy in fewer steps than the LSTM (sanity)."""
    sub = _study(rows, "sanity")
    lstm, gpt = (values(sub, "train_acc_step", model=m) for m in ("lstm-std", "gpt-sin"))
    if not lstm or not gpt:
        return missing("both models in the sanity study")
    c = stats.compare(lstm, gpt)
    return Verdict(outcome(c.outcome), f"t_f(A_train), LSTM − GPT {c.words(1, ' steps')}",
                   min(len(lstm), len(gpt)))


def _swept(key: str, metric: str, lower_is_better: bool, name: str):
    """Between the smallest and the largest swept value of `key`: the metric of the larger
    value above (or below) the smaller's, by the exact permutation test."""
    def judge(g, params):
        lo, hi = g[key].min(), g[key].max()
        a, b = g[g[key] == hi][metric].dropna(), g[g[key] == lo][metric].dropna()
        c = stats.compare(b, a) if lower_is_better else stats.compare(a, b)
        first, second = (lo, hi) if lower_is_better else (hi, lo)
        return outcome(c.outcome), (f"{name} at {key} {first:g} − at {second:g}: "
                                    f"{c.words(1 if 'step' in metric or 'norm' in metric else 100)}")

    return judge


def _size(g, params):
    """The largest (L, d) reaches its best A_val in fewer steps than the smallest."""
    cells = sorted({(int(r.layers), int(r.d_model)) for r in g.itertuples()})
    small, large = cells[0], cells[-1]
    pick = lambda c: g[(g["layers"] == c[0]) & (g["d_model"] == c[1])]["val_acc_step"]  # noqa: E731
    c = stats.compare(pick(small), pick(large))
    return outcome(c.outcome), (f"t_f(A_val), L{small[0]} d{small[1]} − L{large[0]} d{large[1]}: "
                                f"{c.words(1, ' steps')}")


def _compute(g, params):
    """At the smallest budget α, the smallest batch above the largest in A_val."""
    budgets = sorted(peek(params, "modular", "studies", "compute", "budgets") or [])
    if not budgets:
        return UNTESTED, "no budgets"
    alpha = budgets[0]
    col = f"a{alpha:g}_val_acc"
    lo, hi = g["batch_size"].min(), g["batch_size"].max()
    c = stats.compare(g[g["batch_size"] == lo][col], g[g["batch_size"] == hi][col])
    return outcome(c.outcome), f"A_val within α = {alpha:g}, B {lo} − B {hi}: {c.words(100, ' points')}"


def _decay(g, params):
    """A larger weight decay: an earlier t_f(A_val) and a smaller final ‖θ‖₂."""
    sooner, words1 = _swept("weight_decay", "val_acc_step", True, "t_f(A_val)")(g, params)
    smaller, words2 = _swept("weight_decay", "param_norm", True, "final ‖θ‖₂")(g, params)
    return combine([sooner, smaller]), f"{words1}; {words2}"


def _orders(g, params):
    """Run by run, the binary sums reach their best validation accuracy before the ternary."""
    p = stats.paired(g["o3_val_acc_step"], g["o2_val_acc_step"])
    return outcome(p.outcome), f"t_f(A_val), ternary − binary {p.words(1, ' steps')}"


FINDINGS = (
    Finding("modular.late", "memorize first, generalize later",
            "each model: A_val above the source's 0.9 (one-sample t, one-sided) and, run by run, "
            "t_f(A_val) after t_f(A_train) (exact sign-flip test, one-sided), p ≤ 0.05 each",
            _per_model("sanity", _late)),
    Finding("modular.gpt-fits-faster", "the GPT memorizes the training set sooner than the LSTM",
            "t_f(A_train), LSTM − GPT in the sanity study: exact permutation test over seeds, "
            "one-sided, p ≤ 0.05", _gpt_fits_faster),
    Finding("modular.data", "more training data generalizes better",
            "each model: A_val at the largest r_train − at the smallest: exact permutation test "
            "over seeds, one-sided, p ≤ 0.05",
            _per_model("data", _swept("r_train", "val_acc", False, "A_val"))),
    Finding("modular.orders", "binary sums are learned before ternary ones",
            "each model, run by run: t_f(A_val) of the ternary samples after the binary's (exact "
            "sign-flip test, one-sided, p ≤ 0.05)", _per_model("orders", _orders)),
    Finding("modular.size", "a larger model generalizes sooner",
            "each model: t_f(A_val) of the smallest (L, d) − of the largest: exact permutation "
            "test over seeds, one-sided, p ≤ 0.05", _per_model("size", _size)),
    Finding("modular.compute", "small batches generalize better at small budgets",
            "each model: A_val within the smallest budget α·T, the smallest B − the largest: "
            "exact permutation test over seeds, one-sided, p ≤ 0.05",
            _per_model("compute", _compute)),
    Finding("modular.decay", "a higher weight decay generalizes sooner and shrinks the norm",
            "the LSTM: t_f(A_val) and the final ‖θ‖₂, at the smallest weight decay − at the "
            "largest: exact permutation tests over seeds, one-sided, p ≤ 0.05 each",
            _per_model("regularization", _decay)),
)
