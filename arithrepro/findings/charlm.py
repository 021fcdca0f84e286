"""The character language models' findings: the source's claims that the runs test
(claims/charlm.yaml names the claims; docs/charlm.md repeats the table)."""

from __future__ import annotations

from arithrepro import stats
from arithrepro.findings.base import Finding, each, values


BPC_TOLERANCE = 0.05   # bits per character: "much alike", "very little" (about the spread of one
                       # model's final loss over seeds on the offline corpus, docs/charlm.md)


def _bpc(first: str, second: str, schedule: str, alike: bool):
    """Final validation bits per character on `schedule`: `first` − `second` within
    ±BPC_TOLERANCE (alike), or `first` above `second` (the exact permutation test)."""
    def check(rows, params):
        a, b = (values(rows, "final_bpc", model=m, size=schedule) for m in (first, second))
        if not a or not b:
            return each([], f"{first} and {second} on {schedule}")
        r = stats.equal_within(a, b, BPC_TOLERANCE) if alike else stats.compare(a, b)
        return each([(f"{schedule}: {first} − {second}", r, min(len(a), len(b)))], "",
                    scale=1, unit=" bpc")

    return check


FINDINGS = (
    Finding("charlm.gru-rnn-s20", "at the short sequence length the GRU and the RNN model the text alike",
            "final validation bits per character, GRU − RNN on s20: Welch's 95 % interval inside "
            "±0.05 bpc", _bpc("gru", "rnn", "s20", alike=True)),
    Finding("charlm.gru-rnn-s100", "at the long sequence length the GRU models the text better than the RNN",
            "final validation bits per character, RNN − GRU on s100: exact permutation test over "
            "seeds, one-sided, p ≤ 0.05", _bpc("rnn", "gru", "s100", alike=False)),
    Finding("charlm.t8-gru", "the eight-layer transformer beats the small GRU set beside it",
            "final validation bits per character, small GRU − transformer-8 on s100: exact "
            "permutation test, one-sided, p ≤ 0.05", _bpc("gru-small", "transformer-8", "s100", alike=False)),
    Finding("charlm.t1-little", "the one-layer transformer improves little on the GRU",
            "final validation bits per character, transformer-1 − GRU on s100: Welch's 95 % "
            "interval inside ±0.05 bpc", _bpc("transformer-1", "gru", "s100", alike=True)),
)
