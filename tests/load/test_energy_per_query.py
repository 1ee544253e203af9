"""Joules per query of a load trial, in simulated time: the fake NVML's energy counter advances
on the trial's own clock, so a trial's energy and its energy per completed query are exact;
without a counter the trial says "not measured: why".

Covers: accelscope.load.scenarios, accelscope.load.summary, accelscope.hardware.energy,
accelscope.commands.load.view."""

from __future__ import annotations

import pytest

from accelscope.commands.load.view import energy_notes, load_table
from accelscope.hardware.energy import cpu_energy_meter, nvml_energy_meter
from accelscope.load.batcher import BatchPolicy
from accelscope.load.clock import SimClock
from accelscope.load.executor import SimulatedExecutor
from accelscope.load.fakes import FixedService
from accelscope.load.scenarios import run_offline, run_server, run_single_stream
from accelscope.load.summary import TrialSettings, TrialSummary
from accelscope.testing.nvml import FakeNvml

SETTINGS = TrialSettings(min_queries=2000, min_duration_s=1.0, seed=3)


def _executor(clock: SimClock) -> SimulatedExecutor:
    return SimulatedExecutor(FixedService(0.002), clock, 1)


def test_server_trial_joules_per_query_at_its_rate() -> None:
    clock = SimClock(start_s=100.0)
    nvml = FakeNvml(clock=clock.now, power_w=250.0, energy_update_period_s=0.02)
    meter = nvml_energy_meter(index=0, nvml=nvml, clock=clock.now)
    clock.advance_to(500.0)  # energy before the trial is not the trial's
    summary = run_server(_executor(clock), 200.0, BatchPolicy(1, 0.0), SETTINGS, energy=meter)
    energy = summary.energy
    assert energy is not None and energy.measured
    assert energy.items == summary.completed == summary.issued
    window = energy.window_s or 0.0
    assert energy.energy_j == pytest.approx(250.0 * window, abs=250.0 * 0.02)
    assert energy.joules_per_item == pytest.approx(250.0 * window / summary.completed, rel=0.01)
    # round trip through the stored load-trial document
    assert TrialSummary.from_dict(summary.to_dict()).energy == energy


def test_offline_and_single_stream_trials_are_metered_too() -> None:
    clock = SimClock()
    meter = nvml_energy_meter(
        index=0, nvml=FakeNvml(clock=clock.now, power_w=100.0), clock=clock.now
    )
    offline = run_offline(_executor(clock), BatchPolicy(1, 0.0), SETTINGS, energy=meter)
    single = run_single_stream(_executor(clock), SETTINGS, energy=meter)
    for trial in (offline, single):
        assert trial.energy is not None and trial.energy.joules_per_item is not None
        # back to back at 2 ms a query and 100 W: 0.2 J a query (± the 100 ms update period)
        assert trial.energy.joules_per_item == pytest.approx(0.2, rel=0.05)


def test_without_a_counter_each_trial_says_why() -> None:
    clock = SimClock()
    summary = run_offline(
        _executor(clock), BatchPolicy(1, 0.0), SETTINGS, energy=cpu_energy_meter()
    )
    assert summary.energy is not None and summary.energy.energy_j is None
    trials = [summary.to_dict()]
    assert energy_notes(trials) == [f"energy: not measured: {summary.energy.reason}"]
    assert "J/query" in [c.header for c in load_table(trials).columns]
    old = {k: v for k, v in summary.to_dict().items() if k != "energy"}  # stored before
    assert TrialSummary.from_dict(old).energy is None
    assert run_offline(_executor(clock), BatchPolicy(1, 0.0), SETTINGS).energy is None
