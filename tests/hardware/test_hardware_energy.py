"""The energy meter over NVML's total-energy counter, on the fake NVML and a fake clock: joules
of the window only, validity from the counter's update period and resolution, and "not
measured: why" wherever there is no counter."""

from __future__ import annotations

import pytest

from accelscope.hardware.energy import (
    EnergyFigure,
    EnergyMeter,
    cpu_energy_meter,
    nvml_energy_meter,
)
from accelscope.testing import FakeClock
from accelscope.testing.nvml import FakeNvml


def _meter(clock: FakeClock, **fake: object) -> tuple[EnergyMeter, FakeNvml]:
    nvml = FakeNvml(clock=clock, **fake)  # type: ignore[arg-type]
    return nvml_energy_meter(index=0, nvml=nvml, clock=clock, sleep=clock.advance), nvml


def test_joules_over_the_window_only() -> None:
    clock = FakeClock()
    meter, _ = _meter(clock, power_w=300.0, energy_update_period_s=0.05)
    clock.advance(7.0)  # before the window: not counted
    meter.begin()
    clock.advance(2.0)
    figure = meter.end(items=1000).for_items(1000)
    clock.advance(5.0)  # after: not counted
    assert figure.measured and figure.energy_j == pytest.approx(600.0)
    assert figure.window_s == pytest.approx(2.0)
    assert figure.joules_per_item == pytest.approx(0.6)
    assert figure.mean_power_w == pytest.approx(300.0)
    # one update period at the mean power, plus 1 mJ at each end
    assert figure.uncertainty_j == pytest.approx(300.0 * 0.1 + 0.002)
    assert figure.update_period_basis == "assumed"
    assert "whole board" in figure.source and "NVIDIA L4" in figure.source


def test_a_window_shorter_than_the_update_period_is_not_measured() -> None:
    clock = FakeClock()
    meter, _ = _meter(clock)
    meter.begin()
    clock.advance(0.05)
    figure = meter.end(items=10)
    assert not figure.measured and figure.joules_per_item is None
    assert figure.reason.startswith("window shorter than the counter's update period")
    assert figure.describe().startswith("not measured: window shorter")


def test_the_update_period_is_probed_on_the_counter() -> None:
    clock = FakeClock(start_s=0.0)
    meter, _ = _meter(clock, energy_update_period_s=0.02)
    assert meter.probe_update_period(max_s=1.0, poll_s=0.001) == pytest.approx(0.02, rel=0.1)
    assert meter.update_period_basis == "measured"
    assert meter.window_needed_s() == pytest.approx(20 * meter.update_period_s)
    meter.begin()
    clock.advance(0.05)  # shorter than the assumed 100 ms, longer than the measured 20 ms
    figure = meter.end()
    assert figure.measured and figure.update_period_basis == "measured"


def test_counter_faults_are_not_measured_with_why() -> None:
    clock = FakeClock()
    meter, nvml = _meter(clock)
    meter.begin()
    clock.advance(1.0)
    nvml.reload_driver()
    clock.advance(0.5)
    assert "went backwards" in meter.end().reason
    stuck, _ = _meter(clock, power_w=0.0)
    stuck.begin()
    clock.advance(1.0)
    assert "did not advance" in stuck.end().reason
    assert "without begin" in stuck.end().reason


def test_no_counter_is_not_measured_with_why() -> None:
    old = nvml_energy_meter(index=0, nvml=FakeNvml(energy=False))
    assert not old.available and "has no total-energy counter" in old.reason
    old.begin()
    assert old.end(items=5).reason == old.reason
    missing = nvml_energy_meter(index=3, nvml=FakeNvml())
    assert "does not find GPU 3" in missing.reason
    broken = nvml_energy_meter(nvml=FakeNvml(init_error="Driver Not Loaded"))
    assert broken.reason == "NVML did not initialise (Driver Not Loaded)"
    mig = nvml_energy_meter(uuid="MIG-fake-0-0", nvml=FakeNvml(mig={0: ("1g.10gb",)}))
    assert "MIG instance has none" in mig.reason
    cpu = cpu_energy_meter()
    assert "CPU" in cpu.reason and cpu.end().energy_j is None


def test_found_by_uuid_as_torch_reports_it() -> None:
    clock = FakeClock()
    nvml = FakeNvml(gpus=("NVIDIA H100 80GB HBM3", "NVIDIA H200"), clock=clock)
    meter = nvml_energy_meter(uuid="GPU-fake-1", nvml=nvml, clock=clock)
    assert "GPU GPU-fake-1 (NVIDIA H200)" in meter.source
    meter.close()
    assert nvml.shutdown


def test_figure_round_trips_and_describes_itself() -> None:
    figure = EnergyFigure(
        energy_j=212.0,
        window_s=2.0,
        items=512,
        source="NVML total-energy counter of GPU 0 (NVIDIA H100), whole board",
        update_period_s=0.1,
        update_period_basis="assumed",
        resolution_j=0.001,
        uncertainty_j=10.6,
    )
    assert EnergyFigure.model_validate(figure.model_dump(mode="json")) == figure
    text = figure.describe()
    assert text.startswith("0.4141 J/item (±5%, 212 J over 2 s")
    missing = EnergyFigure.not_measured("no NVIDIA GPU")
    assert EnergyFigure.model_validate(missing.model_dump(mode="json")) == missing
    assert missing.describe() == "not measured: no NVIDIA GPU"
