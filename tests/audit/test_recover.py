"""Buy or recover (accelscope.audit.recover): the fixture fleet's idle GPUs by hour, set against
a plan option's hourly need, every figure computed by hand from accelscope.testing.fleet's
documented values."""

from __future__ import annotations

import copy
import math
from dataclasses import replace
from typing import Any

import pytest

from accelscope.audit.recover import BuyOrRecover, FleetClass, buy_or_recover, fleet_classes
from accelscope.commands.audit.workflow import AuditRequest, audit
from accelscope.errors import BadInputError
from accelscope.plan.capacity import CapacityEstimate
from accelscope.plan.catalog import load_catalog
from accelscope.plan.fleet import HOURS_PER_MONTH, Option, OptionCost
from accelscope.testing.fleet import dumps_query_range, fleet

STEP_S = 300.0
L4_PER_H = 0.8048  # g6.xlarge in the bundled catalog: one L4


@pytest.fixture(scope="module")
def document(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    path = tmp_path_factory.mktemp("fleet") / "fleet.json"
    path.write_text(dumps_query_range(fleet(step_s=STEP_S)))
    return audit(AuditRequest(export=path), store_path=None).document


@pytest.fixture(scope="module")
def classes(document: dict[str, Any]) -> dict[str, FleetClass]:
    return {c.family: c for c in fleet_classes(document, "r1")}


def test_the_idle_notebook_l4_is_recoverable_every_hour(classes: dict[str, FleetClass]) -> None:
    l4 = classes["L4"]
    assert l4.gpus == pytest.approx(2.0)
    # node-c/gpu1 is idle all week; the diurnal chat-api L4 (10 % at night) never is
    assert l4.idle_gpus_by_hour == pytest.approx((1.0,) * 24)
    # the chat-api GPU's unused share: 30 % from 08 to 20 UTC, 90 % at night (not counted)
    assert l4.spare_gpus_by_hour[12] == pytest.approx(0.30, abs=0.02)
    assert l4.spare_gpus_by_hour[3] == pytest.approx(0.90, abs=0.02)
    assert l4.usd_per_gpu_hour == pytest.approx(L4_PER_H)
    # priced on observed hours: the chat-api GPU has no samples for 2 h on day 2
    assert l4.cost_usd_per_day == pytest.approx((168 + 166) * L4_PER_H / 7)
    assert l4.source.startswith("audited: run r1, 168 h")


def test_the_a100s_with_an_idle_mig_slice(classes: dict[str, FleetClass]) -> None:
    a100 = classes["A100"]
    # node-a gpu0-2, node-b's GPU as three MIG instances (3g + 2g + 1g = 6/7), node-d gpu0-1
    assert a100.gpus == pytest.approx(3 + 6 / 7 + 2)
    assert a100.idle_gpus_by_hour == pytest.approx((1 / 7,) * 24)  # the idle 1g.5gb slice
    # etl-train: busy 90 %, SM 10 % all week: 0.8 GPU-hours a day per hour of the day
    assert a100.busy_not_useful_gpu_h_per_day >= 0.8 * 24


def _option_cost(hourly: tuple[int, ...], *, estimate: bool = True) -> OptionCost:
    capacity = CapacityEstimate(
        qps_per_instance=100.0,
        basis="projected" if estimate else "measured",
        label="estimate" if estimate else "measured",
        meets_sla=True,
    )
    option = Option(
        name="g6.xlarge",
        kind="gpu",
        description="1x L4",
        price_usd_per_hour=L4_PER_H,
        capacity=capacity,
    )
    days = HOURS_PER_MONTH / 24
    return OptionCost(
        option=option,
        feasible=True,
        reason="",
        instances_at_peak=max(hourly),
        hourly_instances=hourly,
        monthly_autoscaled=math.fsum(hourly) * L4_PER_H * days,
        utilisation_autoscaled=0.5,
    )


def test_the_plan_takes_the_idle_l4_and_rents_the_rest(classes: dict[str, FleetClass]) -> None:
    hourly = (1,) * 8 + (3,) * 12 + (1,) * 4  # three instances 08-20 UTC, one at night
    found = buy_or_recover(_option_cost(hourly), list(classes.values()), load_catalog())
    assert isinstance(found, BuyOrRecover)
    assert found.family == "L4" and found.gpus_per_instance == 1
    assert found.recovered_gpus_by_hour == (1.0,) * 24
    assert found.rented_instances_by_hour == tuple(n - 1 for n in hourly)
    assert found.buy_instances == 2
    days = HOURS_PER_MONTH / 24
    assert found.all_new_usd_per_month == pytest.approx(sum(hourly) * L4_PER_H * days)
    assert found.recover_usd_per_month == pytest.approx((sum(hourly) - 24) * L4_PER_H * days)
    assert found.saved_usd_per_month == pytest.approx(24 * L4_PER_H * days)
    assert found.recovered_gpu_h_per_day == pytest.approx(24.0)
    assert found.capacity_source == "projected"
    before = classes["L4"].cost_usd_per_day / classes["L4"].useful_gpu_h_per_day
    assert found.fleet_usd_per_useful_gpu_hour_before == pytest.approx(before)
    after = classes["L4"].cost_usd_per_day / (classes["L4"].useful_gpu_h_per_day + 24 * 0.5)
    assert found.fleet_usd_per_useful_gpu_hour_after == pytest.approx(after)


def test_an_option_of_another_family_or_unpriced_is_not_set_against_the_fleet(
    classes: dict[str, FleetClass],
) -> None:
    catalog = load_catalog()
    cost = _option_cost((1,) * 24)
    other = OptionCost(
        option=Option(
            name="g4dn.xlarge",
            kind="gpu",
            description="1x T4",
            price_usd_per_hour=0.526,
            capacity=cost.option.capacity,
        ),
        feasible=True,
        reason="",
        hourly_instances=(1,) * 24,
        monthly_autoscaled=1.0,
    )
    assert buy_or_recover(other, list(classes.values()), catalog) is None  # no T4 in the fleet
    unpriced = OptionCost(
        option=replace(cost.option, price_usd_per_hour=None), feasible=True, reason=""
    )
    assert buy_or_recover(unpriced, list(classes.values()), catalog) is None


def test_invariants_raise_where_the_values_are_built(classes: dict[str, FleetClass]) -> None:
    l4 = classes["L4"]
    with pytest.raises(ValueError, match="exceed"):
        replace(l4, idle_gpus_by_hour=(2.0,) * 24)
    with pytest.raises(ValueError, match="24 hours"):
        replace(l4, idle_gpus_by_hour=(1.0,) * 23)
    found = buy_or_recover(_option_cost((2,) * 24), [l4], load_catalog())
    assert found is not None
    with pytest.raises(ValueError, match="do not cover"):
        replace(found, rented_instances_by_hour=(0,) * 24)


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (lambda d: d.pop("window"), "no 'window' field"),
        (lambda d: d["devices"][0].update(hourly_activity=[0.5] * 23), "hourly activity is not 24"),
        (lambda d: d["devices"][0].update(hourly_activity=[2.0] * 24), "activity 2"),
        (lambda d: d["devices"][0].update(share_of_gpu="x"), "share is not a number"),
        (lambda d: d["devices"][0].pop("model"), "without a model name"),
    ],
)
def test_a_damaged_audit_document_is_one_line(
    document: dict[str, Any], change: Any, says: str
) -> None:
    damaged = copy.deepcopy(document)
    change(damaged)
    with pytest.raises(BadInputError, match=says):
        fleet_classes(damaged, "r1")
