"""The clock seam of the load generator: real monotonic time or a simulated clock.

The trial loop, the batcher and the executors read time only through a :class:`LoadClock`, so
the same loop runs against wall time (threads, a real system under test) or against a
:class:`SimClock` that an event-driven executor moves forward (exact, fast queueing checks).
"""

from __future__ import annotations

import time
from typing import Protocol

__all__ = ["LoadClock", "RealClock", "SimClock"]


class LoadClock(Protocol):
    """A monotonic clock in seconds."""

    def now(self) -> float:
        """The current time (seconds, arbitrary origin)."""
        ...


class RealClock:
    """Wall time: ``time.perf_counter`` (CLOCK_MONOTONIC on Linux)."""

    def now(self) -> float:
        return time.perf_counter()


class SimClock:
    """Simulated time that only moves when an executor advances it (discrete events)."""

    def __init__(self, start_s: float = 0.0) -> None:
        self._now_s = start_s

    def now(self) -> float:
        return self._now_s

    def advance_to(self, t_s: float) -> None:
        """Jump to ``t_s``; a target in the past is ignored (time never runs backwards)."""
        if t_s > self._now_s:
            self._now_s = t_s
