"""One trial: send a workload's requests to a target on schedule and collect their records.

Open loop: a dispatcher sleeps until each request's scheduled arrival and hands it to a pool
of client threads (``max_in_flight`` of them); a request that finds every thread busy waits,
and that wait shows as client lag (``sent_s - scheduled_s``), never as a shorter latency.
Closed loop: ``concurrency`` threads each send their next request as soon as the previous one
ends (its scheduled time is then).

Ctrl-C sets the cancel event, closes the
connections in flight through the target's ``interrupt`` and re-raises once every thread has
returned: the records of what finished are kept in ``partial`` for the caller to store.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field

from accelscope.llm.records import LlmRequest, RequestRecord, Target

__all__ = ["TrialInterrupted", "TrialRecords", "run_trial"]

Progress = Callable[[int, int], None]
"""Called with (finished, total) as requests finish."""


@dataclass
class TrialRecords:
    """The records of one trial (sorted by index) and its wall-clock span."""

    records: list[RequestRecord]
    duration_s: float
    interrupted: bool = False
    unsent: int = 0
    notes: list[str] = field(default_factory=list)


class TrialInterrupted(Exception):
    """Ctrl-C during a trial; ``partial`` holds what finished before it."""

    def __init__(self, partial: TrialRecords) -> None:
        super().__init__("interrupted")
        self.partial = partial


def _interrupt(target: Target) -> None:
    hook = getattr(target, "interrupt", None)
    if callable(hook):
        hook()


def run_trial(
    target: Target,
    requests: Sequence[LlmRequest],
    *,
    concurrency: int | None = None,
    max_in_flight: int = 256,
    timeout_s: float = 300.0,
    progress: Progress | None = None,
) -> TrialRecords:
    """Run ``requests`` (open loop when they carry ``scheduled_s``; closed loop at
    ``concurrency`` otherwise) and return every record."""
    cancel = threading.Event()
    records: list[RequestRecord] = []
    lock = threading.Lock()
    total = len(requests)
    origin = time.perf_counter()

    def finished(record: RequestRecord) -> None:
        with lock:
            records.append(record)
            done = len(records)
        if progress is not None:
            progress(done, total)

    def send(request: LlmRequest, scheduled_s: float) -> None:
        finished(
            target.stream(
                request,
                origin_s=origin,
                scheduled_s=scheduled_s,
                timeout_s=timeout_s,
                cancel=cancel,
            )
        )

    workers = concurrency if concurrency is not None else min(max_in_flight, total)
    pool = ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="llm-client")
    futures: list[Future[None]] = []
    sent = 0
    try:
        if concurrency is None:
            for request in requests:
                at = origin + (request.scheduled_s or 0.0)
                delay = at - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
                futures.append(pool.submit(send, request, request.scheduled_s or 0.0))
                sent += 1
        else:
            queue = list(reversed(requests))
            queue_lock = threading.Lock()

            def slot() -> None:
                while not cancel.is_set():
                    with queue_lock:
                        if not queue:
                            return
                        request = queue.pop()
                    send(request, time.perf_counter() - origin)

            futures = [pool.submit(slot) for _ in range(concurrency)]
            sent = total
        pending = set(futures)
        while pending:
            _, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
    except KeyboardInterrupt:
        cancel.set()
        _interrupt(target)
        pool.shutdown(wait=True, cancel_futures=True)
        with lock:
            kept = sorted(records, key=lambda r: r.index)
        unsent = total - len(kept) if concurrency is not None else total - sent
        partial = TrialRecords(
            kept, time.perf_counter() - origin, interrupted=True, unsent=max(0, unsent)
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
    return TrialRecords(sorted(records, key=lambda r: r.index), time.perf_counter() - origin)
