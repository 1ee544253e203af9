"""Projections made from a model's counted work alone, with no measured run: their interval.

When no roofline run of a model is stored, ``plan`` counts the model's work itself (FLOPs and
bytes per operator, :mod:`accelscope.roofline.static_work`) and projects it from the published
results as :func:`~.capacity.published_capacity` does. Nothing of the user's own was measured
for it, so the interval is the one the published table supports for such projections, and
this module reads that from the table's leave-one-out.

Each holdout of :func:`~.validation.leave_one_out` is exactly such a projection: a system's
figure projected from the other systems' results, with nothing measured on it. Its 80 %
intervals hold fewer than 80 % of the left-out ResNet-50 and BERT rows (the coverage per class
is in docs/plan.md). The static projection therefore scales the interval's half-width on the
log scale by the split-conformal factor of those holdouts (:func:`width_factor`): the smallest
``k`` with at least ``ceil((n + 1) x 80 %)`` of a class's ``n`` holdouts inside the widened
interval, which then holds at least 80 % of new rows like them (exchangeable ones). A factor
the table puts below 1 is not applied: without a measured run the interval never narrows.
What this does not check: a model other than the benchmark of its class (a MobileNet set
against ResNet-50) is assumed to reach the benchmark's share of peak, as every published
projection assumes; the table holds no second model of a class to measure that against.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from accelscope.plan.catalog import Instance
from accelscope.plan.projection.capacity import (
    ModelWork,
    PublishedCapacity,
    class_benchmark,
    published_capacity,
)
from accelscope.plan.projection.efficiency import EfficiencyModel
from accelscope.plan.projection.validation import COVERAGE, Holdout

__all__ = ["STATIC_SOURCE", "STATIC_WIDTH", "static_capacity", "widened", "width_factor"]

STATIC_SOURCE = "static: derived from the model's FLOPs and bytes, no measured run"
"""What every option projected from counted work alone says it came from."""

STATIC_WIDTH: dict[str, float] = {"conv": 1.2129, "encoder": 1.2501}
"""The log half-width factor per workload class a static projection can be of (its published
benchmark's: ResNet-50's ``conv``, BERT-large's ``encoder``): :func:`width_factor` of the
shipped table's leave-one-out holdouts (``mode="system"``, the default), rounded up to 4
decimals.
``tests/plan/test_static_profile.py`` recomputes it, so a change to the table that moves it
fails until this is updated."""


def width_factor(
    holdouts: Sequence[Holdout], workload_class: str, coverage: float = COVERAGE
) -> float:
    """The factor on the log half-width of ``workload_class``'s holdout intervals that makes
    them hold the split-conformal share of their published figures (see the module); 1 where
    the intervals already hold it."""
    scores = sorted(
        abs(math.log(h.published / h.point)) / math.log(h.high / h.point)
        for h in holdouts
        if h.workload_class == workload_class
    )
    rank = math.ceil((len(scores) + 1) * coverage)
    if rank > len(scores):
        raise ValueError(
            f"{len(scores)} holdouts of {workload_class!r} are too few for a "
            f"{coverage:.0%} conformal width (need {math.ceil(coverage / (1 - coverage))})"
        )
    return max(1.0, scores[rank - 1])


def widened(published: PublishedCapacity, factor: float) -> PublishedCapacity:
    """``published`` with its interval's half-width on the log scale scaled by ``factor``
    (at least 1) around the same point."""
    if not factor >= 1.0:
        raise ValueError(f"a widening factor is 1 or more, got {factor}")
    point = published.qps_per_instance
    return replace(
        published,
        low_qps_per_instance=point * (published.low_qps_per_instance / point) ** factor,
        high_qps_per_instance=point * (published.high_qps_per_instance / point) ** factor,
    )


def static_capacity(
    work: ModelWork,
    instance: Instance,
    sla_p99_s: float,
    model: EfficiencyModel | None = None,
) -> PublishedCapacity | None:
    """The projection of counted ``work`` onto ``instance`` with the interval a projection
    without a measured run has (:data:`STATIC_WIDTH`); ``None`` where the instance names no
    datasheet or the model has no published class. ``model``: as
    :func:`~.capacity.published_capacity` takes it (narrowed by the user's runs, the same
    widening applies: it corrects the model's intervals, narrowed or not)."""
    bench = class_benchmark(work)
    published = published_capacity(work, instance, sla_p99_s, model)
    if bench is None or published is None:
        return None
    factor = STATIC_WIDTH[bench.workload_class]
    wide = widened(published, factor)
    note = (
        f"{STATIC_SOURCE}: interval widened x{factor:.3g} on the log scale (the "
        f"{wide.coverage:.0%} split-conformal width of the published table's leave-one-out "
        f"over {bench.workload_class} rows; {published.low_qps_per_instance:.4g}-"
        f"{published.high_qps_per_instance:.4g} before)"
    )
    return replace(wide, notes=(*wide.notes, note))
