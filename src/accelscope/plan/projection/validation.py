"""Leave-one-out over the published table: how wrong the projection is, and how often its
80 % interval holds the published figure.

Each row is projected from a model fitted without it, and, by default, without every other row
of the same system on the same benchmark (its other scenario, its ``-99``/``-99.9`` twin: the
same hardware and software would otherwise predict itself). A row whose benchmark and scenario
no other row has cannot be projected and is counted apart.

This is data, not timing: ``tests/plan/projection/test_projection_validation.py`` holds it on
every run, so a change that makes projections worse fails CI.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from accelscope.plan.projection.calibration import Calibrated, Calibration
from accelscope.plan.projection.efficiency import fit

__all__ = ["Holdout", "LooSummary", "leave_one_out", "summarise", "summary_table"]

COVERAGE = 0.8
"""The prediction interval every projection states."""

Mode = Literal["row", "system"]


@dataclass(frozen=True)
class Holdout:
    """One row projected from the others."""

    key: str
    family: str
    workload_class: str
    published: float
    """Throughput per device, as published."""
    point: float
    low: float
    high: float
    basis: str

    @property
    def error(self) -> float:
        """``point / published - 1``."""
        return self.point / self.published - 1

    @property
    def covered(self) -> bool:
        """Whether the interval holds the published figure."""
        return self.low <= self.published <= self.high

    @property
    def width(self) -> float:
        """``high / low``."""
        return self.high / self.low


@dataclass(frozen=True)
class LooSummary:
    """The holdouts of one slice: count, median |error|, coverage, median width."""

    label: str
    count: int
    median_abs_error: float
    coverage: float
    median_width: float


def _together(mode: Mode) -> Callable[[Calibrated], tuple[str, ...]]:
    if mode == "row":
        return lambda r: (r.result.key,)
    return lambda r: (r.result.round, r.result.submitter, r.result.system, r.benchmark.name)


def leave_one_out(calibration: Calibration, mode: Mode = "system") -> list[Holdout]:
    """Every row of ``calibration`` projected from a fit to the others (see the module)."""
    rows = calibration.rows
    key = _together(mode)
    held: list[Holdout] = []
    for row in rows:
        rest = [r.observation for r in rows if key(r) != key(row)]
        if not any(o.group == row.observation.group for o in rest):
            continue
        model = fit(rest)
        o = row.observation
        prediction = model.predict(o.group, o.family, o.workload_class)
        low, high = prediction.interval(COVERAGE)
        scale = row.result.per_device / math.exp(o.log_value)  # the part's 8-bit peak
        held.append(
            Holdout(
                key=row.result.key,
                family=o.family,
                workload_class=o.workload_class,
                published=row.result.per_device,
                point=prediction.point * scale,
                low=low * scale,
                high=high * scale,
                basis=prediction.basis,
            )
        )
    return held


def summarise(
    holdouts: Sequence[Holdout], by: Callable[[Holdout], str] | None = None
) -> list[LooSummary]:
    """One summary per slice (``by``: a holdout's slice name), or one for all."""
    slices: dict[str, list[Holdout]] = defaultdict(list)
    for h in holdouts:
        slices[by(h) if by else "all"].append(h)
    return [
        LooSummary(
            label=label,
            count=len(hs),
            median_abs_error=statistics.median(abs(h.error) for h in hs),
            coverage=sum(h.covered for h in hs) / len(hs),
            median_width=statistics.median(h.width for h in hs),
        )
        for label, hs in sorted(slices.items())
    ]


def summary_table(title: str, rows: Sequence[LooSummary]) -> str:
    """Leave-one-out summaries as a markdown table (the benchmark scripts print it)."""
    lines = [
        f"| {title} | left out | median abs error | 80 % interval coverage | median hi/lo |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| {s.label} | {s.count} | {s.median_abs_error:.1%} | {s.coverage:.0%} | "
        f"{s.median_width:.2f} |"
        for s in rows
    ]
    return "\n".join(lines)
