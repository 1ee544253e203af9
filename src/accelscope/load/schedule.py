"""Query schedules: seeded arrival times generated up front, before anything runs.

A server-scenario schedule is fixed before the first query is issued, so a slow system cannot
change when queries arrive (no coordinated omission): each query's latency is measured from its
*scheduled* arrival. Gaps are exponential (Poisson arrivals) or, for bursty traffic, gamma with
a settable coefficient of variation (CV = 1 is Poisson; above 1 burstier, below 1 smoother).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass

from accelscope.errors import BadInputError

__all__ = ["Query", "arrival_offsets_s", "sample_indices"]


@dataclass(frozen=True)
class Query:
    """One query: its position in the trial and the input-pool sample it carries."""

    index: int
    sample: int


def _gap_sampler(rate_per_s: float, cv: float, rng: random.Random) -> Callable[[], float]:
    if cv == 1.0:
        return lambda: rng.expovariate(rate_per_s)
    shape = 1.0 / (cv * cv)
    scale = 1.0 / (rate_per_s * shape)
    return lambda: rng.gammavariate(shape, scale)


def arrival_offsets_s(
    rate_per_s: float,
    *,
    min_queries: int,
    min_duration_s: float,
    seed: int,
    cv: float = 1.0,
    max_queries: int = 10_000_000,
) -> tuple[float, ...]:
    """Arrival times (seconds from the trial start) at ``rate_per_s`` on average.

    Queries are generated until both ``min_queries`` exist and the last one is scheduled at or
    after ``min_duration_s`` (LoadGen's rule). The first query arrives after one gap, as in a
    Poisson process started at time zero. The same arguments always give the same schedule.
    """
    if not math.isfinite(rate_per_s) or rate_per_s <= 0:
        raise BadInputError(
            f"the offered rate must be a positive number of queries/s, got {rate_per_s}"
        )
    if not math.isfinite(cv) or cv <= 0:
        raise BadInputError(f"the burstiness CV must be positive, got {cv}")
    rng = random.Random(seed)
    gap = _gap_sampler(rate_per_s, cv, rng)
    offsets: list[float] = []
    t = 0.0
    while len(offsets) < min_queries or t < min_duration_s:
        if len(offsets) >= max_queries:
            raise BadInputError(
                f"the schedule would need more than {max_queries} queries; lower the minimum "
                "duration or the rate"
            )
        t += gap()
        offsets.append(t)
    return tuple(offsets)


def sample_indices(count: int, pool_size: int, seed: int) -> tuple[int, ...]:
    """Which pool sample each of ``count`` queries carries (seeded, uniform with repeats)."""
    rng = random.Random(seed ^ 0x5EED)
    return tuple(rng.randrange(pool_size) for _ in range(count))
