"""Saturation: when a rate or concurrency sweep that does not search stops, and why.

A sweep step past the server's capacity measures only its queue: every later step is slower
and says nothing new, and on a shared server it harms the other users. ``llm`` stops a sweep
at the first step found saturated and names it (``--past-saturation`` measures every step):

- **an arrival rate** is saturated when the requests completed in its steady window fall short
  of the requests that arrived in it by more than a server keeping up would: even at the upper
  95 % bound of the completions (a Poisson count's: ``completed x (1 + 1.645 /
  sqrt(completed))``), they stay under :data:`SATURATION_RATIO` of the arrivals less the
  requests a server keeping up would still have in flight. That allowance is the window's
  arrival rate times how much longer a request takes with no queue than the ramp-up before
  the window (``rate x max(0, L0 - ramp)``, ``L0`` the median of the trial's three shortest
  end-to-end latencies: a request served with no queue ahead of it; the first requests of an
  overloaded trial are): so a short trial of long requests is not called saturated for its
  latency alone, and a queue that grows over the window is, however deep the overload.
  Arrivals and completions are counted in the same window, so the offered load is what the
  schedule sent, not a Poisson draw away from the nominal rate;
- **a concurrency** is saturated when its request throughput grew by less than
  :data:`MARGINAL_GAIN` of the concurrency's own growth over the previous, lower step (from 1 to
  2 streams: under 10 % more requests/s) while its median TTFT rose by more than
  :data:`TTFT_RISE` - 1: the added streams only wait (Little's law: at a fixed throughput the
  latency grows with the streams). A server still scaling gains 60-100 % from doubling its
  streams, far from the bound; a window's count moves the gain by about 5 % (18 requests),
  within it. A step that still gains is not called saturated; the next is compared in turn.

GuideLLM's users asked for this (vllm-project/guidellm #552, #242); the capacity search
(``--capacity``) already bounds its own steps.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from accelscope.llm.documents import RequestRecord, TrialSummary
from accelscope.llm.summary import steady_window

__all__ = [
    "MARGINAL_GAIN",
    "SATURATION_RATIO",
    "TTFT_RISE",
    "concurrency_saturated",
    "rate_saturated",
]

SATURATION_RATIO = 0.98
"""Completions under this share of the window's arrivals (at their upper bound): saturated."""
MARGINAL_GAIN = 0.10
"""A concurrency step whose request throughput grew by less than this share of the
concurrency's growth gained (almost) nothing from its added streams."""
TTFT_RISE = 1.10
"""... and whose median TTFT rose past this multiple of the previous step's only queued."""
_Z_95 = 1.645  # one-sided 95 %


def rate_saturated(records: Sequence[RequestRecord], label: str) -> str | None:
    """Why the rate trial ``label`` (its ``records``) saturated the server, or ``None``."""
    kept = [r for r in records if not r.cancelled]
    if len(kept) < 4:
        return None
    start, end = steady_window(kept)
    first = min(r.scheduled_s for r in kept)
    length = end - start
    arrived = sum(1 for r in kept if start <= r.scheduled_s <= end)
    if length <= 0 or arrived < 4:
        return None
    completed = sum(1 for r in kept if not r.error and start <= r.end_s <= end)
    shortest = sorted(r.end_s - r.scheduled_s for r in kept if not r.error)[:3]
    if not shortest:
        return None
    in_flight = arrived / length * max(0.0, statistics.median(shortest) - (start - first))
    upper = completed * (1 + _Z_95 / math.sqrt(completed)) if completed > 0 else 0.0
    if upper + in_flight >= SATURATION_RATIO * arrived:
        return None
    return (
        f"saturated at {label}: {completed} requests completed in the steady window against "
        f"{arrived} arrived ({completed / length:.2f} of {arrived / length:.2f} req/s; "
        f"{in_flight:.0f} allowed still in flight; under {SATURATION_RATIO:g}x even at the "
        "upper 95 % bound): the queue grew, so higher rates would measure only the queue"
    )


def concurrency_saturated(
    summary: TrialSummary,
    label: str,
    previous: TrialSummary,
    previous_label: str,
    *,
    streams_ratio: float,
) -> str | None:
    """Why the concurrency trial ``label`` saturated the server, set against the previous,
    lower concurrency's trial (``streams_ratio``: this concurrency over that one, > 1), or
    ``None``."""
    if not streams_ratio > 1:
        raise ValueError(f"a saturation step compares a higher concurrency, got x{streams_ratio}")
    now, before = summary.throughput, previous.throughput
    ttft, ttft_before = summary.metrics.ttft_s.p50, previous.metrics.ttft_s.p50
    if now is None or before is None or ttft is None or not ttft_before:
        return None
    if before.requests_per_s <= 0:
        return None
    gain = now.requests_per_s / before.requests_per_s
    rise = ttft / ttft_before
    if gain - 1 >= MARGINAL_GAIN * (streams_ratio - 1) or rise <= TTFT_RISE:
        return None
    return (
        f"saturated at {label}: {now.requests_per_s:.2f} req/s against {before.requests_per_s:.2f} "
        f"at {previous_label} (x{gain:.2f} for x{streams_ratio:g} the streams) while the "
        f"median TTFT rose x{rise:.2f}: more streams would only wait"
    )
