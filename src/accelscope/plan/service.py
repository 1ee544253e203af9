"""The capacity plan: every catalog option's capacity (measured or projected), fleet and cost.

Which measurement belongs to which option: a measurement made HERE (a load capacity, a bench
result, or ``--capacity``) is attached to the catalog entry named by ``here`` (``--here TYPE``:
"this machine is a c7i.2xlarge"); without it, to a synthetic option ``this machine`` that has
no price (its fleet is sized, its cost is not). Every other option is projected from the
model's roofline profile, and labelled ``estimate``. With no roofline profile stored, from the
model's work counted without a run (``Evidence.static``): the published projection alone, with
the wider interval such a projection has (:mod:`accelscope.plan.projection.static`), labelled
``estimate, static``.

Measure, then tighten: a capacity measured on a catalog instance (``--here TYPE`` with a stored
load or bench run, or ``--node-type`` results) is added to the published efficiency model as
one more row (:mod:`accelscope.plan.projection.tighten`): every projected option of the same
accelerator family is labelled ``narrowed by your run ID on TYPE``, and its interval narrows as
far as the run adds to what the published table knows of the family (most where it has no
published row of the model's class). The run's id is read from ``Evidence.sources`` (``load
run ID``, ``bench run ID``, ``run ID on node type N as TYPE``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from accelscope.documents import LlmCapacity, LoadCapacity, RooflineProfile
from accelscope.errors import BadInputError
from accelscope.hardware.energy import EnergyFigure
from accelscope.plan.capacity import (
    Calibration,
    CapacityEstimate,
    bench_capacity,
    best_calibration,
    given_capacity,
    llm_capacity,
    measured_capacity,
    project_capacity,
    published_estimate,
)
from accelscope.plan.catalog import Catalog, Instance
from accelscope.plan.energy import EnergyPrice, figure_key, option_energy
from accelscope.plan.fleet import (
    Option,
    OptionCost,
    PlanSettings,
    Recommendation,
    plan_fleet,
    requests_per_month,
)
from accelscope.plan.projection.capacity import ModelWork, published_capacity
from accelscope.plan.projection.efficiency import EfficiencyModel
from accelscope.plan.projection.static import STATIC_SOURCE, static_capacity
from accelscope.plan.projection.tighten import UserRun, tightened
from accelscope.plan.traffic import Traffic
from accelscope.serialise import dump

__all__ = ["PLAN_SCHEMA", "THIS_MACHINE", "BenchFigure", "CapacityPlan", "Evidence", "build_plan"]

THIS_MACHINE = "this machine"
PLAN_SCHEMA = 1


@dataclass(frozen=True, kw_only=True)
class BenchFigure:
    """One bench configuration's closed-loop throughput and per-call p99 (measured here)."""

    label: str
    items_per_s: float
    p99_s: float
    device: str = "cpu"
    backend: str = ""
    precision: str = ""
    batch_size: int = 0
    batch_time_s: float = 0.0
    energy: EnergyFigure | None = None
    """The configuration's energy window (joules per item), when it was measured."""

    def calibration(self) -> Calibration | None:
        """This figure as a projection calibration (``None`` without its configuration)."""
        if (
            not self.backend
            or not self.precision
            or self.batch_size <= 0
            or (self.batch_time_s <= 0)
        ):
            return None
        return Calibration(
            label=self.label,
            backend=self.backend,
            precision=self.precision,
            batch_size=self.batch_size,
            batch_time_s=self.batch_time_s,
            device=self.device,
        )


@dataclass(frozen=True, kw_only=True)
class Evidence:
    """What was measured on this machine for the model (any part may be missing)."""

    profile: RooflineProfile | None = None
    capacities: tuple[LoadCapacity, ...] = ()
    bench: tuple[BenchFigure, ...] = ()
    given_qps: float | None = None
    llm: LlmCapacity | None = None
    """An ``llm`` run's capacity at its SLO (requests/s): the measured capacity here."""
    sources: tuple[str, ...] = ()
    by_instance: Mapping[str, tuple[BenchFigure, ...]] = field(default_factory=dict)
    """Bench figures measured on cluster nodes, by the catalog instance type their node type
    stands for (``--node-type INSTANCE=NODE_TYPE``): measured capacity for that entry."""
    static: ModelWork | None = None
    """The model's work counted without a run (FLOPs and bytes, no time), used only where no
    roofline ``profile`` is stored."""
    static_missing: str = ""
    """Why the model's work could not be counted without a run, where it was tried."""

    def energy_figures(self) -> dict[str, EnergyFigure]:
        """Every energy figure measured with a capacity, by :func:`figure_key`: each bench
        configuration's, and each load run's capacity trial's (joules per query)."""
        found: dict[str, EnergyFigure] = {}
        benches = [*self.bench, *(b for group in self.by_instance.values() for b in group)]
        for figure in benches:
            if figure.energy is not None:
                found[figure_key("bench", figure.label)] = figure.energy
        for capacity in self.capacities:
            energy = (capacity.capacity_trial or {}).get("energy")
            if isinstance(energy, dict):
                found[figure_key("measured", capacity.label)] = EnergyFigure.model_validate(energy)
        return found

    @property
    def device(self) -> str | None:
        """The device the measurements ran on (``cpu``/``cuda``), if any says."""
        for device in (
            [c.device for c in self.capacities]
            + [b.device for b in self.bench]
            + ([self.profile.device] if self.profile else [])
        ):
            return device
        return None


@dataclass(frozen=True, kw_only=True)
class CapacityPlan:
    """The ranked options, the recommendation and everything they were derived from."""

    model: str
    traffic: Traffic
    settings: PlanSettings
    options: tuple[OptionCost, ...]
    recommendation: Recommendation
    here: str | None
    catalog_files: tuple[str, ...]
    sources: tuple[str, ...]
    energy_price: EnergyPrice | None = None
    ranking: str = ""
    """Whether the choice is told apart from the runner-up once the projections' intervals are
    counted, and what would decide it."""

    def to_dict(self) -> dict[str, Any]:
        """The stored ``plan`` document (JSON-ready); the views render this form."""
        return {
            "ranking": self.ranking,
            "schema": PLAN_SCHEMA,
            "mode": "capacity",
            "model": self.model,
            "traffic": self.traffic.model_dump(mode="json"),
            "settings": dump(self.settings),
            "options": [o.to_dict() for o in self.options],
            "recommendation": dump(self.recommendation),
            "here": self.here,
            "catalog_files": list(self.catalog_files),
            "sources": list(self.sources),
            "energy_price": None if self.energy_price is None else dump(self.energy_price),
        }


def _here_capacity(
    evidence: Evidence, settings: PlanSettings, devices: int
) -> CapacityEstimate | None:
    """The best capacity measured here: given > load (SLA-tested) > bench."""
    if evidence.given_qps is not None:
        return given_capacity(evidence.given_qps)
    if evidence.llm is not None and evidence.llm.capacity:
        return llm_capacity(evidence.llm)
    loads = [measured_capacity(c, settings.sla_p99_s, devices) for c in evidence.capacities]
    usable = [c for c in loads if c.meets_sla]
    if usable:
        return max(usable, key=lambda c: c.qps_per_instance)
    if evidence.bench:
        best = _best_bench(evidence.bench, settings)
        if best.meets_sla or not loads:
            return best
    return loads[0] if loads else None


def _best_bench(figures: Sequence[BenchFigure], settings: PlanSettings) -> CapacityEstimate:
    """The highest bench throughput whose p99 meets the SLA (else the first figure's)."""
    benches = [bench_capacity(b.items_per_s, b.p99_s, b.label, settings.sla_p99_s) for b in figures]
    fitting = [b for b in benches if b.meets_sla]
    return max(fitting, key=lambda c: c.qps_per_instance) if fitting else benches[0]


def _check_kind(instance: Instance, device: str | None, named_by: str, where: str) -> None:
    """Refuse a catalog entry of another kind (cpu/gpu) than the device measured."""
    if device is None:
        return
    expected = "gpu" if device == "cuda" else "cpu"
    if instance.kind != expected:
        raise BadInputError(
            f"{named_by} {instance.type} is a {instance.kind} instance, but the measurements "
            f"{where} ran on {device}"
        )


def _option(instance: Instance, capacity: CapacityEstimate | None, reason: str = "") -> Option:
    if instance.kind != "cpu":
        description = f"{instance.accelerator_count}x {instance.accelerator}"
    else:
        description = f"{instance.accelerator.split(' (')[0]}, {instance.vcpus} vCPU"
    return Option(
        name=instance.type,
        kind=instance.kind,
        description=description,
        price_usd_per_hour=instance.price_usd_per_hour,
        capacity=capacity,
        reason=reason,
        spot_price_usd_per_hour=instance.spot_price_usd_per_hour,
    )


def _projected(
    profile: RooflineProfile,
    instance: Instance,
    settings: PlanSettings,
    here: Instance | None,
    calibration: Calibration | None,
    model: EfficiencyModel | None = None,
) -> CapacityEstimate | None:
    """An option's projected capacity: from published results where the option's part and the
    model's class have them (``model``: narrowed by the user's runs, where any), else this
    machine's efficiency carried over (CPU and GPU only: a TPU's or NPU's has no footing
    here)."""
    carried = (
        project_capacity(profile, instance, settings.sla_p99_s, here, calibration)
        if instance.kind in ("cpu", "gpu")
        else None
    )
    published = published_capacity(profile, instance, settings.sla_p99_s, model)
    if published is not None:
        return _labelled(published_estimate(published, carried))
    return carried


def _static_projected(
    work: ModelWork,
    instance: Instance,
    settings: PlanSettings,
    model: EfficiencyModel | None = None,
) -> CapacityEstimate | None:
    """An option's capacity projected from the model's counted work alone (no roofline run):
    the published projection with its interval widened as the leave-one-out measured."""
    published = static_capacity(work, instance, settings.sla_p99_s, model)
    if published is None:
        return None
    estimate = published_estimate(published, None)
    return _labelled(
        replace(
            estimate,
            label=estimate.label.replace("estimate", "estimate, static", 1),
            detail={**estimate.detail, "source": STATIC_SOURCE},
        )
    )


def _labelled(estimate: CapacityEstimate) -> CapacityEstimate:
    """``estimate`` with what narrowed its interval in its label, where the user's runs did."""
    published = estimate.published
    if published is None or not published.narrowed_by:
        return estimate
    return replace(
        estimate,
        label=f"{estimate.label}, narrowed by {published.narrowed_by}",
        detail={**estimate.detail, "narrowed_by": published.narrowed_by},
    )


_RUN_SOURCE = re.compile(r"^(?P<kind>\w+) run (?P<id>\S+)$")
_NODE_SOURCE = re.compile(r"^run (?P<id>\S+) on node type \S+ as (?P<instance>\S+)$")


def _source_run(sources: Sequence[str], kind: str, fallback: str) -> str:
    """The id of the ``kind`` run the evidence names (``load run ID``, as the store's
    gatherer writes it); ``fallback`` (the capacity's own label, quoted) where none does."""
    for source in sources:
        found = _RUN_SOURCE.match(source)
        if found and found["kind"] == kind:
            return found["id"]
    return f"'{fallback}'"


def _user_runs(
    evidence: Evidence,
    settings: PlanSettings,
    here: Instance | None,
    here_cap: CapacityEstimate | None,
    catalog: Catalog,
) -> list[UserRun]:
    """The capacities measured on catalog instances, as the runs that narrow projections:
    the ``--here`` entry's load (per device: the capacity is the instance's) or bench figure
    (one device), and each ``--node-type`` entry's best bench figure. A given capacity or an
    LLM run's is not a measurement of this model's efficiency, and one that missed the SLA
    has no capacity to set."""
    runs: list[UserRun] = []
    usable = here_cap is not None and here_cap.meets_sla and here_cap.qps_per_instance > 0
    if here is not None and here_cap is not None and usable:
        if here_cap.basis == "measured" and "load_label" in here_cap.detail:
            runs.append(
                UserRun(
                    run_id=_source_run(evidence.sources, "load", here_cap.detail["load_label"]),
                    instance=here,
                    items_per_s_per_device=here_cap.qps_per_instance / here.devices,
                    scenario="Server",
                )
            )
        elif here_cap.basis == "bench":
            runs.append(
                UserRun(
                    run_id=_source_run(evidence.sources, "bench", here_cap.detail["bench_label"]),
                    instance=here,
                    items_per_s_per_device=here_cap.qps_per_instance,
                    scenario="Offline",
                )
            )
    node_runs = {
        found["instance"]: found["id"]
        for found in (_NODE_SOURCE.match(source) for source in evidence.sources)
        if found
    }
    for name, figures in evidence.by_instance.items():
        best = _best_bench(figures, settings) if figures else None
        if best is None or not best.meets_sla or best.qps_per_instance <= 0:
            continue
        runs.append(
            UserRun(
                run_id=node_runs.get(name, f"'{best.detail['bench_label']}'"),
                instance=catalog.get(name),
                items_per_s_per_device=best.qps_per_instance,
                scenario="Offline",
            )
        )
    return runs


def _missing_reason(model: str, instance: Instance, evidence: Evidence) -> str:
    """Why an option has no capacity when no roofline profile of ``model`` is stored."""
    if evidence.static is not None:
        return (
            f"no roofline run of {model} stored, and its counted work has no published result "
            f"to project onto {instance.type} from (run: accelscope roofline {model})"
        )
    why = f": {evidence.static_missing}" if evidence.static_missing else ""
    return (
        f"no roofline profile of {model} to project from (run: accelscope roofline {model})" + why
    )


def _bounds(cost: OptionCost) -> tuple[float, float]:
    """The option's $ per million inferences at the ends of its capacity's interval (the
    fleet scaled inversely with capacity); a measured capacity has none: both ends equal."""
    per_million = cost.per_million_autoscaled
    capacity = cost.option.capacity
    if per_million is None or capacity is None:
        return math.inf, math.inf
    published = capacity.published
    if published is None or capacity.qps_per_instance <= 0:
        return per_million, per_million
    point = capacity.qps_per_instance
    return (
        per_million * point / published.high_qps_per_instance,
        per_million * point / published.low_qps_per_instance,
    )


def ranking_note(ranked: Sequence[OptionCost], choice: str | None) -> str:
    """Whether ``choice`` is cheaper than the runner-up at every capacity within the intervals;
    if not, which measurement decides."""
    priced = [c for c in ranked if c.feasible and c.per_million_autoscaled is not None]
    first = next((c for c in priced if c.option.name == choice), None)
    others = [c for c in priced if c.option.name != choice]
    if first is None or not others:
        return ""
    runner = min(others, key=lambda c: _bounds(c)[0])
    _, first_worst = _bounds(first)
    runner_best, _ = _bounds(runner)
    if first_worst <= runner_best:
        return (
            f"decided: {first.option.name} costs less per million than {runner.option.name} "
            "at every capacity within their 80 % intervals"
        )
    estimated = [
        c.option.name
        for c in (first, runner)
        if c.option.capacity and c.option.capacity.is_estimate
    ]
    decide = (
        f"one accelscope load run on {' or '.join(estimated)} decides it"
        if estimated
        else "measure both under load to decide"
    )
    return (
        f"not decided: {first.option.name} and {runner.option.name} cannot be told apart at "
        f"this traffic within their 80 % intervals; {decide}"
    )


def build_plan(
    model: str,
    catalog: Catalog,
    traffic: Traffic,
    settings: PlanSettings,
    evidence: Evidence,
    here: str | None = None,
    only: Sequence[str] = (),
    energy_price: EnergyPrice | None = None,
) -> CapacityPlan:
    """Capacity, fleet and cost of every catalog option (or of ``only`` these types); each
    option's energy where it was measured with its capacity (priced at ``energy_price``)."""
    here_instance = catalog.get(here) if here else None
    if here_instance is not None:
        _check_kind(here_instance, evidence.device, "--here", "here")
    instances = [catalog.get(name) for name in only] if only else list(catalog.instances)
    if here_instance is not None and here_instance not in instances:
        instances.insert(0, here_instance)
    here_cap = _here_capacity(evidence, settings, here_instance.devices if here_instance else 1)
    profile = evidence.profile
    calibration = None
    if profile is not None:
        found = (b.calibration() for b in evidence.bench)
        calibration = best_calibration([c for c in found if c is not None], profile.device)
    work: ModelWork | None = profile if profile is not None else evidence.static
    runs = _user_runs(evidence, settings, here_instance, here_cap, catalog)
    narrowed = tightened(work, runs) if work is not None and runs else None
    options: list[Option] = []
    if here_instance is None and here_cap is not None:
        options.append(
            Option(
                name=THIS_MACHINE,
                kind=evidence.device or "cpu",
                description="where the measurements ran (give --here TYPE to price it)",
                price_usd_per_hour=None,
                capacity=here_cap,
            )
        )
    for name, figures in evidence.by_instance.items():
        node_instance = catalog.get(name)
        node_type = figures[0].label.rpartition("@")[2] if figures else ""
        _check_kind(
            node_instance,
            figures[0].device if figures else None,
            "--node-type",
            f"on {node_type}",
        )
        if node_instance not in instances:
            instances.insert(0, node_instance)
    for instance in instances:
        if evidence.by_instance.get(instance.type):
            options.append(
                _option(instance, _best_bench(evidence.by_instance[instance.type], settings))
            )
        elif instance is here_instance and here_cap is not None:
            options.append(_option(instance, here_cap))
        elif profile is not None:
            projected = _projected(
                profile, instance, settings, here_instance, calibration, narrowed
            )
            why = (
                f"no published result of {model}'s workload class to project onto a "
                f"{instance.kind} from, and this machine's efficiency does not carry over to one"
            )
            options.append(_option(instance, projected, "" if projected else why))
        elif evidence.static is not None:
            projected = _static_projected(evidence.static, instance, settings, narrowed)
            reason = "" if projected else _missing_reason(model, instance, evidence)
            options.append(_option(instance, projected, reason))
        else:
            options.append(_option(instance, None, _missing_reason(model, instance, evidence)))
    if not any(o.capacity is not None for o in options):
        why = f" ({evidence.static_missing})" if evidence.static_missing else ""
        if evidence.static is not None:
            why = " (its counted work has no published result to project onto these options)"
        raise BadInputError(
            f"nothing known about {model}'s capacity: no roofline profile, load capacity or bench "
            "result in the store for it (run accelscope roofline/load/bench, or give --capacity)"
            + why
        )
    ranked, recommendation = plan_fleet(options, traffic, settings)
    energy = evidence.energy_figures()
    monthly = requests_per_month(traffic)
    ranked = tuple(
        replace(
            cost,
            energy=option_energy(cost.option.capacity, energy, monthly, energy_price),
        )
        for cost in ranked
    )
    return CapacityPlan(
        ranking=ranking_note(ranked, recommendation.choice),
        model=model,
        traffic=traffic,
        settings=settings,
        options=ranked,
        recommendation=recommendation,
        here=here,
        catalog_files=catalog.files,
        sources=_sources(evidence),
        energy_price=energy_price,
    )


def _sources(evidence: Evidence) -> tuple[str, ...]:
    """What the plan was derived from: the stored runs, and the counted work where used."""
    if evidence.profile is None and evidence.static is not None:
        work = evidence.static
        return (*evidence.sources, f"{STATIC_SOURCE} ({work.model}, batch {work.batch_size})")
    return evidence.sources
