"""One trial's load from several client processes (``llm --workers N``).

The arrival schedule is computed once, by the caller (the sessions and their ``scheduled_s``),
and dealt round-robin by session: worker ``w`` sends sessions ``w, w + N, ...``, each on its
own schedule offsets, so together they send exactly the one schedule. A closed loop's
concurrency is dealt the same way (worker ``w`` runs ``C // N`` users, one more for the first
``C % N``). Every worker is a fresh ``spawn`` process that imports the client, says it is
ready, and gets one wall-clock start time a little in the future: it maps that instant onto its
own ``time.perf_counter`` and runs :func:`~accelscope.llm.trial.run_trial` from it, so every
record's times are relative to the same instant. Each record goes to the parent as it ends;
the parent merges them by index, and the summary is computed over the merged records exactly as
over one process's.

Each worker's lag behind the schedule (``sent_s - scheduled_s``, its p99) is checked on its own:
a worker over :data:`~accelscope.llm.summary.LAG_LIMIT_S` is named in a warning (one slow
worker hides in a merged p99 of several). A worker that dies keeps what it sent back; its requests
without a record are counted as not sent (``unsent``), and a note says which worker and why:
the run is kept.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import multiprocessing.process
import pickle
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from accelscope.errors import BadInputError
from accelscope.llm.documents import ClientWorker
from accelscope.llm.records import RequestRecord, Target
from accelscope.llm.summary import LAG_LIMIT_S
from accelscope.llm.trial import TrialInterrupted, TrialRecords, run_trial
from accelscope.llm.workload import Session

__all__ = [
    "READY_TIMEOUT_S",
    "START_LEAD_S",
    "WorkerOutcome",
    "WorkerPlan",
    "Workers",
    "deal",
    "merge_workers",
    "run_scaled_trial",
]

START_LEAD_S = 0.25
"""How far in the future the shared start is set once every worker is ready: long enough for
the message to reach each of them (local pipes: well under a millisecond)."""

READY_TIMEOUT_S = 120.0
"""How long a worker may take to start (a spawned interpreter imports accelscope)."""


@dataclass(frozen=True)
class Workers:
    """How many client processes send a trial, and where: this machine (``N``) or the nodes
    of a Ray cluster (``ray:N``, one worker a node where there are enough)."""

    count: int = 1
    ray: bool = False

    @classmethod
    def parse(cls, text: str) -> Workers:
        """``4`` or ``ray:4``; anything else is one line of bad input."""
        kind, _, count = str(text).strip().rpartition(":")
        if kind not in ("", "ray") or not count.isdigit() or int(count) < 1:
            raise BadInputError(f"--workers {text!r}: give a count (2) or ray:COUNT (ray:2)")
        return cls(int(count), ray=kind == "ray")

    @property
    def label(self) -> str:
        return f"ray:{self.count}" if self.ray else str(self.count)


@dataclass(frozen=True, kw_only=True)
class WorkerPlan:
    """What one worker sends: its sessions (their own schedule offsets and indices) and its
    share of a closed loop's users."""

    worker: int
    sessions: tuple[Session, ...]
    concurrency: int | None
    max_in_flight: int
    timeout_s: float
    multi_turn: bool

    @property
    def requests(self) -> int:
        return sum(len(s.turns) for s in self.sessions)


def deal(
    sessions: Sequence[Session],
    workers: int,
    *,
    concurrency: int | None,
    max_in_flight: int,
    timeout_s: float,
    multi_turn: bool,
) -> list[WorkerPlan]:
    """The sessions dealt round-robin over ``workers``, no more workers than sessions (nor
    than a closed loop's users: each worker needs one). ``max_in_flight`` bounds each
    worker's client threads (a process's limit: more processes, more threads)."""
    if workers < 1:
        raise ValueError("workers must be at least 1")
    used = max(1, min(workers, len(sessions), concurrency or workers))
    return [
        WorkerPlan(
            worker=worker,
            sessions=tuple(sessions[worker::used]),
            concurrency=(
                None
                if concurrency is None
                else concurrency // used + (1 if worker < concurrency % used else 0)
            ),
            max_in_flight=max_in_flight,  # a thread limit: each process's own
            timeout_s=timeout_s,
            multi_turn=multi_turn,
        )
        for worker in range(used)
    ]


def _worker(conn: multiprocessing.connection.Connection, target: Target, plan: WorkerPlan) -> None:
    """A worker process: ready, wait for the start time, send the plan, stream the records."""
    sending = threading.Lock()

    def send(message: tuple[Any, ...]) -> None:
        with sending:
            conn.send(message)

    def sent(record: RequestRecord) -> None:
        record.output_text = ""  # not stored; the parent needs no conversation
        send(("record", record))

    send(("ready",))
    start_wall_s: float = conn.recv()
    origin = time.perf_counter() + (start_wall_s - time.time())
    try:
        outcome = run_trial(
            target,
            plan.sessions,
            concurrency=plan.concurrency,
            max_in_flight=plan.max_in_flight,
            timeout_s=plan.timeout_s,
            multi_turn=plan.multi_turn,
            origin_s=origin,
            on_record=sent,
        )
    except TrialInterrupted as stop:
        outcome = stop.partial
    finally:
        target.close()
    send(("done", time.process_time(), outcome.request_cpu_s, outcome.streamed))


@dataclass
class _Worker:
    plan: WorkerPlan
    process: multiprocessing.process.BaseProcess
    conn: multiprocessing.connection.Connection
    records: list[RequestRecord]
    cpu_s: float = 0.0
    request_cpu_s: float = 0.0
    streamed: int = 0
    finished: bool = False
    ready: bool = False


def run_scaled_trial(
    target: Target,
    sessions: Sequence[Session],
    workers: int,
    *,
    concurrency: int | None = None,
    max_in_flight: int = 256,
    timeout_s: float = 300.0,
    multi_turn: bool | None = None,
    on_started: Callable[[list[int]], None] | None = None,
) -> TrialRecords:
    """``sessions`` sent by ``workers`` processes on one schedule; the merged records, the
    workers' CPU in ``request_cpu_s`` (their client work) and ``worker_cpu_s`` (all of it), a
    warning per worker that fell behind and a note per worker that died. ``target`` must pickle (an
    :class:`~accelscope.llm.client.OpenAIEndpoint` does). ``on_started`` gets the workers'
    process ids once all of them run (a fault test kills one)."""
    numbered = any(len(s.turns) > 1 for s in sessions) if multi_turn is None else multi_turn
    plans = deal(
        sessions,
        workers,
        concurrency=concurrency,
        max_in_flight=max_in_flight,
        timeout_s=timeout_s,
        multi_turn=numbered,
    )
    context = multiprocessing.get_context("spawn")
    running: list[_Worker] = []
    for plan in plans:
        parent, child = context.Pipe()
        process = context.Process(target=_worker, args=(child, target, plan), daemon=True)
        process.start()
        child.close()
        running.append(_Worker(plan, process, parent, []))
    origin = time.perf_counter()
    try:
        _wait_ready(running)
        start_wall_s = time.time() + START_LEAD_S
        origin = time.perf_counter() + START_LEAD_S
        for worker in running:
            if worker.ready:
                worker.conn.send(start_wall_s)
        if on_started is not None:
            on_started([w.process.pid for w in running if w.process.pid is not None])
        _collect(running)
    except KeyboardInterrupt:
        for worker in running:
            worker.process.terminate()
        _collect(running)
        raise TrialInterrupted(_merge(running, origin, interrupted=True)) from None
    finally:
        for worker in running:
            worker.process.join(timeout=10)
            if worker.process.is_alive():
                worker.process.kill()
            worker.conn.close()
    return _merge(running, origin)


def _wait_ready(running: list[_Worker]) -> None:
    """Each worker's ``ready`` (one that dies or hangs while starting stays not ready)."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    waiting = {w.conn.fileno(): w for w in running}
    while waiting and time.monotonic() < deadline:
        conns = [w.conn for w in waiting.values()]
        for conn in multiprocessing.connection.wait(conns, deadline - time.monotonic()):
            assert isinstance(conn, multiprocessing.connection.Connection)
            worker = waiting.pop(conn.fileno())
            try:
                worker.ready = conn.recv() == ("ready",)
            except (EOFError, OSError):
                worker.ready = False


def _collect(running: list[_Worker]) -> None:
    """Every message until each worker said it is done or its pipe closed (it died)."""
    open_ = {w.conn.fileno(): w for w in running if w.ready and not w.finished}
    while open_:
        conns = [w.conn for w in open_.values()]
        for conn in multiprocessing.connection.wait(conns):
            assert isinstance(conn, multiprocessing.connection.Connection)
            worker = open_[conn.fileno()]
            try:
                message = conn.recv()
            except (EOFError, OSError, pickle.UnpicklingError):
                # the worker died (or Ctrl-C cut a message in half and it was then stopped)
                del open_[conn.fileno()]
                continue
            if message[0] == "record":
                worker.records.append(message[1])
            elif message[0] == "done":
                _, worker.cpu_s, worker.request_cpu_s, worker.streamed = message
                worker.finished = True
                del open_[conn.fileno()]


@dataclass(frozen=True, kw_only=True)
class WorkerOutcome:
    """What one worker brought back: its records, its CPU (in its client threads, and its
    whole process where known), the requests it sent, and why it ended early (empty: it
    did not)."""

    plan: WorkerPlan
    records: list[RequestRecord]
    request_cpu_s: float = 0.0
    process_cpu_s: float = 0.0
    streamed: int = 0
    died: str = ""
    host: str = ""
    """The machine it ran on (its host name)."""
    pid: int | None = None
    node: str = ""
    """The Ray node id it was placed on (empty: a local process)."""

    def client_worker(self) -> ClientWorker:
        return ClientWorker(
            worker=self.plan.worker,
            host=self.host or "unknown host",
            pid=self.pid,
            node=self.node,
            requests=self.plan.requests,
            records=len(self.records),
            died=self.died,
        )


def merge_workers(
    outcomes: Sequence[WorkerOutcome], origin_s: float, *, interrupted: bool = False
) -> TrialRecords:
    """One trial's records from the workers', sorted by index, with a note for each worker
    that died (its requests without a record counted as not sent) and a warning for each that
    fell behind its schedule (p99 send lag over ``LAG_LIMIT_S``)."""
    records: list[RequestRecord] = []
    notes: list[str] = []
    warnings: list[str] = []
    unsent = 0
    for worker in outcomes:
        plan = worker.plan
        records += worker.records
        missing = plan.requests - len(worker.records)
        if worker.died:
            notes.append(
                f"worker {plan.worker} {worker.died}: {missing} of its {plan.requests} "
                "requests have no record and are counted as not sent"
            )
        unsent += missing
        lags = [r.sent_s - r.scheduled_s for r in worker.records if not r.cancelled]
        if lags:
            p99 = float(np.percentile(lags, 99))
            if p99 > LAG_LIMIT_S:
                warnings.append(
                    f"worker {plan.worker} fell behind its schedule (p99 send lag "
                    f"{p99 * 1000:.0f} ms over {len(lags)} requests): its share of this load "
                    "was not generated"
                )
    records.sort(key=lambda r: r.index)
    ends = [r.end_s for r in records]
    return TrialRecords(
        records,
        max(ends) if ends else max(0.0, time.perf_counter() - origin_s),
        origin_s=origin_s,
        interrupted=interrupted,
        unsent=unsent,
        notes=notes,
        warnings=warnings,
        request_cpu_s=sum(w.request_cpu_s for w in outcomes),
        streamed=sum(w.streamed for w in outcomes),
        worker_cpu_s=sum(w.process_cpu_s for w in outcomes),
        workers=[w.client_worker() for w in sorted(outcomes, key=lambda w: w.plan.worker)],
    )


def _merge(running: list[_Worker], origin_s: float, *, interrupted: bool = False) -> TrialRecords:
    outcomes = []
    for worker in running:
        died = ""
        if not worker.finished and not interrupted:
            worker.process.join(timeout=10)
            code = worker.process.exitcode
            died = "never started" if not worker.ready else f"died (exit code {code})"
        outcomes.append(
            WorkerOutcome(
                plan=worker.plan,
                records=worker.records,
                request_cpu_s=worker.request_cpu_s,
                process_cpu_s=worker.cpu_s,
                streamed=worker.streamed,
                died=died,
                host=socket.gethostname(),
                pid=worker.process.pid,
            )
        )
    return merge_workers(outcomes, origin_s, interrupted=interrupted)
