"""The harness floor: what the load generator itself adds to every query's latency.

A short server trial against a system under test that does nothing (:class:`NullSUT`), on the
same real-time path as the measured trials (a :class:`ThreadedExecutor` with as many instances,
the same trial loop, waits and stamps), so each query's latency is the harness's own cost:
issuing on time, handing the batch to a server thread, stamping its start and end. Service
times well above this floor are measured faithfully; near it, the figures are the harness's.
Run at the start of each load run (under a second) and reported with it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Annotated

from pydantic import Field

from accelscope.load.batcher import NO_BATCHING
from accelscope.load.executor import ThreadedExecutor
from accelscope.load.fakes import NullSUT
from accelscope.load.scenarios import run_server
from accelscope.load.summary import Distribution, TrialSettings

__all__ = ["FLOOR_QUERIES", "FLOOR_RATE_PER_S", "HarnessFloor", "measure_harness_floor"]

FLOOR_QUERIES = 400
"""Queries in the floor trial."""
FLOOR_WARMUP_QUERIES = 40
"""Queries run first and not counted (first-call costs of a fresh executor)."""
FLOOR_RATE_PER_S = 500.0
"""Its Poisson arrival rate per instance: 2 ms apart on average, so a null query rarely waits
for another one and the trial takes about 0.8 s."""


@dataclass(frozen=True, kw_only=True)
class HarnessFloor:
    """Latency (scheduled arrival to done) and generator lag of the null trial. Stored as the
    ``harness_floor`` field of the load documents (:func:`accelscope.serialise.dump`)."""

    queries: int
    rate_per_s: float
    # The defaults of ``instances`` and ``duration_s`` read floors stored before they were.
    instances: int = 1
    latency: Distribution
    lag: Annotated[
        Distribution, Field(serialization_alias="generator_lag", validation_alias="generator_lag")
    ]
    duration_s: float = 0.0


def measure_harness_floor(
    instances: int = 1,
    *,
    queries: int = FLOOR_QUERIES,
    rate_per_s: float = FLOOR_RATE_PER_S,
    seed: int = 0,
) -> HarnessFloor:
    """Run the null trial on a fresh :class:`ThreadedExecutor` of ``instances`` null systems
    under test (``rate_per_s`` per instance, no batching) and return its figures."""
    settings = TrialSettings(
        min_duration_s=0.0,
        min_queries=queries,
        seed=seed,
        query_timeout_s=1.0,
        stall_limit_s=3.0,
        max_lag_p99_s=1.0,
    )
    executor = ThreadedExecutor([NullSUT() for _ in range(instances)])
    try:
        warm = replace(settings, min_queries=FLOOR_WARMUP_QUERIES)
        run_server(executor, rate_per_s * instances, NO_BATCHING, warm)  # first-call costs
        summary = run_server(executor, rate_per_s * instances, NO_BATCHING, settings)
    finally:
        executor.close()
    return HarnessFloor(
        queries=summary.issued,
        rate_per_s=rate_per_s * instances,
        instances=instances,
        latency=summary.latency,
        lag=summary.lag,
        duration_s=summary.duration_s,
    )
