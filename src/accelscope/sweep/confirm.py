"""The headline speedup with its uncertainty: the baseline, the winner and (when close) the
runner-up measured again *alternately in one process*.

Separate measurements of one configuration drift by ~15 % on a shared VM (docs/BENCHMARKS.md),
so a ratio of two of them can be off by as much. Here each round times one block of each
configuration in the order A B C C B A; a linear drift over the round hits every configuration
alike and cancels in the per-round ratio. The rounds are the statistical unit: the speedup is the
geometric mean of the per-round ratios with a Student-t 95 % interval on the log scale
(:func:`accelscope.measurement.stats.paired_ratio_ci`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from accelscope.measurement.stats import paired_ratio_ci
from accelscope.result import Result

__all__ = [
    "CONFIDENCE",
    "RUNNER_UP_MARGIN",
    "Comparison",
    "Confirmation",
    "confirmation_from_blocks",
]

CONFIDENCE = 0.95
RUNNER_UP_MARGIN = 0.15
"""The runner-up is re-measured beside the winner while its sweep throughput is within this
fraction of the winner's: the run-to-run spread of a shared 2-vCPU machine."""


@dataclass(frozen=True, kw_only=True)
class Comparison:
    """``candidate``'s throughput over ``reference``'s, from interleaved rounds, with its CI."""

    candidate_key: str
    reference_key: str
    ratio: float
    low: float
    high: float
    rounds: int

    @property
    def separated(self) -> bool:
        """True when the interval excludes 1 (the two are ranked)."""
        return self.low > 1.0 or self.high < 1.0

    def describe(self, what: str) -> str:
        """``2.91x eager fp32 (95 % CI 2.74 to 3.09x, 6 interleaved rounds)``."""
        high = "inf" if math.isinf(self.high) else f"{self.high:.2f}"
        return (
            f"{self.ratio:.2f}x {what} ({CONFIDENCE * 100:.0f} % CI {self.low:.2f} to {high}x, "
            f"{self.rounds} interleaved rounds)"
        )


@dataclass(frozen=True, kw_only=True)
class Confirmation:
    """The interleaved re-measure of a sweep's top: the winner's speedup over the baseline and,
    when the runner-up was close, the winner's lead over it. ``error`` says why it is missing.
    Stored (the run's ``confirmation`` document) as :func:`accelscope.serialise.dump` writes it."""

    best_key: str
    baseline_key: str | None = None
    runner_up_key: str | None = None
    speedup: Comparison | None = None
    lead: Comparison | None = None
    block_s_per_item: dict[str, list[float]] | None = None
    """Raw blocks (seconds per item) by configuration key, in measurement order."""
    error: str = ""

    @property
    def ranked(self) -> bool:
        """False when the runner-up cannot be told apart from the winner."""
        return self.lead is None or self.lead.separated

    def round_times_s_per_item(self, key: str) -> list[float] | None:
        """``key``'s time per item in each interleaved round (its two blocks summed), or
        ``None`` when it was not re-measured."""
        if self.error or not self.block_s_per_item or key not in self.block_s_per_item:
            return None
        return _round_totals(self.block_s_per_item[key])


def runner_up(accepted: Sequence[Result], best: Result) -> Result | None:
    """The second-fastest accepted result, when within :data:`RUNNER_UP_MARGIN` of ``best``."""
    if best.measurement is None:
        return None
    floor = best.measurement.throughput_items_per_s * (1 - RUNNER_UP_MARGIN)
    close = [
        r
        for r in accepted
        if r.spec.key != best.spec.key
        and r.measurement is not None
        and r.measurement.throughput_items_per_s >= floor
    ]
    return max(close, key=_throughput, default=None)


def _throughput(result: Result) -> float:
    return result.measurement.throughput_items_per_s if result.measurement else 0.0


def _round_totals(blocks: Sequence[float]) -> list[float]:
    """Each round gave a configuration two blocks (A B B A): their sum per round."""
    return [blocks[i] + blocks[i + 1] for i in range(0, len(blocks) - 1, 2)]


def _compare(blocks: dict[str, list[float]], candidate: str, reference: str) -> Comparison:
    ref, cand = _round_totals(blocks[reference]), _round_totals(blocks[candidate])
    ratio, low, high = paired_ratio_ci(ref, cand, CONFIDENCE)
    return Comparison(
        candidate_key=candidate,
        reference_key=reference,
        ratio=ratio,
        low=low,
        high=high,
        rounds=len(ref),
    )


def confirmation_from_blocks(
    blocks: dict[str, list[float]],
    *,
    best_key: str,
    baseline_key: str | None,
    runner_up_key: str | None,
) -> Confirmation:
    """Compare the interleaved blocks; when the runner-up is measured *faster* than the winner
    with an interval excluding 1, the two swap (the interleaved figure is the fairer one)."""
    lead = _compare(blocks, best_key, runner_up_key) if runner_up_key else None
    if lead is not None and runner_up_key is not None and lead.high < 1.0:
        best_key, runner_up_key = runner_up_key, best_key
        lead = _compare(blocks, best_key, runner_up_key)
    speedup = (
        _compare(blocks, best_key, baseline_key)
        if baseline_key is not None and baseline_key != best_key
        else None
    )
    return Confirmation(
        best_key=best_key,
        baseline_key=baseline_key,
        runner_up_key=runner_up_key,
        speedup=speedup,
        lead=lead,
        block_s_per_item=blocks,
    )
