"""The best prefix-cache hit rate of a workload, on cases counted by hand: vLLM's block
granularity (full blocks keyed by their whole prefix, the last prompt token always computed),
the unbounded cache, LRU under a capacity and the eviction cliff as sessions in flight grow.

Covers: accelscope.llm.prefix_optimum."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from accelscope.errors import BadInputError
from accelscope.llm.agentic import cache_sessions, read_trajectories
from accelscope.llm.documents import ServerConfig
from accelscope.llm.prefix_optimum import (
    CacheRequest,
    PrefixOptimum,
    TurnTokens,
    arrival_order,
    block_keys,
    eviction_cliff,
    optimum,
    optimum_curve,
    replay,
    server_cache,
)

ROOT = Path(__file__).resolve().parents[2]


def test_a_block_is_keyed_by_its_whole_prefix() -> None:
    a = block_keys((1, 2, 3, 4, 5), 2)
    b = block_keys((9, 9, 3, 4), 2)
    assert len(a) == 2 and len(b) == 2  # the partial block (5) has no key
    assert a[0] != b[0] and a[1] != b[1]  # same tokens (3, 4), another prefix
    assert block_keys((1, 2, 3, 4), 2) == a


def test_one_session_grows_and_reuses_its_own_prefix() -> None:
    # block 2: turn 1 [1..5] + output [6] caches (1,2),(3,4),(5,6); turn 2's prompt [1..9]
    # may hit at most (9 - 1) // 2 = 4 blocks and finds 3 of them: 6 of 14 prompt tokens.
    turns = [TurnTokens((1, 2, 3, 4, 5), (6,)), TurnTokens(tuple(range(1, 10)))]
    found = optimum([turns], block_size=2)
    assert (found.prompt_tokens, found.hit_tokens, found.requests) == (14, 6, 2)
    assert found.hit_rate == pytest.approx(6 / 14)
    # without the output's tokens the cache holds only (1,2),(3,4): 4 tokens
    bare = [TurnTokens((1, 2, 3, 4, 5)), TurnTokens(tuple(range(1, 10)))]
    assert optimum([bare], block_size=2).hit_tokens == 4


def test_the_last_prompt_token_is_never_a_hit() -> None:
    # the same 4-token prompt twice: (4 - 1) // 2 = 1 block may hit, not 2
    same = TurnTokens((1, 2, 3, 4))
    found = optimum([[same], [same]], block_size=2)
    assert (found.hit_tokens, found.prompt_tokens) == (2, 8)


def test_a_shared_system_prompt_hits_across_sessions() -> None:
    system = (7, 7, 7, 7)
    sessions = [[TurnTokens((*system, s, s + 1, s + 2))] for s in (10, 20, 30)]
    found = optimum(sessions, block_size=2)
    assert found.hit_tokens == 2 * 4  # sessions 2 and 3 reuse the 2 system blocks
    assert found.hit_rate == pytest.approx(8 / 21)


def test_sessions_in_flight_advance_in_lockstep() -> None:
    sessions = [
        [TurnTokens((1,)), TurnTokens((2,))],
        [TurnTokens((3,))],
        [TurnTokens((4,)), TurnTokens((5,))],
    ]
    order = arrival_order(sessions, 2)
    assert [(r.session, r.tokens.prompt_ids) for r in order] == [
        (0, (1,)),
        (1, (3,)),
        (0, (2,)),
        (2, (4,)),  # session 1 ended: its slot takes session 2
        (2, (5,)),
    ]
    assert [r.session for r in arrival_order(sessions, 1)] == [0, 0, 1, 2, 2]
    with pytest.raises(BadInputError, match="concurrency 0"):
        arrival_order(sessions, 0)


def _two_turn_sessions(count: int) -> list[list[TurnTokens]]:
    """Session k: a 9-token prompt of its own, 1 output token, then the whole of it plus one
    token: 5 cached blocks after turn 1, 5 hits of turn 2's 11 tokens, 6 blocks after."""
    found = []
    for k in range(count):
        first = tuple(100 * k + i for i in range(9))
        second = TurnTokens((*first, 100 * k + 9, 1), (2,))
        found.append([TurnTokens(first, (100 * k + 9,)), second])
    return found


def test_lru_under_capacity_falls_off_a_cliff_as_concurrency_grows() -> None:
    # Capacity 12 blocks. Two contexts (5 + 6 blocks) fit: every turn 2 hits its 5 blocks,
    # 10 of 20 prompt tokens a session. Three in flight: session 3's turn 1 evicts session
    # 1's three tail blocks, turn 2 of session 1 finds 2 blocks (4 tokens), then evicts 4 of
    # session 2's, whose turn 2 finds 1 block (2 tokens) and evicts all of session 3's:
    # 6 of 60 tokens.
    sessions = _two_turn_sessions(3)
    unbounded = optimum(sessions, block_size=2)
    assert unbounded.hit_rate == pytest.approx(0.5)
    curve = optimum_curve(sessions, block_size=2, capacity_blocks=12, concurrencies=[1, 2, 3])
    assert [p.hit_tokens for p in curve] == [30, 30, 6]
    assert [p.hit_rate for p in curve] == pytest.approx([0.5, 0.5, 0.1])
    assert [p.concurrency for p in curve] == [1, 2, 3]
    assert curve[2].evicted_blocks > curve[1].evicted_blocks
    rates = [(p.concurrency, p.hit_rate) for p in curve]
    assert eviction_cliff(rates, unbounded.hit_rate, bound=0.9) == 3
    assert eviction_cliff(rates[:2], unbounded.hit_rate) is None
    # an unbounded cache has no cliff: concurrency changes only the order
    flat = optimum_curve(sessions, block_size=2, capacity_blocks=None, concurrencies=[1, 3])
    assert [p.hit_tokens for p in flat] == [30, 30]
    assert all(p.evicted_blocks == 0 for p in flat)


def test_bad_settings_are_one_line() -> None:
    sessions = _two_turn_sessions(1)
    with pytest.raises(BadInputError, match="block size 0"):
        optimum(sessions, block_size=0)
    with pytest.raises(BadInputError, match="KV capacity 0 blocks"):
        optimum(sessions, block_size=2, capacity_blocks=0)
    with pytest.raises(
        BadInputError, match=r"6 blocks \(12 tokens\) does not fit a KV capacity of 5"
    ):
        optimum(sessions, block_size=2, capacity_blocks=5)
    with pytest.raises(BadInputError, match="no request"):
        replay([], block_size=2)
    with pytest.raises(BadInputError, match="cliff bound 0"):
        eviction_cliff([(1, 0.5)], 0.5, bound=0.0)
    with pytest.raises(ValueError, match="must rise"):
        eviction_cliff([(2, 0.5), (1, 0.5)], 0.5)


def test_the_result_refuses_what_cannot_be() -> None:
    fields = dict(block_size=2, capacity_blocks=None, concurrency=1, requests=1)
    with pytest.raises(ValueError, match="last token"):
        PrefixOptimum(**fields, prompt_tokens=4, hit_tokens=4, evicted_blocks=0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="whole blocks"):
        PrefixOptimum(**fields, prompt_tokens=4, hit_tokens=1, evicted_blocks=0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="evicts nothing"):
        PrefixOptimum(**fields, prompt_tokens=4, hit_tokens=2, evicted_blocks=1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="at least one token"):
        TurnTokens(())
    assert CacheRequest(0, TurnTokens((1,))).session == 0


def test_agent_trajectories_reuse_their_growing_context(tmp_path: Path) -> None:
    row = {
        "messages": [
            {"role": "user", "content": " ".join(f"w{i}" for i in range(40))},
            {"role": "assistant", "content": "a b c"},
            {"role": "user", "content": "more words here", "latency_s": 1},
            {"role": "assistant", "content": "done"},
        ]
    }
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(row) + "\n", encoding="utf-8")
    (turns,) = cache_sessions(read_trajectories(path))
    # turn 1: 41 tokens (role + 40 words) + answer 4 = 45 -> 2 full blocks of 16 cached;
    # turn 2's 49 tokens find both: 32 hit tokens of 90.
    found = optimum([turns], block_size=16)
    assert (found.prompt_tokens, found.hit_tokens) == (41 + 49, 32)


def test_the_example_trajectories_show_a_cliff() -> None:
    sessions = cache_sessions(
        read_trajectories(ROOT / "examples" / "agentic" / "trajectories.jsonl")
    )
    unbounded = optimum(sessions, block_size=16)
    assert 0.5 < unbounded.hit_rate < 1.0
    curve = optimum_curve(sessions, block_size=16, capacity_blocks=320, concurrencies=[1, 4, 16])
    rates = [p.hit_rate for p in curve]
    assert rates[0] == pytest.approx(unbounded.hit_rate, abs=0.02)
    assert rates[0] >= rates[1] >= rates[2] and rates[2] < 0.9 * unbounded.hit_rate


def test_the_cache_a_server_publishes() -> None:
    vllm_cpu = ServerConfig(
        server="vllm",
        source="vllm:cache_config_info",
        block_size_tokens=128,
        prefix_caching=True,
        kv_capacity_tokens=8192,
    )
    assert server_cache(vllm_cpu) == (128, 64)
    assert server_cache(None) == "the server publishes no cache configuration"
    off = vllm_cpu.model_copy(update={"prefix_caching": False})
    assert server_cache(off) == "prefix caching is off on the server"
    unknown = vllm_cpu.model_copy(update={"kv_capacity_tokens": None})
    assert server_cache(unknown) == "the server publishes no block size or KV capacity"
    tiny = vllm_cpu.model_copy(update={"kv_capacity_tokens": 100})
    assert "holds no whole block" in str(server_cache(tiny))
