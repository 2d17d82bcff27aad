"""Statistics for measurements: the median with a non-parametric confidence interval, and ratios.

Run times are skewed and heavy-tailed (a few slow outliers from the OS, the allocator, a cold cache), so
d5 reports the **median** with a **distribution-free** confidence interval instead of a mean with a
normal-theory interval. Comparisons are **ratios of medians** ("a takes 1.8x as long as b") with a
bootstrap interval and a rank-test p-value, measured in the same run.

scipy is imported inside the functions that need it so that ``import d5.bench`` stays cheap.

>>> s = summarize([0.0121, 0.0119, 0.0125, 0.0123, 0.0128, 0.0120, 0.0122, 0.0124])
>>> s.median
0.01225
>>> s.ci_exact
True
>>> r = compare([2.0, 2.1, 1.9, 2.05, 1.95, 2.02], [1.0, 1.05, 0.95, 1.02, 0.98, 1.01])
>>> round(r.ratio, 2)
2.0
"""
from __future__ import annotations

import dataclasses
import functools
import math
from typing import Iterable

import numpy as np

from d5.errors import D5Error

# Fixed so that the same samples always give the same comparison interval (results are reproducible and
# diffs between result files reflect the measurements, not the resampling).
BOOTSTRAP_SEED = 20180529
BOOTSTRAP_RESAMPLES = 9999

# Binomial tail probabilities are compared with a little slack so that a coverage that equals the requested
# confidence exactly (e.g. n=2 at 50%) is not lost to floating-point rounding.
_COVERAGE_SLACK = 1e-12


def _as_samples(samples: Iterable[float], what: str = "samples", *, positive: bool = False) -> np.ndarray:
    """Validate measurements and return them as a 1-D float64 array (original order kept)."""
    if isinstance(samples, (str, bytes)):
        raise D5Error(f"{what}: expected a sequence of numbers, got a {type(samples).__name__}")
    try:
        values = np.asarray(list(samples) if not isinstance(samples, np.ndarray) else samples, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise D5Error(f"{what}: expected a sequence of numbers ({err}); pass e.g. a list of floats") from None
    if values.ndim != 1:
        raise D5Error(f"{what}: expected a 1-D sequence of numbers, got an array of shape {values.shape}; "
                      "flatten it or summarize each row separately")
    if values.size == 0:
        raise D5Error(f"{what}: no samples; measure at least once (e.g. repeats >= 1)")
    bad = ~np.isfinite(values)
    if bad.any():
        index = int(np.argmax(bad))
        raise D5Error(f"{what}: sample {index} is {values[index]!r}; remove NaN/infinite values "
                      "(a failed or diverged run) before summarizing")
    if positive and (values <= 0).any():
        index = int(np.argmax(values <= 0))
        raise D5Error(f"{what}: sample {index} is {values[index]!r}, but a ratio of medians needs positive "
                      "measurements (times, throughputs); check the units or the timer")
    return values


def _check_confidence(confidence: float) -> float:
    if not isinstance(confidence, (int, float, np.floating)) or not 0.0 < float(confidence) < 1.0:
        raise D5Error(f"confidence must be a number strictly between 0 and 1 (e.g. 0.95), got {confidence!r}")
    return float(confidence)


@functools.lru_cache(maxsize=1024)
def median_ci_ranks(n: int, confidence: float = 0.95) -> tuple[int, int, float] | None:
    """1-based ranks ``(j, k)`` such that ``[x_(j), x_(k)]`` covers the median with probability >= confidence.

    The method is Le Boudec, *Performance Evaluation of Computer and Communication Systems* (EPFL Press,
    2010), Theorem 2.1 and Table A.1: for n i.i.d. samples of a continuous distribution, the number of
    samples below the true median is Binomial(n, 1/2), so ``P(x_(j) <= median <= x_(k)) = P(j <= B <= k-1)``.
    We take the equal-tailed interval: the largest ``j`` with ``P(B <= j-1) <= (1-confidence)/2`` and, by
    the symmetry of Binomial(n, 1/2), ``k = n + 1 - j``. Returns ``(j, k, coverage)`` where ``coverage`` is
    the exact probability, or ``None`` when even the full range ``[x_(1), x_(n)]`` covers the median with
    probability ``1 - 2**(1-n)`` < confidence (n <= 5 at 95%).

    >>> median_ci_ranks(10, 0.95)[:2]    # Le Boudec's table: n=10 -> [x_(2), x_(9)]
    (2, 9)
    >>> median_ci_ranks(5, 0.95) is None
    True
    """
    from scipy.stats import binom

    if n < 1:
        raise D5Error(f"need at least one sample for a confidence interval, got n={n}")
    confidence = _check_confidence(confidence)
    lower_tail = binom.cdf(np.arange(n + 1), n, 0.5)  # lower_tail[i] = P(B <= i)
    allowed = (1.0 - confidence) / 2.0 + _COVERAGE_SLACK
    # Number of i in 0..n with P(B <= i) <= allowed; j - 1 is the largest such i, so j is that count.
    j = int(np.searchsorted(lower_tail, allowed, side="right"))
    if j < 1:
        return None
    k = n + 1 - j
    coverage = float(1.0 - 2.0 * lower_tail[j - 1])
    return j, k, coverage


@dataclasses.dataclass(frozen=True)
class Summary:
    """The median of a set of measurements with a non-parametric confidence interval.

    ``ci_exact`` is False when there were too few samples for the requested confidence (n <= 5 at 95%):
    then ``[ci_low, ci_high]`` is the full sample range and ``ci_coverage`` its (smaller) true coverage.
    ``std`` is the sample standard deviation (ddof=1), 0.0 for a single sample.

    >>> s = summarize([3.0, 1.0, 2.0, 5.0, 4.0, 6.0, 7.0])
    >>> (s.median, s.ci_low, s.ci_high, s.ci_exact)
    (4.0, 1.0, 7.0, True)
    >>> str(s)
    '4.00 [1.00, 7.00] (95% CI, n=7)'
    """

    n: int
    median: float
    ci_low: float
    ci_high: float
    confidence: float
    ci_exact: bool
    mean: float
    std: float
    min: float
    max: float
    samples: tuple[float, ...]
    ci_coverage: float

    def as_dict(self) -> dict:
        """A JSON-ready dict (samples as a list).

        >>> sorted(summarize([1.0, 2.0]).as_dict())[:3]
        ['ci_coverage', 'ci_exact', 'ci_high']
        """
        data = dataclasses.asdict(self)
        data["samples"] = list(self.samples)
        return data

    def format(self, unit: str = "s", scale: float | None = None, digits: int = 3) -> str:
        """``'12.3 ms [11.9, 12.8]'``: median and CI, scaled for reading.

        With ``scale=None`` and ``unit='s'`` the prefix (s, ms, us, ns) is chosen from the median; with an
        explicit ``scale`` the values are multiplied by it and ``unit`` is printed as given
        (``format('ms', 1e3)``); any other unit is printed unscaled.

        >>> summarize([0.0121, 0.0119, 0.0125, 0.0123, 0.0128, 0.0120, 0.0122]).format()
        '12.2 ms [11.9, 12.8]'
        >>> summarize([250.0, 251.0, 249.0]).format('img/s')
        '250 img/s [249, 251]'
        """
        if scale is None:
            scale, unit = _auto_scale(self.median, unit)
        decimals = _decimals_for(self.median * scale, digits)
        label = f" {unit}" if unit else ""
        low, mid, high = (f"{v * scale:.{decimals}f}" for v in (self.ci_low, self.median, self.ci_high))
        return f"{mid}{label} [{low}, {high}]"

    def __str__(self) -> str:
        percent = f"{self.confidence * 100:g}%"
        if self.ci_exact:
            note = f"({percent} CI, n={self.n})"
        else:
            note = f"(sample range: n={self.n} is too few for a {percent} CI)"
        return f"{self.format(unit='', scale=1.0)} {note}"


_TIME_PREFIXES = ((1.0, "s"), (1e3, "ms"), (1e6, "us"), (1e9, "ns"))


def _auto_scale(value: float, unit: str) -> tuple[float, str]:
    if unit != "s":
        return 1.0, unit
    for scale, name in _TIME_PREFIXES:
        if abs(value) * scale >= 1.0:
            return scale, name
    return _TIME_PREFIXES[-1]


def _decimals_for(value: float, digits: int) -> int:
    """Decimal places that show ``digits`` significant digits of ``value`` (never scientific notation)."""
    if value == 0 or not math.isfinite(value):
        return digits - 1
    return max(0, digits - 1 - math.floor(math.log10(abs(value))))


def summarize(samples: Iterable[float], confidence: float = 0.95) -> Summary:
    """Median, non-parametric confidence interval of the median, and descriptive statistics.

    The interval is ``[x_(j), x_(k)]`` from :func:`median_ci_ranks` (order statistics, Le Boudec's
    method): it makes no assumption about the distribution except independence. If n is too small for
    the requested confidence the full range is returned with ``ci_exact=False``.

    Raises :class:`d5.errors.D5Error` for no samples, NaN/infinite values or a confidence outside (0, 1).

    >>> s = summarize([0.0123] * 30)
    >>> str(s)
    '0.0123 [0.0123, 0.0123] (95% CI, n=30)'
    >>> summarize([1.0, 2.0, 3.0]).ci_exact
    False
    """
    confidence = _check_confidence(confidence)
    values = _as_samples(samples)
    ordered = np.sort(values)
    n = int(values.size)
    ranks = median_ci_ranks(n, confidence)
    if ranks is None:
        j, k, exact = 1, n, False
        coverage = 1.0 - 2.0 * 0.5 ** n  # P(min <= median <= max) for a continuous distribution
    else:
        j, k, coverage = ranks
        exact = True
    return Summary(
        n=n,
        median=float(np.median(values)),
        ci_low=float(ordered[j - 1]),
        ci_high=float(ordered[k - 1]),
        confidence=confidence,
        ci_exact=exact,
        mean=float(values.mean()),
        std=float(values.std(ddof=1)) if n > 1 else 0.0,
        min=float(ordered[0]),
        max=float(ordered[-1]),
        samples=tuple(float(v) for v in values),
        ci_coverage=float(coverage),
    )


@dataclasses.dataclass(frozen=True)
class Ratio:
    """How many times ``a`` takes ``b``: ratio of medians, its bootstrap CI and a Mann-Whitney U p-value.

    ``p_value`` tests whether the two samples come from the same distribution (two-sided); ``significant``
    is ``p_value < 1 - confidence``.

    >>> r = compare([2.0, 2.2, 1.8, 2.1, 1.9], [1.0, 1.1, 0.9, 1.05, 0.95])
    >>> r.ratio
    2.0
    >>> r.significant
    True
    """

    ratio: float
    ci_low: float
    ci_high: float
    confidence: float
    p_value: float
    median_a: float
    median_b: float
    n_a: int
    n_b: int
    method: str

    @property
    def significant(self) -> bool:
        return self.p_value < 1.0 - self.confidence

    def as_dict(self) -> dict:
        """A JSON-ready dict (includes ``significant``).

        >>> compare([2.0, 2.1, 1.9], [1.0, 1.1, 0.9]).as_dict()['ratio']
        2.0
        """
        data = dataclasses.asdict(self)
        data["significant"] = self.significant
        return data

    def __str__(self) -> str:
        decimals = _decimals_for(self.ratio, 3)
        return (f"{self.ratio:.{decimals}f}x [{self.ci_low:.{decimals}f}, {self.ci_high:.{decimals}f}] "
                f"({self.confidence * 100:g}% CI, Mann-Whitney p={self.p_value:.2g}, "
                f"n={self.n_a}/{self.n_b})")


def _ratio_of_medians(a: np.ndarray, b: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.median(a, axis=axis) / np.median(b, axis=axis)


def compare(samples_a: Iterable[float], samples_b: Iterable[float], confidence: float = 0.95) -> Ratio:
    """``a`` takes ``ratio`` times ``b``: ratio of medians with a non-parametric CI and a p-value.

    The CI is a percentile bootstrap (``scipy.stats.bootstrap``, 9,999 independent resamples of each
    sample) of ``median(a) / median(b)``, with a fixed seed (:data:`BOOTSTRAP_SEED`) so the same samples
    always give the same interval. Percentile rather than BCa because BCa's jackknife acceleration is
    unstable for the median (a non-smooth statistic) on the small, tied samples timers produce, and the
    percentile interval respects the ratio's asymmetry (``1/ratio`` gets exactly the inverted interval).
    The p-value is a two-sided Mann-Whitney U test (``scipy.stats.mannwhitneyu``), which, like the
    median, needs no normality. Samples must be positive (times, throughputs), at least 2 in each.

    >>> r = compare([2.0, 2.1, 1.9, 2.05, 1.95], [1.0, 1.05, 0.95, 1.02, 0.98])
    >>> r.ci_low <= r.ratio <= r.ci_high
    True
    """
    from scipy import stats as scipy_stats

    confidence = _check_confidence(confidence)
    a = _as_samples(samples_a, "samples_a", positive=True)
    b = _as_samples(samples_b, "samples_b", positive=True)
    for what, values in (("samples_a", a), ("samples_b", b)):
        if values.size < 2:
            raise D5Error(f"{what}: compare() needs at least 2 samples per side, got {values.size}; "
                          "measure with more repeats")
    ratio = float(_ratio_of_medians(a, b))
    low, high = _bootstrap_ratio_ci(scipy_stats, a, b, confidence)
    if not (math.isfinite(low) and math.isfinite(high)):
        low = high = ratio  # degenerate bootstrap distribution (e.g. constant samples): no spread to show
    p_value = float(scipy_stats.mannwhitneyu(a, b, alternative="two-sided").pvalue)
    # A percentile interval can, rarely, miss the point estimate for a non-smooth statistic like the
    # median; widen it to include the ratio so the reported interval is never self-contradictory.
    return Ratio(ratio=ratio, ci_low=min(low, ratio), ci_high=max(high, ratio), confidence=confidence,
                 p_value=p_value, median_a=float(np.median(a)), median_b=float(np.median(b)),
                 n_a=int(a.size), n_b=int(b.size), method="percentile bootstrap of median ratio")


def _bootstrap_ratio_ci(scipy_stats, a: np.ndarray, b: np.ndarray, confidence: float) -> tuple[float, float]:
    import warnings

    kwargs = dict(statistic=_ratio_of_medians, n_resamples=BOOTSTRAP_RESAMPLES, vectorized=True,
                  paired=False, confidence_level=confidence, method="percentile")
    with warnings.catch_warnings():
        # A degenerate bootstrap distribution warns and yields NaN; compare() handles that case itself.
        warnings.simplefilter("ignore")
        try:
            result = scipy_stats.bootstrap((a, b), rng=np.random.default_rng(BOOTSTRAP_SEED), **kwargs)
        except TypeError:  # scipy < 1.15 names the generator argument random_state
            result = scipy_stats.bootstrap((a, b), random_state=np.random.default_rng(BOOTSTRAP_SEED),
                                           **kwargs)
    interval = result.confidence_interval
    return float(interval.low), float(interval.high)


__all__ = ["Summary", "Ratio", "summarize", "compare", "median_ci_ranks", "BOOTSTRAP_SEED"]
