"""Statistics derived from raw timing samples: percentiles, spread, CI of the median.

Everything is computed from the samples alone (deterministic: numpy percentiles, the exact
binomial law from SciPy), so a stored result can always be re-derived and checked.
:func:`binomial_cdf` is the one binomial helper of accelscope: the CI of the median here and
LoadGen's early-stopping rule (:mod:`accelscope.load.early_stopping`) both use it.
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "NOISE_IQR_RATIO",
    "STRONG_NOISE_IQR_RATIO",
    "Summary",
    "binomial_cdf",
    "median_ci",
    "paired_ratio_ci",
    "percentile",
    "prepare",
    "summarize",
]

NOISE_IQR_RATIO = 0.10
"""IQR/median above this adds a noise warning (as torch.utils.benchmark does)."""
STRONG_NOISE_IQR_RATIO = 0.25
"""IQR/median above this makes the warning a strong one."""

_EXACT_BINOMIAL_MAX_N = 1000


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100) of already-sorted values, linear interpolation.

    Matches ``numpy.percentile(..., method="linear")``.
    """
    if not sorted_values:
        raise ValueError("percentile of no samples")
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile {q} outside 0..100")
    return float(np.percentile(sorted_values, q, method="linear"))


def binomial_cdf(k: int, n: int, p: float) -> float:
    """P(X <= k) for X ~ Binomial(n, p): SciPy's regularised incomplete beta (``bdtr``),
    accurate in tiny tails and for large n. ``scipy.special`` (0.3 s to import; not
    ``scipy.stats``, 1.4 s) is imported on first use, so commands that never compute a CI do
    not pay for it; the Timer calls :func:`prepare` before its clock starts."""
    from scipy import special

    if k < 0:
        return 0.0
    if k >= n:
        return 1.0
    return float(special.bdtr(k, n, p))


def prepare() -> None:
    """Import the statistics backend now (before a measuring clock starts), not on first use."""
    binomial_cdf(0, 1, 0.5)


@functools.cache
def _exact_lower_rank(n: int, alpha: float) -> int:
    """Largest ``l`` with 2 * P(X <= l - 1) <= alpha for X ~ Binomial(n, 1/2); 0 if none."""
    low, high = 0, n // 2 + 1  # the CDF is monotone in l: bisect
    while low < high:
        middle = (low + high + 1) // 2
        if binomial_cdf(middle - 1, n, 0.5) <= alpha / 2.0:
            low = middle
        else:
            high = middle - 1
    return low


def median_ci(sorted_values: Sequence[float], confidence: float = 0.95) -> tuple[float, float]:
    """Distribution-free confidence interval of the median from order statistics.

    The interval ``[x_(l), x_(n-l+1)]`` (1-based) covers the population median with probability
    at least ``confidence``; ``l`` comes from the exact Binomial(n, 1/2) law for n <= 1000 and its
    normal approximation above. With too few samples for the requested confidence (n < 6 at 95 %)
    the interval is the full sample range, which is honest: the median is not pinned down.
    """
    n = len(sorted_values)
    if n == 0:
        raise ValueError("confidence interval of no samples")
    alpha = 1.0 - confidence
    if n <= _EXACT_BINOMIAL_MAX_N:
        lower_rank = _exact_lower_rank(n, alpha)
    else:
        z = statistics.NormalDist().inv_cdf(0.5 + confidence / 2.0)
        lower_rank = math.floor(n / 2.0 - z * math.sqrt(n) / 2.0)
    if lower_rank < 1:
        return sorted_values[0], sorted_values[-1]
    return sorted_values[lower_rank - 1], sorted_values[n - lower_rank]


@dataclass(frozen=True, kw_only=True)
class Summary:
    """Statistics of a set of per-iteration times, in seconds."""

    count: int
    mean_s: float
    median_s: float
    std_s: float
    min_s: float
    max_s: float
    p50_s: float
    p90_s: float
    p95_s: float
    p99_s: float
    p999_s: float
    iqr_s: float
    median_ci_low_s: float
    median_ci_high_s: float
    confidence: float

    @property
    def iqr_ratio(self) -> float:
        """IQR / median: the relative spread the noise warning is based on."""
        return self.iqr_s / self.median_s if self.median_s > 0 else math.inf

    @property
    def median_ci_rel(self) -> float:
        """Half-width of the median's CI relative to the median (the widest side)."""
        if self.median_s <= 0:
            return math.inf
        wide = max(self.median_s - self.median_ci_low_s, self.median_ci_high_s - self.median_s)
        return wide / self.median_s

    def noise_warnings(self) -> list[str]:
        """Human warnings about this measurement's own noise (empty when it is steady)."""
        ratio = self.iqr_ratio
        if ratio > STRONG_NOISE_IQR_RATIO:
            return [
                f"very noisy: IQR is {ratio:.0%} of the median (> {STRONG_NOISE_IQR_RATIO:.0%}); "
                "treat the numbers with great care"
            ]
        if ratio > NOISE_IQR_RATIO:
            return [f"noisy: IQR is {ratio:.0%} of the median (> {NOISE_IQR_RATIO:.0%})"]
        return []


def summarize(samples_s: Sequence[float], confidence: float = 0.95) -> Summary:
    """Compute a :class:`Summary` from raw per-iteration times in seconds."""
    if not samples_s:
        raise ValueError("cannot summarize zero samples")
    ordered = sorted(samples_s)
    n = len(ordered)
    mean = math.fsum(ordered) / n
    variance = math.fsum((x - mean) ** 2 for x in ordered) / (n - 1) if n > 1 else 0.0
    median = percentile(ordered, 50.0)
    low, high = median_ci(ordered, confidence)
    return Summary(
        count=n,
        mean_s=mean,
        median_s=median,
        std_s=math.sqrt(variance),
        min_s=ordered[0],
        max_s=ordered[-1],
        p50_s=median,
        p90_s=percentile(ordered, 90.0),
        p95_s=percentile(ordered, 95.0),
        p99_s=percentile(ordered, 99.0),
        p999_s=percentile(ordered, 99.9),
        iqr_s=percentile(ordered, 75.0) - percentile(ordered, 25.0),
        median_ci_low_s=low,
        median_ci_high_s=high,
        confidence=confidence,
    )


def paired_ratio_ci(
    reference_s: Sequence[float], candidate_s: Sequence[float], confidence: float = 0.95
) -> tuple[float, float, float]:
    """Speedup of ``candidate`` over ``reference`` from paired times (one pair per round of an
    interleaved measurement): the geometric mean of ``reference/candidate`` and its Student-t
    confidence interval on the log scale. ``(ratio, low, high)``; with a single pair the
    interval is unbounded (``0, inf``): one round pins nothing down.
    """
    from scipy import stats

    if len(reference_s) != len(candidate_s) or not reference_s:
        raise ValueError("paired ratio needs the same positive number of times on each side")
    logs = [math.log(r / c) for r, c in zip(reference_s, candidate_s, strict=True)]
    n = len(logs)
    mean = math.fsum(logs) / n
    if n < 2:
        return math.exp(mean), 0.0, math.inf
    sd = math.sqrt(math.fsum((x - mean) ** 2 for x in logs) / (n - 1))
    half = float(stats.t.ppf(0.5 + confidence / 2.0, n - 1)) * sd / math.sqrt(n)
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half)
