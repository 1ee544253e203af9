"""Memory bandwidth by STREAM-style kernels over buffers far larger than the last-level cache.

Counted bytes (what the kernel must move, stated explicitly):

- copy ``b = a``: 2 x N x item bytes (read ``a``, write ``b``);
- triad ``a = b + s·c``: 3 x N x item bytes (read ``b`` and ``c``, write ``a``).

Write-allocate (the line read before a store that is not non-temporal) is **not** counted, as in
STREAM, so the figure is what a kernel can count on, not the raw DRAM traffic (which is up to
1.5x / 1.33x higher). The rate is the fastest repetition.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from accelscope.hardware.sync import IntervalTimer
from accelscope.roofline.kernel_search import measure_rate

__all__ = ["ITEM_BYTES", "StreamSize", "measure_streams", "stream_size"]

ITEM_BYTES = 4
"""Element size of the stream buffers (float32)."""
_LLC_FACTOR = 4
_MIN_BUFFER_BYTES = 64 << 20
_MEMORY_SHARE = 0.25


class StreamSize:
    """Elements per buffer and a note on how the size was chosen."""

    def __init__(self, elements: int, note: str) -> None:
        self.elements = elements
        self.note = note


def stream_size(llc_bytes: int | None, available_bytes: int | None, arrays: int = 3) -> StreamSize:
    """Buffers of ``4 x LLC`` each (at least 64 MiB), capped so the ``arrays`` buffers use at
    most a quarter of the available memory; the note says when the cap made them smaller."""
    wanted = max(_MIN_BUFFER_BYTES, _LLC_FACTOR * (llc_bytes or 0))
    note = (
        (
            f"{wanted / 2**20:,.0f} MiB per buffer = {_LLC_FACTOR} x the "
            f"{(llc_bytes or 0) / 2**20:,.0f} MiB last-level cache"
        )
        if llc_bytes
        else (f"{wanted / 2**20:,.0f} MiB per buffer (last-level cache size unknown)")
    )
    if available_bytes:
        cap = int(available_bytes * _MEMORY_SHARE / arrays)
        if cap < wanted:
            wanted = max(cap, _MIN_BUFFER_BYTES)
            note = (
                f"{wanted / 2**20:,.0f} MiB per buffer: capped by available memory, "
                f"below {_LLC_FACTOR} x LLC, so caches may inflate the figure"
            )
    return StreamSize(wanted // ITEM_BYTES, note)


def measure_streams(
    elements: int,
    *,
    device: str = "cpu",
    clock: Callable[[], float] = time.perf_counter,
    min_time_s: float = 0.5,
    interval: IntervalTimer | None = None,
    sync: Callable[[], None] | None = None,
) -> dict[str, float]:
    """Bytes/s of copy and triad over ``elements``-long float32 buffers on ``device``."""
    import torch

    a = torch.zeros(elements, dtype=torch.float32, device=device)
    b = torch.ones(elements, dtype=torch.float32, device=device)
    c = torch.full((elements,), 2.0, dtype=torch.float32, device=device)
    scalar = 3.0

    def copy() -> object:
        return b.copy_(a)

    def triad() -> object:
        return torch.add(b, c, alpha=scalar, out=a)

    rates = {}
    for name, kernel, moved in (("copy", copy, 2), ("triad", triad, 3)):
        rates[name] = measure_rate(
            kernel,
            moved * elements * ITEM_BYTES,
            clock=clock,
            min_time_s=min_time_s,
            min_reps=5,
            interval=interval,
            sync=sync,
        )
    return rates
