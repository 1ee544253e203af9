"""A Chrome / Perfetto trace (``traceEvents``, complete ``X`` events in µs) of the few
instrumented steps the run traced, one track for the steps and one for their phases.

The profile's spans are in seconds; the trace format's timestamps and durations are in µs by
its spec, so they are converted here, when the document is written, and nowhere else."""

from __future__ import annotations

from typing import Any

from accelscope.doctor.profile import Profile

__all__ = ["chrome_trace"]

_PID = 1
_STEP_TID, _PHASE_TID = 1, 2
_US_PER_S = 1e6
_MIN_DUR_US = 0.001
"""Shortest duration written, so a zero-length span still shows (1 ns)."""


def chrome_trace(profile: Profile, title: str) -> dict[str, Any]:
    """The trace document; open it in ui.perfetto.dev or chrome://tracing."""
    events: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": _PID, "args": {"name": title}},
        {
            "ph": "M",
            "name": "thread_name",
            "pid": _PID,
            "tid": _STEP_TID,
            "args": {"name": "steps"},
        },
        {
            "ph": "M",
            "name": "thread_name",
            "pid": _PID,
            "tid": _PHASE_TID,
            "args": {"name": "phases"},
        },
    ]
    index = profile.warmup
    for span in sorted(profile.spans, key=lambda s: (s.start_s, -s.duration_s)):
        event: dict[str, Any] = {
            "ph": "X",
            "pid": _PID,
            "ts": span.start_s * _US_PER_S,
            "dur": max(span.duration_s * _US_PER_S, _MIN_DUR_US),
            "cat": "doctor",
        }
        if span.name == "step":
            event |= {"name": f"step {index}", "tid": _STEP_TID}
            index += 1
        else:
            event |= {"name": span.name, "tid": _PHASE_TID, "args": {"depth": span.depth}}
        events.append(event)
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {"generator": "accelscope doctor", "mode": profile.mode or ""},
    }
