"""A fake ``pynvml`` module, for code that reads GPUs through NVML
(:class:`accelscope.hardware.telemetry.NvmlSource`, :mod:`accelscope.hardware.energy`) on a
machine without one.

By default: one GPU (an L4) at 87 % utilisation, 1 GiB of 16 GiB used (memory v1; v2, which
leaves out the driver's 512 MiB reservation, says 512 MiB), 350 W, and GPM SM / tensor /
graphics-engine / DRAM activity of 61.5 / 40 / 80 / 25 % when ``gpm`` is on; the memory clock is
refused (NOT_SUPPORTED), as some drivers do. Everything else is an argument:

- ``gpus``: the GPUs' names (their count is NVML's device count);
- ``refused_metrics``: GPM metric ids whose per-metric return code is NOT_SUPPORTED (the call
  itself succeeds, as the driver does);
- ``nan_metrics``: GPM metric ids answered with success and NaN (an H100's driver did, with the
  GPU idle);
- ``memory_v2=False``: a driver without ``nvmlDeviceGetMemoryInfo_v2`` (FUNCTION_NOT_FOUND);
- ``mig``: GPU index -> its MIG instances' profiles (``"3g.40gb"``). With MIG on, utilisation
  is NOT_SUPPORTED on the GPU and on its instances, power and energy are the GPU's only, and
  GPM samples an instance through ``nvmlGpmMigSampleGet`` (instance ``i``, GPU instance id
  ``i + 1``: SM 20 x (i+1) %, tensor 10 x (i+1) %, graphics 25 x (i+1) %, DRAM 5 x (i+1) %;
  its memory: the profile's size, 1 GiB used);
- the total-energy counter (mJ since the "driver load", ``energy_base_mj``) advances at
  ``power_w`` on ``clock`` (seconds; a :class:`accelscope.testing.FakeClock` in tests), updated
  every ``energy_update_period_s`` in whole millijoules; ``energy=False`` refuses it
  (pre-Volta); :meth:`FakeNvml.reload_driver` restarts it from zero;
- ``init_error``: ``nvmlInit`` fails with this message.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Iterable, Mapping
from types import SimpleNamespace
from typing import Any

__all__ = ["FakeNvml", "NVMLError"]

GIB = 2**30


class NVMLError(Exception):
    """What the fake raises: ``value`` is the NVML return code, the message its text."""

    def __init__(self, value: int, text: str) -> None:
        super().__init__(text)
        self.value = value


class FakeNvml:
    NVML_SUCCESS = 0
    NVML_ERROR_NOT_SUPPORTED = 3
    NVML_ERROR_NOT_FOUND = 6
    NVML_ERROR_FUNCTION_NOT_FOUND = 13
    NVML_CLOCK_SM, NVML_CLOCK_MEM = 1, 2
    NVML_DEVICE_MIG_DISABLE, NVML_DEVICE_MIG_ENABLE = 0, 1
    NVML_GPM_METRICS_GET_VERSION = 1
    NVML_GPM_METRIC_GRAPHICS_UTIL = 1
    NVML_GPM_METRIC_SM_UTIL = 2
    NVML_GPM_METRIC_ANY_TENSOR_UTIL = 5
    NVML_GPM_METRIC_DRAM_BW_UTIL = 10
    nvmlMemory_v2 = 0x02000028
    MAX_MIG_DEVICES = 7

    class c_nvmlGpmMetricsGet_t:
        def __init__(self) -> None:
            self.version = 0
            self.numMetrics = 0
            self.sample1: Any = None
            self.sample2: Any = None
            self.metrics = [SimpleNamespace(metricId=0, nvmlReturn=0, value=0.0) for _ in range(8)]

    def __init__(
        self,
        gpm: bool = True,
        *,
        gpus: Iterable[str] = ("NVIDIA L4",),
        refused_metrics: Iterable[int] = (),
        nan_metrics: Iterable[int] = (),
        memory_v2: bool = True,
        mig: Mapping[int, Iterable[str]] | None = None,
        energy: bool = True,
        power_w: float = 350.0,
        energy_update_period_s: float = 0.1,
        energy_base_mj: int = 5_000_000_000,
        clock: Callable[[], float] | None = None,
        init_error: str | None = None,
    ) -> None:
        self.gpm = gpm
        self.names = tuple(gpus)
        self.refused = frozenset(refused_metrics)
        self.nan = frozenset(nan_metrics)
        self.memory_v2 = memory_v2
        self.mig = {int(k): tuple(v) for k, v in (mig or {}).items()}
        self.energy = energy
        self.power_w = power_w
        self.energy_update_period_s = energy_update_period_s
        self.clock = clock or time.monotonic
        self._t0 = self.clock()
        self._energy_base_mj = energy_base_mj
        self.init_error = init_error
        self.freed = 0
        self.shutdown = False
        self.energy_reads = 0

    # -- errors and handles ------------------------------------------------------------------

    def _not_supported(self) -> NVMLError:
        return NVMLError(self.NVML_ERROR_NOT_SUPPORTED, "Not Supported")

    def _gpu(self, handle: str) -> int:
        match = re.match(r"gpu(\d+)", handle)
        if not match:
            raise NVMLError(2, "Invalid Argument")
        return int(match.group(1))

    @staticmethod
    def _instance(handle: str) -> int | None:
        match = re.search(r"/mig(\d+)$", handle)
        return int(match.group(1)) if match else None

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise NVMLError(9, self.init_error)

    def nvmlShutdown(self) -> None:
        self.shutdown = True

    def nvmlDeviceGetCount(self) -> int:
        return len(self.names)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> str:
        if not 0 <= index < len(self.names):
            raise NVMLError(2, "Invalid Argument")
        return f"gpu{index}"

    def nvmlDeviceGetUUID(self, handle: str) -> str:
        gpu, instance = self._gpu(handle), self._instance(handle)
        return f"GPU-fake-{gpu}" if instance is None else f"MIG-fake-{gpu}-{instance}"

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> str:
        match = re.fullmatch(r"(GPU|MIG)-fake-(\d+)(?:-(\d+))?", uuid)
        if not match or int(match.group(2)) >= len(self.names):
            raise NVMLError(self.NVML_ERROR_NOT_FOUND, "Not Found")
        handle = f"gpu{match.group(2)}"
        return handle if match.group(3) is None else f"{handle}/mig{match.group(3)}"

    def nvmlDeviceGetName(self, handle: str) -> str:
        name = self.names[self._gpu(handle)]
        instance = self._instance(handle)
        if instance is None:
            return name
        return f"{name} MIG {self.mig[self._gpu(handle)][instance]}"

    # -- MIG ---------------------------------------------------------------------------------

    def nvmlDeviceGetMigMode(self, handle: str) -> list[int]:
        on = self._gpu(handle) in self.mig
        return [int(on), int(on)]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: str) -> int:
        return self.MAX_MIG_DEVICES if self._gpu(handle) in self.mig else 0

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: str, index: int) -> str:
        gpu = self._gpu(handle)
        if index >= len(self.mig.get(gpu, ())):
            raise NVMLError(self.NVML_ERROR_NOT_FOUND, "Not Found")
        return f"gpu{gpu}/mig{index}"

    def nvmlDeviceGetGpuInstanceId(self, handle: str) -> int:
        instance = self._instance(handle)
        if instance is None:
            raise NVMLError(2, "Invalid Argument")
        return instance + 1

    # -- readings ----------------------------------------------------------------------------

    def nvmlDeviceGetUtilizationRates(self, handle: str) -> Any:
        if self._gpu(handle) in self.mig:
            raise self._not_supported()
        return SimpleNamespace(gpu=87, memory=30)

    def nvmlDeviceGetMemoryInfo(self, handle: str, version: int | None = None) -> Any:
        instance = self._instance(handle)
        if instance is None:
            total, used, reserved = 16 * GIB, GIB, GIB // 2
        else:
            profile = self.mig[self._gpu(handle)][instance]
            size = re.search(r"(\d+)gb", profile)
            total, used, reserved = (int(size.group(1)) if size else 10) * GIB, GIB, 0
        if not version:
            return SimpleNamespace(total=total, free=total - used, used=used)
        if not self.memory_v2:
            raise NVMLError(self.NVML_ERROR_FUNCTION_NOT_FOUND, "Function Not Found")
        used_v2 = used - reserved
        return SimpleNamespace(
            version=version, total=total, reserved=reserved, free=total - used, used=used_v2
        )

    def nvmlDeviceGetPowerUsage(self, handle: str) -> int:
        if self._instance(handle) is not None:
            raise self._not_supported()
        return int(self.power_w * 1000)  # mW

    def nvmlDeviceGetClockInfo(self, handle: str, which: int) -> int:
        if which == self.NVML_CLOCK_MEM:
            raise self._not_supported()
        return 1980

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: str) -> int:
        if not self.energy or self._instance(handle) is not None:
            raise self._not_supported()
        self.energy_reads += 1
        period = self.energy_update_period_s
        elapsed = max(0.0, self.clock() - self._t0)
        updated_s = math.floor(elapsed / period + 1e-9) * period if period > 0 else elapsed
        return self._energy_base_mj + math.floor(self.power_w * updated_s * 1000.0 + 1e-6)

    def reload_driver(self) -> None:
        """The driver reloads: the energy counter starts again from zero."""
        self._t0 = self.clock()
        self._energy_base_mj = 0

    # -- GPM ---------------------------------------------------------------------------------

    def nvmlGpmQueryDeviceSupport(self, handle: str) -> Any:
        return SimpleNamespace(isSupportedDevice=int(self.gpm))

    def nvmlGpmSampleAlloc(self) -> Any:
        return SimpleNamespace(gpu=None, instance_id=None)

    def nvmlGpmSampleGet(self, handle: str, sample: Any) -> None:
        if not self.gpm:
            raise self._not_supported()
        sample.gpu, sample.instance_id = self._gpu(handle), None

    def nvmlGpmMigSampleGet(self, handle: str, gpu_instance_id: int, sample: Any) -> None:
        gpu = self._gpu(handle)
        if not self.gpm or not 1 <= gpu_instance_id <= len(self.mig.get(gpu, ())):
            raise self._not_supported()
        sample.gpu, sample.instance_id = gpu, gpu_instance_id

    def nvmlGpmSampleFree(self, sample: Any) -> None:
        self.freed += 1

    def _activity(self, instance_id: int | None) -> dict[int, float]:
        if instance_id is None:
            return {
                self.NVML_GPM_METRIC_SM_UTIL: 61.5,
                self.NVML_GPM_METRIC_ANY_TENSOR_UTIL: 40.0,
                self.NVML_GPM_METRIC_GRAPHICS_UTIL: 80.0,
                self.NVML_GPM_METRIC_DRAM_BW_UTIL: 25.0,
            }
        return {
            self.NVML_GPM_METRIC_SM_UTIL: 20.0 * instance_id,
            self.NVML_GPM_METRIC_ANY_TENSOR_UTIL: 10.0 * instance_id,
            self.NVML_GPM_METRIC_GRAPHICS_UTIL: 25.0 * instance_id,
            self.NVML_GPM_METRIC_DRAM_BW_UTIL: 5.0 * instance_id,
        }

    def nvmlGpmMetricsGet(self, request: Any) -> Any:
        values = self._activity(getattr(request.sample2, "instance_id", None))
        for metric in request.metrics[: request.numMetrics]:
            if metric.metricId in self.refused or metric.metricId not in values:
                metric.nvmlReturn, metric.value = self.NVML_ERROR_NOT_SUPPORTED, 0.0
            elif metric.metricId in self.nan:
                metric.nvmlReturn, metric.value = self.NVML_SUCCESS, float("nan")
            else:
                metric.nvmlReturn, metric.value = self.NVML_SUCCESS, values[metric.metricId]
        return request
