"""``tune`` on an agentic workload reports the winner's prefix cache against its optimum beside
it (issue 42): a warning when the winner is past the eviction cliff, a note when it is not,
nothing when no hit rate was measured.

Covers: accelscope.commands.tune.workflow."""

from __future__ import annotations

from accelscope.commands.tune.workflow import _cache_beside_winner
from accelscope.llm.documents import (
    AgenticStep,
    Arrivals,
    CacheOptimum,
    JobGate,
    LlmTrial,
    TrialSummary,
)
from accelscope.tune.documents import TuneConfig


def _winner(measured: float | None, *, lru: float = 0.9, bound: float = 0.9) -> TuneConfig:
    ratio = None if measured is None else measured / lru
    cache = CacheOptimum(
        concurrency=8,
        block_size_tokens=128,
        block_basis="the server's /metrics",
        measured=measured,
        every_prefix_kept=0.95,
        lru=lru,
        reference="lru",
        ratio=ratio,
        bound=bound,
        below_bound=ratio is not None and ratio < bound,
    )
    gate = JobGate(
        valid=True,
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
    return TuneConfig(key="max-num-seqs=8", status="measured", point=point, trials=[point])


def test_a_winner_past_the_cliff_is_a_warning_beside_it() -> None:
    found = _cache_beside_winner(_winner(0.45))
    assert found is not None
    text, past = found
    assert past and text.startswith("the winner's prefix cache at concurrency 8: hit rate 0.45")
    assert "the lru optimum 0.90 (x0.50)" in text and "past the eviction cliff (under x0.9)" in text


def test_a_winner_above_the_cliff_is_a_note_and_none_without_a_hit_rate() -> None:
    found = _cache_beside_winner(_winner(0.88))
    assert found is not None and not found[1]
    assert found[0].endswith("above the eviction cliff's bound (x0.9)")
    assert _cache_beside_winner(_winner(None)) is None
    plain = TuneConfig(key="k", status="measured")
    assert _cache_beside_winner(plain) is None
