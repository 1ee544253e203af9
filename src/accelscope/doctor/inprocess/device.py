"""Device busy/idle per step from CUDA events, recorded on the current stream by the host.

An event completes when the device has finished everything queued before it. Two events
recorded around a host wait that queues no device work (waiting for the DataLoader) therefore
measure how long the device sat idle during that wait: the first completes when the queued work
drains, the second as soon as it is reached. ``elapsed_time`` between consecutive step-boundary
events is the step's duration on the device timeline. Events are read once, after the last
step, so recording them never synchronises the loop.

The event factory, the "is CUDA in use" probe and the synchronise call are seams: tests drive
the arithmetic with fake events that carry their own device timestamps.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["CudaTimeline", "cuda_timeline"]


class CudaTimeline:
    """Records CUDA events at step boundaries and around input waits; see the module doc."""

    def __init__(
        self,
        event_factory: Callable[[], Any],
        in_use: Callable[[], bool],
        synchronize: Callable[[], None],
    ) -> None:
        self._event = event_factory
        self._in_use = in_use
        self._synchronize = synchronize
        self._boundaries: dict[int, Any] = {}
        self._idle: dict[int, list[tuple[Any, Any]]] = {}
        self._open: Any = None
        self._step = 0

    def boundary(self, index: int) -> None:
        """Mark the start of step ``index`` (only once CUDA is in use)."""
        self._step = index
        if not self._in_use():
            return
        event = self._event()
        event.record()
        self._boundaries[index] = event

    def idle_begin(self) -> None:
        """Mark the start of a host wait that queues no device work."""
        if not self._boundaries:  # CUDA not in use yet
            return
        event = self._event()
        event.record()
        self._open = event

    def idle_end(self) -> None:
        """Mark the end of the wait started by :meth:`idle_begin`."""
        if self._open is None:
            return
        event = self._event()
        event.record()
        self._idle.setdefault(self._step, []).append((self._open, event))
        self._open = None

    def collect(self, steps: int) -> list[dict[str, float] | None]:
        """Per step: ``{"device_s", "idle_s", "busy_s"}`` from the events, or ``None`` where
        a boundary was not recorded (CUDA not in use yet). Synchronises once."""
        if not self._boundaries:
            return [None] * steps
        self._synchronize()
        out: list[dict[str, float] | None] = []
        for index in range(steps):
            start, end = self._boundaries.get(index), self._boundaries.get(index + 1)
            if start is None or end is None:
                out.append(None)
                continue
            device_s = float(start.elapsed_time(end)) / 1e3
            idle_s = sum(float(a.elapsed_time(b)) / 1e3 for a, b in self._idle.get(index, []))
            idle_s = min(max(idle_s, 0.0), device_s)
            out.append({"device_s": device_s, "idle_s": idle_s, "busy_s": device_s - idle_s})
        return out


def cuda_timeline() -> tuple[CudaTimeline | None, str]:
    """A timeline on the real CUDA API, or ``None`` and why it is not available."""
    try:
        import torch
    except ImportError:
        return None, "not available: torch is not importable"
    if not torch.cuda.is_available():
        return None, "not available: no CUDA device"

    def event() -> Any:
        return torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]

    def in_use() -> bool:
        return bool(torch.cuda.is_initialized())  # type: ignore[no-untyped-call]

    synchronize = torch.cuda.synchronize  # the original, before any instrumentation wraps it
    return CudaTimeline(event, in_use, synchronize), "measured: CUDA events per step"
