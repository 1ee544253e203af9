"""The types every part of ``llm`` shares: one request to send, what was measured of it, and
the system under test (``Target``) that turns the first into the second.

Times are seconds on ``time.perf_counter``'s clock, relative to the trial's start (``origin_s``),
so a record is self-contained and JSON-ready. ``scheduled_s`` is when the workload said the
request arrives (open loop: fixed before the trial starts; closed loop: when its client slot
freed up), ``sent_s`` when the client actually sent it: latencies count from ``scheduled_s``
(no coordinated omission), and ``sent_s - scheduled_s`` is the client's own lag.
"""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, Protocol

__all__ = ["LlmRequest", "RequestRecord", "Target", "TokenSource"]

TokenSource = Literal["usage", "tokenizer", "generated", "unknown"]
"""Where ``output_tokens`` came from: the server's ``usage``, the model's tokenizer run over the
streamed text (the fallback, labelled), the in-process generator's own token ids, or nowhere."""


@dataclass(frozen=True, kw_only=True)
class LlmRequest:
    """One request of a workload."""

    index: int
    prompt: str
    max_tokens: int
    prompt_tokens: int | None = None
    """Tokens in ``prompt`` by the tokenizer the workload was built with (None: none given)."""
    scheduled_s: float | None = None
    """Open loop: arrival offset from the trial start. Closed loop: ``None`` (sent when a slot
    frees up)."""


@dataclass(kw_only=True)
class RequestRecord:
    """What one request measured. ``chunk_times_s`` are the arrivals of the stream's chunks
    that carried text (a chunk may hold several tokens); ``first_token_s`` is the first of
    them. ``error`` is empty for a request that completed; ``cancelled`` marks a request the
    run itself cut short (Ctrl-C, the trial's end), which no figure counts."""

    index: int
    scheduled_s: float
    sent_s: float
    end_s: float
    first_token_s: float | None = None
    chunk_times_s: list[float] = field(default_factory=list)
    output_tokens: int | None = None
    prompt_tokens: int | None = None
    tokens_source: TokenSource = "unknown"
    output_chars: int = 0
    error: str = ""
    cancelled: bool = False

    @property
    def ok(self) -> bool:
        """Completed without error and not cancelled."""
        return not self.error and not self.cancelled

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (times rounded to the microsecond)."""
        data = asdict(self)
        for key in ("scheduled_s", "sent_s", "end_s", "first_token_s"):
            if data[key] is not None:
                data[key] = round(data[key], 6)
        data["chunk_times_s"] = [round(t, 6) for t in self.chunk_times_s]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RequestRecord:
        """The inverse of :meth:`to_dict`."""
        return cls(**data)


class Target(Protocol):
    """A system under test: an HTTP endpoint, an in-process model, or a fake."""

    def describe(self) -> dict[str, Any]:
        """What is measured (kind, URL or model path, API, model name), for the document."""
        ...

    def check(self) -> None:
        """Fail fast with a one-line :class:`~accelscope.errors.BadInputError` when the target
        cannot serve (unreachable, wrong path, unknown model, not a streaming OpenAI API)."""
        ...

    def stream(
        self,
        request: LlmRequest,
        *,
        origin_s: float,
        scheduled_s: float,
        timeout_s: float,
        cancel: threading.Event,
    ) -> RequestRecord:
        """Send ``request`` now and measure it. Never raises for a failed request: the failure
        is the record's ``error``. Returns early, ``cancelled``, once ``cancel`` is set."""
        ...

    def close(self) -> None:
        """Release connections, threads or the loaded model."""
        ...
