"""What an ``llm`` trial sends: conversations of one or more turns, how long each prompt and
answer is, and when each arrives.

Every workload is a list of :class:`Session` objects: a single-turn request is a session of
one turn. A later turn's prompt is the conversation so far (the user's messages *and the
server's own replies*) followed by a new user message, so a server with a prefix cache can
reuse everything but the new message; the client builds it when the turn is sent
(:func:`turn_request`). The kinds (:data:`WORKLOADS`):

- ``synthetic`` (:class:`Workload`): seeded words cut to ``--input-tokens`` (exact with a
  tokenizer, a word per token without one), ``--output-tokens`` each, or the prompts of a
  JSONL file; prefix-cache scenarios ``cold`` (every prompt its own) and ``shared=P`` (a share
  ``hit_rate`` of the prompts start with the same P-token prefix: a system prompt).
- ``sessions`` (:class:`SessionWorkload`): N synthetic conversations of T turns (fixed or a
  range) with a think time between turns (fixed or exponential).
- ``sharegpt`` (:mod:`accelscope.llm.conversations`): the conversations of a ShareGPT file.
- ``trace`` (:mod:`accelscope.llm.trace`): a Mooncake-format trace replayed on its timestamps.

**Arrivals** (:class:`~accelscope.llm.documents.Arrivals`): sessions arrive open loop at a
rate (Poisson, or gamma with a burstiness CV: the schedule is fixed before the first request),
or as a fixed number of concurrent users (closed loop: each user starts its next session when
the last ends), or, for a trace, on its own timestamps. The seed is drawn per run (and
recorded), so a second run does not hit the prefix cache the first one filled.
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol, TypeVar

from accelscope.errors import BadInputError
from accelscope.llm.documents import Arrivals, RequestRecord, WorkloadSummary
from accelscope.llm.records import ChatMessage, LlmRequest
from accelscope.load.schedule import arrival_offsets_s
from accelscope.units import parse_duration_s

__all__ = [
    "MAX_WORKLOAD_FILE_BYTES",
    "WORKLOADS",
    "Arrivals",
    "Lengths",
    "PrefixScenario",
    "Session",
    "SessionWorkload",
    "ThinkTime",
    "TokenCounter",
    "TrialDraw",
    "Turn",
    "Workload",
    "WorkloadSource",
    "build_requests",
    "cut_to_tokens",
    "draw_trial",
    "load_tokenizer",
    "read_prompts",
    "read_text_file",
    "register",
    "seeded_words",
    "session_offsets",
    "turn_request",
]

MAX_WORKLOAD_FILE_BYTES = 1024**3
"""A prompts, conversation or trace file larger than this is refused (ShareGPT is ~700 MB)."""

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


# -- the parts of a workload ------------------------------------------------------------------


@dataclass(frozen=True)
class Lengths:
    """A token-length distribution: fixed (``low == high``) or uniform on [low, high]."""

    low: int
    high: int

    @classmethod
    def parse(cls, text: str, flag: str) -> Lengths:
        """``"128"`` or ``"64:256"``; one-line error otherwise."""
        match = re.fullmatch(r"\s*(\d+)\s*(?::\s*(\d+)\s*)?", str(text))
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

    def holds(self, value: int) -> bool:
        """Whether ``value`` lies in [low, high]."""
        return self.low <= value <= self.high

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
        if str(text).strip() == "cold":
            return cls()
        match = re.fullmatch(r"\s*shared\s*=\s*(\d+)\s*", str(text))
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


@dataclass(frozen=True)
class ThinkTime:
    """The pause between a reply and the user's next message: fixed (``2s``) or exponential
    with that mean (``exp:2s``)."""

    mean_s: float
    exponential: bool = False

    @classmethod
    def parse(cls, text: str) -> ThinkTime:
        """``2s``, ``500ms`` or ``exp:2s``; must be positive."""
        raw = str(text).strip()
        exponential = raw.lower().startswith("exp:")
        value = raw[4:] if exponential else raw
        try:
            mean = parse_duration_s(value)
        except BadInputError:
            raise BadInputError(
                f"--think-time {text!r}: give a positive duration (2s) or exp:2s (exponential)"
            ) from None
        return cls(mean, exponential)

    def sample(self, rng: random.Random) -> float:
        """One pause, in seconds."""
        return rng.expovariate(1.0 / self.mean_s) if self.exponential else self.mean_s

    def __str__(self) -> str:
        return f"exp:{self.mean_s:g}s" if self.exponential else f"{self.mean_s:g}s"


@dataclass(frozen=True, kw_only=True)
class Turn:
    """One user message of a session and how many tokens its answer may take. ``text_tokens``
    counts ``text`` by the workload's tokenizer (None without one); a first turn's
    ``reusable_prefix_tokens`` is what earlier requests already sent of it (a shared prefix, a
    trace's repeated blocks)."""

    text: str
    max_tokens: int
    text_tokens: int | None = None
    reusable_prefix_tokens: int | None = None
    answer: str | None = field(default=None, repr=False)
    """A recorded answer the later turns send back in place of the server's (an agent
    trajectory replayed with its recorded answers); ``None``: the server's own. Left out of
    the repr, which pins every kind's prompts (tests/llm)."""


@dataclass(frozen=True, kw_only=True)
class Session:
    """One conversation: its turns, the think times before turns 2..T, and when its first
    turn arrives (open loop; ``None``: when a client is free). Its requests are numbered from
    ``first_request``, turn by turn."""

    index: int
    first_request: int
    turns: tuple[Turn, ...]
    scheduled_s: float | None = None
    think_s: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        if len(self.think_s) not in (0, len(self.turns) - 1):
            raise ValueError("a session needs one think time per turn after the first")

    @classmethod
    def of(cls, request: LlmRequest) -> Session:
        """A single-turn request as a session of one turn (numbered as the request)."""
        turn = Turn(
            text=request.prompt,
            max_tokens=request.max_tokens,
            text_tokens=request.prompt_tokens,
            reusable_prefix_tokens=request.reusable_prefix_tokens,
        )
        return cls(
            index=request.index,
            first_request=request.index,
            turns=(turn,),
            scheduled_s=request.scheduled_s,
        )

    def think_before(self, turn: int) -> float:
        """The pause before 0-based ``turn`` (0 for the first)."""
        return self.think_s[turn - 1] if turn >= 1 and self.think_s else 0.0


def turn_request(
    session: Session,
    turn: int,
    history: Sequence[tuple[str, str]],
    previous: RequestRecord | None,
    *,
    multi_turn: bool,
) -> LlmRequest:
    """The request of 0-based ``turn``: the conversation so far (``history``: each earlier
    turn's user message and the server's reply, or the turn's recorded ``answer`` where it
    has one) and the new message. ``previous`` is the record of the turn before, whose prompt
    and output tokens are what a prefix cache holds of this one (its prompt only when a
    recorded answer replaced the server's output)."""
    current = session.turns[turn]
    recorded = [session.turns[k].answer for k in range(len(history))]
    history = [
        (user, reply if answer is None else answer)
        for (user, reply), answer in zip(history, recorded, strict=True)
    ]
    text = "".join(f"{user}{reply}\n" for user, reply in history) + current.text
    messages: list[ChatMessage] = []
    for user, reply in history:
        messages += [ChatMessage("user", user), ChatMessage("assistant", reply)]
    messages.append(ChatMessage("user", current.text))
    if turn == 0:
        reusable = current.reusable_prefix_tokens
        tokens = current.text_tokens
    else:
        reusable = None
        if previous is not None and previous.prompt_tokens is not None:
            served = (
                0 if session.turns[turn - 1].answer is not None else previous.output_tokens or 0
            )
            reusable = previous.prompt_tokens + served  # a recorded answer: the prompt only
        tokens = None  # the server's usage counts it
    return LlmRequest(
        index=session.first_request + turn,
        prompt=text,
        messages=tuple(messages),
        max_tokens=current.max_tokens,
        prompt_tokens=tokens,
        scheduled_s=session.scheduled_s if turn == 0 else None,
        session=session.index if multi_turn else None,
        turn=turn + 1 if multi_turn else None,
        reusable_prefix_tokens=reusable,
    )


# -- helpers the workload kinds share ---------------------------------------------------------


def seeded_words(rng: random.Random, count: int) -> str:
    """``count`` words drawn from a small English vocabulary."""
    return " ".join(rng.choice(_VOCABULARY) for _ in range(count))


def cut_to_tokens(text: str, tokens: int, tokenizer: TokenCounter | None) -> tuple[str, int | None]:
    """``text`` cut to ``tokens`` tokens (exact with a tokenizer; words without one) and the
    count (None without a tokenizer)."""
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


def count_tokens(text: str, tokenizer: TokenCounter | None) -> int:
    """Tokens of ``text`` by ``tokenizer``; words without one."""
    if tokenizer is None:
        return len(text.split())
    return len(tokenizer.encode(text, add_special_tokens=False))


def load_tokenizer(path: Path | None) -> TokenCounter | None:
    """A local Hugging Face tokenizer directory (nothing downloaded), or None."""
    if path is None:
        return None
    if not path.is_dir():
        raise BadInputError(f"--tokenizer {path}: not a directory (a local tokenizer is needed)")
    try:
        from transformers import AutoTokenizer
    except ImportError:
        raise BadInputError("--tokenizer needs transformers: pip install transformers") from None
    try:
        loaded: Any = AutoTokenizer.from_pretrained(
            str(path), local_files_only=True, trust_remote_code=False
        )
    except (OSError, ValueError, KeyError) as exc:
        message = " ".join(str(exc).split())[:200]
        raise BadInputError(f"--tokenizer {path}: cannot load a tokenizer: {message}") from None
    counter: TokenCounter = loaded
    return counter


def read_text_file(path: Path, what: str) -> str:
    """A workload file as text; one-line errors for a missing, huge, unreadable or empty one."""
    try:
        if path.is_dir():
            raise BadInputError(f"{path}: a directory, not a {what}")
        if path.stat().st_size > MAX_WORKLOAD_FILE_BYTES:
            raise BadInputError(f"{path}: larger than {MAX_WORKLOAD_FILE_BYTES >> 20} MiB")
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BadInputError(f"{path}: no such {what}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInputError(f"{path}: cannot read the {what}: {exc}") from None
    if not text.strip():
        raise BadInputError(f"{path}: the {what} is empty")
    return text


def session_offsets(arrivals: Arrivals, count: int, seed: int) -> list[float | None]:
    """Each session's scheduled arrival: a seeded open-loop schedule at the rate, or ``None``
    (closed loop) for a concurrency."""
    if arrivals.rate_per_s is None:
        if arrivals.speed is not None:
            raise BadInputError("--trace-speed replays a trace: give --trace FILE with it")
        return [None] * count
    return list(
        arrival_offsets_s(
            arrivals.rate_per_s, min_queries=count, min_duration_s=0.0, seed=seed, cv=arrivals.cv
        )[:count]
    )


class _Kinded(Protocol):
    kind: ClassVar[str]


_Kind = TypeVar("_Kind", bound=type[_Kinded])


class WorkloadSource(Protocol):
    """One kind of workload: the sessions of a trial, and what to store about it."""

    kind: ClassVar[str]
    unit: ClassVar[str]
    """What ``count`` counts: ``requests`` or ``sessions``."""

    @property
    def seed(self) -> int:
        """The prompts' seed (drawn per run, recorded)."""
        ...

    @property
    def multi_turn(self) -> bool:
        """Whether sessions hold several turns (records are then numbered by turn)."""
        ...

    def default_count(self) -> int:
        """Sessions (or single-turn requests) per trial when none is given."""
        ...

    def mean_turns(self) -> float:
        """Requests per session, on average (an estimate before the sessions are built)."""
        ...

    def sessions(
        self,
        arrivals: Arrivals,
        count: int,
        *,
        tokenizer: TokenCounter | None = None,
        seed_offset: int = 0,
    ) -> list[Session]:
        """``count`` sessions, seeded by the workload's seed + ``seed_offset`` (so trials of
        one run do not share prompts), with their scheduled arrivals for an open loop."""
        ...

    def summary(self) -> WorkloadSummary:
        """What the stored run says about the workload (not the prompts themselves)."""
        ...


# -- the start every workload's sessions() shares ---------------------------------------------


@dataclass(frozen=True)
class TrialDraw:
    """What every workload's ``sessions()`` starts from (:func:`draw_trial`): the trial's seed,
    a generator seeded with it, each session's scheduled arrival (``None``: closed loop), and
    whether this is the run's first trial (``seed_offset`` 0)."""

    seed: int
    rng: random.Random
    offsets: tuple[float | None, ...]
    first_trial: bool

    def number(
        self,
        turns: Sequence[tuple[tuple[Turn, ...], tuple[float, ...]]],
        *,
        first_fills_cache: bool = False,
    ) -> list[Session]:
        """The sessions of ``turns`` (each session's turns and think times, one per offset),
        numbered turn by turn. ``first_fills_cache``: the workload's shared prefix is the same
        in every trial, so in the run's first trial the first prompt that carries it has
        nothing to reuse: it fills the cache."""
        if self.first_trial and first_fills_cache:
            for position, (session_turns, think) in enumerate(turns):
                opening = session_turns[0]
                if opening.reusable_prefix_tokens:
                    filled = dataclasses.replace(opening, reusable_prefix_tokens=0)
                    turns = [
                        *turns[:position],
                        ((filled, *session_turns[1:]), think),
                        *turns[position + 1 :],
                    ]
                    break
        sessions = []
        first = 0
        pairs = zip(turns, self.offsets, strict=True)
        for index, ((session_turns, think), offset) in enumerate(pairs):
            sessions.append(
                Session(
                    index=index,
                    first_request=first,
                    turns=session_turns,
                    scheduled_s=offset,
                    think_s=think,
                )
            )
            first += len(session_turns)
        return sessions


def draw_trial(
    workload: WorkloadSource,
    arrivals: Arrivals,
    count: int,
    seed_offset: int,
    *,
    timestamps: Sequence[float] | None = None,
) -> TrialDraw:
    """The start of ``workload.sessions()``: ``count`` checked (one line naming the workload's
    unit), the seed (the workload's + ``seed_offset``, so trials of one run do not share
    prompts), its generator, and the arrivals: a seeded schedule (:func:`session_offsets`),
    or a trace's own ``timestamps`` (the first ``count``) replayed at ``arrivals.speed``."""
    if timestamps is not None and arrivals.speed is None:
        raise BadInputError(
            "a trace is replayed on its own timestamps: give --trace-speed (1 = as "
            "recorded), not --rate or --concurrency"
        )
    if count < 1:
        unit = workload.unit
        raise BadInputError(f"--{unit} {count}: give at least 1 {unit.removesuffix('s')}")
    seed = workload.seed + seed_offset
    if timestamps is None:
        offsets: list[float | None] = session_offsets(arrivals, count, seed)
    else:
        speed = arrivals.speed
        assert speed is not None  # checked above
        chosen = timestamps[:count]
        offsets = [(stamp - chosen[0]) / speed for stamp in chosen]
    return TrialDraw(seed, random.Random(seed), tuple(offsets), first_trial=seed_offset == 0)


# -- synthetic single-turn --------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Workload:
    """Single-turn requests: synthetic prompts (with a prefix scenario), or a prompts file."""

    kind: ClassVar[str] = "synthetic"
    unit: ClassVar[str] = "requests"

    input_tokens: Lengths = Lengths(128, 128)
    output_tokens: Lengths = Lengths(64, 64)
    prompts: tuple[tuple[str, int | None], ...] = ()
    """From a prompts file: (prompt, max_tokens or None for ``output_tokens``)."""
    prompts_source: str = ""
    prefix: PrefixScenario = PrefixScenario()
    seed: int = 0

    @property
    def multi_turn(self) -> bool:
        return False

    def default_count(self) -> int:
        return 100

    def mean_turns(self) -> float:
        return 1.0

    def summary(self) -> WorkloadSummary:
        return WorkloadSummary(
            kind="prompts" if self.prompts else "synthetic",
            input_tokens=str(self.input_tokens) if not self.prompts else None,
            output_tokens=str(self.output_tokens),
            prompts=self.prompts_source or "synthetic",
            prompts_count=len(self.prompts) or None,
            prefix=str(self.prefix),
            shared_prefix_tokens=self.prefix.shared_tokens,
            prefix_hit_rate=self.prefix.hit_rate,
            seed=self.seed,
        )

    def first_turn(self, rng: random.Random, tokenizer: TokenCounter | None) -> Turn:
        """One synthetic (or file) prompt with its answer length."""
        if self.prompts:
            prompt, limit = self.prompts[rng.randrange(len(self.prompts))]
            tokens = count_tokens(prompt, tokenizer) if tokenizer else None
            return Turn(
                text=prompt,
                max_tokens=limit or self.output_tokens.sample(rng),
                text_tokens=tokens,
            )
        return synthetic_turn(
            self.input_tokens, self.output_tokens, self.prefix, self.seed, rng, tokenizer
        )

    def sessions(
        self,
        arrivals: Arrivals,
        count: int,
        *,
        tokenizer: TokenCounter | None = None,
        seed_offset: int = 0,
    ) -> list[Session]:
        draw = draw_trial(self, arrivals, count, seed_offset)
        turns = [((self.first_turn(draw.rng, tokenizer),), ()) for _ in draw.offsets]
        return draw.number(turns, first_fills_cache=True)


def synthetic_turn(
    input_tokens: Lengths,
    output_tokens: Lengths,
    prefix: PrefixScenario,
    seed: int,
    rng: random.Random,
    tokenizer: TokenCounter | None,
) -> Turn:
    """A synthetic prompt of ``input_tokens`` (its first P tokens the shared prefix for a
    share ``prefix.hit_rate`` of the prompts) and its answer length."""
    length = input_tokens.sample(rng)
    shared = 0
    head = ""
    if not prefix.cold and rng.random() < prefix.hit_rate:
        shared = min(prefix.shared_tokens, length)
        prefix_rng = random.Random(seed ^ 0x9E3779B9)
        head, _ = cut_to_tokens(seeded_words(prefix_rng, shared * 2), shared, tokenizer)
    body, _ = cut_to_tokens(
        seeded_words(rng, (length - shared) * 2 + 2), length - shared, tokenizer
    )
    prompt = f"{head} {body}".strip() if head else body
    tokens = None if tokenizer is None else count_tokens(prompt, tokenizer)
    return Turn(
        text=prompt,
        max_tokens=output_tokens.sample(rng),
        text_tokens=tokens,
        reusable_prefix_tokens=shared,
    )


def read_prompts(path: Path) -> tuple[tuple[str, int | None], ...]:
    """A JSONL prompts file: one ``{"prompt": str, "max_tokens": int?}`` per line."""
    text = read_text_file(path, "prompts file")
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


def build_requests(
    workload: WorkloadSource,
    arrivals: Arrivals,
    count: int,
    *,
    tokenizer: TokenCounter | None = None,
    seed_offset: int = 0,
) -> list[LlmRequest]:
    """The first turn of each of ``count`` sessions, as requests (a single-turn workload's
    whole trial)."""
    sessions = workload.sessions(arrivals, count, tokenizer=tokenizer, seed_offset=seed_offset)
    return [turn_request(s, 0, (), None, multi_turn=False) for s in sessions]


# -- synthetic multi-turn ---------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class SessionWorkload:
    """Synthetic conversations: ``turns`` user messages of ``input_tokens`` each (the first
    with the prefix scenario's shared head, a system prompt), answers of ``output_tokens``,
    ``think`` between a reply and the next message."""

    kind: ClassVar[str] = "sessions"
    unit: ClassVar[str] = "sessions"

    sessions_per_trial: int = 20
    turns: Lengths = Lengths(4, 4)
    think: ThinkTime | None = None
    input_tokens: Lengths = Lengths(64, 64)
    output_tokens: Lengths = Lengths(64, 64)
    prefix: PrefixScenario = PrefixScenario()
    seed: int = 0
    notes: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        if self.sessions_per_trial < 1:
            raise BadInputError(f"--sessions {self.sessions_per_trial}: give at least 1 session")

    @property
    def multi_turn(self) -> bool:
        return True

    def default_count(self) -> int:
        return self.sessions_per_trial

    def mean_turns(self) -> float:
        return (self.turns.low + self.turns.high) / 2.0

    def summary(self) -> WorkloadSummary:
        return WorkloadSummary(
            kind=self.kind,
            input_tokens=str(self.input_tokens),
            output_tokens=str(self.output_tokens),
            prefix=str(self.prefix),
            shared_prefix_tokens=self.prefix.shared_tokens,
            prefix_hit_rate=self.prefix.hit_rate,
            seed=self.seed,
            sessions=self.sessions_per_trial,
            turns=str(self.turns),
            think_time=str(self.think) if self.think else "none",
            notes=list(self.notes),
        )

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
        built = []
        for _ in draw.offsets:
            number = self.turns.sample(rng)
            first = synthetic_turn(
                self.input_tokens, self.output_tokens, self.prefix, self.seed, rng, tokenizer
            )
            later = []
            for _ in range(number - 1):
                length = self.input_tokens.sample(rng)
                text, tokens = cut_to_tokens(seeded_words(rng, length * 2 + 2), length, tokenizer)
                later.append(
                    Turn(text=text, max_tokens=self.output_tokens.sample(rng), text_tokens=tokens)
                )
            think = tuple(self.think.sample(rng) for _ in later) if self.think else ()
            built.append(((first, *later), think))
        return draw.number(built, first_fills_cache=True)


WORKLOADS: dict[str, type] = {}
"""The workload kinds by name (``synthetic``, ``sessions``, ``sharegpt``, ``trace``): each
class registers itself with :func:`register` (``accelscope.llm`` imports them all)."""


def register(cls: _Kind) -> _Kind:
    """Class decorator: add a workload kind to :data:`WORKLOADS`."""
    WORKLOADS[cls.kind] = cls
    return cls


register(Workload)
register(SessionWorkload)
