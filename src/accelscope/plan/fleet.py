"""Fleet sizing and cost per catalog option; the ranking and the recommendation.

Per option: instances at peak = max(min_instances, ⌈peak x (1 + headroom) / capacity⌉);
three ways to pay for a month (730 h): always on at the peak size, following the traffic curve
(hourly autoscaling, never below ``min_instances``), and scale-to-zero (0 instances in hours
without traffic; cold starts not modelled). Dollars per million inferences divide each month's
cost by the month's requests; utilisation is served load over provisioned capacity.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from accelscope.plan.capacity import CapacityEstimate
from accelscope.plan.energy import OptionEnergy
from accelscope.plan.traffic import HOURS, Traffic
from accelscope.serialise import dump

__all__ = [
    "HOURS_PER_MONTH",
    "Option",
    "OptionCost",
    "PlanSettings",
    "Recommendation",
    "cost_option",
    "plan_fleet",
    "requests_per_month",
]

HOURS_PER_MONTH = 730.0
"""Cloud billing convention: 365 x 24 / 12."""
_DAYS_PER_MONTH = HOURS_PER_MONTH / HOURS


@dataclass(frozen=True)
class PlanSettings:
    """The service's constraints: p99 SLA, spare capacity at peak, and the availability floor."""

    sla_p99_s: float
    headroom: float = 0.2
    min_instances: int = 1


@dataclass(frozen=True, kw_only=True)
class Option:
    """A machine to rent (a catalog entry, or this machine with no price) and its capacity
    (``None`` with ``reason`` when none could be measured or projected)."""

    name: str
    kind: str
    description: str
    price_usd_per_hour: float | None
    capacity: CapacityEstimate | None
    reason: str = ""
    spot_price_usd_per_hour: float | None = None


@dataclass(frozen=True, kw_only=True)
class OptionCost:
    """One option sized for the traffic: fleet, monthly cost three ways, $/M, utilisation."""

    option: Option
    feasible: bool
    reason: str
    instances_at_peak: int = 0
    hourly_instances: tuple[int, ...] = ()
    monthly_always_on: float | None = None
    monthly_autoscaled: float | None = None
    monthly_scale_to_zero: float | None = None
    per_million_always_on: float | None = None
    per_million_autoscaled: float | None = None
    per_million_scale_to_zero: float | None = None
    per_million_full_use: float | None = None
    utilisation_always_on: float | None = None
    utilisation_autoscaled: float | None = None
    energy: OptionEnergy | None = None
    """Joules per item measured with its capacity, kWh and $ a month (or not measured: why)."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (the option flattened in)."""
        o = self.option
        return {
            "name": o.name,
            "kind": o.kind,
            "description": o.description,
            "price_usd_per_hour": o.price_usd_per_hour,
            "spot_price_usd_per_hour": o.spot_price_usd_per_hour,
            "capacity": None if o.capacity is None else dump(o.capacity),
            "feasible": self.feasible,
            "reason": self.reason or o.reason,
            "instances_at_peak": self.instances_at_peak,
            "hourly_instances": list(self.hourly_instances),
            "monthly_always_on": self.monthly_always_on,
            "monthly_autoscaled": self.monthly_autoscaled,
            "monthly_scale_to_zero": self.monthly_scale_to_zero,
            "per_million_always_on": self.per_million_always_on,
            "per_million_autoscaled": self.per_million_autoscaled,
            "per_million_scale_to_zero": self.per_million_scale_to_zero,
            "per_million_full_use": self.per_million_full_use,
            "utilisation_always_on": self.utilisation_always_on,
            "utilisation_autoscaled": self.utilisation_autoscaled,
            "energy": None if self.energy is None else dump(self.energy),
        }


@dataclass(frozen=True)
class Recommendation:
    """The cheapest feasible option (following the traffic curve) and why."""

    choice: str | None
    why: tuple[str, ...]


def requests_per_month(traffic: Traffic) -> float:
    """The traffic's requests in a month (730 h)."""
    return traffic.requests_per_day * _DAYS_PER_MONTH


def _needed(rate_qps: float, capacity_qps: float, headroom: float) -> int:
    return math.ceil(rate_qps * (1.0 + headroom) / capacity_qps - 1e-9)


def cost_option(option: Option, traffic: Traffic, settings: PlanSettings) -> OptionCost:
    """Size ``option`` for ``traffic`` and price it (prices missing: fleet only)."""
    capacity = option.capacity
    if capacity is None:
        return OptionCost(
            option=option, feasible=False, reason=option.reason or "no capacity figure"
        )
    if not capacity.meets_sla or capacity.qps_per_instance <= 0:
        why = next((a for a in reversed(capacity.assumptions) if "SLA" in a), "")
        return OptionCost(option=option, feasible=False, reason=why or "does not meet the p99 SLA")
    cap, floor = capacity.qps_per_instance, settings.min_instances
    peak_n = max(floor, _needed(traffic.peak_qps, cap, settings.headroom))
    hourly = tuple(max(floor, _needed(r, cap, settings.headroom)) for r in traffic.hourly_qps)
    to_zero = tuple(0 if r <= 0 else n for r, n in zip(traffic.hourly_qps, hourly, strict=True))
    requests_month = traffic.requests_per_day * _DAYS_PER_MONTH
    served = math.fsum(traffic.hourly_qps)
    result = OptionCost(
        option=option,
        feasible=True,
        reason="",
        instances_at_peak=peak_n,
        hourly_instances=hourly,
        utilisation_always_on=served / (peak_n * cap * HOURS),
        utilisation_autoscaled=served / (math.fsum(hourly) * cap),
    )
    price = option.price_usd_per_hour
    if price is None:
        return result
    always = peak_n * price * HOURS_PER_MONTH
    auto = math.fsum(hourly) * price * _DAYS_PER_MONTH
    zero = math.fsum(to_zero) * price * _DAYS_PER_MONTH
    per_m = 1e6 / requests_month
    return replace(
        result,
        monthly_always_on=always,
        monthly_autoscaled=auto,
        monthly_scale_to_zero=zero,
        per_million_always_on=always * per_m,
        per_million_autoscaled=auto * per_m,
        per_million_scale_to_zero=zero * per_m,
        per_million_full_use=price / (cap * 3600.0) * 1e6,
    )


def _sort_key(cost: OptionCost) -> tuple[int, float, float]:
    if not cost.feasible:
        return (2, math.inf, math.inf)
    if cost.monthly_autoscaled is None:
        return (1, math.inf, math.inf)
    return (0, cost.monthly_autoscaled, cost.monthly_always_on or math.inf)


def _money(value: float) -> str:
    return f"${value:,.0f}" if value >= 100 else f"${value:,.2f}"


def _recommend(
    ranked: Sequence[OptionCost], traffic: Traffic, settings: PlanSettings
) -> Recommendation:
    priced = [c for c in ranked if c.feasible and c.monthly_autoscaled is not None]
    sla = f"p99 ≤ {settings.sla_p99_s * 1e3:g} ms"
    if not priced:
        missing = [c for c in ranked if not c.feasible]
        reasons = [f"no priced option has a capacity that meets {sla}"]
        reasons += [f"{c.option.name}: {c.reason or c.option.reason}" for c in missing[:3]]
        return Recommendation(None, tuple(reasons))
    best = priced[0]
    cap = best.option.capacity
    assert cap is not None and best.monthly_autoscaled is not None
    why = [
        f"{best.option.name} is the cheapest of {len(priced)} option(s) that meet {sla}: "
        f"{_money(best.monthly_autoscaled)}/month following the traffic curve "
        f"({_money(best.monthly_always_on or 0)}/month always on at {best.instances_at_peak} "
        f"instance(s) for a peak of {traffic.peak_qps:.4g} qps with {settings.headroom:.0%} "
        "headroom)",
        f"capacity {cap.qps_per_instance:.4g} qps per instance: {cap.label}",
    ]
    if len(priced) > 1 and priced[1].monthly_autoscaled:
        runner = priced[1]
        extra = runner.monthly_autoscaled / best.monthly_autoscaled - 1  # type: ignore[operator]
        why.append(f"next: {runner.option.name} at +{extra:.0%}")
    if best.option.kind == "cpu":
        gpus = [c for c in priced if c.option.kind == "gpu"]
        if gpus:
            g = gpus[0]
            why.append(
                f"a CPU instance is the cheapest that meets the SLA: the cheapest GPU option "
                f"({g.option.name}) would cost {_money(g.monthly_autoscaled or 0)}/month and run "
                f"at {g.utilisation_autoscaled or 0:.0%} average utilisation at this traffic"
            )
        else:
            why.append("a CPU instance is the cheapest option that meets the SLA")
    if best.utilisation_always_on is not None and best.utilisation_always_on < 0.5:
        ratio = 1 / best.utilisation_always_on if best.utilisation_always_on > 0 else math.inf
        why.append(
            f"always on, the fleet is {best.utilisation_always_on:.0%} utilised: each "
            f"inference costs {ratio:.3g}x what it would at full use; autoscaling or "
            "scale-to-zero recovers most of that"
        )
    if cap.is_estimate:
        why.append(
            "the capacity is an ESTIMATE projected from the model's work: measure on "
            "the target (accelscope load) before buying"
        )
    return Recommendation(best.option.name, tuple(why))


def plan_fleet(
    options: Sequence[Option], traffic: Traffic, settings: PlanSettings
) -> tuple[tuple[OptionCost, ...], Recommendation]:
    """Cost every option and rank them: feasible and priced first, cheapest (autoscaled)
    first; then feasible without a price; then infeasible ones, in input order."""
    costs = [cost_option(option, traffic, settings) for option in options]
    ranked = tuple(sorted(costs, key=_sort_key))
    return ranked, _recommend(ranked, traffic, settings)
