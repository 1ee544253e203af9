"""Telemetry arithmetic and the NVML/GPM source, with fakes; a real sample of this process."""

from __future__ import annotations

import os
from collections import namedtuple

import pytest

from accelscope.hardware.telemetry import (
    NvmlSource,
    Telemetry,
    TelemetrySampler,
    cpu_times_from_psutil,
    cpu_utilisation,
)
from accelscope.testing.nvml import FakeNvml

# Shaped as psutil's Linux ``scputimes`` (seconds; guest is inside user).
scputimes = namedtuple(
    "scputimes", "user nice system idle iowait irq softirq steal guest guest_nice"
)
TIMES_0 = [scputimes(0.5, 0, 0.5, 4, 0, 0, 0, 0, 0, 0), scputimes(0.5, 0, 0.5, 4, 0, 0, 0, 0, 0, 0)]
TIMES_1 = [
    scputimes(1.5, 0, 0.5, 4, 0, 0, 0, 0, 0.7, 0),
    scputimes(0.5, 0, 0.5, 4.5, 0.5, 0, 0, 0, 0, 0),
]


def test_cpu_time_deltas_give_per_core_busy_and_iowait() -> None:
    before, after = cpu_times_from_psutil(TIMES_0, 3), cpu_times_from_psutil(TIMES_1, 1)
    assert before.procs_running == 3 and len(before.cores) == 2
    per_core, iowait = cpu_utilisation(before, after)
    assert per_core == pytest.approx((100.0, 0.0))
    assert iowait == pytest.approx(25.0)


def test_cpu_times_without_iowait_count_it_as_zero() -> None:
    other_os = namedtuple("other_os", "user system idle")
    times = cpu_times_from_psutil([other_os(1.0, 1.0, 2.0)], 0)
    assert times.cores == ((2.0, 4.0),) and times.iowait == 0.0 and times.total == 4.0


def test_real_psutil_times_fold_per_core() -> None:
    import psutil

    per_cpu = psutil.cpu_times(percpu=True)
    times = cpu_times_from_psutil(per_cpu, 1)
    assert len(times.cores) == len(per_cpu)
    assert all(0.0 <= busy <= total for busy, total in times.cores)


def test_nvml_source_reads_gpu_and_gpm_activity() -> None:
    nvml = FakeNvml(gpm=True)
    source = NvmlSource(nvml)
    assert source.status.startswith("measured") and source.sm_status.startswith("measured")
    (gpu,) = source.sample()
    assert gpu.utilisation_percent == 87 and gpu.power_w == pytest.approx(350.0)
    assert gpu.sm_clock_mhz == 1980 and gpu.memory_clock_mhz is None  # refused: None, not 0
    assert gpu.sm_active_percent == pytest.approx(61.5)
    assert gpu.tensor_active_percent == pytest.approx(40.0)
    source.close()
    assert nvml.shutdown and nvml.freed >= 1


def test_nvml_without_gpm_says_so() -> None:
    source = NvmlSource(FakeNvml(gpm=False))
    assert source.sm_status.startswith("not available") and "Hopper" in source.sm_status
    assert source.sample()[0].sm_active_percent is None


def test_sampler_samples_this_process_and_round_trips() -> None:
    readings = iter([TIMES_0, TIMES_1, TIMES_1])
    sampler = TelemetrySampler(
        os.getpid(), cpu_times=lambda: next(readings), procs_running=lambda: 2
    )
    assert sampler.sample_once() is None  # primes the counters
    sample = sampler.sample_once()
    assert sample is not None and sample.process_rss_bytes > 0 and sample.processes >= 1
    assert sample.cpu_percent == pytest.approx((100.0, 0.0)) and sample.procs_running == 2
    telemetry = sampler.stop()
    assert len(telemetry.samples) == 1
    assert Telemetry.from_dict(telemetry.to_dict()) == telemetry
