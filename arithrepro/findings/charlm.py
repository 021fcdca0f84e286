"""The character language models' findings: the source's claims that the runs test
(claims/charlm.yaml names the claims; docs/charlm.md repeats the table)."""

from __future__ import annotations

import math

from arithrepro import stats
from arithrepro.findings import gru_demo
from arithrepro.findings.base import (NOT_REPRODUCED, REPRODUCED, UNTESTED, Finding, Part,
                                     Verdict, each, missing, values)


# the source's own resolution of a final loss, in nats per character: half the range of its last
# five printed losses (each one minibatch's), from claims/charlm.yaml's *.final rows
SCATTER = {("rnn", "s20"): 0.042, ("gru", "s20"): 0.079, ("gru", "s100"): 0.034,
           ("transformer-1", "s100"): 0.033}


def alike_bpc(first: str, second: str, schedule: str) -> float:
    """'Alike' as the source can tell: within the finer of the two models' printed scatter,
    in bits per character."""
    return min(SCATTER[(first, schedule)], SCATTER[(second, schedule)]) / math.log(2)


def _bpc(first: str, second: str, schedule: str, alike: bool):
    """Final validation bits per character on `schedule`: `first` − `second` within
    alike_bpc (alike), or `first` above `second` (the exact permutation test)."""
    def check(rows, params):
        a, b = (values(rows, "final_bpc", model=m, size=schedule) for m in (first, second))
        if not a or not b:
            return each([], f"{first} and {second} on {schedule}")
        r = stats.equal_within(a, b, alike_bpc(first, second, schedule)) if alike \
            else stats.compare(a, b)
        return each([(f"{schedule}: {first} − {second}", r, min(len(a), len(b)))], "",
                    scale=1, unit=" bpc")

    return check


def _longer_is_lower(rows, params):
    """Each recurrent model's final bits per character lower on s100 (seq 100, its longer
    budget) than on s20."""
    parts = []
    for m in ("rnn", "gru"):
        a, b = (values(rows, "final_bpc", model=m, size=s) for s in ("s20", "s100"))
        if a and b:
            parts.append(Part(f"{m}: s20 − s100", stats.compare(a, b), min(len(a), len(b)),
                              1, " bpc"))
    return each(parts, "the RNN or the GRU on both schedules")


# the GRU's time per step over the RNN's, the extremes of the source's printed timings per 100
# steps (GRU min / RNN max, GRU max / RNN min; claims/charlm.yaml, gru-vs-rnn.*.time)
STEP_RATIO = {"s20": (8.18 / 4.90, 8.54 / 4.13), "s100": (38.63 / 19.31, 39.90 / 17.57)}


def _step_ratio(schedule: str):
    """Run by run (a seed's GRU against the same seed's RNN), the RNN's characters per second
    over the GRU's, inside the range the source's printed timings allow."""
    def check(rows, params):
        runs = rows[rows["size"] == schedule]
        rnn = runs[runs["model"] == "rnn"].set_index("seed")["tokens_per_s"]
        gru = runs[runs["model"] == "gru"].set_index("seed")["tokens_per_s"]
        ratio = (rnn / gru).dropna()
        if not len(ratio):
            return missing(f"the RNN and the GRU on {schedule}")
        lo, hi = STEP_RATIO[schedule]
        a = stats.against(ratio, (lo + hi) / 2, 0, scale="positive", band=(lo, hi))
        return each([Part(f"{schedule}: GRU / RNN time per step", a, len(ratio), 1, "×")], "")

    return check


# The source prints its models' parameter counts without its vocabulary; 92 characters is the
# vocabulary at which its one-layer transformer's architecture gives the printed 222,592
# (claims/charlm.yaml), and its block is 100 characters.
SOURCE_DIMS = {"vocab_size": 92, "max_len": 100, "pad_id": -1}
PRINTED = {"transformer-1": (222_592, 0, "exact: the source prints every digit"),
           "transformer-8": (1_600_000, 50_000, "the rounding of the printed 1.6e+06 to two "
                                                "significant digits"),
           "gru-small": (150_000, 5_000, "the rounding of the printed 1.5e+05 to two "
                                         "significant digits")}

WORDS = {"transformer-1": "one-layer transformer", "transformer-8": "eight-layer transformer",
         "gru-small": "small GRU"}


def _count(name: str):
    """The parameter count of the project's `name` at the source's size and vocabulary, built
    (untrained) from the params' charlm architectures, against the source's printed count: the
    code's count, which no run changes (a consistency check; the records are not read)."""
    def check(rows, params):
        from arithrepro.models.lm import count_params
        from arithrepro.models.registry import MODELS

        spec = dict(params["charlm"]["architectures"][name])
        model = MODELS[spec.pop("model")].build(spec, dropout=0.0, **SOURCE_DIMS)
        n = count_params(model)
        value, tol, why = PRINTED[name]
        held = abs(n - value) <= tol
        return Verdict(REPRODUCED if held else NOT_REPRODUCED,
                       f"{name}: {n:,} parameters at a {SOURCE_DIMS['vocab_size']}-character "
                       f"vocabulary, against {value:,} ± {tol:,} ({why})", 1)

    return check


# the source prints one minibatch's training loss every PRINT_EVERY steps; its curves are those prints
PRINT_EVERY = 100
CURVES = (("rnn", "s20"), ("gru", "s20"), ("multi-rnn", "s20"), ("rnn", "s100"), ("gru", "s100"),
          ("gru-small", "s100"), ("transformer-1", "s100"), ("transformer-8", "s100"))
CURVE_WORDS = {"rnn": "Elman RNN", "gru": "GRU", "multi-rnn": "two-layer RNN",
               "gru-small": "small GRU", "transformer-1": "one-layer transformer",
               "transformer-8": "eight-layer transformer"}


def printed_losses(model: str, schedule: str, seed: int) -> tuple[list[int], list[float]]:
    """A run's training loss at every PRINT_EVERY-th step, as the source prints it (each one
    minibatch's), from the run's dvclive series (nats per character)."""
    from arithrepro.io import read_frame
    from arithrepro.runs import Files, run_name

    live = Files("charlm", run_name(model, schedule, seed)).live
    frame = read_frame(live / "plots" / "metrics" / "train" / "loss.tsv", {"step", "loss"})
    printed = frame[frame["step"] % PRINT_EVERY == 0].sort_values("step")
    return [int(x) for x in printed["step"]], [float(x) for x in printed["loss"]]


def _curve(model: str, schedule: str):
    """Run by run, the printed training loss falls over the run (Kendall's τ against the step,
    one-sided) and rises somewhere on the way (not monotonically)."""
    def check(rows, params):
        runs = rows[(rows["model"] == model) & (rows["size"] == schedule)]
        parts = []
        for seed in sorted(int(x) for x in runs["seed"]):
            steps, losses = printed_losses(model, schedule, seed)
            if len(steps) >= 2:
                parts.append(Part(f"seed {seed}", stats.trend(steps, losses), 1, 1, " nats"))
        if len(runs) and not parts:
            return Verdict(UNTESTED, f"the runs of {model} on {schedule} are too short to print "
                           f"their loss twice (every {PRINT_EVERY} steps)", 0)
        verdict = each(parts, f"{model} on {schedule}")
        flat = [p.label for p in parts if p.result.rises == 0]
        if flat and verdict.outcome == REPRODUCED:
            return Verdict(NOT_REPRODUCED, f"{verdict.measured}; monotone in {', '.join(flat)}",
                           verdict.n)
        return verdict

    return check


_ALIKE = ("Welch's 95 % interval inside ±{:.3f} bpc, the finer of the two models' scatter in the "
          "source's last five printed losses ({:.3f} nats)")


FINDINGS = (
    *(Finding(f"charlm.params-{name}", f"the {WORDS[name]}'s parameter count is the source's",
              f"the count of the untrained {name} at the source's vocabulary and block, within "
              "the printed count's rounding (built from the params' architectures; no run read)",
              _count(name)) for name in PRINTED),
    Finding("charlm.longer-lower", "after the longer sequences and budget both recurrent models "
            "end lower", "final validation bits per character, s20 − s100 for the RNN and the "
            "GRU: exact permutation test over seeds, one-sided, p ≤ 0.05", _longer_is_lower),
    Finding("charlm.gru-step-s20", "at the short sequence length a GRU step takes about twice the RNN's time",
            "run by run, the RNN's characters per second over the GRU's on s20: 95 % interval "
            "(log scale) inside {:.2f}-{:.2f}, the extremes of the source's printed timings"
            .format(*STEP_RATIO["s20"]), _step_ratio("s20")),
    Finding("charlm.gru-step-s100", "at the long sequence length a GRU step takes about twice the RNN's time",
            "run by run, the RNN's characters per second over the GRU's on s100: 95 % interval "
            "(log scale) inside {:.2f}-{:.2f}, the extremes of the source's printed timings"
            .format(*STEP_RATIO["s100"]), _step_ratio("s100")),
    Finding("charlm.gru-rnn-s20", "at the short sequence length the GRU and the RNN model the text alike",
            "final validation bits per character, GRU − RNN on s20: "
            + _ALIKE.format(alike_bpc("gru", "rnn", "s20"), SCATTER[("rnn", "s20")]),
            _bpc("gru", "rnn", "s20", alike=True)),
    Finding("charlm.gru-rnn-s100", "at the long sequence length the GRU models the text better than the RNN",
            "final validation bits per character, RNN − GRU on s100: exact permutation test over "
            "seeds, one-sided, p ≤ 0.05", _bpc("rnn", "gru", "s100", alike=False)),
    Finding("charlm.t8-gru", "the eight-layer transformer beats the small GRU set beside it",
            "final validation bits per character, small GRU − transformer-8 on s100: exact "
            "permutation test, one-sided, p ≤ 0.05", _bpc("gru-small", "transformer-8", "s100", alike=False)),
    Finding("charlm.t1-little", "the one-layer transformer improves little on the GRU",
            "final validation bits per character, transformer-1 − GRU on s100: "
            + _ALIKE.format(alike_bpc("transformer-1", "gru", "s100"),
                            SCATTER[("transformer-1", "s100")]),
            _bpc("transformer-1", "gru", "s100", alike=True)),
    *(Finding(f"charlm.curve-{m}-{sched}", f"the {CURVE_WORDS[m]}'s printed training loss "
              "falls over the run, though not at every print",
              f"run by run, the {m} on {sched}: its training loss at every {PRINT_EVERY}th step "
              "(one minibatch's, as the source prints it), Kendall's τ against the step, "
              "one-sided, p ≤ 0.05 in every seed, and at least one print above the one before",
              _curve(m, sched)) for m, sched in CURVES),
    *gru_demo.FINDINGS,
)
