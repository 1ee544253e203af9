"""Client and server on one clock: when an SLO term started failing, and what the server was
doing then.

The client's records and the server's scrapes (:class:`~accelscope.llm.documents.ServerSample`)
share the trial's clock (seconds from its start). For each SLO term the trial *missed*, the
requests are taken in order of scheduled arrival and a window of ``W`` of them (a tenth of the
trial, at least 10) slides along; the term **broke** in the first window whose share over the
bound exceeds what the percentile allows (more than 10 % for p90), at the scheduled arrival of
that window's first request over the bound (errors and missing values count as over, as in the
verdict). The break is then set against the server's last scrape before it: requests running
and waiting, KV-cache usage, preemptions so far, and since when requests had been waiting.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from accelscope.llm.documents import (
    RequestRecord,
    ServerSample,
    Slo,
    SloBreak,
    TrialSummary,
    metric_name,
)
from accelscope.llm.summary import request_values

__all__ = ["MIN_WINDOW_REQUESTS", "slo_breaks"]

MIN_WINDOW_REQUESTS = 10
"""The sliding window holds a tenth of the trial's requests, at least this many."""


def _over(record: RequestRecord, metric: str, bound: float) -> bool:
    value = request_values(record).get(metric)
    return bool(record.error) or value is None or value > bound


def _state_at(timeline: Sequence[ServerSample], at_s: float) -> ServerSample | None:
    before = [s for s in timeline if s.t_s <= at_s]
    if before:
        return before[-1]
    return timeline[0] if timeline else None


def _server_text(
    timeline: Sequence[ServerSample], at_s: float, why_not: str
) -> tuple[str, ServerSample | None, float | None]:
    state = _state_at(timeline, at_s)
    if state is None:
        return f"server state: {why_not or 'not measured'}", None, None
    waiting_since = next((s.t_s for s in timeline if s.waiting), None)
    parts = []
    if state.waiting is None:
        parts.append("requests waiting: not measured (the server does not export it)")
    elif waiting_since is not None and waiting_since <= at_s:
        parts.append(f"{at_s - waiting_since:.1f} s after requests began waiting")
    else:
        parts.append("no request was waiting yet")
    then = []
    if state.running is not None:
        then.append(f"{state.running:g} running")
    if state.waiting is not None:
        then.append(f"{state.waiting:g} waiting")
    if state.kv_cache_usage is not None:
        then.append(f"KV usage {state.kv_cache_usage:.0%}")
    preempted = [s.preemptions for s in timeline if s.t_s <= at_s and s.preemptions is not None]
    if preempted:
        then.append(f"{sum(preempted):g} preemptions so far")
    if then:
        parts.append("then " + ", ".join(then))
    return "; ".join(parts), state, waiting_since


def slo_breaks(
    records: Sequence[RequestRecord],
    slo: Slo,
    summary: TrialSummary,
    timeline: Sequence[ServerSample],
    *,
    server_why: str = "",
) -> list[SloBreak]:
    """The first failing moment of each SLO term the trial missed (see the module);
    ``server_why`` says why there is no server timeline, when there is none."""
    if summary.slo is None:
        return []
    ordered = sorted((r for r in records if not r.cancelled), key=lambda r: r.scheduled_s)
    width = max(MIN_WINDOW_REQUESTS, math.ceil(len(ordered) / 10))
    if len(ordered) < width:
        return []
    # requests over the bound a window may hold (1 of 10 at p90), counted, not as a float share
    allowed = math.floor(width * (100.0 - slo.percentile) / 100.0 + 1e-9)
    found = []
    for metric, bound in slo.terms().items():
        term = summary.slo.terms.get(metric)
        if term is None or term.state != "missed":
            continue
        over = [_over(r, metric, bound) for r in ordered]
        for end in range(width, len(ordered) + 1):
            window = over[end - width : end]
            if sum(window) <= allowed:
                continue
            share = sum(window) / width
            first = ordered[end - width + window.index(True)]
            at = first.scheduled_s
            server, state, since = _server_text(timeline, at, server_why)
            text = (
                f"p{slo.percentile:g} {metric_name(metric)} broke {at:.1f} s into the trial "
                f"({share:.0%} of {width} requests over {bound * 1000:g} ms); {server}"
            )
            found.append(
                SloBreak(
                    metric=metric,
                    at_s=at,
                    window_requests=width,
                    share_over=share,
                    waiting_since_s=since,
                    server=state,
                    text=text,
                )
            )
            break
    return found
