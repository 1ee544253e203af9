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
from accelscope.load.waiting import EarlyWake, TimedOut

__all__ = ["MAIN", "Completion", "Driver", "QueryExecutor", "SimulatedExecutor", "ThreadedExecutor"]


@dataclass(frozen=True, kw_only=True)
class Completion:
    """One finished batch: which instance, which batch, when it started and finished
    (clock seconds), and the error text when it raised."""

    instance: int
    token: int
    started_s: float
    finished_s: float
    error: str | None = None


class QueryExecutor(Protocol):
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


class Driver(Protocol):
    """A trial loop that lets a :class:`ThreadedExecutor`'s server threads run its steps.

    Every method is called with the executor's :attr:`~ThreadedExecutor.lock` held, from the
    server thread of ``instance``, and returns the clock time at which that instance should
    step the loop next if it stays idle (``inf``: only when work or a kick arrives).
    """

    def completed(self, done: Completion) -> float:
        """``done``'s batch finished: record it and launch what is due now (a batch for this
        same instance is picked up without a thread hand-off)."""
        ...

    def due(self, instance: int) -> float:
        """The idle ``instance``'s due time came: admit what arrived, launch what is due."""
        ...

    def plan(self, instance: int) -> float:
        """The idle ``instance`` was kicked: when should it step next?"""
        ...


class _Kick:
    """An inbox item that only asks its server thread to plan its next wake again."""


_KICK = _Kick()
_Inbox = tuple[int, Sequence[Query]] | _Kick | None
"""A server thread's inbox item: a batch (token, queries), a kick, or ``None``: stop."""
MAIN = -1
"""The thread that runs the trial, as a :meth:`ThreadedExecutor.kick` target."""


class ThreadedExecutor:
    """One daemon server thread per system-under-test instance, in real time.

    ``thread_setup(instance)`` runs first in each server thread - pinning torch's intra-op
    threads (a per-thread setting) and preparing the model there, so compiled code is built
    and run on the same thread (its guards see the same thread-local state). The constructor
    waits for every setup and re-raises the first failure. PyTorch releases the GIL while it
    computes, so the trial loop keeps issuing queries on time while a batch runs.

    With a :class:`Driver` attached (the trial loop does so), a server thread that finishes a
    batch records it and launches the next one itself, and an idle server thread waits for the
    next arrival itself, so neither path pays a thread hand-off; the waits end on time through
    :class:`~accelscope.load.waiting.EarlyWake`. Without one, completions go to :meth:`wait`.
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
        self.lock = threading.Lock()
        """Guards the attached driver's state and the executor's bookkeeping."""
        self.waker = EarlyWake(self.clock.now)
        self._suts = list(suts)
        self._setup = thread_setup
        self._join_timeout_s = join_timeout_s
        self._outbox: queue.SimpleQueue[Completion | _Kick] = queue.SimpleQueue()
        self._tokens = 0
        self._outstanding: dict[int, int] = {}
        self._driver: Driver | None = None
        self._inboxes: list[queue.SimpleQueue[_Inbox]] = [queue.SimpleQueue() for _ in suts]
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
        clock = self.clock
        due = math.inf
        while True:
            if math.isinf(due):
                item: _Inbox | TimedOut = inbox.get()
            else:
                timed = self.waker.get(inbox, due)  # (no declared type: mypy infers it)
                item = timed
            if item is None:
                return
            if isinstance(item, _Kick | TimedOut):
                with self.lock:
                    driver = self._driver
                    if driver is None:
                        due = math.inf
                    elif item is _KICK or clock.now() < due:
                        due = driver.plan(instance)
                    else:
                        due = driver.due(instance)
                continue
            token, queries = item
            started = clock.now()
            error = None
            try:
                sut.issue(queries)
            except Exception as exc:  # noqa: BLE001 - the system under test can raise anything
                error = _error_text(exc)
            done = Completion(
                instance=instance,
                token=token,
                started_s=started,
                finished_s=clock.now(),
                error=error,
            )
            with self.lock:
                driver = self._driver
                if driver is not None:
                    self._outstanding.pop(token, None)
                    due = driver.completed(done)
            if driver is None:
                due = math.inf
                self._outbox.put(done)

    def attach(self, driver: Driver | None) -> None:
        """Let ``driver`` run in the server threads (``None``: detach; completions then go to
        :meth:`wait` again). Call with :attr:`lock` held."""
        self._driver = driver

    def kick(self, target: int) -> None:
        """Make ``target`` (an instance, or :data:`MAIN`: the one in :meth:`wait`) plan again."""
        if target == MAIN:
            self._outbox.put(_KICK)
        else:
            self._inboxes[target].put(_KICK)

    def start(self, instance: int, queries: Sequence[Query]) -> int:
        self._tokens += 1
        self._outstanding[self._tokens] = instance
        self._inboxes[instance].put((self._tokens, queries))
        return self._tokens

    def available(self) -> list[int]:
        """Instances with no batch outstanding. A trial starts with this: completions still in
        the outbox (of a trial that ended by an exception, such as Ctrl-C) free their instance
        now, and are dropped with any stale kick."""
        with self.lock:
            while self._outbox.qsize():
                item = self._outbox.get_nowait()
                if isinstance(item, Completion):
                    self._outstanding.pop(item.token, None)
            busy = set(self._outstanding.values())
        return [i for i in range(self.instances) if i not in busy]

    def wait(self, until_s: float) -> list[Completion]:
        """Block until a batch completes (or a kick comes), or the clock reaches ``until_s``."""
        found: list[Completion] = []
        outbox = self._outbox
        item = self.waker.get(outbox, until_s)
        while True:
            if isinstance(item, Completion):
                self._outstanding.pop(item.token, None)
                found.append(item)
            if not outbox.qsize():
                return found
            item = outbox.get_nowait()

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
            self._events,
            (
                finish,
                token,
                Completion(
                    instance=instance, token=token, started_s=now, finished_s=finish, error=error
                ),
            ),
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
