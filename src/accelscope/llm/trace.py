"""Trace replay: a production trace in the Mooncake format, replayed on its own timestamps.

Each line of the JSONL file is one request::

    {"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47, ...]}

``timestamp`` is milliseconds from the trace's start (non-decreasing), ``input_length`` and
``output_length`` are tokens, and ``hash_ids`` names the prompt's blocks of ``block_tokens``
tokens (512 in Mooncake's traces): two requests whose lists start with the same ids share that
prefix. The prompt is rebuilt here from seeded text, one block of text per id (the same id is
always the same text), cut to ``input_length`` tokens; so a server's prefix cache sees exactly
the reuse the trace recorded. A request arrives at ``timestamp / speed`` (``speed`` 2: twice
as fast as recorded). Its reusable prefix is its leading blocks whose ids appeared earlier in
the replay, which gives the trace's expected prefix reuse before anything is sent.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from accelscope.errors import BadInputError
from accelscope.llm.documents import Arrivals, WorkloadSummary
from accelscope.llm.workload import (
    Session,
    TokenCounter,
    Turn,
    cut_to_tokens,
    draw_trial,
    read_text_file,
    register,
    seeded_words,
)

__all__ = ["MOONCAKE_BLOCK_TOKENS", "TraceEntry", "TraceWorkload", "read_trace"]

MOONCAKE_BLOCK_TOKENS = 512
"""Tokens per ``hash_ids`` block in Mooncake's published traces."""


@dataclass(frozen=True)
class TraceEntry:
    """One request of a trace."""

    timestamp_s: float
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...]


def _integer(where: str, row: dict[str, Any], key: str, minimum: int) -> int:
    value = row.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise BadInputError(f'{where}: "{key}" must be an integer >= {minimum}, got {value!r}')
    return value


def read_trace(path: Path) -> list[TraceEntry]:
    """Every request of a Mooncake-format JSONL trace; one-line errors naming the line for a
    line that is not JSON, a missing or negative field, or a timestamp earlier than the one
    before it."""
    text = read_text_file(path, "trace")
    entries: list[TraceEntry] = []
    last = 0.0
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise BadInputError(f"{where}: not JSON ({exc.msg})") from None
        if not isinstance(row, dict):
            raise BadInputError(f"{where}: not a JSON object")
        stamp = row.get("timestamp")
        if isinstance(stamp, bool) or not isinstance(stamp, int | float) or stamp != stamp:
            raise BadInputError(f'{where}: "timestamp" must be a number (milliseconds)')
        if stamp < 0:
            raise BadInputError(f'{where}: "timestamp" {stamp} is negative')
        if entries and stamp / 1000.0 < last:
            raise BadInputError(
                f'{where}: "timestamp" {stamp} is earlier than the line before '
                f"({last * 1000:g}): a trace must be in time order"
            )
        hashes = row.get("hash_ids", [])
        if not isinstance(hashes, list) or not all(
            isinstance(h, int) and not isinstance(h, bool) for h in hashes
        ):
            raise BadInputError(f'{where}: "hash_ids" must be a list of integers')
        last = stamp / 1000.0
        entries.append(
            TraceEntry(
                timestamp_s=last,
                input_tokens=_integer(where, row, "input_length", 1),
                output_tokens=_integer(where, row, "output_length", 1),
                hash_ids=tuple(hashes),
            )
        )
    if not entries:
        raise BadInputError(f"{path}: the trace has no request")
    return entries


def reusable_tokens(entries: list[TraceEntry], block_tokens: int) -> list[int]:
    """Per request, the tokens of its leading blocks that an earlier request of the replay
    already sent (what a prefix cache could hold)."""
    seen: set[int] = set()
    found = []
    for entry in entries:
        blocks = 0
        for block in entry.hash_ids:
            if block not in seen:
                break
            blocks += 1
        found.append(min(blocks * block_tokens, entry.input_tokens))
        seen.update(entry.hash_ids)
    return found


@dataclass(kw_only=True)
class TraceWorkload:
    """A Mooncake-format trace replayed on its timestamps (see the module)."""

    kind: ClassVar[str] = "trace"
    unit: ClassVar[str] = "requests"

    entries: tuple[TraceEntry, ...]
    source: str
    block_tokens: int = MOONCAKE_BLOCK_TOKENS
    seed: int = 0
    notes: tuple[str, ...] = ()
    _blocks: dict[tuple[int, int], str] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if self.block_tokens < 1:
            raise BadInputError(f"--trace-block-tokens {self.block_tokens}: give at least 1")

    @classmethod
    def from_file(cls, path: Path, **settings: Any) -> TraceWorkload:
        """Read ``path`` (one-line errors) and keep the settings."""
        return cls(entries=tuple(read_trace(path)), source=str(path), **settings)

    @property
    def multi_turn(self) -> bool:
        return False

    def default_count(self) -> int:
        return len(self.entries)

    def mean_turns(self) -> float:
        return 1.0

    def expected_reuse(self, count: int | None = None) -> float:
        """Reusable prompt tokens over all prompt tokens of the first ``count`` requests."""
        chosen = list(self.entries[: count or len(self.entries)])
        reusable = sum(reusable_tokens(chosen, self.block_tokens))
        total = sum(e.input_tokens for e in chosen)
        return reusable / total if total else 0.0

    def summary(self) -> WorkloadSummary:
        span = self.entries[-1].timestamp_s - self.entries[0].timestamp_s
        inputs = [e.input_tokens for e in self.entries]
        outputs = [e.output_tokens for e in self.entries]
        return WorkloadSummary(
            kind=self.kind,
            source=self.source,
            entries=len(self.entries),
            input_tokens=f"{min(inputs)}:{max(inputs)} (mean {sum(inputs) / len(inputs):.0f})",
            output_tokens=f"{min(outputs)}:{max(outputs)} (mean {sum(outputs) / len(outputs):.0f})",
            trace_block_tokens=self.block_tokens,
            expected_prefix_reuse=round(self.expected_reuse(), 6),
            seed=self.seed,
            notes=[f"recorded over {span:.1f} s", *self.notes],
        )

    def _block(self, block: int, tokenizer: TokenCounter | None, seed: int) -> str:
        key = (seed, block)
        if key not in self._blocks:
            rng = random.Random(hash((seed, block, 0x5EED)))
            text, _ = cut_to_tokens(
                seeded_words(rng, self.block_tokens * 2), self.block_tokens, tokenizer
            )
            self._blocks[key] = text
        return self._blocks[key]

    def _prompt(
        self, index: int, entry: TraceEntry, tokenizer: TokenCounter | None, seed: int
    ) -> str:
        parts = [self._block(b, tokenizer, seed) for b in entry.hash_ids]
        covered = len(entry.hash_ids) * self.block_tokens
        if covered < entry.input_tokens:  # the trace's own tail beyond its blocks
            rng = random.Random(hash((seed, index, 0x7A11)))
            rest = entry.input_tokens - covered
            parts.append(cut_to_tokens(seeded_words(rng, rest * 2 + 2), rest, tokenizer)[0])
        text, _ = cut_to_tokens(" ".join(parts), entry.input_tokens, tokenizer)
        return text

    def sessions(
        self,
        arrivals: Arrivals,
        count: int,
        *,
        tokenizer: TokenCounter | None = None,
        seed_offset: int = 0,
    ) -> list[Session]:
        chosen = list(self.entries[:count])
        stamps = [entry.timestamp_s for entry in chosen]
        draw = draw_trial(self, arrivals, count, seed_offset, timestamps=stamps)
        reusable = reusable_tokens(chosen, self.block_tokens)
        turns: list[tuple[tuple[Turn, ...], tuple[float, ...]]] = []
        for index, (entry, reuse) in enumerate(zip(chosen, reusable, strict=True)):
            text = self._prompt(index, entry, tokenizer, draw.seed)
            tokens = None
            if tokenizer is not None:
                tokens = len(tokenizer.encode(text, add_special_tokens=False))
            turn = Turn(
                text=text,
                max_tokens=entry.output_tokens,
                text_tokens=tokens,
                reusable_prefix_tokens=reuse,
            )
            turns.append(((turn,), ()))
        return draw.number(turns)


register(TraceWorkload)
