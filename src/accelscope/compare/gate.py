"""The regression gate's decision from interleaved rounds: pass, regression or inconclusive.

Each round measures the baseline and the candidate once each, in fresh worker processes, in
the order A B then B A (so a drift over the run hits both alike); the *process* is the unit, and
its figure is the median time per item of its samples. The slowdown is the geometric mean of
the per-round ratios candidate / baseline with a paired Student-t interval
(:func:`accelscope.measurement.stats.paired_ratio`). With the allowed slowdown ``s``:

* **regression** (exit 1): the whole interval lies above ``1 + s``;
* **pass** (exit 0): the whole interval lies at or below ``1 + s``;
* **inconclusive** (exit 3): ``1 + s`` is inside the interval; the decision says how many rounds
  in all would settle it at the spread seen so far.

Accuracy (when the model has eval data) is deterministic per side: a drop of the metric beyond
``max_accuracy_drop`` is a regression, whatever the timing says.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import numpy as np

from accelscope.errors import BadInputError
from accelscope.measurement.stats import RatioEstimate, paired_ratio, rounds_to_settle
from accelscope.serialise import dump

__all__ = [
    "EXIT_CODES",
    "GateDecision",
    "GateStatus",
    "GateThresholds",
    "ProcessFigures",
    "decide",
    "round_order",
]


class GateStatus(StrEnum):
    """The gate's outcome."""

    PASS = "pass"
    REGRESSION = "regression"
    INCONCLUSIVE = "inconclusive"


EXIT_CODES: dict[GateStatus, int] = {
    GateStatus.PASS: 0,
    GateStatus.REGRESSION: 1,
    GateStatus.INCONCLUSIVE: 3,
}
"""Process exit code per outcome (2 stays "bad input", as for every command)."""


@dataclass(frozen=True, kw_only=True)
class GateThresholds:
    """What the gate allows. ``max_p99_slowdown`` ``None``: p99 is reported, not gated."""

    max_slowdown: float = 0.05
    max_accuracy_drop: float = 0.005
    max_p99_slowdown: float | None = None
    confidence: float = 0.95

    def __post_init__(self) -> None:
        for name in ("max_slowdown", "max_accuracy_drop", "max_p99_slowdown"):
            value = getattr(self, name)
            if value is not None and not 0.0 <= value < 1.0:
                raise BadInputError(f"{name.replace('_', '-')} must be in 0..100 %, got {value}")
        if not 0.5 <= self.confidence < 1.0:
            raise BadInputError(f"confidence must be in [0.5, 1), got {self.confidence}")


@dataclass(frozen=True, kw_only=True)
class ProcessFigures:
    """One worker process's figures: ``side`` is ``baseline`` or ``candidate``."""

    side: str
    round_index: int
    median_s: float
    p99_s: float
    samples: int
    peak_memory_bytes: float | None = None
    accuracy: float | None = None


def round_order(round_index: int) -> tuple[str, str]:
    """A B in even rounds, B A in odd ones: A B B A A B ..."""
    if round_index % 2 == 0:
        return ("baseline", "candidate")
    return ("candidate", "baseline")


@dataclass(frozen=True, kw_only=True)
class GateDecision:
    """The outcome with its evidence: one sentence per check in ``reasons``."""

    status: GateStatus
    time: RatioEstimate
    p99: RatioEstimate
    accuracy_baseline: float | None
    accuracy_candidate: float | None
    reasons: tuple[str, ...]
    rounds: int
    rounds_needed: int | None = None

    @property
    def exit_code(self) -> int:
        """0 pass, 1 regression, 3 inconclusive."""
        return EXIT_CODES[self.status]

    @property
    def accuracy_drop(self) -> float | None:
        """Baseline metric minus candidate metric (positive = worse), when both exist."""
        if self.accuracy_baseline is None or self.accuracy_candidate is None:
            return None
        return self.accuracy_baseline - self.accuracy_candidate

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return {
            "status": self.status.value,
            "exit_code": self.exit_code,
            "time_per_item_p50": dump(self.time),
            "time_per_item_p99": dump(self.p99),
            "accuracy_baseline": self.accuracy_baseline,
            "accuracy_candidate": self.accuracy_candidate,
            "accuracy_drop": self.accuracy_drop,
            "reasons": list(self.reasons),
            "rounds": self.rounds,
            "rounds_needed": self.rounds_needed,
        }


def _pct(ratio: float) -> str:
    return f"{(ratio - 1.0) * 100:+.1f} %"


def _interval(estimate: RatioEstimate) -> str:
    high = "inf" if math.isinf(estimate.high) else _pct(estimate.high)
    return f"{estimate.confidence:.0%} CI {_pct(estimate.low)} to {high}"


def _judge(estimate: RatioEstimate, allowed: float, what: str) -> tuple[GateStatus, str]:
    limit = 1.0 + allowed
    change = f"{what} {_pct(estimate.ratio)} ({_interval(estimate)})"
    if estimate.low > limit:
        return GateStatus.REGRESSION, f"{change}: slower than the {allowed:.1%} allowed"
    if estimate.high <= limit:
        if estimate.high < 1.0:
            return GateStatus.PASS, f"{change}: faster"
        return GateStatus.PASS, f"{change}: within the {allowed:.1%} allowed"
    return GateStatus.INCONCLUSIVE, f"{change}: the interval straddles the {allowed:.1%} allowed"


def _pairs(processes: Sequence[ProcessFigures], field: str) -> tuple[list[float], list[float]]:
    by_round: dict[int, dict[str, float]] = {}
    for process in processes:
        by_round.setdefault(process.round_index, {})[process.side] = getattr(process, field)
    complete = [r for r in sorted(by_round) if len(by_round[r]) == 2]
    return (
        [by_round[r]["baseline"] for r in complete],
        [by_round[r]["candidate"] for r in complete],
    )


def _single_value(processes: Sequence[ProcessFigures], side: str) -> float | None:
    values = [p.accuracy for p in processes if p.side == side and p.accuracy is not None]
    return float(np.median(values)) if values else None


def _rounds_needed(
    baseline: list[float], candidate: list[float], allowed: float, thresholds: GateThresholds
) -> int | None:
    if len(baseline) < 2:
        return None
    logs = np.log(np.asarray(candidate) / np.asarray(baseline))
    ratio = float(np.exp(np.mean(logs)))
    return rounds_to_settle(
        float(np.std(logs, ddof=1)),
        abs(math.log(ratio) - math.log1p(allowed)),
        thresholds.confidence,
    )


def decide(processes: Sequence[ProcessFigures], thresholds: GateThresholds) -> GateDecision:
    """The gate's decision from the processes measured so far (complete rounds only)."""
    baseline, candidate = _pairs(processes, "median_s")
    if not baseline:
        raise BadInputError("the gate needs at least one complete round")
    time = paired_ratio(baseline, candidate, thresholds.confidence)
    p99 = paired_ratio(*_pairs(processes, "p99_s"), thresholds.confidence)
    statuses: list[GateStatus] = []
    reasons: list[str] = []
    status, reason = _judge(time, thresholds.max_slowdown, "median time per item")
    statuses.append(status)
    reasons.append(reason)
    needed: list[int | None] = []
    if status is GateStatus.INCONCLUSIVE:
        needed.append(_rounds_needed(baseline, candidate, thresholds.max_slowdown, thresholds))
    if thresholds.max_p99_slowdown is not None:
        status, reason = _judge(p99, thresholds.max_p99_slowdown, "p99 time per item")
        statuses.append(status)
        reasons.append(reason)
        if status is GateStatus.INCONCLUSIVE:
            p99_before, p99_after = _pairs(processes, "p99_s")
            needed.append(
                _rounds_needed(p99_before, p99_after, thresholds.max_p99_slowdown, thresholds)
            )
    else:
        reasons.append(f"p99 time per item {_pct(p99.ratio)} ({_interval(p99)}): not gated")
    rounds_needed = None
    if needed and all(n is not None for n in needed):
        rounds_needed = max(n for n in needed if n is not None)
    accuracy_before = _single_value(processes, "baseline")
    accuracy_after = _single_value(processes, "candidate")
    if accuracy_before is not None and accuracy_after is not None:
        drop = accuracy_before - accuracy_after
        text = f"accuracy metric {accuracy_before:.4g} -> {accuracy_after:.4g} (drop {drop:+.2%})"
        if drop > thresholds.max_accuracy_drop:
            statuses.append(GateStatus.REGRESSION)
            reasons.append(f"{text}: more than the {thresholds.max_accuracy_drop:.2%} allowed")
        else:
            reasons.append(f"{text}: within the {thresholds.max_accuracy_drop:.2%} allowed")
    else:
        reasons.append("accuracy: not measured (the model has no eval data; see --eval-data)")
    if GateStatus.REGRESSION in statuses:
        overall = GateStatus.REGRESSION
    elif GateStatus.INCONCLUSIVE in statuses:
        overall = GateStatus.INCONCLUSIVE
    else:
        overall = GateStatus.PASS
    return GateDecision(
        status=overall,
        time=time,
        p99=p99,
        accuracy_baseline=accuracy_before,
        accuracy_candidate=accuracy_after,
        reasons=tuple(reasons),
        rounds=len(baseline),
        rounds_needed=rounds_needed,
    )
