"""What an ``llm`` trial sends: prompts of a given length, how many tokens each asks for, and
when each arrives.

- **Arrivals.** Open loop at a rate (Poisson, or gamma with a burstiness CV; the schedule is
  :func:`accelscope.load.schedule.arrival_offsets_s`, fixed before the first request), or closed
  loop at a fixed concurrency (each client slot sends its next request when the previous ends).
- **Lengths.** Input and output tokens fixed (``128``) or uniform (``64:256``), or the prompts of
  a JSONL file (``{"prompt": ..., "max_tokens": ...}`` per line).
- **Prompts.** Synthetic prompts are seeded words; with a tokenizer they are cut to the exact
  token count, without one a word stands for a token and the server's ``usage`` gives the count.
  The seed is drawn per run (and recorded), so a second run does not hit the prefix cache the
  first one filled.
- **Prefix-cache scenarios.** ``cold``: every prompt starts with its own random words, so no
  two share a prefix. ``shared=P``: a fraction ``hit_rate`` of the prompts start with the same
  P-token prefix (a system prompt, a few-shot header), the rest are cold.
"""

from __future__ import annotations

import json
import math
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from accelscope.errors import BadInputError
from accelscope.llm.records import LlmRequest
from accelscope.load.schedule import arrival_offsets_s

__all__ = [
    "Arrivals",
    "Lengths",
    "PrefixScenario",
    "TokenCounter",
    "Workload",
    "build_requests",
    "read_prompts",
]

MAX_PROMPTS_FILE_BYTES = 512 * 1024**2

_VOCABULARY_TEXT = (
    "time year people way day man thing woman life child world school state family student "
    "group country problem hand part place case week company system program question work "
    "government number night point home water room mother area money story fact month lot "
    "right study book eye job word business issue side kind head house service friend father "
    "power hour game line end member law car city community name president team minute idea "
    "kid body information back parent face others level office door health person art war "
    "history party result change morning reason research girl guy moment air teacher force "
    "education foot boy age policy process music market sense nation plan college interest "
    "death experience effect use class control care field development role effort rate heart"
)
_VOCABULARY = tuple(_VOCABULARY_TEXT.split())


class TokenCounter(Protocol):
    """The two tokenizer calls a workload needs (a Hugging Face tokenizer has both)."""

    def encode(self, text: str, add_special_tokens: bool = ...) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...


@dataclass(frozen=True)
class Lengths:
    """A token-length distribution: fixed (``low == high``) or uniform on [low, high]."""

    low: int
    high: int

    @classmethod
    def parse(cls, text: str, flag: str) -> Lengths:
        """``"128"`` or ``"64:256"``; one-line error otherwise."""
        match = re.fullmatch(r"\s*(\d+)\s*(?::\s*(\d+)\s*)?", text)
        if not match:
            raise BadInputError(f"{flag} {text!r}: give a token count (128) or a range (64:256)")
        low = int(match.group(1))
        high = int(match.group(2) or low)
        if low < 1 or high < low:
            raise BadInputError(f"{flag} {text!r}: counts must be >= 1 and low <= high")
        return cls(low, high)

    def sample(self, rng: random.Random) -> int:
        """One length."""
        return self.low if self.low == self.high else rng.randint(self.low, self.high)

    def __str__(self) -> str:
        return str(self.low) if self.low == self.high else f"{self.low}:{self.high}"


@dataclass(frozen=True)
class PrefixScenario:
    """``cold`` (no shared prefix) or ``shared=P`` with a fraction ``hit_rate`` sharing it."""

    shared_tokens: int = 0
    hit_rate: float = 0.0

    @classmethod
    def parse(cls, text: str, hit_rate: float = 1.0) -> PrefixScenario:
        """``cold`` or ``shared=P`` (P tokens)."""
        if not 0.0 <= hit_rate <= 1.0 or math.isnan(hit_rate):
            raise BadInputError(f"--prefix-hit-rate {hit_rate}: give a fraction in 0..1")
        if text.strip() == "cold":
            return cls()
        match = re.fullmatch(r"\s*shared\s*=\s*(\d+)\s*", text)
        if not match or int(match.group(1)) < 1:
            raise BadInputError(f"--prefix {text!r}: give cold or shared=TOKENS, e.g. shared=512")
        return cls(int(match.group(1)), hit_rate)

    @property
    def cold(self) -> bool:
        """No request shares a prefix."""
        return self.shared_tokens == 0 or self.hit_rate == 0.0

    def __str__(self) -> str:
        if self.cold:
            return "cold"
        return f"shared={self.shared_tokens} (hit rate {self.hit_rate:g})"


@dataclass(frozen=True, kw_only=True)
class Arrivals:
    """Open loop at ``rate_per_s`` (gamma gaps with ``cv``; 1 is Poisson), or closed loop at
    ``concurrency`` (exactly one of the two)."""

    rate_per_s: float | None = None
    concurrency: int | None = None
    cv: float = 1.0

    def __post_init__(self) -> None:
        if (self.rate_per_s is None) == (self.concurrency is None):
            raise BadInputError("give a rate or a concurrency, not both")
        if self.rate_per_s is not None and not (
            math.isfinite(self.rate_per_s) and self.rate_per_s > 0
        ):
            raise BadInputError(f"--rate {self.rate_per_s:g}: give a positive rate (requests/s)")
        if self.concurrency is not None and self.concurrency < 1:
            raise BadInputError(f"--concurrency {self.concurrency}: give a count >= 1")
        if not math.isfinite(self.cv) or self.cv <= 0:
            raise BadInputError(f"--burstiness {self.cv:g}: give a positive CV (1 is Poisson)")

    @property
    def label(self) -> str:
        """``4 req/s`` (with the CV when not Poisson) or ``concurrency 8``."""
        if self.rate_per_s is None:
            return f"concurrency {self.concurrency}"
        gaps = "" if self.cv == 1.0 else f", gamma CV {self.cv:g}"
        return f"{self.rate_per_s:g} req/s{gaps}"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {"rate_per_s": self.rate_per_s, "concurrency": self.concurrency, "cv": self.cv}


@dataclass(frozen=True, kw_only=True)
class Workload:
    """Everything about the requests except when they arrive."""

    input_tokens: Lengths = Lengths(128, 128)
    output_tokens: Lengths = Lengths(64, 64)
    prompts: tuple[tuple[str, int | None], ...] = ()
    """From a prompts file: (prompt, max_tokens or None for ``output_tokens``)."""
    prompts_source: str = ""
    prefix: PrefixScenario = PrefixScenario()
    seed: int = 0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready description (not the prompts themselves)."""
        return {
            "input_tokens": str(self.input_tokens) if not self.prompts else None,
            "output_tokens": str(self.output_tokens),
            "prompts": self.prompts_source or "synthetic",
            "prompts_count": len(self.prompts) or None,
            "prefix": str(self.prefix),
            "shared_prefix_tokens": self.prefix.shared_tokens,
            "prefix_hit_rate": self.prefix.hit_rate,
            "seed": self.seed,
        }


def read_prompts(path: Path) -> tuple[tuple[str, int | None], ...]:
    """A JSONL prompts file: one ``{"prompt": str, "max_tokens": int?}`` per line."""
    try:
        if path.stat().st_size > MAX_PROMPTS_FILE_BYTES:
            raise BadInputError(f"{path}: larger than {MAX_PROMPTS_FILE_BYTES >> 20} MiB")
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BadInputError(f"{path}: no such prompts file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInputError(f"{path}: cannot read the prompts file: {exc}") from None
    prompts: list[tuple[str, int | None]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise BadInputError(f"{path}:{number}: not JSON ({exc.msg})") from None
        prompt = row.get("prompt") if isinstance(row, dict) else None
        if not isinstance(prompt, str) or not prompt:
            raise BadInputError(f'{path}:{number}: each line needs a non-empty "prompt" string')
        limit = row.get("max_tokens")
        if limit is not None and (
            not isinstance(limit, int) or isinstance(limit, bool) or limit < 1
        ):
            raise BadInputError(f'{path}:{number}: "max_tokens" must be a positive integer')
        prompts.append((prompt, limit))
    if not prompts:
        raise BadInputError(f"{path}: the prompts file has no prompt")
    return tuple(prompts)


def _words(rng: random.Random, count: int) -> list[str]:
    return [rng.choice(_VOCABULARY) for _ in range(count)]


def _cut(text: str, tokens: int, tokenizer: TokenCounter | None) -> tuple[str, int | None]:
    """``text`` cut to ``tokens`` tokens (exact with a tokenizer; words without one)."""
    if tokenizer is None:
        return " ".join(text.split()[:tokens]), None
    ids = tokenizer.encode(text, add_special_tokens=False)
    take = tokens
    while True:  # a piece that decodes to nothing (a bare word marker) would shorten the cut
        cut = tokenizer.decode(ids[:take])
        count = len(tokenizer.encode(cut, add_special_tokens=False))
        if count >= tokens or take >= len(ids):
            return cut, count
        take += 1


def _synthetic(
    workload: Workload, rng: random.Random, tokenizer: TokenCounter | None
) -> tuple[str, int | None]:
    length = workload.input_tokens.sample(rng)
    scenario = workload.prefix
    shared = 0
    prefix = ""
    if not scenario.cold and rng.random() < scenario.hit_rate:
        shared = min(scenario.shared_tokens, length)
        prefix_rng = random.Random(workload.seed ^ 0x9E3779B9)
        prefix, _ = _cut(" ".join(_words(prefix_rng, shared * 2)), shared, tokenizer)
    body, _ = _cut(" ".join(_words(rng, (length - shared) * 2 + 2)), length - shared, tokenizer)
    prompt = f"{prefix} {body}".strip() if prefix else body
    if tokenizer is None:
        return prompt, None
    return prompt, len(tokenizer.encode(prompt, add_special_tokens=False))


def build_requests(
    workload: Workload,
    arrivals: Arrivals,
    count: int,
    *,
    tokenizer: TokenCounter | None = None,
    seed_offset: int = 0,
) -> list[LlmRequest]:
    """``count`` requests, seeded by ``workload.seed`` (+ ``seed_offset`` per trial, so trials
    of one run do not share prompts), with their scheduled arrivals for an open loop."""
    if count < 1:
        raise BadInputError(f"--requests {count}: give at least 1 request")
    seed = workload.seed + seed_offset
    rng = random.Random(seed)
    offsets: Sequence[float | None]
    if arrivals.rate_per_s is not None:
        offsets = arrival_offsets_s(
            arrivals.rate_per_s, min_queries=count, min_duration_s=0.0, seed=seed, cv=arrivals.cv
        )[:count]
    else:
        offsets = [None] * count
    requests = []
    for index, offset in enumerate(offsets):
        if workload.prompts:
            prompt, limit = workload.prompts[rng.randrange(len(workload.prompts))]
            tokens = len(tokenizer.encode(prompt, add_special_tokens=False)) if tokenizer else None
            max_tokens = limit or workload.output_tokens.sample(rng)
        else:
            prompt, tokens = _synthetic(workload, rng, tokenizer)
            max_tokens = workload.output_tokens.sample(rng)
        requests.append(
            LlmRequest(
                index=index,
                prompt=prompt,
                max_tokens=max_tokens,
                prompt_tokens=tokens,
                scheduled_s=offset,
            )
        )
    return requests
