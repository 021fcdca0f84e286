"""The looped task's findings: the notebook's claims that the runs test (claims/looped.yaml
names the claims; docs/looped.md repeats the table)."""

from __future__ import annotations

from arithrepro import stats
from arithrepro.findings.base import Finding, Verdict, combine, fewest, missing, outcome, values


def _beyond(params) -> list[int]:
    d = params["looped"]["data"]
    return sorted(n for n in d["eval_digits"] if n > d["train_digits"])


def _beats(rows, params):
    """At every length past training, the looped encoder above the standard one."""
    if not (rows["model"] == "looped").any() or not (rows["model"] == "standard").any():
        return missing("both encoders")
    parts, outs = [], []
    for n in _beyond(params):
        c = stats.compare(values(rows, f"acc_len{n}", model="looped"),
                          values(rows, f"acc_len{n}", model="standard"))
        outs.append(outcome(c.outcome))
        parts.append(f"{n} digits: {c.words(100, ' points')}")
    return Verdict(combine(outs), "; ".join(parts), fewest(rows))


def _drop(model: str, expect_drop: bool):
    """Run by run, exact match within the training length against the first length past it:
    the standard encoder falls (memorization), the looped one keeps it within 10 points."""
    def check(rows, params):
        runs = rows[rows["model"] == model]
        if not len(runs):
            return missing(f"the {model} encoder")
        d = params["looped"]["data"]
        inside, first = f"acc_len{d['train_digits']}", f"acc_len{_beyond(params)[0]}"
        if expect_drop:
            p = stats.paired(runs[inside], runs[first])
            return Verdict(outcome(p.outcome), f"{d['train_digits']} − {first[7:]} digits: "
                                                f"{p.words(100, ' points')}", len(runs))
        a = stats.against(runs[inside] - runs[first], 0.0, 0.10)
        return Verdict(outcome(a.outcome), f"{d['train_digits']} − {first[7:]} digits: "
                                            f"{a.words(100, ' points')}", len(runs))

    return check


FINDINGS = (
    Finding("looped.beats-standard",
            "the looped encoder beats the standard one past the training length",
            "exact match at each length past training, looped − standard: exact permutation "
            "test over seeds, one-sided, p ≤ 0.05, at every length", _beats),
    Finding("looped.standard-memorizes",
            "the standard encoder memorizes: it fails past the training length",
            "run by run, exact match at the training length above the first length past it "
            "(exact sign-flip test, one-sided, p ≤ 0.05)", _drop("standard", True)),
    Finding("looped.generalizes",
            "the looped encoder generalizes: past the training length it keeps its accuracy",
            "run by run, exact match at the training length minus at the first length past it: "
            "95 % interval inside ±10 points", _drop("looped", False)),
)
