"""``accelscope load``: validate, build the served configuration, run a scenario or the
capacity search, commit each trial to the store as it ends, and write the report.

The configuration comes from flags or from a stored bench run's selected best
(``--from-run``). Nothing touches the store or the report path before every input is checked;
each trial is its own committed document, so Ctrl-C leaves a consistent, ``interrupted`` run.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from accelscope.backends.registry import get_backend
from accelscope.commands._lifecycle import (
    CommandRun,
    check_paths,
)
from accelscope.commands.load.html import render_load_report
from accelscope.documents import CurvePoint, LoadCapacity, SearchedPolicy
from accelscope.engine.energy import energy_meter_for
from accelscope.errors import BadInputError, MeasurementError
from accelscope.hardware.energy import EnergyMeter
from accelscope.hardware.fingerprint import Environment, collect_environment
from accelscope.hardware.gpu import check_device
from accelscope.load.batcher import BatchPolicy
from accelscope.load.capacity_search import (
    CapacitySearch,
    PolicyCapacity,
    policy_grid,
    search_capacity,
)
from accelscope.load.executor import ThreadedExecutor
from accelscope.load.floor import HarnessFloor, measure_harness_floor
from accelscope.load.model_sut import ModelSUT
from accelscope.load.scenarios import run_offline, run_server, run_single_stream
from accelscope.load.summary import Scenario, TrialSettings, TrialSummary
from accelscope.measurement.threads import available_cores, pinned_threads
from accelscope.models.loading import load_model
from accelscope.serialise import dump
from accelscope.spec import Device, Precision, RunSpec, TensorSpec
from accelscope.store.sqlite import DEFAULT_STORE_PATH, ResultStore, check_store_path
from accelscope.sweep.select import select

__all__ = [
    "LoadOutcome",
    "LoadRequest",
    "capacity_document",
    "floor_notes",
    "load",
    "resolve_from_run",
    "summary_document",
]

TRIAL_DOCUMENT = "load-trial"
CAPACITY_DOCUMENT = "capacity"
SUMMARY_DOCUMENT = "load-summary"
_PROBE_QUERIES_PER_BATCH = 24
_FLOOR_SHARE = 0.1
"""A note when the harness floor's p50 is above this share of a trial's p50 compute time."""


@dataclass(frozen=True, kw_only=True)
class LoadRequest:
    """What ``accelscope load`` should run. ``max_batch`` is the batcher's maximum;
    ``search=None`` means: search for a server run with an SLA and no ``rate``. ``device``,
    ``device_index`` (the CUDA ordinal) and ``tf32`` left ``None`` mean: the ``--from-run``
    configuration's, else the CPU, ordinal 0 and IEEE fp32."""

    model: str | None
    scenario: Scenario = Scenario.SERVER
    sla_p99_s: float | None = None
    backend: str | None = None
    precision: Precision | None = None
    max_batch: int | None = None
    threads: int | None = None
    device: Device | None = None
    device_index: int | None = None
    tf32: bool | None = None
    options: tuple[tuple[str, str], ...] | None = None
    from_run: str | None = None
    rate_per_s: float | None = None
    search: bool | None = None
    batching: bool = True
    max_delay_s: float | None = None
    min_duration_s: float = 10.0
    min_queries: int = 1000
    seed: int = 0
    burstiness_cv: float = 1.0
    query_timeout_s: float | None = None
    max_lag_p99_s: float | None = None
    inputs: tuple[TensorSpec, ...] | None = None
    weights: Path | None = None
    trust_model_code: bool = False
    report_path: Path | None = None

    def settings(self) -> dict[str, Any]:
        """What the run's verdict depends on, stored with the run."""
        return {
            "scenario": self.scenario.value,
            "sla_p99_s": self.sla_p99_s,
            "rate_per_s": self.rate_per_s,
            "batching": self.batching,
            "min_duration_s": self.min_duration_s,
            "min_queries": self.min_queries,
            "seed": self.seed,
            "burstiness_cv": self.burstiness_cv,
            "from_run": self.from_run,
        }


@dataclass(kw_only=True)
class LoadOutcome:
    """Everything ``load`` measured and where it went."""

    model: str
    spec: RunSpec
    scenario: Scenario
    trials: list[TrialSummary]
    search: CapacitySearch | None
    capacity: dict[str, Any] | None
    run_id: str | None
    store_path: Path | None
    report_path: Path | None
    prepare_s: float
    padded_items: int
    served_items: int
    notes: list[str] = field(default_factory=list)
    harness_floor: HarnessFloor | None = None


class LoadEvents:
    """Progress callbacks (the CLI prints them); the default does nothing."""

    def preparing(self, spec: RunSpec, buckets: tuple[int, ...]) -> None:
        """Preparation (compile, quantize) of the served configuration starts."""

    def floor(self, floor: HarnessFloor) -> None:
        """The harness floor was measured (before the first trial)."""

    def trial(self, summary: TrialSummary) -> None:
        """A trial ended."""

    def policy(self, found: PolicyCapacity) -> None:
        """The rate search for one batcher policy ended."""


def _validate(request: LoadRequest) -> None:
    if request.model is None and request.from_run is None:
        raise BadInputError("give a MODEL or --from-run BENCH_RUN_ID")
    if request.min_queries <= 0:
        raise BadInputError(f"min queries must be a positive integer, got {request.min_queries}")
    if not math.isfinite(request.min_duration_s) or request.min_duration_s < 0:
        raise BadInputError("min duration must be a duration >= 0")
    if not math.isfinite(request.burstiness_cv) or request.burstiness_cv <= 0:
        raise BadInputError(f"burstiness CV must be positive, got {request.burstiness_cv}")
    if request.max_batch is not None and request.max_batch <= 0:
        raise BadInputError(f"max batch must be a positive integer, got {request.max_batch}")
    if request.threads is not None and request.threads <= 0:
        raise BadInputError(f"threads must be a positive integer, got {request.threads}")
    rate = request.rate_per_s
    if rate is not None and (not math.isfinite(rate) or rate <= 0):
        raise BadInputError(f"--rate must be a positive number of queries/s, got {rate:g}")
    sla = request.sla_p99_s
    if sla is not None and (not math.isfinite(sla) or sla <= 0):
        raise BadInputError("the p99 SLA must be a positive duration")
    if request.search and rate is not None:
        raise BadInputError("give either --rate (one rate) or --search, not both")
    if request.search and sla is None:
        raise BadInputError("--search needs --sla-p99 (the bound the capacity must meet)")
    if request.scenario is not Scenario.SERVER:
        if rate is not None or request.search:
            raise BadInputError(
                f"--rate and --search apply to the server scenario, not {request.scenario.value}"
            )
    elif rate is None and sla is None:
        raise BadInputError("the server scenario needs --rate QPS, or --sla-p99 to search")
    timeout = request.query_timeout_s
    if timeout is not None and sla is not None and timeout < sla:
        raise BadInputError("--query-timeout must be at least the p99 SLA")


def resolve_from_run(store_path: Path | None, run_id: str) -> tuple[str, RunSpec]:
    """The model and the selected best configuration of a stored bench run (``latest``: the
    most recent bench run)."""
    path = store_path or DEFAULT_STORE_PATH
    if not path.exists():
        raise BadInputError(f"--from-run: no results store at {path}")
    check_store_path(path)
    with ResultStore(path) as store:
        if run_id == "latest":  # the latest *bench* run, whatever ran after it
            bench_runs = [r for r in store.list_runs(1000) if r.kind == "bench"]
            if not bench_runs:
                raise BadInputError(f"--from-run latest: no bench run in {path}")
            run_id = bench_runs[0].id
        run = store.get_run(run_id)
    if run.kind != "bench":
        raise BadInputError(f"--from-run: run {run.id} is a {run.kind} run, not a bench run")
    here = [r for r in run.results if not r.spec.node_type]
    if not here and run.results:
        raise BadInputError(
            f"--from-run: bench run {run.id} measured on cluster node types, not on this "
            "machine; load serves here, so give the configuration (--backend, --precision, ...)"
        )
    sla = run.settings.get("sla_p99_s")
    chosen = select(here, float(sla) if sla is not None else None)
    best = next((r for r in here if r.spec.key == chosen.best_key), None)
    if best is None:
        raise BadInputError(f"--from-run: bench run {run.id} selected no configuration")
    return run.model, best.spec


def _served_spec(request: LoadRequest, store_path: Path | None) -> tuple[str, RunSpec]:
    if request.from_run is not None:
        model_ref, spec = resolve_from_run(store_path, request.from_run)
        if request.model is not None and request.model != model_ref:
            raise BadInputError(
                f"--from-run: bench run measured {model_ref!r}, not {request.model!r}"
            )
        overrides: dict[str, Any] = {}
        if request.backend is not None:
            overrides["backend"] = request.backend
        if request.precision is not None:
            overrides["precision"] = request.precision
        if request.threads is not None:
            overrides["threads"] = request.threads
        if request.options is not None:
            overrides["options"] = request.options
        if request.max_batch is not None:
            overrides["batch_size"] = request.max_batch
        if request.device is not None:
            overrides["device"] = request.device
            overrides["device_index"] = request.device_index or 0
        if request.tf32 is not None:
            overrides["tf32"] = request.tf32
        return model_ref, replace(spec, **overrides)
    assert request.model is not None
    return request.model, RunSpec(
        model=request.model,
        backend=(request.backend or "eager").strip().lower(),
        precision=request.precision or Precision.FP32,
        batch_size=request.max_batch or 8,
        threads=request.threads or available_cores(),
        device=request.device or Device.CPU,
        options=request.options or (),
        device_index=request.device_index or 0,
        tf32=bool(request.tf32),
    )


def _trial_settings(request: LoadRequest) -> TrialSettings:
    sla = request.sla_p99_s
    timeout = request.query_timeout_s or max(10.0, 10.0 * (sla or 0.0))
    lag = request.max_lag_p99_s or (0.05 * sla if sla is not None else 0.005)
    return TrialSettings(
        min_duration_s=request.min_duration_s,
        min_queries=request.min_queries,
        seed=request.seed,
        burstiness_cv=request.burstiness_cv,
        query_timeout_s=timeout,
        stall_limit_s=3.0 * timeout,
        max_lag_p99_s=max(lag, 0.001),
    )


def capacity_document(
    model: str,
    spec: RunSpec,
    sla_p99_s: float,
    env: Environment,
    trials: list[TrialSummary],
    search: CapacitySearch | None,
    harness_floor: HarnessFloor | None = None,
) -> dict[str, Any]:
    """The ``capacity`` document (the plan command's contract), with the curve and the harness
    floor as extras (``harness_floor`` is absent from documents stored before it existed)."""
    passing = [t for t in trials if t.meets_sla]
    best = max(passing, key=lambda t: t.offered_rate_per_s or 0.0) if passing else None
    policy = best.policy if best is not None else None
    served = replace(spec, batch_size=policy.max_batch) if policy is not None else spec
    return LoadCapacity(
        model=model,
        label=served.label(),
        spec=served.to_dict(),
        scenario=Scenario.SERVER.value,
        sla_p99_s=sla_p99_s,
        capacity_qps=float(best.offered_rate_per_s or 0.0) if best is not None else 0.0,
        batching=dump(policy) if policy is not None and policy.batching else None,
        environment_fingerprint=env.fingerprint(),
        device=spec.device,
        valid=best is not None and best.valid,
        capacity_trial=best.to_dict() if best is not None else None,
        policies=tuple(
            SearchedPolicy(
                batching=dump(p.policy),
                capacity_qps=p.capacity_qps,
                ceiling_qps=p.ceiling_qps,
                trials=len(p.trials),
                note=p.note,
            )
            for p in (search.policies if search is not None else ())
        ),
        curve=tuple(
            CurvePoint(
                offered_rate_per_s=t.offered_rate_per_s,
                batching=dump(t.policy),
                p50_s=t.latency.p50_s,
                p90_s=t.latency.p90_s,
                p99_s=t.latency.p99_s,
                meets_sla=t.meets_sla,
                valid=t.valid,
            )
            for t in trials
            if t.offered_rate_per_s is not None
        ),
        harness_floor=dump(harness_floor) if harness_floor is not None else None,
    ).model_dump(mode="json")


def summary_document(
    scenario: Scenario, spec: RunSpec, harness_floor: HarnessFloor | None
) -> dict[str, Any]:
    """The ``load-summary`` document: what every load run stores once, whatever its scenario
    (now the harness floor; runs stored before it have none)."""
    return {
        "scenario": scenario.value,
        "label": spec.label(),
        "harness_floor": dump(harness_floor) if harness_floor is not None else None,
    }


def floor_notes(floor: HarnessFloor | None, trials: list[TrialSummary]) -> list[str]:
    """A note when a trial's service (compute) time is within 10x of the harness floor."""
    if floor is None:
        return []
    served = [t.compute.p50_s for t in trials if t.completed > 0]
    if not served or floor.latency.p50_s <= _FLOOR_SHARE * min(served):
        return []
    return [
        f"the harness floor (p50 {floor.latency.p50_s * 1e3:.3f} ms per query) is more than "
        f"{_FLOOR_SHARE:.0%} of the fastest trial's p50 service time ({min(served) * 1e3:.3f} ms): "
        "its latencies include a visible share of the load generator's own cost"
    ]


def _run_scenario(
    request: LoadRequest,
    sut: ModelSUT,
    executor: ThreadedExecutor,
    settings: TrialSettings,
    record: Callable[[TrialSummary], None],
    events: LoadEvents,
    energy: EnergyMeter | None = None,
) -> CapacitySearch | None:
    max_batch = sut.max_batch if request.batching else 1
    sla = request.sla_p99_s
    delay = (
        request.max_delay_s
        if request.max_delay_s is not None
        else (0.1 * sla if sla is not None else 0.005)
    )
    policy = BatchPolicy(max_batch, delay if max_batch > 1 else 0.0)
    if request.scenario is Scenario.SINGLE_STREAM:
        record(run_single_stream(executor, settings, energy=energy))
        return None
    if request.scenario is Scenario.OFFLINE:
        record(run_offline(executor, policy, settings, energy=energy))
        return None
    if request.rate_per_s is not None:
        record(run_server(executor, request.rate_per_s, policy, settings, sla, energy=energy))
        return None
    assert sla is not None

    def trial(rate: float, trial_policy: BatchPolicy) -> TrialSummary:
        summary = run_server(
            executor, rate, trial_policy, settings, sla, stop_when_failed=True, energy=energy
        )
        record(summary)
        return summary

    def throughput(probe_policy: BatchPolicy) -> float:
        count = max(64, _PROBE_QUERIES_PER_BATCH * probe_policy.max_batch)
        probe = replace(settings, min_queries=count, min_duration_s=0.0)
        summary = run_offline(executor, probe_policy, probe)
        if summary.errors or summary.stopped_reason:
            reason = summary.error_messages[0] if summary.error_messages else summary.stopped_reason
            raise MeasurementError(
                f"{spec_label} failed its offline probe ({summary.errors} of {summary.issued} "
                f"queries failed): {reason}"
            )
        return summary.throughput_per_s

    spec_label = sut.spec.label()
    grid = policy_grid(max_batch, sla, batching=request.batching)
    if request.max_delay_s is not None:
        grid = replace(grid, max_delays_s=(request.max_delay_s,))
    return search_capacity(trial, throughput, grid, on_policy=events.policy)


def load(
    request: LoadRequest,
    *,
    store_path: Path | None = DEFAULT_STORE_PATH,
    events: LoadEvents | None = None,
    environment: Environment | None = None,
    command_line: str | None = None,
) -> LoadOutcome:
    """Run ``request``; returns its trials, capacity document and where things went."""
    events = events or LoadEvents()
    _validate(request)
    check_paths(store_path, request.report_path)
    model_ref, spec = _served_spec(request, store_path)
    backend = get_backend(spec.backend)
    env = environment or collect_environment()
    check_device(spec.device_ref, env.gpus)
    model = load_model(
        model_ref,
        inputs=request.inputs,
        weights=request.weights,
        trust_model_code=request.trust_model_code,
    )
    spec = replace(spec, model_digest=model.digest)
    backend.supports(model, spec, env).require(f"{spec.label()} for {model.ref}")
    settings = _trial_settings(request)
    sut = ModelSUT(
        model,
        spec,
        backend,
        max_batch=spec.batch_size if request.batching else 1,
        pool_size=settings.pool_size,
        seed=request.seed,
    )
    run_settings = {**request.settings(), "spec": spec.to_dict()}
    run = CommandRun(
        "load",
        model.ref,
        env,
        run_settings,
        store_path=store_path,
        command_line=command_line,
        kept="trials so far",
    )
    trials: list[TrialSummary] = []
    floor: HarnessFloor | None = None

    def record(summary: TrialSummary) -> None:
        if not trials:  # with the first trial, so a run that measures nothing stores nothing
            run.add_document(SUMMARY_DOCUMENT, summary_document(request.scenario, spec, floor))
        trials.append(summary)
        run.add_document(TRIAL_DOCUMENT, summary.to_dict())
        events.trial(summary)

    search: CapacitySearch | None = None
    capacity: dict[str, Any] | None = None
    with run:
        with pinned_threads(spec.threads):
            events.preparing(spec, sut.buckets)
            executor = ThreadedExecutor([sut], thread_setup=sut.thread_setup)  # prepares
            energy = energy_meter_for(spec, env)  # each trial's joules per query
            try:
                floor = measure_harness_floor(executor.instances, seed=request.seed)
                events.floor(floor)
                search = _run_scenario(request, sut, executor, settings, record, events, energy)
            finally:
                executor.close()
                sut.close()
                energy.close()
        if request.scenario is Scenario.SERVER and request.sla_p99_s is not None:
            capacity = capacity_document(
                model.ref, spec, request.sla_p99_s, env, trials, search, floor
            )
            run.add_document(CAPACITY_DOCUMENT, capacity)
    outcome = LoadOutcome(
        model=model.ref,
        spec=spec,
        scenario=request.scenario,
        trials=trials,
        search=search,
        capacity=capacity,
        run_id=run.run_id,
        store_path=run.stored_path,
        report_path=None,
        prepare_s=sut.prepare_s,
        padded_items=sut.padded_items,
        served_items=sut.served_items,
        harness_floor=floor,
    )
    if search is not None:
        outcome.notes.extend(search.notes)
        outcome.notes.extend(f"{p.policy.label()}: {p.note}" for p in search.policies if p.note)
    outcome.notes.extend(floor_notes(floor, trials))
    if sut.padded_items and sut.served_items:
        share = sut.padded_items / (sut.padded_items + sut.served_items)
        outcome.notes.append(
            f"fixed-batch runtime: batches were padded to prepared sizes {sut.buckets}; "
            f"{share:.0%} of computed rows were padding"
        )
    outcome.report_path = _write_report(request, outcome, run)
    return outcome


def _write_report(request: LoadRequest, outcome: LoadOutcome, run: CommandRun) -> Path:
    html = render_load_report(
        title=f"accelscope load: {outcome.model}",
        model=outcome.model,
        label=outcome.spec.label(),
        scenario=outcome.scenario.value,
        sla_p99_s=request.sla_p99_s,
        trials=[t.to_dict() for t in outcome.trials],
        capacity=outcome.capacity,
        notes=outcome.notes,
        harness_floor=dump(outcome.harness_floor) if outcome.harness_floor else None,
    )
    return run.write_report(html, request.report_path)
