"""The real-time path's machinery: precise waits, server threads that dispatch and keep the time
themselves, and Ctrl-C. Real threads and the real clock, so the checks are structural (every
query accounted for once, batches within the policy, never more running than instances) with
generous bounds, not speed: they must hold on a loaded 2-core CI machine.

Covers: accelscope.load.trial, accelscope.load.waiting, accelscope.load.executor,
accelscope.load.batcher."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from accelscope.load import scenarios
from accelscope.load import trial as trial_module
from accelscope.load.batcher import NO_BATCHING, BatchPolicy
from accelscope.load.executor import ThreadedExecutor
from accelscope.load.fakes import ExponentialService, FixedService, NullSUT, SleepingSUT
from accelscope.load.scenarios import run_offline, run_server, run_single_stream
from accelscope.load.sources import OpenSchedule
from accelscope.load.summary import TrialSettings
from accelscope.load.trial import QueryStatus, TrialLimits, TrialRecord, run_trial
from accelscope.load.waiting import TIMED_OUT, EarlyWake

QUICK = TrialSettings(
    min_queries=120,
    min_duration_s=0.0,
    seed=3,
    query_timeout_s=2.0,
    stall_limit_s=5.0,
    max_lag_p99_s=1.0,
)


def test_early_wake_times_out_at_the_deadline_not_before() -> None:
    waker = EarlyWake()
    source: queue.SimpleQueue[int] = queue.SimpleQueue()
    for delay_s in (0.0, 0.0004, 0.003):
        deadline = time.perf_counter() + delay_s
        assert waker.get(source, deadline) is TIMED_OUT
        assert time.perf_counter() >= deadline
        deadline = time.perf_counter() + delay_s
        waker.sleep_until(deadline)
        assert time.perf_counter() >= deadline
    assert 0.0 <= waker.margin_s <= waker.cap_s
    assert waker.waits == 6 and waker.polled_s >= 0.0


def test_early_wake_returns_an_item_as_soon_as_it_comes() -> None:
    waker = EarlyWake()
    source: queue.SimpleQueue[str] = queue.SimpleQueue()
    source.put("ready")
    assert waker.get(source, time.perf_counter() + 60.0) == "ready"
    threading.Timer(0.01, source.put, args=("later",)).start()
    began = time.perf_counter()
    assert waker.get(source, began + 60.0) == "later"
    assert time.perf_counter() - began < 30.0  # woken by the item, not by the deadline


def test_the_margin_follows_the_overshoot_within_its_cap() -> None:
    waker = EarlyWake(cap_s=200e-6, quantile=0.8, step_s=5e-6, initial_s=100e-6)
    for _ in range(200):
        waker._observe(150e-6)  # always over the margin until it reaches the overshoot
    assert waker.margin_s == pytest.approx(150e-6, abs=5e-6)
    for _ in range(1000):
        waker._observe(1.0)  # a loaded machine: never above the cap
    assert waker.margin_s == pytest.approx(200e-6)
    for _ in range(1000):
        waker._observe(0.0)
    assert waker.margin_s == 0.0


@pytest.fixture
def records(monkeypatch: pytest.MonkeyPatch) -> list[TrialRecord]:
    kept: list[TrialRecord] = []
    real = trial_module.run_trial

    def keeping(*args: Any, **kwargs: Any) -> TrialRecord:
        record = real(*args, **kwargs)
        kept.append(record)
        return record

    monkeypatch.setattr(scenarios, "run_trial", keeping)
    return kept


def _check(record: TrialRecord, max_batch: int, instances: int) -> None:
    """Every query ended once, in order of time, and no more batches ran than instances."""
    assert QueryStatus.PENDING not in record.status
    spans = set()
    for i in range(record.issued):
        if record.status[i] is not QueryStatus.OK:
            continue
        assert record.scheduled_s[i] <= record.issued_s[i] + 1e-9
        assert record.issued_s[i] <= record.started_s[i] + 1e-9
        assert record.started_s[i] <= record.finished_s[i]
        assert 1 <= record.batch_size[i] <= max_batch
        spans.add((record.started_s[i], record.finished_s[i]))
    edges = sorted([(s, 1) for s, _ in spans] + [(f, -1) for _, f in spans])
    running = most = 0
    for _, step in edges:
        running += step
        most = max(most, running)
    assert most <= instances


@pytest.mark.parametrize("instances", [1, 3])
@pytest.mark.parametrize(
    "policy", [NO_BATCHING, BatchPolicy(4, 0.002), BatchPolicy(2, 0.0)], ids=["b1", "b4", "b2"]
)
def test_threaded_trials_account_for_every_query(
    records: list[TrialRecord], instances: int, policy: BatchPolicy
) -> None:
    """Server threads launch and keep the time themselves: whatever the batching, the number
    of instances or the load (under, near and over capacity), every query ends exactly once."""
    suts = [SleepingSUT(service=ExponentialService(0.001, seed=k)) for k in range(instances)]
    executor = ThreadedExecutor(suts)
    try:
        for rate in (400.0 * instances, 900.0 * instances, 3000.0 * instances):
            summary = run_server(executor, rate, policy, QUICK)
            assert summary.completed + summary.errors + summary.timeouts + summary.cancelled == (
                summary.issued
            )
            assert summary.issued == QUICK.min_queries and not summary.stopped_reason
            _check(records[-1], policy.max_batch, instances)
        offline = run_offline(executor, policy, QUICK)
        assert offline.completed == QUICK.min_queries
        single = run_single_stream(executor, QUICK)
        assert single.completed == QUICK.min_queries
    finally:
        executor.close()
    assert executor.stalled_threads == 0
    assert sum(len(s.batches) for s in suts) == sum(r.batches for r in records)


def test_an_early_stop_from_a_server_thread_ends_the_trial() -> None:
    """Queries resolved over the bound by a server thread stop the trial (the trial's own
    thread is woken for it), and the executor serves the next trial."""
    settings = replace(QUICK, min_queries=1500)
    executor = ThreadedExecutor([SleepingSUT(service=FixedService(0.004))])
    try:
        summary = run_server(executor, 1000.0, NO_BATCHING, settings, 0.02, stop_when_failed=True)
        assert summary.stopped_reason.startswith("stopped early")
        assert summary.cancelled > 0 and summary.issued < 1500
        again = run_server(executor, 150.0, NO_BATCHING, QUICK)
        assert again.completed == QUICK.min_queries
    finally:
        executor.close()


class _Interrupting(ThreadedExecutor):
    """Raises KeyboardInterrupt in the trial's thread on its ``at``-th wait (a Ctrl-C), and
    keeps how many batches the trial had started by then."""

    def __init__(self, at: int) -> None:
        super().__init__([SleepingSUT(service=FixedService(0.001))])
        self.at = at
        self.waits = 0
        self.started_when_interrupted = 0

    def wait(self, until_s: float) -> list[Any]:
        self.waits += 1
        if self.waits == self.at:
            self.started_when_interrupted = self._tokens
            raise KeyboardInterrupt
        return super().wait(until_s)


@pytest.fixture
def interrupting() -> Iterator[_Interrupting]:
    executor = _Interrupting(at=20)
    yield executor
    executor.close()


def test_ctrl_c_mid_trial_detaches_the_loop_and_the_executor_still_serves(
    interrupting: _Interrupting,
) -> None:
    offsets = [0.002 * (i + 1) for i in range(200)]
    source = OpenSchedule(offsets, [0] * len(offsets))
    # the fault: Ctrl-C in the trial's own thread at its 20th wait (counted, not timed)
    with pytest.raises(KeyboardInterrupt):
        run_trial(source, interrupting, NO_BATCHING, TrialLimits())
    assert 0 < interrupting.started_when_interrupted < 200  # mid-trial
    assert interrupting._driver is None  # server threads no longer drive the dead trial
    interrupting.at = 0
    give_up = time.perf_counter() + 60.0
    while interrupting.available() != [0]:  # the batch the server thread was running ends
        assert time.perf_counter() < give_up, "the instance was never free again"
        time.sleep(0.005)
    summary = run_server(interrupting, 200.0, NO_BATCHING, QUICK)
    assert summary.completed == QUICK.min_queries


def test_a_null_system_under_test_on_the_real_path() -> None:
    executor = ThreadedExecutor([NullSUT(), NullSUT()])
    try:
        summary = run_server(executor, 2000.0, BatchPolicy(4, 0.0005), QUICK)
    finally:
        executor.close()
    assert summary.completed == QUICK.min_queries
    assert 0.0 <= summary.latency.p50_s <= summary.latency.p99_s < 1.0
