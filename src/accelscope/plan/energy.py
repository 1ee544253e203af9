"""Energy in a capacity plan: the joules per item measured with the capacity an option is sized
from, and what the month's requests take in kWh and dollars at a given $/kWh.

Which figure belongs to which option: the one measured together with the option's capacity (the
load run's capacity trial, or the bench configuration; matched by its label). A projected
option, a capacity given with ``--capacity`` or an ``llm`` run's carry no energy ("not
measured: why"): energy is measured, never projected.

Arithmetic: kWh a month = J/item x requests a month x PUE / 3.6e6; $ = kWh x $/kWh; $ per
million inferences = J/item x 1e6 x PUE / 3.6e6 x $/kWh. It is the energy of the *served*
items at the load the figure was measured under (the whole GPU board, as NVML counts it): idle
power of spare or always-on capacity is not in it, so it is a lower bound for the fleet. A cloud
instance's price already includes its energy; the figure says what share of it energy is, and
prices energy where you pay for it yourself (on-premises, or the "this machine" option, which
has no rental price).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from accelscope.errors import BadInputError
from accelscope.hardware.energy import EnergyFigure
from accelscope.plan.capacity import CapacityEstimate

__all__ = ["EnergyPrice", "OptionEnergy", "option_energy"]

J_PER_KWH = 3.6e6


@dataclass(frozen=True, kw_only=True)
class EnergyPrice:
    """What a kWh at the wall costs (US$) and the facility's power usage effectiveness (PUE:
    wall energy / IT energy; 1.0 counts the GPU board's energy only)."""

    usd_per_kwh: float
    pue: float = 1.0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.usd_per_kwh) and self.usd_per_kwh > 0):
            raise BadInputError(f"--energy-price must be a positive $/kWh, got {self.usd_per_kwh}")
        if not (math.isfinite(self.pue) and self.pue >= 1.0):
            raise BadInputError(f"--pue must be 1.0 or more (wall / IT energy), got {self.pue}")


@dataclass(frozen=True, kw_only=True)
class OptionEnergy:
    """One option's energy: joules per item as measured (``None``: not measured, ``reason``
    says why) and, for the month's traffic, kWh and (priced) dollars."""

    joules_per_item: float | None
    source: str = ""
    reason: str = ""
    uncertainty_rel: float | None = None
    kwh_per_month: float | None = None
    usd_per_month: float | None = None
    usd_per_million: float | None = None


def _figure_key(capacity: CapacityEstimate) -> str | None:
    """The label of the measurement the capacity came from (load run or bench config)."""
    for key in ("load_label", "bench_label"):
        value = capacity.detail.get(key)
        if value:
            return f"{capacity.basis}:{value}"
    return None


def figure_key(basis: str, label: str) -> str:
    """The key :func:`option_energy` looks figures up by: a capacity basis (``measured`` for a
    load run, ``bench``) and the measurement's label."""
    return f"{basis}:{label}"


def option_energy(
    capacity: CapacityEstimate | None,
    figures: Mapping[str, EnergyFigure],
    requests_per_month: float,
    price: EnergyPrice | None,
) -> OptionEnergy:
    """The energy of an option sized from ``capacity``: the figure measured with it (by
    :func:`figure_key`), scaled to ``requests_per_month`` and priced at ``price``."""
    if capacity is None:
        return OptionEnergy(joules_per_item=None, reason="no capacity, so no measurement")
    if capacity.basis == "projected":
        return OptionEnergy(
            joules_per_item=None,
            reason="a projected option: energy is measured, not projected (accelscope load or "
            "bench on that machine measures it)",
        )
    if capacity.basis not in ("measured", "bench"):
        return OptionEnergy(
            joules_per_item=None,
            reason=f"its capacity is {capacity.label}: no energy was measured with it",
        )
    key = _figure_key(capacity)
    figure = figures.get(key) if key else None
    if figure is None:
        return OptionEnergy(
            joules_per_item=None,
            reason="the measurement behind its capacity has no energy figure (stored before "
            "accelscope measured energy)",
        )
    per_item = figure.joules_per_item
    if per_item is None:
        return OptionEnergy(
            joules_per_item=None, source=figure.source, reason=figure.reason or "no items"
        )
    pue = price.pue if price is not None else 1.0
    kwh = per_item * requests_per_month * pue / J_PER_KWH
    return OptionEnergy(
        joules_per_item=per_item,
        source=figure.source,
        uncertainty_rel=figure.uncertainty_rel,
        kwh_per_month=kwh,
        usd_per_month=None if price is None else kwh * price.usd_per_kwh,
        usd_per_million=(
            None if price is None else per_item * 1e6 * pue / J_PER_KWH * price.usd_per_kwh
        ),
    )
