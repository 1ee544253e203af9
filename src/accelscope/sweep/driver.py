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
    AccuracyCheck,
    build_accuracy_check,
    reference_spec,
    save_accuracy_check,
    with_reference,
)
from accelscope.engine.probe import ProbeTable
from accelscope.errors import MeasurementError
from accelscope.hardware.fingerprint import Environment
from accelscope.measurement.timer import TimerConfig
from accelscope.models.base import LoadedModel
from accelscope.result import Cause, Result, Status
from accelscope.spec import Device, RunSpec, TensorSpec
from accelscope.sweep.confirm import Confirmation, confirmation_from_blocks, runner_up
from accelscope.sweep.executor import Executor, LocalExecutor, WorkerOutcome
from accelscope.sweep.guard import AccuracyRule, apply_guard
from accelscope.sweep.select import Selection, by_node_type, select, select_by_node_type
from accelscope.sweep.space import Candidate, SweepSpace, expand
from accelscope.sweep.worker import InterleaveTask, ReferenceTask, WorkerTask

__all__ = [
    "STRATEGIES",
    "NodeTarget",
    "ReferenceRunner",
    "SweepEvents",
    "SweepOutcome",
    "SweepPlan",
    "latest_by_key",
    "run_sweep",
]

ReferenceRunner = Callable[[ReferenceTask], WorkerOutcome]
"""Runs a :class:`ReferenceTask` in a worker process and returns its outcome."""

STRATEGIES = ("grid", "fast")
BUDGET_REASON = "sweep budget ended before this configuration ran"
NO_NODE_REASON = "no node of its type is alive to measure it"
_AGAIN = frozenset({Cause.BUDGET, Cause.NO_NODE, Cause.NODE_LOST})
"""Causes ``--resume`` measures again: the sweep's or the cluster's doing, not the
configuration's."""


@dataclass(frozen=True, kw_only=True)
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
    probes: ProbeTable | None = None
    """Measured precision probes for the pre-screen (``None``: the ISA rule decides)."""
    confirm_rounds: int = 6
    """Rounds of the interleaved re-measure of baseline, winner and close runner-up (0: off)."""
    confirm_block_s: float = 0.25
    nodes: tuple[NodeTarget, ...] = ()
    """Cluster node types to measure on, each pre-screened by its own environment and probes
    (empty: this machine)."""
    reference_timeout_s: float = 900.0
    """Bound on the fp32 reference's worker (GPU sweeps), seconds."""


@dataclass(frozen=True, kw_only=True)
class NodeTarget:
    """A cluster node type as the sweep sees it: its environment and precision probes
    (measured on one of its nodes), and its thread counts (empty: the plan's)."""

    node_type: str
    environment: Environment
    probes: ProbeTable | None = None
    threads: tuple[int, ...] = ()


class SweepEvents(Protocol):
    """What a sweep tells its caller as it goes (the CLI draws progress from these)."""

    def started(self, spec: RunSpec, stage: str) -> None:
        """A configuration starts (``stage``: "measure", "screen" or "final")."""

    def progress(self, phase: str, count: int, elapsed_s: float, budget_s: float) -> None:
        """Timer progress inside the running configuration."""

    def finished(self, result: Result) -> None:
        """A configuration's result (any status) has been committed."""

    def note(self, text: str) -> None:
        """A one-line notice about the sweep itself (probing, confirming)."""


@dataclass(frozen=True)
class SweepOutcome:
    """Final results (one per configuration, latest measurement wins) and the selection (one
    per node type in ``selections``; ``selection`` is the first, the only one locally)."""

    results: tuple[Result, ...]
    selection: Selection
    measurement_time_s: float
    wall_time_s: float
    selections: dict[str, Selection] = field(default_factory=dict)


def latest_by_key(results: Sequence[Result]) -> list[Result]:
    """One result per configuration: the last one recorded, in first-seen order."""
    latest: dict[str, Result] = {}
    for result in results:
        latest[result.spec.key] = result
    return list(latest.values())


def _measurement_time_s(result: Result) -> float:
    m = result.measurement
    return 0.0 if m is None else sum(m.samples_s) + sum(m.warmup_samples_s) + m.first_call_s


def _skipped(spec: RunSpec, env: Environment, cause: Cause, reason: str) -> Result:
    return Result(
        spec=spec, environment=env, status=Status.SKIPPED, status_reason=reason, cause=cause
    )


def _candidates(plan: SweepPlan, model: LoadedModel, env: Environment) -> list[Candidate]:
    """Every node type's candidates, each pre-screened by that node type's environment."""
    if not plan.nodes:
        return expand(plan.space, model, env, plan.probes)
    found: list[Candidate] = []
    for node in plan.nodes:
        space = replace(plan.space, threads=node.threads) if node.threads else plan.space
        for candidate in expand(space, model, node.environment, node.probes):
            spec = replace(candidate.spec, node_type=node.node_type)
            found.append(replace(candidate, spec=spec))
    return found


def _again(result: Result) -> bool:
    """True for a prior result that ``--resume`` measures again: skipped for lack of budget or
    of a live node, or lost with its cluster node."""
    return result.cause in _AGAIN


def _is_oom(result: Result) -> bool:
    return result.status is Status.FAILED and result.cause is Cause.OUT_OF_MEMORY


def _group(spec: RunSpec) -> tuple[str, str, str, int, tuple[tuple[str, str], ...]]:
    """Configurations that share a batch axis (an OOM at one batch ends the larger ones)."""
    return (spec.node_type, spec.backend, spec.precision.value, spec.threads, spec.options)


@dataclass(kw_only=True)
class _Sweep:
    plan: SweepPlan
    model: LoadedModel
    env: Environment
    executor: Executor
    sink: Callable[[Result], None]
    events: SweepEvents | None
    accuracy_path: Path | None
    deadline: float
    environments: dict[str, Environment] = field(default_factory=dict)
    recorded: list[Result] = field(default_factory=list)
    oom_groups: dict[tuple[str, str, str, int, tuple[tuple[str, str], ...]], int] = field(
        default_factory=dict
    )

    def env_for(self, spec: RunSpec) -> Environment:
        """The environment of the machine that measures ``spec`` (its node type's, or this
        machine's)."""
        return self.environments.get(spec.node_type, self.env)

    def record(self, result: Result) -> Result:
        self.sink(result)
        self.recorded.append(result)
        if self.events is not None:
            self.events.finished(result)
        return result

    def task(self, spec: RunSpec, timer: TimerConfig) -> WorkerTask:
        """The worker task measuring ``spec`` with this sweep's model and settings."""
        return WorkerTask(
            spec=spec,
            model_ref=self.model.ref,
            environment=self.env_for(spec),
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

    def start(self, spec: RunSpec, timer: TimerConfig, stage: str) -> int | None:
        """Submit ``spec`` (its ticket), or record why it is not measured (``None``)."""
        group = _group(spec)
        if group in self.oom_groups and spec.batch_size > self.oom_groups[group]:
            reason = f"skipped: batch {self.oom_groups[group]} already ran out of memory"
            self.record(_skipped(spec, self.env_for(spec), Cause.OUT_OF_MEMORY, reason))
            return None
        if time.monotonic() >= self.deadline:
            self.record(_skipped(spec, self.env_for(spec), Cause.BUDGET, BUDGET_REASON))
            return None
        if self.events is not None:
            self.events.started(spec, stage)
        on_progress = self.events.progress if self.events is not None else None
        return self.executor.submit(self.task(spec, timer), on_progress)

    def finish(
        self, spec: RunSpec, outcome: WorkerOutcome, timer: TimerConfig, stage: str
    ) -> Result:
        """Guard and record a finished configuration's outcome."""
        if outcome.result is None:
            result = Result(
                spec=spec,
                environment=self.env_for(spec),
                status=Status.FAILED,
                status_reason=outcome.failure,
                cause=outcome.cause or Cause.ERROR,
                node=outcome.node,
            )
        else:
            result = apply_guard(outcome.result, self.plan.rule)
            if outcome.node and not result.node:
                result = replace(result, node=outcome.node)
            if stage == "screen":
                note = f"screening measurement ({timer.budget_s:g} s budget); not a contender"
                result = replace(result, warnings=(*result.warnings, note))
        if _is_oom(result):
            group = _group(spec)
            self.oom_groups[group] = min(
                self.oom_groups.get(group, spec.batch_size), spec.batch_size
            )
        return self.record(result)

    def measure_all(self, specs: Sequence[RunSpec], timer: TimerConfig, stage: str) -> list[Result]:
        """Measure ``specs``: each submitted, in order, as soon as its node type has a free
        slot (one at a time locally; one per node on a cluster); results are recorded as they
        finish."""
        waiting = list(specs)
        in_flight: dict[int, RunSpec] = {}
        results: list[Result] = []
        while waiting or in_flight:
            for spec in list(waiting):
                if self.executor.idle_slots(spec.node_type) <= 0:
                    continue
                waiting.remove(spec)
                ticket = self.start(spec, timer, stage)
                if ticket is None:
                    results.append(self.recorded[-1])
                else:
                    in_flight[ticket] = spec
            if not in_flight:
                if waiting:  # no slot and nothing running: the executor has no node for them
                    for spec in waiting:
                        skip = _skipped(spec, self.env_for(spec), Cause.NO_NODE, NO_NODE_REASON)
                        results.append(self.record(skip))
                    waiting.clear()
                continue
            ticket, outcome = self.executor.next_finished()
            spec = in_flight.pop(ticket)
            results.append(self.finish(spec, outcome, timer, stage))
        return results


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
    reference_runner: ReferenceRunner | None = None,
) -> SweepOutcome:
    """Run the sweep; ``sink`` commits each result as it exists; ``prior`` results (``--resume``)
    are kept and their configurations are not measured again.

    The fp32 reference every configuration is compared with runs in this process on the CPU,
    and on a GPU in a worker process of its own on this machine (``reference_runner``; by
    default a :class:`LocalExecutor`'s), so this process never holds the device while the
    workers measure on it."""
    began = time.monotonic()
    candidates = _candidates(plan, model, env)
    done = {r.spec.key for r in prior if not _again(r)}
    runnable = [c for c in candidates if c.runnable and c.spec.key not in done]
    accuracy_path = None
    if runnable:
        reference_base = replace(runnable[0].spec, node_type="")
        here = any(gpu.index == reference_base.device_index for gpu in env.gpus)
        if reference_base.device is not Device.CPU and not here:
            # a cluster's GPU nodes, driven from a machine without that GPU: the fp32 reference
            # (what every configuration is compared with) is computed on this CPU
            reference_base = replace(reference_base, device=Device.CPU, device_index=0)
        check = build_accuracy_check(model, plan.accuracy_samples, plan.seed)
        if reference_base.device is Device.CPU:
            check = with_reference(check, model, reference_base, env)
            accuracy_path = save_accuracy_check(check, workdir / "accuracy.pt")
        else:
            runner = reference_runner or LocalExecutor(plan.reference_timeout_s).run
            accuracy_path = _reference_in_worker(
                plan, model, env, check, reference_base, workdir, runner, events
            )
    sweep = _Sweep(
        plan=plan,
        model=model,
        env=env,
        executor=executor,
        sink=sink,
        events=events,
        accuracy_path=accuracy_path,
        deadline=began + plan.total_budget_s,
        environments={n.node_type: n.environment for n in plan.nodes},
    )
    _record_skips(sweep, candidates, done)
    if plan.strategy == "fast":
        screened = sweep.measure_all([c.spec for c in runnable], plan.screen_timer, "screen")
        keys = {c.spec.key for c in runnable}
        finals = [
            contender.spec
            for group in by_node_type([*prior, *screened]).values()
            for contender in _contenders(group, plan.sla_p99_s)
            if contender.spec.key in keys
        ]
        sweep.measure_all(finals, plan.timer, "final")
    else:
        sweep.measure_all([c.spec for c in runnable], plan.timer, "measure")
    final = latest_by_key([*prior, *sweep.recorded])
    measured_here = {n.node_type for n in plan.nodes} or {""}
    confirmations = [
        found
        for node_type, group in by_node_type(final).items()
        if plan.confirm_rounds > 0
        and node_type in measured_here
        and (found := _confirm(sweep, group)) is not None
    ]
    selections = select_by_node_type(final, plan.sla_p99_s, confirmations)
    first = next(iter(selections.values()), None) or select(final, plan.sla_p99_s)
    return SweepOutcome(
        results=tuple(final),
        selection=first,
        measurement_time_s=sum(_measurement_time_s(r) for r in sweep.recorded),
        wall_time_s=time.monotonic() - began,
        selections=selections,
    )


def _reference_in_worker(
    plan: SweepPlan,
    model: LoadedModel,
    env: Environment,
    check: AccuracyCheck,
    base: RunSpec,
    workdir: Path,
    runner: ReferenceRunner,
    events: SweepEvents | None,
) -> Path:
    """The accuracy set with its reference outputs computed in a worker (see
    :class:`~accelscope.sweep.worker.ReferenceTask`); raises ``MeasurementError`` when the
    reference run fails, as it would here."""
    inputs_path = save_accuracy_check(check, workdir / "accuracy-inputs.pt")
    output_path = workdir / "accuracy.pt"
    spec = reference_spec(model, base)
    if events is not None:
        events.note(f"fp32 reference {spec.label()} in a worker process")
    task = ReferenceTask(
        task=WorkerTask(
            spec=spec,
            model_ref=model.ref,
            environment=env,
            timer=plan.timer,
            inputs=plan.inputs,
            weights=plan.weights,
            trust_model_code=plan.trust_model_code,
            accuracy_path=str(inputs_path),
            plugins=plan.plugins,
            seed=plan.seed,
            eval_data=plan.eval_data,
            metric=plan.metric,
        ),
        output_path=str(output_path),
    )
    outcome = runner(task)
    if outcome.reference_path is None:
        failure = outcome.failure or "the worker sent no reference outputs"
        prefix = "" if failure.startswith("reference run") else f"reference run {spec.label()}: "
        raise MeasurementError(f"{prefix}{failure}")
    return Path(outcome.reference_path)


def _confirm(sweep: _Sweep, final: Sequence[Result]) -> Confirmation | None:
    """Re-measure baseline, winner and a close runner-up alternately in one worker."""
    first = select(final, sweep.plan.sla_p99_s)
    if first.best_key is None:
        return None
    by_key = {r.spec.key: r for r in final}
    best = by_key[first.best_key]
    accepted = [
        r
        for r in final
        if r.status is Status.OK
        and r.measurement is not None
        and (sweep.plan.sla_p99_s is None or r.measurement.summary.p99_s <= sweep.plan.sla_p99_s)
    ]
    second = runner_up(accepted, best)
    baseline_key = first.baseline_key if first.baseline_key != best.spec.key else None
    keys = [k for k in (baseline_key, best.spec.key, second.spec.key if second else None) if k]
    if len(keys) < 2:
        return None
    if time.monotonic() >= sweep.deadline:
        return Confirmation(
            best_key=best.spec.key,
            baseline_key=first.baseline_key,
            error="the sweep budget ended before it",
        )
    specs = tuple(by_key[k].spec for k in keys)
    if sweep.events is not None:
        labels = ", ".join(spec.label() for spec in specs)
        sweep.events.note(
            f"confirming: {labels} alternately, {sweep.plan.confirm_rounds} rounds (A B B A)"
        )
    task = InterleaveTask(
        task=sweep.task(specs[0], sweep.plan.timer),
        specs=specs,
        rounds=sweep.plan.confirm_rounds,
        block_s=sweep.plan.confirm_block_s,
    )
    outcome = sweep.executor.run(task, sweep.events.progress if sweep.events else None)
    if outcome.interleaved is None:
        return Confirmation(
            best_key=best.spec.key,
            baseline_key=first.baseline_key,
            error=f"the re-measure failed ({outcome.failure or 'no timings'})",
        )
    timings = outcome.interleaved
    blocks = dict(zip(timings["keys"], timings["block_s_per_item"], strict=True))
    return confirmation_from_blocks(
        blocks,
        best_key=best.spec.key,
        baseline_key=baseline_key,
        runner_up_key=second.spec.key if second else None,
    )


def _record_skips(sweep: _Sweep, candidates: Sequence[Candidate], done: set[str]) -> None:
    for candidate in candidates:
        if not candidate.runnable and candidate.spec.key not in done:
            env = sweep.env_for(candidate.spec)
            sweep.record(_skipped(candidate.spec, env, Cause.PRESCREEN, candidate.skip_reason))
