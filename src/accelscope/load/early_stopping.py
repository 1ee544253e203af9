"""LoadGen's early-stopping rule: may a run of n queries claim its tail percentile?

With ``t`` queries over the latency bound out of ``n``, the run may claim "the p-th percentile
is within the bound" at confidence ``c`` when, were the true over-bound fraction exactly
``1 - p``, seeing ``t`` or fewer over-bound queries would have probability at most ``1 - c``
(one-sided binomial test, as MLPerf LoadGen's ``early_stopping.cc``; tolerance 0). With no
query over the bound at p99 and 99 % confidence that takes 459 queries; every over-bound query
raises the count needed. Pure Python (log-space binomial sums), no SciPy.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "EarlyStopping",
    "binomial_cdf",
    "min_passing_queries",
    "percentile_estimate",
    "server_early_stopping",
]

DEFAULT_CONFIDENCE = 0.99


def _log_pmf(x: int, n: int, q: float) -> float:
    return (
        math.lgamma(n + 1)
        - math.lgamma(x + 1)
        - math.lgamma(n - x + 1)
        + x * math.log(q)
        + (n - x) * math.log1p(-q)
    )


def _tail_sum(start: int, stop: int, step: int, n: int, q: float) -> float:
    """Sum of P(X = x) from ``start`` towards ``stop`` (inclusive), moving away from the
    mode so the terms shrink; stops once they cannot change a double."""
    log_ratio = math.log(q) - math.log1p(-q)
    log_first = _log_pmf(start, n, q)
    total = 0.0
    log_term = log_first
    x = start
    while True:
        term = math.exp(log_term - log_first)
        total += term
        if x == stop or term < 1e-18 * total:
            break
        if step < 0:  # P(X = x - 1) from P(X = x)
            log_term += math.log(x) - math.log(n - x + 1) - log_ratio
        else:  # P(X = x + 1) from P(X = x)
            log_term += math.log(n - x) - math.log(x + 1) + log_ratio
        x += step
    return math.exp(log_first) * total


def binomial_cdf(k: int, n: int, q: float) -> float:
    """P(X <= k) for X ~ Binomial(n, q), in log space (no underflow for large n).

    The sum runs away from the mode (down from ``k`` below it, or the upper tail from
    ``k + 1`` above it), so its terms shrink and it stops early."""
    if k < 0:
        return 0.0
    if k >= n or q <= 0.0:
        return 1.0
    if q >= 1.0:
        return 0.0
    if k <= (n + 1) * q:
        return min(1.0, _tail_sum(k, 0, -1, n, q))
    return max(0.0, 1.0 - _tail_sum(k + 1, n, 1, n, q))


def _passes(h: int, t: int, percentile: float, confidence: float) -> bool:
    return binomial_cdf(t, h + t, 1.0 - percentile) < 1.0 - confidence


def min_passing_queries(
    overlatency: int, percentile: float = 0.99, confidence: float = DEFAULT_CONFIDENCE
) -> int:
    """The fewest queries *within* the bound that, with ``overlatency`` queries over it, let a
    run claim the ``percentile`` at ``confidence`` (LoadGen's ``h``; the run needs h + t)."""
    if not 0.0 < percentile < 1.0 or not 0.0 < confidence < 1.0:
        raise ValueError("percentile and confidence must lie in (0, 1)")
    # h is at least the expected number within the bound for t over it: t * p / (1 - p)
    low = max(
        math.ceil(math.log(1.0 - confidence) / math.log(percentile)),
        math.floor(overlatency * percentile / (1.0 - percentile)),
        1,
    )
    step = max(16, low // 8)
    high = low
    while not _passes(high, overlatency, percentile, confidence):
        low = high + 1
        high += step
        step *= 2
    while low < high:
        middle = (low + high) // 2
        if _passes(middle, overlatency, percentile, confidence):
            high = middle
        else:
            low = middle + 1
    return low


@dataclass(frozen=True)
class EarlyStopping:
    """The verdict for one run: may it claim its percentile, and how many queries it needed."""

    percentile: float
    confidence: float
    queries: int
    overlatency: int
    required_queries: int
    """Queries needed with this many over the bound (all extra ones within it)."""
    min_queries_no_overlatency: int
    """Queries needed when none is over the bound (459 at p99, 99 % confidence)."""

    @property
    def passes(self) -> bool:
        """True when the run has enough queries to claim its percentile."""
        return self.queries >= self.required_queries

    def to_dict(self) -> dict[str, object]:
        """JSON-ready dict (with ``passes``)."""
        return {
            "percentile": self.percentile,
            "confidence": self.confidence,
            "queries": self.queries,
            "overlatency": self.overlatency,
            "required_queries": self.required_queries,
            "min_queries_no_overlatency": self.min_queries_no_overlatency,
            "passes": self.passes,
        }


def server_early_stopping(
    queries: int,
    overlatency: int,
    percentile: float = 0.99,
    confidence: float = DEFAULT_CONFIDENCE,
) -> EarlyStopping:
    """LoadGen's server-scenario check for ``queries`` issued, ``overlatency`` over the bound."""
    return EarlyStopping(
        percentile=percentile,
        confidence=confidence,
        queries=queries,
        overlatency=overlatency,
        required_queries=min_passing_queries(overlatency, percentile, confidence) + overlatency,
        min_queries_no_overlatency=min_passing_queries(0, percentile, confidence),
    )


def percentile_estimate(
    sorted_latencies_s: Sequence[float],
    percentile: float,
    confidence: float = DEFAULT_CONFIDENCE,
) -> float | None:
    """A latency the true ``percentile`` lies below with ``confidence`` (LoadGen's
    single-stream estimate): the t-th largest latency, for the largest t the run could afford
    to have over the bound. ``None`` when there are too few queries for any claim."""
    n = len(sorted_latencies_s)
    if n < min_passing_queries(1, percentile, confidence) + 1:
        return None
    low, high = 1, n  # the largest t with h(t) + t <= n; t = 1 qualifies
    while low < high:
        middle = (low + high + 1) // 2
        if min_passing_queries(middle, percentile, confidence) + middle <= n:
            low = middle
        else:
            high = middle - 1
    return sorted_latencies_s[n - low]
