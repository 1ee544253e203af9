"""Measured time per dispatched operator, from ``torch.profiler``, matched to the counted ops.

The counting pass (a dispatch mode, :mod:`.counting`) and the timing pass are separate runs:
the dispatch mode's Python overhead would otherwise land inside every operator's time. Both see
the same aten calls in the same order, so the profiler's top-level ``aten::`` events are matched
to the counted calls **by name, in order** (see :func:`match_event_times`).
Times are host wall time of each call on CPU and the device time of its kernels on CUDA.
``torch.profiler`` reports µs; they become seconds where its events are read
(:func:`profile_events`), so everything here is in seconds.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ProfiledEvent",
    "match_event_times",
    "per_call_times",
    "profile_events",
    "top_level_events",
]


@dataclass(frozen=True, kw_only=True)
class ProfiledEvent:
    """One profiler event: name, host interval in seconds, and device time of its kernels in
    seconds."""

    name: str
    start_s: float
    end_s: float
    device_time_s: float = 0.0
    nested: bool = False
    """True when another ``aten::`` event encloses this one (it is part of that op)."""


def top_level_events(events: Sequence[ProfiledEvent]) -> list[ProfiledEvent]:
    """The ``aten::`` events not enclosed by another ``aten::`` event, by start time."""
    return sorted(
        (e for e in events if e.name.startswith("aten::") and not e.nested),
        key=lambda e: e.start_s,
    )


def match_event_times(
    names: Sequence[str], events: Sequence[ProfiledEvent], *, device: bool = False
) -> list[float | None]:
    """Seconds of each call in ``names`` (dispatch order), ``None`` where no event matched.

    The profiler's top-level events are a subsequence of the dispatched calls: a call the
    dispatch mode sees may run *inside* another op's profiler scope (autocast's casts run inside
    the ``aten::conv2d`` that needs them, and their time is in that op's). So each top-level event,
    in start order, takes the next not-yet-matched call of the same name; an event with no such
    call is ignored. ``device`` picks kernel time over host time.
    """
    times: list[float | None] = [None] * len(names)
    position = 0
    for event in top_level_events(events):
        found = next((i for i in range(position, len(names)) if names[i] == event.name), None)
        if found is None:
            continue
        seconds = event.device_time_s if device else event.end_s - event.start_s
        times[found] = max(0.0, seconds)
        position = found + 1
    return times


def per_call_times(
    names: Sequence[str], times: Sequence[float | None], iterations: int
) -> list[float | None]:
    """Median over ``iterations`` repeats of each call's seconds (``times`` holds
    ``iterations x len(names)`` entries, repeat-major); ``None`` where no repeat matched."""
    count = len(names)
    result: list[float | None] = []
    for index in range(count):
        found = [t for r in range(iterations) if (t := times[r * count + index]) is not None]
        result.append(statistics.median(found) if found else None)
    return result


_S_PER_US = 1e-6
"""``torch.profiler``'s event times (``time_range``, ``device_time_total``) are in µs."""


def _converted(raw: Any) -> list[ProfiledEvent]:
    """The profiler's events as :class:`ProfiledEvent` (µs converted to seconds here)."""
    converted = []
    for event in raw:
        parent, nested = event.cpu_parent, False
        while parent is not None:
            if str(parent.name).startswith("aten::"):
                nested = True
                break
            parent = parent.cpu_parent
        converted.append(
            ProfiledEvent(
                name=str(event.name),
                start_s=float(event.time_range.start) * _S_PER_US,
                end_s=float(event.time_range.end) * _S_PER_US,
                device_time_s=float(getattr(event, "device_time_total", 0.0) or 0.0) * _S_PER_US,
                nested=nested,
            )
        )
    return converted


def profile_events(
    fn: Callable[[], Any],
    iterations: int,
    *,
    cuda: bool = False,
    sync: Callable[[], None] | None = None,
) -> list[ProfiledEvent]:
    """Run ``fn`` ``iterations`` times under ``torch.profiler``; return its events."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        for _ in range(iterations):
            fn()
        if sync is not None:
            sync()
    return _converted(prof.events())
