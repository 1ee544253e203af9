"""The terminal view of a ``tune`` document."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from accelscope.tune.documents import TuneConfig, TuneRun

__all__ = ["tune_view"]

NOT_MEASURED = "n/m"


def _ms(value: float | None) -> str:
    return NOT_MEASURED if value is None else f"{value * 1000:,.0f}"


def _tail(config: TuneConfig, metric: str, percentile: float) -> str:
    point = config.point
    if point is None:
        return NOT_MEASURED
    key = "p99" if percentile > 90 else "p90"
    found = point.summary.metrics.get(metric)
    value = found.value(key)
    return _ms(value) + ("?" if value is not None and found.unclaimed_why(key) else "")


def _status(config: TuneConfig) -> str:
    colors = {"measured": "green", "failed": "red", "rejected": "red", "skipped": "yellow"}
    word = config.status + (" (screen)" if config.phase == "screen" else "")
    if config.failure:
        word += f": {config.failure.description}"
    return f"[{colors[config.status]}]{escape(word)}[/]"


def tune_view(document: TuneRun, *, title: str = "tune") -> RenderableType:
    """Every configuration, the verdict, the winner's launch command."""
    percentile = document.slo.percentile if document.slo else 99.0
    key = "p99" if percentile > 90 else "p90"
    table = Table(
        title=escape(f"{title}: {document.model} on {document.engine}, SLO {document.slo_label}")
    )
    for column in (
        "configuration",
        "status",
        "start s",
        "load",
        "good tok/s",
        f"TTFT {key}",
        f"TPOT {key}",
        "KV max",
        "prefix hits",
        "preempt",
        "quality",
        "$/M good tok",
    ):
        table.add_column(
            column, justify="left" if column in ("configuration", "status") else "right"
        )
    for config in document.configs:
        server = config.point.server_metrics if config.point else None
        kv = server.kv_cache_usage.max if server and server.kv_cache_usage else None
        hits = server.prefix_cache.hit_rate if server and server.prefix_cache else None
        quality = config.quality
        mark = "★ " if config.key == document.winner else ""
        table.add_row(
            escape(mark + config.key)
            + (" [dim](reference)[/]" if config.role == "reference" else ""),
            _status(config),
            NOT_MEASURED if config.startup_s is None else f"{config.startup_s:,.0f}",
            escape(config.load_label) or NOT_MEASURED,
            NOT_MEASURED
            if config.goodput_tokens_per_s is None
            else f"{config.goodput_tokens_per_s:,.1f}",
            _tail(config, "ttft_s", percentile),
            _tail(config, "tpot_s", percentile),
            NOT_MEASURED if kv is None else f"{kv:.0%}",
            NOT_MEASURED if hits is None else f"{hits:.0%}",
            NOT_MEASURED
            if server is None or server.preemptions is None
            else f"{server.preemptions:g}",
            "-" if quality is None else f"{quality.agreement:.1%}",
            NOT_MEASURED
            if config.cost_per_million_good_tokens_usd is None
            else f"{config.cost_per_million_good_tokens_usd:,.3f}",
        )
    parts: list[RenderableType] = [
        table,
        Text(f"objective: {document.objective}; search: {document.strategy_why}", style="dim"),
    ]
    verdict = document.verdict
    if verdict is not None:
        parts.append(Text.from_markup(f"[bold]{escape(verdict.text)}[/]"))
        if verdict.gain_text:
            parts.append(Text(verdict.gain_text))
    if document.winner_launch:
        parts.append(Text("launch the winner:", style="bold"))
        parts.append(Text(f"  {document.winner_launch}"))
    for config in document.configs:
        if config.status in ("failed", "rejected") and config.why:
            parts.append(Text(f"{config.key}: {config.why}", style="red"))
            tail = config.log_tail.strip().splitlines()[-3:]
            for line in tail:
                parts.append(Text(f"    {line[:160]}", style="dim"))
    for line in document.skipped:
        parts.append(Text(f"skipped: {line}", style="yellow"))
    for line in [*document.notes, *document.warnings]:
        parts.append(Text(f"note: {line}", style="yellow"))
    return Group(*parts)
