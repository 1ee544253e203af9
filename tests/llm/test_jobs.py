"""Jobs as the unit of an agentic run: job latency, jobs/hour at the SLO, TTFT against context,
$ per job and the SLO-tier table, each with an interval over sessions; and the validity gate
that makes a run with errors, context overflow or a client behind its schedule "invalid",
naming which. Records are built by hand, so every figure is counted by hand.

Covers: accelscope.llm.jobs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from accelscope.documents import Slo
from accelscope.llm.documents import RequestRecord
from accelscope.llm.jobs import (
    Estimate,
    InvalidReason,
    Job,
    JobReport,
    Validity,
    ValidityBounds,
    assess_jobs,
    check_validity,
    jobs_of,
)

SLO = Slo(ttft_s=0.5, tpot_s=0.05)


def _turn(
    index: int,
    session: int,
    turn: int,
    scheduled_s: float,
    *,
    ttft_s: float = 0.2,
    tokens: int = 5,
    tpot_s: float = 0.04,
    prompt_tokens: int | None = 100,
    error: str = "",
    lag_s: float = 0.0,
    cancelled: bool = False,
) -> RequestRecord:
    """A turn streamed one token a chunk: first token at ``scheduled + ttft``, then one every
    ``tpot``; a failed one streamed nothing and ended 40 ms after it was sent."""
    if error:
        return RequestRecord(
            index=index,
            scheduled_s=scheduled_s,
            sent_s=scheduled_s + lag_s,
            end_s=scheduled_s + lag_s + 0.04,
            prompt_tokens=prompt_tokens,
            error=error,
            session=session,
            turn=turn,
        )
    first = scheduled_s + ttft_s
    chunks = [first + k * tpot_s for k in range(tokens)]
    return RequestRecord(
        index=index,
        scheduled_s=scheduled_s,
        sent_s=scheduled_s + lag_s,
        end_s=chunks[-1],
        first_token_s=first,
        chunk_times_s=chunks,
        first_content_s=first,
        last_token_s=chunks[-1],
        output_tokens=tokens,
        prompt_tokens=prompt_tokens,
        tokens_source="usage",
        session=session,
        turn=turn,
        cancelled=cancelled,
    )


def _four_sessions() -> list[RequestRecord]:
    """Session s starts at s seconds; turn 1 (100 prompt tokens, TTFT 0.2 s, 5 tokens at
    40 ms) ends at s + 0.36; a 1 s tool wait; turn 2 (300 prompt tokens, TTFT 0.3 s).
    Session 1's turn 2 takes 0.8 s to its first token (misses the SLO), session 2's fails,
    session 3's answer is one token (no decode step to bound)."""
    records = []
    for s in range(4):
        records.append(_turn(2 * s, s, 1, float(s)))
        second = s + 1.36
        if s == 0:
            records.append(_turn(1, 0, 2, second, ttft_s=0.3, prompt_tokens=300))
        elif s == 1:
            records.append(_turn(3, 1, 2, second, ttft_s=0.8, prompt_tokens=300))
        elif s == 2:
            records.append(_turn(5, 2, 2, second, error="HTTP 500", prompt_tokens=300))
        else:
            records.append(_turn(7, 3, 2, second, ttft_s=0.3, tokens=1, prompt_tokens=300))
    return records


EXPECTED = {0: 2, 1: 2, 2: 2, 3: 2}
LENIENT = ValidityBounds(max_error_share=0.2)


def test_jobs_counted_by_hand() -> None:
    jobs = {job.session: job for job in jobs_of(_four_sessions(), EXPECTED, SLO)}
    assert [jobs[s].completed for s in range(4)] == [True, True, False, True]
    assert [jobs[s].met_slo for s in range(4)] == [True, False, False, True]
    assert jobs[0].wall_s == pytest.approx(1.82)  # 1.36 + 0.3 + 4 * 0.04
    assert jobs[1].wall_s == pytest.approx(2.32)
    assert jobs[3].wall_s == pytest.approx(1.66)
    assert jobs[2].turns_ok == 1


def test_job_figures_counted_by_hand() -> None:
    report = assess_jobs(
        _four_sessions(),
        expected_turns=EXPECTED,
        slo=SLO,
        bounds=LENIENT,
        usd_per_hour=10.0,
        tps_floors=(10.0, 30.0),
        ttft_ceilings_s=(0.5, 1.0),
    )
    assert report.validity.valid and report.validity.errors == 1
    metrics = report.metrics
    assert metrics is not None
    assert (metrics.jobs, metrics.completed, metrics.met_slo) == (4, 3, 2)
    assert metrics.duration_s == pytest.approx(4.66)  # session 3's last token at 3 + 1.66
    per_hour = 3600.0 / 4.66
    assert metrics.jobs_per_hour_at_slo.value == pytest.approx(2 * per_hour)
    assert metrics.completed_jobs_per_hour.value == pytest.approx(3 * per_hour)
    latency = metrics.job_latency_p50_s
    assert latency is not None and latency.value == pytest.approx(1.82)
    assert metrics.usd_per_completed_job is not None
    assert metrics.usd_per_completed_job.value == pytest.approx(10.0 / (3 * per_hour))
    assert metrics.usd_per_job_at_slo is not None
    assert metrics.usd_per_job_at_slo.value == pytest.approx(10.0 / (2 * per_hour))
    for estimate in (metrics.jobs_per_hour_at_slo, metrics.completed_jobs_per_hour, latency):
        assert estimate.low is not None and estimate.high is not None
        assert estimate.low <= estimate.value <= estimate.high
    # resampling 4 sessions: between 0 and 4 good ones
    good = metrics.jobs_per_hour_at_slo
    assert good.low is not None and good.high is not None
    assert 0.0 <= good.low <= good.high <= 4 * per_hour
    done_high = metrics.completed_jobs_per_hour.high
    assert done_high is not None
    assert metrics.usd_per_completed_job.low == pytest.approx(10.0 / done_high)

    assert good.method == "percentile bootstrap over 4 sessions (2000 resamples)"
    tiers = {(t.min_output_tokens_per_s, t.max_ttft_s): t.sessions_meeting for t in metrics.tiers}
    assert tiers == {(10.0, 0.5): 2, (10.0, 1.0): 3, (30.0, 0.5): 0, (30.0, 1.0): 0}
    # no session in the tier: resampling has no spread, the exact binomial interval has
    none = metrics.tiers[-1].jobs_per_hour
    assert (none.value, none.low) == (0.0, 0.0)
    assert none.high == pytest.approx(0.6024 * 4 * per_hour, rel=1e-3)  # 0 of 4 at 95 %
    assert "Clopper-Pearson" in none.method

    low, high = metrics.ttft_by_context
    assert (low.low_tokens, low.high_tokens, low.turns, low.sessions) == (64, 128, 4, 4)
    assert low.ttft_p50_s.value == pytest.approx(0.2)
    assert (high.low_tokens, high.turns, high.sessions) == (256, 3, 3)  # the failed turn is out
    assert high.ttft_p50_s.value == pytest.approx(0.3)
    assert high.prompt_tokens_mean == 300.0


def test_the_intervals_are_seeded() -> None:
    first = assess_jobs(_four_sessions(), expected_turns=EXPECTED, slo=SLO, bounds=LENIENT)
    again = assess_jobs(_four_sessions(), expected_turns=EXPECTED, slo=SLO, bounds=LENIENT)
    assert first.metrics is not None and again.metrics is not None
    assert first.metrics.jobs_per_hour_at_slo == again.metrics.jobs_per_hour_at_slo


def test_one_session_has_no_interval_and_says_why() -> None:
    records = [_turn(0, 0, 1, 0.0), _turn(1, 0, 2, 1.36, ttft_s=0.3)]
    metrics = assess_jobs(records, expected_turns={0: 2}, slo=SLO).metrics
    assert metrics is not None
    assert metrics.jobs_per_hour_at_slo.low is None
    assert metrics.jobs_per_hour_at_slo.why == "fewer than 2 sessions"
    assert metrics.met_slo == 1


def test_every_session_alike_still_has_an_interval() -> None:
    records = [_turn(s, s, 1, float(s)) for s in range(10)]
    metrics = assess_jobs(records, expected_turns=dict.fromkeys(range(10), 1), slo=SLO).metrics
    assert metrics is not None and metrics.met_slo == 10
    rate = metrics.jobs_per_hour_at_slo
    per_hour = 3600.0 / metrics.duration_s
    assert rate.value == rate.high == pytest.approx(10 * per_hour)
    assert rate.low == pytest.approx(0.6915 * 10 * per_hour, rel=1e-3)  # 10 of 10 at 95 %


def test_no_completed_job_is_not_measured_never_zero_dollars() -> None:
    records = [_turn(0, 0, 1, 0.0, error="HTTP 500"), _turn(1, 1, 1, 0.0)]
    metrics = assess_jobs(
        records,
        expected_turns={0: 2, 1: 2},  # session 1's turn 2 never ran: not completed either
        slo=SLO,
        bounds=ValidityBounds(max_error_share=0.6),
        usd_per_hour=3.0,
    ).metrics
    assert metrics is not None and metrics.completed == 0
    assert metrics.job_latency_p50_s is None
    assert metrics.usd_per_completed_job is None and metrics.usd_per_job_at_slo is None
    assert "job latency not measured: no session completed" in metrics.notes
    assert "$ per completed job not measured: no job completed" in metrics.notes


def test_a_cancelled_session_is_left_out() -> None:
    records = _four_sessions()
    records[1] = _turn(1, 0, 2, 1.36, cancelled=True)
    jobs = jobs_of(records, EXPECTED, SLO)
    assert sorted(job.session for job in jobs) == [1, 2, 3]


# -- the validity gate -------------------------------------------------------------------------


def _hundred(at: Mapping[int, dict[str, Any]] | None = None) -> list[RequestRecord]:
    """100 single-turn sessions, 10 ms apart; ``at`` maps an index to _turn's options."""
    chosen = at or {}
    return [_turn(i, i, 1, i * 0.01, **chosen.get(i, {})) for i in range(100)]


def test_a_clean_run_is_valid() -> None:
    validity = check_validity(_hundred(), context_tokens=1000)
    assert validity.valid and validity.failures == ()
    assert (validity.turns, validity.errors, validity.overflowed) == (100, 0, 0)


def test_injected_server_errors_make_the_run_invalid() -> None:
    records = _hundred(at={i: {"error": "HTTP 500"} for i in (3, 40, 77)})
    report = assess_jobs(records, expected_turns=dict.fromkeys(range(100), 1), slo=SLO)
    assert report.metrics is None
    assert report.validity.reasons == (InvalidReason.ERRORS,)
    assert report.validity.failures[0].text == "3 of 100 turns failed (3.0% > 1.0%)"
    # one error in a hundred is within the stated bound
    assert check_validity(_hundred(at={5: {"error": "HTTP 500"}})).valid


def test_context_overflow_on_more_than_one_percent_makes_it_invalid() -> None:
    overflow = {i: {"prompt_tokens": 1000} for i in (10, 20)}
    validity = check_validity(_hundred(at=overflow), context_tokens=1000)
    assert validity.reasons == (InvalidReason.CONTEXT_OVERFLOW,)
    assert validity.failures[0].text == (
        "2 of 100 prompts overflow the context of 1000 tokens (2.0% > 1.0%)"
    )
    # a prompt of 999 tokens that asks for 1 token fits; asking for 2 does not
    fits = check_validity(
        _hundred(at={i: {"prompt_tokens": 999} for i in (10, 20)}), context_tokens=1000
    )
    assert fits.valid
    asks = check_validity(
        _hundred(at={i: {"prompt_tokens": 999} for i in (10, 20)}),
        context_tokens=1000,
        requested_tokens={10: 2, 20: 2},
    )
    assert asks.reasons == (InvalidReason.CONTEXT_OVERFLOW,)
    unchecked = check_validity(_hundred(at=overflow))
    assert unchecked.valid and unchecked.overflowed is None


def test_a_refused_prompt_is_sized_by_the_workload() -> None:
    # a server that refuses an overflowing prompt reports no usage: the workload's count holds
    refused = {i: {"error": "HTTP 400", "prompt_tokens": None} for i in (10, 20)}
    records = _hundred(at=refused)
    blind = check_validity(records, context_tokens=1000, bounds=LENIENT)
    assert blind.valid and (blind.overflowed, blind.unsized_turns) == (0, 2)
    sized = check_validity(
        records, context_tokens=1000, prompt_tokens={10: 1200, 20: 1500}, bounds=LENIENT
    )
    assert sized.reasons == (InvalidReason.CONTEXT_OVERFLOW,)
    assert (sized.overflowed, sized.unsized_turns) == (2, 0)


def test_a_client_behind_its_schedule_makes_it_invalid_and_all_reasons_are_named() -> None:
    late = {i: {"lag_s": 0.2} for i in range(5)}
    validity = check_validity(_hundred(at=late))
    assert validity.reasons == (InvalidReason.CLIENT_BEHIND,)
    assert "p99 lag 200 ms > 50 ms" in validity.failures[0].text
    both = {**late, 50: {"error": "HTTP 500"}, 51: {"error": "HTTP 503"}}
    assert check_validity(_hundred(at=both)).reasons == (
        InvalidReason.ERRORS,
        InvalidReason.CLIENT_BEHIND,
    )


# -- the types refuse what cannot be -----------------------------------------------------------


def test_the_types_raise_where_they_are_built() -> None:
    with pytest.raises(ValueError, match="completed means every turn"):
        Job(session=0, turns_expected=2, turns_ok=1, completed=True, met_slo=False, wall_s=1.0)
    with pytest.raises(ValueError, match="only a completed job"):
        Job(session=0, turns_expected=2, turns_ok=1, completed=False, met_slo=True, wall_s=1.0)
    with pytest.raises(ValueError, match="reversed"):
        Estimate(value=1.0, low=2.0, high=0.5, confidence=0.95)
    with pytest.raises(ValueError, match="says why"):
        Estimate(value=1.0, low=None, high=None, confidence=0.95)
    with pytest.raises(ValueError, match="max_error_share"):
        ValidityBounds(max_error_share=1.5)
    valid = check_validity(_hundred())
    with pytest.raises(ValueError, match="valid run has figures"):
        JobReport(validity=valid, metrics=None)
    with pytest.raises(ValueError, match="errors 5 outside"):
        Validity(
            bounds=ValidityBounds(),
            turns=2,
            errors=5,
            overflowed=None,
            unsized_turns=0,
            lag_p99_s=0.0,
            failures=(),
        )
    orphan = RequestRecord(index=0, scheduled_s=0.0, sent_s=0.0, end_s=1.0)
    with pytest.raises(ValueError, match="names its session and turn"):
        jobs_of([orphan], {0: 1}, SLO)
    with pytest.raises(ValueError, match="session 9 is not expected"):
        jobs_of([_turn(0, 9, 1, 0.0)], {0: 1}, SLO)
    with pytest.raises(ValueError, match="usd_per_hour"):
        assess_jobs(_four_sessions(), expected_turns=EXPECTED, slo=SLO, usd_per_hour=0.0)
