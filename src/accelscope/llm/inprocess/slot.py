"""One request in flight, shared between its client thread and the generation side."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Literal

from accelscope.llm.records import LlmRequest

__all__ = ["Slot", "SlotState"]

SlotState = Literal["queued", "running", "done", "abandoned"]


@dataclass
class Slot:
    """A request in flight. ``state`` moves ``queued`` -> ``running`` -> ``done`` (the
    generation side) or to ``abandoned`` (its client gave up: cancel or timeout); every change
    holds ``lock``. Times are ``time.perf_counter()`` readings (``_pc``)."""

    request: LlmRequest
    input_ids: list[int]
    sent_pc: float
    request_id: str = ""
    state: SlotState = "queued"
    tokens: list[int] = field(default_factory=list)
    times_pc: list[float] = field(default_factory=list)
    end_pc: float | None = None
    error: str = ""
    lock: threading.Lock = field(default_factory=threading.Lock)
    done: threading.Event = field(default_factory=threading.Event)

    def start(self) -> bool:
        """Queued -> running; False when the client already gave up."""
        with self.lock:
            if self.state != "queued":
                return False
            self.state = "running"
            return True

    def wants_more(self, generated: int) -> bool:
        """Whether this row still counts tokens once the batch has ``generated`` of them."""
        with self.lock:
            return self.state == "running" and generated < self.request.max_tokens

    def add_token(self, token: int, stamp: float, eos: frozenset[int]) -> None:
        """One decoding step's token for this row (static batching)."""
        with self.lock:
            if self.state != "running":
                return
            if token in eos:
                self._finish(stamp)
                return
            self.tokens.append(token)
            self.times_pc.append(stamp)
            if len(self.tokens) >= self.request.max_tokens:
                self._finish(stamp)

    def complete(self, tokens: list[int], times_pc: list[float], error: str, stamp: float) -> None:
        """Everything at once (continuous batching hands over a finished request)."""
        with self.lock:
            if self.state not in ("queued", "running"):
                return
            self.tokens, self.times_pc, self.error = tokens, times_pc, error
            self._finish(times_pc[-1] if times_pc and not error else stamp)

    def finish_now(self, error: str = "") -> None:
        """End a running row with what it has (its batch ended, or failed with ``error``)."""
        with self.lock:
            if self.state not in ("queued", "running"):
                return
            self.error = error
            self._finish(time.perf_counter())

    def abandon(self) -> bool:
        """The client gives up; False when the request already finished."""
        with self.lock:
            if self.state in ("done", "abandoned"):
                return False
            self.state = "abandoned"
            self.end_pc = time.perf_counter()
            return True

    def generated(self) -> int:
        """Tokens counted for this request so far."""
        with self.lock:
            return len(self.tokens)

    def _finish(self, stamp: float) -> None:
        self.state = "done"
        self.end_pc = stamp
        self.done.set()
