"""Executors run batches on server instances: real threads, or a discrete-event simulation.

Both report each batch's start and finish on the same clock the trial loop reads, so queue
time (scheduled arrival to start) and compute time (start to finish) are measured where the
work happens. A batch that never returns (a stalled system) holds its instance; the trial loop
times its queries out and stops waiting for it, so a stall cannot hang a run.
"""

from __future__ import annotations

import heapq
import math
import queue
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from accelscope.load.clock import LoadClock, RealClock, SimClock
from accelscope.load.schedule import Query
from accelscope.load.sut import ServiceModel, SystemUnderTest

__all__ = ["Completion", "Executor", "SimulatedExecutor", "ThreadedExecutor"]

_MAX_WAIT_S = 3600.0


@dataclass(frozen=True)
class Completion:
    """One finished batch: which instance, which batch, when it started and finished
    (clock seconds), and the error text when it raised."""

    instance: int
    token: int
    started_s: float
    finished_s: float
    error: str | None = None


class Executor(Protocol):
    """Runs batches on ``instances`` servers and reports completions."""

    @property
    def clock(self) -> LoadClock:
        """The clock batches are timed on."""
        ...

    @property
    def instances(self) -> int:
        """How many server instances run batches."""
        ...

    def start(self, instance: int, queries: Sequence[Query]) -> int:
        """Begin a batch on the idle ``instance``; returns the batch's token (unique for the
        executor's life, so a late completion from an earlier trial is recognisable)."""
        ...

    def available(self) -> list[int]:
        """Instances with no batch outstanding."""
        ...

    def wait(self, until_s: float) -> list[Completion]:
        """Block until a batch completes or the clock reaches ``until_s``; the completions."""
        ...

    def close(self) -> None:
        """Stop the servers (a stalled one is abandoned, never joined forever)."""
        ...


def _error_text(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0][:200]}" if lines else type(exc).__name__


class ThreadedExecutor:
    """One daemon server thread per system-under-test instance, in real time.

    ``thread_setup(instance)`` runs first in each server thread - pinning torch's intra-op
    threads (a per-thread setting) and preparing the model there, so compiled code is built
    and run on the same thread (its guards see the same thread-local state). The constructor
    waits for every setup and re-raises the first failure. PyTorch releases the GIL while it
    computes, so the trial loop keeps issuing queries on time while a batch runs.
    """

    def __init__(
        self,
        suts: Sequence[SystemUnderTest],
        clock: LoadClock | None = None,
        thread_setup: Callable[[int], None] | None = None,
        join_timeout_s: float = 1.0,
    ) -> None:
        if not suts:
            raise ValueError("need at least one system under test")
        self.clock: LoadClock = clock or RealClock()
        self.instances = len(suts)
        self._suts = list(suts)
        self._setup = thread_setup
        self._join_timeout_s = join_timeout_s
        self._outbox: queue.Queue[Completion] = queue.Queue()
        self._tokens = 0
        self._outstanding: dict[int, int] = {}
        self._inboxes: list[queue.SimpleQueue[tuple[int, Sequence[Query]] | None]] = [
            queue.SimpleQueue() for _ in suts
        ]
        self._threads = [
            threading.Thread(target=self._serve, args=(i,), name=f"load-server-{i}", daemon=True)
            for i in range(len(suts))
        ]
        self._ready = [threading.Event() for _ in suts]
        self._setup_errors: list[BaseException] = []
        for thread in self._threads:
            thread.start()
        for ready in self._ready:
            while not ready.wait(0.1):  # short waits keep Ctrl-C responsive
                pass
        if self._setup_errors:
            self.close()
            raise self._setup_errors[0]

    def _serve(self, instance: int) -> None:
        try:
            if self._setup is not None:
                self._setup(instance)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the constructing thread
            self._setup_errors.append(exc)
            return
        finally:
            self._ready[instance].set()
        sut = self._suts[instance]
        inbox = self._inboxes[instance]
        while True:
            item = inbox.get()
            if item is None:
                return
            token, queries = item
            started = self.clock.now()
            error = None
            try:
                sut.issue(queries)
            except Exception as exc:  # noqa: BLE001 - the system under test can raise anything
                error = _error_text(exc)
            self._outbox.put(Completion(instance, token, started, self.clock.now(), error))

    def start(self, instance: int, queries: Sequence[Query]) -> int:
        self._tokens += 1
        self._outstanding[self._tokens] = instance
        self._inboxes[instance].put((self._tokens, queries))
        return self._tokens

    def available(self) -> list[int]:
        busy = set(self._outstanding.values())
        return [i for i in range(self.instances) if i not in busy]

    def _received(self, found: list[Completion]) -> list[Completion]:
        for done in found:
            self._outstanding.pop(done.token, None)
        return found

    def _drain(self, found: list[Completion]) -> list[Completion]:
        while True:
            try:
                found.append(self._outbox.get_nowait())
            except queue.Empty:
                return found

    def wait(self, until_s: float) -> list[Completion]:
        found = self._drain([])
        if found:
            return self._received(found)
        timeout_s = min(until_s - self.clock.now(), _MAX_WAIT_S)
        if timeout_s > 0:
            try:
                found.append(self._outbox.get(timeout=timeout_s))
            except queue.Empty:
                return found
        return self._received(self._drain(found))

    def close(self) -> None:
        for inbox in self._inboxes:
            inbox.put(None)
        for thread in self._threads:
            thread.join(self._join_timeout_s)

    @property
    def stalled_threads(self) -> int:
        """Server threads still running after :meth:`close` (stuck in the system under test)."""
        return sum(thread.is_alive() for thread in self._threads)


class SimulatedExecutor:
    """Discrete-event servers: a batch finishes ``service.service_time_s(batch)`` after it
    starts, in simulated time; :meth:`wait` jumps the clock to the next event."""

    def __init__(self, service: ServiceModel, clock: SimClock, instances: int = 1) -> None:
        if instances < 1:
            raise ValueError("need at least one instance")
        self.clock: SimClock = clock
        self.instances = instances
        self._service = service
        self._events: list[tuple[float, int, Completion]] = []
        self._sequence = 0
        self._outstanding: dict[int, int] = {}

    def start(self, instance: int, queries: Sequence[Query]) -> int:
        now = self.clock.now()
        error = None
        try:
            service_s = float(self._service.service_time_s(queries))
        except Exception as exc:  # noqa: BLE001 - a simulated failure
            service_s, error = 0.0, _error_text(exc)
        self._sequence += 1
        token = self._sequence
        finish = now + service_s
        self._outstanding[token] = instance
        heapq.heappush(
            self._events, (finish, token, Completion(instance, token, now, finish, error))
        )
        return token

    def available(self) -> list[int]:
        busy = set(self._outstanding.values())
        return [i for i in range(self.instances) if i not in busy]

    def wait(self, until_s: float) -> list[Completion]:
        if not self._events or self._events[0][0] > until_s:
            if math.isinf(until_s):
                raise RuntimeError("simulated wait forever: nothing is running or scheduled")
            self.clock.advance_to(until_s)
            return []
        first = heapq.heappop(self._events)
        if math.isinf(first[0]):
            raise RuntimeError("simulated wait forever: only stalled batches are running")
        self.clock.advance_to(first[0])
        found = [first[2]]
        while self._events and self._events[0][0] <= first[0]:
            found.append(heapq.heappop(self._events)[2])
        for done in found:
            self._outstanding.pop(done.token, None)
        return found

    def close(self) -> None:
        self._events.clear()
