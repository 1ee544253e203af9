"""Capacity search: the highest offered rate whose p99 meets the bound in a valid run, over a
small grid of batcher settings.

For each max batch (with a default max delay) the rate is bracketed and bisected between zero
and a little above the offline throughput (no server sustains more than it can do flat out);
then, for the best max batch, the other max delays are tried starting from the best rate found.
Latency is noisy, so the search keeps the highest *passing* rate it measured, never an
interpolated one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from accelscope.load.batcher import BatchPolicy
from accelscope.load.summary import TrialSummary

__all__ = ["CapacitySearch", "PolicyCapacity", "SearchSettings", "policy_grid", "search_capacity"]

TrialFn = Callable[[float, BatchPolicy], TrialSummary]
"""Run one server trial at an offered rate (queries/s) with a batcher policy."""
ThroughputFn = Callable[[BatchPolicy], float]
"""Offline throughput (queries/s) with a batcher policy: the rate search's ceiling."""


@dataclass(frozen=True, kw_only=True)
class SearchSettings:
    """Grid and stopping rule (relative width of the final rate bracket)."""

    max_batches: tuple[int, ...] = (1,)
    max_delays_s: tuple[float, ...] = (0.0,)
    rel_tolerance: float = 0.05
    max_trials_per_policy: int = 8
    min_rate_fraction: float = 1.0 / 32.0
    """Give up on a policy below this fraction of its offline throughput."""


def policy_grid(max_batch: int, sla_s: float, batching: bool = True) -> SearchSettings:
    """The default grid: no batching, then powers of two up to ``max_batch`` (and it), with
    max delays of 2 %, 10 % and 25 % of the SLA (10 % first)."""
    if not batching or max_batch <= 1:
        return SearchSettings(max_batches=(1,), max_delays_s=(0.0,))
    sizes = [1]
    size = 2
    while size < max_batch:
        sizes.append(size)
        size *= 2
    sizes.append(max_batch)
    return SearchSettings(
        max_batches=tuple(sizes), max_delays_s=(0.10 * sla_s, 0.02 * sla_s, 0.25 * sla_s)
    )


@dataclass(frozen=True, kw_only=True)
class PolicyCapacity:
    """The capacity found for one batcher policy and the trials behind it."""

    policy: BatchPolicy
    capacity_qps: float
    ceiling_qps: float
    trials: tuple[TrialSummary, ...]
    note: str = ""

    @property
    def best_trial(self) -> TrialSummary | None:
        """The passing trial at the capacity rate."""
        passing = [t for t in self.trials if t.meets_sla]
        return max(passing, key=lambda t: t.offered_rate_per_s or 0.0) if passing else None


@dataclass(frozen=True)
class CapacitySearch:
    """Every policy tried, and the best."""

    policies: tuple[PolicyCapacity, ...]
    notes: tuple[str, ...] = field(default=())

    @property
    def best(self) -> PolicyCapacity | None:
        """The policy with the highest capacity (ties: the smaller batch, then delay)."""
        passing = [p for p in self.policies if p.capacity_qps > 0]
        if not passing:
            return None
        return max(
            passing, key=lambda p: (p.capacity_qps, -p.policy.max_batch, -p.policy.max_delay_s)
        )

    @property
    def trials(self) -> tuple[TrialSummary, ...]:
        """All trials in the order they ran."""
        return tuple(t for p in self.policies for t in p.trials)


def _fatal(summary: TrialSummary) -> str:
    """A failure that no lower rate will fix: the system errors or stalls."""
    if summary.errors:
        return f"the system under test failed {summary.errors} queries"
    if summary.stopped_reason and not summary.stopped_reason.startswith("stopped early"):
        return summary.stopped_reason
    return ""


def search_rate(
    trial: TrialFn,
    policy: BatchPolicy,
    ceiling_qps: float,
    settings: SearchSettings,
    start_qps: float | None = None,
) -> PolicyCapacity:
    """Bracket and bisect the offered rate for ``policy``."""
    trials: list[TrialSummary] = []
    if ceiling_qps <= 0:
        return PolicyCapacity(
            policy=policy,
            capacity_qps=0.0,
            ceiling_qps=ceiling_qps,
            trials=(),
            note="no query completed offline",
        )
    low, high = 0.0, ceiling_qps * 1.25
    rate = start_qps if start_qps is not None else 0.7 * ceiling_qps
    floor = ceiling_qps * settings.min_rate_fraction
    note = ""
    failed = False
    for _ in range(settings.max_trials_per_policy):
        summary = trial(rate, policy)
        trials.append(summary)
        fatal = _fatal(summary)
        if fatal:
            note = fatal
            break
        if summary.meets_sla:
            low = rate
            if not failed and rate >= high * (1 - settings.rel_tolerance):
                high = rate * 1.5  # the ceiling was pessimistic: bracket upward
        else:
            failed = True
            high = rate
        if high - low <= settings.rel_tolerance * high:
            break
        rate = (low + high) / 2.0
        if rate < floor:
            note = f"no rate down to {floor:.3g} queries/s met the bound"
            break
    return PolicyCapacity(
        policy=policy, capacity_qps=low, ceiling_qps=ceiling_qps, trials=tuple(trials), note=note
    )


def search_capacity(
    trial: TrialFn,
    throughput: ThroughputFn,
    settings: SearchSettings,
    on_policy: Callable[[PolicyCapacity], None] | None = None,
) -> CapacitySearch:
    """Search every max batch with the first max delay, then the other delays for the best."""
    results: list[PolicyCapacity] = []
    default_delay = settings.max_delays_s[0]
    for max_batch in settings.max_batches:
        policy = BatchPolicy(max_batch, default_delay if max_batch > 1 else 0.0)
        found = search_rate(trial, policy, throughput(policy), settings)
        results.append(found)
        if on_policy is not None:
            on_policy(found)
        if found.note and not found.note.startswith("no rate"):
            return CapacitySearch(tuple(results), (found.note,))  # broken system: stop
    leader = max(results, key=lambda p: p.capacity_qps)
    if leader.policy.max_batch > 1 and leader.capacity_qps > 0:
        for delay in settings.max_delays_s[1:]:
            policy = BatchPolicy(leader.policy.max_batch, delay)
            found = search_rate(
                trial, policy, leader.ceiling_qps, settings, start_qps=leader.capacity_qps
            )
            results.append(found)
            if on_policy is not None:
                on_policy(found)
    return CapacitySearch(tuple(results))
