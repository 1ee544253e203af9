"""Conversations from a ShareGPT-format file: the JSON most LLM benchmarks read (vLLM's
``bench serve --dataset-name sharegpt``, SGLang's, GuideLLM's).

The file is a JSON array (or JSON lines) of entries, each with a ``"conversations"`` list of
``{"from": "human" | "gpt" | "system", "value": text}`` (``"user"``, ``"assistant"`` and the
other assistant names ShareGPT uses are accepted; an OpenAI-style ``"messages"`` list of
``{"role", "content"}`` too). Each human message is a turn; its answer's length in tokens is
the ``max_tokens`` of that turn, as the peers do, while the prompt of a later turn carries
*the server's own* replies, so a prefix cache can reuse them. A system message opens the first
turn. ``max_turns=1`` takes each conversation's first exchange as a single-turn request.

Length filters (``input_filter``/``output_filter``, token ranges, counted with the tokenizer
when one is given, else in words) cut a conversation at its first exchange outside them; a
conversation with no exchange left, or whose messages do not alternate human/assistant, is
skipped and counted. The conversations of a trial are drawn by seed from those that remain
(with replacement only when more are asked for than the file has). A file that is not
ShareGPT-shaped is one line naming the entry (or line) and what is wrong.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from accelscope.errors import BadInputError
from accelscope.llm.documents import Arrivals, WorkloadSummary
from accelscope.llm.workload import (
    Lengths,
    Session,
    ThinkTime,
    TokenCounter,
    Turn,
    count_tokens,
    draw_trial,
    read_text_file,
    register,
)

__all__ = ["ConversationWorkload", "Exchange", "read_conversations"]

_USER = frozenset({"human", "user"})
_ASSISTANT = frozenset({"gpt", "assistant", "chatgpt", "bard", "bing", "model"})
_SYSTEM = frozenset({"system"})


@dataclass(frozen=True)
class Exchange:
    """One user message and the recorded answer (whose length bounds the turn's tokens)."""

    user: str
    answer: str


@dataclass(frozen=True)
class _Conversation:
    system: str
    exchanges: tuple[Exchange, ...]


def _entries(path: Path, text: str) -> Iterator[tuple[str, Any]]:
    """(where, entry) for each entry of a JSON array or of JSON lines."""
    stripped = text.lstrip()
    if stripped.startswith("["):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise BadInputError(
                f"{path}: not JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})"
            ) from None
        for number, entry in enumerate(data):
            yield f"{path}: entry {number}", entry
        return
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            yield f"{path}:{number}", json.loads(line)
        except json.JSONDecodeError as exc:
            raise BadInputError(
                f"{path}:{number}: not JSON ({exc.msg}); a ShareGPT file is a JSON array of "
                'conversations, or one {"conversations": [...]} per line'
            ) from None


def _messages(where: str, entry: Any) -> list[tuple[str, str]]:
    """(role, text) of an entry; one-line error when it is not ShareGPT-shaped."""
    if not isinstance(entry, dict):
        raise BadInputError(f'{where}: not an object with a "conversations" list')
    turns = entry.get("conversations", entry.get("conversation", entry.get("messages")))
    if not isinstance(turns, list):
        raise BadInputError(f'{where}: no "conversations" list (ShareGPT format)')
    found = []
    for number, turn in enumerate(turns):
        if not isinstance(turn, dict):
            raise BadInputError(f"{where}, turn {number}: not an object")
        role = turn.get("from", turn.get("role"))
        value = turn.get("value", turn.get("content"))
        if not isinstance(role, str) or not isinstance(value, str):
            raise BadInputError(
                f'{where}, turn {number}: needs "from" and "value" strings (ShareGPT format)'
            )
        found.append((role.strip().lower(), value))
    return found


def _conversation(messages: list[tuple[str, str]]) -> _Conversation | None:
    """The exchanges of an entry; None when its roles do not alternate user/assistant."""
    system = ""
    if messages and messages[0][0] in _SYSTEM:
        system, messages = messages[0][1], messages[1:]
    exchanges = []
    for position in range(0, len(messages) - 1, 2):
        (asker, question), (answerer, answer) = messages[position], messages[position + 1]
        if asker not in _USER or answerer not in _ASSISTANT:
            break
        if not question.strip():
            break
        exchanges.append(Exchange(question, answer))
    if not exchanges:
        return None
    return _Conversation(system, tuple(exchanges))


def read_conversations(path: Path) -> tuple[list[tuple[str, tuple[Exchange, ...]]], int]:
    """Every usable conversation of a ShareGPT file as (system prompt, exchanges), and how
    many entries were skipped (roles not alternating, nothing to ask)."""
    text = read_text_file(path, "conversation file")
    found: list[tuple[str, tuple[Exchange, ...]]] = []
    skipped = 0
    for where, entry in _entries(path, text):
        conversation = _conversation(_messages(where, entry))
        if conversation is None:
            skipped += 1
            continue
        found.append((conversation.system, conversation.exchanges))
    if not found:
        raise BadInputError(
            f"{path}: no conversation with a human message followed by an answer "
            f"({skipped} entries skipped)"
        )
    return found, skipped


@dataclass(frozen=True, kw_only=True)
class ConversationWorkload:
    """The conversations of a ShareGPT file (see the module)."""

    kind: ClassVar[str] = "sharegpt"
    unit: ClassVar[str] = "sessions"

    conversations: tuple[tuple[str, tuple[Exchange, ...]], ...]
    source: str
    skipped_entries: int = 0
    max_turns: int | None = None
    input_filter: Lengths | None = None
    output_filter: Lengths | None = None
    think: ThinkTime | None = None
    sessions_per_trial: int = 100
    seed: int = 0
    notes: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        if self.max_turns is not None and self.max_turns < 1:
            raise BadInputError(f"--turns {self.max_turns}: give at least 1")
        if self.sessions_per_trial < 1:
            raise BadInputError(f"--sessions {self.sessions_per_trial}: give at least 1")

    @classmethod
    def from_file(cls, path: Path, **settings: Any) -> ConversationWorkload:
        """Read ``path`` (one-line errors) and keep the settings."""
        conversations, skipped = read_conversations(path)
        return cls(
            conversations=tuple(conversations),
            source=str(path),
            skipped_entries=skipped,
            **settings,
        )

    @property
    def single_turn(self) -> bool:
        """Each conversation's first exchange only."""
        return self.max_turns == 1

    @property
    def multi_turn(self) -> bool:
        return not self.single_turn

    def default_count(self) -> int:
        return self.sessions_per_trial

    def mean_turns(self) -> float:
        limit = self.max_turns or 1_000_000
        counts = [min(len(exchanges), limit) for _, exchanges in self.conversations]
        return sum(counts) / len(counts)

    def summary(self) -> WorkloadSummary:
        return WorkloadSummary(
            kind=self.kind,
            source=self.source,
            entries=len(self.conversations),
            skipped=self.skipped_entries,
            input_tokens=f"filter {self.input_filter}" if self.input_filter else None,
            output_tokens=f"filter {self.output_filter}" if self.output_filter else None,
            turns="1 (first exchange)" if self.single_turn else f"up to {self.max_turns or 'all'}",
            think_time=str(self.think) if self.think else "none",
            sessions=self.sessions_per_trial,
            seed=self.seed,
            notes=list(self.notes),
        )

    def _turns(
        self, system: str, exchanges: tuple[Exchange, ...], tokenizer: TokenCounter | None
    ) -> tuple[Turn, ...]:
        """The turns of one conversation that pass the filters (cut at the first that does
        not)."""
        limit = self.max_turns or len(exchanges)
        turns: list[Turn] = []
        for number, exchange in enumerate(exchanges[:limit]):
            text = f"{system}\n{exchange.user}" if number == 0 and system else exchange.user
            tokens = count_tokens(text, tokenizer)
            answer = max(1, count_tokens(exchange.answer, tokenizer))
            if self.input_filter is not None and not self.input_filter.holds(tokens):
                break
            if self.output_filter is not None and not self.output_filter.holds(answer):
                break
            turns.append(
                Turn(
                    text=text,
                    max_tokens=answer,
                    text_tokens=tokens if tokenizer else None,
                    reusable_prefix_tokens=0 if number == 0 else None,
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
        rng = draw.rng
        order = list(range(len(self.conversations)))
        rng.shuffle(order)
        chosen: list[tuple[Turn, ...]] = []
        for position in order:  # filter lazily: a large file is tokenized only as needed
            turns = self._turns(*self.conversations[position], tokenizer)
            if turns:
                chosen.append(turns)
                if len(chosen) == count:
                    break
        if not chosen:
            raise BadInputError(
                f"{self.source}: no conversation passes the length filters "
                f"(--input-filter {self.input_filter}, --output-filter {self.output_filter})"
            )
        while len(chosen) < count:  # more asked for than the file has: draw again
            chosen.append(chosen[rng.randrange(len(chosen))])
        thinks = [
            tuple(self.think.sample(rng) for _ in turns[1:]) if self.think else ()
            for turns in chosen
        ]
        return draw.number(list(zip(chosen, thinks, strict=True)))


register(ConversationWorkload)
