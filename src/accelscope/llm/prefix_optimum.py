"""The best prefix-cache hit rate a workload allows, computed from the workload alone, to set a
server's measured hit rate against.

The cache is modelled as vLLM's automatic prefix caching (v1: ``vllm/v1/core/kv_cache_utils.py``
for the block hashes, ``kv_cache_manager.py`` for the hits and the order blocks are freed in): a
prompt is cut into full blocks of ``block_size`` tokens, each block keyed by a hash of its tokens
*and its parent's key*, so a block is reusable only behind the same whole prefix. A request's hit
is its longest run of leading blocks found in the cache, at most ``(prompt tokens - 1) //
block_size`` blocks (vLLM always computes the last prompt token, to have logits to sample from).
After a request, every full block of its prompt and its output stays cached. The hit rate is hit
tokens over prompt tokens, as vLLM's ``prefix_cache_hits`` / ``prefix_cache_queries`` counters
count it.

- **Every shared prefix kept** (``capacity_blocks=None``): nothing is evicted; the ceiling.
- **Under a KV capacity**, in blocks, with LRU eviction: the request being served pins its
  blocks (its hits and its new ones); the others are evictable, least recently used first and,
  among one request's blocks, its tail first (vLLM frees a request's blocks in reverse order
  for that reason). Requests are replayed one at a time, so only one request is pinned: a
  server running several at once keeps less, and this is the best LRU can do in this order.

**Order of arrival.** ``concurrency`` sessions are in flight; they advance in lockstep rounds,
each in-flight session sending its next turn in slot order, and a finished session's slot
takes the next session at the next round (:func:`arrival_order`). With C sessions whose
contexts together outgrow the capacity, LRU evicts each context just before its next turn
needs it: the eviction cliff, which :func:`eviction_cliff` names.

Pure and deterministic: the same token ids give the same figures on any machine.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from accelscope.errors import BadInputError
from accelscope.llm.documents import CacheOptimum, EvictionCliff, ServerConfig

__all__ = [
    "ABOVE_OPTIMUM",
    "ASSUMED_BLOCK_TOKENS",
    "CLIFF_BOUND",
    "CacheRequest",
    "PrefixOptimum",
    "TurnTokens",
    "against_optimum",
    "arrival_order",
    "block_keys",
    "cliff_of",
    "eviction_cliff",
    "optimum",
    "optimum_curve",
    "replay",
    "server_cache",
]

CLIFF_BOUND = 0.9
"""The eviction cliff: the first concurrency whose measured hit rate falls below this share of
the optimum a cache of the server's size could reach on the same sessions (TRT-LLM's measured
cliff fell from 0.97 to 0.73; 0.9 leaves room for the token model's approximation)."""
ABOVE_OPTIMUM = 1.05
"""A measured hit rate above this multiple of the optimum gets a note: the optimum's model
(whole blocks, the workload's token model) does not describe that server's cache."""
ASSUMED_BLOCK_TOKENS = 16
"""The KV block assumed when the server publishes none (vLLM's default on a GPU)."""


@dataclass(frozen=True)
class TurnTokens:
    """One turn of a session: its prompt's token ids and its output's (as the next prompt
    carries them; empty when not known)."""

    prompt_ids: tuple[int, ...]
    output_ids: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if not self.prompt_ids:
            raise ValueError("a prompt has at least one token")


@dataclass(frozen=True)
class CacheRequest:
    """One request in arrival order: the session it belongs to and its tokens."""

    session: int
    tokens: TurnTokens


@dataclass(frozen=True, kw_only=True)
class PrefixOptimum:
    """The hit rate a replay reached: ``hit_tokens`` of ``prompt_tokens`` over ``requests``,
    with ``evicted_blocks`` evictions, for a cache of ``capacity_blocks`` blocks (``None``:
    unbounded) at ``concurrency`` sessions in flight."""

    block_size: int
    capacity_blocks: int | None
    concurrency: int
    requests: int
    prompt_tokens: int
    hit_tokens: int
    evicted_blocks: int

    def __post_init__(self) -> None:
        if self.block_size < 1 or self.concurrency < 1 or self.requests < 1:
            raise ValueError("block size, concurrency and requests are at least 1")
        if not 0 <= self.hit_tokens < self.prompt_tokens:
            raise ValueError(
                f"hit tokens {self.hit_tokens} outside [0, {self.prompt_tokens}): a cache "
                "never holds a prompt's last token"
            )
        if self.hit_tokens % self.block_size:
            raise ValueError("hits come in whole blocks")
        if self.capacity_blocks is None and self.evicted_blocks:
            raise ValueError("an unbounded cache evicts nothing")

    @property
    def hit_rate(self) -> float:
        """Hit tokens over prompt tokens."""
        return self.hit_tokens / self.prompt_tokens


def block_keys(ids: Sequence[int], block_size: int) -> list[int]:
    """The key of each full block of ``ids``: a hash of the block's tokens and its parent's
    key (a block is the same only behind the same whole prefix)."""
    keys: list[int] = []
    parent = 0
    for start in range(0, len(ids) - block_size + 1, block_size):
        parent = hash((parent, tuple(ids[start : start + block_size])))
        keys.append(parent)
    return keys


def arrival_order(sessions: Sequence[Sequence[TurnTokens]], concurrency: int) -> list[CacheRequest]:
    """The requests of ``sessions`` with ``concurrency`` sessions in flight, in lockstep
    rounds (see the module)."""
    if concurrency < 1:
        raise BadInputError(f"concurrency {concurrency}: give at least 1 session in flight")
    waiting = list(range(len(sessions)))[::-1]
    slots: list[tuple[int, int] | None] = [None] * concurrency  # (session, next turn)
    order: list[CacheRequest] = []
    while True:
        for slot, held in enumerate(slots):
            if held is None and waiting:
                slots[slot] = (waiting.pop(), 0)
        if all(held is None for held in slots):
            return order
        for slot, held in enumerate(slots):
            if held is None:
                continue
            session, turn = held
            order.append(CacheRequest(session, sessions[session][turn]))
            done = turn + 1 == len(sessions[session])
            slots[slot] = None if done else (session, turn + 1)


def replay(
    requests: Iterable[CacheRequest],
    *,
    block_size: int,
    capacity_blocks: int | None = None,
    concurrency: int = 1,
) -> PrefixOptimum:
    """The hit rate of ``requests`` replayed in order through the cache (see the module).
    A request whose blocks alone outgrow ``capacity_blocks`` is a one-line error."""
    if block_size < 1:
        raise BadInputError(f"block size {block_size}: give at least 1 token")
    if capacity_blocks is not None and capacity_blocks < 1:
        raise BadInputError(f"KV capacity {capacity_blocks} blocks: give at least 1")
    cache: OrderedDict[int, None] = OrderedDict()  # evictable first, most recent last
    prompt_tokens = hit_tokens = evicted = count = 0
    for request in requests:
        prompt = request.tokens.prompt_ids
        whole = prompt + request.tokens.output_ids
        keys = block_keys(whole, block_size)
        needed = -(-len(whole) // block_size)
        if capacity_blocks is not None and needed > capacity_blocks:
            raise BadInputError(
                f"a request of {needed} blocks ({len(whole)} tokens) does not fit a KV "
                f"capacity of {capacity_blocks} blocks of {block_size} tokens"
            )
        hits = 0
        for key in keys[: (len(prompt) - 1) // block_size]:
            if key not in cache:
                break
            hits += 1
        for key in keys:  # pinned while it runs: its own blocks are not evictable
            cache.pop(key, None)
        if capacity_blocks is not None:
            while len(cache) + needed > capacity_blocks:
                cache.popitem(last=False)
                evicted += 1
        for key in reversed(keys):  # freed tail first: the tail is evicted first
            cache[key] = None
        if capacity_blocks is not None and len(cache) > capacity_blocks:
            raise AssertionError(f"cache holds {len(cache)} > {capacity_blocks} blocks")
        prompt_tokens += len(prompt)
        hit_tokens += hits * block_size
        count += 1
    if count == 0:
        raise BadInputError("no request to replay through the prefix cache")
    return PrefixOptimum(
        block_size=block_size,
        capacity_blocks=capacity_blocks,
        concurrency=concurrency,
        requests=count,
        prompt_tokens=prompt_tokens,
        hit_tokens=hit_tokens,
        evicted_blocks=evicted,
    )


def optimum(
    sessions: Sequence[Sequence[TurnTokens]],
    *,
    block_size: int,
    capacity_blocks: int | None = None,
    concurrency: int = 1,
) -> PrefixOptimum:
    """The hit rate of ``sessions`` at ``concurrency`` in flight: every prefix kept
    (``capacity_blocks=None``) or under that capacity with LRU."""
    order = arrival_order(sessions, concurrency)
    return replay(
        order, block_size=block_size, capacity_blocks=capacity_blocks, concurrency=concurrency
    )


def optimum_curve(
    sessions: Sequence[Sequence[TurnTokens]],
    *,
    block_size: int,
    capacity_blocks: int | None,
    concurrencies: Sequence[int],
) -> tuple[PrefixOptimum, ...]:
    """:func:`optimum` at each concurrency step."""
    return tuple(
        optimum(sessions, block_size=block_size, capacity_blocks=capacity_blocks, concurrency=c)
        for c in concurrencies
    )


def eviction_cliff(
    hit_rates: Sequence[tuple[int, float]], reference: float, bound: float = 0.9
) -> int | None:
    """The first concurrency (of ``(concurrency, hit rate)`` steps, in rising order) whose
    hit rate falls below ``bound`` * ``reference`` (the unbounded cache's, or the optimum a
    measured rate is set against); ``None``: no cliff in the steps given."""
    if not 0.0 < bound <= 1.0:
        raise BadInputError(f"cliff bound {bound}: give a fraction in (0, 1]")
    if not 0.0 <= reference <= 1.0:
        raise ValueError(f"reference hit rate {reference} outside [0, 1]")
    steps = [c for c, _ in hit_rates]
    if steps != sorted(set(steps)):
        raise ValueError("concurrency steps must rise")
    for concurrency, rate in hit_rates:
        if rate < bound * reference:
            return concurrency
    return None


def server_cache(config: ServerConfig | None) -> tuple[int, int] | str:
    """``(block_size, capacity_blocks)`` of the cache a server publishes (vLLM's
    ``vllm:cache_config_info``: ``block_size``, ``kv_cache_size_tokens``), or why there is
    none to model (the optimum under a capacity is then not computed, never assumed)."""
    if config is None:
        return "the server publishes no cache configuration"
    if config.prefix_caching is False:
        return "prefix caching is off on the server"
    if config.block_size_tokens is None or config.kv_capacity_tokens is None:
        return "the server publishes no block size or KV capacity"
    if config.block_size_tokens < 1 or config.kv_capacity_tokens < config.block_size_tokens:
        return (
            f"the server's cache ({config.kv_capacity_tokens} tokens in blocks of "
            f"{config.block_size_tokens}) holds no whole block"
        )
    return config.block_size_tokens, config.kv_capacity_tokens // config.block_size_tokens


def against_optimum(
    sessions: Sequence[Sequence[TurnTokens]],
    *,
    concurrency: int | None,
    config: ServerConfig | None,
    measured: float | None,
    measured_source: str = "",
    measured_why: str = "",
    tokens_per_model_token: float | None = None,
    bound: float = CLIFF_BOUND,
) -> CacheOptimum:
    """The measured hit rate of a step that sent ``sessions`` (their turns as the workload's
    token model counts them) at ``concurrency`` in flight (``None``: at a rate) set against
    the optimum: every prefix kept, and LRU under the server's KV capacity
    (:func:`server_cache`) when the server publishes it and the step ran at a concurrency.
    ``tokens_per_model_token`` (server prompt tokens per model token, measured) scales the
    server's block to the model's tokens, so a block holds the same text in both."""
    if not 0.0 < bound <= 1.0:
        raise ValueError(f"cliff bound {bound} outside (0, 1]")
    if tokens_per_model_token is not None and not tokens_per_model_token > 0.0:
        raise ValueError(f"tokens per model token {tokens_per_model_token} must be > 0")
    cache = server_cache(config)
    capacity: int | None = None
    lru_why = ""
    if isinstance(cache, str):
        published = config.block_size_tokens if config is not None else None
        block = published or ASSUMED_BLOCK_TOKENS
        basis = "the server's" if published else "assumed: vLLM's GPU default"
        lru_why = cache
    else:
        block, capacity = cache
        basis = "the server's"
    scale = tokens_per_model_token or 1.0
    model_block = max(1, round(block / scale))
    every = optimum(sessions, block_size=model_block, concurrency=concurrency or 1)
    lru: float | None = None
    if capacity is not None and concurrency is None:
        lru_why = "the step's sessions arrive at a rate, not a fixed concurrency: LRU not modelled"
    elif capacity is not None and concurrency is not None:
        try:
            lru = optimum(
                sessions,
                block_size=model_block,
                capacity_blocks=capacity,
                concurrency=concurrency,
            ).hit_rate
        except BadInputError as refused:
            lru_why = str(refused)
    reference = lru if lru is not None else every.hit_rate
    ratio: float | None = None
    ratio_why = ""
    if measured is None:
        ratio_why = f"measured hit rate not measured: {measured_why or 'the server says nothing'}"
    elif reference <= 0.0:
        ratio_why = "the optimum is 0: these sessions share no whole block"
    else:
        ratio = measured / reference
    note = ""
    if ratio is not None and ratio > ABOVE_OPTIMUM:
        note = (
            "the server hit more than the modelled optimum: the model does not describe this "
            f"run (a cache finer than whole blocks of {block} tokens, tokens that are not the "
            "workload's token model, or, under a capacity, requests in another order than "
            "sessions in lockstep, which is LRU's worst order)"
        )
    return CacheOptimum(
        concurrency=concurrency,
        block_size_tokens=block,
        block_basis=basis,
        tokens_per_model_token=tokens_per_model_token,
        measured=measured,
        measured_source=measured_source,
        measured_why="" if measured is not None else measured_why,
        every_prefix_kept=every.hit_rate,
        lru=lru,
        capacity_blocks=capacity,
        lru_why=lru_why,
        reference="lru" if lru is not None else "every prefix kept",
        ratio=ratio,
        kept_share=(
            measured / every.hit_rate if measured is not None and every.hit_rate > 0 else None
        ),
        ratio_why=ratio_why,
        bound=bound,
        below_bound=ratio is not None and ratio < bound,
        note=note,
    )


def _first_below(steps: dict[int, float], bound: float) -> int | None:
    return eviction_cliff(sorted(steps.items()), 1.0, bound) if steps else None


def cliff_of(steps: Sequence[CacheOptimum], bound: float = CLIFF_BOUND) -> EvictionCliff:
    """Where the cache fell off over a run's steps (see
    :class:`~accelscope.llm.documents.EvictionCliff`; a concurrency measured twice counts its
    first step)."""
    ratios: dict[int, float] = {}
    kept: dict[int, float] = {}
    lru: dict[int, float] = {}
    for step in steps:
        if step.concurrency is None:
            continue
        if step.ratio is not None:
            ratios.setdefault(step.concurrency, step.ratio)
        if step.kept_share is not None:
            kept.setdefault(step.concurrency, step.kept_share)
        if step.lru is not None and step.every_prefix_kept > 0:
            lru.setdefault(step.concurrency, step.lru / step.every_prefix_kept)
    found = _first_below(ratios, bound)
    lost = _first_below(kept, bound)
    predicted = _first_below(lru, bound)

    def listed(values: dict[int, float]) -> str:
        return ", ".join(f"{c}: {r:.3f}" for c, r in sorted(values.items()))

    if not ratios:
        text = (
            "no eviction cliff named: no concurrency step has a measured hit rate and an "
            "optimum above 0"
        )
    elif found is None:
        text = (
            f"no eviction cliff: measured / optimal stayed at or above {bound:g} at every "
            f"concurrency ({listed(ratios)})"
        )
    else:
        text = (
            f"eviction cliff at concurrency {found}: measured / optimal hit rate "
            f"{ratios[found]:.3f} < {bound:g} (by concurrency: {listed(ratios)})"
        )
    if kept:
        text += f"; measured / every prefix kept: {listed(kept)}" + (
            f", below {bound:g} from concurrency {lost}" if lost is not None else ""
        )
    if lru:
        text += f"; the LRU optimum of the server's capacity / every prefix kept: {listed(lru)}" + (
            f", below {bound:g} from concurrency {predicted}" if predicted is not None else ""
        )
    return EvictionCliff(
        bound=bound,
        concurrency=found,
        reuse_lost_at=lost,
        optimum_cliff_at=predicted,
        text=text,
    )
