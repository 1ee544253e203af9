"""Waiting until a deadline without the operating system's wake-up overshoot.

A blocking wait with a timeout (a lock, a queue, ``time.sleep``) ends late: the kernel's timer
slack (50 µs by default on Linux) plus the wake-up of an idle CPU - in a virtual machine often
100-150 µs in all. The load generator times every arrival that way, so that overshoot became
generator lag and queue time on every query. :class:`EarlyWake` ends the blocking part a
calibrated *margin* before the deadline and covers the rest with a short polling loop that
releases the GIL on every turn (so the system under test's threads are never held up) but keeps
the CPU (``sched_yield`` would hand it to a busy intra-op thread for a whole time slice).

The margin tracks the 80th percentile of the blocking wait's own overshoot on this machine, and
is capped at 200 µs and at 10 % of the time being waited, so the polling costs at most a tenth
of a core even at high arrival rates and usually only a few tens of µs per wait.
"""

from __future__ import annotations

import queue
import select
import sys
import time
from collections.abc import Callable
from typing import Final, TypeVar

__all__ = ["TIMED_OUT", "EarlyWake", "TimedOut", "release_gil"]

T = TypeVar("T")

_MAX_BLOCK_S = 3600.0


class TimedOut:
    """The type of :data:`TIMED_OUT`."""

    def __repr__(self) -> str:
        return "TIMED_OUT"


TIMED_OUT: Final = TimedOut()
"""Returned by :meth:`EarlyWake.get` when the deadline came before an item."""


def _select_nothing() -> None:
    select.select((), (), (), 0)


def _sleep_zero() -> None:
    time.sleep(0)


release_gil: Callable[[], None] = _sleep_zero if sys.platform == "win32" else _select_nothing
"""Let other Python threads run for a moment without giving up the CPU (about 1 µs)."""


class EarlyWake:
    """Blocks until ``margin_s`` before a deadline, then polls up to it.

    ``margin_s`` follows the ``quantile`` of the blocking wait's overshoot (a stochastic
    quantile estimate: +``step_s * quantile`` when a wait overshot the margin, else
    ``-step_s * (1 - quantile)``), within ``[0, cap_s]``; each wait polls for at most
    ``share`` of its length. ``polled_s`` and ``waits`` add up what the polling cost.
    """

    def __init__(
        self,
        clock: Callable[[], float] = time.perf_counter,
        *,
        cap_s: float = 200e-6,
        share: float = 0.1,
        quantile: float = 0.8,
        step_s: float = 5e-6,
        initial_s: float = 100e-6,
    ) -> None:
        self.clock = clock
        self.cap_s = cap_s
        self.share = share
        self.quantile = quantile
        self.step_s = step_s
        self.margin_s = min(initial_s, cap_s)
        self.polled_s = 0.0
        self.waits = 0

    def _window_s(self, remaining_s: float) -> float:
        return min(self.margin_s, self.share * remaining_s)

    def _observe(self, overshoot_s: float) -> None:
        if overshoot_s > self.margin_s:
            self.margin_s = min(self.cap_s, self.margin_s + self.step_s * self.quantile)
        else:
            self.margin_s = max(0.0, self.margin_s - self.step_s * (1.0 - self.quantile))

    def get(self, source: queue.SimpleQueue[T], deadline: float) -> T | TimedOut:
        """The next item of ``source``, or :data:`TIMED_OUT` once ``clock() >= deadline`` (or
        after an hour's wait for a later deadline: the caller re-checks the clock)."""
        clock = self.clock
        self.waits += 1
        now = clock()
        remaining = deadline - now
        if remaining <= 0:
            return source.get_nowait() if source.qsize() else TIMED_OUT
        target = deadline - self._window_s(remaining)
        if target > now:
            block = target - now
            try:
                return source.get(timeout=min(block, _MAX_BLOCK_S))
            except queue.Empty:
                pass
            now = clock()
            if block > _MAX_BLOCK_S:
                return TIMED_OUT  # a far deadline: the caller checks the clock and waits again
            self._observe(now - target)
        began = now
        while now < deadline:
            if source.qsize():
                self.polled_s += clock() - began
                return source.get_nowait()
            release_gil()
            now = clock()
        self.polled_s += now - began
        return source.get_nowait() if source.qsize() else TIMED_OUT

    def sleep_until(self, deadline: float) -> None:
        """Sleep until ``clock() >= deadline`` (``time.sleep``, then the same short poll)."""
        clock = self.clock
        self.waits += 1
        now = clock()
        remaining = deadline - now
        if remaining <= 0:
            return
        target = deadline - self._window_s(remaining)
        if target > now:
            while target - now > _MAX_BLOCK_S:
                time.sleep(_MAX_BLOCK_S)
                now = clock()
            if target > now:
                time.sleep(target - now)
                now = clock()
                self._observe(now - target)
        began = now
        while now < deadline:
            release_gil()
            now = clock()
        self.polled_s += now - began
