"""The verdict: run every rule, rank what fired by the share of step time at stake, and name
one bottleneck with its evidence. When nothing fires, say where the time is instead.

On CUDA the verdict is the GPU's own timeline's (:attr:`RuleContext.timeline`, drawn by the
code that diagnoses ``doctor --trace``): computed once, stored with the diagnosis, so the live
run and the trace of the same steps cannot name different bottlenecks. The rules' findings
stand beside it (the same cause thresholds, :mod:`accelscope.doctor.causes`), with what only a
live run sees (memory, telemetry, the machine)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from accelscope.doctor.breakdown import Breakdown
from accelscope.doctor.causes import CAUSES, sentence
from accelscope.doctor.device_timeline import TimelineVerdict
from accelscope.doctor.findings import Finding, Rule, RuleContext
from accelscope.doctor.rules import all_rules
from accelscope.measurement.stats import NOISE_IQR_RATIO
from accelscope.serialise import load

__all__ = ["Diagnosis", "diagnose", "machine_notes", "named_from_timeline"]

_SEVERITY = {"high": 2, "medium": 1, "low": 0, "": 0}
_BUSY_CORES = 0.5
"""Other processes using this many cores on average make the run's timings noisy."""


@dataclass(frozen=True, kw_only=True)
class Diagnosis:
    """The named bottleneck, its one-line headline, and every rule's finding (fired first,
    ranked; then clear and not-applicable ones, so the thresholds checked are on record).
    ``timeline``: on CUDA, the GPU's own timeline's verdict the bottleneck was named from
    (``None`` on the CPU, and in diagnoses stored before it was kept)."""

    bottleneck: str
    title: str
    headline: str
    findings: tuple[Finding, ...]
    breakdown: Breakdown
    notes: tuple[str, ...] = ()
    timeline: TimelineVerdict | None = None

    @property
    def fired(self) -> tuple[Finding, ...]:
        """The findings whose rule fired, ranked."""
        return tuple(f for f in self.findings if f.fired)

    @property
    def advice(self) -> str:
        """The advice that goes with the named bottleneck: on CUDA the GPU timeline's (the
        named cause's, or how to profile steady steps), unless the what-ifs refuted that name;
        else the top fired finding's ("" when none has any)."""
        if self.timeline is not None and self.bottleneck != "unconfirmed":
            return sentence(self.timeline.advice)
        return next((f.advice for f in self.fired if f.advice), "")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Diagnosis:
        """Read back what :func:`accelscope.serialise.dump` stored (the breakdown through
        :meth:`Breakdown.from_dict`, which also reads the older shape)."""
        return load(cls, {**data, "breakdown": Breakdown.from_dict(data["breakdown"])})


def _rank(finding: Finding) -> tuple[float, int]:
    return (finding.share if finding.share is not None else 0.0, _SEVERITY[finding.severity])


def machine_notes(ctx: RuleContext) -> list[str]:
    """Warnings about the measurement itself: step-time noise, a busy machine, early end."""
    notes: list[str] = []
    b = ctx.breakdown
    if b.iqr_ratio > NOISE_IQR_RATIO:
        notes.append(f"noisy: step-time IQR is {b.iqr_ratio:.0%} of the median")
    telemetry = ctx.telemetry
    if telemetry is not None and telemetry.samples:
        samples = telemetry.samples
        system = sum(sum(s.cpu_percent) / 100.0 for s in samples) / len(samples)
        script = sum(s.process_cpu_cores for s in samples) / len(samples)
        if system - script >= _BUSY_CORES:
            notes.append(
                f"the machine was busy: other processes used ~{system - script:.1f} of "
                f"{ctx.cores} cores during the run, so the timings are noisy"
            )
    profile = ctx.profile
    if profile.status != "done" and profile.target_steps:
        measured = len(profile.measured)
        asked = profile.target_steps - profile.warmup
        why = {"ended": "the script finished", "stopped": "the run hit its time limit"}.get(
            profile.status, "the run stopped"
        )
        notes.append(f"{why} after {measured} of {asked} measured steps")
    return notes


_VERDICT_TITLES = {
    "mixed": "mixed",
    "underfilled": "under-filled GPU",
    "not_diagnosed": "not diagnosed",
}


def named_from_timeline(verdict: TimelineVerdict) -> tuple[str, str]:
    """``(bottleneck, title)`` of a live diagnosis from its timeline's verdict: the rule that
    reports the cause (``sync`` -> ``sync-bound``), else the verdict's own name."""
    cause = CAUSES.get(verdict.bottleneck)
    if cause is not None:
        return cause.rule or cause.key, cause.title
    return verdict.bottleneck, _VERDICT_TITLES.get(verdict.bottleneck, verdict.bottleneck)


def diagnose(ctx: RuleContext, rules: Sequence[Rule] | None = None) -> Diagnosis:
    """Run ``rules`` (default: every rule in :mod:`accelscope.doctor.rules`) over ``ctx``."""
    findings = [rule.check(ctx) for rule in (all_rules() if rules is None else rules)]
    fired = sorted((f for f in findings if f.fired), key=_rank, reverse=True)
    rest = [f for f in findings if not f.fired]
    ordered = tuple(fired + sorted(rest, key=lambda f: (f.status != "clear", f.rule)))
    b = ctx.breakdown
    timeline = ctx.timeline if ctx.device == "cuda" else None
    if timeline is not None:
        bottleneck, title = named_from_timeline(timeline)
        headline = timeline.headline
    elif ctx.device == "cuda":
        record = ctx.profile.device_trace
        status = record.status if record is not None else "not recorded"
        bottleneck, title = "not_diagnosed", "not diagnosed"
        headline = (
            f"not diagnosed: the GPU's own timeline (torch.profiler) is missing ({status}); "
            "no other model of GPU time stands in for it"
        )
    elif fired:
        top = fired[0]
        bottleneck, title = top.rule, top.title
        headline = f"{top.title}: {top.summary}"
    elif ctx.compute_share >= 0.5:
        bottleneck, title = "compute", "compute-bound"
        headline = (
            f"compute-bound with no fixable bottleneck found: forward + backward + optimizer "
            f"take {ctx.compute_share:.0%} of step time"
        )
    else:
        largest = max(b.shares, key=lambda p: b.shares[p])
        bottleneck, title = largest, f"{largest} time"
        where = (
            "outside every instrumented call (the script's own Python code)"
            if largest == "other"
            else f"in {largest}"
        )
        headline = (
            f"no rule fired; the largest share of step time, {b.shares[largest]:.0%}, is {where}"
        )
    return Diagnosis(
        bottleneck=bottleneck,
        title=title,
        headline=headline,
        findings=ordered,
        breakdown=b,
        notes=tuple(machine_notes(ctx)),
        timeline=timeline,
    )
