"""Capacity search: the highest offered load (rate, or concurrency) at which the server meets
the SLO with claimable tails, and the latency/goodput curve on the way there.

The load doubles from a start until a trial fails, then the bracket between the last passing
and the first failing load is bisected (geometric midpoint; integers for concurrency) until it
is narrower than ``rel_tolerance`` or the trial budget is spent. Latency is noisy, so the
capacity is the highest load *measured* to pass, never an interpolated one. A trial passes when
the client kept up (``client_bound`` false), no SLO term was missed and every term's tail is
claimed by LoadGen's early-stopping rule ("unclaimed" fails: more requests are needed).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from accelscope.errors import BadInputError
from accelscope.llm.documents import TrialSummary

__all__ = ["CapacityResult", "TrialPoint", "search_capacity", "trial_passes"]

TrialFn = Callable[[float], TrialSummary]
"""Run one trial at a load; return its summary (``llm.summary.summarise_trial``)."""


@dataclass(frozen=True, kw_only=True)
class TrialPoint:
    """One trial of the search: its load, whether it passed, and why not."""

    load: float
    passed: bool
    why: str
    summary: TrialSummary


@dataclass(kw_only=True)
class CapacityResult:
    """The capacity (``None``: not even the lowest load passed) and every trial."""

    capacity: float | None
    unit: str
    points: list[TrialPoint] = field(default_factory=list)
    stopped: str = ""


def trial_passes(summary: TrialSummary) -> tuple[bool, str]:
    """Did the trial meet the SLO validly? (passed, why not)."""
    if summary.completed == 0:
        return False, "no request completed"
    if summary.client_bound and summary.client_lag_s is not None:
        lag = summary.client_lag_s.p99
        return False, f"client-bound: p99 send lag {lag * 1000:.0f} ms (the rate was not generated)"
    if summary.slo is None:
        return False, "no SLO"
    for metric, term in summary.slo.terms.items():
        if term.state != "met":
            return False, f"{metric.removesuffix('_s').upper()}: {term.why}"
    return True, ""


def search_capacity(
    run: TrialFn,
    *,
    start: float,
    integer: bool = False,
    unit: str = "req/s",
    max_trials: int = 8,
    rel_tolerance: float = 0.1,
    min_load: float | None = None,
) -> CapacityResult:
    """Search with ``run`` from ``start``; ``integer`` loads for a concurrency search."""
    if not math.isfinite(start) or start <= 0:
        raise BadInputError(f"the capacity search needs a positive start load, got {start:g}")
    if max_trials < 1:
        raise BadInputError("the capacity search needs at least one trial")
    # each trial sends a fixed number of requests, so a rate 8x lower takes 8x longer: the
    # search goes down three halvings at most (lower --capacity-start to look further)
    floor = min_load if min_load is not None else (1.0 if integer else start / 8.0)
    result = CapacityResult(capacity=None, unit=unit)
    tried: dict[float, bool] = {}

    def norm(load: float) -> float:
        return float(max(1, round(load))) if integer else load

    def trial(load: float) -> bool:
        summary = run(load)
        passed, why = trial_passes(summary)
        result.points.append(TrialPoint(load=load, passed=passed, why=why, summary=summary))
        tried[load] = passed
        if passed and (result.capacity is None or load > result.capacity):
            result.capacity = load
        return passed

    low: float | None = None
    high: float | None = None
    load = norm(start)
    while len(result.points) < max_trials:
        if trial(load):
            low = load
            if high is not None:
                break
            load = norm(load * 2)
        else:
            high = load
            if low is not None:
                break
            nxt = norm(load / 2)
            if nxt < floor or nxt == load:
                result.stopped = (
                    f"no load down to {load:g} {unit} met the SLO (give a lower --capacity-start "
                    "to look further)"
                )
                return result
            load = nxt
    while low is not None and high is not None and len(result.points) < max_trials:
        if high / low <= 1.0 + rel_tolerance:
            break
        middle = norm(math.sqrt(low * high))
        if middle in (low, high) or middle in tried:
            break
        if trial(middle):
            low = middle
        else:
            high = middle
    unsettled = low is None or high is None or high / low > 1.0 + rel_tolerance
    if len(result.points) >= max_trials and unsettled:
        result.stopped = f"the trial budget ({max_trials}) ran out before the bracket closed"
    return result
