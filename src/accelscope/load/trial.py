"""One trial: issue queries from a source, batch them, run them on an executor, record times.

The same loop runs in real and simulated time; it only reads the executor's clock. It never
blocks on the system under test: it sleeps in ``executor.wait`` until the next arrival, batch
deadline, query timeout or stall deadline, so arrivals are issued on time while batches run.
Every issued query ends exactly one way: ``ok``, ``error`` (its batch raised), ``timeout``
(not done ``query_timeout_s`` after its *scheduled* arrival) or ``cancelled`` (the trial
stopped early). A batch that never returns cannot hang the trial: its queries time out, and
when every instance has been stuck longer than ``stall_limit_s`` the trial stops.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from enum import StrEnum

from accelscope.load.batcher import BatchPolicy
from accelscope.load.early_stopping import min_passing_queries
from accelscope.load.executor import Completion, Executor
from accelscope.load.schedule import Query
from accelscope.load.sources import ArrivalSource

__all__ = ["QueryStatus", "TrialLimits", "TrialRecord", "run_trial"]


class QueryStatus(StrEnum):
    """How one issued query ended."""

    PENDING = "pending"
    OK = "ok"
    ERROR = "error"
    TIMEOUT = "timeout"
    CANCELLED = "cancelled"


@dataclass(frozen=True)
class TrialLimits:
    """Per-query timeout and stall limit (seconds); with ``sla_s`` and ``stop_when_failed``
    the trial stops as soon as its tail-latency claim can no longer pass (rate search)."""

    query_timeout_s: float = 10.0
    stall_limit_s: float = 30.0
    sla_s: float | None = None
    stop_when_failed: bool = False
    percentile: float = 0.99
    confidence: float = 0.99


@dataclass
class TrialRecord:
    """Raw per-query times of one trial, seconds from its start, in issue order."""

    scheduled_s: list[float]
    issued_s: list[float]
    started_s: list[float]
    finished_s: list[float]
    status: list[QueryStatus]
    batch_size: list[int]
    errors: list[str]
    batches: int = 0
    stopped_reason: str = ""
    stalled_instances: int = 0

    @property
    def issued(self) -> int:
        """Queries issued."""
        return len(self.scheduled_s)


class _Loop:
    def __init__(
        self, source: ArrivalSource, executor: Executor, policy: BatchPolicy, limits: TrialLimits
    ) -> None:
        self.source = source
        self.executor = executor
        self.policy = policy
        self.limits = limits
        self.record = TrialRecord([], [], [], [], [], [], [])
        self.pending: deque[int] = deque()
        self.queries: list[Query] = []
        self.idle = list(reversed(executor.available()))
        self.in_flight: dict[int, tuple[int, list[int], float]] = {}
        self.busy_since: dict[int, float] = {}
        self.unresolved = 0
        self.overlatency = 0
        self.t0 = executor.clock.now()
        self.allowed_overlatency = self._allowed_overlatency()

    def _allowed_overlatency(self) -> int | None:
        """The most over-bound queries a planned trial can have and still claim its tail."""
        planned = self.source.planned
        if not self.limits.stop_when_failed or self.limits.sla_s is None or planned is None:
            return None
        p, c = self.limits.percentile, self.limits.confidence
        if min_passing_queries(0, p, c) > planned:
            return None  # cannot claim anyway; the summary says so, do not stop
        low, high = 0, planned
        while low < high:
            middle = (low + high + 1) // 2
            if min_passing_queries(middle, p, c) + middle <= planned:
                low = middle
            else:
                high = middle - 1
        return low

    # -- bookkeeping -----------------------------------------------------------------------

    def resolve(self, index: int, status: QueryStatus, at_s: float) -> None:
        record = self.record
        record.status[index] = status
        record.finished_s[index] = at_s
        self.unresolved -= 1
        sla = self.limits.sla_s
        if sla is not None and (
            status is not QueryStatus.OK or at_s - record.scheduled_s[index] > sla
        ):
            self.overlatency += 1
        self.source.resolved(at_s)

    def admit(self, now: float) -> None:
        record = self.record
        while self.source.next_arrival_s() <= now:
            scheduled, query = self.source.pop()
            assert query.index == len(record.scheduled_s)
            record.scheduled_s.append(scheduled)
            record.issued_s.append(now)
            record.started_s.append(math.nan)
            record.finished_s.append(math.nan)
            record.status.append(QueryStatus.PENDING)
            record.batch_size.append(0)
            self.pending.append(query.index)
            self.unresolved += 1
            self.queries.append(query)

    def expire(self, now: float) -> None:
        timeout = self.limits.query_timeout_s
        scheduled = self.record.scheduled_s
        while self.pending and scheduled[self.pending[0]] + timeout <= now:
            index = self.pending.popleft()
            self.resolve(index, QueryStatus.TIMEOUT, scheduled[index] + timeout)
        for _instance, members, _launched in self.in_flight.values():
            for index in members:
                if (
                    self.record.status[index] is QueryStatus.PENDING
                    and scheduled[index] + timeout <= now
                ):
                    self.resolve(index, QueryStatus.TIMEOUT, scheduled[index] + timeout)

    def launch(self, now: float) -> None:
        record = self.record
        while self.idle and self.pending:
            oldest = record.issued_s[self.pending[0]]
            if self.policy.launch_at_s(len(self.pending), oldest) > now:
                return
            size = min(self.policy.max_batch, len(self.pending))
            members = [self.pending.popleft() for _ in range(size)]
            instance = self.idle.pop()
            record.batches += 1
            for index in members:
                record.batch_size[index] = size
            token = self.executor.start(instance, [self.queries[i] for i in members])
            self.in_flight[token] = (instance, members, now)
            self.busy_since[instance] = now

    def complete(self, done: Completion) -> None:
        if done.token not in self.in_flight:
            return  # a batch left over from an earlier trial: not this trial's queries
        instance, members, _launched = self.in_flight.pop(done.token)
        self.busy_since.pop(instance, None)
        self.idle.append(instance)
        started = done.started_s - self.t0
        finished = done.finished_s - self.t0
        status = QueryStatus.OK if done.error is None else QueryStatus.ERROR
        if done.error is not None and done.error not in self.record.errors:
            self.record.errors.append(done.error)
        for index in members:
            self.record.started_s[index] = started
            if self.record.status[index] is QueryStatus.PENDING:
                self.resolve(index, status, finished)

    # -- early stops -------------------------------------------------------------------------

    def all_stalled(self, now: float) -> bool:
        if self.idle or not self.busy_since:
            return False
        return min(self.busy_since.values()) + self.limits.stall_limit_s <= now

    def hopeless(self, now: float) -> bool:
        """True when known over-bound queries already exceed what the trial may have."""
        allowed = self.allowed_overlatency
        if allowed is None or self.limits.sla_s is None:
            return False
        known = self.overlatency
        if known > allowed:
            return True
        late_before = now - self.limits.sla_s
        scheduled = self.record.scheduled_s
        for index in self.pending:
            if scheduled[index] > late_before:
                break
            known += 1
            if known > allowed:
                return True
        for _instance, members, _launched in self.in_flight.values():
            for index in members:
                if (
                    self.record.status[index] is QueryStatus.PENDING
                    and scheduled[index] <= late_before
                ):
                    known += 1
        return known > allowed

    def stop(self, now: float, reason: str) -> None:
        self.record.stopped_reason = reason
        self.source.stop()
        while self.pending:
            self.resolve(self.pending.popleft(), QueryStatus.CANCELLED, now)
        for _instance, members, _launched in self.in_flight.values():
            for index in members:
                if self.record.status[index] is QueryStatus.PENDING:
                    self.resolve(index, QueryStatus.CANCELLED, now)

    # -- the loop ----------------------------------------------------------------------------

    def wake_at(self, now: float) -> float:
        wake = self.source.next_arrival_s()
        if self.pending:
            if self.idle:
                head = self.record.issued_s[self.pending[0]]
                wake = min(wake, self.policy.launch_at_s(len(self.pending), head))
            wake = min(wake, self.record.scheduled_s[self.pending[0]] + self.limits.query_timeout_s)
        timeout = self.limits.query_timeout_s
        for _instance, members, _launched in self.in_flight.values():
            for index in members:
                if self.record.status[index] is QueryStatus.PENDING:
                    wake = min(wake, self.record.scheduled_s[index] + timeout)
                    break
        if self.busy_since and not self.idle:
            wake = min(wake, min(self.busy_since.values()) + self.limits.stall_limit_s)
        if self.limits.sla_s is not None and self.allowed_overlatency is not None and self.pending:
            # a queued query turns over-bound when it has waited the SLA
            head = self.record.scheduled_s[self.pending[0]] + self.limits.sla_s
            if head > now:
                wake = min(wake, head)
        return max(wake, now)

    def run(self) -> TrialRecord:
        clock = self.executor.clock
        reached = 0.0  # the last wake time the clock has passed (rounding of t0 + wake - t0)
        while True:
            now = max(clock.now() - self.t0, reached)
            if not self.idle and not self.in_flight:
                self.stop(now, "no server instance is free (stuck since an earlier trial)")
                break
            self.admit(now)
            self.expire(now)
            if self.all_stalled(now):
                stuck = len(self.busy_since)
                self.stop(
                    now,
                    f"every server instance ({stuck}) was stuck on one batch for "
                    f"more than {self.limits.stall_limit_s:g} s",
                )
                break
            if self.hopeless(now):
                self.stop(
                    now,
                    "stopped early: the p99 latency bound was already missed by "
                    "more queries than the run could absorb",
                )
                break
            self.launch(now)
            if self.source.exhausted() and self.unresolved == 0:
                break
            wake = self.wake_at(now)
            for done in self.executor.wait(self.t0 + wake):
                self.complete(done)
            if clock.now() >= self.t0 + wake:
                reached = wake
        self.settle()
        self.record.stalled_instances = len(self.in_flight)
        return self.record

    def settle(self) -> None:
        """Let batches still running finish (their queries are already accounted for), up to
        the stall limit from their start, so the next trial starts with free instances."""
        clock = self.executor.clock
        while self.in_flight:
            deadline = min(self.busy_since.values()) + self.limits.stall_limit_s
            if clock.now() - self.t0 >= deadline:
                return
            for done in self.executor.wait(self.t0 + deadline):
                self.complete(done)


def run_trial(
    source: ArrivalSource, executor: Executor, policy: BatchPolicy, limits: TrialLimits
) -> TrialRecord:
    """Run one trial to the end (or an early stop) and return its raw per-query record."""
    return _Loop(source, executor, policy, limits).run()
