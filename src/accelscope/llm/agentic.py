"""Agent trajectories: sessions of turns, each turn a request whose prompt is the conversation
so far, read from OpenAI chat messages, one session per JSONL line.

A line is ``{"id": "optional name", "messages": [...]}`` (a bare list of messages is accepted
too). Each message is an OpenAI chat message:

- ``{"role": "system" | "user", "content": "..."}``;
- ``{"role": "assistant", "content": "..." | null, "tool_calls": [{"id": "c1", "type":
  "function", "function": {"name": "grep", "arguments": "{...}"}}], "reasoning_content":
  "..."}`` (``tool_calls`` and the reasoning optional; ``reasoning`` is read as well);
- ``{"role": "tool", "tool_call_id": "c1", "content": "...", "latency_s": 1.25}``.

**Turns.** Every assistant message is one turn: a request whose prompt is every message before
it and whose recorded answer it is. Its **expected output tokens** are the recorded answer's
(reasoning, text and tool calls).

**Tool latency** (this format's own field, as OpenAI messages have none): ``latency_s`` on a
``tool`` message is the seconds the tool took to return that result; on a ``user`` message
after an answer, the seconds the user took to write it. The **wait** after a turn, before the
next one is sent, is the sum of the ``latency_s`` of the messages between the two answers (an
agent loop runs its tool calls one after another); a message without one adds nothing, and the
turn's ``wait_recorded`` says whether any was given.

**Reasoning is not sent back.** The recorded reasoning counts in the turn's expected output but
is left out of the later prompts: OpenAI's chat API has no input field for it and vLLM's and
SGLang's reasoning models' chat templates drop it from earlier turns. So the next turn's
prefix reaches the end of the previous prompt, not the end of the previous reasoning.

**Tokens.** A message counts as its role header and its text (``"<|role|>\\n"`` + content, then
each tool call's name and arguments), by the tokenizer when one is given, else a word per
token, the workload layer's model (:func:`~accelscope.llm.workload.count_tokens`). A server's
chat template adds a few tokens of its own per message, so a context check near the limit is
approximate by those. :meth:`AgentSession.prompt_ids` gives the ids a prefix cache would see
(words interned in file order without a tokenizer).

**Replay** (:class:`AgenticWorkload`, ``accelscope llm --agentic FILE``). Each turn is sent
when the turn before has ended plus its recorded wait (the harness's think time), and its
prompt is the whole conversation so far: the messages since the last answer go as one user
message (a tool result as ``[tool result CALL_ID]`` and its text), the earlier answers as
assistant messages. The answers sent back are the **server's own** by default: a live agent
sends back what the server generated, and the server's cache holds the KV of that output, so
the next turn's reusable prefix is measured as an agent would meet it. ``answers="recorded"``
sends the file's answers instead (their text and tool calls): every prompt is then the file's,
the same on any server, and the prefix optimum (:mod:`accelscope.llm.prefix_optimum`, which
reads the recorded answers) describes exactly what was sent. Tool results go as user text, not
``tool`` messages, because a ``tool`` message must answer a ``tool_calls`` entry of the
assistant message before it, which the server's own answer (sent without tool definitions)
does not have. Every prompt of a trial starts with a short tag of the trial's seed, so a trial
does not reuse what the trial before it left in the cache, while the sessions of one trial
still share their common system prompt.

**Bad input.** A line that is not JSON, not a session, holds an unknown role, a tool result
with no matching earlier call, a turn over the context length (prompt + expected output above
``context_tokens``), a bad field, or no turn at all is one line naming the file, line, session
and turn (:class:`~accelscope.errors.BadInputError`). With ``lenient=True`` such a session is
skipped and counted per :class:`SkipReason`, as the ShareGPT reader counts the entries it
skips.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, ClassVar, Literal

from accelscope.errors import BadInputError
from accelscope.llm.documents import Arrivals, WorkloadSummary
from accelscope.llm.prefix_optimum import TurnTokens, optimum
from accelscope.llm.workload import (
    Session,
    TokenCounter,
    Turn,
    count_tokens,
    draw_trial,
    read_text_file,
    register,
)

__all__ = [
    "OPTIMUM_BLOCK_TOKENS",
    "AgentMessage",
    "AgentSession",
    "AgentTurn",
    "AgenticWorkload",
    "SkipReason",
    "ToolCall",
    "Trajectories",
    "cache_sessions",
    "read_trajectories",
]

AgentRole = Literal["system", "user", "assistant", "tool"]
AnswerSource = Literal["server", "recorded"]
OPTIMUM_BLOCK_TOKENS = (16, 128)
"""The block sizes of the prefix optimum a workload summary states (vLLM's on GPUs and on its
CPU build)."""
_ROLES: tuple[AgentRole, ...] = ("system", "user", "assistant", "tool")


class SkipReason(StrEnum):
    """Why a session was refused (strict) or skipped (lenient)."""

    NOT_JSON = "not JSON"
    NOT_A_SESSION = "not a session"
    UNKNOWN_ROLE = "unknown role"
    UNMATCHED_TOOL_RESULT = "tool result with no matching call"
    OVER_CONTEXT = "turn over the context length"
    BAD_FIELD = "bad field"
    EMPTY = "no turn"


class _Refused(Exception):
    """A session that cannot be replayed: the reason and the one line that says why."""

    def __init__(self, reason: SkipReason, text: str) -> None:
        super().__init__(text)
        self.reason = reason
        self.text = text


@dataclass(frozen=True)
class ToolCall:
    """One tool call of an assistant message."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True, kw_only=True)
class AgentMessage:
    """One chat message of a trajectory. ``latency_s``: the seconds a tool (or the user) took
    to produce this message after the answer before it; ``None``: not recorded."""

    role: AgentRole
    content: str
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    reasoning: str = ""
    latency_s: float | None = None

    def __post_init__(self) -> None:
        if self.latency_s is not None and not self.latency_s >= 0.0:
            raise ValueError(f"latency_s {self.latency_s} must be >= 0")
        if self.tool_calls and self.role != "assistant":
            raise ValueError("only an assistant message makes tool calls")
        if (self.role == "tool") != (self.tool_call_id is not None):
            raise ValueError("a tool message, and only one, names its tool_call_id")

    def rendered(self) -> str:
        """The text a prompt carries of this message (role header, text, tool calls); the
        reasoning is never sent back (see the module)."""
        calls = "".join(f"\n{call.name}({call.arguments})" for call in self.tool_calls)
        return f"<|{self.role}|>\n{self.content}{calls}"

    def answer_text(self) -> str:
        """What a server generates for this (assistant) message: reasoning, text, calls."""
        calls = "".join(f"\n{call.name}({call.arguments})" for call in self.tool_calls)
        return f"{self.reasoning}\n{self.content}{calls}".strip()


@dataclass(frozen=True, kw_only=True)
class AgentTurn:
    """One request of a session: the first ``prompt_messages`` messages of the session are its
    prompt (``prompt_tokens`` of them), ``answer`` the recorded answer (``output_tokens``,
    at least 1: the ``max_tokens`` it is replayed with), and ``wait_s`` the recorded tool (or
    user) time after the answer before the next turn (0 after the last turn)."""

    number: int
    prompt_messages: int
    prompt_tokens: int
    answer: AgentMessage
    output_tokens: int
    wait_s: float
    wait_recorded: bool

    def __post_init__(self) -> None:
        if self.number < 1 or self.prompt_messages < 1:
            raise ValueError("a turn is numbered from 1 and has a prompt")
        if self.prompt_tokens < 1 or self.output_tokens < 1:
            raise ValueError("a turn has at least one prompt and one output token")
        if not self.wait_s >= 0.0:
            raise ValueError(f"wait_s {self.wait_s} must be >= 0")
        if self.answer.role != "assistant":
            raise ValueError("a turn's answer is an assistant message")


@dataclass(frozen=True, kw_only=True)
class AgentSession:
    """One trajectory: its messages, each message's token ids (the token model of the
    module), and its turns. ``line`` is its 1-based line in the file."""

    line: int
    name: str
    messages: tuple[AgentMessage, ...]
    message_ids: tuple[tuple[int, ...], ...]
    turns: tuple[AgentTurn, ...]

    def __post_init__(self) -> None:
        if not self.turns:
            raise ValueError("a session has at least one turn")
        if len(self.message_ids) != len(self.messages):
            raise ValueError("one token-id list per message")
        for turn in self.turns:
            counted = sum(len(ids) for ids in self.message_ids[: turn.prompt_messages])
            if counted != turn.prompt_tokens:
                raise ValueError(f"turn {turn.number}: {turn.prompt_tokens} != {counted} tokens")

    def prompt(self, turn: AgentTurn) -> tuple[AgentMessage, ...]:
        """The messages a turn sends (the conversation so far, recorded answers included)."""
        return self.messages[: turn.prompt_messages]

    def prompt_ids(self, turn: AgentTurn) -> tuple[int, ...]:
        """The token ids of a turn's prompt."""
        return tuple(i for ids in self.message_ids[: turn.prompt_messages] for i in ids)

    def answer_ids(self, turn: AgentTurn) -> tuple[int, ...]:
        """The token ids of a turn's recorded answer as the next prompt carries it."""
        return self.message_ids[turn.prompt_messages]


@dataclass(frozen=True, kw_only=True)
class Trajectories:
    """The sessions of a trajectory file and, in lenient mode, the skipped ones per reason."""

    source: str
    sessions: tuple[AgentSession, ...]
    skipped: Mapping[SkipReason, int] = field(default_factory=dict)
    context_tokens: int | None = None

    def __post_init__(self) -> None:
        if not self.sessions:
            raise ValueError("no session")
        if any(count < 1 for count in self.skipped.values()):
            raise ValueError("a skip reason counts at least one session")

    @property
    def skipped_total(self) -> int:
        return sum(self.skipped.values())

    def skip_notes(self) -> list[str]:
        """``3 sessions skipped: unknown role``, one line per reason."""
        return [
            f"{count} session{'s' if count > 1 else ''} skipped: {reason.value}"
            for reason, count in sorted(self.skipped.items())
        ]


class _Ids:
    """Token ids of texts: the tokenizer's, or each word interned in order of appearance."""

    def __init__(self, tokenizer: TokenCounter | None) -> None:
        self.tokenizer = tokenizer
        self.words: dict[str, int] = {}

    def __call__(self, text: str) -> tuple[int, ...]:
        if self.tokenizer is not None:
            return tuple(self.tokenizer.encode(text, add_special_tokens=False))
        return tuple(self.words.setdefault(word, len(self.words)) for word in text.split())


def _lines(text: str) -> Iterator[tuple[int, str]]:
    for number, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            yield number, line


def _text(where: str, value: Any, what: str) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):  # content parts: the text ones
        parts = [p.get("text") for p in value if isinstance(p, dict)]
        if all(isinstance(p, str) for p in parts) and len(parts) == len(value):
            return "".join(str(p) for p in parts)
    raise _Refused(SkipReason.BAD_FIELD, f'{where}: "{what}" must be a string')


def _tool_calls(where: str, raw: Any) -> tuple[ToolCall, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise _Refused(SkipReason.BAD_FIELD, f'{where}: "tool_calls" must be a list')
    calls = []
    for position, call in enumerate(raw):
        function = call.get("function") if isinstance(call, dict) else None
        ident = call.get("id") if isinstance(call, dict) else None
        name = function.get("name") if isinstance(function, dict) else None
        arguments = function.get("arguments", "") if isinstance(function, dict) else None
        if not isinstance(ident, str) or not ident or not isinstance(name, str):
            raise _Refused(
                SkipReason.BAD_FIELD,
                f'{where}: tool call {position} needs an "id" and a "function" with a "name"',
            )
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments, sort_keys=True)
        calls.append(ToolCall(ident, name, arguments))
    return tuple(calls)


def _latency(where: str, raw: Any) -> float | None:
    if raw is None:
        return None
    if (
        isinstance(raw, bool)
        or not isinstance(raw, int | float)
        or not math.isfinite(raw)
        or raw < 0.0
    ):
        raise _Refused(
            SkipReason.BAD_FIELD, f'{where}: "latency_s" must be a finite number of seconds >= 0'
        )
    return float(raw)


def _message(where: str, raw: Any, open_calls: set[str]) -> AgentMessage:
    """One message, checked; ``open_calls`` holds the ids of calls not yet answered."""
    if not isinstance(raw, dict):
        raise _Refused(SkipReason.NOT_A_SESSION, f"{where}: a message must be an object")
    role = raw.get("role")
    if role not in _ROLES:
        raise _Refused(
            SkipReason.UNKNOWN_ROLE,
            f"{where}: unknown role {role!r} (system, user, assistant or tool)",
        )
    content = _text(where, raw.get("content"), "content")
    latency = _latency(where, raw.get("latency_s"))
    if role == "tool":
        ident = raw.get("tool_call_id")
        if not isinstance(ident, str) or ident not in open_calls:
            raise _Refused(
                SkipReason.UNMATCHED_TOOL_RESULT,
                f"{where}: tool result {ident!r} answers no earlier tool call"
                + (f" (open: {', '.join(sorted(open_calls))})" if open_calls else ""),
            )
        open_calls.discard(ident)
        return AgentMessage(role="tool", content=content, tool_call_id=ident, latency_s=latency)
    if role == "assistant":
        calls = _tool_calls(where, raw.get("tool_calls"))
        open_calls.update(call.id for call in calls)
        reasoning = raw.get("reasoning_content", raw.get("reasoning"))
        return AgentMessage(
            role="assistant",
            content=content,
            tool_calls=calls,
            reasoning=_text(where, reasoning, "reasoning_content"),
            latency_s=latency,
        )
    return AgentMessage(role=role, content=content, latency_s=latency)


def _session(
    line: int,
    row: Any,
    where: str,
    ids: _Ids,
    context_tokens: int | None,
) -> AgentSession:
    """One line's session, or :class:`_Refused` naming the turn."""
    if isinstance(row, list):
        raw_messages, name = row, str(line)
    elif isinstance(row, dict) and isinstance(row.get("messages"), list):
        raw_messages, name = row["messages"], str(row.get("id", line))
    else:
        raise _Refused(
            SkipReason.NOT_A_SESSION, f'{where}: not a session (an object with a "messages" list)'
        )
    where = f"{where} (session {name})"
    open_calls: set[str] = set()
    messages: list[AgentMessage] = []
    message_ids: list[tuple[int, ...]] = []
    turns: list[AgentTurn] = []
    prompt_tokens = 0
    pending_wait: float | None = None  # the wait after the last answer, summed so far
    for position, raw in enumerate(raw_messages):
        here = f"{where}, turn {len(turns) + 1}, message {position}"
        message = _message(here, raw, open_calls)
        if message.role == "assistant" and not messages:
            raise _Refused(SkipReason.BAD_FIELD, f"{here}: an answer with no prompt before it")
        if message.role == "assistant":
            output = max(1, len(ids(message.answer_text())))
            if context_tokens is not None and prompt_tokens + output > context_tokens:
                raise _Refused(
                    SkipReason.OVER_CONTEXT,
                    f"{here}: {prompt_tokens} prompt + {output} output tokens exceed the "
                    f"context of {context_tokens}",
                )
            if turns:
                turns[-1] = _with_wait(turns[-1], pending_wait)
            turns.append(
                AgentTurn(
                    number=len(turns) + 1,
                    prompt_messages=len(messages),
                    prompt_tokens=prompt_tokens,
                    answer=message,
                    output_tokens=output,
                    wait_s=0.0,
                    wait_recorded=False,
                )
            )
            pending_wait = None
        elif turns and message.latency_s is not None:
            pending_wait = (pending_wait or 0.0) + message.latency_s
        rendered = ids(message.rendered())
        messages.append(message)
        message_ids.append(rendered)
        prompt_tokens += len(rendered)
    if not turns:
        raise _Refused(SkipReason.EMPTY, f"{where}: no assistant message, so no turn to replay")
    return AgentSession(
        line=line,
        name=name,
        messages=tuple(messages),
        message_ids=tuple(message_ids),
        turns=tuple(turns),
    )


def _with_wait(turn: AgentTurn, wait_s: float | None) -> AgentTurn:
    return AgentTurn(
        number=turn.number,
        prompt_messages=turn.prompt_messages,
        prompt_tokens=turn.prompt_tokens,
        answer=turn.answer,
        output_tokens=turn.output_tokens,
        wait_s=wait_s or 0.0,
        wait_recorded=wait_s is not None,
    )


def read_trajectories(
    path: Path,
    *,
    tokenizer: TokenCounter | None = None,
    context_tokens: int | None = None,
    lenient: bool = False,
) -> Trajectories:
    """Every session of a trajectory file (see the module). Strict (the default): the first
    bad session is a one-line :class:`BadInputError` naming the line, session and turn.
    ``lenient``: bad sessions are skipped and counted per reason; a file left with no session
    is still an error."""
    if context_tokens is not None and context_tokens < 2:
        raise BadInputError(f"context length {context_tokens}: give at least 2 tokens")
    text = read_text_file(path, "trajectory file")
    ids = _Ids(tokenizer)
    sessions: list[AgentSession] = []
    skipped: Counter[SkipReason] = Counter()
    for number, line in _lines(text):
        where = f"{path}:{number}"
        try:
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise _Refused(
                    SkipReason.NOT_JSON,
                    f"{where} (session {number}): not JSON ({exc.msg}); a trajectory file "
                    'holds one {"messages": [...]} per line',
                ) from None
            sessions.append(_session(number, row, where, ids, context_tokens))
        except _Refused as refused:
            if not lenient:
                raise BadInputError(refused.text) from None
            skipped[refused.reason] += 1
    if not sessions:
        detail = "; ".join(f"{n} {r.value}" for r, n in sorted(skipped.items()))
        raise BadInputError(
            f"{path}: no session to replay" + (f" (skipped: {detail})" if detail else "")
        )
    return Trajectories(
        source=str(path),
        sessions=tuple(sessions),
        skipped=dict(skipped),
        context_tokens=context_tokens,
    )


def cache_sessions(trajectories: Trajectories) -> list[list[TurnTokens]]:
    """The turns of agent trajectories as token ids for :mod:`~accelscope.llm.prefix_optimum`:
    each turn's prompt and its recorded answer as the next prompt carries it."""
    return [
        [TurnTokens(session.prompt_ids(turn), session.answer_ids(turn)) for turn in session.turns]
        for session in trajectories.sessions
    ]


def _spread(counts: Sequence[int]) -> str:
    """``12:900 (mean 310, words)``: a token count's range as read (words per the module)."""
    return f"{min(counts)}:{max(counts)} (mean {sum(counts) / len(counts):.0f}, words)"


def _sent(message: AgentMessage) -> str:
    """A message as the text of the user message that carries it in a replay."""
    if message.role == "tool":
        return f"[tool result {message.tool_call_id}]\n{message.content}"
    return message.content


def _recorded_reply(answer: AgentMessage) -> str:
    """A recorded answer as sent back: its text and tool calls, never its reasoning."""
    calls = "".join(f"\n{call.name}({call.arguments})" for call in answer.tool_calls)
    return f"{answer.content}{calls}"


@dataclass(frozen=True, kw_only=True)
class AgenticWorkload:
    """Agent trajectories replayed turn by turn, with their recorded tool waits (see the
    module). ``sessions_per_trial``: ``None`` replays every session of the file once (more
    are taken again from the start)."""

    kind: ClassVar[str] = "agentic"
    unit: ClassVar[str] = "sessions"

    trajectories: Trajectories
    answers: AnswerSource = "server"
    sessions_per_trial: int | None = None
    seed: int = 0
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.answers not in ("server", "recorded"):
            raise BadInputError(f"--agentic-answers {self.answers!r}: give server or recorded")
        if self.sessions_per_trial is not None and self.sessions_per_trial < 1:
            raise BadInputError(f"--sessions {self.sessions_per_trial}: give at least 1 session")

    @classmethod
    def from_file(
        cls,
        path: Path,
        *,
        lenient: bool = False,
        context_tokens: int | None = None,
        **settings: Any,
    ) -> AgenticWorkload:
        """Read ``path`` (one-line errors, or skips counted when ``lenient``)."""
        found = read_trajectories(path, context_tokens=context_tokens, lenient=lenient)
        return cls(trajectories=found, **settings)

    @property
    def multi_turn(self) -> bool:
        return True

    def default_count(self) -> int:
        return self.sessions_per_trial or len(self.trajectories.sessions)

    def mean_turns(self) -> float:
        sessions = self.trajectories.sessions
        return sum(len(s.turns) for s in sessions) / len(sessions)

    def summary(self) -> WorkloadSummary:
        sessions = self.trajectories.sessions
        turns = [len(s.turns) for s in sessions]
        waits = [t.wait_s for s in sessions for t in s.turns[:-1]]
        tokens = cache_sessions(self.trajectories)
        best = [optimum(tokens, block_size=size).hit_rate for size in OPTIMUM_BLOCK_TOKENS]
        mean_wait = sum(waits) / len(waits) if waits else 0.0
        prompts = [t.prompt_tokens for s in sessions for t in s.turns]
        outputs = [t.output_tokens for s in sessions for t in s.turns]
        return WorkloadSummary(
            kind=self.kind,
            input_tokens=_spread(prompts),
            output_tokens=_spread(outputs),
            source=self.trajectories.source,
            entries=len(sessions),
            skipped=self.trajectories.skipped_total,
            turns=f"{min(turns)}:{max(turns)} (mean {self.mean_turns():.1f})",
            think_time=f"recorded tool latency (mean {mean_wait:.3g}s)",
            sessions=self.default_count(),
            seed=self.seed,
            notes=[
                f"answers sent back: the {self.answers}'s",
                "optimal prefix-cache hit rate (every prefix kept, recorded answers): "
                + ", ".join(
                    f"{rate:.3f} in blocks of {size}"
                    for size, rate in zip(OPTIMUM_BLOCK_TOKENS, best, strict=True)
                ),
                *self.trajectories.skip_notes(),
                *self.notes,
            ],
        )

    def recorded_sizes(self, sessions: Sequence[Session]) -> tuple[dict[int, int], dict[int, int]]:
        """Per request index of ``sessions`` (as :meth:`sessions` built them): the prompt
        tokens of the recorded conversation (the reader's token model) and the ``max_tokens``
        asked: what the validity gate checks a context against when a server that refused a
        prompt reported no usage."""
        recorded = self.trajectories.sessions
        prompts: dict[int, int] = {}
        asked: dict[int, int] = {}
        for session in sessions:
            source = recorded[session.index % len(recorded)]
            for number, (turn, sent) in enumerate(zip(source.turns, session.turns, strict=True)):
                prompts[session.first_request + number] = turn.prompt_tokens
                asked[session.first_request + number] = sent.max_tokens
        return prompts, asked

    def _turns(
        self, session: AgentSession, tag: str, tokenizer: TokenCounter | None
    ) -> tuple[Turn, ...]:
        turns = []
        start = 0
        for turn in session.turns:
            parts = [_sent(m) for m in session.messages[start : turn.prompt_messages]]
            text = "\n\n".join(parts)
            if turn.number == 1:
                text = f"{tag}\n{text}"
            start = turn.prompt_messages + 1
            turns.append(
                Turn(
                    text=text,
                    max_tokens=max(1, count_tokens(turn.answer.answer_text(), tokenizer)),
                    text_tokens=count_tokens(text, tokenizer) if tokenizer else None,
                    reusable_prefix_tokens=0 if turn.number == 1 else None,
                    answer=_recorded_reply(turn.answer) if self.answers == "recorded" else None,
                )
            )
        return tuple(turns)

    def sessions(
        self,
        arrivals: Arrivals,
        count: int,
        *,
        tokenizer: TokenCounter | None = None,
        seed_offset: int = 0,
    ) -> list[Session]:
        draw = draw_trial(self, arrivals, count, seed_offset)
        tag = f"[trial {draw.seed}]"
        recorded = self.trajectories.sessions
        built = []
        for position in range(count):
            session = recorded[position % len(recorded)]
            waits = tuple(turn.wait_s for turn in session.turns[:-1])
            built.append((self._turns(session, tag, tokenizer), waits))
        return draw.number(built)


register(AgenticWorkload)
