"""Saturation: when a rate or concurrency sweep that does not search stops, and why.

A sweep step past the server's capacity measures only its queue: every later step is slower
and says nothing new, and on a shared server it harms the other users. ``llm`` stops a sweep
at the first step found saturated and names it (``--past-saturation`` measures every step):

- **an arrival rate** is saturated when the requests completed in its steady window stay under
  :data:`SATURATION_RATIO` of the requests that arrived in it, even at the upper 95 % bound of
  the completions (a Poisson count's: ``completed x (1 + 1.645 / sqrt(completed))``): the queue
  grew over the window. Arrivals and completions are both counted in the window, so the offered
  load is what the schedule actually sent (not the nominal rate, a Poisson draw away) and a
  short trial's latency shifts both alike;
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

from accelscope.llm.documents import TrialSummary

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


def rate_saturated(summary: TrialSummary, label: str) -> str | None:
    """Why the rate trial ``label`` saturated the server, or ``None``."""
    window, throughput = summary.window, summary.throughput
    if window is None or throughput is None or window.length_s <= 0 or window.requests < 1:
        return None
    arrived = window.requests
    completed = throughput.requests_per_s * window.length_s
    upper = completed * (1 + _Z_95 / math.sqrt(completed)) if completed > 0 else 0.0
    if upper >= SATURATION_RATIO * arrived:
        return None
    return (
        f"saturated at {label}: {completed:.0f} requests completed in the steady window against "
        f"{arrived} arrived ({throughput.requests_per_s:.2f} of "
        f"{arrived / window.length_s:.2f} req/s; under {SATURATION_RATIO:g}x even at the upper "
        "95 % bound): the queue grew, so higher rates would measure only the queue"
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
