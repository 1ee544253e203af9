"""The terminal view of a bench run (rich renderables; the CLI prints them)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from accelscope.commands.bench.copies import CopyPair, copy_pairs
from accelscope.commands.bench.standing import Standing
from accelscope.commands.bench.workflow import BenchPreview
from accelscope.report.tables import energy_notes, results_view
from accelscope.result import Result, Status
from accelscope.spec import Device
from accelscope.sweep.select import (
    Selection,
    baseline_for,
    by_node_type,
    select,
    skipped_by_reason,
    speedup_cells,
    speedup_note,
)

__all__ = ["bench_view", "preview_view"]


def bench_view(
    results: Sequence[Result],
    selections: Mapping[str, Selection],
    *,
    title: str,
    rule: str = "",
    standing: Standing | None = None,
) -> RenderableType:
    """The bench table (speedup vs eager fp32, best marked: interleaved figures with their CI,
    ratios across processes marked as no claim), the accuracy rule, the verdict;
    one of each per node type when a cluster measured it (each node type is its own machine).
    On a GPU, each row's two throughputs (inputs on the device, and with the host copy) and
    compile time, and the ``standing`` of the best figure against the record and the floor."""
    groups = by_node_type(results)
    if len(groups) <= 1:
        selection = next(iter(selections.values()), None) or select(results, None)
        one = _one_view(results, selection, title=title, rule=rule)
        extra: list[RenderableType] = []
        if pairs := copy_pairs(results):
            extra.append(_copy_table(pairs))
        if standing is not None:
            extra.extend(
                Text(line, style="bold" if i == 0 else "")
                for i, line in enumerate(standing.lines())
            )
        return Group(one, *extra) if extra else one
    return Group(
        *(
            _one_view(group, selections[node_type], title=f"{title} on {node_type}", rule=rule)
            for node_type, group in groups.items()
        )
    )


def _copy_table(pairs: Sequence[CopyPair]) -> Table:
    """Each GPU row's throughput with its inputs resident on the device and with each batch's
    copy from pinned host memory, and a compiled row's compile time for its shape."""
    table = Table(
        title="on the GPU: inputs resident vs host-to-device copy included",
        title_justify="left",
    )
    for header in ("configuration", "items/s on device", "items/s with copy", "copy", "compile"):
        table.add_column(header, justify="left" if header == "configuration" else "right")
    for pair in pairs:
        resident = pair.resident_items_per_s
        share, compile_s = pair.copy_share, pair.compile_s
        table.add_row(
            pair.label,
            f"{resident:,.0f}" if resident is not None else pair.resident.status.value,
            pair.pinned_text(),
            f"{share:.0%}" if share is not None else "—",
            f"{compile_s:.1f} s" if compile_s is not None else "—",
        )
    return table


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


def preview_view(plan: BenchPreview) -> RenderableType:
    """``bench --dry-run``: each configuration the sweep would run, or skip and why, in the
    order it would run them, with the memory each CUDA batch is estimated to need."""
    table = Table(title=f"bench --dry-run: {plan.model.ref}", title_justify="left")
    for header in ("configuration", "plan", "memory"):
        table.add_column(header, justify="right" if header == "memory" else "left")
    for candidate in plan.candidates:
        needed = (
            f"{plan.memory.estimate.needed_bytes(candidate.spec) / 2**30:.1f} GiB"
            if plan.memory is not None and candidate.spec.device is Device.CUDA
            else "—"
        )
        verdict = "run" if candidate.runnable else f"skip: {candidate.skip_reason}"
        table.add_row(
            candidate.spec.label(), Text(verdict, style="" if candidate.runnable else "dim"), needed
        )
    runs = sum(1 for c in plan.candidates if c.runnable)
    parts: list[RenderableType] = [
        table,
        Text(f"{runs} of {len(plan.candidates)} configurations would run", style="bold"),
    ]
    if plan.memory is not None:
        free = plan.memory.device.free_bytes / 2**30
        parts.append(Text(f"device memory: {free:.1f} GiB, {plan.memory.device.source}"))
    parts.extend(Text(note, style="dim") for note in plan.notes)
    return Group(*parts)
