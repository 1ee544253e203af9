"""A system under test that raises on some queries or stalls, in real time with threads:
the queries are counted as errors or timeouts, and the run completes and says so.

Covers: accelscope.load.executor, accelscope.load.scenarios, accelscope.load.summary,
accelscope.load.fakes."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace

import pytest

from accelscope.load.batcher import NO_BATCHING, BatchPolicy
from accelscope.load.clock import SimClock
from accelscope.load.executor import SimulatedExecutor, ThreadedExecutor
from accelscope.load.fakes import FaultyService, FixedService, SleepingSUT
from accelscope.load.scenarios import run_server, run_single_stream
from accelscope.load.summary import TrialSettings

FAST = TrialSettings(
    min_queries=60,
    min_duration_s=0.3,
    seed=1,
    query_timeout_s=0.25,
    stall_limit_s=0.6,
    max_lag_p99_s=0.05,
)


@pytest.fixture
def suts() -> Iterator[list[SleepingSUT]]:
    made: list[SleepingSUT] = []
    yield made
    for sut in made:
        sut.release()  # free stalled server threads


def test_raising_queries_are_errors_and_the_run_completes(suts: list[SleepingSUT]) -> None:
    sut = SleepingSUT(service=FixedService(0.001), fail_queries=frozenset({3, 17, 40}))
    suts.append(sut)
    executor = ThreadedExecutor([sut])
    try:
        summary = run_server(executor, 200.0, NO_BATCHING, FAST, sla_p99_s=0.1)
    finally:
        executor.close()
    assert summary.errors == 3
    assert summary.completed == summary.issued - 3
    assert summary.error_messages == (
        "RuntimeError: injected failure on query 3",
        "RuntimeError: injected failure on query 17",
        "RuntimeError: injected failure on query 40",
    )
    assert not summary.meets_sla
    assert "3 queries failed" in summary.sla_failures


def test_a_batch_error_fails_every_query_in_it(suts: list[SleepingSUT]) -> None:
    sut = SleepingSUT(service=FixedService(0.02), fail_queries=frozenset({10}))
    suts.append(sut)
    executor = ThreadedExecutor([sut])
    try:
        summary = run_server(executor, 400.0, BatchPolicy(8, 0.01), FAST)
    finally:
        executor.close()
    assert summary.errors > 1  # its batch-mates fail with it
    assert summary.completed + summary.errors == summary.issued


def test_a_stalled_instance_cannot_hang_the_run(suts: list[SleepingSUT]) -> None:
    """One instance blocks forever on query 20: its query times out, the run stops once the
    only instance has been stuck past the stall limit, and everything is accounted for."""
    sut = SleepingSUT(service=FixedService(0.001), stall_queries=frozenset({20}), stall_s=30.0)
    suts.append(sut)
    executor = ThreadedExecutor([sut], join_timeout_s=0.05)
    began = time.perf_counter()
    try:
        summary = run_server(executor, 100.0, NO_BATCHING, FAST, sla_p99_s=0.1)
    finally:
        executor.close()
    assert time.perf_counter() - began < 5.0
    assert summary.timeouts >= 1
    assert summary.cancelled > 0
    assert summary.completed + summary.timeouts + summary.cancelled == summary.issued
    assert summary.stalled_instances == 1
    assert not summary.valid
    assert any("stuck on one batch" in r for r in summary.invalid_reasons)
    assert executor.stalled_threads == 1


def test_a_stall_that_recovers_only_times_out_the_late_queries(suts: list[SleepingSUT]) -> None:
    sut = SleepingSUT(service=FixedService(0.001), stall_queries=frozenset({15}), stall_s=0.4)
    suts.append(sut)
    settings = replace(FAST, stall_limit_s=5.0)
    executor = ThreadedExecutor([sut])
    try:
        summary = run_server(executor, 100.0, NO_BATCHING, settings)
    finally:
        executor.close()
    assert summary.timeouts >= 1
    assert summary.completed + summary.timeouts == summary.issued
    assert summary.stalled_instances == 0 and not summary.stopped_reason


def test_two_instances_keep_serving_around_a_stalled_one(suts: list[SleepingSUT]) -> None:
    # whichever instance query 5 lands on stalls (which one is free at its arrival depends on
    # timing: on a loaded machine an earlier query can still be running on the first one)
    first, second = (
        SleepingSUT(service=FixedService(0.001), stall_queries=frozenset({5}), stall_s=30.0)
        for _ in range(2)
    )
    suts.extend([first, second])
    executor = ThreadedExecutor([first, second], join_timeout_s=0.05)
    try:
        summary = run_server(executor, 100.0, NO_BATCHING, FAST)
    finally:
        executor.close()
    assert summary.timeouts == 1
    assert summary.completed == summary.issued - 1
    assert summary.stalled_instances == 1
    assert not summary.stopped_reason


def test_single_stream_with_a_stall_stops(suts: list[SleepingSUT]) -> None:
    sut = SleepingSUT(service=FixedService(0.001), stall_queries=frozenset({10}), stall_s=30.0)
    suts.append(sut)
    executor = ThreadedExecutor([sut], join_timeout_s=0.05)
    try:
        summary = run_single_stream(executor, FAST)
    finally:
        executor.close()
    assert summary.completed == 10 and summary.timeouts >= 1
    assert not summary.valid


def test_simulated_faults_match() -> None:
    service = FaultyService(
        FixedService(0.001), fail_queries=frozenset({1, 2}), stall_queries=frozenset({30})
    )
    summary = run_server(SimulatedExecutor(service, SimClock()), 100.0, NO_BATCHING, FAST)
    assert summary.errors == 2 and summary.timeouts >= 1
    assert summary.stalled_instances == 1
