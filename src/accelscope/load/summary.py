"""A trial's figures: latency percentiles, queue vs compute time, generator lag, errors and
timeouts, and whether the run is valid (LoadGen's rules) and meets its latency bound."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from accelscope.hardware.energy import EnergyFigure
from accelscope.load.batcher import BatchPolicy
from accelscope.load.early_stopping import (
    EarlyStopping,
    percentile_estimate,
    server_early_stopping,
)
from accelscope.load.trial import QueryStatus, TrialRecord
from accelscope.measurement.stats import percentile
from accelscope.serialise import dump, load

__all__ = ["Distribution", "Scenario", "TrialSettings", "TrialSummary", "summarise_trial"]

_MAX_QUERY_SAMPLES = 400


class Scenario(StrEnum):
    """MLPerf LoadGen scenarios."""

    SINGLE_STREAM = "single-stream"
    OFFLINE = "offline"
    SERVER = "server"


@dataclass(frozen=True, kw_only=True)
class TrialSettings:
    """What makes a trial valid, and how it is generated (seconds, counts)."""

    min_duration_s: float = 10.0
    min_queries: int = 1000
    seed: int = 0
    burstiness_cv: float = 1.0
    query_timeout_s: float = 10.0
    stall_limit_s: float = 30.0
    max_lag_p99_s: float = 0.005
    percentile: float = 0.99
    confidence: float = 0.99
    pool_size: int = 64


@dataclass(frozen=True, kw_only=True)
class Distribution:
    """Summary of per-query durations (seconds); ``count == 0``: all fields zero."""

    count: int = 0
    mean_s: float = 0.0
    p50_s: float = 0.0
    p90_s: float = 0.0
    p99_s: float = 0.0
    max_s: float = 0.0

    @classmethod
    def of(cls, values: Sequence[float]) -> Distribution:
        """The distribution of ``values`` (any order)."""
        if not values:
            return cls()
        ordered = sorted(values)
        return cls(
            count=len(ordered),
            mean_s=math.fsum(ordered) / len(ordered),
            p50_s=percentile(ordered, 50),
            p90_s=percentile(ordered, 90),
            p99_s=percentile(ordered, 99),
            max_s=ordered[-1],
        )


@dataclass(frozen=True, kw_only=True)
class TrialSummary:
    """One trial's measured figures and verdict. Latencies run from each query's *scheduled*
    arrival; a timed-out query counts at its timeout (a lower bound, flagged)."""

    scenario: Scenario
    policy: BatchPolicy
    offered_rate_per_s: float | None
    sla_p99_s: float | None
    issued: int
    completed: int
    errors: int
    timeouts: int
    cancelled: int
    latency: Distribution
    queue: Distribution
    compute: Distribution
    lag: Distribution
    duration_s: float
    throughput_per_s: float
    mean_batch: float
    batches: int
    early_stopping: EarlyStopping | None
    p90_estimate_s: float | None
    p99_estimate_s: float | None
    invalid_reasons: tuple[str, ...]
    error_messages: tuple[str, ...] = ()
    stopped_reason: str = ""
    stalled_instances: int = 0
    p99_is_lower_bound: bool = False
    query_samples: dict[str, list[float]] = field(default_factory=dict)
    energy: EnergyFigure | None = None
    """Joules over the trial's window and per completed query, or "not measured: why"
    (``None``: trials stored before energy was measured)."""

    @property
    def valid(self) -> bool:
        """True when the run followed LoadGen's rules (duration, count, on-time issue)."""
        return not self.invalid_reasons

    @property
    def sla_failures(self) -> tuple[str, ...]:
        """Why this trial does not meet its p99 bound (empty when it does or has none)."""
        if self.sla_p99_s is None:
            return ()
        reasons = list(self.invalid_reasons)
        if self.errors:
            reasons.append(f"{self.errors} queries failed")
        if self.latency.p99_s > self.sla_p99_s:
            reasons.append(
                f"p99 {self.latency.p99_s * 1e3:.1f} ms over the {self.sla_p99_s * 1e3:g} ms bound"
            )
        if self.early_stopping is not None and not self.early_stopping.passes:
            es = self.early_stopping
            reasons.append(
                f"too few queries to claim p99: {es.queries} run, {es.required_queries} needed "
                f"with {es.overlatency} over the bound"
            )
        if self.stopped_reason and not reasons:
            reasons.append(self.stopped_reason)
        return tuple(reasons)

    @property
    def meets_sla(self) -> bool:
        """Valid, no errors, p99 within the bound, and enough queries to claim it."""
        return self.sla_p99_s is not None and not self.sla_failures and self.issued > 0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (the stored ``load-trial`` document)."""
        return {
            "scenario": self.scenario.value,
            "batching": dump(self.policy),
            "offered_rate_per_s": self.offered_rate_per_s,
            "sla_p99_s": self.sla_p99_s,
            "issued": self.issued,
            "completed": self.completed,
            "errors": self.errors,
            "timeouts": self.timeouts,
            "cancelled": self.cancelled,
            "latency": dump(self.latency),
            "queue": dump(self.queue),
            "compute": dump(self.compute),
            "generator_lag": dump(self.lag),
            "duration_s": self.duration_s,
            "throughput_per_s": self.throughput_per_s,
            "mean_batch": self.mean_batch,
            "batches": self.batches,
            "early_stopping": None if self.early_stopping is None else dump(self.early_stopping),
            "p90_estimate_s": self.p90_estimate_s,
            "p99_estimate_s": self.p99_estimate_s,
            "invalid_reasons": list(self.invalid_reasons),
            "valid": self.valid,
            "meets_sla": self.meets_sla,
            "sla_failures": list(self.sla_failures),
            "error_messages": list(self.error_messages),
            "stopped_reason": self.stopped_reason,
            "stalled_instances": self.stalled_instances,
            "p99_is_lower_bound": self.p99_is_lower_bound,
            "query_samples": self.query_samples,
            "energy": None if self.energy is None else self.energy.model_dump(mode="json"),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrialSummary:
        """Inverse of :meth:`to_dict`."""
        es = data.get("early_stopping")
        return cls(
            scenario=Scenario(data["scenario"]),
            policy=load(BatchPolicy, data["batching"]),
            offered_rate_per_s=data["offered_rate_per_s"],
            sla_p99_s=data["sla_p99_s"],
            issued=int(data["issued"]),
            completed=int(data["completed"]),
            errors=int(data["errors"]),
            timeouts=int(data["timeouts"]),
            cancelled=int(data["cancelled"]),
            latency=load(Distribution, data["latency"]),
            queue=load(Distribution, data["queue"]),
            compute=load(Distribution, data["compute"]),
            lag=load(Distribution, data["generator_lag"]),
            duration_s=float(data["duration_s"]),
            throughput_per_s=float(data["throughput_per_s"]),
            mean_batch=float(data["mean_batch"]),
            batches=int(data["batches"]),
            early_stopping=None if es is None else load(EarlyStopping, es),
            p90_estimate_s=data["p90_estimate_s"],
            p99_estimate_s=data["p99_estimate_s"],
            invalid_reasons=tuple(data["invalid_reasons"]),
            error_messages=tuple(data.get("error_messages", ())),
            stopped_reason=data.get("stopped_reason", ""),
            stalled_instances=int(data.get("stalled_instances", 0)),
            p99_is_lower_bound=bool(data.get("p99_is_lower_bound", False)),
            query_samples=dict(data.get("query_samples", {})),
            energy=EnergyFigure.model_validate(data["energy"]) if data.get("energy") else None,
        )


def _duration_s(scenario: Scenario, record: TrialRecord) -> float:
    """LoadGen's duration: last scheduled arrival (server), last issue (single-stream), last
    completion (offline)."""
    if not record.scheduled_s:
        return 0.0
    if scenario is Scenario.SERVER:
        return record.scheduled_s[-1]
    if scenario is Scenario.SINGLE_STREAM:
        return record.issued_s[-1]
    finished = [t for t in record.finished_s if not math.isnan(t)]
    return max(finished) if finished else 0.0


def _query_samples(record: TrialRecord, ok: list[int]) -> dict[str, list[float]]:
    step = max(1, math.ceil(len(ok) / _MAX_QUERY_SAMPLES))
    chosen = ok[::step]
    return {
        "scheduled_s": [record.scheduled_s[i] for i in chosen],
        "queue_s": [record.started_s[i] - record.scheduled_s[i] for i in chosen],
        "compute_s": [record.finished_s[i] - record.started_s[i] for i in chosen],
    }


def _invalid_reasons(
    scenario: Scenario,
    record: TrialRecord,
    settings: TrialSettings,
    duration_s: float,
    lag: Distribution,
) -> list[str]:
    reasons: list[str] = []
    hopeless = record.stopped_reason.startswith("stopped early")
    if record.stopped_reason and not hopeless:
        reasons.append(record.stopped_reason)
    if not hopeless:
        if record.issued < settings.min_queries:
            reasons.append(
                f"{record.issued} queries, fewer than the minimum {settings.min_queries}"
            )
        if duration_s < settings.min_duration_s:
            reasons.append(
                f"ran {duration_s:.2f} s, shorter than the minimum {settings.min_duration_s:g} s"
            )
    if scenario is Scenario.SERVER and lag.p99_s > settings.max_lag_p99_s:
        reasons.append(
            f"the generator could not keep to the schedule (p99 issue lag "
            f"{lag.p99_s * 1e3:.2f} ms > {settings.max_lag_p99_s * 1e3:g} ms): the offered "
            "rate was not generated"
        )
    return reasons


def summarise_trial(
    record: TrialRecord,
    scenario: Scenario,
    policy: BatchPolicy,
    settings: TrialSettings,
    *,
    offered_rate_per_s: float | None = None,
    sla_p99_s: float | None = None,
    energy: EnergyFigure | None = None,
) -> TrialSummary:
    """The figures and verdict of ``record``; ``energy``: the trial window's, divided over its
    completed queries."""
    statuses = record.status
    ok = [i for i, s in enumerate(statuses) if s is QueryStatus.OK]
    timed_out = [i for i, s in enumerate(statuses) if s is QueryStatus.TIMEOUT]
    errors = sum(1 for s in statuses if s is QueryStatus.ERROR)
    cancelled = sum(1 for s in statuses if s is QueryStatus.CANCELLED)
    latencies = [record.finished_s[i] - record.scheduled_s[i] for i in ok + timed_out]
    latency = Distribution.of(latencies)
    ordered = sorted(latencies)
    lower_bound = bool(timed_out) and bool(ordered) and latency.p99_s >= settings.query_timeout_s
    queue = Distribution.of([record.started_s[i] - record.scheduled_s[i] for i in ok])
    compute = Distribution.of([record.finished_s[i] - record.started_s[i] for i in ok])
    lag = Distribution.of(
        [max(0.0, a - s) for a, s in zip(record.issued_s, record.scheduled_s, strict=True)]
    )
    duration = _duration_s(scenario, record)
    finished = [record.finished_s[i] for i in ok]
    span = max(finished) - min(record.scheduled_s) if finished else 0.0
    throughput = len(ok) / span if span > 0 else 0.0
    early = None
    if scenario is Scenario.SERVER and sla_p99_s is not None:
        over = sum(1 for v in latencies if v > sla_p99_s) + errors
        early = server_early_stopping(
            record.issued - cancelled, over, settings.percentile, settings.confidence
        )
    p90_estimate = p99_estimate = None
    if scenario is Scenario.SINGLE_STREAM and ordered:
        p90_estimate = percentile_estimate(ordered, 0.90, settings.confidence)
        p99_estimate = percentile_estimate(ordered, 0.99, settings.confidence)
    sizes = [record.batch_size[i] for i in ok]
    return TrialSummary(
        scenario=scenario,
        policy=policy,
        offered_rate_per_s=offered_rate_per_s,
        sla_p99_s=sla_p99_s,
        issued=record.issued,
        completed=len(ok),
        errors=errors,
        timeouts=len(timed_out),
        cancelled=cancelled,
        latency=latency,
        queue=queue,
        compute=compute,
        lag=lag,
        duration_s=duration,
        throughput_per_s=throughput,
        mean_batch=len(sizes) / math.fsum(1.0 / s for s in sizes) if sizes else 0.0,
        batches=record.batches,
        early_stopping=early,
        p90_estimate_s=p90_estimate,
        p99_estimate_s=p99_estimate,
        invalid_reasons=tuple(_invalid_reasons(scenario, record, settings, duration, lag)),
        error_messages=tuple(record.errors),
        stopped_reason=record.stopped_reason,
        stalled_instances=record.stalled_instances,
        p99_is_lower_bound=lower_bound,
        query_samples=_query_samples(record, ok),
        energy=None if energy is None else energy.for_items(len(ok)),
    )
