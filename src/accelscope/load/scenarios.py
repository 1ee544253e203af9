"""The three LoadGen scenarios on one executor: single-stream, offline and server.

Each builds its query source (seeded), runs one trial through the shared loop and summarises
it. The executor (real threads or simulation) and its system under test are the caller's; so
is the optional energy meter, read around the trial (joules per completed query).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

from accelscope.hardware.energy import EnergyFigure, EnergyMeter
from accelscope.load.batcher import NO_BATCHING, BatchPolicy
from accelscope.load.executor import QueryExecutor
from accelscope.load.schedule import arrival_offsets_s, sample_indices
from accelscope.load.sources import ClosedLoop, OpenSchedule
from accelscope.load.summary import Scenario, TrialSettings, TrialSummary, summarise_trial
from accelscope.load.trial import TrialLimits, TrialRecord, run_trial

__all__ = ["run_offline", "run_server", "run_single_stream"]


def _limits(settings: TrialSettings, sla_s: float | None, stop_when_failed: bool) -> TrialLimits:
    return TrialLimits(
        query_timeout_s=settings.query_timeout_s,
        stall_limit_s=settings.stall_limit_s,
        sla_s=sla_s,
        stop_when_failed=stop_when_failed,
        percentile=settings.percentile,
        confidence=settings.confidence,
    )


def _metered(
    energy: EnergyMeter | None, trial: Callable[[], TrialRecord]
) -> tuple[TrialRecord, EnergyFigure | None]:
    """Run ``trial`` inside an energy window (none without a meter)."""
    if energy is None:
        return trial(), None
    energy.begin()
    record = trial()
    return record, energy.end()


def run_single_stream(
    executor: QueryExecutor, settings: TrialSettings, *, energy: EnergyMeter | None = None
) -> TrialSummary:
    """One query at a time, the next issued when the previous is done; p90 and p99 with their
    early-stopping estimates. No batching (a batch can only ever hold one query)."""
    source = ClosedLoop(
        settings.pool_size, settings.seed, settings.min_queries, settings.min_duration_s
    )
    record, figure = _metered(
        energy,
        lambda: run_trial(source, executor, NO_BATCHING, _limits(settings, None, False)),
    )
    return summarise_trial(record, Scenario.SINGLE_STREAM, NO_BATCHING, settings, energy=figure)


def run_offline(
    executor: QueryExecutor,
    policy: BatchPolicy,
    settings: TrialSettings,
    *,
    energy: EnergyMeter | None = None,
) -> TrialSummary:
    """Every query at time zero (``min_queries`` of them); throughput. The batcher launches
    full batches back to back."""
    count = settings.min_queries
    source = OpenSchedule([0.0] * count, sample_indices(count, settings.pool_size, settings.seed))
    offline_settings = replace(settings, query_timeout_s=math.inf)
    record, figure = _metered(
        energy,
        lambda: run_trial(source, executor, policy, _limits(offline_settings, None, False)),
    )
    return summarise_trial(record, Scenario.OFFLINE, policy, settings, energy=figure)


def run_server(
    executor: QueryExecutor,
    rate_per_s: float,
    policy: BatchPolicy,
    settings: TrialSettings,
    sla_p99_s: float | None = None,
    *,
    stop_when_failed: bool = False,
    energy: EnergyMeter | None = None,
) -> TrialSummary:
    """Seeded Poisson (or gamma, ``burstiness_cv``) arrivals at ``rate_per_s``, generated up
    front; latency from each scheduled arrival; p99 against ``sla_p99_s`` with LoadGen's
    early-stopping rule. ``stop_when_failed`` ends the trial once the bound is surely missed."""
    offsets = arrival_offsets_s(
        rate_per_s,
        min_queries=settings.min_queries,
        min_duration_s=settings.min_duration_s,
        seed=settings.seed,
        cv=settings.burstiness_cv,
    )
    samples = sample_indices(len(offsets), settings.pool_size, settings.seed)
    record, figure = _metered(
        energy,
        lambda: run_trial(
            OpenSchedule(offsets, samples),
            executor,
            policy,
            _limits(settings, sla_p99_s, stop_when_failed),
        ),
    )
    return summarise_trial(
        record,
        Scenario.SERVER,
        policy,
        settings,
        offered_rate_per_s=rate_per_s,
        sla_p99_s=sla_p99_s,
        energy=figure,
    )
