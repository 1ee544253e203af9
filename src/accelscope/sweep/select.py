"""Pick the winners: fastest accepted configuration within the SLA, and the lowest-latency one,
with a one-or-two-sentence explanation carrying the numbers; and each configuration's speedup
over the baseline as the table shows it.

Every configuration of a sweep runs in its own worker process, so the ratio of two sweep figures
crosses processes and goes through the one rule for that
(:func:`accelscope.measurement.stats.process_ratio`): one run each is not a claim
(``~7.9x (not a claim)``); the configurations re-measured alternately with the baseline in one
worker (the winner, the runner-up) show that paired ratio and its interval instead.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from accelscope.measurement.stats import ProcessRatio, RatioBasis, process_ratio
from accelscope.result import Result, Status
from accelscope.spec import Precision
from accelscope.sweep.confirm import Confirmation

__all__ = [
    "Selection",
    "SpeedupCell",
    "baseline_for",
    "by_node_type",
    "select",
    "select_by_node_type",
    "skipped_by_reason",
    "speedup",
    "speedup_cells",
    "speedup_note",
]


@dataclass(frozen=True, kw_only=True)
class Selection:
    """Keys (``RunSpec.key``) of the chosen results, and the verdict text."""

    best_key: str | None
    lowest_latency_key: str | None
    baseline_key: str | None
    verdict: str
    confirmation: Confirmation | None = None
    """The interleaved re-measure behind the headline speedup, when one ran."""


def _throughput(result: Result) -> float:
    assert result.measurement is not None
    return result.measurement.throughput_items_per_s


def _p99(result: Result) -> float:
    assert result.measurement is not None
    return result.measurement.summary.p99_s


def skipped_by_reason(results: Sequence[Result]) -> list[tuple[str, list[str]]]:
    """Skipped configurations grouped by their reason, in first-seen order: the short list a
    report shows under its table (``(reason, [labels])``)."""
    groups: dict[str, list[str]] = {}
    for result in results:
        if result.status is Status.SKIPPED:
            groups.setdefault(result.status_reason, []).append(result.spec.label())
    return list(groups.items())


def baseline_for(results: Sequence[Result]) -> Result | None:
    """The eager fp32 result (the speedup baseline): IEEE fp32 (TF32 off) before TF32, then
    the largest batch size and most threads among measured eager fp32 results, or ``None``."""
    eager = [
        r
        for r in results
        if r.spec.backend in ("eager", "onnxruntime")
        and r.spec.precision is Precision.FP32
        and r.measurement is not None
    ]
    eager.sort(
        key=lambda r: (
            r.spec.backend != "eager",
            r.spec.tf32,
            any(value != "false" for _, value in r.spec.options),
            -r.spec.batch_size,
            -r.spec.threads,
        )
    )
    return eager[0] if eager else None


def speedup(result: Result, baseline: Result | None) -> float | None:
    """Throughput relative to ``baseline`` (None when either is unmeasured)."""
    if baseline is None or result.measurement is None or baseline.measurement is None:
        return None
    return _throughput(result) / _throughput(baseline)


@dataclass(frozen=True, kw_only=True)
class SpeedupCell:
    """One configuration's throughput over the baseline's, as bench's table shows it.

    ``evidence`` is the ratio judged by the rule between processes: paired over the interleaved
    rounds that measured both in one worker (a claim, with its interval), or the two sweep
    figures, one process each (not a claim); ``None`` for the baseline itself (exactly 1)."""

    ratio: float
    evidence: ProcessRatio | None = None

    @property
    def claim(self) -> bool:
        """True when the figure may be read as a claim (the baseline, or an interval)."""
        return self.evidence is None or self.evidence.claimable

    @property
    def interleaved(self) -> bool:
        """True when the ratio comes from rounds that measured both in one worker."""
        return self.evidence is not None and self.evidence.basis is RatioBasis.ROUNDS

    def text(self, times: str = "x", *, interval: bool = False) -> str:
        """``1.00x`` (the baseline); an interleaved ratio ``3.70x ±5%`` (the 95 % CI's wider
        side), or with ``interval`` ``3.70x (95 % CI 3.52-3.90)``; a ratio that is not a
        claim (separate processes, or one interleaved round) ``~7.9x (not a claim)``."""
        if self.evidence is None:
            return f"{self.ratio:.2f}{times}"
        estimate = self.evidence.estimate
        if estimate is None:
            return f"~{self.ratio:.1f}{times} (not a claim)"
        if interval:
            level = f"{estimate.confidence * 100:.0f} %"
            return (
                f"{self.ratio:.2f}{times} ({level} CI {estimate.low:.2f}\u2013{estimate.high:.2f})"
            )
        wide = max(estimate.high / self.ratio - 1.0, 1.0 - estimate.low / self.ratio) * 100
        return f"{self.ratio:.2f}{times} ±{wide:.{0 if wide >= 1 else 1}f}%"

    def describe(self, what: str) -> str:
        """The verdict's phrase: ``3.71x eager fp32 (95 % CI 3.52 to 3.90x, 6 interleaved
        rounds)`` or ``~7.9x eager fp32 (separate processes, one run each: not a claim)``."""
        evidence = self.evidence
        if evidence is None:
            return f"{self.ratio:.2f}x {what}"
        if evidence.estimate is None:
            how = (
                evidence.counts_text
                if evidence.basis is RatioBasis.ROUNDS
                else "separate processes, one run each"
            )
            return f"~{self.ratio:.1f}x {what} ({how}: not a claim)"
        low, high = evidence.estimate.low, evidence.estimate.high
        return (
            f"{self.ratio:.2f}x {what} ({evidence.estimate.confidence * 100:.0f} % CI "
            f"{low:.2f} to {high:.2f}x, {evidence.counts_text})"
        )


def speedup_cells(
    results: Sequence[Result], baseline: Result | None, confirmation: Confirmation | None
) -> dict[str, SpeedupCell]:
    """Each measured configuration's speedup over ``baseline`` by ``RunSpec.key``: the paired
    ratio over the interleaved rounds of ``confirmation`` where it measured the configuration
    and this baseline together, else the sweep's two figures, one process each (not a claim)."""
    if baseline is None or baseline.measurement is None:
        return {}
    base_rounds = (
        confirmation.round_times_s_per_item(baseline.spec.key)
        if confirmation is not None and confirmation.baseline_key == baseline.spec.key
        else None
    )
    cells: dict[str, SpeedupCell] = {}
    for result in results:
        if result.measurement is None:
            continue
        if result.spec.key == baseline.spec.key:
            cells[result.spec.key] = SpeedupCell(ratio=1.0)
            continue
        rounds = (
            confirmation.round_times_s_per_item(result.spec.key)
            if confirmation is not None and base_rounds
            else None
        )
        if base_rounds and rounds and len(rounds) == len(base_rounds):
            evidence = process_ratio(  # throughputs per round: 1 / (time per item)
                [1.0 / t for t in base_rounds], [1.0 / t for t in rounds], paired=True
            )
        else:
            evidence = process_ratio([_throughput(baseline)], [_throughput(result)])
        cells[result.spec.key] = SpeedupCell(ratio=evidence.ratio, evidence=evidence)
    return cells


def speedup_note(cells: Iterable[SpeedupCell]) -> str:
    """The line under the table that says how to read its speedup column ('' when empty)."""
    cells = list(cells)
    parts = []
    interleaved = [c.evidence for c in cells if c.interleaved and c.claim]
    if interleaved and interleaved[0] is not None:
        parts.append(
            "N.NNx ±P% = measured alternately with the baseline in one worker "
            f"({interleaved[0].counts_text}, 95 % CI)"
        )
    if any(not cell.claim for cell in cells):
        parts.append(
            "~N.Nx (not a claim) = separate processes, one run each: the drift between "
            "processes (15-27 % on a shared 2-vCPU VM) is not in it"
        )
    return "speedup column: " + "; ".join(parts) if parts else ""


def _accuracy_phrase(result: Result) -> str:
    accuracy = result.accuracy
    if accuracy is None:
        return "reference accuracy"
    if accuracy.metric_drop is not None:
        return (
            f"{accuracy.metric_name} {accuracy.metric_value:.2%} (drop {accuracy.metric_drop:.2%})"
        )
    fidelity = accuracy.fidelity
    if fidelity is None:
        return "reference accuracy"
    if fidelity.top1_agreement is not None:
        return f"top-1 agreement {fidelity.top1_agreement:.2%} with fp32"
    return f"relative L2 error {fidelity.rel_l2:.2%} vs fp32"


def select(
    results: Sequence[Result], sla_p99_s: float | None, confirmation: Confirmation | None = None
) -> Selection:
    """Fastest accepted (status ok) result whose p99 meets the SLA, and the lowest-p50 one.

    With a ``confirmation`` (the interleaved re-measure), its winner is the best and the
    headline speedup carries its confidence interval; when it could not rank the top two, the
    verdict says so instead of crowning one.
    """
    accepted = [r for r in results if r.status is Status.OK and r.measurement is not None]
    within = [r for r in accepted if sla_p99_s is None or _p99(r) <= sla_p99_s]
    baseline = baseline_for(results)
    base_key = baseline.spec.key if baseline is not None else None
    if not within:
        if not accepted:
            measured = [r for r in results if r.measurement is not None]
            if not measured:
                return Selection(
                    best_key=None,
                    lowest_latency_key=None,
                    baseline_key=base_key,
                    verdict=(
                        f"Nothing was measured: all {len(results)} configuration(s) were skipped "
                        "or failed (reasons above)."
                    ),
                )
            return Selection(
                best_key=None,
                lowest_latency_key=None,
                baseline_key=base_key,
                verdict=(
                    f"No configuration was accepted: all {len(measured)} measured configuration(s) "
                    "failed the accuracy guard."
                ),
            )
        fastest_p99 = min(accepted, key=_p99)
        limit_ms = (sla_p99_s or 0.0) * 1e3
        return Selection(
            best_key=None,
            lowest_latency_key=None,
            baseline_key=base_key,
            verdict=f"No accepted configuration meets the p99 SLA of {limit_ms:.0f} ms "
            f"(the best p99 is {_p99(fastest_p99) * 1e3:.1f} ms, {fastest_p99.spec.label()}).",
        )
    best = max(within, key=_throughput)
    by_key = {r.spec.key: r for r in within}
    usable = confirmation if confirmation is not None and not confirmation.error else None
    if usable is not None and usable.best_key in by_key:
        best = by_key[usable.best_key]
    quickest = min(within, key=lambda r: r.measurement.summary.p50_s if r.measurement else 0.0)
    versus = ""
    if baseline is not None and baseline is not best:
        cell = speedup_cells([best], baseline, usable).get(best.spec.key)
        if cell is not None:
            versus = f", {cell.describe('eager fp32')}"
    sla = f" within the {sla_p99_s * 1e3:.0f} ms p99 SLA" if sla_p99_s is not None else ""
    verdict = (
        f"Fastest{sla}: {best.spec.label()} at {_throughput(best):.1f} items/s{versus}, "
        f"p99 {_p99(best) * 1e3:.1f} ms, {_accuracy_phrase(best)}."
    )
    if usable is not None and usable.lead is not None and usable.runner_up_key in by_key:
        other = by_key[usable.runner_up_key].spec.label()
        lead = usable.lead.describe(other)
        verdict += (
            f" Ahead of the runner-up: {lead}."
            if usable.ranked
            else f" Not ranked against {other}: the interleaved re-measure cannot tell them "
            f"apart ({lead}); either is as fast here."
        )
    if confirmation is not None and confirmation.error:
        verdict += f" (No interleaved re-measure: {confirmation.error}.)"
    if quickest is not best and quickest.measurement is not None:
        verdict += (
            f" Lowest latency: {quickest.spec.label()} at p50 "
            f"{quickest.measurement.summary.p50_s * 1e3:.1f} ms ({_throughput(quickest):.1f} "
            "items/s)."
        )
    return Selection(
        best_key=best.spec.key,
        lowest_latency_key=quickest.spec.key,
        baseline_key=base_key,
        verdict=verdict,
        confirmation=confirmation,
    )


def by_node_type(results: Sequence[Result]) -> dict[str, list[Result]]:
    """Results grouped by the node type that measured them (``""``: this machine), in
    first-seen order: each group is a machine of its own, selected on its own."""
    groups: dict[str, list[Result]] = {}
    for result in results:
        groups.setdefault(result.spec.node_type, []).append(result)
    return groups


def select_by_node_type(
    results: Sequence[Result],
    sla_p99_s: float | None,
    confirmations: Sequence[Confirmation] = (),
) -> dict[str, Selection]:
    """One :func:`select` per node type, each with its own latest re-measure; a cluster node
    type's verdict is prefixed with its name."""
    selections: dict[str, Selection] = {}
    for node_type, group in by_node_type(results).items():
        keys = {r.spec.key for r in group}
        found = [c for c in confirmations if c.best_key in keys]
        chosen = select(group, sla_p99_s, found[-1] if found else None)
        if node_type:
            chosen = replace(chosen, verdict=f"On {node_type}: {chosen.verdict}")
        selections[node_type] = chosen
    return selections


def pareto_front(points: Sequence[tuple[float, float]]) -> list[int]:
    """Indices of the Pareto-optimal ``(value, cost)`` points: value maximised, cost minimised.

    In the report a point is ``(throughput, p99 latency)``. Point *j* dominates point *i* when
    ``value_j >= value_i`` and ``cost_j <= cost_i`` with at least one inequality strict;
    identical points do not dominate each other, so every copy of a front point is kept. Points
    with a non-finite coordinate are ignored. Indices come ordered by increasing cost (ties:
    decreasing value, then index), which is the order to draw the front in.
    """
    finite = [i for i, (v, c) in enumerate(points) if math.isfinite(v) and math.isfinite(c)]

    def dominated(i: int) -> bool:
        (vi, ci) = points[i]
        return any(
            vj >= vi and cj <= ci and (vj > vi or cj < ci) for vj, cj in (points[j] for j in finite)
        )

    front = [i for i in finite if not dominated(i)]
    return sorted(front, key=lambda i: (points[i][1], -points[i][0], i))
