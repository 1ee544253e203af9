"""One trial: send a workload's sessions to a target on schedule and collect the records.

A session is one conversation: its turns are sent one after the other by one client thread,
each when the reply before it has ended plus the think time (that moment is the turn's
scheduled arrival: a slow reply delays the next message, as it would a user's), each prompt
holding the conversation so far. A single-turn request is a session of one turn.

Open loop: a dispatcher sleeps until each session's scheduled arrival and hands it to a pool of
client threads (``max_in_flight`` of them); a session that finds every thread busy waits, and
that wait shows as client lag (``sent_s - scheduled_s``), never as a shorter latency. Closed
loop: ``concurrency`` threads (users) each start their next session as soon as the last one
ended.

A turn that fails (an HTTP error, a server that died) ends its session: the turns it would
have sent are recorded as errors ("not sent: ..."), so a dead server costs the whole
conversation, as it would its user. Ctrl-C sets the cancel event, closes the connections in
flight through the target's ``interrupt`` and re-raises once every thread has returned: the
records of what finished are kept in ``partial`` for the caller to store.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field

from accelscope.llm.documents import ClientWorker
from accelscope.llm.records import LlmRequest, RequestRecord, Target
from accelscope.llm.workload import Session, turn_request

__all__ = ["TrialInterrupted", "TrialRecords", "run_trial"]

Progress = Callable[[int, int], None]
"""Called with (finished, total) requests as requests finish."""


@dataclass
class TrialRecords:
    """The records of one trial (sorted by index), its wall-clock span, and its start on
    ``time.perf_counter``'s clock (``origin_s``: what server scrapes are aligned to)."""

    records: list[RequestRecord]
    duration_s: float
    origin_s: float = 0.0
    interrupted: bool = False
    unsent: int = 0
    notes: list[str] = field(default_factory=list)
    request_cpu_s: float = 0.0
    """The process's CPU seconds during the trial outside the dispatching thread (the client
    threads, the target's reader thread; a metrics scraper running beside them): the cost
    that grows with the requests, apart from the fixed ones around the trial."""
    streamed: int = 0
    """Requests handed to ``target.stream`` (the turns a failed session never sent are not)."""
    worker_cpu_s: float = 0.0
    """All the CPU of the client processes beside this one (``--workers``), fixed costs too."""
    warnings: list[str] = field(default_factory=list)
    """What makes the trial's load doubtful (a worker that fell behind its schedule)."""
    workers: list[ClientWorker] = field(default_factory=list)
    """The client processes or Ray actors that sent it (``--workers``); empty: this process."""


class TrialInterrupted(Exception):
    """Ctrl-C during a trial; ``partial`` holds what finished before it."""

    def __init__(self, partial: TrialRecords) -> None:
        super().__init__("interrupted")
        self.partial = partial


def _interrupt(target: Target) -> None:
    hook = getattr(target, "interrupt", None)
    if callable(hook):
        hook()


def _not_sent(session: Session, turn: int, failed: RequestRecord, at_s: float) -> RequestRecord:
    """The record of a turn its session never sent because turn ``failed`` failed."""
    return RequestRecord(
        index=session.first_request + turn,
        scheduled_s=at_s,
        sent_s=at_s,
        end_s=at_s,
        session=failed.session,
        turn=turn + 1,
        error=f"not sent: turn {failed.turn} of the session failed ({failed.error})"[:300],
    )


def run_trial(
    target: Target,
    work: Sequence[Session | LlmRequest],
    *,
    concurrency: int | None = None,
    max_in_flight: int = 256,
    timeout_s: float = 300.0,
    multi_turn: bool | None = None,
    progress: Progress | None = None,
    origin_s: float | None = None,
    on_record: Callable[[RequestRecord], None] | None = None,
) -> TrialRecords:
    """Run ``sessions`` (open loop when they carry ``scheduled_s``; closed loop at
    ``concurrency`` otherwise) and return every record; a plain request is a session of one
    turn. ``multi_turn`` (default: any session has more than one turn) numbers the records by
    session and turn. ``origin_s`` (``time.perf_counter``): the trial's start on a clock shared
    with other client processes (the trial waits for it; default: now); ``on_record`` receives
    each record as it ends, from the client thread that made it."""
    sessions = [item if isinstance(item, Session) else Session.of(item) for item in work]
    cancel = threading.Event()
    records: list[RequestRecord] = []
    lock = threading.Lock()
    total = sum(len(s.turns) for s in sessions)
    numbered = any(len(s.turns) > 1 for s in sessions) if multi_turn is None else multi_turn
    origin = time.perf_counter() if origin_s is None else origin_s
    time.sleep(max(0.0, origin - time.perf_counter()))
    cpu = _StreamCpu()

    def finished(record: RequestRecord) -> None:
        if on_record is not None:
            on_record(record)
        with lock:
            records.append(record)
            done = len(records)
        if progress is not None:
            progress(done, total)

    def converse(session: Session, scheduled_s: float) -> None:
        history: list[tuple[str, str]] = []
        previous: RequestRecord | None = None
        for turn in range(len(session.turns)):
            if previous is not None:
                scheduled_s = previous.end_s + session.think_before(turn)
                delay = origin + scheduled_s - time.perf_counter()
                if delay > 0 and cancel.wait(delay):
                    return
            request = turn_request(session, turn, history, previous, multi_turn=numbered)
            record = target.stream(
                request,
                origin_s=origin,
                scheduled_s=scheduled_s,
                timeout_s=timeout_s,
                cancel=cancel,
            )
            cpu.sent()
            finished(record)
            if record.cancelled or cancel.is_set():
                return
            if record.error:
                for later in range(turn + 1, len(session.turns)):
                    finished(_not_sent(session, later, record, record.end_s))
                return
            history.append((session.turns[turn].text, record.output_text))
            previous = record

    workers = concurrency if concurrency is not None else min(max_in_flight, len(sessions))
    pool = ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="llm-client")
    futures: list[Future[None]] = []
    try:
        if concurrency is None:
            for session in sessions:
                at = origin + (session.scheduled_s or 0.0)
                delay = at - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
                futures.append(pool.submit(converse, session, session.scheduled_s or 0.0))
        else:
            queue = list(reversed(sessions))
            queue_lock = threading.Lock()

            def user() -> None:
                while not cancel.is_set():
                    with queue_lock:
                        if not queue:
                            return
                        session = queue.pop()
                    converse(session, time.perf_counter() - origin)

            futures = [pool.submit(user) for _ in range(concurrency)]
        pending = set(futures)
        while pending:
            _, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
    except KeyboardInterrupt:
        cancel.set()
        _interrupt(target)
        pool.shutdown(wait=True, cancel_futures=True)
        with lock:
            kept = sorted(records, key=lambda r: r.index)
        partial = TrialRecords(
            kept,
            time.perf_counter() - origin,
            origin_s=origin,
            interrupted=True,
            unsent=max(0, total - len(kept)),
            request_cpu_s=cpu.total_s,
            streamed=cpu.requests,
        )
        raise TrialInterrupted(partial) from None
    except BaseException:
        cancel.set()
        _interrupt(target)
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
    for future in futures:
        future.result()  # a bug in a target surfaces here, not as a missing record
    return TrialRecords(
        sorted(records, key=lambda r: r.index),
        time.perf_counter() - origin,
        origin_s=origin,
        request_cpu_s=cpu.total_s,
        streamed=cpu.requests,
    )


class _StreamCpu:
    """The requests sent, and the process's CPU since the start outside the thread that
    created this (the dispatcher): the client threads' and the target's reader's share."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process_s = time.process_time()
        self._own_s = time.thread_time()
        self.requests = 0

    def sent(self) -> None:
        with self._lock:
            self.requests += 1

    @property
    def total_s(self) -> float:
        """Call from the dispatching thread."""
        process_s = time.process_time() - self._process_s
        return max(0.0, process_s - (time.thread_time() - self._own_s))
