"""The terminal view of an ``llm`` document (rich renderables; the CLI prints them)."""

from __future__ import annotations

from typing import Any

from rich.console import Group, RenderableType
from rich.markup import escape
from rich.table import Table
from rich.text import Text

__all__ = ["llm_view", "ms"]


def ms(value: Any) -> str:
    """Seconds as milliseconds, or "n/m" (not measured)."""
    return "n/m" if value is None else f"{float(value) * 1000:,.1f}"


def _pct(metric: dict[str, Any], key: str) -> str:
    """A percentile in ms, with "?" when its tail cannot be claimed yet."""
    value = metric.get(key)
    if value is None:
        return "n/m"
    claim = metric.get(f"{key}_claim")
    mark = "?" if claim is not None and not claim.get("claimable") else ""
    return ms(value) + mark


def _slo_cell(summary: dict[str, Any]) -> str:
    slo = summary.get("slo")
    if not slo:
        return "-"
    states = {term["state"] for term in slo["terms"].values()}
    if slo["met"]:
        return "[green]met[/]"
    if "missed" in states:
        return "[red]missed[/]"
    return "[yellow]unclaimed[/]"


def llm_view(document: dict[str, Any], *, title: str = "llm") -> RenderableType:
    """Every trial's percentiles, throughput and goodput; the capacity; the decode floor;
    warnings and the definitions the figures use."""
    target = document["target"]
    where = target.get("url") or target.get("model_dir") or ""
    table = Table(
        title=escape(f"{title}: {document['model']} at {where}, SLO {document['slo_label']}")
    )
    for column in (
        "load",
        "ok/err",
        "TTFT p50",
        "TTFT p99",
        "TPOT p50",
        "TPOT p99",
        "ITL p50",
        "E2E p99",
        "out tok/s",
        "good req/s",
        "good tok/s",
        "SLO",
        "lag p99",
    ):
        table.add_column(column, justify="left" if column == "load" else "right")
    for trial in document["trials"]:
        summary = trial["summary"]
        metrics = summary.get("metrics", {})
        ttft = metrics.get("ttft_s", {})
        tpot = metrics.get("tpot_s", {})
        goodput = summary.get("goodput") or {}
        throughput = summary.get("throughput") or {}
        lag = summary.get("client_lag_s") or {}
        label = escape(trial["label"]) + (" (interrupted)" if trial.get("interrupted") else "")
        table.add_row(
            label,
            f"{summary['completed']}/{summary['errors']}",
            _pct(ttft, "p50"),
            _pct(ttft, "p99"),
            _pct(tpot, "p50"),
            _pct(tpot, "p99"),
            _pct(metrics.get("itl_s", {}), "p50"),
            _pct(metrics.get("e2e_s", {}), "p99"),
            f"{throughput['output_tokens_per_s']:,.1f}" if throughput else "n/m",
            f"{goodput['requests_per_s']:,.2f}" if goodput else "-",
            f"{goodput['output_tokens_per_s']:,.1f}" if goodput else "-",
            _slo_cell(summary),
            ms(lag.get("p99")) + (" [red]client-bound[/]" if summary.get("client_bound") else ""),
        )
    parts: list[RenderableType] = [
        table,
        Text("times in ms; ? = tail not claimable yet", style="dim"),
    ]
    capacity = document.get("capacity")
    if capacity is not None:
        if capacity["capacity"] is None:
            parts.append(
                Text.from_markup(
                    f"[bold red]capacity: no load met the SLO[/] ({escape(capacity['stopped'])})"
                )
            )
        else:
            unit = capacity["unit"]
            load = (
                f"concurrency {capacity['capacity']:g}"
                if unit == "concurrency"
                else f"{capacity['capacity']:g} req/s"
            )
            parts.append(
                Text.from_markup(
                    f"[bold]capacity at {escape(document['slo_label'])}: {load}[/], "
                    f"{capacity['good_output_tokens_per_s']:,.1f} good output tokens/s "
                    f"({len(capacity['points'])} trials)"
                )
            )
    for trial in document["trials"]:
        floor = trial.get("floor")
        if floor:
            efficiency = floor.get("decode_efficiency")
            parts.append(
                Text(
                    f"decode floor at {trial['label']}: "
                    f"TPOT >= {floor['tpot_floor_s'] * 1000:.3g} ms "
                    f"(batch {floor['decode_batch_mean']:.2f}, bandwidth "
                    f"{floor['bandwidth_bytes_per_s'] / 1e9:,.1f} GB/s, "
                    f"{floor['bandwidth_source']})"
                    + (f"; efficiency {efficiency:.0%}: {floor['bound']}" if efficiency else "")
                )
            )
        for key in ("p90", "p99"):
            for name in ("ttft_s", "tpot_s"):
                claim = trial["summary"].get("metrics", {}).get(name, {}).get(f"{key}_claim")
                if claim and not claim["claimable"] and trial is document["trials"][-1]:
                    parts.append(Text(claim["why"], style="yellow"))
        for kind in trial["summary"].get("error_kinds", []):
            parts.append(
                Text(f"errors at {trial['label']}: {kind['count']} x {kind['error']}", style="red")
            )
        server = trial.get("server_metrics") or {}
        prefix = server.get("prefix_cache") or {}
        if prefix.get("hit_rate") is not None:
            parts.append(
                Text(f"server prefix cache at {trial['label']}: hit rate {prefix['hit_rate']:.0%}")
            )
    if document.get("floor_why"):
        parts.append(Text(f"decode floor: {document['floor_why']}", style="dim"))
    for warning in document.get("warnings", []):
        parts.append(Text(f"warning: {warning}", style="yellow"))
    definitions = document.get("definitions", {})
    for key in ("ttft_s", "tpot_s", "itl_s", "goodput", "steady_window"):
        if key in definitions:
            parts.append(Text(f"{key.removesuffix('_s').upper()}: {definitions[key]}", style="dim"))
    return Group(*parts)
