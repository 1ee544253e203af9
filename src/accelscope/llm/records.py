"""The types every part of ``llm`` shares: one request to send, what was measured of it
(:class:`~accelscope.llm.documents.RequestRecord`, stored as is), and the system under test
(``Target``) that turns the first into the second.

Times are seconds on ``time.perf_counter``'s clock, relative to the trial's start (``origin_s``),
so a record is self-contained and JSON-ready. ``scheduled_s`` is when the workload said the
request arrives (open loop: fixed before the trial starts; closed loop and later turns of a
conversation: when the client was ready to send it), ``sent_s`` when the client actually sent
it: latencies count from ``scheduled_s`` (no coordinated omission), and ``sent_s -
scheduled_s`` is the client's own lag.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Literal, Protocol

from accelscope.llm.documents import RequestRecord, TargetDescription, TokenSource

__all__ = ["ChatMessage", "LlmRequest", "RequestRecord", "Target", "TokenSource"]

Role = Literal["system", "user", "assistant"]


@dataclass(frozen=True)
class ChatMessage:
    """One message of a conversation."""

    role: Role
    content: str


@dataclass(frozen=True, kw_only=True)
class LlmRequest:
    """One request of a workload, as sent. ``prompt`` is the whole text a completions API
    gets (for a later turn of a conversation: the conversation so far, replies included, then
    the new message); ``messages`` is the same conversation for a chat API (empty: one user
    message, ``prompt``)."""

    index: int
    prompt: str
    max_tokens: int
    messages: tuple[ChatMessage, ...] = ()
    prompt_tokens: int | None = None
    """Tokens in ``prompt`` by the tokenizer the workload was built with (None: none given)."""
    scheduled_s: float | None = None
    """Open loop: arrival offset from the trial start. Otherwise ``None`` (sent when a client
    is ready)."""
    session: int | None = None
    turn: int | None = None
    reusable_prefix_tokens: int | None = None
    """Tokens at the start of the prompt that earlier requests already sent (the
    conversation so far, a shared prefix, a trace's repeated blocks); None: not known."""

    def chat(self) -> tuple[ChatMessage, ...]:
        """The messages a chat API gets."""
        return self.messages or (ChatMessage("user", self.prompt),)

    def record(self, *, scheduled_s: float, sent_s: float) -> RequestRecord:
        """A fresh record of this request, to be filled in as it streams."""
        return RequestRecord(
            index=self.index,
            scheduled_s=scheduled_s,
            sent_s=sent_s,
            end_s=0.0,
            prompt_tokens=self.prompt_tokens,
            session=self.session,
            turn=self.turn,
            reusable_prefix_tokens=self.reusable_prefix_tokens,
        )


class Target(Protocol):
    """A system under test: an HTTP endpoint, an in-process model, or a fake."""

    def describe(self) -> TargetDescription:
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
        is the record's ``error``. Returns early, ``cancelled``, once ``cancel`` is set. The
        record's ``output_text`` holds what was streamed (a conversation's next turn needs
        it)."""
        ...

    def trial_notes(self) -> list[str]:
        """What the target saw of the requests since the last call (an in-process model: how
        its static batches formed); empty where it sees nothing of its own."""
        ...

    def close(self) -> None:
        """Release connections, threads or the loaded model."""
        ...
