"""The looped task's findings: the notebook's claims that the runs test (claims/looped.yaml
names the claims; docs/looped.md repeats the table)."""

from __future__ import annotations

from arithrepro import stats
from arithrepro.findings.base import Finding, Part, each, missing, values


def _beyond(params) -> list[int]:
    d = params["looped"]["data"]
    return sorted(n for n in d["eval_digits"] if n > d["train_digits"])


# "keeps its accuracy" is the notebook's word, with no number beside it (it printed none)
KEEPS = 0.10
KEEPS_WHY = ("a reading of the notebook's 'stays accurate', which it backs with no number; "
             "the standard encoder's drop at the first length past training is the contrast")


def _beats(rows, params):
    """At every length past training, the looped encoder above the standard one."""
    if not (rows["model"] == "looped").any() or not (rows["model"] == "standard").any():
        return missing("both encoders")
    parts = []
    for n in _beyond(params):
        a, b = (values(rows, f"acc_len{n}", model=m) for m in ("looped", "standard"))
        parts.append(Part(f"{n} digits", stats.compare(a, b), min(len(a), len(b)), unit=" points"))
    return each(parts, "both encoders")


def _memorizes(rows, params):
    """Run by run, the standard encoder's exact match at the training length above the first
    length past it."""
    runs = rows[rows["model"] == "standard"]
    if not len(runs):
        return missing("the standard encoder")
    d = params["looped"]["data"]
    inside, first = f"acc_len{d['train_digits']}", f"acc_len{_beyond(params)[0]}"
    return each([Part(f"{d['train_digits']} − {first[7:]} digits",
                      stats.paired(runs[inside], runs[first]), len(runs), unit=" points")], "")


def _generalizes(rows, params):
    """Run by run, the looped encoder's exact match at every length past training within KEEPS
    of its exact match at the training length."""
    runs = rows[rows["model"] == "looped"]
    if not len(runs):
        return missing("the looped encoder")
    d = params["looped"]["data"]
    inside = runs[f"acc_len{d['train_digits']}"]
    return each([Part(f"{d['train_digits']} − {n} digits",
                      stats.against(inside - runs[f"acc_len{n}"], 0.0, KEEPS, scale="difference"),
                      len(runs), unit=" points") for n in _beyond(params)], "")


FINDINGS = (
    Finding("looped.beats-standard",
            "the looped encoder beats the standard one past the training length",
            "exact match at each length past training, looped − standard: exact permutation "
            "test over seeds, one-sided, p ≤ 0.05, at every length", _beats),
    Finding("looped.standard-memorizes",
            "the standard encoder memorizes: it fails past the training length",
            "run by run, exact match at the training length above the first length past it "
            "(exact sign-flip test, one-sided, p ≤ 0.05)", _memorizes),
    Finding("looped.generalizes",
            "the looped encoder generalizes: past the training length it keeps its accuracy",
            "run by run, exact match at the training length minus at each length past it: 95 % "
            f"interval inside ±10 points at every length ({KEEPS_WHY})", _generalizes),
)
