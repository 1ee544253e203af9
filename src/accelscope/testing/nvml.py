"""A fake ``pynvml`` module: one GPU (an L4) at 87 % utilisation, 1 GiB of 16 GiB used,
350 W, and GPM SM/tensor activity of 61.5 % / 40 % when ``gpm`` is on; the memory clock is
refused (NOT_SUPPORTED), as some drivers do. For code that samples GPUs through NVML
(:class:`accelscope.hardware.telemetry.NvmlSource`) on a machine without one."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

__all__ = ["FakeNvml"]


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

    def nvmlDeviceGetName(self, handle: str) -> str:
        return "NVIDIA L4"

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
