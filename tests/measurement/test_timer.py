"""Timer: warm-up accounting, stop rule and statistics, deterministic with a fake clock."""

from __future__ import annotations

import pytest

from accelscope.errors import BadInputError
from accelscope.measurement.record import Measurement, StopReason
from accelscope.measurement.timer import HostInterval, Timer, TimerConfig
from accelscope.serialise import dump, load
from accelscope.testing import FakeClock, ScriptedWork


def _timer(
    durations: list[float], config: TimerConfig, cycle: bool = True
) -> tuple[Timer, ScriptedWork]:
    clock = FakeClock()
    work = ScriptedWork(clock, durations, cycle=cycle)
    return Timer(work, items_per_call=4, config=config, clock=clock), work


def test_first_call_and_warmup_are_kept_apart() -> None:
    config = TimerConfig(warmup_iters=3, warmup_min_s=0.0, min_samples=10, budget_s=100)
    durations = [5.0, 2.0, 2.0, 2.0] + [1.0] * 100  # compile, warm-up, then steady
    timer, _ = _timer(durations, config, cycle=False)
    measurement = timer.measure()
    assert measurement.first_call_s == 5.0
    assert measurement.warmup_samples_s == (2.0, 2.0, 2.0)
    assert set(measurement.samples_s) == {1.0}
    assert measurement.summary.median_s == 1.0
    assert measurement.throughput_items_per_s == 4.0


def test_warmup_runs_until_minimum_time() -> None:
    config = TimerConfig(warmup_iters=1, warmup_min_s=1.0, min_samples=10, budget_s=100)
    timer, _ = _timer([0.3], config)
    measurement = timer.measure()
    # elapsed is read before each warm-up call: 0, .3, .6, .9 -> four calls, then 1.2 >= 1.0
    assert len(measurement.warmup_samples_s) == 4


def test_constant_work_converges_at_min_samples() -> None:
    config = TimerConfig(warmup_iters=0, warmup_min_s=0.0, min_samples=10, budget_s=100)
    timer, work = _timer([0.01], config)
    measurement = timer.measure()
    assert measurement.stop_reason is StopReason.CONVERGED
    assert len(measurement.samples_s) == 10
    assert work.calls == 1 + 10  # first call + samples
    assert "converged" in measurement.stop_explanation()


def test_noisy_work_stops_on_budget_and_says_so() -> None:
    config = TimerConfig(warmup_iters=0, warmup_min_s=0.0, budget_s=5.0, target_rel_ci=0.02)
    timer, _ = _timer([0.1, 0.2, 0.4, 0.15, 0.3], config)
    measurement = timer.measure()
    assert measurement.stop_reason is StopReason.BUDGET
    assert sum(measurement.samples_s) == pytest.approx(5.0, abs=0.4)
    assert any("budget" in warning for warning in measurement.warnings())
    assert measurement.summary.median_ci_rel > 0.02


def test_moderate_noise_converges_after_more_samples() -> None:
    pattern = [1.00, 1.01, 0.99, 1.02, 0.98, 1.00, 1.03, 0.97, 1.01, 0.99]
    config = TimerConfig(warmup_iters=0, warmup_min_s=0.0, budget_s=1000, target_rel_ci=0.01)
    timer, _ = _timer(pattern, config)
    measurement = timer.measure()
    assert measurement.stop_reason is StopReason.CONVERGED
    assert measurement.summary.median_ci_rel <= 0.01
    assert len(measurement.samples_s) > 10


def test_max_samples_cap() -> None:
    config = TimerConfig(
        warmup_iters=0,
        warmup_min_s=0.0,
        min_samples=5,
        max_samples=7,
        budget_s=1000,
        target_rel_ci=0.0001,
    )
    timer, _ = _timer([1.0, 2.0], config)
    measurement = timer.measure()
    assert measurement.stop_reason is StopReason.MAX_SAMPLES
    assert len(measurement.samples_s) == 7


def test_sync_hook_is_called_around_each_call() -> None:
    clock = FakeClock()
    events: list[str] = []
    interval = HostInterval(clock, sync=lambda: events.append("sync"))
    work = ScriptedWork(clock, [0.5], cycle=True)
    config = TimerConfig(warmup_iters=0, warmup_min_s=0.0, min_samples=10, budget_s=100)
    Timer(work, config=config, clock=clock, interval=interval).measure()
    assert events.count("sync") == 2 * work.calls


def test_progress_callback_reports_phases() -> None:
    seen: list[tuple[str, int]] = []
    clock = FakeClock()
    work = ScriptedWork(clock, [0.1], cycle=True)
    config = TimerConfig(warmup_iters=2, warmup_min_s=0.0, min_samples=10, budget_s=100)
    Timer(
        work, config=config, clock=clock, on_progress=lambda p, n, e, b: seen.append((p, n))
    ).measure()
    assert seen[:2] == [("warm-up", 1), ("warm-up", 2)]
    assert seen[-1] == ("measure", 10)


def test_measurement_round_trips_through_dict() -> None:
    config = TimerConfig(warmup_iters=1, warmup_min_s=0.0, min_samples=10, budget_s=100)
    timer, _ = _timer([0.1, 0.10000000000000002, 0.3], config)
    measurement = timer.measure()
    again = load(Measurement, dump(measurement))
    assert again == measurement
    assert again.summary == measurement.summary


@pytest.mark.parametrize(
    "kwargs",
    [
        {"budget_s": 0},
        {"target_rel_ci": 0},
        {"min_samples": 1},
        {"confidence": 1.0},
        {"warmup_iters": -1},
    ],
)
def test_bad_timer_config_is_bad_input(kwargs: dict[str, float]) -> None:
    with pytest.raises(BadInputError):
        TimerConfig(**kwargs)  # type: ignore[arg-type]


def test_real_clock_measures_real_work() -> None:
    config = TimerConfig(budget_s=0.5, warmup_min_s=0.0)
    measurement = Timer(lambda: sum(range(2000)), config=config).measure()
    assert measurement.summary.median_s > 0
    assert measurement.summary.count >= 2
