"""Run a WorkerTask in an isolated process with a timeout; crashes become recorded failures.

The parent waits blocking on the result pipe and the process sentinel together (no polling
loop that would steal a core from the measurement). Every executor submits tasks and hands
their outcomes back as they finish: the local ones take one task at a time and run it when it
is collected (so a local sweep behaves as it always did); the Ray executor
(:mod:`accelscope.sweep.ray_executor`) keeps one task in flight per cluster node.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection, wait
from typing import IO, Any, Protocol

from accelscope.result import Cause, Result, Status, legacy_cause
from accelscope.sweep.worker import InterleaveTask, ReferenceTask, WorkerTask, worker_main

__all__ = [
    "NODE_LOST",
    "AnyTask",
    "Executor",
    "InterpreterExecutor",
    "LocalExecutor",
    "OneAtATime",
    "ProgressFn",
    "WorkerOutcome",
]

ProgressFn = Callable[[str, int, float, float], None]
AnyTask = WorkerTask | InterleaveTask | ReferenceTask
"""What an executor runs in a worker process."""
NODE_LOST = "node lost: "
"""Starts the reason of a configuration a cluster lost (its node died, was cancelled; its cause
is :attr:`Cause.NODE_LOST`, which ``--resume`` measures again)."""
_EXIT_GRACE_S = 30.0
_ENTRY = "from accelscope.sweep.worker import main; main()"
"""What another interpreter runs (``-c``, not ``-m``: no double import of the module)."""


@dataclass(frozen=True)
class WorkerOutcome:
    """A worker's Result, or the reason it produced none: ``failure`` in words, ``cause``
    decided where it happened."""

    result: Result | None
    failure: str = ""
    interleaved: dict[str, Any] | None = None
    """An :class:`InterleaveTask`'s block timings (``None`` for a plain task)."""
    node: str = ""
    """The cluster node that ran it (empty: this machine)."""
    reference_path: str | None = None
    """A :class:`ReferenceTask`'s output file (``None`` for other tasks)."""
    cause: Cause | None = None
    """Why there is no result; ``None`` when there is one (a failure given without a cause is
    recorded as :attr:`Cause.ERROR`)."""

    @classmethod
    def failed(cls, cause: Cause, failure: str, node: str = "") -> WorkerOutcome:
        """No result, for ``cause``, described by ``failure``."""
        return cls(None, failure, node=node, cause=cause)


class Executor(Protocol):
    """Submits isolated measurements and collects them as they finish.

    ``idle_slots(node_type)`` says how many more tasks for that node type it takes now (the
    local executors: one at a time, node type ``""``); ``submit`` queues a task and returns its
    ticket; ``next_finished`` blocks until some submitted task is done and returns its ticket
    and outcome; ``run`` is submit-and-wait for one task. None of them raises for a worker's
    failure (only for Ctrl-C)."""

    def idle_slots(self, node_type: str = "") -> int:
        """How many more tasks for ``node_type`` can be submitted now."""

    def submit(
        self, task: WorkerTask | InterleaveTask, on_progress: ProgressFn | None = None
    ) -> int:
        """Queue ``task``; returns its ticket."""

    def next_finished(self) -> tuple[int, WorkerOutcome]:
        """Block until a submitted task is done: its ticket and outcome."""

    def run(
        self, task: WorkerTask | InterleaveTask, on_progress: ProgressFn | None = None
    ) -> WorkerOutcome:
        """Run ``task``; never raises for worker failures (only for Ctrl-C)."""


class OneAtATime:
    """``submit``/``next_finished`` over ``run`` for executors that measure one task at a time
    on this machine: the task runs when it is collected."""

    def __init__(self) -> None:
        self._queued: list[tuple[int, WorkerTask | InterleaveTask, ProgressFn | None]] = []
        self._tickets = 0

    def idle_slots(self, node_type: str = "") -> int:
        """One slot for this machine (node type ``""``), free when nothing is queued."""
        return 0 if self._queued or node_type else 1

    def submit(
        self, task: WorkerTask | InterleaveTask, on_progress: ProgressFn | None = None
    ) -> int:
        """Queue ``task`` (it runs in :meth:`next_finished`)."""
        self._tickets += 1
        self._queued.append((self._tickets, task, on_progress))
        return self._tickets

    def next_finished(self) -> tuple[int, WorkerOutcome]:
        """Run the queued task now and return its outcome."""
        ticket, task, on_progress = self._queued.pop(0)
        return ticket, self.run(task, on_progress)

    def run(
        self, task: WorkerTask | InterleaveTask, on_progress: ProgressFn | None = None
    ) -> WorkerOutcome:
        """Run ``task`` to completion (each executor's own)."""
        raise NotImplementedError


def _grace_s(outcome: WorkerOutcome) -> float:
    """How long a worker may take to exit after its answer: none after a timeout (it is hung
    and is killed at once), ``_EXIT_GRACE_S`` otherwise."""
    return 0.0 if outcome.cause is Cause.TIMEOUT else _EXIT_GRACE_S


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(code).name
    except ValueError:
        return f"signal {code}"


class LocalExecutor(OneAtATime):
    """One spawned process per task on this machine, killed after ``timeout_s``."""

    def __init__(self, timeout_s: float = 900.0) -> None:
        super().__init__()
        self.timeout_s = timeout_s
        self._context = multiprocessing.get_context("spawn")

    def run(self, task: AnyTask, on_progress: ProgressFn | None = None) -> WorkerOutcome:
        """Run ``task`` in a fresh process; Ctrl-C kills the worker and propagates."""
        receiver, sender = self._context.Pipe(duplex=False)
        process = self._context.Process(
            target=worker_main,
            args=(task.to_json(), sender, os.getpid()),
            name=f"accelscope-{task.spec.label()}",
            daemon=False,  # inductor and ORT may start their own worker processes
        )
        process.start()
        sender.close()  # only the child writes; EOF on the pipe then means the child is gone
        deadline = time.monotonic() + self.timeout_s
        try:
            outcome = _collect(process, receiver, deadline, self.timeout_s, on_progress)
            process.join(timeout=_grace_s(outcome))  # let it shut down cleanly (compile pools)
            return outcome
        finally:
            if process.is_alive():
                process.kill()
            process.join(timeout=10)
            receiver.close()


class _Child:
    """A ``subprocess.Popen`` seen as the ``multiprocessing.Process`` the collector expects: a
    pidfd is its sentinel (readable once the process has exited)."""

    def __init__(self, popen: subprocess.Popen[bytes], stderr: IO[bytes]) -> None:
        self._popen = popen
        self._stderr = stderr
        self.sentinel = os.pidfd_open(popen.pid)

    @property
    def exitcode(self) -> int | None:
        return self._popen.poll()

    def join(self, timeout: float | None = None) -> None:
        try:
            self._popen.wait(timeout)
        except subprocess.TimeoutExpired:
            return

    def is_alive(self) -> bool:
        return self._popen.poll() is None

    def kill(self) -> None:
        self._popen.kill()

    def last_error_line(self) -> str:
        """The last line the child wrote to stderr (why an interpreter could not start)."""
        self._stderr.seek(0)
        lines = self._stderr.read().decode("utf-8", "replace").strip().splitlines()
        return lines[-1][:300] if lines else ""

    def close(self) -> None:
        os.close(self.sentinel)


class InterpreterExecutor(OneAtATime):
    """One process per task under another Python interpreter (a second virtual environment
    with accelscope installed, to measure another runtime version): ``python -c`` running
    :func:`accelscope.sweep.worker.main`, the task on stdin, the worker's messages on an
    inherited pipe. The worker collects its own environment there, so results name that
    interpreter's library versions."""

    def __init__(self, python: str, timeout_s: float = 900.0) -> None:
        super().__init__()
        self.python = python
        self.timeout_s = timeout_s

    def run(self, task: AnyTask, on_progress: ProgressFn | None = None) -> WorkerOutcome:
        """Run ``task`` under :attr:`python`; Ctrl-C kills the worker and propagates."""
        with tempfile.TemporaryFile() as stderr:
            return self._run(task, stderr, on_progress)

    def _run(
        self, task: AnyTask, stderr: IO[bytes], on_progress: ProgressFn | None
    ) -> WorkerOutcome:
        read_fd, write_fd = os.pipe()
        try:
            popen = subprocess.Popen(
                [self.python, "-c", _ENTRY, str(write_fd), str(os.getpid())],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                pass_fds=(write_fd,),
            )
        except OSError as exc:
            os.close(read_fd)
            return WorkerOutcome.failed(
                Cause.ERROR, f"cannot start {self.python}: {exc.strerror or exc}"
            )
        finally:
            os.close(write_fd)
        receiver = Connection(read_fd, writable=False)
        try:
            child = _Child(popen, stderr)
        except (OSError, AttributeError) as exc:  # no pidfd (old kernel, sandbox): cannot wait
            popen.kill()
            popen.wait()
            receiver.close()
            return WorkerOutcome.failed(Cause.ERROR, f"cannot watch the worker process: {exc}")
        try:
            assert popen.stdin is not None
            try:
                popen.stdin.write(task.to_json().encode("utf-8"))
                popen.stdin.close()
            except BrokenPipeError:
                pass  # the interpreter exited at once; the collector reports why
            deadline = time.monotonic() + self.timeout_s
            outcome = _collect(child, receiver, deadline, self.timeout_s, on_progress)
            if outcome.cause is Cause.CRASHED:
                detail = child.last_error_line()
                if detail:
                    outcome = replace(outcome, failure=f"{outcome.failure} ({detail})")
            child.join(timeout=_grace_s(outcome))
            return outcome
        finally:
            if child.is_alive():
                child.kill()
            child.join(timeout=10)
            receiver.close()
            child.close()


def _collect(
    process: Any,
    receiver: Any,
    deadline: float,
    timeout_s: float,
    on_progress: ProgressFn | None,
) -> WorkerOutcome:
    """Wait on the worker's messages and its exit together until a result, an error, a crash
    or the deadline."""
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return WorkerOutcome.failed(Cause.TIMEOUT, f"timeout: no result after {timeout_s:g} s")
        ready = wait([receiver, process.sentinel], timeout=remaining)
        if receiver in ready:
            try:
                message = receiver.recv()
            except EOFError:
                return _crashed(process)
            kind = message[0]
            if kind == "progress" and on_progress is not None:
                on_progress(*message[1:])
            elif kind == "result":
                return WorkerOutcome(Result.from_json(message[1]))
            elif kind == "interleaved":
                return WorkerOutcome(None, interleaved=json.loads(message[1]))
            elif kind == "reference":
                return WorkerOutcome(None, reference_path=str(message[1]))
            elif kind == "error":
                return _error(message)
        elif process.sentinel in ready and not receiver.poll():
            return _crashed(process)


def _error(message: tuple[Any, ...]) -> WorkerOutcome:
    """A worker's ``("error", reason, cause)``; a worker of an accelscope from before causes
    were sent (another interpreter's) sends no cause: :func:`legacy_cause` reads its reason."""
    reason = str(message[1])
    if len(message) > 2:
        return WorkerOutcome.failed(Cause.named(str(message[2])), reason)
    return WorkerOutcome.failed(legacy_cause(Status.FAILED, reason) or Cause.UNKNOWN, reason)


def _crashed(process: Any) -> WorkerOutcome:
    process.join(timeout=10)
    code = process.exitcode
    if code is not None and code < 0:
        return WorkerOutcome.failed(Cause.CRASHED, f"crashed: killed by {_signal_name(-code)}")
    return WorkerOutcome.failed(
        Cause.CRASHED, f"crashed: worker exited with code {code} and no result"
    )
