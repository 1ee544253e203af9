"""Device synchronisation hooks and device-side interval timers for the measurement core.

CPU eager work is finished when the call returns, so no hook is needed there. CUDA work is
asynchronous: it is timed with CUDA events recorded on the current stream, read after the end
event has completed, never with a bare host clock.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from accelscope.errors import NotAvailableError
from accelscope.spec import Device

__all__ = ["CudaEventInterval", "IntervalTimer", "device_synchronizer"]


class IntervalTimer(Protocol):
    """Measures the duration of the work issued between ``start`` and ``stop``, in seconds."""

    def start(self) -> None:
        """Mark the beginning of one timed call."""

    def stop(self) -> float:
        """Wait until the work is finished and return its duration in seconds."""


class CudaEventInterval:
    """Times work on one CUDA device with a pair of timing events (seconds), recorded on that
    device's current stream (not the process's current device: ``cuda:1`` work is timed on
    device 1's stream even while device 0 is current)."""

    def __init__(self, device_index: int = 0) -> None:
        import torch

        if not torch.cuda.is_available():
            raise NotAvailableError("CUDA timing not available: torch sees no CUDA device")
        self._device_index = device_index
        with torch.cuda.device(device_index):
            self._start: Any = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            self._end: Any = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        self._torch = torch

    def _stream(self) -> Any:
        return self._torch.cuda.current_stream(self._device_index)

    def start(self) -> None:
        """Record the start event on the device's current stream."""
        self._start.record(self._stream())

    def stop(self) -> float:
        """Record the end event, wait for it, return the elapsed device time in seconds."""
        self._end.record(self._stream())
        self._end.synchronize()
        return float(self._start.elapsed_time(self._end)) / 1000.0


def device_synchronizer(device: Device, device_index: int = 0) -> Callable[[], None]:
    """A function that blocks until all queued work on ``device`` is done (no-op on CPU)."""
    if device is Device.CPU:
        return lambda: None
    import torch

    if not torch.cuda.is_available():
        raise NotAvailableError("device 'cuda' not available: torch sees no CUDA device")

    def synchronize() -> None:
        torch.cuda.synchronize(device_index)

    return synchronize
