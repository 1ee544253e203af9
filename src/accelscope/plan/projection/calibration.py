"""The published table set against the datasheets: each row's efficiency, and the fitted model.

A row's value on the model's scale is ``log(throughput per device / 8-bit peak per device)``
(:data:`accelscope.plan.accelerators.LOW_PRECISION`): closed-division submissions quantise to
8 bits, and the table does not say which submission used which. A row whose part has no
datasheet here (a variant not in ``accelerators.toml``) is left out, and says why.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from accelscope.plan.accelerators import Accelerators, AcceleratorSpec, load_accelerators
from accelscope.plan.projection.efficiency import EfficiencyModel, Observation, Prediction, fit
from accelscope.plan.projection.published import PublishedResult, PublishedTable, load_published
from accelscope.plan.projection.workloads import Benchmark, benchmark

__all__ = [
    "Calibrated",
    "Calibration",
    "calibrate",
    "project",
    "shipped_calibration",
    "spec_for",
]

_CPU_MODEL = re.compile(r"\b(\d{4}[A-Z+]*)\b")


def spec_for(result: PublishedResult, accelerators: Accelerators) -> AcceleratorSpec | None:
    """The datasheet of the part ``result`` ran on, or ``None`` where none matches it.

    CPUs match by model number (``8592+``), other families by form factor where the family
    has several (``SXM``, ``PCIe``, ``NVL``), else the family's one part."""
    candidates = accelerators.of_family(result.family)
    if not candidates:
        return None
    if all(c.kind == "cpu" for c in candidates):
        model = _CPU_MODEL.search(result.accelerator.upper())
        if model is None:
            return None
        return next((c for c in candidates if model.group(1) in c.name.upper()), None)
    if len(candidates) == 1:
        return candidates[0]
    variant = (result.variant or "").upper()
    if variant.startswith("SXM"):
        matches = [c for c in candidates if "SXM" in c.name.upper()]
    elif variant:
        matches = [c for c in candidates if variant in c.name.upper()]
    else:
        matches = []
    return matches[0] if len(matches) == 1 else None


@dataclass(frozen=True)
class Calibrated:
    """One published row on the model's scale, with the datasheet it was set against."""

    result: PublishedResult
    spec: AcceleratorSpec
    benchmark: Benchmark
    observation: Observation

    @property
    def efficiency(self) -> float | None:
        """Share of the 8-bit peak the row reached, where the benchmark's work is known."""
        if self.benchmark.ops_per_sample is None:
            return None
        return math.exp(self.observation.log_value) * self.benchmark.ops_per_sample


@dataclass(frozen=True)
class Calibration:
    """The calibrated rows, the rows left out (with why), and the model fitted to all."""

    rows: tuple[Calibrated, ...]
    left_out: tuple[tuple[PublishedResult, str], ...]
    model: EfficiencyModel


def group_of(bench: Benchmark, scenario: str) -> str:
    """The model's group name of a benchmark in a scenario: ``resnet50/Offline``."""
    return f"{bench.name}/{scenario}"


def calibrated_rows(
    table: PublishedTable, accelerators: Accelerators
) -> tuple[list[Calibrated], list[tuple[PublishedResult, str]]]:
    """Every row set against its datasheet, and the rows that have none."""
    rows: list[Calibrated] = []
    left_out: list[tuple[PublishedResult, str]] = []
    for result in table.results:
        spec = spec_for(result, accelerators)
        if spec is None:
            left_out.append((result, f"no datasheet for {result.accelerator!r} here"))
            continue
        bench = benchmark(result.benchmark)
        _, peak = spec.low_precision_peak
        observation = Observation(
            group=group_of(bench, result.scenario),
            family=result.family,
            workload_class=bench.workload_class,
            log_value=math.log(result.per_device / peak),
        )
        rows.append(Calibrated(result, spec, bench, observation))
    return rows, left_out


def calibrate(table: PublishedTable, accelerators: Accelerators) -> Calibration:
    """The model fitted to every row of ``table`` that has a datasheet."""
    rows, left_out = calibrated_rows(table, accelerators)
    model = fit([r.observation for r in rows])
    return Calibration(tuple(rows), tuple(left_out), model)


@functools.cache
def shipped_calibration() -> Calibration:
    """The model fitted to the shipped table and datasheets (once per process)."""
    return calibrate(load_published(), load_accelerators())


def project(
    model: EfficiencyModel, bench: Benchmark, scenario: str, spec: AcceleratorSpec
) -> Prediction:
    """Throughput per device of ``bench`` in ``scenario`` on ``spec``, as a prediction on the
    log scale of items (or tokens) per second."""
    prediction = model.predict(group_of(bench, scenario), spec.family, bench.workload_class)
    _, peak = spec.low_precision_peak
    return prediction.shifted(math.log(peak), 0.0, prediction.basis)


def rows_of(calibration: Calibration, family: str) -> Sequence[Calibrated]:
    """The calibrated rows of one family."""
    return [r for r in calibration.rows if r.result.family == family]
