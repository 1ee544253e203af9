"""How compare and gate read: a terminal table (rich) and markdown for a pull-request comment.

The gate view works on the stored ``gate`` document (plain dicts), so ``accelscope runs show``
prints a stored gate run exactly as the gate printed it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from accelscope.compare.analysis import Comparison, Row, Verdict
from accelscope.report.format import format_bytes, format_seconds
from accelscope.serialise import dump

__all__ = [
    "comparison_markdown",
    "comparison_view",
    "gate_markdown",
    "gate_rounds_view",
    "gate_view",
]

_STYLES = {
    Verdict.SLOWER: "red",
    Verdict.WORSE: "red",
    Verdict.FASTER: "green",
    Verdict.BETTER: "green",
    Verdict.NO_CHANGE: "dim",
    Verdict.INCONCLUSIVE: "yellow",
    Verdict.CANNOT_TELL: "yellow",
    Verdict.NOT_TESTED: "dim",
    "pass": "green",
    "regression": "red",
    "inconclusive": "yellow",
}


def _figure(value: float, unit: str) -> str:
    if unit == "s":
        return format_seconds(value)
    if unit == "B":
        return format_bytes(value)
    if unit == "q/s":
        return f"{value:,.1f} q/s"
    return f"{value:.4g}"


def _change(ratio: float | None) -> str:
    if ratio is None or math.isinf(ratio):
        return "—"
    return f"{(ratio - 1.0) * 100:+.1f} %"


def _interval(estimate: dict[str, Any] | None) -> str:
    if estimate is None:
        return "—"
    high = estimate.get("high")
    return f"{_change(estimate['low'])} to {_change(high) if high is not None else 'inf'}"


def _row_cells(row: Row) -> list[str]:
    """A row's cells; a ratio no interval backs (cannot tell) reads ``~+3.1 %`` with no CI."""
    estimate = None if row.estimate is None else dump(row.estimate)
    evidence = row.evidence
    claimable = evidence is not None and evidence.claimable
    interval = (
        _interval(estimate) if claimable or evidence is None else f"none ({evidence.counts_text})"
    )
    return [
        row.label,
        row.metric,
        _figure(row.baseline, row.unit),
        _figure(row.candidate, row.unit),
        ("" if claimable or evidence is None else "~") + _change(row.ratio),
        interval,
        "—" if row.p_adjusted is None else f"{row.p_adjusted:.3g}",
        row.verdict + (f" (±{row.threshold_text})" if row.verdict == Verdict.NO_CHANGE else ""),
    ]


_HEADERS = [
    "Configuration",
    "Metric",
    "Baseline",
    "Candidate",
    "Change",
    "CI",
    "p (Holm)",
    "Verdict",
]


def _summary_lines(comparison: Comparison) -> list[str]:
    level = f"{comparison.confidence:.0%}"
    lines = [
        f"baseline {', '.join(comparison.baseline_runs)} vs candidate "
        f"{', '.join(comparison.candidate_runs)} ({comparison.kind}, {comparison.model})",
        f"unit: {comparison.unit}; CI: {level}; p-values Holm-corrected across "
        f"{sum(1 for r in comparison.rows if r.estimate is not None)} tested rows; "
        f"no change = interval within ±{comparison.threshold:.1%} "
        f"(ratio {1 / (1 + comparison.threshold):.3f} to {1 + comparison.threshold:.3f})",
        "rule: a difference is claimed only when its interval holds the drift between "
        "processes, measured by 2+ runs per side (the run is the unit); ~ marks a ratio "
        "that is not a claim",
    ]
    if comparison.unmatched:
        lines.append("only on one side (not compared): " + ", ".join(comparison.unmatched))
    lines.extend(comparison.notes)
    return lines


def comparison_view(comparison: Comparison) -> RenderableType:
    """The comparison as a table, then how it was computed and what to keep in mind."""
    table = Table(title="compare", title_justify="left")
    for header in _HEADERS:
        table.add_column(
            header, justify="left" if header in ("Configuration", "Metric") else "right"
        )
    for row in comparison.rows:
        cells = _row_cells(row)
        table.add_row(*cells[:-1], Text(cells[-1], style=_STYLES.get(row.verdict, "")))
    notes = [Text(line, style="dim") for line in _summary_lines(comparison)]
    return Group(table, *notes)


def _markdown_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    def escape(cell: str) -> str:
        return cell.replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines.extend("| " + " | ".join(escape(c) for c in row) + " |" for row in rows)
    return lines


def comparison_markdown(comparison: Comparison) -> str:
    """The comparison as GitHub-flavoured markdown."""
    lines = ["### accelscope compare", ""]
    lines += _markdown_table(_HEADERS, [_row_cells(row) for row in comparison.rows])
    lines.append("")
    lines += [f"- {line}" for line in _summary_lines(comparison)]
    return "\n".join(lines) + "\n"


def _gate_lines(document: dict[str, Any]) -> list[str]:
    decision = document["decision"]
    settings = document["settings"]
    lines = [f"baseline: {settings['baseline']}", f"candidate: {settings['candidate']}"]
    lines += decision["reasons"]
    if settings.get("isolation") == "process":
        how = "each side in its own fresh process, A B then B A"
    else:
        how = "one fresh process per round timing both sides in alternating blocks"
    lines.append(
        f"{decision['rounds']} rounds, {how}; {settings['budget_s']:g} s of samples per side "
        "and round; the round is the statistical unit"
    )
    if decision["status"] == "inconclusive":
        needed = decision.get("rounds_needed")
        lines.append(
            f"about {needed} rounds in all would settle it at this spread (--rounds {needed})"
            if needed
            else "the estimate sits on the threshold: more rounds alone may not settle it"
        )
    return lines


def _gate_rows(document: dict[str, Any]) -> list[list[str]]:
    by_round: dict[int, dict[str, dict[str, Any]]] = {}
    for process in document["processes"]:
        by_round.setdefault(int(process["round_index"]), {})[process["side"]] = process
    rows = []
    for index in sorted(by_round):
        pair = by_round[index]
        if len(pair) < 2:
            continue
        before, after = pair["baseline"], pair["candidate"]
        rows.append(
            [
                str(index + 1),
                "A B" if index % 2 == 0 else "B A",
                format_seconds(before["median_s"]),
                format_seconds(after["median_s"]),
                _change(after["median_s"] / before["median_s"]),
            ]
        )
    return rows


_GATE_HEADERS = ["Round", "Order", "Baseline p50/item", "Candidate p50/item", "Change"]


def gate_view(document: dict[str, Any]) -> RenderableType:
    """Per-round figures, then the decision and its reasons."""
    table = Table(title="gate rounds", title_justify="left")
    for header in _GATE_HEADERS:
        table.add_column(header, justify="right")
    for row in _gate_rows(document):
        table.add_row(*row)
    status = document["decision"]["status"]
    headline = Text(f"gate: {status.upper()}", style=f"bold {_STYLES.get(status, '')}")
    return Group(table, headline, *[Text(line) for line in _gate_lines(document)])


def gate_rounds_view(documents: Sequence[dict[str, Any]]) -> RenderableType:
    """The rounds of a gate that stopped before its decision (stored ``gate_round``s)."""
    processes = [process for document in documents for process in document["processes"]]
    table = Table(title="gate rounds (no decision: the gate was stopped)", title_justify="left")
    for header in _GATE_HEADERS:
        table.add_column(header, justify="right")
    for row in _gate_rows({"processes": processes}):
        table.add_row(*row)
    return table


def gate_markdown(document: dict[str, Any]) -> str:
    """The gate's decision as GitHub-flavoured markdown (for a pull-request comment)."""
    status = document["decision"]["status"]
    icon = {"pass": "✅", "regression": "❌", "inconclusive": "⚠️"}.get(status, "")
    lines = [f"### accelscope gate: {icon} {status}", ""]
    lines += [f"- {line}" for line in _gate_lines(document)]
    lines += ["", "<details><summary>rounds</summary>", ""]
    lines += _markdown_table(_GATE_HEADERS, _gate_rows(document))
    lines += ["", "</details>"]
    return "\n".join(lines) + "\n"
