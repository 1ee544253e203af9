"""Peak memory of a measured region: process RSS high-water on CPU, allocator peaks on CUDA.

On Linux the RSS high-water mark (``VmHWM``) is reset by writing ``5`` to
``/proc/self/clear_refs``, so the peak belongs to the measured region, not to the whole process
life. Where that is not possible the lifetime peak (``getrusage``) is used and the method says so.
"""

from __future__ import annotations

import resource
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

__all__ = ["MemoryPeak", "MemoryProbe", "track_peak_memory"]

_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


def _status_kib(field_name: str) -> int | None:
    try:
        for line in _STATUS.read_text().splitlines():
            if line.startswith(field_name + ":"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def _reset_rss_high_water() -> bool:
    try:
        _CLEAR_REFS.write_text("5")
    except OSError:
        return False
    return True


def _lifetime_peak_rss_bytes() -> int:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak) if sys.platform == "darwin" else int(peak) * 1024


@dataclass(frozen=True, kw_only=True)
class MemoryPeak:
    """Peak memory over a measured region, in bytes.

    ``rss_method`` is ``"region"`` when the high-water mark was reset at the region's start and
    ``"process"`` when only the process-lifetime peak was available. CUDA fields are ``None``
    when no CUDA device was tracked.
    """

    rss_peak_bytes: int
    rss_start_bytes: int
    rss_method: str
    cuda_allocated_peak_bytes: int | None = None
    cuda_reserved_peak_bytes: int | None = None


class MemoryProbe:
    """Reads peak memory for a region; ``cuda_device`` enables allocator statistics."""

    def __init__(self, cuda_device: int | None = None) -> None:
        self._cuda_device = cuda_device
        self._method = "process"
        self._start_bytes = 0

    def begin(self) -> None:
        """Reset high-water marks at the start of the region."""
        self._method = "region" if _reset_rss_high_water() else "process"
        current = _status_kib("VmRSS")
        self._start_bytes = current * 1024 if current is not None else 0
        if self._cuda_device is not None:
            import torch

            # The allocator refuses a device before CUDA is initialised ("Invalid device
            # argument", seen on an H100 when bench probed before the model was moved).
            torch.cuda.init()  # type: ignore[no-untyped-call]
            torch.cuda.reset_peak_memory_stats(self._cuda_device)

    def end(self) -> MemoryPeak:
        """Read the peaks accumulated since :meth:`begin`."""
        high_water = _status_kib("VmHWM") if self._method == "region" else None
        peak = high_water * 1024 if high_water is not None else _lifetime_peak_rss_bytes()
        allocated: int | None = None
        reserved: int | None = None
        if self._cuda_device is not None:
            import torch

            allocated = int(torch.cuda.max_memory_allocated(self._cuda_device))
            reserved = int(torch.cuda.max_memory_reserved(self._cuda_device))
        return MemoryPeak(
            rss_peak_bytes=peak,
            rss_start_bytes=self._start_bytes,
            rss_method=self._method if high_water is not None else "process",
            cuda_allocated_peak_bytes=allocated,
            cuda_reserved_peak_bytes=reserved,
        )


@contextmanager
def track_peak_memory(cuda_device: int | None = None) -> Iterator[list[MemoryPeak]]:
    """Context manager yielding a list that holds the :class:`MemoryPeak` after the block."""
    probe = MemoryProbe(cuda_device)
    box: list[MemoryPeak] = []
    probe.begin()
    try:
        yield box
    finally:
        box.append(probe.end())
