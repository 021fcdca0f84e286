"""The character language models' findings: the source's claims that the runs test
(claims/charlm.yaml names the claims; docs/charlm.md repeats the table)."""

from __future__ import annotations

import math
import statistics

from arithrepro import stats
from arithrepro.findings import gru_demo
from arithrepro.findings.base import (NOT_REPRODUCED, REPRODUCED, UNTESTED, Finding, Part,
                                     Verdict, each, missing, values)


# the source's own resolution of a final loss, in nats per character: half the range of its last
# five printed losses (each one minibatch's), from claims/charlm.yaml's *.final rows
SCATTER = {("rnn", "s20"): 0.042, ("gru", "s20"): 0.079, ("gru", "s100"): 0.034,
           ("transformer-1", "s100"): 0.033, ("multi-rnn", "s20"): 0.070,
           ("multi-rnn-3", "s20"): 0.097, ("multi-rnn-4", "s20"): 0.051}


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


DEPTHS = ("multi-rnn", "multi-rnn-3", "multi-rnn-4")   # two, three and four layers


def _depth_alike(rows, params):
    """Each deeper RNN's final validation bits per character on s20 against the one-layer RNN's,
    within alike_bpc: no consistent gain from depth."""
    parts = []
    for m in DEPTHS:
        a, b = (values(rows, "final_bpc", model=x, size="s20") for x in (m, "rnn"))
        if a and b:
            parts.append(Part(f"s20: {m} − rnn", stats.equal_within(a, b, alike_bpc(m, "rnn", "s20")),
                              min(len(a), len(b)), 1, " bpc"))
    return each(parts, "the deeper RNNs and the one-layer RNN on s20")


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

        n = count_params(_built(params, name))
        value, tol, why = PRINTED[name]
        held = abs(n - value) <= tol
        return Verdict(REPRODUCED if held else NOT_REPRODUCED,
                       f"{name}: {n:,} parameters at a {SOURCE_DIMS['vocab_size']}-character "
                       f"vocabulary, against {value:,} ± {tol:,} ({why})", 1)

    return check


def _built(params, name: str, seed: int = 0):
    """The project's `name` at the source's vocabulary and block, untrained."""
    import torch

    from arithrepro.models.registry import MODELS

    spec = dict(params["charlm"]["architectures"][name])
    torch.manual_seed(seed)
    return MODELS[spec.pop("model")].build(spec, dropout=0.0, **SOURCE_DIMS)


def _param_matched(rows, params):
    """The eight-layer transformer's parameter count against the small GRU's, as near as the
    source's other stated match (transformer-1 against the GRU) is: a consistency check of the
    code's counts (the records are not read)."""
    from arithrepro.models.lm import count_params

    n = {m: count_params(_built(params, m)) for m in ("transformer-8", "gru-small",
                                                      "transformer-1", "gru")}
    ratio = lambda a, b: max(n[a], n[b]) / min(n[a], n[b])
    apart, allowed = ratio("transformer-8", "gru-small"), ratio("transformer-1", "gru")
    return Verdict(REPRODUCED if apart <= allowed else NOT_REPRODUCED,
                   f"transformer-8 {n['transformer-8']:,} against gru-small {n['gru-small']:,} "
                   f"parameters, {apart:.2f}× apart; the source's other rough match, "
                   f"transformer-1 {n['transformer-1']:,} against the GRU {n['gru']:,}, is "
                   f"{allowed:.2f}× apart (at a {SOURCE_DIMS['vocab_size']}-character vocabulary)", 1)


FLASH_TOLERANCE = 1e-6   # the source's assertion


def _fused_equals_written(rows, params):
    """The untrained one-layer transformer's logits on a random 2 × 8 input through the fused
    attention and through the written-out one (cost.written_out): the largest difference
    within the source's 1e-6 (a consistency check of the code)."""
    import copy

    import torch

    from arithrepro.cost import written_out

    fused = _built(params, "transformer-1").eval()
    plain = written_out(copy.deepcopy(fused))
    x = torch.randint(0, SOURCE_DIMS["vocab_size"], (2, 8), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        diff = float((fused(x) - plain(x)).abs().max())
    return Verdict(REPRODUCED if diff <= FLASH_TOLERANCE else NOT_REPRODUCED,
                   f"largest logit difference {diff:.1e} on a 2 × 8 input, against the source's "
                   f"{FLASH_TOLERANCE:.0e} (float32)", 1)


# the source prints one minibatch's training loss every PRINT_EVERY steps; its curves are those prints
PRINT_EVERY = 100
CURVES = (("rnn", "s20"), ("gru", "s20"), ("multi-rnn", "s20"), ("multi-rnn-3", "s20"),
          ("multi-rnn-4", "s20"), ("rnn", "s100"), ("gru", "s100"), ("gru-small", "s100"),
          ("transformer-1", "s100"), ("transformer-8", "s100"))
CURVE_WORDS = {"rnn": "Elman RNN", "gru": "GRU", "multi-rnn": "two-layer RNN",
               "multi-rnn-3": "three-layer RNN", "multi-rnn-4": "four-layer RNN",
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


# the source's printed seconds per 100 training steps, (lowest, highest) of a run's prints, on
# its unnamed CPU (claims/charlm.yaml: multirnn.depth-vs-time, transformer1.speed,
# transformer8-vs-gru-small.time)
PRINTED_S = {("rnn", "s20"): (4.13, 4.90), ("multi-rnn", "s20"): (6.34, 7.90),
             ("multi-rnn-3", "s20"): (8.61, 9.80), ("multi-rnn-4", "s20"): (10.79, 11.35),
             ("rnn", "s100"): (17.57, 19.31), ("gru", "s100"): (38.63, 39.90),
             ("transformer-1", "s100"): (3.42, 3.62), ("gru-small", "s100"): (36.36, 40.82),
             ("transformer-8", "s100"): (22.33, 22.95)}
STEPS = "metrics/charlm/steps.csv"


def _timings(params, model: str, schedule: str, attention: str = ""):
    """{round: seconds per 100 steps} of a configuration in charlm-compute's step table, or
    None where the table or the schedule lacks it."""
    from arithrepro.io import read_frame

    sched = params["charlm"]["schedule"].get(schedule)
    if sched is None:
        return None
    frame = read_frame(STEPS, {"T", "round", "s_per_100_steps"}, text={"model", "attention"})
    frame["attention"] = frame["attention"].fillna("")
    rows = frame[(frame["model"] == model) & (frame["T"] == sched["seq_length"])
                 & (frame["attention"] == attention)]
    return dict(zip(rows["round"].astype(int), rows["s_per_100_steps"].astype(float))) or None


def _source_ratio(slow, fast) -> str:
    """The ratio the source's printed ranges allow, where it printed both (two models; it
    printed no run with its attention written out)."""
    if slow != fast and slow in PRINTED_S and fast in PRINTED_S:
        (a, b), (c, d) = PRINTED_S[slow], PRINTED_S[fast]
        return f"; the source's prints {a / d:.2f}–{b / c:.2f}×"
    return ""


def _slower(*pairs):
    """Round by round, the first configuration of each pair ((model, schedule, attention) twice)
    takes longer per step than the second: the log of their time ratio, exact sign-flip test
    over the rounds, one-sided; the geometric-mean ratio on the row."""
    def check(rows, params):
        parts = []
        name = lambda c: c[0] + (f" ({c[2]})" if c[2] else "")   # noqa: E731
        for slow, fast in pairs:
            a, b = _timings(params, *slow), _timings(params, *fast)
            if not a or not b:   # every part or no verdict: a claim is not judged on some of them
                return missing(f"{name(slow if not a else fast)} on "
                               f"{(slow if not a else fast)[1]} in the step table (charlm-compute)")
            both = sorted(set(a) & set(b))
            r = stats.paired([math.log(a[i]) for i in both], [math.log(b[i]) for i in both])
            parts.append(Part(f"{slow[1]}: {name(slow)} / {name(fast)} {math.exp(r.diff):.2f}× per step"
                              + _source_ratio(slow[:2], fast[:2]), r, len(both), 1, " (log ratio)"))
        return each(parts, "the configurations in the step table (charlm-compute)")

    return check


def _advantage_grows(rows, params):
    """Round by round, the RNN's time per step over the one-layer transformer's is larger at the
    longer sequence: log(rnn / transformer-1) at s100 − the same at s20, sign-flip test."""
    t = {(m, s): _timings(params, m, s, a) for m, a in (("rnn", ""), ("transformer-1", "fused"))
         for s in ("s20", "s100")}
    if not all(t.values()):
        return missing("the RNN and the one-layer transformer at s20 and s100 in the step table")
    both = sorted(set.intersection(*(set(v) for v in t.values())))
    ratio = {s: [math.log(t[("rnn", s)][i] / t[("transformer-1", s)][i]) for i in both]
             for s in ("s20", "s100")}
    r = stats.paired(ratio["s100"], ratio["s20"])
    g = {s: math.exp(statistics.fmean(v)) for s, v in ratio.items()}
    return each([Part(f"RNN / transformer-1 per step {g['s20']:.2f}× at s20, {g['s100']:.2f}× at "
                      "s100", r, len(both), 1, " (log ratio)")], "")


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
    Finding("charlm.depth-loss", "adding layers to the RNN gives no consistent gain in its final loss",
            "final validation bits per character on s20, each of two, three and four layers − "
            "one layer: Welch's 95 % interval inside ±{:.3f} bpc, the one-layer RNN's scatter in "
            "the source's last five printed losses ({:.3f} nats), for each depth"
            .format(SCATTER[("rnn", "s20")] / math.log(2), SCATTER[("rnn", "s20")]), _depth_alike),
    Finding("charlm.depth-time", "each layer added to the RNN makes its training step slower",
            "charlm-compute's step table on s20: round by round, the log of each depth's time per "
            "step over the depth below it (1 to 4 layers), exact sign-flip test over the rounds, "
            "one-sided, p ≤ 0.05 for each step of depth",
            _slower(*((("multi-rnn" + sfx, "s20", ""), (below, "s20", "")) for sfx, below in
                      (("", "rnn"), ("-3", "multi-rnn"), ("-4", "multi-rnn-3"))))),
    Finding("charlm.t1-fast", "at the long sequence length the one-layer transformer's training "
            "step is faster than the RNN's and the GRU's",
            "charlm-compute's step table on s100: round by round, the log of the RNN's and of "
            "the GRU's time per step over the transformer's, exact sign-flip test over the "
            "rounds, one-sided, p ≤ 0.05 for each",
            _slower((("rnn", "s100", ""), ("transformer-1", "s100", "fused")),
                    (("gru", "s100", ""), ("transformer-1", "s100", "fused")))),
    Finding("charlm.t8-fast", "the eight-layer transformer's training step is faster than the "
            "small GRU's", "charlm-compute's step table on s100: round by round, the log of the "
            "small GRU's time per step over the transformer's, exact sign-flip test over the "
            "rounds, one-sided, p ≤ 0.05",
            _slower((("gru-small", "s100", ""), ("transformer-8", "s100", "fused")))),
    Finding("charlm.fused-fast", "fused attention makes the transformer's training step faster "
            "than the same attention written out", "charlm-compute's step table, the eight-layer "
            "transformer on s100: round by round, the log of its time per step with attention "
            "written out over fused, exact sign-flip test over the rounds, one-sided, p ≤ 0.05",
            _slower((("transformer-8", "s100", "written-out"), ("transformer-8", "s100", "fused")))),
    Finding("charlm.t-advantage-grows", "the transformer's advantage over the RNN in training "
            "time grows with the sequence length", "charlm-compute's step table: round by round, "
            "the log of the RNN's time per step over the one-layer transformer's at s100 minus "
            "the same at s20, exact sign-flip test over the rounds, one-sided, p ≤ 0.05",
            _advantage_grows),
    Finding("charlm.t8-gru-params", "the eight-layer transformer and the small GRU have roughly "
            "equal parameter counts", "the counts of the untrained models at the source's "
            "vocabulary and block: their ratio no further from one than the source's other "
            "rough match, transformer-1 against the GRU (no run read)", _param_matched),
    Finding("charlm.flash-equal", "fused and written-out attention give the same logits",
            f"the untrained transformer-1 at the source's vocabulary, a random 2 × 8 input: the "
            f"largest logit difference between the two paths within the source's "
            f"{FLASH_TOLERANCE:.0e} (no run read)", _fused_equals_written),
    *(Finding(f"charlm.curve-{m}-{sched}", f"the {CURVE_WORDS[m]}'s printed training loss "
              "falls over the run, though not at every print",
              f"run by run, the {m} on {sched}: its training loss at every {PRINT_EVERY}th step "
              "(one minibatch's, as the source prints it), Kendall's τ against the step, "
              "one-sided, p ≤ 0.05 in every seed, and at least one print above the one before",
              _curve(m, sched)) for m, sched in CURVES),
    *gru_demo.FINDINGS,
)
