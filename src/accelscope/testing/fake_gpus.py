"""Fake CUDA devices for machines without a GPU: devices to discover, and a record of every
CUDA call, so the CUDA paths (device selection, timing on the right device, "this process never
touched the GPU") are tested anywhere.

``FakeGpus(devices)`` is a context manager. Inside it, ``torch.cuda`` reports the given devices
(:data:`H100_SXM` and friends: device properties as torch returns them, with or without the clock
fields CUDA 13 removed), :func:`accelscope.hardware.fingerprint.collect_environment` discovers them
(its cache is cleared on the way in and out), and the calls accelscope makes (synchronise,
events on a stream, memory statistics, current device) answer from fakes and are recorded in
:attr:`FakeGpus.calls`. ``torch.cuda._lazy_init`` is replaced by a tripwire: it records
``"_lazy_init"`` and raises, as a CPU build of torch would. Every operation that would create
CUDA state in this process goes through it, also from C++ (``tensor.to("cuda")``, a module moved
to a GPU, a tensor allocated on one), so :attr:`FakeGpus.touched_device` says whether the process
did more than read device facts.

Nothing is downloaded and no GPU is needed; everything is put back on exit.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "A100_SXM",
    "DISCOVERY_CALLS",
    "H100_SXM",
    "H100_SXM_CUDA12",
    "H200",
    "L4",
    "T4",
    "FakeGpu",
    "FakeGpus",
]

DISCOVERY_CALLS = frozenset({"is_available", "device_count", "get_device_properties"})
"""The calls that only read device facts (what discovery does: no memory, nothing run)."""


@dataclass(frozen=True, kw_only=True)
class FakeGpu:
    """One fake device, as ``torch.cuda.get_device_properties`` describes it. Clock fields left
    ``None`` are absent from the properties (CUDA 13 removed ``clock_rate``,
    ``memory_clock_rate`` and ``memory_bus_width`` from ``cudaDeviceProp``)."""

    name: str
    total_memory: int
    major: int
    minor: int
    multi_processor_count: int
    uuid: str
    L2_cache_size: int = 50 << 20
    clock_rate: int | None = None
    """Maximum SM clock in kHz (absent under CUDA 13)."""
    memory_clock_rate: int | None = None
    """Memory clock in kHz (absent under CUDA 13)."""
    memory_bus_width: int | None = None
    """Memory bus width in bits (absent under CUDA 13)."""

    def properties(self) -> Any:
        """The object ``get_device_properties`` returns (absent fields really absent)."""
        fields = {k: v for k, v in vars(self).items() if v is not None}
        return types.SimpleNamespace(**fields)


H100_SXM = FakeGpu(
    name="NVIDIA H100 80GB HBM3",
    total_memory=85_029_158_912,
    major=9,
    minor=0,
    multi_processor_count=132,
    uuid="5e2f0c1a-1111-2222-3333-444455556666",
)
"""An H100 SXM as torch 2.11 built for CUDA 13 reports it: no clock fields."""

H100_SXM_CUDA12 = FakeGpu(
    name="NVIDIA H100 80GB HBM3",
    total_memory=85_029_158_912,
    major=9,
    minor=0,
    multi_processor_count=132,
    uuid="5e2f0c1a-1111-2222-3333-444455556666",
    clock_rate=1_980_000,
    memory_clock_rate=2_619_000,
    memory_bus_width=5120,
)
"""The same H100 under CUDA 12: the driver's maximum boost clock and the memory clock."""

H200 = FakeGpu(
    name="NVIDIA H200",
    total_memory=150_754_820_096,
    major=9,
    minor=0,
    multi_processor_count=132,
    uuid="7a1b2c3d-1111-2222-3333-444455556666",
)
A100_SXM = FakeGpu(
    name="NVIDIA A100-SXM4-80GB",
    total_memory=85_899_345_920,
    major=8,
    minor=0,
    multi_processor_count=108,
    uuid="0b1c2d3e-1111-2222-3333-444455556666",
    L2_cache_size=40 << 20,
)
L4 = FakeGpu(
    name="NVIDIA L4",
    total_memory=24_152_899_584,
    major=8,
    minor=9,
    multi_processor_count=58,
    uuid="9c8d7e6f-1111-2222-3333-444455556666",
    L2_cache_size=48 << 20,
)
T4 = FakeGpu(
    name="Tesla T4",
    total_memory=15_835_660_288,
    major=7,
    minor=5,
    multi_processor_count=40,
    uuid="1a2b3c4d-1111-2222-3333-444455556666",
    L2_cache_size=4 << 20,
)
"""A Turing GPU: no TF32 (compute capability 7.5)."""


class _FakeEvent:
    """A timing event whose times come from the fake's device clock (milliseconds)."""

    def __init__(self, owner: FakeGpus) -> None:
        self._owner = owner
        self.recorded_ms: float | None = None
        self.stream: Any = None

    def record(self, stream: Any = None) -> None:
        where = f":{stream.device_index}" if isinstance(stream, FakeStream) else ""
        self._owner.calls.append(f"event.record{where}")
        self.stream = stream
        self.recorded_ms = self._owner.device_clock_ms

    def synchronize(self) -> None:
        self._owner.calls.append("event.synchronize")

    def elapsed_time(self, end: _FakeEvent) -> float:
        if self.recorded_ms is None or end.recorded_ms is None:
            raise RuntimeError("elapsed_time needs both events recorded")
        return end.recorded_ms - self.recorded_ms


@dataclass(frozen=True)
class FakeStream:
    """A device's current stream (what ``torch.cuda.current_stream(i)`` returns here)."""

    device_index: int


class _DeviceContext:
    def __init__(self, owner: FakeGpus, index: int) -> None:
        self._owner, self._index = owner, index
        self._before = 0

    def __enter__(self) -> None:
        self._before = self._owner.current
        self._owner.current = self._index

    def __exit__(self, *exc: object) -> None:
        self._owner.current = self._before


class FakeGpus:
    """``torch.cuda`` with fake ``devices`` (see the module docstring).

    ``runtime`` is what ``torch.version.cuda`` reports and ``driver`` the driver version
    discovery finds. ``device_clock_ms`` is the device time events record (advance it to fake
    kernel time). ``calls`` lists the faked calls in order (``synchronize:1`` names the device).
    """

    def __init__(
        self,
        devices: Sequence[FakeGpu] = (H100_SXM,),
        *,
        runtime: str = "13.0",
        driver: str = "580.65.06",
    ) -> None:
        self.devices = tuple(devices)
        self.runtime = runtime
        self.driver = driver
        self.calls: list[str] = []
        self.current = 0
        self.device_clock_ms = 0.0
        self._saved: list[tuple[Any, str, Any]] = []

    @property
    def touched_device(self) -> bool:
        """Whether anything beyond reading device facts happened (memory, streams, sync, a
        tensor or module on a GPU): what would create CUDA state in a real process."""
        return any(call.split(":")[0] not in DISCOVERY_CALLS for call in self.calls)

    def _check(self, device: Any) -> int:
        if device is None:
            return self.current
        value = getattr(device, "index", device)
        index = self.current if value is None else int(value)
        if not 0 <= index < len(self.devices):
            raise RuntimeError(f"fake CUDA: invalid device ordinal {index}")
        return index

    def _record(self, name: str, result: Callable[[], Any]) -> Callable[[], Any]:
        def call() -> Any:
            self.calls.append(name)
            return result()

        return call

    def _indexed(self, name: str, result: Callable[[int], Any]) -> Callable[..., Any]:
        def call(device: Any = None) -> Any:
            index = self._check(device)
            self.calls.append(f"{name}:{index}")
            return result(index)

        return call

    def _lazy_init(self) -> None:
        self.calls.append("_lazy_init")
        raise RuntimeError("fake CUDA: this process would initialise CUDA here")

    def _set_device(self, device: Any) -> None:
        index = self._check(device)
        self.calls.append(f"set_device:{index}")
        self.current = index

    def _patch(self, owner: Any, name: str, value: Any) -> None:
        self._saved.append((owner, name, getattr(owner, name)))
        setattr(owner, name, value)

    def __enter__(self) -> FakeGpus:
        import torch

        from accelscope.hardware import fingerprint, gpu

        cuda = torch.cuda
        self._patch(cuda, "is_available", self._record("is_available", lambda: True))
        self._patch(cuda, "device_count", self._record("device_count", lambda: len(self.devices)))
        self._patch(
            cuda,
            "get_device_properties",
            self._indexed("get_device_properties", lambda i: self.devices[i].properties()),
        )
        self._patch(cuda, "_lazy_init", self._lazy_init)
        self._patch(cuda, "synchronize", self._indexed("synchronize", lambda i: None))
        self._patch(cuda, "current_stream", self._indexed("current_stream", FakeStream))
        self._patch(cuda, "Event", lambda enable_timing=False: _FakeEvent(self))
        self._patch(cuda, "device", lambda index: _DeviceContext(self, self._check(index)))
        self._patch(cuda, "set_device", self._set_device)
        self._patch(cuda, "current_device", self._record("current_device", lambda: self.current))
        self._patch(
            cuda,
            "mem_get_info",
            self._indexed("mem_get_info", lambda i: (self.devices[i].total_memory // 2,) * 2),
        )
        for stat in ("reset_peak_memory_stats", "max_memory_allocated", "max_memory_reserved"):
            self._patch(cuda, stat, self._indexed(stat, lambda i: 0))
        self._patch(torch.version, "cuda", self.runtime)
        self._patch(gpu, "driver_version", lambda: self.driver)
        fingerprint.collect_environment.cache_clear()
        return self

    def __exit__(self, *exc: object) -> None:
        from accelscope.hardware import fingerprint

        for owner, name, value in reversed(self._saved):
            setattr(owner, name, value)
        self._saved.clear()
        fingerprint.collect_environment.cache_clear()
