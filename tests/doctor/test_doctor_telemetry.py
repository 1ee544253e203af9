"""Telemetry arithmetic and the NVML/GPM source, with fakes; a real sample of this process."""

from __future__ import annotations

import os
from types import SimpleNamespace
from typing import Any

import pytest

from accelscope.hardware.telemetry import (
    NvmlSource,
    Telemetry,
    TelemetrySampler,
    cpu_utilisation,
    parse_proc_stat,
)

STAT_0 = """cpu  100 0 100 800 0 0 0 0 0 0
cpu0 50 0 50 400 0 0 0 0 0 0
cpu1 50 0 50 400 0 0 0 0 0 0
procs_running 3
"""
STAT_1 = """cpu  200 0 100 850 50 0 0 0 0 0
cpu0 150 0 50 400 0 0 0 0 0 0
cpu1 50 0 50 450 50 0 0 0 0 0
procs_running 1
"""


def test_proc_stat_deltas_give_per_core_busy_and_iowait() -> None:
    before, after = parse_proc_stat(STAT_0), parse_proc_stat(STAT_1)
    assert before.procs_running == 3 and len(before.cores) == 2
    per_core, iowait = cpu_utilisation(before, after)
    assert per_core == pytest.approx((100.0, 0.0))
    assert iowait == pytest.approx(25.0)


class FakeNvml:
    NVML_CLOCK_SM, NVML_CLOCK_MEM = 1, 2
    NVML_GPM_METRICS_GET_VERSION = 1
    NVML_GPM_METRIC_SM_UTIL, NVML_GPM_METRIC_ANY_TENSOR_UTIL = 2, 5

    class c_nvmlGpmMetricsGet_t:
        def __init__(self) -> None:
            self.metrics = [SimpleNamespace(metricId=0, value=0.0) for _ in range(2)]

    def __init__(self, gpm: bool) -> None:
        self.gpm = gpm
        self.freed = 0
        self.shutdown = False

    def nvmlInit(self) -> None: ...
    def nvmlDeviceGetCount(self) -> int:
        return 1

    def nvmlDeviceGetHandleByIndex(self, index: int) -> str:
        return f"gpu{index}"

    def nvmlDeviceGetUtilizationRates(self, handle: str) -> Any:
        return SimpleNamespace(gpu=87)

    def nvmlDeviceGetMemoryInfo(self, handle: str) -> Any:
        return SimpleNamespace(used=2**30, total=2**34)

    def nvmlDeviceGetPowerUsage(self, handle: str) -> int:
        return 350_000  # mW

    def nvmlDeviceGetClockInfo(self, handle: str, which: int) -> int:
        if which == self.NVML_CLOCK_MEM:
            raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")
        return 1980

    def nvmlGpmQueryDeviceSupport(self, handle: str) -> Any:
        return SimpleNamespace(isSupportedDevice=int(self.gpm))

    def nvmlGpmSampleAlloc(self) -> Any:
        return SimpleNamespace()

    def nvmlGpmSampleGet(self, handle: str, sample: Any) -> None: ...
    def nvmlGpmSampleFree(self, sample: Any) -> None:
        self.freed += 1

    def nvmlGpmMetricsGet(self, request: Any) -> None:
        values = {self.NVML_GPM_METRIC_SM_UTIL: 61.5, self.NVML_GPM_METRIC_ANY_TENSOR_UTIL: 40.0}
        for metric in request.metrics:
            metric.value = values[metric.metricId]

    def nvmlShutdown(self) -> None:
        self.shutdown = True


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
    texts = iter([STAT_0, STAT_1, STAT_1])
    sampler = TelemetrySampler(os.getpid(), proc_stat=lambda: next(texts))
    assert sampler.sample_once() is None  # primes the counters
    sample = sampler.sample_once()
    assert sample is not None and sample.process_rss_bytes > 0 and sample.processes >= 1
    telemetry = sampler.stop()
    assert len(telemetry.samples) == 1
    assert Telemetry.from_dict(telemetry.to_dict()) == telemetry
