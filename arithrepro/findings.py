"""Findings: what each task's runs are read against, as checks on its run records.

A task lists its findings (`Task.findings`): a claim, its target in words (the task's page
repeats both in its "Findings" table; a test holds them equal) and a check that reads the task's
records (one row per run, as metrics/summary.csv holds them) and the params. The results stage
writes each finding's verdict on the results page; `arithrepro crosscheck` writes them again
for runs under another CPU capability and thread count, side by side.

A check returns a Verdict: whether the finding holds (None: the records cannot say, e.g. a cell
is missing), the numbers it rests on in words, and the fewest seeds of any cell it read. A
verdict on fewer than MIN_SEEDS seeds per cell is shown as a draw, not as a finding: one seed's
result moved from 65 % to 23 % between two CPUs (docs/crosscheck.md).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:  # pandas loads only when a check runs: every task module imports this one
    import pandas as pd


@dataclass(frozen=True)
class Verdict:
    holds: bool | None
    measured: str
    n: int


@dataclass(frozen=True)
class Finding:
    claim: str
    target: str
    check: Callable[[pd.DataFrame, dict], Verdict]


MIN_SEEDS = 3


def verdict_word(f: dict) -> str:
    """How a verdict reads in a table: yes, **no**, – (cannot say), or either on too few seeds."""
    word = {True: "yes", False: "**no**", None: "–"}[f["holds"]]
    if f["holds"] is not None and f["n"] < MIN_SEEDS:
        seeds = "one seed" if f["n"] == 1 else f"{f['n']} seeds"
        return f"{word} on {seeds}: a draw, not a finding"
    return word


def verdicts(findings, rows: pd.DataFrame, params: dict) -> list[dict]:
    """[{claim, target, holds, measured, n}] for `findings` on a task's `rows`."""
    out = []
    for f in findings:
        try:
            v = f.check(rows, params) if len(rows) else Verdict(None, "no runs", 0)
        except KeyError as err:  # records written before the check's metric existed
            v = Verdict(None, f"the records have no {err.args[0]}", 0)
        out.append({"claim": f.claim, "target": f.target, "holds": v.holds,
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


def cells(rows: pd.DataFrame) -> list[tuple[str, str]]:
    """(model, size) of every cell, in the records' order."""
    return list(dict.fromkeys(zip(rows["model"], rows["size"])))


def fewest(rows: pd.DataFrame) -> int:
    return int(rows.groupby(["model", "size"])["seed"].nunique().min()) if len(rows) else 0


def missing(what: str) -> Verdict:
    return Verdict(None, f"no runs of {what}", 0)
