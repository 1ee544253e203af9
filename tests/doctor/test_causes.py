"""The cause table (doctor/causes.py): one threshold, one advice and one set of what-ifs per
cause, read alike by the trace's verdict and the live rules. Each cause is put at its threshold
and just under it, in steps built by hand, and the live rule that reports it fires exactly when
the trace's verdict reports it."""

from __future__ import annotations

import math
from typing import Any

import pytest

from accelscope.doctor.breakdown import breakdown
from accelscope.doctor.causes import (
    BOTTLENECK_SHARE,
    CAUSES,
    VERDICT_ADVICE,
    Cause,
    advice_for,
    sentence,
)
from accelscope.doctor.device_timeline import StepTimeline, timeline_verdict
from accelscope.doctor.findings import RuleContext
from accelscope.doctor.profile import PHASES, DeviceTraceRecord, Profile, Step
from accelscope.doctor.verdict import diagnose

STEP_US = 10_000.0


def steps_with(
    shares: dict[str, float], n: int = 3, precision: str = "fp32"
) -> tuple[StepTimeline, ...]:
    """``n`` identical steps whose causes hold ``shares`` of the step (whole µs; the rest
    ``other``), their matrix kernels named in ``precision``."""
    by_cause = dict.fromkeys(CAUSES, 0.0)
    for cause, share in shares.items():
        by_cause[cause] = float(round(share * STEP_US))
    by_cause["other"] = STEP_US - math.fsum(v for k, v in by_cause.items() if k != "other")
    kernels = by_cause["compute"] + by_cause["memory"]
    copies = by_cause["h2d_pageable"] + by_cause["h2d_pinned"]
    classes = {f"matrix {precision}": by_cause["compute"], "memory": by_cause["memory"]}
    return tuple(
        StepTimeline(
            index=i,
            step_us=STEP_US,
            compute_busy_us=kernels,
            copy_busy_us=copies,
            busy_us=kernels + copies,
            copy_by_kind={},
            by_cause=dict(by_cause),
            gaps=(),
            kernel_by_class={k: v for k, v in classes.items() if v > 0},
        )
        for i in range(n)
    )


def live_profile(record: DeviceTraceRecord | None, **extra: Any) -> Profile:
    """A live run's profile whose only GPU evidence is ``record``: three empty host steps."""
    step = Step(start_s=0.0, duration_s=0.01, phases_s=dict.fromkeys(PHASES, 0.0), counts={})
    return Profile(
        status="done", mode="optimizer", warmup=0, target_steps=3, steps=(step,) * 3,
        device_trace=record, **extra,
    )  # fmt: skip


def context_of(profile: Profile) -> RuleContext:
    """The rules' context of ``profile``: no telemetry, a 2-core machine."""
    return RuleContext(
        profile=profile,
        breakdown=breakdown(profile.measured),
        telemetry=None,
        support=(),
        cores=2,
        memory_bytes=2**34,
    )


def live_context(record: DeviceTraceRecord) -> RuleContext:
    """What the live path makes of a recorded trace (:func:`live_profile`)."""
    return context_of(live_profile(record))


def _live(shares: dict[str, float]) -> tuple[RuleContext, DeviceTraceRecord]:
    record = DeviceTraceRecord(status="injected", steps=3, timeline=steps_with(shares))
    return live_context(record), record


REPORTED_ALONE = [c for c in CAUSES.values() if c.rule and c.key not in ("compute", "memory")]


@pytest.mark.parametrize("cause", REPORTED_ALONE, ids=lambda c: c.key)
def test_a_live_rule_fires_exactly_where_the_trace_reports_its_cause(cause: Cause) -> None:
    compute = 0.3  # kernels under the device-bound test, so only ``cause`` can be reported
    for share, expected in ((cause.reported_at, True), (cause.reported_at - 0.01, False)):
        ctx, record = _live({"compute": compute, cause.key: share})
        trace = timeline_verdict(record.timeline)
        live = diagnose(ctx)
        assert live.timeline == trace
        assert (cause.key in dict(trace.reported)) is expected, (cause.key, share)
        finding = next(f for f in live.findings if f.rule == cause.rule)
        assert finding.fired is expected, (cause.key, share, finding.summary)
        if expected:
            assert finding.title == cause.title
            assert finding.advice.lower().startswith(cause.advice[:40].lower())
            assert f"{cause.reported_at:.0%}" in finding.threshold
        # the verdict names it only at 40 % of the step, the same level live and by trace
        assert live.bottleneck == "mixed" and trace.bottleneck == "mixed"


@pytest.mark.parametrize("cause", REPORTED_ALONE, ids=lambda c: c.key)
def test_a_cause_holding_the_step_is_named_alike_live_and_by_trace(cause: Cause) -> None:
    ctx, record = _live({"compute": 0.1, cause.key: BOTTLENECK_SHARE + 0.1})
    live = diagnose(ctx)
    trace = timeline_verdict(record.timeline)
    assert trace.bottleneck == cause.key and live.timeline == trace
    assert live.bottleneck == cause.rule and live.title == cause.title
    assert live.headline == trace.headline and trace.advice == cause.advice


def test_causes_without_a_rule_are_named_by_the_verdict_alone() -> None:
    for key in ("communication", "h2d_pinned", "allocator"):
        ctx, _ = _live({"compute": 0.1, key: 0.5})
        live = diagnose(ctx)
        assert live.bottleneck == key and live.title == CAUSES[key].title
    ctx, _ = _live({"compute": 0.1, "unexplained": 0.8})
    assert diagnose(ctx).bottleneck == "mixed"  # never named from time no event explains


def test_kernels_over_the_step_are_device_bound_with_the_table_what_ifs() -> None:
    ctx, _ = _live({"compute": 0.9})
    live = diagnose(ctx)
    assert live.bottleneck == "device-bound" and live.timeline is not None
    assert dict(live.timeline.reported) == {"compute": pytest.approx(0.9)}
    finding = next(f for f in live.findings if f.rule == "device-bound")
    assert set(finding.what_ifs) <= set(CAUSES["compute"].what_ifs)


def test_advice_never_says_bf16_outside_compute() -> None:
    for key in (*CAUSES, *VERDICT_ADVICE):
        text = advice_for(key)
        assert ("bf16" in text) == (key == "compute"), key
    assert "autocast" not in VERDICT_ADVICE["compute_reduced"]


def test_every_cause_of_a_step_is_in_the_table_and_bad_entries_raise() -> None:
    (step,) = steps_with({"compute": 0.5}, n=1)
    assert set(step.by_cause) == set(CAUSES)
    with pytest.raises(ValueError, match="threshold"):
        Cause(key="x", title="x", description="x", threshold=0.5, high=0.4, rule=None, advice="x")
    with pytest.raises(ValueError, match="never reported"):
        _ = CAUSES["other"].reported_at


def test_the_advice_shown_is_the_named_causes_not_the_largest_finding() -> None:
    # readbacks name the step; the DataLoader and preprocessing fire beside them, larger together
    ctx, _ = _live({"sync": 0.42, "dataloader": 0.25, "host_compute": 0.25})
    live = diagnose(ctx)
    assert live.bottleneck == "sync-bound" and live.fired[0].rule == "input-bound"
    assert live.advice == sentence(CAUSES["sync"].advice)
    # a cause no rule reports still gets its advice
    ctx, _ = _live({"compute": 0.1, "communication": 0.5})
    assert diagnose(ctx).advice == sentence(CAUSES["communication"].advice)


def test_device_idle_advises_only_from_a_cause_at_its_own_threshold() -> None:
    ctx, _ = _live({"compute": 0.6, "launch": 0.01, "unexplained": 0.3})
    idle = next(f for f in diagnose(ctx).findings if f.rule == "device-idle")
    assert idle.fired and idle.advice == "" and idle.what_ifs == ()
    ctx, _ = _live({"compute": 0.5, "launch": 0.3, "sync": 0.1})
    idle = next(f for f in diagnose(ctx).findings if f.rule == "device-idle")
    assert idle.advice == sentence(CAUSES["launch"].advice)


def test_a_name_the_what_ifs_refute_on_cuda_is_not_handed_to_a_smaller_finding() -> None:
    from accelscope.doctor.refute import refute_by_what_ifs
    from accelscope.doctor.whatif import WhatIfResult

    ctx, _ = _live({"launch": 0.45, "dataloader": 0.21, "compute": 0.2})
    live = diagnose(ctx)
    assert live.bottleneck == "overhead-bound"
    slower = [
        WhatIfResult(name=w, label=w, status="ok", speedup=0.8, speedup_low=0.75, speedup_high=0.85)
        for w in next(f for f in live.fired if f.rule == "overhead-bound").what_ifs
    ]
    out = refute_by_what_ifs(live, slower)
    assert out.bottleneck == "unconfirmed"  # not input-bound: 21 % is under the naming bar
    assert out.advice != sentence(CAUSES["launch"].advice)  # the refuted advice is not shown
    assert any(f.rule == "input-bound" and f.fired for f in out.findings)
