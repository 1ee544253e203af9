"""Run a WorkerTask in an isolated process with a timeout; crashes become recorded failures.

The parent waits blocking on the result pipe and the process sentinel together (no polling
loop that would steal a core from the measurement). Scale-out executors (Ray) implement the
same ``run`` method.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import wait
from typing import Any, Protocol

from accelscope.result import Result
from accelscope.sweep.worker import InterleaveTask, WorkerTask, worker_main

__all__ = ["Executor", "LocalExecutor", "WorkerOutcome"]

ProgressFn = Callable[[str, int, float, float], None]
_EXIT_GRACE_S = 30.0


@dataclass(frozen=True)
class WorkerOutcome:
    """A worker's Result, or the reason it produced none."""

    result: Result | None
    failure: str = ""
    interleaved: dict[str, Any] | None = None
    """An :class:`InterleaveTask`'s block timings (``None`` for a plain task)."""


class Executor(Protocol):
    """Runs one task to completion (or failure) and returns its outcome."""

    def run(
        self, task: WorkerTask | InterleaveTask, on_progress: ProgressFn | None = None
    ) -> WorkerOutcome:
        """Run ``task``; never raises for worker failures (only for Ctrl-C)."""


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(code).name
    except ValueError:
        return f"signal {code}"


class LocalExecutor:
    """One spawned process per task on this machine, killed after ``timeout_s``."""

    def __init__(self, timeout_s: float = 900.0) -> None:
        self.timeout_s = timeout_s
        self._context = multiprocessing.get_context("spawn")

    def run(
        self, task: WorkerTask | InterleaveTask, on_progress: ProgressFn | None = None
    ) -> WorkerOutcome:
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
            outcome = self._collect(process, receiver, deadline, on_progress)
            process.join(timeout=_EXIT_GRACE_S)  # let it shut down cleanly (compile pools)
            return outcome
        finally:
            if process.is_alive():
                process.kill()
            process.join(timeout=10)
            receiver.close()

    def _collect(
        self, process: Any, receiver: Any, deadline: float, on_progress: ProgressFn | None
    ) -> WorkerOutcome:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return WorkerOutcome(None, f"timeout: no result after {self.timeout_s:g} s")
            ready = wait([receiver, process.sentinel], timeout=remaining)
            if receiver in ready:
                try:
                    message = receiver.recv()
                except EOFError:
                    return self._crashed(process)
                kind = message[0]
                if kind == "progress" and on_progress is not None:
                    on_progress(*message[1:])
                elif kind == "result":
                    return WorkerOutcome(Result.from_json(message[1]))
                elif kind == "interleaved":
                    return WorkerOutcome(None, interleaved=json.loads(message[1]))
                elif kind == "error":
                    return WorkerOutcome(None, str(message[1]))
            elif process.sentinel in ready and not receiver.poll():
                return self._crashed(process)

    @staticmethod
    def _crashed(process: Any) -> WorkerOutcome:
        process.join(timeout=10)
        code = process.exitcode
        if code is not None and code < 0:
            return WorkerOutcome(None, f"crashed: killed by {_signal_name(-code)}")
        return WorkerOutcome(None, f"crashed: worker exited with code {code} and no result")
