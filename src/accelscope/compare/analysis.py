"""Two runs (or two sets of runs) compared configuration by configuration.

Configurations match by their spec without the model's name and digest (a changed model file
is the usual reason to compare). Per matched configuration and metric the ratio candidate /
baseline gets a confidence interval and a p-value (:mod:`accelscope.measurement.stats`):

* one run per side: the raw samples are the unit, resampled by bootstrap: this covers the noise
  within the two runs, **not** the drift between processes (15 % on a shared 2-vCPU VM, see
  docs/BENCHMARKS.md), and the output says so;
* two or more runs per side: each run (process) is the unit, Welch's t on the log of the runs'
  figures: the drift between processes is then inside the interval.

Holm's correction runs across every tested row, so ten configurations do not give ten chances
of a false alarm. A row is *slower* (or *worse*) only when its adjusted p-value is below
``1 - confidence`` and the ratio is beyond the threshold band; *no change* when its interval
lies inside the band; *inconclusive* otherwise.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from accelscope.compare.metrics import METRICS, ConfigObservations, Metric, comparable_kinds
from accelscope.errors import BadInputError
from accelscope.measurement.stats import RatioEstimate, bootstrap_ratio, holm_adjust, welch_ratio

__all__ = ["Comparison", "Row", "RunData", "Verdict", "compare_runs", "verdict_for"]


class Verdict:
    """The words a row's verdict can be (plain strings in the JSON)."""

    SLOWER = "slower"
    FASTER = "faster"
    WORSE = "worse"
    BETTER = "better"
    NO_CHANGE = "no change"
    INCONCLUSIVE = "inconclusive"
    NOT_TESTED = "not tested"


@dataclass(frozen=True, kw_only=True)
class RunData:
    """One run as compare sees it."""

    run_id: str
    kind: str
    model: str
    configs: tuple[ConfigObservations, ...]


@dataclass(frozen=True, kw_only=True)
class Row:
    """One metric of one matched configuration. ``baseline`` and ``candidate`` are each side's
    figure (the median over its runs of each run's figure); ``estimate`` is ``None`` where there
    is nothing to test (one value per side)."""

    label: str
    metric: str
    unit: str
    baseline: float
    candidate: float
    estimate: RatioEstimate | None
    p_adjusted: float | None
    verdict: str
    threshold: float = 0.05

    @property
    def threshold_text(self) -> str:
        """The ±band of "no change", as text (``5.0%``)."""
        return f"{self.threshold:.1%}"

    @property
    def ratio(self) -> float:
        """candidate / baseline (the estimate's, or of the two figures)."""
        if self.estimate is not None:
            return self.estimate.ratio
        return self.candidate / self.baseline if self.baseline else math.inf

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        data = asdict(self)
        data["estimate"] = None if self.estimate is None else self.estimate.to_dict()
        data["ratio"] = None if math.isinf(self.ratio) else self.ratio
        return data


@dataclass(frozen=True, kw_only=True)
class Comparison:
    """The comparison of ``baseline_runs`` with ``candidate_runs``."""

    kind: str
    model: str
    baseline_runs: tuple[str, ...]
    candidate_runs: tuple[str, ...]
    threshold: float
    confidence: float
    rows: tuple[Row, ...]
    unit: str
    unmatched: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return {
            "kind": self.kind,
            "model": self.model,
            "baseline_runs": list(self.baseline_runs),
            "candidate_runs": list(self.candidate_runs),
            "threshold": self.threshold,
            "confidence": self.confidence,
            "statistical_unit": self.unit,
            "correction": "Holm across all tested rows",
            "rows": [row.to_dict() for row in self.rows],
            "unmatched": list(self.unmatched),
            "notes": list(self.notes),
        }


def verdict_for(
    metric: Metric,
    estimate: RatioEstimate | None,
    p_adjusted: float | None,
    threshold: float,
    confidence: float,
) -> str:
    """The row's verdict from its interval, its adjusted p-value and the ±threshold band."""
    if estimate is None or p_adjusted is None:
        return Verdict.NOT_TESTED
    band = 1.0 + threshold
    # ratio > 1 means worse for a lower-is-better metric; flip the others
    worse, low, high = (
        (estimate.ratio, estimate.low, estimate.high)
        if not metric.higher_is_better
        else (_inverse(estimate.ratio), _inverse(estimate.high), _inverse(estimate.low))
    )
    timing = metric.unit == "s"
    if p_adjusted < 1.0 - confidence and worse > band:
        return Verdict.SLOWER if timing else Verdict.WORSE
    if p_adjusted < 1.0 - confidence and worse < 1.0 / band:
        return Verdict.FASTER if timing else Verdict.BETTER
    if low >= 1.0 / band and high <= band:
        return Verdict.NO_CHANGE
    return Verdict.INCONCLUSIVE


def _inverse(value: float) -> float:
    return math.inf if value == 0.0 else 1.0 / value


def _check_side(name: str, runs: Sequence[RunData]) -> None:
    if not runs:
        raise BadInputError(f"no {name} run given")
    kinds = {run.kind for run in runs}
    if len(kinds) > 1:
        raise BadInputError(f"the {name} runs are of different kinds ({', '.join(sorted(kinds))})")
    kind = runs[0].kind
    if kind not in comparable_kinds():
        raise BadInputError(
            f"run {runs[0].run_id} is a {kind} run; compare works on "
            f"{', '.join(comparable_kinds())} runs"
        )


def _single(values: set[str]) -> str:
    return next(iter(values)) if len(values) == 1 else ", ".join(sorted(values))


def _environment_notes(
    baseline: list[ConfigObservations], candidate: list[ConfigObservations], allow: bool
) -> list[str]:
    notes: list[str] = []
    before = {c.fingerprint: c.machine for c in baseline}
    after = {c.fingerprint: c.machine for c in candidate}
    if set(before) != set(after):
        what = f"{_single(set(before.values())) or '?'} vs {_single(set(after.values())) or '?'}"
        if not allow:
            raise BadInputError(
                f"the runs were measured on different machines ({what}; fingerprints "
                f"{_single(set(before))} vs {_single(set(after))}); pass --allow-env-change "
                "to compare them anyway"
            )
        notes.append(f"different machines, compared on request: {what}")
    libraries_before = dict(lib for c in baseline for lib in c.libraries)
    libraries_after = dict(lib for c in candidate for lib in c.libraries)
    changed = [
        f"{name} {libraries_before.get(name, '-')} -> {libraries_after.get(name, '-')}"
        for name in sorted(set(libraries_before) | set(libraries_after))
        if libraries_before.get(name) != libraries_after.get(name)
        and name in libraries_before
        and name in libraries_after
    ]
    if changed:
        notes.append("library versions changed: " + ", ".join(changed))
    digests_before = {c.model_digest for c in baseline if c.model_digest}
    digests_after = {c.model_digest for c in candidate if c.model_digest}
    if digests_before and digests_after and digests_before != digests_after:
        notes.append(
            f"the model file changed (digest {_single(digests_before)[:12]} -> "
            f"{_single(digests_after)[:12]})"
        )
    return notes


def _side_figure(metric: Metric, observations: list[Any]) -> float:
    return float(np.median([o.statistic(metric) for o in observations]))


def _estimate(
    metric: Metric, before: list[Any], after: list[Any], confidence: float, seed: int
) -> RatioEstimate | None:
    if len(before) >= 2 and len(after) >= 2:
        figures_before = [o.statistic(metric) for o in before]
        figures_after = [o.statistic(metric) for o in after]
        if min(figures_before + figures_after) <= 0.0:
            return None  # a zero capacity has no ratio to test: shown, not tested
        return welch_ratio(figures_before, figures_after, confidence)
    if metric.percentile is None:
        return None
    pooled_before = [s for o in before for s in o.samples]
    pooled_after = [s for o in after for s in o.samples]
    if len(pooled_before) < 2 or len(pooled_after) < 2:
        return None
    return bootstrap_ratio(
        pooled_before, pooled_after, q=metric.percentile, confidence=confidence, seed=seed
    )


def compare_runs(
    baseline: Sequence[RunData],
    candidate: Sequence[RunData],
    *,
    threshold: float = 0.05,
    confidence: float = 0.95,
    allow_env_change: bool = False,
    seed: int = 0,
) -> Comparison:
    """Compare configuration by configuration; one-line ``BadInputError`` for runs that
    cannot be compared (kinds, models, nothing in common, machines without
    ``allow_env_change``)."""
    if not 0.0 < threshold < 1.0:
        raise BadInputError(f"the threshold must be between 0 and 100 %, got {threshold:.0%}")
    _check_side("baseline", baseline)
    _check_side("candidate", candidate)
    kind_before, kind_after = baseline[0].kind, candidate[0].kind
    if kind_before != kind_after:
        raise BadInputError(
            f"cannot compare a {kind_before} run with a {kind_after} run "
            f"({baseline[0].run_id} vs {candidate[0].run_id})"
        )
    models = {run.model for run in baseline} | {run.model for run in candidate}
    if len(models) > 1:
        raise BadInputError(
            f"the runs measured different models ({', '.join(sorted(models))}); compare one "
            "model's runs (two model files: accelscope gate CANDIDATE --baseline OTHER)"
        )
    by_key_before: dict[str, list[ConfigObservations]] = {}
    by_key_after: dict[str, list[ConfigObservations]] = {}
    for runs, table in ((baseline, by_key_before), (candidate, by_key_after)):
        for run in runs:
            for config in run.configs:
                table.setdefault(config.key, []).append(config)
    common = [key for key in by_key_before if key in by_key_after]
    if not common:
        labels_before = ", ".join(sorted({c[0].label for c in by_key_before.values()})) or "none"
        labels_after = ", ".join(sorted({c[0].label for c in by_key_after.values()})) or "none"
        raise BadInputError(
            "the runs have no measured configuration in common "
            f"(baseline: {labels_before}; candidate: {labels_after})"
        )
    notes = _environment_notes(
        [c for key in common for c in by_key_before[key]],
        [c for key in common for c in by_key_after[key]],
        allow_env_change,
    )
    unmatched = tuple(
        sorted(
            {c[0].label for k, c in by_key_before.items() if k not in by_key_after}
            | {c[0].label for k, c in by_key_after.items() if k not in by_key_before}
        )
    )
    pending: list[tuple[str, str, Metric, float, float, RatioEstimate | None]] = []
    for key in common:
        before, after = by_key_before[key], by_key_after[key]
        for metric_id, metric in METRICS.items():
            if not all(metric_id in c.metrics for c in before + after):
                continue
            obs_before = [c.metrics[metric_id] for c in before]
            obs_after = [c.metrics[metric_id] for c in after]
            pending.append(
                (
                    before[0].label,
                    metric_id,
                    metric,
                    _side_figure(metric, obs_before),
                    _side_figure(metric, obs_after),
                    _estimate(metric, obs_before, obs_after, confidence, seed),
                )
            )
    tested = [i for i, item in enumerate(pending) if item[5] is not None]
    adjusted = dict(
        zip(tested, holm_adjust([pending[i][5].p_value for i in tested]), strict=True)  # type: ignore[union-attr]
    )
    rows = tuple(
        Row(
            label=label,
            metric=metric.name,
            unit=metric.unit,
            baseline=figure_before,
            candidate=figure_after,
            estimate=estimate,
            p_adjusted=adjusted.get(index),
            verdict=verdict_for(metric, estimate, adjusted.get(index), threshold, confidence),
            threshold=threshold,
        )
        for index, (label, _, metric, figure_before, figure_after, estimate) in enumerate(pending)
    )
    methods = {row.estimate.method for row in rows if row.estimate is not None}
    bootstrapped = any("bootstrap" in method for method in methods)
    if not methods:
        unit = "none (one value per side: nothing to test)"
    elif len(methods) == 1 or all("bootstrap" in method for method in methods):
        unit = (
            "samples within each run (bootstrap)"
            if bootstrapped
            else f"runs ({len(baseline)} vs {len(candidate)}, Welch t on log figures)"
        )
    else:
        unit = "mixed: each row names its own (a configuration missing from some runs)"
    if bootstrapped:
        notes.append(
            ("one run per side" if len(baseline) < 2 or len(candidate) < 2 else "some rows")
            + ": the intervals cover the noise within the two runs, not the drift "
            "between processes; give several runs per side (A1,A2,A3 B1,B2,B3) or measure "
            "both alternately with `accelscope gate`"
        )
    return Comparison(
        kind=kind_before,
        model=baseline[0].model,
        baseline_runs=tuple(run.run_id for run in baseline),
        candidate_runs=tuple(run.run_id for run in candidate),
        threshold=threshold,
        confidence=confidence,
        rows=rows,
        unit=unit,
        unmatched=unmatched,
        notes=tuple(notes),
    )
