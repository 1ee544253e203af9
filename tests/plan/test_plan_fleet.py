"""Fleet sizing and cost: the worked examples, headroom, minimum fleet, the recommendation."""

from __future__ import annotations

import math

import pytest

from accelscope.plan.capacity import CapacityEstimate, given_capacity
from accelscope.plan.fleet import HOURS_PER_MONTH, Option, PlanSettings, cost_option, plan_fleet
from accelscope.plan.traffic import constant_traffic, hourly_traffic

PEAK = 100.0


def _busy_two_hours() -> list[float]:
    return [PEAK if h in (9, 10) else 0.0 for h in range(24)]


def test_peak_sized_service_busy_2h_a_day_costs_12x_per_inference() -> None:
    option = Option(
        name="box",
        kind="gpu",
        description="",
        price_usd_per_hour=2.0,
        capacity=given_capacity(PEAK),
    )
    settings = PlanSettings(sla_p99_s=0.1, headroom=0.0, min_instances=1)
    busy = cost_option(option, hourly_traffic(_busy_two_hours(), "2 h/day"), settings)
    full = cost_option(option, constant_traffic(PEAK), settings)
    assert busy.instances_at_peak == full.instances_at_peak == 1
    assert busy.monthly_always_on == full.monthly_always_on == pytest.approx(2.0 * HOURS_PER_MONTH)
    assert busy.per_million_always_on / full.per_million_always_on == pytest.approx(12.0)
    assert busy.per_million_always_on / busy.per_million_full_use == pytest.approx(12.0)
    assert full.per_million_always_on == pytest.approx(full.per_million_full_use)
    assert busy.utilisation_always_on == pytest.approx(1 / 12)
    # dollars per million at full use: $2/h over 100 req/s * 3600 s
    assert full.per_million_full_use == pytest.approx(2.0 / (PEAK * 3600) * 1e6)
    # scale-to-zero pays only the 2 busy hours: back to the full-use price per inference
    assert busy.per_million_scale_to_zero == pytest.approx(full.per_million_always_on)


def test_headroom_and_minimum_fleet_set_the_instance_counts() -> None:
    option = Option(
        name="box",
        kind="cpu",
        description="",
        price_usd_per_hour=1.0,
        capacity=given_capacity(50.0),
    )
    traffic = hourly_traffic([0.0] * 12 + [100.0] * 6 + [10.0] * 6, "day")
    cost = cost_option(option, traffic, PlanSettings(0.1, headroom=0.2, min_instances=2))
    assert cost.instances_at_peak == math.ceil(100 * 1.2 / 50) == 3
    assert cost.hourly_instances == (2,) * 12 + (3,) * 6 + (2,) * 6
    days = HOURS_PER_MONTH / 24
    assert cost.monthly_autoscaled == pytest.approx((24 * 2 + 6) * days)
    assert cost.monthly_scale_to_zero == pytest.approx((6 * 3 + 6 * 2) * days)
    assert cost.monthly_always_on == pytest.approx(3 * HOURS_PER_MONTH)
    served = 6 * 100 + 6 * 10
    assert cost.utilisation_autoscaled == pytest.approx(served / ((24 * 2 + 6) * 50))


def test_options_that_miss_the_sla_or_lack_capacity_are_ranked_last() -> None:
    slow = CapacityEstimate(
        qps_per_instance=0.0,
        basis="projected",
        label="estimate",
        meets_sla=False,
        latency_s=0.3,
        assumptions=("batch 8 takes 150 ms there: p99 ≈ 300 ms > SLA",),
    )
    options = [
        Option(name="slow", kind="gpu", description="", price_usd_per_hour=1.0, capacity=slow),
        Option(
            name="none",
            kind="gpu",
            description="",
            price_usd_per_hour=1.0,
            capacity=None,
            reason="no roofline profile",
        ),
        Option(
            name="unpriced",
            kind="cpu",
            description="",
            price_usd_per_hour=None,
            capacity=given_capacity(100.0),
        ),
        Option(
            name="cheap-cpu",
            kind="cpu",
            description="",
            price_usd_per_hour=0.4,
            capacity=given_capacity(100.0),
        ),
        Option(
            name="gpu",
            kind="gpu",
            description="",
            price_usd_per_hour=1.0,
            capacity=given_capacity(1000.0),
        ),
    ]
    ranked, rec = plan_fleet(options, constant_traffic(50.0), PlanSettings(0.1))
    assert [c.option.name for c in ranked] == ["cheap-cpu", "gpu", "unpriced", "slow", "none"]
    assert not ranked[3].feasible and "SLA" in ranked[3].reason
    assert ranked[2].feasible and ranked[2].monthly_autoscaled is None
    assert rec.choice == "cheap-cpu"
    text = " ".join(rec.why)
    assert "a CPU instance is the cheapest that meets the SLA" in text
    assert "gpu" in text and "+150%" in text


def test_recommendation_flags_estimates_and_low_utilisation() -> None:
    estimate = CapacityEstimate(
        qps_per_instance=500.0,
        basis="projected",
        label="estimate",
        meets_sla=True,
        latency_s=0.01,
        assumptions=("projected",),
    )
    _, rec = plan_fleet(
        [Option(name="g", kind="gpu", description="", price_usd_per_hour=1.0, capacity=estimate)],
        hourly_traffic(_busy_two_hours(), "x"),
        PlanSettings(0.1, 0.0),
    )
    why = " ".join(rec.why)
    assert "ESTIMATE" in why and "estimate" in why and "utilised" in why
    _, none = plan_fleet(
        [
            Option(
                name="n",
                kind="gpu",
                description="",
                price_usd_per_hour=1.0,
                capacity=None,
                reason="no data",
            )
        ],
        constant_traffic(1.0),
        PlanSettings(0.1),
    )
    assert none.choice is None and "no data" in " ".join(none.why)
