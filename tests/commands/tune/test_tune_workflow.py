"""``tune`` on an agentic workload reports each configuration's prefix cache against its optimum
(issue 42), the winner's first: a warning when the winner is past the eviction cliff (by the reuse
eviction took, or by doing worse than its capacity allows), a note when it is not and for the
others, nothing when no hit rate was measured.

Covers: accelscope.commands.tune.workflow."""

from __future__ import annotations

from accelscope.commands.tune.workflow import _caches_against_optimum, _invalid_agentic_steps
from accelscope.llm.documents import (
    AgenticStep,
    Arrivals,
    CacheOptimum,
    GateReason,
    JobGate,
    LlmTrial,
    TrialSummary,
)
from accelscope.tune.documents import TuneConfig
from accelscope.tune.outcome import Role

KEPT = 0.71  # every prefix kept: the sessions' ceiling


def _config(
    key: str,
    measured: float | None,
    *,
    lru: float = KEPT,
    blocks: int = 640,
    role: Role = "candidate",
    behind: str = "",
) -> TuneConfig:
    ratio = None if measured is None else measured / lru
    cache = CacheOptimum(
        concurrency=8,
        block_size_tokens=128,
        block_basis="the server's /metrics",
        measured=measured,
        every_prefix_kept=KEPT,
        lru=lru,
        capacity_blocks=blocks,
        reference="lru",
        ratio=ratio,
        kept_share=None if measured is None else measured / KEPT,
        bound=0.9,
        below_bound=ratio is not None and ratio < 0.9,
    )
    gate = JobGate(
        valid=not behind,
        failures=[GateReason(reason="client behind schedule", text=behind)] if behind else [],
        turns=40,
        errors=0,
        lag_p99_s=0.01,
        max_error_share=0.01,
        max_overflow_share=0.01,
        lag_limit_s=0.05,
    )
    point = LlmTrial(
        index=0,
        label="concurrency 8",
        arrivals=Arrivals(concurrency=8),
        summary=TrialSummary(
            requests=40, completed=40, errors=0, agentic=AgenticStep(gate=gate, cache=cache)
        ),
    )
    return TuneConfig(key=key, status="measured", point=point, trials=[point], role=role)


def test_a_winner_above_the_cliff_is_a_note_and_a_small_cache_past_it_is_named() -> None:
    """The tune of benchmarks/tune_agentic_vllm.py: 640 blocks keep nearly every prefix (the
    winner), 80 blocks (the reference) evict them: LRU under 80 blocks predicts it, and the
    measured rate beats LRU (x1.39), so the cause is the capacity, not the policy."""
    winner = _config("num-gpu-blocks-override=640", 0.64)
    small = _config("num-gpu-blocks-override=80", 0.48, lru=0.345, blocks=80, role="reference")
    found = _caches_against_optimum([small, winner], winner)
    assert [warn for _, warn in found] == [False, False]  # only a winner past the cliff warns
    first, second = (text for text, _ in found)
    assert first == (
        "the winner's prefix cache at concurrency 8: hit rate 0.64; every prefix kept 0.71 "
        "(x0.90), LRU under its 640 blocks 0.71 (x0.90); above the eviction cliff's bound (x0.9)"
    )
    assert second.startswith(
        "num-gpu-blocks-override=80 (the reference)'s prefix cache at concurrency 8: hit rate "
        "0.48; every prefix kept 0.71 (x0.68), LRU under its 80 blocks 0.34 (x1.39); past the "
        "eviction cliff (under x0.9): its KV capacity cannot hold"
    )


def test_a_winner_past_the_cliff_is_a_warning_naming_the_cause() -> None:
    by_capacity = _config("max-num-seqs=8", 0.40, lru=0.42, blocks=80)
    ((text, warn),) = _caches_against_optimum([by_capacity], by_capacity)
    assert warn and text.startswith("the winner's prefix cache at concurrency 8: hit rate 0.40")
    assert "past the eviction cliff (under x0.9): its KV capacity cannot hold" in text
    by_policy = _config("max-num-seqs=8", 0.45)  # LRU keeps everything; the server kept 0.45
    ((text, warn),) = _caches_against_optimum([by_policy], by_policy)
    assert warn and "(x0.63)" in text
    assert "the cache keeps less than its capacity allows" in text


def test_nothing_is_said_without_a_measured_hit_rate_or_an_agentic_workload() -> None:
    assert _caches_against_optimum([_config("k", None)], None) == []
    plain = TuneConfig(key="k", status="measured")
    assert _caches_against_optimum([plain], plain) == []


def test_a_configuration_the_validity_gate_failed_is_a_warning() -> None:
    fine = _config("num-gpu-blocks-override=640", 0.64)
    behind = _config("num-gpu-blocks-override=80", 0.48, behind="the client fell behind")
    assert _invalid_agentic_steps([fine, behind]) == [
        "num-gpu-blocks-override=80 at concurrency 8: the agentic validity gate failed (the "
        "client fell behind); its good tokens/s ranks it, but an llm run would report no job "
        "figures there"
    ]
