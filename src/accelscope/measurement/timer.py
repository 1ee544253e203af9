"""Adaptive, sync-aware timer: warm-up, then samples until the median is pinned down.

Rule: after warm-up, take samples until the median's confidence interval is within
``target_rel_ci`` (±2 % by default) or the time budget ends, and record which happened.
The first call (graph capture, compilation, allocator warm-up) is timed and kept apart from the
warm-up samples, and neither enters the steady-state statistics.

Clock and device synchronisation are seams: ``clock`` is any monotonic seconds function (a fake
in tests), and ``interval`` measures one call on the device (host clock after an optional sync
on CPU, CUDA events on GPU: see :mod:`accelscope.hardware.sync`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from accelscope.errors import BadInputError
from accelscope.hardware.sync import IntervalTimer
from accelscope.measurement.record import Measurement, StopReason
from accelscope.measurement.stats import median_ci
from accelscope.measurement.stats import prepare as prepare_statistics

__all__ = ["HostInterval", "IntervalTimer", "ProgressFn", "Timer", "TimerConfig"]

Clock = Callable[[], float]
ProgressFn = Callable[[str, int, float, float], None]
"""Progress callback: (phase, samples so far, elapsed seconds, budget seconds)."""


class HostInterval:
    """Host clock around a call, with an optional device ``sync`` before reading the clock."""

    def __init__(self, clock: Clock = time.perf_counter, sync: Callable[[], None] | None = None):
        self._clock = clock
        self._sync = sync
        self._started_at = 0.0

    def start(self) -> None:
        """Record the host time (after draining pending device work, if a sync is given)."""
        if self._sync is not None:
            self._sync()
        self._started_at = self._clock()

    def stop(self) -> float:
        """Synchronise (if a sync is given) and return elapsed host seconds."""
        if self._sync is not None:
            self._sync()
        return self._clock() - self._started_at


@dataclass(frozen=True, kw_only=True)
class TimerConfig:
    """How long and how precisely to measure.

    ``budget_s`` bounds the steady-state sampling phase (warm-up has its own bound,
    ``warmup_max_s``). Sampling stops early once the median's ``confidence`` CI half-width is
    within ``target_rel_ci`` of the median, after at least ``min_samples`` samples.
    """

    budget_s: float = 10.0
    target_rel_ci: float = 0.02
    confidence: float = 0.95
    min_samples: int = 10
    max_samples: int = 100_000
    warmup_iters: int = 3
    warmup_min_s: float = 0.2
    warmup_max_s: float = 30.0

    def __post_init__(self) -> None:
        if self.budget_s <= 0:
            raise BadInputError(f"time budget must be positive, got {self.budget_s} s")
        if not 0 < self.target_rel_ci < 1:
            raise BadInputError(f"target CI must be between 0 and 1, got {self.target_rel_ci}")
        if not 0.5 <= self.confidence < 1:
            raise BadInputError(f"confidence must be in [0.5, 1), got {self.confidence}")
        if self.min_samples < 2 or self.max_samples < self.min_samples:
            raise BadInputError("need 2 <= min_samples <= max_samples")
        if self.warmup_iters < 0 or self.warmup_min_s < 0 or self.warmup_max_s < 0:
            raise BadInputError("warm-up settings must not be negative")


class Timer:
    """Times ``fn`` (one call = ``items_per_call`` items) under a :class:`TimerConfig`."""

    def __init__(
        self,
        fn: Callable[[], object],
        *,
        items_per_call: int = 1,
        config: TimerConfig | None = None,
        clock: Clock = time.perf_counter,
        interval: IntervalTimer | None = None,
        on_progress: ProgressFn | None = None,
    ) -> None:
        if items_per_call <= 0:
            raise BadInputError(f"items per call must be positive, got {items_per_call}")
        self._fn = fn
        self._items = items_per_call
        self._config = config or TimerConfig()
        self._clock = clock
        self._interval = interval or HostInterval(clock)
        self._progress = on_progress

    def _time_one(self) -> float:
        self._interval.start()
        self._fn()
        return self._interval.stop()

    def _report(self, phase: str, count: int, elapsed_s: float, budget_s: float) -> None:
        if self._progress is not None:
            self._progress(phase, count, elapsed_s, budget_s)

    def _warm_up(self) -> tuple[float, list[float]]:
        config = self._config
        first_call_s = self._time_one()
        warmup: list[float] = []
        began = self._clock()
        while True:
            elapsed = self._clock() - began
            enough_iters = len(warmup) >= config.warmup_iters
            if enough_iters and elapsed >= config.warmup_min_s:
                break
            if elapsed >= config.warmup_max_s:
                break
            warmup.append(self._time_one())
            self._report("warm-up", len(warmup), elapsed, config.warmup_min_s)
        return first_call_s, warmup

    def _converged(self, samples: list[float]) -> bool:
        ordered = sorted(samples)
        n = len(ordered)
        median = ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2
        if median <= 0:
            return False
        low, high = median_ci(ordered, self._config.confidence)
        return max(median - low, high - median) / median <= self._config.target_rel_ci

    def measure(self) -> Measurement:
        """Warm up, then sample until converged, the budget ends, or ``max_samples``."""
        config = self._config
        prepare_statistics()  # an import inside the sampling loop would eat its budget
        first_call_s, warmup = self._warm_up()
        samples: list[float] = []
        began = self._clock()
        next_check = config.min_samples
        reason = StopReason.MAX_SAMPLES
        while len(samples) < config.max_samples:
            samples.append(self._time_one())
            elapsed = self._clock() - began
            self._report("measure", len(samples), elapsed, config.budget_s)
            if len(samples) >= next_check:
                # Re-check at geometric steps (every ~5 %), so the check stays cheap.
                next_check = len(samples) + max(1, len(samples) // 20)
                if self._converged(samples):
                    reason = StopReason.CONVERGED
                    break
            if elapsed >= config.budget_s and len(samples) >= 2:
                reason = (
                    StopReason.CONVERGED
                    if len(samples) >= config.min_samples and self._converged(samples)
                    else StopReason.BUDGET
                )
                break
        return Measurement(
            samples_s=tuple(samples),
            items_per_call=self._items,
            first_call_s=first_call_s,
            warmup_samples_s=tuple(warmup),
            stop_reason=reason,
            target_rel_ci=config.target_rel_ci,
            confidence=config.confidence,
            budget_s=config.budget_s,
        )
