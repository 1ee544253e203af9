"""The doctor's analysis: run the script instrumented, diagnose, then measure the what-ifs.

It takes its collaborators as arguments (the launcher that runs children, the machine's
fast paths, cores and memory), so it is tested with scripted children and fake machines.
Script failures become one clear :class:`~accelscope.errors.MeasurementError`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from accelscope.doctor.breakdown import breakdown
from accelscope.doctor.findings import RuleContext
from accelscope.doctor.launcher import ChildConfig, ChildRun, Launcher
from accelscope.doctor.profile import Profile
from accelscope.doctor.refute import refute_by_what_ifs
from accelscope.doctor.train_whatif import compare_losses
from accelscope.doctor.verdict import Diagnosis, diagnose
from accelscope.doctor.whatif import (
    PlannedWhatIf,
    WhatIfResult,
    caveat_for,
    loss_caveat,
    pair_variants,
    parse_what_ifs,
    plan_what_ifs,
    recommend,
    speedup,
)
from accelscope.errors import MeasurementError
from accelscope.hardware.fastpaths import PrecisionSupport
from accelscope.hardware.telemetry import Telemetry
from accelscope.serialise import dump, load

__all__ = ["DoctorEvents", "DoctorPlan", "DoctorResult", "failure_message", "run_doctor"]


@dataclass(frozen=True, kw_only=True)
class DoctorPlan:
    """What to run: the script and its arguments, warm-up and measured steps, the what-ifs."""

    script: Path
    args: tuple[str, ...] = ()
    warmup: int = 10
    steps: int = 50
    what_if: str = "auto"
    trace_steps: int = 3


class DoctorEvents(Protocol):
    """Progress callbacks (the CLI shows them on stderr)."""

    def run_started(self, label: str, total_steps: int) -> None:
        """A child run starts."""

    def step(self, label: str, count: int, total_steps: int) -> None:
        """The child finished its ``count``-th step."""

    def run_finished(self, label: str, line: str) -> None:
        """A child run is over; ``line`` sums it up."""


@dataclass(frozen=True, kw_only=True)
class DoctorResult:
    """Everything ``accelscope doctor`` found: the baseline's profile and telemetry, the
    diagnosis, the measured what-ifs and the recommendation."""

    script: str
    args: tuple[str, ...]
    profile: Profile
    telemetry: Telemetry | None
    diagnosis: Diagnosis
    what_ifs: tuple[WhatIfResult, ...] = ()
    best: str | None = None
    recommendation: str = ""
    interrupted: bool = False
    """Ctrl-C arrived during the what-ifs: ``what_ifs`` holds those measured before it."""
    telemetry_steps_at_s: float | None = None
    """Where the first recorded step started on the telemetry clock (seconds since sampling
    began), so views average GPU telemetry over the measured steps; ``None``: unknown."""

    def documents(self) -> dict[str, Any]:
        """The store documents: ``diagnosis``, ``telemetry`` and one ``whatif`` each."""
        diagnosis = {
            "script": self.script,
            "args": list(self.args),
            "diagnosis": dump(self.diagnosis),
            "profile": dump(self.profile),
            "best": self.best,
            "recommendation": self.recommendation,
            "telemetry_steps_at_s": self.telemetry_steps_at_s,
        }
        return {
            "diagnosis": diagnosis,
            "telemetry": None if self.telemetry is None else self.telemetry.to_dict(),
            "whatif": [dump(w) for w in self.what_ifs],
        }

    @classmethod
    def from_documents(
        cls,
        diagnosis: dict[str, Any],
        telemetry: dict[str, Any] | None,
        whatifs: list[dict[str, Any]],
    ) -> DoctorResult:
        """Inverse of :meth:`documents`."""
        best = diagnosis.get("best")
        steps_at = diagnosis.get("telemetry_steps_at_s")
        return cls(
            script=str(diagnosis["script"]),
            args=tuple(str(a) for a in diagnosis["args"]),
            profile=Profile.from_dict(diagnosis["profile"]),
            telemetry=None if telemetry is None else Telemetry.from_dict(telemetry),
            diagnosis=Diagnosis.from_dict(diagnosis["diagnosis"]),
            what_ifs=tuple(load(WhatIfResult, w) for w in whatifs),
            best=None if best is None else str(best),
            recommendation=str(diagnosis.get("recommendation", "")),
            telemetry_steps_at_s=None if steps_at is None else float(steps_at),
        )


def failure_message(run: ChildRun, warmup: int, stall_s: float, timeout_s: float) -> str | None:
    """One line saying why ``run`` gives nothing to diagnose, or ``None`` if it does."""
    profile = run.profile
    steps = len(profile.steps) if profile is not None else run.steps_seen
    after = f" after {steps} step{'s' if steps != 1 else ''}"
    if profile is not None and profile.status == "error" and profile.error is not None:
        return f"your script raised {profile.error.describe()}{after}"
    if profile is not None and profile.status == "exited":
        return f"your script exited with status {profile.exit_code}{after}"
    if run.ended_by == "stall":
        if steps == 0:
            return (
                f"no step within {stall_s:g} s: the script never called optimizer.step(), "
                "ran a model forward or drew a DataLoader batch (raise --stall-timeout if "
                "its set-up is slow)"
            )
        return f"the script stopped making progress: no step for {stall_s:g} s{after} (hung?)"
    if run.ended_by == "timeout":
        return f"the run hit --timeout {timeout_s:g} s{after}; lower --steps or raise --timeout"
    if profile is None:
        code = run.returncode
        how = (
            f"was killed by signal {-code}"
            if code is not None and code < 0
            else (f"exited with status {code}")
        )
        extra = f" ({run.unreadable})" if run.unreadable else ""
        return f"the instrumented process {how}{after} without writing results{extra}"
    if not profile.steps:
        return (
            "the script finished without a single step: no optimizer.step(), model forward "
            "or DataLoader batch was seen"
        )
    if not profile.measured:
        return (
            f"the script finished after {len(profile.steps)} steps, all inside the warm-up "
            f"(--warmup {warmup}); lower --warmup or let the script run longer"
        )
    return None


def _run(
    launcher: Launcher, config: ChildConfig, label: str, events: DoctorEvents | None
) -> ChildRun:
    total = config.warmup + config.steps
    if events is not None:
        events.run_started(label, total)
    on_step: Callable[[int], None] | None = None
    if events is not None:
        sink = events

        def on_step(count: int) -> None:
            sink.step(label, count, total)

    return launcher.run(config, on_step)


_SEED = 0
"""The seed of every what-if run and of the baseline they are compared with (same weights,
same data order: their losses can be set side by side)."""


def _measure_what_if(
    planned: PlannedWhatIf,
    run: ChildRun,
    baseline: WhatIfResult | None,
    warmup: int,
    launcher: Launcher,
    baseline_losses: dict[int, float | None] | None = None,
) -> WhatIfResult:
    failure = failure_message(run, warmup, launcher.stall_s, launcher.timeout_s)
    if failure is not None:
        return WhatIfResult(
            name=planned.name,
            label=planned.label,
            status="failed",
            reason=failure,
            notes=planned.notes,
        )
    profile = run.profile
    assert profile is not None
    applied = profile.whatif
    notes = (*planned.notes, *(str(n) for n in applied.get("notes", [])))
    details = dict(applied.get("details", {}))
    if planned.name != "baseline" and not applied.get("applied", False):
        return WhatIfResult(
            name=planned.name,
            label=planned.label,
            status="not applied",
            reason="; ".join(notes) or "nothing to change was found",
            notes=notes,
        )
    b = breakdown(profile.measured)
    ratio = low = high = None
    if baseline is not None and baseline.items_per_s is not None:
        ratio, low, high = speedup(baseline.items_per_s, b.items_per_s)
    caveat = caveat_for(planned.name, details)
    gap = None
    if planned.name in ("bf16", "fp16") and baseline_losses:
        comparison = compare_losses(baseline_losses, profile.measured_losses())
        caveat = loss_caveat(planned.name, comparison)
        gap = None if comparison is None else comparison.gap
    return WhatIfResult(
        name=planned.name,
        label=planned.label,
        status="ok",
        reason="",
        notes=notes,
        steps=b.steps,
        steps_per_s=b.steps_per_s,
        items_per_s=b.items_per_s,
        items_per_step=b.items_per_step,
        speedup=ratio,
        speedup_low=low,
        speedup_high=high,
        caveat=caveat,
        details=details,
        loss_gap=gap,
    )


def run_doctor(
    plan: DoctorPlan,
    launcher: Launcher,
    *,
    support: tuple[PrecisionSupport, ...],
    cores: int,
    memory_bytes: int,
    events: DoctorEvents | None = None,
) -> DoctorResult:
    """Diagnose ``plan.script`` and measure the what-ifs ``plan.what_if`` selects.

    Raises:
        BadInputError: ``plan.what_if`` is not understood.
        MeasurementError: the script crashed, exited, hung, or never reached a measured step.
    """
    mode, chosen = parse_what_ifs(plan.what_if)
    config = ChildConfig(
        script=plan.script,
        args=plan.args,
        warmup=plan.warmup,
        steps=plan.steps,
        trace_steps=plan.trace_steps,
    )
    run = _run(launcher, config, "baseline", events)
    failure = failure_message(run, plan.warmup, launcher.stall_s, launcher.timeout_s)
    if failure is not None:
        raise MeasurementError(failure)
    profile = run.profile
    assert profile is not None
    ctx = RuleContext(
        profile=profile,
        breakdown=breakdown(profile.measured),
        telemetry=run.telemetry,
        support=support,
        cores=cores,
        memory_bytes=memory_bytes,
        telemetry_steps_at_s=run.telemetry_steps_at_s,
    )
    diagnosis = diagnose(ctx)
    if events is not None:
        events.run_finished("baseline", diagnosis.headline)
    pointed = tuple(w for f in diagnosis.fired for w in f.what_ifs)
    planned = plan_what_ifs(mode, chosen, ctx, pointed)
    results: list[WhatIfResult] = []
    runnable = [p for p in planned if p.spec is not None]
    interrupted = False
    try:
        baseline: WhatIfResult | None = None
        base_losses: dict[int, float | None] = {}
        if runnable:
            light = ChildConfig(
                script=plan.script,
                args=plan.args,
                warmup=plan.warmup,
                steps=plan.steps,
                full=False,
                trace_steps=0,
                probe=False,
                seed=_SEED,
            )
            base_planned = PlannedWhatIf("baseline", "baseline (re-measured alike)", None)
            base_run = _run(launcher, light, "baseline (re-measured)", events)
            baseline = _measure_what_if(base_planned, base_run, None, plan.warmup, launcher)
            base_losses = base_run.profile.measured_losses() if base_run.profile is not None else {}
            if baseline.status == "ok":
                baseline = WhatIfResult(
                    **{**baseline.__dict__, "speedup": 1.0, "speedup_low": 1.0, "speedup_high": 1.0}
                )
            else:
                baseline = None
            results.append(
                baseline
                or WhatIfResult(
                    name="baseline",
                    label="baseline",
                    status="failed",
                    reason="the baseline re-run failed",
                )
            )
        for item in planned:
            if item.spec is None:
                results.append(
                    WhatIfResult(
                        name=item.name,
                        label=item.label,
                        status="skipped",
                        reason=item.reason,
                        notes=item.notes,
                    )
                )
                continue
            config = ChildConfig(
                script=plan.script,
                args=plan.args,
                warmup=plan.warmup,
                steps=plan.steps,
                full=False,
                trace_steps=0,
                probe=False,
                whatif=item.spec,
                seed=_SEED,
            )
            child = _run(launcher, config, item.label, events)
            result = _measure_what_if(
                item, child, baseline, plan.warmup, launcher, base_losses if baseline else None
            )
            results.append(result)
            if events is not None:
                line = (
                    f"{result.speedup:.2f}x items/s"
                    if result.speedup is not None
                    else result.reason or result.status
                )
                events.run_finished(item.label, line)
    except KeyboardInterrupt:
        interrupted = True  # keep the diagnosis and the what-ifs measured so far
    results = pair_variants(results)
    best, sentence = recommend(results) if runnable else (None, "")
    diagnosis = refute_by_what_ifs(diagnosis, results, sentence)
    return DoctorResult(
        script=str(plan.script),
        args=plan.args,
        profile=profile,
        telemetry=run.telemetry,
        diagnosis=diagnosis,
        what_ifs=tuple(results),
        best=best,
        recommendation=sentence,
        interrupted=interrupted,
        telemetry_steps_at_s=ctx.telemetry_steps_at_s,
    )
