"""The terminal view of a bench run (rich renderables; the CLI prints them)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rich.console import Group, RenderableType
from rich.text import Text

from accelscope.report.tables import energy_notes, results_view
from accelscope.result import Result, Status
from accelscope.sweep.select import (
    Selection,
    baseline_for,
    by_node_type,
    select,
    skipped_by_reason,
    speedup_cells,
    speedup_note,
)

__all__ = ["bench_view"]


def bench_view(
    results: Sequence[Result], selections: Mapping[str, Selection], *, title: str, rule: str = ""
) -> RenderableType:
    """The bench table (speedup vs eager fp32, best marked: interleaved figures with their CI,
    ratios across processes marked as no claim), the accuracy rule, the verdict;
    one of each per node type when a cluster measured it (each node type is its own machine)."""
    groups = by_node_type(results)
    if len(groups) <= 1:
        selection = next(iter(selections.values()), None) or select(results, None)
        return _one_view(results, selection, title=title, rule=rule)
    return Group(
        *(
            _one_view(group, selections[node_type], title=f"{title} on {node_type}", rule=rule)
            for node_type, group in groups.items()
        )
    )


def _one_view(
    results: Sequence[Result], selection: Selection, *, title: str, rule: str = ""
) -> RenderableType:
    baseline = baseline_for(results)
    shown = [r for r in results if r.status is not Status.SKIPPED]
    cells = speedup_cells(shown, baseline, selection.confirmation)
    table = results_view(
        shown,
        title,
        baseline=baseline,
        best_key=selection.best_key,
        show_notes=False,
        speedups={key: cell.text() for key, cell in cells.items()},
    )
    parts: list[RenderableType] = [table]
    groups = skipped_by_reason(results)
    if groups:
        count = sum(len(labels) for _, labels in groups)
        parts.append(Text(f"not measured ({count}):", style="dim"))
        parts.extend(
            Text(f"  {', '.join(labels)}: {reason}", style="dim") for reason, labels in groups
        )
    if rule:
        parts.append(Text(f"accuracy rule: {rule}", style="dim"))
    parts.extend(Text(note, style="dim") for note in energy_notes(shown))
    if note := speedup_note(cells.values()):
        parts.append(Text(note, style="dim"))
    parts.append(Text(selection.verdict, style="bold"))
    return Group(*parts)
