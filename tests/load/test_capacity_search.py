"""Capacity search in simulated time, where the right answer is known."""

from __future__ import annotations

import pytest

from accelscope.load.batcher import BatchPolicy
from accelscope.load.capacity_search import SearchSettings, policy_grid, search_capacity
from accelscope.load.clock import SimClock
from accelscope.load.executor import SimulatedExecutor
from accelscope.load.fakes import BatchLinearService, FaultyService, FixedService
from accelscope.load.scenarios import run_offline, run_server
from accelscope.load.summary import TrialSettings, TrialSummary
from accelscope.load.sut import ServiceModel

SETTINGS = TrialSettings(min_queries=1000, min_duration_s=1.0, seed=2, query_timeout_s=2.0)
SLA_S = 0.05


def _functions(service: ServiceModel):  # type: ignore[no-untyped-def]
    executor = SimulatedExecutor(service, SimClock())

    def trial(rate: float, policy: BatchPolicy) -> TrialSummary:
        return run_server(executor, rate, policy, SETTINGS, SLA_S, stop_when_failed=True)

    def throughput(policy: BatchPolicy) -> float:
        return run_offline(executor, policy, SETTINGS).throughput_per_s

    return trial, throughput


def test_md1_capacity_matches_theory() -> None:
    """M/D/1 with 10 ms service and a 50 ms p99 bound. Long simulations put the true p99 at
    43 ms at 50 q/s and 55 ms at 60 q/s; with 1000 queries the early-stopping rule allows only
    2 over the bound (about a p99.7 requirement), so the claimable capacity is lower still."""
    trial, throughput = _functions(FixedService(0.010))
    narrow = SearchSettings(rel_tolerance=0.03, max_trials_per_policy=10)
    found = search_capacity(trial, throughput, narrow)
    best = found.best
    assert best is not None and best.best_trial is not None
    assert best.best_trial.meets_sla and best.best_trial.latency.p99_s <= SLA_S
    assert 38.0 < best.capacity_qps < 58.0
    assert len(best.trials) <= 10
    # the capacity is the highest passing rate measured, never an interpolation
    passing = [t.offered_rate_per_s or 0.0 for t in best.trials if t.meets_sla]
    assert best.capacity_qps == max(passing)


def test_batching_grid_finds_more_capacity() -> None:
    trial, throughput = _functions(BatchLinearService(0.006, 0.0005))
    grid = policy_grid(8, SLA_S)
    assert grid.max_batches == (1, 2, 4, 8)
    found = search_capacity(trial, throughput, grid)
    unbatched = next(p for p in found.policies if p.policy.max_batch == 1)
    best = found.best
    assert best is not None
    assert best.policy.max_batch > 1
    assert best.capacity_qps > 2.0 * unbatched.capacity_qps
    assert (
        len(
            {
                p.policy.max_delay_s
                for p in found.policies
                if p.policy.max_batch == best.policy.max_batch
            }
        )
        == 3
    )


def test_a_failing_system_stops_the_search() -> None:
    trial, throughput = _functions(FaultyService(FixedService(0.01), fail_queries=frozenset({5})))
    found = search_capacity(trial, throughput, policy_grid(4, SLA_S))
    assert found.best is None
    assert found.notes and "failed" in found.notes[0]
    assert len(found.policies) == 1


def test_no_batching_grid() -> None:
    grid = policy_grid(8, SLA_S, batching=False)
    assert grid.max_batches == (1,)
    assert policy_grid(6, 0.1).max_batches == (1, 2, 4, 6)
    assert policy_grid(6, 0.1).max_delays_s[0] == pytest.approx(0.01)
