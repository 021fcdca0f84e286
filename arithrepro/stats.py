"""The statistics a verdict rests on, over seeds, through scipy.

Three questions, each with one stated test:
- **A beats B** (`compare`): the exact permutation test of the difference of means over every
  split of the pooled seeds (scipy.stats.permutation_test), one-sided in the claimed direction,
  at ALPHA; Welch's t-test, its 95 % interval of the difference and Hedges' g beside it. 5 against
  5 seeds have 252 splits, so the smallest one-sided p is 1/252 ≈ 0.004; 2 against 2 have 6, and
  no result can reach 0.05 (`min_p` says so).
- **within x of the same run** (`paired`): a paired comparison over runs (e.g. a run's accuracy
  inside and beyond its training lengths), the exact sign-flip permutation test of the mean
  difference; over 5 runs its smallest one-sided p is 1/32 ≈ 0.031 (and 0.0625 two-sided).
- **the source's number** (`against`): the 95 % interval of our seeds decides, against a band
  of the source's value ± a tolerance the claim derives: inside the band, reproduced; disjoint
  from it, not reproduced; overlapping it, too close to call. The interval never leaves the
  metric's range (SCALES): Student's t over seeds on the logit scale for a proportion, on the log
  scale for a positive quantity (a loss, a step count), on the plain scale otherwise; where every
  seed scored the same proportion (all at 100 %, say) the pooled trials give an exact
  Clopper-Pearson interval (scipy.stats.binomtest).
- **above a bar** (`above`): the one-sided one-sample t-test of the mean against a bar derived
  from something stated (chance, a trivial baseline, the source's number); where the seeds have
  no spread, the exact sign test over seeds.

Every result says whether its n could decide at all (`outcome` SMALL when even the most extreme
data at these n could not reach ALPHA) and how many seeds would (`needed`: the fewest the test can
decide with, and from a measured spread the seeds for 80 % power, POWER). A claim of several parts
is decided by `combine`: reproduced only when every part is (an intersection-union test, exact at
ALPHA without correction); not reproduced when any part's reverse test rejects after Holm's
step-down correction over the parts.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

ALPHA = 0.05
LEVEL = 0.95
POWER = 0.8      # the power a seed count is planned for

YES, NO, CLOSE, SMALL = "yes", "no", "too close to call", "n too small"
# the range a metric lives in, and the scale its interval is computed on
SCALES = ("real", "proportion", "positive", "difference")


def _scipy():
    import scipy.stats   # scipy loads only when a verdict is computed

    return scipy.stats


def _sd(xs) -> float:
    return statistics.stdev(xs) if len(xs) > 1 else 0.0


def _needs(floor: str, power: str = "") -> str:
    return "; ".join(w for w in (floor, power) if w)


def _power_n(d: float, groups: int) -> int | None:
    """The seeds (a side, for two groups) that give Student's t, one-sided at ALPHA, POWER against
    a true standardized effect d; None for an effect of zero or the wrong sign, or beyond 1000."""
    st = _scipy()
    if not math.isfinite(d) or d <= 0:
        return None
    for n in range(2, 1001):
        df = groups * (n - 1)
        ncp = d * math.sqrt(n / groups)
        if 1 - st.nct.cdf(st.t.ppf(1 - ALPHA, df), df, ncp) >= POWER:
            return n
    return None


def _power_words(d: float, groups: int, what: str) -> str:
    n = _power_n(d, groups)
    side = " a side" if groups == 2 else ""
    if n is None:
        return f"no seed count: the measured {what} is not in the claimed direction" if d <= 0 \
            else ""
    return f"about {n} seeds{side} for {POWER:.0%} power at the measured {what} ({d:.2f})"


class _Tested:
    """A one-sided test with its reverse: YES or NO at ALPHA, else SMALL where the smallest p
    these n can give (`min_p`) is above ALPHA, else CLOSE."""

    @property
    def outcome(self) -> str:
        if self.p <= ALPHA:
            return YES
        if self.p_reverse <= ALPHA:
            return NO
        return SMALL if self.min_p > ALPHA else CLOSE


@dataclass(frozen=True)
class Comparison(_Tested):
    """A against B over seeds. `outcome`: YES (A above B at ALPHA, one-sided), NO (B above A at
    ALPHA), SMALL (neither, and these n could not reach ALPHA at all), CLOSE (neither). `diff` is
    mean(A) − mean(B); `ci` Welch's 95 % interval of it."""
    n_a: int
    n_b: int
    diff: float
    p: float           # exact permutation, one-sided, A > B
    p_reverse: float   # the same, B > A
    p_welch: float     # Welch, one-sided, A > B
    ci: tuple[float, float]
    g: float           # Hedges' g (pooled sample std, small-sample corrected)
    min_p: float       # the smallest p the permutation test can give at these n

    @property
    def needed(self) -> str:
        """How many seeds would decide: the fewest a side with which the permutation test can
        reach ALPHA, and the seeds for POWER at the measured effect (Welch's t standing in)."""
        k = next(k for k in range(1, 50) if 1 / math.comb(2 * k, k) <= ALPHA)
        floor = f"{k} seeds a side can reach p ≤ {ALPHA:g}" if self.min_p > ALPHA else ""
        power = "" if math.isnan(self.g) else _power_words(self.g, 2, "Hedges' g")
        return _needs(floor, power)

    def words(self, scale: float = 1.0, unit: str = "") -> str:
        """'Δ +10.0 points [95 % CI +7.1, +12.9], g 2.3, permutation p 0.004 (5 vs 5)'."""
        f = _formatter(scale, self.diff, *self.ci, sign=True)
        floor = f"; at these n p cannot go below {self.min_p:.3f}" if self.min_p > ALPHA else ""
        if any(map(math.isnan, self.ci)) and math.isnan(self.g):   # no spread to measure
            return f"Δ {f(self.diff)}{unit}, permutation p {_p(self.p)} ({self.n_a} vs {self.n_b}{floor})"
        ci = "–" if any(map(math.isnan, self.ci)) else f"[{f(self.ci[0])}, {f(self.ci[1])}]"
        g = "–" if math.isnan(self.g) else f"{self.g:.1f}"
        return (f"Δ {f(self.diff)}{unit} (95 % CI {ci}), g {g}, permutation p {_p(self.p)} "
                f"({self.n_a} vs {self.n_b}{floor})")


def compare(a, b) -> Comparison:
    """Is the mean of `a` above the mean of `b`? Exact over every split of the pooled seeds."""
    import numpy as np

    st = _scipy()
    a, b = [float(x) for x in a], [float(x) for x in b]
    if not a or not b:
        raise ValueError("compare: a group without values")
    # rounded, so that splits whose means differ only by float rounding count as ties
    stat = lambda x, y, axis: np.round(np.mean(x, axis=axis) - np.mean(y, axis=axis), 12)
    n_splits = math.comb(len(a) + len(b), len(a))
    if _sd(a) == _sd(b) == 0.0 and a[0] == b[0]:
        p = p_rev = 1.0
    elif len(a) == len(b) == 1:   # two splits: the observed one and its mirror
        p, p_rev = (0.5, 1.0) if a[0] > b[0] else (1.0, 0.5)
    else:
        kw = dict(permutation_type="independent", n_resamples=math.inf, vectorized=True)
        p = float(st.permutation_test((a, b), stat, alternative="greater", **kw).pvalue)
        p_rev = float(st.permutation_test((a, b), stat, alternative="less", **kw).pvalue)
    diff = statistics.fmean(a) - statistics.fmean(b)
    if len(a) > 1 and len(b) > 1 and (_sd(a) > 0 or _sd(b) > 0):
        p_welch = float(st.ttest_ind(a, b, equal_var=False, alternative="greater").pvalue)
        two = st.ttest_ind(a, b, equal_var=False).confidence_interval(LEVEL)
        ci = (float(two.low), float(two.high))
    else:
        p_welch, ci = math.nan, (math.nan, math.nan)
    return Comparison(len(a), len(b), diff, p, p_rev, p_welch, ci, _hedges(a, b),
                      min_p=1 / n_splits)


def _hedges(a, b) -> float:
    na, nb = len(a), len(b)
    if na < 2 or nb < 2:
        return math.nan
    pooled = math.sqrt(((na - 1) * _sd(a) ** 2 + (nb - 1) * _sd(b) ** 2) / (na + nb - 2))
    if pooled == 0:
        return math.inf if statistics.fmean(a) != statistics.fmean(b) else 0.0
    d = (statistics.fmean(a) - statistics.fmean(b)) / pooled
    return d * (1 - 3 / (4 * (na + nb) - 9))


@dataclass(frozen=True)
class Paired(_Tested):
    """The mean of per-run differences x − y over n runs; `p` one-sided (x above y), exact
    sign-flip permutation; `outcome` as Comparison's."""
    n: int
    diff: float
    p: float
    p_reverse: float
    min_p: float
    d: float = math.nan   # the mean difference over its sample std

    @property
    def needed(self) -> str:
        k = next(k for k in range(1, 50) if 0.5 ** k <= ALPHA)
        floor = f"{k} runs can reach p ≤ {ALPHA:g}" if self.min_p > ALPHA else ""
        power = "" if math.isnan(self.d) else _power_words(self.d, 1, "mean over std of the differences")
        return _needs(floor, power)

    def words(self, scale: float = 1.0, unit: str = "") -> str:
        floor = f"; over {self.n} runs p cannot go below {self.min_p:.3f}" if self.min_p > ALPHA else ""
        f = _formatter(scale, self.diff, sign=True)
        return (f"mean paired Δ {f(self.diff)}{unit}, sign-flip "
                f"permutation p {_p(self.p)} (n = {self.n}{floor})")


def paired(x, y) -> Paired:
    """Is x above y run by run? `x[i]` and `y[i]` belong to one run."""
    import numpy as np

    st = _scipy()
    d = [float(a) - float(b) for a, b in zip(x, y, strict=True)]
    if not d:
        raise ValueError("paired: no runs")
    if all(v == 0 for v in d):
        p = p_rev = 1.0
    elif len(d) == 1:   # two sign flips: the observed one and its mirror
        p, p_rev = (0.5, 1.0) if d[0] > 0 else (1.0, 0.5)
    else:
        kw = dict(permutation_type="samples", n_resamples=math.inf, vectorized=True)
        mean = lambda v, axis: np.round(np.mean(v, axis=axis), 12)
        p = float(st.permutation_test((d,), mean, alternative="greater", **kw).pvalue)
        p_rev = float(st.permutation_test((d,), mean, alternative="less", **kw).pvalue)
    sd = _sd(d)
    effect = statistics.fmean(d) / sd if len(d) > 1 and sd > 0 else math.nan
    return Paired(len(d), statistics.fmean(d), p, p_rev, min_p=0.5 ** len(d), d=effect)


# --- intervals that stay in the metric's range -------------------------------------------------

def _forward(scale: str, x: float, eps: float) -> float:
    if scale == "proportion":
        x = min(max(x, eps), 1 - eps)
        return math.log(x / (1 - x))
    if scale == "positive":
        return math.log(x)
    return x


def _back(scale: str, y: float) -> float:
    if scale == "proportion":
        return 1 / (1 + math.exp(-y)) if y > -700 else 0.0
    if scale == "positive":
        return math.exp(y) if y < 700 else math.inf
    return y


def _edge(scale: str, b: float, eps: float) -> float:
    """A band's edge on the interval's scale; an edge at or past the range's bound is unbounded."""
    if scale == "proportion" and not 0 < b < 1 or scale == "positive" and b <= 0:
        return -math.inf if b <= 0 else math.inf
    return _forward(scale, b, eps)


_SCALE_WORDS = {"real": "", "difference": "", "proportion": ", logit scale",
                "positive": ", log scale"}


@dataclass(frozen=True)
class Agreement:
    """Our seeds against the source's value: `interval` (our 95 %, in the metric's range), `band`
    (the source's value ± the claim's tolerance, or a stated band), `method` ('t over seeds' |
    'exact binomial over pooled trials' | 'every seed equal' | 'one seed'). `p_out`: two-sided p
    that the seeds' centre lies outside the band (1 inside it), for Holm's correction over parts;
    `short`: the seeds that would settle it, where the spread is measured."""
    n: int
    mean: float
    interval: tuple[float, float]
    method: str
    band: tuple[float, float]
    p_out: float = 1.0
    short: int | None = None

    @property
    def outcome(self) -> str:
        lo, hi = self.interval
        if math.isnan(lo):
            return SMALL
        if self.band[0] <= lo and hi <= self.band[1]:
            return YES
        if hi < self.band[0] or lo > self.band[1]:
            return NO
        return CLOSE

    @property
    def p_reverse(self) -> float:
        return self.p_out

    @property
    def needed(self) -> str:
        if self.method == "one seed":
            return "2 seeds or more give an interval"
        if self.short is not None and self.outcome == CLOSE:
            return f"about {self.short} seeds would narrow the interval past the band's edge, " \
                   "if the mean and spread hold"
        return ""

    def words(self, scale: float = 1.0, unit: str = "") -> str:
        f = _formatter(scale, self.mean, *self.interval, *self.band)
        iv = "no interval" if math.isnan(self.interval[0]) else \
            f"95 % interval [{f(self.interval[0])}, {f(self.interval[1])}]{unit}"
        return (f"{f(self.mean)}{unit} over {self.n} seed{'s' * (self.n != 1)}, {iv} "
                f"({self.method}), against [{f(self.band[0])}, {f(self.band[1])}]{unit}")


def against(values, reported: float, tolerance: float, trials: int | None = None,
            scale: str = "real", band: tuple[float, float] | None = None) -> Agreement:
    """Does the mean of `values` (one per seed) agree with `reported` ± `tolerance` (or with a
    stated `band`)? `scale`: one of SCALES, the metric's range; `trials`: the problems each seed
    was scored on, for a proportion (a seed at 0 or 1 reads as half a problem in from the bound,
    and seeds with no spread take the exact binomial interval over the pooled problems)."""
    st = _scipy()
    if scale not in SCALES:
        raise ValueError(f"against: scale {scale!r}: expected one of {', '.join(SCALES)}")
    xs = [float(v) for v in values]
    if not xs:
        raise ValueError("against: no values")
    band = tuple(band) if band is not None else (reported - tolerance, reported + tolerance)
    m = statistics.fmean(xs)
    if scale == "positive" and min(xs) <= 0:
        scale = "real"   # a zero has no logarithm: the plain scale, cut at zero below
    eps = 0.5 / trials if trials else 1e-3
    ys = [_forward(scale, x, eps) for x in xs]
    if len(xs) > 1 and _sd(ys) > 0:
        centre, se, df = statistics.fmean(ys), _sd(ys) / math.sqrt(len(ys)), len(ys) - 1
        half = st.t.ppf(0.5 + LEVEL / 2, df) * se
        lo, hi = _back(scale, centre - half), _back(scale, centre + half)
        if scale == "difference":
            lo, hi = max(lo, -1.0), min(hi, 1.0)
        edges = [_edge(scale, b, eps) for b in band]
        gap = max(edges[0] - centre, centre - edges[1], 0.0)
        p_out = 1.0 if gap == 0 else float(2 * st.t.sf(gap / se, df))
        inner = min(centre - edges[0], edges[1] - centre)
        reach = gap if gap > 0 else inner
        short = next((n for n in range(2, 10001)
                      if st.t.ppf(0.5 + LEVEL / 2, n - 1) * _sd(ys) / math.sqrt(n) < reach), None) \
            if reach > 0 and math.isfinite(reach) else None
        return Agreement(len(xs), m, (lo, hi), "t over seeds" + _SCALE_WORDS[scale], band,
                         p_out, short)
    if trials and 0.0 <= m <= 1.0:
        total = trials * len(xs)
        k = round(m * total)
        test = st.binomtest(k, total)
        ci = test.proportion_ci(LEVEL, method="exact")
        # twice the one-sided exact p at the nearer edge: the dual of Clopper-Pearson's interval
        if m < band[0]:
            p_out = min(1.0, 2 * float(st.binomtest(k, total, band[0], alternative="less").pvalue))
        elif m > band[1]:
            p_out = min(1.0, 2 * float(st.binomtest(k, total, band[1], alternative="greater").pvalue))
        else:
            p_out = 1.0
        return Agreement(len(xs), m, (float(ci.low), float(ci.high)),
                         f"exact binomial over {total} pooled trials", band, p_out)
    if len(xs) > 1:   # no spread and no trials: the seeds agree exactly, an interval of one point
        return Agreement(len(xs), m, (m, m), "every seed equal", band,
                         0.0 if not band[0] <= m <= band[1] else 1.0)
    return Agreement(1, m, (math.nan, math.nan), "one seed", band)


def equal_within(a, b, tolerance: float) -> Agreement:
    """Are the means of two groups of seeds equal within ± `tolerance`? Welch's 95 % interval of
    mean(a) − mean(b) against the band (−tolerance, +tolerance), decided as `against` decides."""
    st = _scipy()
    a, b = [float(x) for x in a], [float(x) for x in b]
    diff = statistics.fmean(a) - statistics.fmean(b)
    band = (-tolerance, tolerance)
    if len(a) > 1 and len(b) > 1 and (_sd(a) > 0 or _sd(b) > 0):
        test = st.ttest_ind(a, b, equal_var=False)
        ci = test.confidence_interval(LEVEL)
        se = (ci.high - ci.low) / 2 / st.t.ppf(0.5 + LEVEL / 2, test.df)
        gap = max(-tolerance - diff, diff - tolerance, 0.0)
        p_out = 1.0 if gap == 0 else float(2 * st.t.sf(gap / se, test.df))
        return Agreement(min(len(a), len(b)), diff, (float(ci.low), float(ci.high)),
                         "Welch over seeds", band, p_out)
    return Agreement(min(len(a), len(b)), diff, (math.nan, math.nan), "one seed", band)


@dataclass(frozen=True)
class Above(_Tested):
    """The mean of `values` above `bar`: `p` one-sided; `method` names the test."""
    n: int
    mean: float
    bar: float
    p: float
    p_reverse: float   # the same test, the mean below the bar
    method: str
    d: float = math.nan   # (mean − bar) over the sample std

    @property
    def min_p(self) -> float:
        return 0.5 ** self.n if self.method == "exact sign" else 0.0

    @property
    def needed(self) -> str:
        if self.min_p > ALPHA:
            k = next(k for k in range(1, 50) if 0.5 ** k <= ALPHA)
            return f"2 seeds with any spread, or {k} all on one side, can reach p ≤ {ALPHA:g}"
        return "" if math.isnan(self.d) else _power_words(self.d, 1, "(mean − bar) / std")

    def words(self, scale: float = 1.0, unit: str = "") -> str:
        f = _formatter(scale, self.mean, self.bar)
        return (f"{f(self.mean)}{unit} against {f(self.bar)}{unit}, "
                f"{self.method} p {_p(self.p)} (n = {self.n})")


def above(values, bar: float) -> Above:
    """Is the mean of `values` above `bar`? One-sample t-test, one-sided; the exact sign test
    when the values have no spread."""
    st = _scipy()
    xs = [float(v) for v in values]
    if not xs:
        raise ValueError("above: no values")
    m = statistics.fmean(xs)
    if len(xs) > 1 and _sd(xs) > 0:
        p = float(st.ttest_1samp(xs, bar, alternative="greater").pvalue)
        p_rev = float(st.ttest_1samp(xs, bar, alternative="less").pvalue)
        return Above(len(xs), m, bar, p, p_rev, "one-sample t", (m - bar) / _sd(xs))
    above_, below = sum(x > bar for x in xs), sum(x < bar for x in xs)
    p = float(st.binomtest(above_, len(xs), 0.5, alternative="greater").pvalue)
    p_rev = float(st.binomtest(below, len(xs), 0.5, alternative="greater").pvalue)
    return Above(len(xs), m, bar, p, p_rev, "exact sign")


@dataclass(frozen=True)
class Trend(_Tested):
    """A series falling over its steps within one run: Kendall's τ of value against step,
    `p` one-sided (falling), `p_reverse` (rising); `rises` counts the points above the one before
    (a monotone fall has none)."""
    n: int
    tau: float
    p: float
    p_reverse: float
    rises: int
    first: float
    last: float

    @property
    def min_p(self) -> float:
        return 1 / math.factorial(self.n) if self.n < 10 else 0.0

    @property
    def needed(self) -> str:
        return "more points of the series" if self.min_p > ALPHA else ""

    def words(self, scale: float = 1.0, unit: str = "") -> str:
        f = _formatter(scale, self.first, self.last)
        return (f"{f(self.first)} → {f(self.last)}{unit}, Kendall τ {self.tau:+.2f} over "
                f"{self.n} points, p {_p(self.p)}, {self.rises} rise{'s' * (self.rises != 1)}")


def trend(steps, values) -> Trend:
    """Does the series fall over `steps`? Kendall's τ, one-sided (scipy's exact or asymptotic
    p, as it chooses for n), and how often a point rises above the one before it."""
    st = _scipy()
    xs, ys = [float(v) for v in steps], [float(v) for v in values]
    if len(xs) != len(ys) or len(xs) < 2:
        raise ValueError("trend: needs two or more (step, value) points")
    fall = st.kendalltau(xs, ys, alternative="less")
    rise = st.kendalltau(xs, ys, alternative="greater")
    rises = sum(b > a for a, b in zip(ys, ys[1:]))
    return Trend(len(xs), float(fall.statistic), float(fall.pvalue), float(rise.pvalue), rises,
                 ys[0], ys[-1])


@dataclass(frozen=True)
class Draw:
    """Could `reported`, one value the source measured, be one more draw of what `values`
    measure here? The Student-t prediction interval for a new value (on the log scale for a
    positive quantity): `p_reverse`, two-sided, the chance of a draw as far out; NO at ALPHA,
    else YES (consistent, which a wide spread makes easy; the words give the interval)."""
    n: int
    reported: float
    interval: tuple[float, float]
    p_reverse: float
    log: bool

    p = 1.0   # "consistent" is not a rejection: it only ever falls to NO

    @property
    def outcome(self) -> str:
        if self.n < 3:
            return SMALL
        return NO if self.p_reverse <= ALPHA else YES

    @property
    def needed(self) -> str:
        return "3 or more seeds give a prediction interval" if self.n < 3 else ""

    def words(self, scale: float = 1.0, unit: str = "") -> str:
        f = (lambda v: f"{v * scale:.3g}") if self.log else \
            _formatter(scale, self.reported, *self.interval)
        where = "log scale, " if self.log else ""
        return (f"the source's {f(self.reported)}{unit} against our 95 % prediction interval "
                f"[{f(self.interval[0])}, {f(self.interval[1])}]{unit} ({where}Student's t over "
                f"{self.n} seeds), p {_p(self.p_reverse)} as far out")


def draw(values, reported: float, positive: bool = True) -> Draw:
    """Is `reported` inside the 95 % prediction interval of `values` (log scale if positive)?"""
    st = _scipy()
    xs = [float(v) for v in values]
    tf = (lambda v: math.log(v)) if positive else (lambda v: v)
    back = math.exp if positive else (lambda v: v)
    ys = [tf(x) for x in xs]
    n = len(ys)
    if n < 3:
        return Draw(n, float(reported), (math.nan, math.nan), 1.0, positive)
    m, sd = statistics.fmean(ys), _sd(ys)
    scale = sd * math.sqrt(1 + 1 / n)
    half = float(st.t.ppf(0.5 + LEVEL / 2, n - 1)) * scale
    t = (tf(reported) - m) / scale if scale > 0 else (0.0 if tf(reported) == m else math.inf)
    p = float(2 * st.t.sf(abs(t), n - 1))
    return Draw(n, float(reported), (back(m - half), back(m + half)), p, positive)


# --- a claim of several parts ------------------------------------------------------------------

def holm(ps) -> list[float]:
    """Holm's step-down adjusted p-values, in the order given (each capped at 1)."""
    ps = [float(p) for p in ps]
    order = sorted(range(len(ps)), key=ps.__getitem__)
    out, running = [1.0] * len(ps), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(ps) - rank) * ps[i]))
        out[i] = running
    return out


def combine(results) -> str:
    """One outcome for a claim of several parts, each a result above: NO when a part's reverse
    test rejects after Holm's correction over the parts; YES when every part is YES (an
    intersection-union test: exact at ALPHA as it stands); SMALL when a part undecided could not
    decide at its n; else CLOSE. No parts: ValueError."""
    results = list(results)
    if not results:
        raise ValueError("combine: no parts")
    if len(results) == 1:
        return results[0].outcome
    if any(p <= ALPHA for p in holm([r.p_reverse for r in results])):
        return NO
    outs = [r.outcome for r in results]
    if all(o == YES for o in outs):
        return YES
    return SMALL if SMALL in outs else CLOSE


def _p(p: float) -> str:
    return "–" if math.isnan(p) else f"{p:.3f}" if p >= 0.001 else f"{p:.1e}"


def _formatter(scale: float, *values: float, sign: bool = False):
    """How the numbers of one result read: percentages and points to one decimal, fractions to
    three; counts (a parameter count, steps: any shown value of 100 or more on scale 1) as whole
    numbers with thousands separators."""
    shown = [abs(scale * v) for v in values if math.isfinite(v)]
    if scale == 1 and shown and max(shown) >= 100:
        spec = ",.0f"
    else:
        spec = f".{1 if scale >= 100 else 3 if scale == 1 else 2}f"
    return lambda v: format(scale * v, ("+" if sign else "") + spec)
