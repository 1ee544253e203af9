"""Statistics derived from raw timing samples: percentiles, spread, CI of the median.

Everything is computed from the samples alone (deterministic: numpy percentiles, the exact
binomial law from SciPy), so a stored result can always be re-derived and checked.
:func:`binomial_cdf` is the one binomial helper of accelscope: the CI of the median here and
LoadGen's early-stopping rule (:mod:`accelscope.load.early_stopping`) both use it.

:func:`process_ratio` is the one rule for a ratio between figures measured in different
processes (:data:`BETWEEN_PROCESSES_RULE`): ``compare``, bench's speedup column and ``tune``'s
verdict all go through it.
"""

from __future__ import annotations

import functools
import math
import statistics
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import numpy as np

from accelscope.serialise import Unbounded, dump

__all__ = [
    "BETWEEN_PROCESSES_RULE",
    "NOISE_IQR_RATIO",
    "STRONG_NOISE_IQR_RATIO",
    "ProcessRatio",
    "RatioBasis",
    "RatioEstimate",
    "Summary",
    "binomial_cdf",
    "bootstrap_ratio",
    "holm_adjust",
    "median_ci",
    "paired_ratio",
    "paired_ratio_ci",
    "percentile",
    "prepare",
    "process_ratio",
    "quantile_ci",
    "ratio_from_intervals",
    "rounds_to_settle",
    "summarise",
    "welch_ratio",
]

NOISE_IQR_RATIO = 0.10
"""IQR/median above this adds a noise warning (as torch.utils.benchmark does)."""
STRONG_NOISE_IQR_RATIO = 0.25
"""IQR/median above this makes the warning a strong one."""

_EXACT_BINOMIAL_MAX_N = 1000
_BOOTSTRAP_MAX_SAMPLES = 10_000
_BOOTSTRAP_MIN_TAIL = 10
"""Below this many resamples beyond ratio 1, the bootstrap p-value comes from the normal law
of the log-ratio (a count of 0 cannot say how small p is, and Holm multiplies it)."""


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


def summarise(samples_s: Sequence[float], confidence: float = 0.95) -> Summary:
    """Compute a :class:`Summary` from raw per-iteration times in seconds."""
    if not samples_s:
        raise ValueError("cannot summarise zero samples")
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


@dataclass(frozen=True, kw_only=True)
class RatioEstimate:
    """``candidate / baseline`` of some statistic, with its ``confidence`` interval and the
    two-sided p-value of "no difference" (``ratio == 1``). ``method`` names how both were
    obtained, for the output; ``units`` is the statistical unit and how many per side."""

    # Stored through accelscope.serialise.dump: an unbounded side (inf) as null.
    ratio: Unbounded
    low: Unbounded
    high: Unbounded
    p_value: Unbounded
    confidence: Unbounded
    method: str
    units: str

    @property
    def separated(self) -> bool:
        """True when the interval excludes 1."""
        return self.low > 1.0 or self.high < 1.0


def bootstrap_ratio(
    baseline: Sequence[float],
    candidate: Sequence[float],
    *,
    q: float = 50.0,
    confidence: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
) -> RatioEstimate:
    """Ratio of the ``q``-th percentiles (candidate over baseline) of two independent samples,
    with a percentile-bootstrap interval (``scipy.stats.bootstrap``, each side resampled on its
    own, seeded so the figure is reproducible; sides over 10 000 samples are subsampled) and the
    bootstrap p-value of ratio 1 (twice the smaller tail of the bootstrap distribution beyond 1,
    consistent with the interval; when fewer than 10 resamples lie beyond 1, from the normal
    law of the log-ratios, so a tiny p stays comparable under Holm). The samples are the
    unit: this covers the noise *within* the runs that produced them, not drift between
    processes."""
    from scipy import stats

    a = np.asarray(baseline, dtype=float)
    b = np.asarray(candidate, dtype=float)
    if a.size < 2 or b.size < 2:
        raise ValueError("a bootstrap ratio needs at least two samples on each side")
    sizes = f"{a.size} vs {b.size}"
    generator = np.random.default_rng(seed)
    if a.size > _BOOTSTRAP_MAX_SAMPLES:  # a seeded subsample bounds the cost (Timer keeps 100k)
        a = generator.choice(a, _BOOTSTRAP_MAX_SAMPLES, replace=False)
        sizes += f", each side subsampled to {_BOOTSTRAP_MAX_SAMPLES}"
    if b.size > _BOOTSTRAP_MAX_SAMPLES:
        b = generator.choice(b, _BOOTSTRAP_MAX_SAMPLES, replace=False)

    def statistic(x: Any, y: Any, axis: int = -1) -> Any:
        return np.percentile(y, q, axis=axis) / np.percentile(x, q, axis=axis)

    result = stats.bootstrap(
        (a, b),
        statistic,
        paired=False,
        vectorized=True,
        n_resamples=resamples,
        batch=max(1, min(resamples, 20_000_000 // max(a.size + b.size, 1))),
        confidence_level=confidence,
        method="percentile",
        rng=generator,
    )
    spread = np.asarray(result.bootstrap_distribution)
    ratio = float(statistic(a, b))
    tail = min(int(np.sum(spread <= 1.0)), int(np.sum(spread >= 1.0)))
    if tail >= _BOOTSTRAP_MIN_TAIL:
        p_value = min(1.0, 2.0 * tail / spread.size)
    else:  # too few resamples beyond 1 to count: the normal law of the log-ratio's spread
        logs = np.log(spread[spread > 0])
        sd = float(np.std(logs, ddof=1)) if logs.size > 1 else 0.0
        z = abs(math.log(ratio)) / sd if sd > 0 and ratio > 0 else math.inf
        p_value = 2.0 * statistics.NormalDist().cdf(-z)
    interval = result.confidence_interval
    return RatioEstimate(
        ratio=ratio,
        low=float(interval.low),
        high=float(interval.high),
        p_value=p_value,
        confidence=confidence,
        method=f"bootstrap of p{q:g} ratio ({resamples} resamples, percentile interval)",
        units=f"samples ({sizes})",
    )


def welch_ratio(
    baseline: Sequence[float], candidate: Sequence[float], confidence: float = 0.95
) -> RatioEstimate:
    """Ratio of geometric means of per-process values (one value per run or worker), with
    Welch's t interval and p-value on the log scale: the test to use when processes, not
    samples, are the unit (drift between processes is then inside the interval)."""
    from scipy import stats

    a = np.log(np.asarray(baseline, dtype=float))
    b = np.log(np.asarray(candidate, dtype=float))
    if a.size < 2 or b.size < 2:
        raise ValueError("a Welch ratio needs at least two values on each side")
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # constant sides: no spread to test
        test = stats.ttest_ind(b, a, equal_var=False)
        interval = test.confidence_interval(confidence)
    p_value = float(test.pvalue)
    if math.isnan(p_value):  # both sides constant: no spread at all
        p_value = 1.0 if np.mean(a) == np.mean(b) else 0.0
    low, high = float(interval.low), float(interval.high)
    diff = float(np.mean(b) - np.mean(a))
    return RatioEstimate(
        ratio=math.exp(diff),
        low=math.exp(low) if not math.isnan(low) else math.exp(diff),
        high=math.exp(high) if not math.isnan(high) else math.exp(diff),
        p_value=p_value,
        confidence=confidence,
        method="Welch t on log values (ratio of geometric means)",
        units=f"processes ({a.size} vs {b.size})",
    )


def paired_ratio(
    baseline: Sequence[float], candidate: Sequence[float], confidence: float = 0.95
) -> RatioEstimate:
    """``candidate / baseline`` from paired values (one pair per interleaved round): the
    geometric mean of the per-pair ratios, its Student-t interval on the log scale and the
    paired t-test's p-value. With one pair the interval is unbounded and p is 1."""
    from scipy import stats

    if len(baseline) != len(candidate) or not baseline:
        raise ValueError("paired ratio needs the same positive number of values on each side")
    logs = np.log(np.asarray(candidate, dtype=float) / np.asarray(baseline, dtype=float))
    n = logs.size
    mean = float(np.mean(logs))
    method = "paired t on log ratios (geometric mean of per-round ratios)"
    units = f"rounds ({n} pairs)"
    if n < 2:
        return RatioEstimate(
            ratio=math.exp(mean),
            low=0.0,
            high=math.inf,
            p_value=1.0,
            confidence=confidence,
            method=method,
            units=units,
        )
    sd = float(np.std(logs, ddof=1))
    if sd == 0.0:
        return RatioEstimate(
            ratio=math.exp(mean),
            low=math.exp(mean),
            high=math.exp(mean),
            p_value=1.0 if mean == 0.0 else 0.0,
            confidence=confidence,
            method=method,
            units=units,
        )
    half = float(stats.t.ppf(0.5 + confidence / 2.0, n - 1)) * sd / math.sqrt(n)
    t_value = mean / (sd / math.sqrt(n))
    p_value = float(2.0 * stats.t.sf(abs(t_value), n - 1))
    return RatioEstimate(
        ratio=math.exp(mean),
        low=math.exp(mean - half),
        high=math.exp(mean + half),
        p_value=p_value,
        confidence=confidence,
        method=method,
        units=units,
    )


BETWEEN_PROCESSES_RULE = (
    "a difference between figures measured in different processes is claimed only when its "
    "interval includes the variance between processes, estimated from repeated runs (2+ per "
    "side, the run as the unit: Welch t on log figures) or from interleaved rounds (2+, the "
    "round as the unit: paired t on log ratios); with one run per side that variance is not "
    "measured, never assumed zero, and the answer is 'cannot tell'"
)
"""The one rule for ratios that cross processes (stored beside the numbers it judges)."""


class RatioBasis(StrEnum):
    """What a ratio between processes rests on (the statistical unit)."""

    RUNS = "runs"
    """Several runs (processes) per side, unpaired: each run's figure is one value."""
    ROUNDS = "interleaved rounds"
    """Both sides measured alternately, round by round: one paired value per round."""


@dataclass(frozen=True, kw_only=True)
class ProcessRatio:
    """``candidate / baseline`` of figures from different processes, judged by
    :data:`BETWEEN_PROCESSES_RULE`. ``estimate`` is the interval with the variance between
    processes in it, or ``None`` when the data cannot give one (``why`` says what is missing);
    only then, never from samples within one run, may a caller claim a difference.
    ``ratio`` is the point figure either way (geometric means; one run each: the plain ratio)."""

    ratio: float
    basis: RatioBasis
    baseline_count: int
    """Runs (or rounds) behind the baseline's figure."""
    candidate_count: int
    """Runs (or rounds) behind the candidate's figure."""
    estimate: RatioEstimate | None
    why: str = ""
    """Why there is no interval to claim from ('' when there is one)."""
    rule: str = BETWEEN_PROCESSES_RULE

    @property
    def claimable(self) -> bool:
        """True when an interval with the variance between processes in it exists: a
        difference may then be claimed if that interval (and the caller's test) say so."""
        return self.estimate is not None

    @property
    def counts_text(self) -> str:
        """``3 vs 3 runs`` or ``6 interleaved rounds``."""
        if self.basis is RatioBasis.ROUNDS:
            return f"{self.baseline_count} interleaved round{'s' * (self.baseline_count != 1)}"
        return f"{self.baseline_count} vs {self.candidate_count} runs"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict: the figures, the interval (``None``: cannot tell) and the rule."""
        return {
            "ratio": None if math.isinf(self.ratio) else self.ratio,
            "basis": self.basis.value,
            "baseline_count": self.baseline_count,
            "candidate_count": self.candidate_count,
            "claimable": self.claimable,
            "estimate": None if self.estimate is None else dump(self.estimate),
            "why": self.why,
            "rule": self.rule,
        }


def _geometric_mean(values: Sequence[float]) -> float:
    """The geometric mean (one value: itself, exactly)."""
    if len(values) == 1:
        return float(values[0])
    return float(math.exp(np.mean(np.log(np.asarray(values, dtype=float)))))


def process_ratio(
    baseline: Sequence[float],
    candidate: Sequence[float],
    *,
    paired: bool = False,
    confidence: float = 0.95,
) -> ProcessRatio:
    """``candidate / baseline`` where each value comes from its own process: one figure per run
    of each side (``paired=False``: :func:`welch_ratio`, 2+ runs per side), or one figure per
    interleaved round of both sides (``paired=True``: :func:`paired_ratio`, 2+ rounds, same
    order on both sides). With fewer there is no estimate of the variance between processes,
    so no interval is given and the result is not claimable (:data:`BETWEEN_PROCESSES_RULE`).
    Values must be positive (the tests run on logs)."""
    if not baseline or not candidate:
        raise ValueError("a ratio between processes needs at least one value on each side")
    if min(*baseline, *candidate) <= 0.0:
        raise ValueError("a ratio between processes needs positive values")
    if paired:
        if len(baseline) != len(candidate):
            raise ValueError("paired rounds need the same number of values on each side")
        rounds = len(baseline)
        if rounds < 2:
            return ProcessRatio(
                ratio=candidate[0] / baseline[0],
                basis=RatioBasis.ROUNDS,
                baseline_count=1,
                candidate_count=1,
                estimate=None,
                why="one interleaved round: the spread between rounds is not measured",
            )
        estimate = paired_ratio(baseline, candidate, confidence)
        return ProcessRatio(
            ratio=estimate.ratio,
            basis=RatioBasis.ROUNDS,
            baseline_count=rounds,
            candidate_count=rounds,
            estimate=estimate,
        )
    counts = (len(baseline), len(candidate))
    if min(counts) < 2:
        single = "one run per side" if counts == (1, 1) else f"{counts[0]} vs {counts[1]} runs"
        return ProcessRatio(
            ratio=_geometric_mean(candidate) / _geometric_mean(baseline),
            basis=RatioBasis.RUNS,
            baseline_count=counts[0],
            candidate_count=counts[1],
            estimate=None,
            why=f"{single}: the drift between processes is not measured, and is not assumed zero",
        )
    estimate = welch_ratio(baseline, candidate, confidence)
    return ProcessRatio(
        ratio=estimate.ratio,
        basis=RatioBasis.RUNS,
        baseline_count=counts[0],
        candidate_count=counts[1],
        estimate=estimate,
    )


def rounds_to_settle(
    log_ratios_sd: float, gap_log: float, confidence: float = 0.95, limit: int = 10_000
) -> int | None:
    """The smallest number of pairs (to within 10 % above 100) whose Student-t interval (half-width
    ``t(n-1) * sd / sqrt(n)``) would be narrower than ``gap_log`` (the log distance between the
    estimate and the threshold), at the spread seen so far; ``None`` when even ``limit`` would
    not (the estimate sits on the threshold)."""
    from scipy import stats

    if gap_log <= 0.0:
        return None
    if log_ratios_sd <= 0.0:
        return 2
    n = 2
    while n <= limit:
        if float(stats.t.ppf(0.5 + confidence / 2.0, n - 1)) * log_ratios_sd / math.sqrt(n) < (
            gap_log
        ):
            return n
        n += 1 if n < 100 else n // 10
    return None


def holm_adjust(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjustment: p-values that control the family-wise error rate over all
    the tests together (reject where the adjusted p is below alpha). Same order as given."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    adjusted = [1.0] * len(p_values)
    running = 0.0
    m = len(p_values)
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[index]))
        adjusted[index] = running
    return adjusted


def ratio_from_intervals(
    base: tuple[float, float, float], other: tuple[float, float, float]
) -> tuple[float, float, float]:
    """``other / base`` from two ``(median, low, high)`` estimates measured apart: the ratio of
    the medians and conservative bounds from the two intervals' opposite ends."""
    base_median, base_low, base_high = base
    other_median, other_low, other_high = other
    if base_median <= 0:
        return 0.0, 0.0, 0.0
    low = other_low / base_high if base_high > 0 else 0.0
    high = other_high / base_low if base_low > 0 else math.inf
    return other_median / base_median, low, high


def paired_ratio_ci(
    reference_s: Sequence[float], candidate_s: Sequence[float], confidence: float = 0.95
) -> tuple[float, float, float]:
    """Speedup of ``candidate`` over ``reference`` from paired times (one pair per round of an
    interleaved measurement): :func:`paired_ratio` of ``reference / candidate`` as
    ``(ratio, low, high)``; with a single pair the interval is unbounded (``0, inf``).
    """
    estimate = paired_ratio(candidate_s, reference_s, confidence)
    return estimate.ratio, estimate.low, estimate.high


def quantile_ci(
    sorted_values: Sequence[float], q: float, confidence: float = 0.95
) -> tuple[float | None, float | None]:
    """Distribution-free confidence interval of the ``q``-quantile (0 < q < 1) from order
    statistics: ``[x_(l), x_(u)]`` (1-based) with ``P(l <= B < u) >= confidence`` for
    ``B ~ Binomial(n, q)``, split evenly between the tails. A bound the sample is too small to
    give (a p99 from 50 values has no upper one) is ``None``: not pinned down."""
    n = len(sorted_values)
    if n == 0:
        raise ValueError("confidence interval of no samples")
    if not 0.0 < q < 1.0:
        raise ValueError(f"quantile {q} outside (0, 1)")
    tail = (1.0 - confidence) / 2.0
    # lower: the largest l with P(B <= l - 1) <= tail; upper: the smallest u with P(B <= u - 1)
    # >= 1 - tail. Both CDFs are monotone in the rank: bisect.
    low, high = 0, n
    while low < high:
        middle = (low + high + 1) // 2
        if binomial_cdf(middle - 1, n, q) <= tail:
            low = middle
        else:
            high = middle - 1
    lower_rank = low
    low, high = 1, n + 1
    while low < high:
        middle = (low + high) // 2
        if binomial_cdf(middle - 1, n, q) >= 1.0 - tail:
            high = middle
        else:
            low = middle + 1
    upper_rank = low
    lower = sorted_values[lower_rank - 1] if lower_rank >= 1 else None
    upper = sorted_values[upper_rank - 1] if upper_rank <= n else None
    return lower, upper
