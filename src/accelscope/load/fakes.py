"""Systems under test without a model: service-time models for simulated time, and a
real-time system that sleeps or spins for those times, with injectable faults.

Used by the queueing-theory tests (simulated M/M/1 and M/D/1), the real-time queueing
benchmark, and the fault tests (a system that raises on some queries or stalls).
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from accelscope.load.schedule import Query
from accelscope.load.sut import ServiceModel
from accelscope.load.waiting import EarlyWake

__all__ = [
    "BatchLinearService",
    "ExponentialService",
    "FaultyService",
    "FixedService",
    "NullSUT",
    "SleepingSUT",
]


class ExponentialService:
    """Exponential service times with mean ``mean_s`` per batch (seeded): M/M/1 with no
    batching."""

    def __init__(self, mean_s: float, seed: int = 0) -> None:
        self.mean_s = mean_s
        self._rng = random.Random(seed)

    def service_time_s(self, queries: Sequence[Query]) -> float:
        return self._rng.expovariate(1.0 / self.mean_s)


class FixedService:
    """The same service time for every batch: M/D/1 with no batching."""

    def __init__(self, service_s: float) -> None:
        self.service_s = service_s

    def service_time_s(self, queries: Sequence[Query]) -> float:
        return self.service_s


class BatchLinearService:
    """``fixed_s + per_item_s * len(batch)``: the shape of a model whose batches amortise a
    fixed cost (what makes dynamic batching pay)."""

    def __init__(self, fixed_s: float, per_item_s: float) -> None:
        self.fixed_s = fixed_s
        self.per_item_s = per_item_s

    def service_time_s(self, queries: Sequence[Query]) -> float:
        return self.fixed_s + self.per_item_s * len(queries)


@dataclass
class FaultyService:
    """Wraps a service model: batches holding a query in ``fail_queries`` raise; batches
    holding one in ``stall_queries`` take ``stall_s`` (``inf``: never return)."""

    inner: ServiceModel
    fail_queries: frozenset[int] = frozenset()
    stall_queries: frozenset[int] = frozenset()
    stall_s: float = math.inf

    def service_time_s(self, queries: Sequence[Query]) -> float:
        indices = {q.index for q in queries}
        if indices & self.fail_queries:
            raise RuntimeError(f"injected failure on query {min(indices & self.fail_queries)}")
        if indices & self.stall_queries:
            return self.stall_s
        return self.inner.service_time_s(queries)


@dataclass(kw_only=True)
class SleepingSUT:
    """A real-time system under test: each batch takes the service model's time, slept
    (``spin=False``) or busy-waited (``spin=True``, exact but burns a core and holds the GIL).
    A sleep ends on time (``precise=True``: :class:`~accelscope.load.waiting.EarlyWake`, a
    calibrated ``time.sleep`` then a poll of at most 200 µs) or late by the operating system's
    wake-up overshoot (``precise=False``: one ``time.sleep``, 0.1-0.2 ms late on a VM). Faults
    as in :class:`FaultyService`; a stall blocks until :meth:`release` (or ``stall_s``)."""

    service: ServiceModel
    spin: bool = False
    fail_queries: frozenset[int] = frozenset()
    stall_queries: frozenset[int] = frozenset()
    stall_s: float = 60.0
    batches: list[int] = field(default_factory=list)
    precise: bool = True
    _released: threading.Event = field(default_factory=threading.Event)
    _waker: EarlyWake = field(default_factory=EarlyWake)

    def issue(self, queries: Sequence[Query]) -> None:
        self.batches.append(len(queries))
        indices = {q.index for q in queries}
        if indices & self.fail_queries:
            raise RuntimeError(f"injected failure on query {min(indices & self.fail_queries)}")
        if indices & self.stall_queries:
            self._released.wait(self.stall_s)
            return
        seconds = self.service.service_time_s(queries)
        if self.spin:
            end = time.perf_counter() + seconds
            while time.perf_counter() < end:
                pass
        elif self.precise:
            self._waker.sleep_until(time.perf_counter() + seconds)
        else:
            time.sleep(seconds)

    def release(self) -> None:
        """End every current and future stall (test teardown)."""
        self._released.set()


class NullSUT:
    """A system under test that does nothing: what remains of a query's latency is the load
    generator's own cost (the harness floor)."""

    def issue(self, queries: Sequence[Query]) -> None:
        return None
