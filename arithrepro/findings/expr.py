"""The expression task's findings: the source's claims on ReTran, the LSTM and GPT that the
runs test (claims/expr.yaml names the claims; docs/expr.md repeats the table)."""

from __future__ import annotations

from arithrepro import stats
from arithrepro.findings.base import (UNTESTED, Finding, Part, Verdict, configurations, each,
                                     missing, outcome, values)


ORDER = ("retran", "lstm", "gpt")


def _sizes(rows, model: str) -> list[str]:
    """The sizes `model` ran at, small to large (the profile's order)."""
    return list(dict.fromkeys(rows[rows["model"] == model]["size"]))


def _ranked(metric):
    """ReTran above the LSTM and the LSTM above GPT at every size all three ran at."""
    def check(rows, params):
        sizes = [s for s in dict.fromkeys(rows["size"])
                 if all(values(rows, metric, model=m, size=s) for m in ORDER)]
        parts = []
        for s in sizes:
            for hi, lo in zip(ORDER, ORDER[1:]):
                a, b = (values(rows, metric, model=m, size=s) for m in (hi, lo))
                parts.append((f"{s}, {hi} − {lo}", stats.compare(a, b), min(len(a), len(b))))
        return each(parts, "ReTran, the LSTM and GPT at one size", unit=" points")

    return check


def _loss_lowest(rows, params):
    """At every size all three ran at, ReTran's best validation loss below the LSTM's and GPT's."""
    sizes = [s for s in dict.fromkeys(rows["size"])
             if all(values(rows, "best_val_loss", model=m, size=s) for m in ORDER)]
    parts = []
    for s in sizes:
        ours = values(rows, "best_val_loss", model="retran", size=s)
        for other in ORDER[1:]:
            theirs = values(rows, "best_val_loss", model=other, size=s)
            parts.append(Part(f"{s}, {other} − retran", stats.compare(theirs, ours),
                              min(len(ours), len(theirs)), 1, " nats"))
    return each(parts, "ReTran, the LSTM and GPT at one size")


def _drops(rows, params):
    """Run by run, test accuracy above OOD accuracy, per architecture and size."""
    parts = []
    for m, s in configurations(rows):
        runs = rows[(rows["model"] == m) & (rows["size"] == s)].dropna(subset=["test_acc", "ood_acc"])
        parts.append((f"{m} {s}, test − OOD", stats.paired(runs["test_acc"], runs["ood_acc"]),
                      len(runs)))
    return each(parts, "any configuration", unit=" points")


def _grows(metric: str, lower_is_better: bool, scale: float, unit: str):
    """Each architecture better on `metric` at its larger size than at its smaller."""
    def check(rows, params):
        parts = []
        for m in ORDER:
            sizes = _sizes(rows, m)
            for small, large in zip(sizes, sizes[1:]):
                a, b = (values(rows, metric, model=m, size=s) for s in (large, small))
                if lower_is_better:
                    a, b = b, a
                first, second = (small, large) if lower_is_better else (large, small)
                parts.append(Part(f"{m} {first} − {second}", stats.compare(a, b),
                                  min(len(a), len(b)), scale, unit))
        return each(parts, "two sizes of one architecture")

    return check


GPT4O = 0.5568            # the source's GPT-4o, on 10,000 test problems
GPT4O_LENGTHS = (8, 30)   # their lengths in characters, shortest and longest


def _above_gpt4o(rows, params):
    """The largest ReTran above GPT-4o, where the problems are the source's (8-30 characters)."""
    d = params["expr"]["data"]
    lo, hi = d["min_in"], d["max_in"]
    if (lo, hi) != GPT4O_LENGTHS:
        return Verdict(UNTESTED, f"problems of {lo}-{hi} characters; GPT-4o's were "
                                 f"{GPT4O_LENGTHS[0]}-{GPT4O_LENGTHS[1]}", 0)
    sizes = _sizes(rows, "retran")
    if not sizes:
        return missing("ReTran")
    acc = values(rows, "test_acc", model="retran", size=sizes[-1])
    a = stats.above(acc, GPT4O)
    return Verdict(outcome(a.outcome), f"retran {sizes[-1]}: {a.words(100, ' %')}", len(acc))


FINDINGS = (
    Finding("expr.order", "at matched sizes ReTran is more accurate than the LSTM, the LSTM than GPT",
            "test accuracy, ReTran − LSTM and LSTM − GPT at every size: exact permutation test "
            "over seeds, one-sided, p ≤ 0.05", _ranked("test_acc")),
    Finding("expr.ood-order", "out of distribution too, ReTran above the LSTM above GPT",
            "OOD accuracy, the same tests", _ranked("ood_acc")),
    Finding("expr.ood-drop", "accuracy drops past the training lengths",
            "run by run, test accuracy above OOD accuracy, per architecture and size: exact "
            "sign-flip test, one-sided, p ≤ 0.05", _drops),
    Finding("expr.size", "a larger model of each architecture is more accurate",
            "test accuracy, larger − smaller size per architecture: exact permutation test, "
            "one-sided, p ≤ 0.05", _grows("test_acc", False, 100, " points")),
    Finding("expr.loss-size", "a larger model of each architecture reaches a lower validation loss",
            "best validation loss, smaller − larger size per architecture: exact permutation "
            "test over seeds, one-sided, p ≤ 0.05", _grows("best_val_loss", True, 1, " nats")),
    Finding("expr.loss-order", "at matched sizes ReTran reaches the lowest validation loss",
            "best validation loss, LSTM − ReTran and GPT − ReTran at every size: exact "
            "permutation test over seeds, one-sided, p ≤ 0.05", _loss_lowest),
    Finding("expr.gpt4o", "the largest ReTran answers more problems than the LLM the source asked",
            "ReTran's largest configuration above 55.68 % (one-sample t, one-sided, p ≤ 0.05), only on "
            "the source's problems (8-30 characters)", _above_gpt4o),
)
