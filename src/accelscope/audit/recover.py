"""Buy or recover: the GPUs a plan needs, hour by hour, set against an audited fleet's idle ones.

An ``audit`` run stores, per GPU, its mean engine activity in each hour of the day (UTC). A GPU
is **recoverable** in an hour when it is idle there by the audit's own definition (activity below
:data:`~accelscope.audit.analysis.IDLE_BELOW`): whole GPUs only, since work cannot be added to a
partly used GPU without sharing it (MIG, MPS). Beside it, two figures that are not counted as
recovered, because a change must happen first:

- **consolidation**: the unused share of GPUs that are partly used in that hour (Σ 1 - activity),
  an upper bound reachable only by packing work onto fewer GPUs;
- **busy but not useful**: the audit's busy-minus-useful GPU-hours (nvidia-smi busy, SMs not),
  the hours fixing those workloads could give back (an upper bound: ``doctor`` says how much).

A plan option (a catalog instance of ``g`` GPUs) needs ``n_h`` instances in hour ``h`` to carry the
traffic (``plan``'s hourly sizing). On the fleet's GPUs of the same family the plan takes
``min(n_h·g, idle_h)`` GPUs; the rest is rented, hour by hour (the autoscaled path), or bought
for the peak shortfall. Every figure says where it came from: ``audited`` (the stored run),
``projected`` or ``measured`` (the option's capacity), ``catalog`` (a price).

It lives in ``audit`` (above ``plan`` in the layers): it reads an audit document and sets it
against ``plan``'s sizing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from accelscope.audit.analysis import IDLE_BELOW
from accelscope.audit.cost import gpu_family
from accelscope.errors import BadInputError
from accelscope.plan.catalog import Catalog
from accelscope.plan.fleet import HOURS_PER_MONTH, OptionCost
from accelscope.plan.traffic import HOURS
from accelscope.serialise import dump

__all__ = [
    "BuyOrRecover",
    "FleetClass",
    "TrainRecovery",
    "buy_or_recover",
    "fleet_classes",
    "recover_document",
    "train_buy_or_recover",
]

_DAYS_PER_MONTH = HOURS_PER_MONTH / HOURS


def _finite(name: str, value: float, *, low: float = 0.0) -> None:
    if not math.isfinite(value) or value < low:
        raise ValueError(f"{name} must be a finite number >= {low:g}, not {value!r}")


@dataclass(frozen=True)
class FleetClass:
    """One GPU family of an audited fleet: its GPUs' idle capacity by hour of day and price."""

    family: str
    """GPU family (``L4``, ``A100``, ...), as the audit's price lookup matches it."""
    models: tuple[str, ...]
    """The telemetry's model names in this family."""
    gpus: float
    """GPUs (a MIG instance counts as its share)."""
    idle_gpus_by_hour: tuple[float, ...]
    """Whole GPUs idle (activity below the audit's idle bound) in each UTC hour of the day."""
    spare_gpus_by_hour: tuple[float, ...]
    """Σ (1 - activity) over the GPUs not idle in that hour: consolidation's upper bound."""
    unmeasured_gpus: float
    """GPUs without an hourly activity figure: never counted as recoverable."""
    busy_not_useful_gpu_h_per_day: float
    """The audit's busy-minus-useful GPU-hours, per day of its window."""
    useful_gpu_h_per_day: float
    """SM-active GPU-hours per day of the window (0 when SM activity was not measured)."""
    cost_usd_per_day: float
    """What the family's GPUs cost per day of the window (the audit's prices)."""
    usd_per_gpu_hour: float
    price_source: str
    source: str
    """``audited: run <id>, <hours> h from <start>``."""

    def __post_init__(self) -> None:
        if not self.family:
            raise ValueError("a fleet class needs a GPU family")
        for name in ("gpus", "unmeasured_gpus", "busy_not_useful_gpu_h_per_day"):
            _finite(name, getattr(self, name))
        for name in ("useful_gpu_h_per_day", "cost_usd_per_day", "usd_per_gpu_hour"):
            _finite(name, getattr(self, name))
        for name in ("idle_gpus_by_hour", "spare_gpus_by_hour"):
            values = getattr(self, name)
            if len(values) != HOURS:
                raise ValueError(f"{name} needs {HOURS} hours, not {len(values)}")
            for value in values:
                _finite(name, value)
        for idle, spare in zip(self.idle_gpus_by_hour, self.spare_gpus_by_hour, strict=True):
            if idle + spare > self.gpus + 1e-9:
                raise ValueError(
                    f"idle ({idle:g}) and spare ({spare:g}) GPUs exceed the {self.gpus:g} GPUs"
                )

    @property
    def useful_share(self) -> float | None:
        """Useful (SM-active) GPU-hours over the GPU-hours the family was there."""
        held = self.gpus * HOURS
        return self.useful_gpu_h_per_day / held if held > 0 and self.useful_gpu_h_per_day else None


def _number(value: object, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise BadInputError(f"the audit run's {where} is not a number: {value!r}")
    return float(value)


def fleet_classes(document: Mapping[str, Any], run_id: str) -> tuple[FleetClass, ...]:
    """The fleet's GPU families from a stored ``audit`` document; a document that lacks what
    this needs is bad input (one line naming the field)."""
    try:
        window = document["window"]
        hours = _number(window["hours"], "window hours")
        devices = document["devices"]
        prices = document["prices"]
    except (KeyError, TypeError) as exc:
        raise BadInputError(
            f"audit run {run_id} has no {exc} field: not an audit document"
        ) from None
    if hours <= 0 or not isinstance(devices, list) or not isinstance(prices, dict):
        raise BadInputError(f"audit run {run_id} has no devices or no window")
    days = hours / HOURS
    grouped: dict[str, list[Mapping[str, Any]]] = {}
    for device in devices:
        if not isinstance(device, dict) or not isinstance(device.get("model"), str):
            raise BadInputError(f"audit run {run_id}: a device without a model name")
        family = gpu_family(device["model"])[0] or device["model"]
        grouped.setdefault(family, []).append(device)
    start = window.get("start_s")
    when = f" from {start:.0f} s (Unix)" if isinstance(start, int | float) else ""
    classes = []
    for family, members in sorted(grouped.items()):
        idle = [0.0] * HOURS
        spare = [0.0] * HOURS
        gpus = unmeasured = gap = useful = cost = 0.0
        models: list[str] = []
        for device in members:
            key = device.get("key", "?")
            share = _number(device.get("share_of_gpu"), f"device {key} share")
            device_hours = device.get("hours")
            if not isinstance(device_hours, dict):
                raise BadInputError(f"audit run {run_id}: device {key} has no hours")
            gpus += share
            gap += _number(device_hours.get("busy_minus_useful", 0.0), f"device {key} hours")
            useful += _number(device_hours.get("useful", 0.0), f"device {key} hours") * share
            usd = device.get("usd")
            cost += _number(usd.get("cost_usd") if isinstance(usd, dict) else None, "cost")
            if device["model"] not in models:
                models.append(device["model"])
            activity = device.get("hourly_activity")
            if activity is None:
                unmeasured += share
                continue
            if not isinstance(activity, list) or len(activity) != HOURS:
                raise BadInputError(f"audit run {run_id}: device {key} hourly activity is not 24")
            for hour, value in enumerate(activity):
                level = _number(value, f"device {key} activity")
                if not 0.0 <= level <= 1.0 + 1e-9:
                    raise BadInputError(f"audit run {run_id}: device {key} activity {level:g}")
                if level < IDLE_BELOW:
                    idle[hour] += share
                else:
                    spare[hour] += share * max(0.0, 1.0 - level)
        price = prices.get(models[0])
        if not isinstance(price, dict):
            raise BadInputError(f"audit run {run_id} has no price for {models[0]}")
        classes.append(
            FleetClass(
                family=family,
                models=tuple(models),
                gpus=gpus,
                idle_gpus_by_hour=tuple(idle),
                spare_gpus_by_hour=tuple(spare),
                unmeasured_gpus=unmeasured,
                busy_not_useful_gpu_h_per_day=gap / days,
                useful_gpu_h_per_day=useful / days,
                cost_usd_per_day=cost / days,
                usd_per_gpu_hour=_number(price.get("usd_per_gpu_hour"), "price"),
                price_source=str(price.get("source", "")),
                source=f"audited: run {run_id}, {hours:.4g} h{when}",
            )
        )
    return tuple(classes)


@dataclass(frozen=True)
class BuyOrRecover:
    """One plan option set against the fleet's GPUs of its family."""

    option: str
    family: str
    gpus_per_instance: int
    needed_gpus_by_hour: tuple[int, ...]
    """GPUs the option needs in each UTC hour (``plan``'s hourly instances x GPUs each)."""
    recovered_gpus_by_hour: tuple[float, ...]
    """Of those, idle fleet GPUs taken: min(needed, idle)."""
    rented_instances_by_hour: tuple[int, ...]
    """Instances still to rent in each hour (the shortfall, whole instances)."""
    buy_instances: int
    """Instances to buy (or reserve) for the worst hour's shortfall."""
    all_new_usd_per_month: float
    """Renting all of it, following the traffic (``plan``'s autoscaled figure)."""
    recover_usd_per_month: float
    """Renting only the shortfall, following the traffic."""
    recovered_gpu_h_per_day: float
    fleet_usd_per_useful_gpu_hour_before: float | None
    """The family's cost over its useful GPU-hours now (audited)."""
    fleet_usd_per_useful_gpu_hour_after: float | None
    """The same cost over its useful hours plus the recovered hours' useful work (projected:
    the recovered GPUs at the option's average utilisation), when both are known."""
    capacity_source: str
    """Where the option's capacity came from (its basis: ``measured``, ``bench``, ``given`` or
    ``projected``)."""
    consolidation_gpus_peak: float
    """Consolidation's upper bound in the hour of largest shortfall (not counted)."""
    busy_not_useful_gpu_h_per_day: float
    """What fixing busy-but-not-useful work could return (an upper bound; not counted)."""

    def __post_init__(self) -> None:
        series = (
            self.needed_gpus_by_hour,
            self.recovered_gpus_by_hour,
            self.rented_instances_by_hour,
        )
        if any(len(s) != HOURS for s in series):
            raise ValueError(f"every hourly series needs {HOURS} hours")
        if self.gpus_per_instance < 1 or self.buy_instances < 0:
            raise ValueError("an instance has at least one GPU; purchases are never negative")
        for needed, recovered, rented in zip(*series, strict=True):
            if recovered < 0 or recovered > needed + 1e-9 or rented < 0:
                raise ValueError(f"recovered {recovered:g} of {needed} needed GPUs")
            if recovered + rented * self.gpus_per_instance < needed - 1e-9:
                raise ValueError("recovered and rented GPUs do not cover the need")
        for name in ("all_new_usd_per_month", "recover_usd_per_month", "recovered_gpu_h_per_day"):
            _finite(name, getattr(self, name))
        if self.recover_usd_per_month > self.all_new_usd_per_month + 1e-6:
            raise ValueError("renting the shortfall cannot cost more than renting it all")

    @property
    def saved_usd_per_month(self) -> float:
        return self.all_new_usd_per_month - self.recover_usd_per_month


def buy_or_recover(
    cost: OptionCost, fleet: Sequence[FleetClass], catalog: Catalog
) -> BuyOrRecover | None:
    """``cost`` (a feasible, priced plan option, a ``catalog`` instance) set against the
    fleet's GPUs of its family; ``None`` when the option is not a catalog GPU instance, not
    priced, or the fleet has none of its family."""
    option = cost.option
    price = option.price_usd_per_hour
    if not cost.feasible or price is None or option.kind != "gpu" or option.capacity is None:
        return None
    instance = next((i for i in catalog.instances if i.type == option.name), None)
    if instance is None:
        return None
    family = gpu_family(instance.accelerator)[0]
    match = next((c for c in fleet if family and c.family == family), None)
    if match is None:
        return None
    per_instance = instance.accelerator_count
    needed = tuple(n * per_instance for n in cost.hourly_instances)
    recovered = tuple(
        min(float(n), idle) for n, idle in zip(needed, match.idle_gpus_by_hour, strict=True)
    )
    rented = tuple(
        math.ceil((n - r) / per_instance - 1e-9) for n, r in zip(needed, recovered, strict=True)
    )
    recover_usd = math.fsum(rented) * price * _DAYS_PER_MONTH
    all_new = cost.monthly_autoscaled
    assert all_new is not None  # priced and feasible
    recovered_h = math.fsum(recovered)
    before = (
        match.cost_usd_per_day / match.useful_gpu_h_per_day
        if match.useful_gpu_h_per_day > 0
        else None
    )
    after = None
    utilisation = cost.utilisation_autoscaled
    if before is not None and utilisation is not None:
        after = match.cost_usd_per_day / (match.useful_gpu_h_per_day + recovered_h * utilisation)
    worst = max(range(HOURS), key=lambda h: rented[h])
    return BuyOrRecover(
        option=option.name,
        family=match.family,
        gpus_per_instance=per_instance,
        needed_gpus_by_hour=needed,
        recovered_gpus_by_hour=recovered,
        rented_instances_by_hour=rented,
        buy_instances=max(rented),
        all_new_usd_per_month=all_new,
        recover_usd_per_month=recover_usd,
        recovered_gpu_h_per_day=recovered_h,
        fleet_usd_per_useful_gpu_hour_before=before,
        fleet_usd_per_useful_gpu_hour_after=after,
        capacity_source=option.capacity.basis,
        consolidation_gpus_peak=match.spare_gpus_by_hour[worst],
        busy_not_useful_gpu_h_per_day=match.busy_not_useful_gpu_h_per_day,
    )


def recover_document(
    options: Sequence[OptionCost], fleet: Sequence[FleetClass], catalog: Catalog, run_id: str
) -> dict[str, Any]:
    """The ``fleet`` part of a plan document: each family's idle GPUs and, per priced GPU
    option of a family the fleet has, what is recovered, rented or bought and what each path
    costs."""
    paths = [p for c in options if (p := buy_or_recover(c, fleet, catalog)) is not None]
    paths.sort(key=lambda p: p.recover_usd_per_month)
    return {
        "run_id": run_id,
        "definitions": {
            "recovered": f"whole GPUs idle in that UTC hour (engine activity below "
            f"{IDLE_BELOW:.0%}, the audit's bound), taken up to what the option needs",
            "rented": "the rest, whole instances hour by hour (following the traffic)",
            "bought": "instances for the worst hour's shortfall (to buy or reserve)",
            "not counted": "consolidating partly used GPUs, and fixing busy-but-not-useful work: "
            "upper bounds that need a change first",
        },
        "classes": [dump(c) for c in fleet],
        "paths": [{**dump(p), "saved_usd_per_month": p.saved_usd_per_month} for p in paths],
    }


@dataclass(frozen=True, kw_only=True)
class TrainRecovery:
    """A synchronous training run on ``devices`` GPUs of one family set against the fleet's idle
    GPUs of that family (see :func:`train_buy_or_recover`).

    Sources: the GPU-hours are ``projected`` (``plan train``'s time x devices, with its
    interval), the idle hours and the fleet's cost ``audited``, the rent price the ``catalog``'s.
    """

    accelerator: str
    family: str
    devices: int
    needed_gpu_h: float
    """GPU-hours the run needs (projected: time x devices)."""
    needed_gpu_h_low: float
    needed_gpu_h_high: float
    hours_of_day: tuple[int, ...]
    """UTC hours of the day with at least ``devices`` idle GPUs of the family (audited)."""
    recovered_gpu_h_per_day: float
    """``devices`` x those hours: what the fleet offers the run each day."""
    days_on_recovered: float | None
    """Days to finish on recovered capacity alone; ``None``: no hour has enough idle GPUs."""
    deadline_s: float | None
    recovered_gpu_h: float
    """GPU-hours run on the fleet's idle GPUs (within the deadline when one is given)."""
    rented_gpu_h: float
    """The rest, rented (GPU-hours x the catalog's per-device price)."""
    usd_per_gpu_hour: float
    price_source: str
    rent_all_usd: float
    """Renting every GPU-hour."""
    recover_usd: float
    """Renting only what the idle hours do not cover (the fleet's GPUs are already paid for)."""
    fleet_usd_per_useful_gpu_hour_before: float | None
    """The family's audited cost per useful (SM-active) GPU-hour now."""
    fleet_usd_per_useful_gpu_hour_after: float | None
    """The same cost with the recovered hours counted useful while the run lasts (projected: a
    training step keeps the GPU's SMs active)."""
    source: str

    def __post_init__(self) -> None:
        if self.devices < 1:
            raise ValueError(f"a training run needs at least one device, got {self.devices}")
        for name in (
            "needed_gpu_h",
            "needed_gpu_h_low",
            "needed_gpu_h_high",
            "recovered_gpu_h_per_day",
            "recovered_gpu_h",
            "rented_gpu_h",
            "usd_per_gpu_hour",
            "rent_all_usd",
            "recover_usd",
        ):
            _finite(name, getattr(self, name))
        if not self.needed_gpu_h_low <= self.needed_gpu_h <= self.needed_gpu_h_high:
            raise ValueError("the GPU-hours needed lie outside their own interval")
        if len(set(self.hours_of_day)) != len(self.hours_of_day) or any(
            not 0 <= h < HOURS for h in self.hours_of_day
        ):
            raise ValueError(f"hours of the day must be distinct and in 0..{HOURS - 1}")
        if not math.isclose(
            self.recovered_gpu_h_per_day, self.devices * len(self.hours_of_day), abs_tol=1e-9
        ):
            raise ValueError("GPU-hours a day must be devices x the hours with enough idle GPUs")
        if not math.isclose(
            self.recovered_gpu_h + self.rented_gpu_h, self.needed_gpu_h, rel_tol=1e-9, abs_tol=1e-9
        ):
            raise ValueError("recovered and rented GPU-hours must add up to the GPU-hours needed")
        if self.recovered_gpu_h > 0 and not self.hours_of_day:
            raise ValueError("nothing can be recovered without an hour of enough idle GPUs")
        if self.recover_usd > self.rent_all_usd + 1e-6:
            raise ValueError("renting the shortfall cannot cost more than renting it all")

    @property
    def saved_usd(self) -> float:
        """What recovering saves against renting it all."""
        return self.rent_all_usd - self.recover_usd

    @property
    def meets_deadline(self) -> bool | None:
        """The run's projected wall time on ``devices`` (rented capacity filling the hours the
        fleet has none idle) fits the deadline; ``None``: no deadline."""
        if self.deadline_s is None:
            return None
        return self.needed_gpu_h / self.devices * 3600.0 <= self.deadline_s * (1 + 1e-12)


def train_buy_or_recover(
    *,
    accelerator: str,
    devices: int,
    time_s: float,
    time_low_s: float,
    time_high_s: float,
    usd_per_gpu_hour: float,
    price_source: str,
    fleet: Sequence[FleetClass],
    deadline_s: float | None = None,
) -> TrainRecovery | None:
    """A synchronous training run of ``time_s`` (projected, with its interval) on ``devices``
    GPUs of ``accelerator``'s family, set against the fleet's idle GPUs of that family.

    Synchronous data/tensor parallelism needs all ``devices`` at once, so only the UTC hours
    with at least ``devices`` idle GPUs count; the run is assumed to pause (checkpoint) outside
    them, every day alike. Without a deadline every GPU-hour is recovered where some hour
    allows it (taking :attr:`TrainRecovery.days_on_recovered`); with one, the idle hours within
    it are recovered and the rest is rented. ``None`` when the fleet has no GPU of the family.

    Raises:
        ValueError: a time, price, device count or deadline that is not a positive finite
            number, or ``time_low_s <= time_s <= time_high_s`` does not hold.
    """
    if devices < 1:
        raise ValueError(f"devices must be >= 1, got {devices}")
    for name, value in (("time_s", time_s), ("usd_per_gpu_hour", usd_per_gpu_hour)):
        _finite(name, value)
    if not 0 < time_low_s <= time_s <= time_high_s or not math.isfinite(time_high_s):
        raise ValueError(f"times must be 0 < low <= point <= high, got {time_low_s, time_s}")
    if deadline_s is not None and not (math.isfinite(deadline_s) and deadline_s > 0):
        raise ValueError(f"deadline_s must be positive and finite, got {deadline_s}")
    family = gpu_family(accelerator)[0]
    match = next((c for c in fleet if family and c.family == family), None)
    if match is None:
        return None
    hours = tuple(h for h, idle in enumerate(match.idle_gpus_by_hour) if idle >= devices - 1e-9)
    per_day = float(devices * len(hours))
    needed = devices * time_s / 3600.0
    if not hours:
        recovered = 0.0
    elif deadline_s is None:
        recovered = needed
    else:
        recovered = min(needed, per_day * deadline_s / 86400.0)
    rented = needed - recovered
    before = (
        match.cost_usd_per_day / match.useful_gpu_h_per_day
        if match.useful_gpu_h_per_day > 0
        else None
    )
    after = (
        None
        if before is None or not hours
        else (match.cost_usd_per_day / (match.useful_gpu_h_per_day + per_day))
    )
    return TrainRecovery(
        accelerator=accelerator,
        family=match.family,
        devices=devices,
        needed_gpu_h=needed,
        needed_gpu_h_low=devices * time_low_s / 3600.0,
        needed_gpu_h_high=devices * time_high_s / 3600.0,
        hours_of_day=hours,
        recovered_gpu_h_per_day=per_day,
        days_on_recovered=needed / per_day if per_day > 0 else None,
        deadline_s=deadline_s,
        recovered_gpu_h=recovered,
        rented_gpu_h=rented,
        usd_per_gpu_hour=usd_per_gpu_hour,
        price_source=price_source,
        rent_all_usd=needed * usd_per_gpu_hour,
        recover_usd=rented * usd_per_gpu_hour,
        fleet_usd_per_useful_gpu_hour_before=before,
        fleet_usd_per_useful_gpu_hour_after=after,
        source=match.source,
    )
