"""Findings: the sources' claims that the runs test, as checks on the run records.

Each task's findings (registry.py, a module of checks per task) give an id (the claims
ledger, claims/<task>.yaml, names the claims each one tests), the claim in our words, the test in
words (the task's page repeats both in its "Findings" table; a test holds them equal) and a check
that reads the task's records (one row per run, as metrics/summary.csv holds them) and the
params. The results stage writes each finding's verdict on the results page; `arithrepro
crosscheck` writes them again for runs under another CPU capability and thread count, side by
side.

A check returns a Verdict: its outcome, one word of OUTCOMES decided by a stated test over the
seeds (arithrepro/stats.py) and never by a mean alone, the numbers and the test it rests on in
words, and the fewest seeds of any configuration it read.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from arithrepro import stats
from arithrepro.runs import CONFIG_KEY

if TYPE_CHECKING:  # pandas loads only when a check runs
    import pandas as pd

REPRODUCED, NOT_REPRODUCED, CLOSE, SMALL, UNTESTED = (
    "reproduced", "not reproduced", "too close to call", "n too small to decide", "not tested here")
# a claim's verdict where the same code and runs on another CPU or thread count decide otherwise
# (the claims ledger's, never a single check's)
DIFFERS = "differs between machines"
OUTCOMES = (REPRODUCED, NOT_REPRODUCED, CLOSE, DIFFERS, SMALL, UNTESTED)


@dataclass(frozen=True)
class Verdict:
    outcome: str
    measured: str
    n: int

    def __post_init__(self):
        if self.outcome not in OUTCOMES:
            raise ValueError(f"verdict {self.outcome!r}: expected one of {', '.join(OUTCOMES)}")


@dataclass(frozen=True)
class Finding:
    id: str
    claim: str
    test: str
    check: Callable[[pd.DataFrame, dict], Verdict]


def outcome(stat_outcome: str) -> str:
    """A stats outcome (yes / no / too close to call) as a verdict on the claim."""
    return {stats.YES: REPRODUCED, stats.NO: NOT_REPRODUCED, stats.CLOSE: CLOSE,
            stats.SMALL: SMALL}[stat_outcome]


def verdict_word(f: dict) -> str:
    """How a verdict reads in a table: its outcome, **not reproduced** in bold. Records of
    findings written before outcomes (holds: true / false / null) read in the same words."""
    word = f.get("outcome") or {True: REPRODUCED, False: NOT_REPRODUCED,
                                None: UNTESTED}[f.get("holds")]
    return f"**{word}**" if word == NOT_REPRODUCED else word


def verdicts(findings, rows: pd.DataFrame, params: dict) -> list[dict]:
    """[{id, claim, test, outcome, measured, n}] for `findings` on a task's `rows`."""
    out = []
    for f in findings:
        try:
            v = f.check(rows, params) if len(rows) else Verdict(UNTESTED, "no runs", 0)
        except KeyError as err:  # records written before the check's metric existed
            v = Verdict(UNTESTED, f"the records have no {err.args[0]}", 0)
        out.append({"id": f.id, "claim": f.claim, "test": f.test, "outcome": v.outcome,
                    "measured": v.measured, "n": v.n})
    return out


# --- helpers for the checks ------------------------------------------------------------------

def values(rows: pd.DataFrame, metric: str, **cell) -> list[float]:
    """`metric` of every run of the cell given by column=value pairs, seed order (KeyError when
    the records have no such metric)."""
    if metric not in rows:
        raise KeyError(metric)
    sel = rows
    for k, v in cell.items():
        sel = sel[sel[k] == v]
    return [float(x) for x in sel.sort_values("seed")[metric]
            if x is not None and not (isinstance(x, float) and math.isnan(x))]


def mean(xs: list[float]) -> float:
    return statistics.fmean(xs) if xs else float("nan")


def std(xs: list[float]) -> float:
    return statistics.stdev(xs) if len(xs) > 1 else 0.0


def pct(xs: list[float]) -> str:
    """'61.0 ± 3.2 % (n = 5)', or one value alone."""
    if len(xs) == 1:
        return f"{100 * xs[0]:.1f} % (n = 1)"
    return f"{100 * mean(xs):.1f} ± {100 * std(xs):.1f} % (n = {len(xs)})"


def configurations(rows: pd.DataFrame) -> list[tuple[str, str]]:
    """(model, size) of every configuration (a run without its seed), in the records' order."""
    return list(dict.fromkeys(zip(rows["model"], rows["size"])))


def fewest(rows: pd.DataFrame) -> int:
    return int(rows.groupby(CONFIG_KEY)["seed"].nunique().min()) if len(rows) else 0


def missing(what: str) -> Verdict:
    return Verdict(UNTESTED, f"no runs of {what}", 0)


@dataclass(frozen=True)
class Part:
    """One part of a claim: its label, a stats result, the seeds it rests on, and how its
    numbers read (scale 100 and ' %' for a proportion, 1 and ' steps' for a step count)."""
    label: str
    result: object
    n: int
    scale: float = 100.0
    unit: str = " %"

    def words(self) -> str:
        return f"{self.label}: {self.result.words(self.scale, self.unit)}"


def each(parts: list, none: str, scale: float = 100.0, unit: str = " %") -> Verdict:
    """A claim made of parts, each a Part or (label, a stats result, its seeds) read at `scale`
    and `unit`: one outcome by stats.combine (every part reproduced; any part reversed after
    Holm's correction over the parts), the parts' words joined, and where the outcome is
    undecided what would decide it; no parts: `missing(none)`."""
    if not parts:
        return missing(none)
    parts = [p if isinstance(p, Part) else Part(*p, scale=scale, unit=unit) for p in parts]
    result = outcome(stats.combine([p.result for p in parts]))
    words = "; ".join(p.words() for p in parts)
    if len(parts) > 1:
        words += f" (Holm's correction over the {len(parts)} parts for a reversal)"
    if result in (CLOSE, SMALL):
        open_ = [p for p in parts if getattr(p.result, "needed", "")
                 and p.result.outcome in (stats.CLOSE, stats.SMALL)]
        texts = [p.result.needed for p in open_]
        if len(open_) > 1 and len(set(texts)) == 1:   # said once for the parts it holds for
            which = "each part" if len(open_) == len(parts) else f"each of the {len(open_)} open"
            words += f". To decide ({which}): {texts[0]}"
        elif open_:
            words += ". To decide: " + "; ".join(
                f"{p.label}: {p.result.needed}" if len(parts) > 1 else p.result.needed
                for p in open_)
    return Verdict(result, words, min(p.n for p in parts))
