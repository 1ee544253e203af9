"""The load generator against queueing theory, in simulated time (exact and fast).

The same trial loop, batcher and statistics that drive a real model run here on a simulated
clock, so these are checks of the product code, not of a separate simulator.

Covers: accelscope.load.trial, accelscope.load.batcher, accelscope.load.scenarios,
accelscope.load.summary, accelscope.load.sources.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from accelscope.load.batcher import NO_BATCHING, BatchPolicy
from accelscope.load.clock import SimClock
from accelscope.load.executor import SimulatedExecutor
from accelscope.load.fakes import (
    BatchLinearService,
    ExponentialService,
    FaultyService,
    FixedService,
)
from accelscope.load.scenarios import run_offline, run_server, run_single_stream
from accelscope.load.sources import OpenSchedule
from accelscope.load.summary import TrialSettings
from accelscope.load.trial import TrialLimits, run_trial

SERVICE_RATE_PER_S = 100.0
LONG = TrialSettings(
    min_queries=100_000, min_duration_s=1.0, seed=11, query_timeout_s=1e9, stall_limit_s=1e9
)


def _sim(service: object, instances: int = 1) -> SimulatedExecutor:
    return SimulatedExecutor(service, SimClock(), instances)  # type: ignore[arg-type]


def test_mm1_mean_latency_at_utilisation_half() -> None:
    """Poisson arrivals, exponential service, one server, rho = 0.5: W = 1 / (mu - lambda)."""
    rate = 0.5 * SERVICE_RATE_PER_S
    executor = _sim(ExponentialService(1.0 / SERVICE_RATE_PER_S, seed=5))
    summary = run_server(executor, rate, NO_BATCHING, LONG)
    expected_s = 1.0 / (SERVICE_RATE_PER_S - rate)
    assert summary.completed == summary.issued >= 100_000
    assert summary.latency.mean_s == pytest.approx(expected_s, rel=0.05)
    # waiting time alone: Wq = rho / (mu - lambda)
    assert summary.queue.mean_s == pytest.approx(0.5 / (SERVICE_RATE_PER_S - rate), rel=0.05)
    assert summary.lag.max_s == 0.0  # simulated issue is exactly on schedule
    assert summary.valid


def test_md1_mean_latency_at_utilisation_half() -> None:
    """Poisson arrivals, fixed service: W = 1/mu + rho / (2 mu (1 - rho))."""
    mu, rho = SERVICE_RATE_PER_S, 0.5
    executor = _sim(FixedService(1.0 / mu))
    summary = run_server(executor, rho * mu, NO_BATCHING, LONG)
    expected_s = 1.0 / mu + rho / (2.0 * mu * (1.0 - rho))
    assert summary.latency.mean_s == pytest.approx(expected_s, rel=0.05)
    assert summary.compute.mean_s == pytest.approx(1.0 / mu, rel=1e-9)


@pytest.mark.parametrize("rho", [0.3, 0.8])
def test_mm1_other_utilisations(rho: float) -> None:
    mu = SERVICE_RATE_PER_S
    settings = replace(LONG, min_queries=60_000)
    summary = run_server(
        _sim(ExponentialService(1.0 / mu, seed=2)), rho * mu, NO_BATCHING, settings
    )
    # heavier load correlates successive latencies: a looser bound at rho = 0.8
    assert summary.latency.mean_s == pytest.approx(
        1.0 / (mu - rho * mu), rel=0.05 if rho < 0.5 else 0.12
    )


def test_mm2_two_instances() -> None:
    """Two servers (M/M/2) at rho = 0.5 per server: W = 1/mu + C / (2 mu - lambda), where the
    Erlang-C probability of waiting is C = rho^2 ... = 1/3 for a = 1, c = 2."""
    mu = SERVICE_RATE_PER_S
    lam = mu  # offered load a = 1 Erlang on 2 servers
    settings = replace(LONG, min_queries=60_000)
    summary = run_server(
        _sim(ExponentialService(1.0 / mu, seed=3), instances=2), lam, NO_BATCHING, settings
    )
    erlang_c = 1.0 / 3.0
    expected_s = 1.0 / mu + erlang_c / (2 * mu - lam)
    assert summary.latency.mean_s == pytest.approx(expected_s, rel=0.05)


def test_burstier_arrivals_wait_longer() -> None:
    """Gamma gaps with CV 2 vs Poisson at the same rate: Kingman says waits grow with ca^2."""
    mu = SERVICE_RATE_PER_S
    base = replace(LONG, min_queries=40_000)
    bursty = replace(base, burstiness_cv=2.0)
    poisson = run_server(_sim(FixedService(1 / mu)), 0.5 * mu, NO_BATCHING, base)
    burst = run_server(_sim(FixedService(1 / mu)), 0.5 * mu, NO_BATCHING, bursty)
    # G/D/1 Kingman approximation: Wq ~ rho/(1-rho) * (ca^2 + 0)/2 / mu
    assert poisson.queue.mean_s == pytest.approx(0.5 / mu, rel=0.05)
    assert burst.queue.mean_s > 3.0 * poisson.queue.mean_s


def test_batcher_launches_when_full_or_after_max_delay() -> None:
    """Arrivals every 1 ms, max batch 4, max delay 10 ms, service 2 ms per batch."""
    offsets = [0.001 * (i + 1) for i in range(8)] + [0.100]
    source = OpenSchedule(offsets, [0] * len(offsets))
    executor = _sim(FixedService(0.002))
    record = run_trial(source, executor, BatchPolicy(4, 0.010), TrialLimits())
    assert record.batch_size == [4, 4, 4, 4, 4, 4, 4, 4, 1]
    # batch 1 launches when the 4th query arrives (4 ms), done at 6 ms
    assert record.started_s[:4] == [pytest.approx(0.004)] * 4
    assert record.finished_s[0] == pytest.approx(0.006)
    # batch 2 fills at 8 ms; the lone last query waits the full 10 ms delay
    assert record.started_s[4] == pytest.approx(0.008)
    assert record.started_s[8] == pytest.approx(0.110)
    assert record.finished_s[8] - offsets[8] == pytest.approx(0.012)


def test_no_batching_runs_each_query_alone_at_once() -> None:
    offsets = [0.0, 0.0, 0.0]
    record = run_trial(
        OpenSchedule(offsets, [0, 0, 0]), _sim(FixedService(0.01)), NO_BATCHING, TrialLimits()
    )
    assert record.batch_size == [1, 1, 1]
    assert record.finished_s == [pytest.approx(0.01), pytest.approx(0.02), pytest.approx(0.03)]


def test_batching_raises_capacity_of_a_fixed_cost_system() -> None:
    """5 ms fixed + 1 ms per item: unbatched capacity is < 167 q/s; batching serves 300 q/s."""
    service = BatchLinearService(0.005, 0.001)
    settings = TrialSettings(min_queries=5000, min_duration_s=1.0, seed=1, query_timeout_s=5.0)
    alone = run_server(_sim(service), 300.0, NO_BATCHING, settings, 0.05)
    batched = run_server(_sim(service), 300.0, BatchPolicy(8, 0.005), settings, 0.05)
    assert not alone.meets_sla
    assert batched.meets_sla, batched.sla_failures
    assert batched.mean_batch > 1.5


def test_latency_runs_from_the_scheduled_arrival() -> None:
    """A one-second stall: queries scheduled during it are charged their waiting time (a
    closed-loop generator would have issued them late and hidden it)."""
    service = FaultyService(FixedService(0.001), stall_queries=frozenset({100}), stall_s=1.0)
    settings = TrialSettings(min_queries=2000, min_duration_s=1.0, seed=4, query_timeout_s=60.0)
    summary = run_server(_sim(service), 100.0, NO_BATCHING, settings)
    assert summary.timeouts == 0 and summary.completed == summary.issued
    assert summary.latency.max_s >= 0.99
    # about 100 queries arrive during the stall: over 1 % of 2000 wait >= 0.5 s
    assert summary.latency.p99_s > 0.4
    stalling = FaultyService(FixedService(0.001), stall_queries=frozenset({100}), stall_s=1.0)
    closed = TrialSettings(min_queries=2000, min_duration_s=0.1, query_timeout_s=60.0)
    single = run_single_stream(_sim(stalling), closed)
    assert single.latency.p99_s < 0.01  # the closed loop only sees the one slow query


def test_offline_throughput_and_single_stream_estimates() -> None:
    service = BatchLinearService(0.004, 0.001)
    settings = TrialSettings(min_queries=800, min_duration_s=0.5, seed=0)
    offline = run_offline(_sim(service), BatchPolicy(8, 0.001), settings)
    assert offline.throughput_per_s == pytest.approx(800 / (100 * 0.012), rel=0.01)
    assert offline.valid
    single = run_single_stream(_sim(FixedService(0.002)), settings)
    assert single.issued >= 800 and single.duration_s >= 0.5
    assert single.latency.p90_s == pytest.approx(0.002)
    assert single.p90_estimate_s == pytest.approx(0.002)
    assert single.p99_estimate_s == pytest.approx(0.002)


def test_overload_times_out_and_is_bounded() -> None:
    """Offered load far above capacity: the queue grows, queries time out, the trial ends."""
    settings = TrialSettings(min_queries=2000, min_duration_s=1.0, query_timeout_s=0.5)
    summary = run_server(_sim(FixedService(0.01)), 1000.0, NO_BATCHING, settings, 0.1)
    assert summary.timeouts > 1000
    assert summary.p99_is_lower_bound
    assert not summary.meets_sla


def test_hopeless_trial_stops_early() -> None:
    settings = TrialSettings(min_queries=5000, min_duration_s=1.0, query_timeout_s=5.0)
    summary = run_server(
        _sim(FixedService(0.01)), 1000.0, NO_BATCHING, settings, 0.05, stop_when_failed=True
    )
    assert summary.stopped_reason.startswith("stopped early")
    assert summary.cancelled > 0 and summary.issued < 5000
    assert not summary.meets_sla and not math.isnan(summary.latency.p99_s)
