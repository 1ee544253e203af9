"""Two runs (or two sets of runs) compared configuration by configuration.

Configurations match by their spec without the model's name and digest (a changed model file
is the usual reason to compare). Every figure here crosses processes (each run is one), so
each row goes through the one rule for that (:func:`accelscope.measurement.stats.process_ratio`,
:data:`~accelscope.measurement.stats.BETWEEN_PROCESSES_RULE`):

* two or more runs per side: each run is the unit, Welch's t on the log of the runs' figures:
  the drift between processes is inside the interval, and a difference may be claimed;
* one run per side (or a configuration found in one run of a side): the drift between
  processes (15-27 % on a shared 2-vCPU VM, see docs/BENCHMARKS.md) is not measured, so the
  row's verdict is *cannot tell*, with what would tell. The samples within one run are not an
  interval for a difference between two runs.

Holm's correction runs across every tested row, so ten configurations do not give ten chances
of a false alarm. A row is *slower* (or *worse*) only when its adjusted p-value is below
``1 - confidence`` and the ratio is beyond the threshold band; *no change* when its interval
lies inside the band; *inconclusive* otherwise.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from accelscope.compare.metrics import METRICS, ConfigObservations, Metric, comparable_kinds
from accelscope.errors import BadInputError
from accelscope.measurement.stats import (
    BETWEEN_PROCESSES_RULE,
    ProcessRatio,
    RatioEstimate,
    holm_adjust,
    process_ratio,
)
from accelscope.serialise import dump

__all__ = [
    "WHAT_WOULD_TELL",
    "Comparison",
    "Row",
    "RunData",
    "Verdict",
    "compare_runs",
    "verdict_for",
]

WHAT_WOULD_TELL = (
    "measure each side 3+ times and compare the runs (accelscope compare A1,A2,A3 B1,B2,B3), "
    "or use `accelscope gate`, which alternates both sides in fresh workers"
)
"""What turns a *cannot tell* into an answer."""


class Verdict:
    """The words a row's verdict can be (plain strings in the JSON)."""

    SLOWER = "slower"
    FASTER = "faster"
    WORSE = "worse"
    BETTER = "better"
    NO_CHANGE = "no change"
    INCONCLUSIVE = "inconclusive"
    CANNOT_TELL = "cannot tell"
    """Fewer than two runs on a side: the drift between processes is not measured."""
    NOT_TESTED = "not tested"
    """Nothing to take a ratio of (a zero capacity)."""


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
    figure (the median over its runs of each run's figure); ``evidence`` is the ratio judged by
    the rule between processes, ``None`` where there is no ratio to take (a zero figure)."""

    label: str
    metric: str
    unit: str
    baseline: float
    candidate: float
    evidence: ProcessRatio | None
    p_adjusted: float | None
    verdict: str
    threshold: float = 0.05

    @property
    def threshold_text(self) -> str:
        """The ±band of "no change", as text (``5.0%``)."""
        return f"{self.threshold:.1%}"

    @property
    def estimate(self) -> RatioEstimate | None:
        """The interval a verdict may rest on (with the drift between processes in it), or
        ``None`` (cannot tell, or not tested)."""
        return None if self.evidence is None else self.evidence.estimate

    @property
    def ratio(self) -> float:
        """candidate / baseline (the evidence's, or of the two figures)."""
        if self.evidence is not None:
            return self.evidence.ratio
        return self.candidate / self.baseline if self.baseline else math.inf

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict: the figures, the interval (``None``: no claim), the verdict and,
        under ``between_processes``, what the ratio rests on and why it cannot tell."""
        evidence = self.evidence
        return {
            "label": self.label,
            "metric": self.metric,
            "unit": self.unit,
            "baseline": self.baseline,
            "candidate": self.candidate,
            "ratio": None if math.isinf(self.ratio) else self.ratio,
            "estimate": None if self.estimate is None else dump(self.estimate),
            "p_adjusted": self.p_adjusted,
            "verdict": self.verdict,
            "threshold": self.threshold,
            "between_processes": None
            if evidence is None
            else {
                "basis": evidence.basis.value,
                "baseline_runs": evidence.baseline_count,
                "candidate_runs": evidence.candidate_count,
                "claimable": evidence.claimable,
                "why": evidence.why,
            },
        }


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
    rule: str = BETWEEN_PROCESSES_RULE
    """The rule every verdict here follows (stored beside the numbers)."""

    @property
    def cannot_tell(self) -> int:
        """How many rows cannot tell (fewer than two runs on a side)."""
        return sum(1 for row in self.rows if row.verdict == Verdict.CANNOT_TELL)

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
            "rule": self.rule,
            "what_would_tell": WHAT_WOULD_TELL if self.cannot_tell else None,
            "correction": "Holm across all tested rows",
            "rows": [row.to_dict() for row in self.rows],
            "unmatched": list(self.unmatched),
            "notes": list(self.notes),
        }


def verdict_for(
    metric: Metric,
    evidence: ProcessRatio | None,
    p_adjusted: float | None,
    threshold: float,
    confidence: float,
) -> str:
    """The row's verdict from its evidence between processes, its adjusted p-value and the
    ±threshold band: *cannot tell* when the evidence has no interval with the drift between
    processes in it (whatever the samples within the runs say)."""
    if evidence is None:
        return Verdict.NOT_TESTED
    estimate = evidence.estimate
    if estimate is None:
        return Verdict.CANNOT_TELL
    if p_adjusted is None:
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


def _changed_definitions(
    baseline: list[ConfigObservations], candidate: list[ConfigObservations], notes: list[str]
) -> set[str]:
    """The definition keys whose text differs between the sides (each one noted; their
    figures are shown, not tested), and a note when one side stored no definitions at all."""
    sides = []
    for side in (baseline, candidate):
        texts: dict[str, set[str]] = {}
        stored = [c.definitions for c in side if c.definitions is not None]
        for definitions in stored:
            for name, text in definitions.items():
                texts.setdefault(name, set()).add(text)
        sides.append((bool(stored), texts))
    (before_stored, before), (after_stored, after) = sides
    if before_stored != after_stored:
        which = "baseline" if not before_stored else "candidate"
        notes.append(
            f"the {which} stored no definitions of its figures (an older accelscope): "
            "a change of definition cannot be seen"
        )
    changed = {
        name
        for name in set(before) & set(after)
        if before[name] != after[name] and any(m.definition == name for m in METRICS.values())
    }
    for name in sorted(changed):
        metrics = ", ".join(m.name for m in METRICS.values() if m.definition == name)
        was, now = _single(before[name]), _single(after[name])
        notes.append(
            f"{metrics}: not tested, the definition changed between the runs "
            f"(baseline: {was!r}; candidate: {now!r})"
        )
    return changed


def _side_figure(metric: Metric, observations: list[Any]) -> float:
    return float(np.median([o.statistic(metric) for o in observations]))


def _evidence(
    metric: Metric, before: list[Any], after: list[Any], confidence: float
) -> ProcessRatio | None:
    """Each run's figure is one value (the run is the unit): the rule between processes."""
    figures_before = [o.statistic(metric) for o in before]
    figures_after = [o.statistic(metric) for o in after]
    if min(figures_before + figures_after) <= 0.0:
        return None  # a zero capacity has no ratio to test: shown, not tested
    return process_ratio(figures_before, figures_after, confidence=confidence)


def _unit(rows: Sequence[Row], runs_before: int, runs_after: int) -> str:
    claimable = [row for row in rows if row.estimate is not None]
    if claimable and len(claimable) == len([r for r in rows if r.evidence is not None]):
        return f"runs ({runs_before} vs {runs_after}, Welch t on log figures)"
    if claimable:
        return (
            "runs (Welch t on log figures) where a configuration has 2+ runs per side; "
            "the others cannot tell"
        )
    if runs_before < 2 or runs_after < 2:
        return "runs (one per side: no interval holds the drift between processes)"
    return "runs (no configuration with 2+ runs per side)"


def compare_runs(
    baseline: Sequence[RunData],
    candidate: Sequence[RunData],
    *,
    threshold: float = 0.05,
    confidence: float = 0.95,
    allow_env_change: bool = False,
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
    pending: list[tuple[str, str, Metric, float, float, ProcessRatio | None]] = []
    changed = _changed_definitions(
        [c for key in common for c in by_key_before[key]],
        [c for key in common for c in by_key_after[key]],
        notes,
    )
    for key in common:
        before, after = by_key_before[key], by_key_after[key]
        for metric_id, metric in METRICS.items():
            if not all(metric_id in c.metrics for c in before + after):
                continue
            obs_before = [c.metrics[metric_id] for c in before]
            obs_after = [c.metrics[metric_id] for c in after]
            redefined = metric.definition in changed  # maybe another quantity: shown, not tested
            pending.append(
                (
                    before[0].label,
                    metric_id,
                    metric,
                    _side_figure(metric, obs_before),
                    _side_figure(metric, obs_after),
                    None if redefined else _evidence(metric, obs_before, obs_after, confidence),
                )
            )
    claimable = {  # Holm runs over the rows that may claim: cannot-tell rows are not tests
        index: estimate
        for index, (*_, evidence) in enumerate(pending)
        if evidence is not None and (estimate := evidence.estimate) is not None
    }
    p_values = holm_adjust([estimate.p_value for estimate in claimable.values()])
    adjusted = dict(zip(claimable, p_values, strict=True))
    rows = tuple(
        Row(
            label=label,
            metric=metric.name,
            unit=metric.unit,
            baseline=figure_before,
            candidate=figure_after,
            evidence=evidence,
            p_adjusted=adjusted.get(index),
            verdict=verdict_for(metric, evidence, adjusted.get(index), threshold, confidence),
            threshold=threshold,
        )
        for index, (label, _, metric, figure_before, figure_after, evidence) in enumerate(pending)
    )
    cannot = sum(1 for row in rows if row.verdict == Verdict.CANNOT_TELL)
    if cannot:
        why = (
            "one run per side"
            if len(baseline) < 2 or len(candidate) < 2
            else "a configuration found in fewer than two runs of a side"
        )
        notes.insert(
            0,
            f"cannot tell ({cannot} of {len(rows)} rows): {why}, so the drift between processes "
            "(15-27 % on a shared 2-vCPU VM) is not measured and no difference is claimed; "
            f"to tell, {WHAT_WOULD_TELL}",
        )
    return Comparison(
        kind=kind_before,
        model=baseline[0].model,
        baseline_runs=tuple(run.run_id for run in baseline),
        candidate_runs=tuple(run.run_id for run in candidate),
        threshold=threshold,
        confidence=confidence,
        rows=rows,
        unit=_unit(rows, len(baseline), len(candidate)),
        unmatched=unmatched,
        notes=tuple(notes),
    )
