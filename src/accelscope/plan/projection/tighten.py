"""Measure, then tighten: the user's own measured capacity narrows the projection's interval.

A capacity the user measured on a catalog instance (a stored ``load`` or ``bench`` run with
``--here TYPE``, or a ``--run`` measured on a cluster node mapped to an instance) is set on the
efficiency model's scale exactly as a published row is (:func:`~.capacity.measured_observation`:
items/s per device x the model's work per item / (the part's 8-bit peak x the class
benchmark's work per sample)) and added to the model as one more row
(:meth:`~.efficiency.EfficiencyModel.updated`). Its variance is the class's spread between
systems (the user's stack and model are another system) plus the measurement's own run-to-run
spread (:data:`RUN_TO_RUN_LOG_SD`). The family it was measured on narrows; others move only
through the group mean they share. ``benchmarks/plan_tighten_loo.py`` checks that the narrowed
intervals still hold about 80 % of left-out published rows.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Literal, TypeVar

from accelscope.plan.catalog import Instance
from accelscope.plan.projection.calibration import Calibrated, Calibration, shipped_calibration
from accelscope.plan.projection.capacity import ModelWork, measured_observation
from accelscope.plan.projection.efficiency import EfficiencyModel, Measured, fit
from accelscope.plan.projection.validation import COVERAGE, Holdout

__all__ = [
    "RUN_TO_RUN_LOG_SD",
    "Tightened",
    "UserRun",
    "measured_point",
    "stand_in",
    "tighten_leave_one_out",
    "tightened",
]

RUN_TO_RUN_LOG_SD = 0.059
"""A stored run's own spread on the log scale: the standard deviation over the median of five
separate runs of one fixed workload on a shared 2-vCPU machine, 5.9 % (docs/BENCHMARKS.md,
"Run-to-run spread of a fixed workload", 2026-11-20; ``benchmarks/run_to_run_spread.py``).
Small beside the classes' spread between systems (0.08-0.17), which the update also adds."""

Scenario = Literal["Server", "Offline"]
_Row = TypeVar("_Row")


@dataclass(frozen=True, kw_only=True)
class UserRun:
    """One of the user's stored runs, as a capacity measured on a catalog instance."""

    run_id: str
    instance: Instance
    items_per_s_per_device: float
    scenario: Scenario
    """MLPerf's scenario the measurement is like: ``Server`` for a load run (open-loop
    arrivals under a p99 bound), ``Offline`` for a bench run (back to back)."""

    def __post_init__(self) -> None:
        if not self.run_id:
            raise ValueError("a user's run needs its id (the label names it)")
        if not self.items_per_s_per_device > 0:
            raise ValueError(
                f"run {self.run_id}: a measured capacity is positive, got "
                f"{self.items_per_s_per_device}"
            )

    @property
    def label(self) -> str:
        """What the narrowed options say narrowed them."""
        return f"your run {self.run_id} on {self.instance.type}"


def measured_point(work: ModelWork, run: UserRun) -> Measured | None:
    """``run`` as a row of the efficiency model, with its run-to-run variance; ``None`` where
    its instance names no datasheet or the model has no published class."""
    observation = measured_observation(work, run.instance, run.items_per_s_per_device, run.scenario)
    if observation is None:
        return None
    return Measured(observation, RUN_TO_RUN_LOG_SD**2, run.label)


def tightened(work: ModelWork, runs: Sequence[UserRun]) -> EfficiencyModel | None:
    """The shipped model updated with every run that has a published footing; ``None`` where
    none has (nothing to narrow)."""
    points = [p for p in (measured_point(work, run) for run in runs) if p is not None]
    if not points:
        return None
    return shipped_calibration().model.updated(points)


@dataclass(frozen=True)
class Tightened:
    """One left-out published row projected before and after one other row of its family and
    workload class was added as the user's measurement."""

    before: Holdout
    after: Holdout
    measured: str
    """The key of the published row that played the user's measurement."""


def stand_in(
    row: _Row,
    rows: Sequence[_Row],
    *,
    system: Callable[[_Row], Hashable],
    key: Callable[[_Row], Hashable],
) -> _Row | None:
    """The row that plays the user's measurement when ``row`` is left out: the first (in table
    order) of another ``system`` with the same ``key`` (family and workload class, or family
    and recipe)."""
    return next((r for r in rows if system(r) != system(row) and key(r) == key(row)), None)


def _system(row: Calibrated) -> tuple[str, str, str]:
    return (row.result.round, row.result.submitter, row.result.system)


def _holdout(model: EfficiencyModel, row: Calibrated) -> Holdout:
    o = row.observation
    prediction = model.predict(o.group, o.family, o.workload_class)
    low, high = prediction.interval(COVERAGE)
    scale = row.result.per_device / math.exp(o.log_value)  # the part's 8-bit peak
    return Holdout(
        key=row.result.key,
        family=o.family,
        workload_class=o.workload_class,
        published=row.result.per_device,
        point=prediction.point * scale,
        low=low * scale,
        high=high * scale,
        basis=prediction.basis,
    )


def tighten_leave_one_out(calibration: Calibration, *, unpublished: bool) -> list[Tightened]:
    """Each row projected before and after "the user's measurement": the first row (in table
    order) of the same family and workload class from another system. The fit leaves out the
    row with the rest of its system's rows on its benchmark (as
    :func:`~.validation.leave_one_out` does) and every row of the measuring system (a user's
    machine is not in the table). ``unpublished``: the fit also leaves out every row of the
    family, as for a part MLPerf has no result of (the measurement is then all it knows)."""
    rows = calibration.rows
    held: list[Tightened] = []
    fits: dict[str, EfficiencyModel] = {}
    for row in rows:
        o = row.observation
        partner = stand_in(
            row,
            rows,
            system=_system,
            key=lambda r: (r.observation.family, r.observation.workload_class),
        )
        if partner is None:
            continue
        if unpublished:
            rest = [r.observation for r in rows if r.observation.family != o.family]
            if o.family not in fits:
                fits[o.family] = fit(rest)
            model = fits[o.family]
        else:
            rest = [
                r.observation
                for r in rows
                if _system(r) != _system(partner)
                and (_system(r), r.benchmark.name) != (_system(row), row.benchmark.name)
            ]
            model = fit(rest)
        groups = {other.group for other in rest}
        if o.group not in groups or partner.observation.group not in groups:
            continue
        measured = Measured(
            partner.observation, RUN_TO_RUN_LOG_SD**2, f"published row {partner.result.key}"
        )
        held.append(
            Tightened(
                before=_holdout(model, row),
                after=_holdout(model.updated([measured]), row),
                measured=partner.result.key,
            )
        )
    return held
