"""``Measurement``: raw per-call samples (always kept) and the statistics derived from them."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from functools import cached_property

from accelscope.measurement.stats import Summary, summarise

__all__ = ["Measurement", "StopReason"]


class StopReason(StrEnum):
    """Why sampling stopped."""

    CONVERGED = "converged"
    BUDGET = "budget"
    MAX_SAMPLES = "max_samples"


@dataclass(frozen=True, kw_only=True)
class Measurement:
    """Steady-state samples of one configuration, plus warm-up kept apart.

    ``samples_s`` are seconds per call; one call processes ``items_per_call`` items (the batch
    size). ``first_call_s`` is the first call alone (compilation, graph capture); warm-up
    samples follow it. Neither enters :attr:`summary`.
    """

    samples_s: tuple[float, ...]
    items_per_call: int
    first_call_s: float
    warmup_samples_s: tuple[float, ...] = ()
    stop_reason: StopReason = StopReason.CONVERGED
    target_rel_ci: float = 0.02
    confidence: float = 0.95
    budget_s: float = 0.0

    @cached_property
    def summary(self) -> Summary:
        """Statistics of :attr:`samples_s` (computed once, from the raw samples)."""
        return summarise(self.samples_s, self.confidence)

    @property
    def throughput_items_per_s(self) -> float:
        """Items per second at the median call time."""
        return self.items_per_call / self.summary.median_s

    @property
    def mean_throughput_items_per_s(self) -> float:
        """Items per second over all steady-state calls (total items / total time)."""
        return self.items_per_call * len(self.samples_s) / sum(self.samples_s)

    @property
    def warmup_s(self) -> float:
        """Total time spent in warm-up after the first call, in seconds."""
        return sum(self.warmup_samples_s)

    def stop_explanation(self) -> str:
        """One sentence: which stop rule ended sampling, with the achieved precision."""
        ci = self.summary.median_ci_rel
        level = f"{self.confidence:.0%}"
        if self.stop_reason is StopReason.CONVERGED:
            return (
                f"converged: median {level} CI ±{ci:.1%} ≤ ±{self.target_rel_ci:.0%} "
                f"after {len(self.samples_s)} samples"
            )
        if self.stop_reason is StopReason.BUDGET:
            return (
                f"time budget ({self.budget_s:g} s) ended before the median {level} CI reached "
                f"±{self.target_rel_ci:.0%}: it is ±{ci:.1%} after {len(self.samples_s)} samples"
            )
        return f"sample cap reached ({len(self.samples_s)}): median {level} CI ±{ci:.1%}"

    def warnings(self) -> list[str]:
        """Noise warnings plus a note when the precision target was not met."""
        found = self.summary.noise_warnings()
        if self.stop_reason is not StopReason.CONVERGED:
            found.append(self.stop_explanation())
        return found
