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
- **the source's number** (`against`): the 95 % interval of our mean decides, against a band of
  the source's value ± a tolerance the claim states: inside the band, reproduced; disjoint from
  it, not reproduced; overlapping it, inconclusive. The interval is Student's t over seeds; where
  every seed scored the same proportion (all at 100 %, say) the seeds cannot give an interval
  and the pooled trials give an exact Clopper-Pearson one (scipy.stats.binomtest). A proportion's
  t interval is cut to [0, 1].
- **above a bar** (`above`): the one-sided one-sample t-test of the mean against a bar derived
  from something stated (chance, a trivial baseline, the source's number); where the seeds have
  no spread, the exact sign test over seeds.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

ALPHA = 0.05
LEVEL = 0.95

YES, NO, CLOSE = "yes", "no", "too close to call"


def _scipy():
    import scipy.stats   # scipy loads only when a verdict is computed

    return scipy.stats


def _sd(xs) -> float:
    return statistics.stdev(xs) if len(xs) > 1 else 0.0


@dataclass(frozen=True)
class Comparison:
    """A against B over seeds. `outcome`: YES (A above B at ALPHA, one-sided), NO (B above A at
    ALPHA), CLOSE (neither). `diff` is mean(A) − mean(B); `ci` Welch's 95 % interval of it."""
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
    def outcome(self) -> str:
        if self.p <= ALPHA:
            return YES
        if self.p_reverse <= ALPHA:
            return NO
        return CLOSE

    def words(self, scale: float = 1.0, unit: str = "") -> str:
        """'Δ +10.0 points [95 % CI +7.1, +12.9], g 2.3, permutation p 0.004 (5 vs 5)'."""
        f = _formatter(scale, self.diff, *self.ci, sign=True)
        ci = "–" if any(map(math.isnan, self.ci)) else f"[{f(self.ci[0])}, {f(self.ci[1])}]"
        g = "–" if math.isnan(self.g) else f"{self.g:.1f}"
        floor = f"; at these n p cannot go below {self.min_p:.3f}" if self.min_p > ALPHA else ""
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
class Paired:
    """The mean of per-run differences x − y over n runs; `p` one-sided (x above y), exact
    sign-flip permutation; `outcome` as Comparison's."""
    n: int
    diff: float
    p: float
    p_reverse: float
    min_p: float

    @property
    def outcome(self) -> str:
        return YES if self.p <= ALPHA else NO if self.p_reverse <= ALPHA else CLOSE

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
    return Paired(len(d), statistics.fmean(d), p, p_rev, min_p=0.5 ** len(d))


@dataclass(frozen=True)
class Agreement:
    """Our mean against the source's value: `interval` (our 95 %), `band` (the source's value ±
    the claim's tolerance), `method` ('t over seeds' | 'exact binomial over pooled trials' |
    'one seed')."""
    n: int
    mean: float
    interval: tuple[float, float]
    method: str
    band: tuple[float, float]

    @property
    def outcome(self) -> str:
        lo, hi = self.interval
        if math.isnan(lo):
            return CLOSE
        if self.band[0] <= lo and hi <= self.band[1]:
            return YES
        if hi < self.band[0] or lo > self.band[1]:
            return NO
        return CLOSE

    def words(self, scale: float = 1.0, unit: str = "") -> str:
        f = _formatter(scale, self.mean, *self.interval, *self.band)
        iv = "no interval" if math.isnan(self.interval[0]) else \
            f"95 % interval [{f(self.interval[0])}, {f(self.interval[1])}]{unit}"
        return (f"{f(self.mean)}{unit} over {self.n} seed{'s' * (self.n != 1)}, {iv} "
                f"({self.method}), against [{f(self.band[0])}, {f(self.band[1])}]{unit}")


def against(values, reported: float, tolerance: float, trials: int | None = None) -> Agreement:
    """Does the mean of `values` (one per seed) agree with `reported` ± `tolerance`? `trials`:
    the problems each seed was scored on, for proportions with no spread over seeds."""
    st = _scipy()
    xs = [float(v) for v in values]
    if not xs:
        raise ValueError("against: no values")
    band = (reported - tolerance, reported + tolerance)
    m = statistics.fmean(xs)
    if len(xs) > 1 and _sd(xs) > 0:
        half = st.t.ppf(0.5 + LEVEL / 2, len(xs) - 1) * _sd(xs) / math.sqrt(len(xs))
        lo, hi = m - half, m + half
        if trials:   # a proportion: the part of Student's interval outside [0, 1] is impossible
            lo, hi = max(lo, 0.0), min(hi, 1.0)
        return Agreement(len(xs), m, (lo, hi), "t over seeds", band)
    if trials and 0.0 <= m <= 1.0:
        total = trials * len(xs)
        k = round(m * total)
        ci = st.binomtest(k, total).proportion_ci(LEVEL, method="exact")
        return Agreement(len(xs), m, (float(ci.low), float(ci.high)),
                         f"exact binomial over {total} pooled trials", band)
    if len(xs) > 1:   # no spread and no trials: the seeds agree exactly, an interval of one point
        return Agreement(len(xs), m, (m, m), "every seed equal", band)
    return Agreement(1, m, (math.nan, math.nan), "one seed", band)


def equal_within(a, b, tolerance: float) -> Agreement:
    """Are the means of two groups of seeds equal within ± `tolerance`? Welch's 95 % interval of
    mean(a) − mean(b) against the band (−tolerance, +tolerance), decided as `against` decides."""
    st = _scipy()
    a, b = [float(x) for x in a], [float(x) for x in b]
    diff = statistics.fmean(a) - statistics.fmean(b)
    band = (-tolerance, tolerance)
    if len(a) > 1 and len(b) > 1 and (_sd(a) > 0 or _sd(b) > 0):
        ci = st.ttest_ind(a, b, equal_var=False).confidence_interval(LEVEL)
        return Agreement(min(len(a), len(b)), diff, (float(ci.low), float(ci.high)),
                         "Welch over seeds", band)
    return Agreement(min(len(a), len(b)), diff, (math.nan, math.nan), "too few seeds", band)


@dataclass(frozen=True)
class Above:
    """The mean of `values` above `bar`: `p` one-sided; `method` names the test."""
    n: int
    mean: float
    bar: float
    p: float
    p_reverse: float   # the same test, the mean below the bar
    method: str

    @property
    def outcome(self) -> str:
        return YES if self.p <= ALPHA else NO if self.p_reverse <= ALPHA else CLOSE

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
        return Above(len(xs), m, bar, p, p_rev, "one-sample t")
    above_, below = sum(x > bar for x in xs), sum(x < bar for x in xs)
    p = float(st.binomtest(above_, len(xs), 0.5, alternative="greater").pvalue)
    p_rev = float(st.binomtest(below, len(xs), 0.5, alternative="greater").pvalue)
    return Above(len(xs), m, bar, p, p_rev, "exact sign")


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
