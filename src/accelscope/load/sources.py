"""Where queries come from: a schedule fixed up front (server, offline) or a closed loop
(single-stream: the next query is issued when the previous one is done)."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import Protocol

from accelscope.load.schedule import Query

__all__ = ["ArrivalSource", "ClosedLoop", "OpenSchedule"]


class ArrivalSource(Protocol):
    """Arrival times relative to the trial start (seconds).

    A source may also offer ``following_arrival_s()``, the arrival after the next one: with it
    the trial's thread can stay asleep while an idle server thread takes the next arrival.
    """

    def next_arrival_s(self) -> float:
        """When the next query arrives; ``inf`` when none is due until something resolves."""
        ...

    def pop(self) -> tuple[float, Query]:
        """The next query and its scheduled arrival."""
        ...

    def resolved(self, at_s: float) -> None:
        """A query finished (completed, failed or timed out) at ``at_s``."""
        ...

    def exhausted(self) -> bool:
        """True when no more queries will ever arrive."""
        ...

    def stop(self) -> None:
        """Issue nothing more (the trial is aborting)."""
        ...

    @property
    def planned(self) -> int | None:
        """How many queries the source will issue in all, when known up front."""
        ...


class OpenSchedule:
    """Arrivals at fixed offsets, whatever the system does (server: seeded Poisson or gamma
    gaps; offline: every query at time zero)."""

    def __init__(self, offsets_s: Sequence[float], samples: Sequence[int]) -> None:
        if len(offsets_s) != len(samples):
            raise ValueError("one sample index per scheduled query")
        self._offsets = offsets_s
        # made up front, before the trial's clock starts: issuing one only indexes a list
        self._queries = [Query(index, sample) for index, sample in enumerate(samples)]
        self._next = 0
        self._end = len(offsets_s)

    def next_arrival_s(self) -> float:
        return self._offsets[self._next] if self._next < self._end else math.inf

    def following_arrival_s(self) -> float:
        """The arrival after the next one (``inf`` when there is none)."""
        return self._offsets[self._next + 1] if self._next + 1 < self._end else math.inf

    def pop(self) -> tuple[float, Query]:
        index = self._next
        self._next += 1
        return self._offsets[index], self._queries[index]

    def resolved(self, at_s: float) -> None:
        return None

    def exhausted(self) -> bool:
        return self._next >= self._end

    def stop(self) -> None:
        self._end = self._next

    @property
    def planned(self) -> int | None:
        return len(self._offsets)


class ClosedLoop:
    """Single-stream: one query in flight; the next is scheduled when the previous resolves.
    Ends once ``min_queries`` were issued and the last was issued at or after
    ``min_duration_s`` (LoadGen's rule), or at ``max_queries``. Samples are drawn from a pool
    of ``pool_size`` with a seeded generator."""

    def __init__(
        self,
        pool_size: int,
        seed: int,
        min_queries: int,
        min_duration_s: float,
        max_queries: int = 10_000_000,
    ) -> None:
        self._rng = random.Random(seed ^ 0x5EED)
        self._pool_size = pool_size
        self._min_queries = min_queries
        self._min_duration_s = min_duration_s
        self._max_queries = max_queries
        self._issued = 0
        self._due_s = 0.0
        self._last_issue_s = -math.inf
        self._stopped = False

    def exhausted(self) -> bool:
        if self._stopped or self._issued >= self._max_queries:
            return True
        return self._issued >= self._min_queries and self._last_issue_s >= self._min_duration_s

    def next_arrival_s(self) -> float:
        return math.inf if self.exhausted() else self._due_s

    def following_arrival_s(self) -> float:
        """The arrival after the next one: never known before the next one resolves."""
        return math.inf

    def pop(self) -> tuple[float, Query]:
        scheduled = self._due_s
        query = Query(self._issued, self._rng.randrange(self._pool_size))
        self._issued += 1
        self._last_issue_s = scheduled
        self._due_s = math.inf
        return scheduled, query

    def resolved(self, at_s: float) -> None:
        self._due_s = at_s

    def stop(self) -> None:
        self._stopped = True

    @property
    def planned(self) -> int | None:
        return None
