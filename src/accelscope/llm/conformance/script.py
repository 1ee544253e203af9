"""What a conformance case scripts and what the scripted server says it did.

:class:`StreamScript` is the stream shape a case asks of the scripted fake server
(:class:`accelscope.testing.llm_server.FakeLLMServer`, whose options these fields are, one for
one); the fake, run as its own process (``python -m accelscope.testing.llm_server --script
JSON --stamps PATH``), writes one :class:`ServedRequest` per generation request it answered
when it stops: its receipt, when each output chunk left, when the trailing events began, and
the tokens it counted. Those stamps are the truth a client is graded against: the script says
when a chunk is due, the stamp says when the loaded machine managed to send it.

Times are ``time.perf_counter`` seconds in the server's process: on Linux that is
``CLOCK_MONOTONIC``, one clock for every process of the machine, so a client's stamps compare
with them directly.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

__all__ = [
    "AGENT_TOOL",
    "CHAT_TEMPLATE_GENERATION_TOKENS",
    "CHAT_TEMPLATE_MESSAGE_TOKENS",
    "AgentScript",
    "HostedCase",
    "ServedRequest",
    "StreamScript",
    "hosted_cases_json",
    "read_hosted_cases",
    "read_stamps",
    "stamps_json",
]

CHAT_TEMPLATE_MESSAGE_TOKENS = 4
"""Tokens a chat template adds around each message (a Llama-3 template's header, role and
end-of-turn tokens), which the fake counts into ``usage.prompt_tokens`` with ``chat_template``."""
CHAT_TEMPLATE_GENERATION_TOKENS = 3
"""Tokens of the assistant header the template appends to open the answer."""


class StreamScript(BaseModel):
    """One stream shape: the fake server's options (see its docstring for each)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    ttft_s: float = Field(default=0.03, ge=0)
    itl_s: float = Field(default=0.006, ge=0)
    tokens_per_chunk: int = Field(default=1, ge=1)
    first_chunk_tokens: int | None = Field(default=None, ge=1)
    output_tokens: int | None = Field(default=None, ge=0)
    include_usage_supported: bool = True
    reasoning_tokens: int = Field(default=0, ge=0)
    reasoning_field: Literal["reasoning", "reasoning_content"] = "reasoning"
    empty_opening_chunk: bool = False
    tail_s: float = Field(default=0.0, ge=0)
    fault: str = ""
    chat_template: bool = False


AGENT_TOOL = "grep"
"""The tool every scripted agent turn but the last calls."""


class AgentScript(BaseModel):
    """The trajectories of an agentic case: ``sessions`` alike, each a system prompt and a
    task, then ``turns`` answers; every answer but the last calls :data:`AGENT_TOOL`, whose
    result (``message_words`` words) comes back ``tool_wait_s`` after the answer ended (its
    recorded ``latency_s``). Every message has ``message_words`` words of its own
    (``s<session>m<message>w<word>``: no two messages share a word, so a prompt grows by what
    a turn adds and nothing else), every recorded answer ``answer_words`` (its tool call one
    word: ``grep({...})``). :meth:`trajectories` writes them as OpenAI chat messages, one
    session a line: the file ``accelscope llm --agentic`` reads and a peer's agentic mode is
    fed from."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    sessions: int = Field(default=3, ge=1)
    turns: int = Field(default=3, ge=2)
    tool_wait_s: float = Field(default=0.2, gt=0)
    message_words: int = Field(default=8, ge=1)
    answer_words: int = Field(default=8, ge=2)

    def _words(self, session: int, message: int, count: int) -> str:
        return " ".join(f"s{session}m{message}w{k}" for k in range(count))

    def session_messages(self, session: int) -> list[dict[str, object]]:
        """One session's OpenAI chat messages (tool messages with their ``latency_s``)."""
        messages: list[dict[str, object]] = [
            {"role": "system", "content": self._words(session, 0, self.message_words)},
            {"role": "user", "content": self._words(session, 1, self.message_words)},
        ]
        for turn in range(self.turns):
            number = len(messages)
            if turn == self.turns - 1:
                messages.append(
                    {
                        "role": "assistant",
                        "content": self._words(session, number, self.answer_words),
                    }
                )
                break
            call = f"call-{session}-{turn}"
            arguments = f'{{"q":"s{session}t{turn}"}}'
            messages.append(
                {
                    "role": "assistant",
                    "content": self._words(session, number, self.answer_words - 1),
                    "tool_calls": [
                        {
                            "id": call,
                            "type": "function",
                            "function": {"name": AGENT_TOOL, "arguments": arguments},
                        }
                    ],
                }
            )
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": call,
                    "content": self._words(session, number + 1, self.message_words),
                    "latency_s": self.tool_wait_s,
                }
            )
        return messages

    def trajectories(self) -> str:
        """The trajectory file's text: ``{"id": "s<k>", "messages": [...]}`` a line."""
        return "".join(
            json.dumps({"id": f"s{k}", "messages": self.session_messages(k)}) + "\n"
            for k in range(self.sessions)
        )


class ServedRequest(BaseModel):
    """One generation request as the fake served it (``perf_counter`` seconds)."""

    model_config = ConfigDict(frozen=True)

    received_s: float
    sent_s: list[float]
    """When each output chunk left (the scripted time, or later on a loaded machine)."""
    ended_s: float | None
    """When the trailing events (finish chunk, usage, ``[DONE]``; or a scripted error event)
    began to leave; None: the stream was cut."""
    chunk_tokens: list[int]
    """The tokens each output chunk carried."""
    prompt_tokens: int
    output_tokens: int
    reasoning_tokens: int
    content_chunk: int | None
    """The index of the first chunk with answer text; None: no answer text."""
    errored: bool
    """The stream ended with an error event."""


class HostedCase(BaseModel):
    """One case the fake server process hosts: its name (its stamps file's), port and script."""

    model_config = ConfigDict(frozen=True)

    name: str
    port: int
    script: StreamScript


_STAMPS = TypeAdapter(list[ServedRequest])
_HOSTED = TypeAdapter(list[HostedCase])


def hosted_cases_json(cases: Sequence[HostedCase]) -> bytes:
    """The ``--cases`` file of the fake server process."""
    return _HOSTED.dump_json(list(cases))


def read_hosted_cases(data: bytes) -> list[HostedCase]:
    """The cases of a ``--cases`` file."""
    return _HOSTED.validate_json(data)


def stamps_json(served: Sequence[ServedRequest]) -> bytes:
    """The stamps file's content."""
    return _STAMPS.dump_json(list(served))


def read_stamps(data: bytes) -> list[ServedRequest]:
    """The requests of a stamps file, in order of receipt."""
    return sorted(_STAMPS.validate_json(data), key=lambda r: r.received_s)
