"""LoadGen's early-stopping rule: may a run of n queries claim its tail percentile?

With ``t`` queries over the latency bound out of ``n``, the run may claim "the p-th percentile
is within the bound" at confidence ``c`` when, were the true over-bound fraction exactly
``1 - p``, seeing ``t`` or fewer over-bound queries would have probability at most ``1 - c``
(one-sided binomial test, as MLPerf LoadGen's ``early_stopping.cc``; tolerance 0). With no
query over the bound at p99 and 99 % confidence that takes 459 queries; every over-bound query
raises the count needed. The binomial CDF is :func:`accelscope.measurement.stats.binomial_cdf`
(SciPy), the same one the Timer's CI of the median uses.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pydantic import computed_field
from pydantic.dataclasses import dataclass

from accelscope.measurement.stats import binomial_cdf

__all__ = [
    "EarlyStopping",
    "binomial_cdf",
    "min_passing_queries",
    "percentile_estimate",
    "server_early_stopping",
]

DEFAULT_CONFIDENCE = 0.99


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


@dataclass(frozen=True, kw_only=True)
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

    # A pydantic dataclass for this computed field: the stored verdict carries ``passes``.
    @computed_field  # type: ignore[prop-decorator]
    @property
    def passes(self) -> bool:
        """True when the run has enough queries to claim its percentile."""
        return self.queries >= self.required_queries


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
