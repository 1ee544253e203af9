"""Fakes for testing code built on accelscope without real time or real hardware.

``FakeClock`` is a manual clock; ``ScriptedWork`` is a callable that "takes" scripted durations
on that clock, so timer behaviour (warm-up, stop rule, statistics) is exactly reproducible.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator

__all__ = ["FakeClock", "ScriptedWork"]


class FakeClock:
    """A monotonic clock that only moves when told to (seconds)."""

    def __init__(self, start_s: float = 1000.0) -> None:
        self.now_s = start_s
        self.reads = 0

    def __call__(self) -> float:
        self.reads += 1
        return self.now_s

    def advance(self, seconds: float) -> None:
        """Move time forward by ``seconds`` (must not be negative)."""
        if seconds < 0:
            raise ValueError("a monotonic clock cannot go backwards")
        self.now_s += seconds


class ScriptedWork:
    """A workload whose n-th call advances ``clock`` by the n-th scripted duration.

    ``durations_s`` is consumed in order; with ``cycle=True`` it repeats forever. ``calls``
    counts invocations, so tests can check how many calls a timer made.
    """

    def __init__(self, clock: FakeClock, durations_s: Iterable[float], cycle: bool = False):
        values = list(durations_s)
        if not values:
            raise ValueError("need at least one duration")
        self._clock = clock
        self._durations: Iterator[float] = itertools.cycle(values) if cycle else iter(values)
        self.calls = 0

    def __call__(self) -> None:
        self.calls += 1
        try:
            self._clock.advance(next(self._durations))
        except StopIteration:
            message = f"scripted work ran out of durations after {self.calls - 1} calls"
            raise RuntimeError(message) from None
