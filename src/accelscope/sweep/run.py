"""The sweep: pre-screen the space, measure each configuration in isolation, guard accuracy,
commit each result the moment it exists, and select the winners.

Strategies: ``grid`` measures every runnable configuration once with the full timer budget;
``fast`` screens every configuration with a short budget (0.5 s, the first call as its only
warm-up), then re-measures with the full
budget only the contenders the screening could not rule out: accepted configurations within the
SLA whose throughput is within 15 % of the leader's (at most a third of them, at least one) —
racing, with the margin set by the machine's measured run-to-run spread.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

from accelscope.engine.accuracy_check import (
    build_accuracy_check,
    save_accuracy_check,
    with_reference,
)
from accelscope.hardware.fingerprint import Environment
from accelscope.measure.timer import TimerConfig
from accelscope.models.base import LoadedModel
from accelscope.result import Result, Status
from accelscope.spec import RunSpec, TensorSpec
from accelscope.sweep.executor import Executor
from accelscope.sweep.guard import AccuracyRule, apply_guard
from accelscope.sweep.select import Selection, select
from accelscope.sweep.space import Candidate, SweepSpace, expand
from accelscope.sweep.worker import WorkerTask

__all__ = ["STRATEGIES", "SweepEvents", "SweepOutcome", "SweepPlan", "latest_by_key", "run_sweep"]

STRATEGIES = ("grid", "fast")
BUDGET_REASON = "sweep budget ended before this configuration ran"


@dataclass(frozen=True)
class SweepPlan:
    """How to sweep: the space, the guard, the SLA, the strategy and the budgets."""

    space: SweepSpace
    rule: AccuracyRule = field(default_factory=AccuracyRule)
    sla_p99_s: float | None = None
    strategy: str = "grid"
    timer: TimerConfig = field(default_factory=TimerConfig)
    screen_timer: TimerConfig = field(
        default_factory=lambda: TimerConfig(
            budget_s=0.5, min_samples=3, warmup_iters=0, warmup_min_s=0.0
        )
    )
    total_budget_s: float = 900.0
    accuracy_samples: int = 256
    inputs: tuple[TensorSpec, ...] | None = None
    weights: str | None = None
    trust_model_code: bool = False
    plugins: tuple[str, ...] = ()
    seed: int = 0
    eval_data: str | None = None
    metric: str = "top1_accuracy"


class SweepEvents(Protocol):
    """What a sweep tells its caller as it goes (the CLI draws progress from these)."""

    def started(self, spec: RunSpec, stage: str) -> None:
        """A configuration starts (``stage``: "measure", "screen" or "final")."""

    def progress(self, phase: str, count: int, elapsed_s: float, budget_s: float) -> None:
        """Timer progress inside the running configuration."""

    def finished(self, result: Result) -> None:
        """A configuration's result (any status) has been committed."""


@dataclass(frozen=True)
class SweepOutcome:
    """Final results (one per configuration, latest measurement wins) and the selection."""

    results: tuple[Result, ...]
    selection: Selection
    measurement_time_s: float
    wall_time_s: float


def latest_by_key(results: Sequence[Result]) -> list[Result]:
    """One result per configuration: the last one recorded, in first-seen order."""
    latest: dict[str, Result] = {}
    for result in results:
        latest[result.spec.key] = result
    return list(latest.values())


def _measurement_time_s(result: Result) -> float:
    m = result.measurement
    return 0.0 if m is None else sum(m.samples_s) + sum(m.warmup_samples_s) + m.first_call_s


def _skipped(spec: RunSpec, env: Environment, reason: str) -> Result:
    return Result(spec=spec, environment=env, status=Status.SKIPPED, status_reason=reason)


def _is_oom(result: Result) -> bool:
    return result.status is Status.FAILED and "out of memory" in result.status_reason.lower()


def _group(spec: RunSpec) -> tuple[str, str, int, tuple[tuple[str, str], ...]]:
    return (spec.backend, spec.precision.value, spec.threads, spec.options)


@dataclass
class _Sweep:
    plan: SweepPlan
    model: LoadedModel
    env: Environment
    executor: Executor
    sink: Callable[[Result], None]
    events: SweepEvents | None
    accuracy_path: Path | None
    deadline: float
    recorded: list[Result] = field(default_factory=list)
    oom_groups: dict[tuple[str, str, int, tuple[tuple[str, str], ...]], int] = field(
        default_factory=dict
    )

    def record(self, result: Result) -> Result:
        self.sink(result)
        self.recorded.append(result)
        if self.events is not None:
            self.events.finished(result)
        return result

    def measure(self, spec: RunSpec, timer: TimerConfig, stage: str) -> Result:
        group = _group(spec)
        if group in self.oom_groups and spec.batch_size > self.oom_groups[group]:
            reason = f"skipped: batch {self.oom_groups[group]} already ran out of memory"
            return self.record(_skipped(spec, self.env, reason))
        if time.monotonic() >= self.deadline:
            return self.record(_skipped(spec, self.env, BUDGET_REASON))
        if self.events is not None:
            self.events.started(spec, stage)
        task = WorkerTask(
            spec=spec,
            model_ref=self.model.ref,
            environment=self.env,
            timer=timer,
            inputs=self.plan.inputs,
            weights=self.plan.weights,
            trust_model_code=self.plan.trust_model_code,
            accuracy_path=str(self.accuracy_path) if self.accuracy_path else None,
            plugins=self.plan.plugins,
            seed=self.plan.seed,
            eval_data=self.plan.eval_data,
            metric=self.plan.metric,
        )
        on_progress = self.events.progress if self.events is not None else None
        outcome = self.executor.run(task, on_progress)
        if outcome.result is None:
            result = Result(
                spec=spec, environment=self.env, status=Status.FAILED, status_reason=outcome.failure
            )
        else:
            result = apply_guard(outcome.result, self.plan.rule)
            if stage == "screen":
                note = f"screening measurement ({timer.budget_s:g} s budget); not a contender"
                result = replace(result, warnings=(*result.warnings, note))
        if _is_oom(result):
            self.oom_groups[group] = min(
                self.oom_groups.get(group, spec.batch_size), spec.batch_size
            )
        return self.record(result)


SCREEN_MARGIN = 0.15
"""A screened configuration is a contender while it is within this fraction of the leader's
throughput: the run-to-run spread measured on a shared 2-vCPU machine (docs/BENCHMARKS.md)."""


def _contenders(results: Sequence[Result], sla_p99_s: float | None) -> list[Result]:
    """Accepted configurations within the SLA that the screening could not rule out: within
    ``SCREEN_MARGIN`` of the fastest, at most a third of them, at least the fastest."""
    accepted = [
        r
        for r in results
        if r.status is Status.OK
        and r.measurement is not None
        and (sla_p99_s is None or r.measurement.summary.p99_s <= sla_p99_s)
    ]
    accepted.sort(key=lambda r: -r.measurement.throughput_items_per_s if r.measurement else 0.0)
    if not accepted or accepted[0].measurement is None:
        return []
    floor = accepted[0].measurement.throughput_items_per_s * (1 - SCREEN_MARGIN)
    close = [r for r in accepted if r.measurement and r.measurement.throughput_items_per_s >= floor]
    return close[: max(1, math.ceil(len(accepted) / 3))]


def run_sweep(
    plan: SweepPlan,
    model: LoadedModel,
    env: Environment,
    executor: Executor,
    *,
    sink: Callable[[Result], None],
    workdir: Path,
    prior: Sequence[Result] = (),
    events: SweepEvents | None = None,
) -> SweepOutcome:
    """Run the sweep; ``sink`` commits each result as it exists; ``prior`` results (``--resume``)
    are kept and their configurations are not measured again."""
    began = time.monotonic()
    candidates = expand(plan.space, model, env)
    done = {
        r.spec.key
        for r in prior
        if not (r.status is Status.SKIPPED and r.status_reason == BUDGET_REASON)
    }
    runnable = [c for c in candidates if c.runnable and c.spec.key not in done]
    accuracy_path = None
    if runnable:
        reference_base = runnable[0].spec
        check = build_accuracy_check(model, plan.accuracy_samples, plan.seed)
        check = with_reference(check, model, reference_base, env)
        accuracy_path = save_accuracy_check(check, workdir / "accuracy.pt")
    sweep = _Sweep(
        plan=plan,
        model=model,
        env=env,
        executor=executor,
        sink=sink,
        events=events,
        accuracy_path=accuracy_path,
        deadline=began + plan.total_budget_s,
    )
    _record_skips(sweep, candidates, done)
    if plan.strategy == "fast":
        screened = [sweep.measure(c.spec, plan.screen_timer, "screen") for c in runnable]
        for contender in _contenders([*prior, *screened], plan.sla_p99_s):
            if contender.spec.key in {c.spec.key for c in runnable}:
                sweep.measure(contender.spec, plan.timer, "final")
    else:
        for candidate in runnable:
            sweep.measure(candidate.spec, plan.timer, "measure")
    final = latest_by_key([*prior, *sweep.recorded])
    return SweepOutcome(
        results=tuple(final),
        selection=select(final, plan.sla_p99_s),
        measurement_time_s=sum(_measurement_time_s(r) for r in sweep.recorded),
        wall_time_s=time.monotonic() - began,
    )


def _record_skips(sweep: _Sweep, candidates: Sequence[Candidate], done: set[str]) -> None:
    for candidate in candidates:
        if not candidate.runnable and candidate.spec.key not in done:
            sweep.record(_skipped(candidate.spec, sweep.env, candidate.skip_reason))
