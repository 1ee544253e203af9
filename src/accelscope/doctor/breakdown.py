"""Where the measured steps' time went: phase shares, step-time statistics, rates with bounds.

Shares are time-weighted over the measured steps (Σ phase / Σ step), so they add up to 1 with
``other``. Rates are throughputs, Σ items / Σ time over the measured steps (per-step rates would
mislead for pipelines that deliver in bursts: with two DataLoader workers, steps alternate
between a long wait and none), bounded by the distribution-free 95 % interval of the median
throughput of consecutive blocks of steps. items/s compares runs whatever their batch size.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from accelscope.doctor.profile import PHASES, Step
from accelscope.measurement.stats import median_ci, summarise
from accelscope.serialise import load

__all__ = ["ALL_PHASES", "Breakdown", "Rate", "breakdown", "rate"]

ALL_PHASES: tuple[str, ...] = (*PHASES, "other")


@dataclass(frozen=True)
class Rate:
    """A measured per-second throughput and its 95 % bounds (see the module doc)."""

    median: float
    low: float
    high: float


def rate(amounts: Sequence[float], durations_s: Sequence[float]) -> Rate:
    """Σ amounts / Σ durations, bounded by the 95 % interval of the median block throughput
    (blocks of consecutive steps: 1 step each below 8 steps, else n // 8, at least 2)."""
    total = math.fsum(durations_s)
    if not durations_s or total <= 0:
        return Rate(0.0, 0.0, 0.0)
    central = math.fsum(amounts) / total
    n = len(durations_s)
    size = 1 if n < 8 else max(2, n // 8)
    blocks = [
        math.fsum(amounts[i : i + size]) / math.fsum(durations_s[i : i + size])
        for i in range(0, n - size + 1, size)
    ]
    ordered = sorted(b for b in blocks if math.isfinite(b))
    low, high = median_ci(ordered) if ordered else (central, central)
    return Rate(central, min(low, central), max(high, central))


@dataclass(frozen=True, kw_only=True)
class Breakdown:
    """The measured steps summarised (seconds; shares are fractions of step time)."""

    steps: int
    step_median_s: float
    step_mean_s: float
    step_iqr_s: float
    step_ci_low_s: float
    step_ci_high_s: float
    shares: dict[str, float]
    phase_mean_s: dict[str, float]
    counts_per_step: dict[str, float]
    items_per_step: float
    steps_per_s: Rate
    items_per_s: Rate

    @property
    def iqr_ratio(self) -> float:
        """IQR / median of step times: the run's own noise."""
        return self.step_iqr_s / self.step_median_s if self.step_median_s > 0 else math.inf

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Breakdown:
        """Read back what :func:`accelscope.serialise.dump` stored (the CUDA-event device
        split of documents stored before 2026-11-29 is not read: GPU time comes from the
        device trace)."""
        old = ("device", "device_idle_share", "device_step_mean_s")
        return load(cls, {k: v for k, v in data.items() if k not in old})


def breakdown(steps: Sequence[Step]) -> Breakdown:
    """Summarise measured ``steps`` (at least one)."""
    if not steps:
        raise ValueError("no measured steps to summarise")
    durations = [max(s.duration_s, 1e-12) for s in steps]
    total = math.fsum(durations)
    summary = summarise(durations)
    phase_totals = {p: math.fsum(s.phases_s[p] for s in steps) for p in PHASES}
    phase_totals["other"] = math.fsum(s.other_s for s in steps)
    shares = {p: phase_totals[p] / total for p in ALL_PHASES}
    n = len(steps)
    counts = {k: sum(s.counts.get(k, 0) for s in steps) / n for k in steps[0].counts}
    items = [s.items if s.items > 0 else 1 for s in steps]
    return Breakdown(
        steps=n,
        step_median_s=summary.median_s,
        step_mean_s=summary.mean_s,
        step_iqr_s=summary.iqr_s,
        step_ci_low_s=summary.median_ci_low_s,
        step_ci_high_s=summary.median_ci_high_s,
        shares=shares,
        phase_mean_s={p: phase_totals[p] / n for p in ALL_PHASES},
        counts_per_step=counts,
        items_per_step=sum(items) / n,
        steps_per_s=rate([1.0] * n, durations),
        items_per_s=rate([float(i) for i in items], durations),
    )
