"""Rich terminal view of a load run: one row per trial, then the verdict and notes.

Works on the stored trial and capacity documents (plain dicts), so ``accelscope runs show``
renders a stored load run the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from accelscope.commands.load.verdict import harness_floor_text, load_verdict
from accelscope.report.format import ms

__all__ = ["energy_notes", "load_table", "load_view"]


def _batcher(batching: dict[str, Any]) -> str:
    if int(batching["max_batch"]) <= 1:
        return "none"
    return f"≤{batching['max_batch']} / {float(batching['max_delay_s']) * 1e3:g} ms"


def _verdict_cell(trial: dict[str, Any]) -> Text:
    if trial.get("sla_p99_s") is not None:
        if trial["meets_sla"]:
            return Text("meets SLA", style="green")
        return Text("misses: " + "; ".join(trial["sla_failures"]), style="red")
    if trial["valid"]:
        return Text("valid", style="green")
    return Text("invalid: " + "; ".join(trial["invalid_reasons"]), style="red")


def _joules(trial: dict[str, Any]) -> str:
    """Joules per completed query; "n/m" when not measured ("—": stored before energy)."""
    energy = trial.get("energy")
    if not energy:
        return "—"
    value = energy.get("joules_per_item")
    return "n/m" if value is None else f"{float(value):.3g}"


def energy_notes(trials: Sequence[dict[str, Any]]) -> list[str]:
    """Each distinct reason a trial's energy was not measured, once."""
    reasons = [(t.get("energy") or {}).get("reason") for t in trials]
    return [f"energy: not measured: {r}" for r in dict.fromkeys(r for r in reasons if r)]


def load_table(trials: Sequence[dict[str, Any]], title: str = "") -> Table:
    """One row per trial: batcher, offered rate, latency percentiles, queue vs compute,
    errors, timeouts, generator lag, joules per query and verdict."""
    table = Table(title=title or None, title_justify="left", header_style="bold")
    for name in (
        "batcher",
        "offered q/s",
        "queries",
        "p50 ms",
        "p90 ms",
        "p99 ms",
        "queue mean/p99 ms",
        "compute mean/p99 ms",
        "batch",
        "err",
        "t/o",
        "lag p99 ms",
        "done q/s",
        "J/query",
    ):
        table.add_column(name, justify="left" if name == "batcher" else "right", no_wrap=True)
    table.add_column("verdict", overflow="fold")
    for trial in trials:
        latency, queue, compute = trial["latency"], trial["queue"], trial["compute"]
        rate = trial.get("offered_rate_per_s")
        p99 = ms(latency["p99_s"]) + ("+" if trial.get("p99_is_lower_bound") else "")
        table.add_row(
            _batcher(trial["batching"]),
            "—" if rate is None else f"{rate:,.1f}",
            str(trial["issued"]),
            ms(latency["p50_s"]),
            ms(latency["p90_s"]),
            p99,
            f"{ms(queue['mean_s'])} / {ms(queue['p99_s'])}",
            f"{ms(compute['mean_s'])} / {ms(compute['p99_s'])}",
            f"{trial['mean_batch']:.2f}",
            str(trial["errors"]),
            str(trial["timeouts"]),
            ms(trial["generator_lag"]["p99_s"]),
            f"{trial['throughput_per_s']:,.1f}",
            _joules(trial),
            _verdict_cell(trial),
        )
    return table


def load_view(
    *,
    title: str,
    scenario: str,
    sla_p99_s: float | None,
    trials: Sequence[dict[str, Any]],
    capacity: dict[str, Any] | None,
    notes: Sequence[str] = (),
    harness_floor: dict[str, Any] | None = None,
) -> RenderableType:
    """The table, the verdict (bold), the harness floor (``harness_floor``, else the capacity
    document's; nothing for runs stored before it existed) and any notes."""
    parts: list[RenderableType] = [load_table(trials, title)]
    parts.append(Text(load_verdict(scenario, sla_p99_s, trials, capacity), style="bold"))
    floor = harness_floor_text(harness_floor or (capacity or {}).get("harness_floor"))
    if floor is not None:
        parts.append(Text(floor, style="dim"))
    parts.extend(Text(note, style="dim") for note in energy_notes(trials))
    errors = sorted({m for t in trials for m in t.get("error_messages", ())})
    for message in errors[:5]:
        parts.append(Text(f"error from the system under test: {message}", style="red"))
    for note in notes:
        parts.append(Text(f"note: {note}", style="yellow"))
    return Group(*parts)
