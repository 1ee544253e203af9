"""The terminal view of an ``llm`` document (rich renderables; the CLI prints them)."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from accelscope.llm.documents import Distribution, LlmRun, LlmTrial, TrialSummary
from accelscope.report.format import ms as _ms

__all__ = ["llm_view", "ms"]

NOT_MEASURED = "n/m"
STREAM_TAIL_SHOWN_S = 0.010
"""A stream that ends this long (p50) after its last token gets its end shown beside E2E."""
_DEFINED = {
    "ttft_s": "TTFT",
    "ttfc_s": "TTFC",
    "tpot_s": "TPOT",
    "itl_s": "ITL",
    "e2e_s": "E2E",
    "e2e_stream_s": "stream end",
    "goodput": "GOODPUT",
    "steady_window": "STEADY_WINDOW",
}


def ms(value: float | None) -> str:
    """Seconds as milliseconds, or "n/m" (not measured)."""
    return NOT_MEASURED if value is None else f"{float(value) * 1000:,.1f}"


def _pct(metric: Distribution, key: str) -> str:
    """A percentile in ms, with "?" when its tail cannot be claimed yet."""
    value = metric.value(key)
    if value is None:
        return NOT_MEASURED
    return ms(value) + ("?" if metric.unclaimed_why(key) else "")


def _slo_cell(summary: TrialSummary) -> str:
    return {
        "met": "[green]met[/]",
        "missed": "[red]missed[/]",
        "unclaimed": "[yellow]unclaimed[/]",
    }.get(summary.slo_state, "-")


def _trial_table(document: LlmRun, title: str) -> Table:
    where = document.target.where
    table = Table(title=escape(f"{title}: {document.model} at {where}, SLO {document.slo_label}"))
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
    for trial in document.trials:
        summary = trial.summary
        metrics = summary.metrics
        goodput = summary.goodput
        throughput = summary.throughput
        lag = summary.client_lag_s
        label = escape(trial.label) + (" (interrupted)" if trial.interrupted else "")
        table.add_row(
            label,
            f"{summary.completed}/{summary.errors}",
            _pct(metrics.ttft_s, "p50"),
            _pct(metrics.ttft_s, "p99"),
            _pct(metrics.tpot_s, "p50"),
            _pct(metrics.tpot_s, "p99"),
            _pct(metrics.itl_s, "p50"),
            _pct(metrics.e2e_s, "p99"),
            f"{throughput.output_tokens_per_s:,.1f}" if throughput else NOT_MEASURED,
            f"{goodput.requests_per_s:,.2f}" if goodput else "-",
            f"{goodput.output_tokens_per_s:,.1f}" if goodput else "-",
            _slo_cell(summary),
            ms(lag.p99 if lag else None)
            + (" [red]client-bound[/]" if summary.client_bound else ""),
        )
    return table


def _turn_table(trial: LlmTrial) -> Table | None:
    turns = trial.summary.turns
    if len(turns) < 2:
        return None
    table = Table(title=escape(f"per turn at {trial.label}"), title_justify="left")
    for column in ("turn", "requests", "TTFT p50", "TTFT p90", "prompt tok", "reusable tok"):
        table.add_column(column, justify="right")
    for turn in turns:
        prompt, reusable = turn.prompt_tokens_mean, turn.reusable_prefix_tokens_mean
        table.add_row(
            str(turn.turn),
            f"{turn.completed}/{turn.requests}",
            _pct(turn.ttft_s, "p50"),
            _pct(turn.ttft_s, "p90"),
            NOT_MEASURED if prompt is None else f"{prompt:,.0f}",
            NOT_MEASURED if reusable is None else f"{reusable:,.0f}",
        )
    return table


def _stream_lines(trial: LlmTrial) -> list[RenderableType]:
    """What a stream that is not plain text changes: time to first content beside TTFT and
    the reasoning tokens apart (a reasoning model), the stream's end beside E2E (a server that
    ends its stream long after the last token; runs stored before E2E ended at the last token
    have no stream end of their own), and the trial's notes."""
    summary = trial.summary
    metrics = summary.metrics
    tokens = summary.tokens
    parts: list[RenderableType] = []
    reasoning = tokens is not None and bool(tokens.reasoning_total or tokens.without_content)
    if reasoning and tokens is not None:
        split = ""
        if tokens.reasoning_mean is not None and tokens.answer_mean is not None:
            split = (
                f"; tokens per request: {tokens.reasoning_mean:,.1f} reasoning, "
                f"{tokens.answer_mean:,.1f} answer"
            )
        parts.append(
            Text(
                f"reasoning at {trial.label}: time to first content p50 "
                f"{_pct(metrics.ttfc_s, 'p50')} ms, p99 {_pct(metrics.ttfc_s, 'p99')} ms "
                f"(TTFT counts the first reasoning token){split}"
            )
        )
    tail = metrics.stream_tail_s.value("p50")
    if tail is not None and tail >= STREAM_TAIL_SHOWN_S and metrics.e2e_stream_s.n:
        parts.append(
            Text(
                f"stream end at {trial.label}: p99 {_pct(metrics.e2e_stream_s, 'p99')} ms, "
                f"{ms(tail)} ms (p50) after the last token; E2E ends at the last token",
                style="yellow",
            )
        )
    for note in summary.notes:
        parts.append(Text(f"{trial.label}: {note}", style="dim"))
    return parts


def _trial_lines(document: LlmRun, trial: LlmTrial) -> list[RenderableType]:
    parts: list[RenderableType] = []
    floor = trial.floor
    if floor is not None and floor.tpot_floor_s is not None:
        efficiency = floor.decode_efficiency
        parts.append(
            Text(
                f"decode floor at {trial.label}: TPOT >= {_ms(floor.tpot_floor_s)} ms "
                f"(batch {floor.decode_batch_mean:.2f}, bandwidth "
                f"{floor.bandwidth_bytes_per_s / 1e9:,.1f} GB/s, {floor.bandwidth_source})"
                + (f"; efficiency {efficiency:.0%}: {floor.bound}" if efficiency else "")
            )
        )
    if trial is document.trials[-1]:
        for key in ("p90", "p99"):
            for name in ("ttft_s", "tpot_s"):
                why = trial.summary.metrics.get(name).unclaimed_why(key)
                if why:
                    parts.append(Text(why, style="yellow"))
    parts.extend(_stream_lines(trial))
    for kind in trial.summary.error_kinds:
        parts.append(Text(f"errors at {trial.label}: {kind.count} x {kind.error}", style="red"))
    server = trial.server_metrics
    reuse = trial.summary.prefix_reuse
    if server.prefix_cache is not None and server.prefix_cache.hit_rate is not None:
        expected = (
            f" (the workload allows {reuse.expected_share:.0%})"
            if reuse is not None and reuse.expected_share is not None
            else ""
        )
        parts.append(
            Text(
                f"server prefix cache at {trial.label}: hit rate "
                f"{server.prefix_cache.hit_rate:.0%}{expected}"
            )
        )
    for found in trial.summary.slo_breaks:
        parts.append(Text(f"{trial.label}: {found.text}", style="red"))
    energy = trial.summary.energy
    if energy is not None and energy.joules_per_item is not None:
        spread = f" ± {energy.uncertainty_j:.3g} J" if energy.uncertainty_j is not None else ""
        parts.append(
            Text(
                f"energy at {trial.label}: {energy.joules_per_item:.4g} J per output "
                f"token ({energy.energy_j:.4g} J{spread} over {energy.window_s or 0:.3g} s, "
                f"{energy.source})"
            )
        )
    table = _turn_table(trial)
    if table is not None:
        parts.append(table)
    return parts


def llm_view(document: LlmRun, *, title: str = "llm") -> RenderableType:
    """Every trial's percentiles, throughput and goodput; per-turn TTFT of a multi-turn
    workload; the capacity; the decode floor; what the server said; warnings, notes and the
    definitions the figures use."""
    parts: list[RenderableType] = [
        _trial_table(document, title),
        Text("times in ms; ? = tail not claimable yet", style="dim"),
    ]
    capacity = document.capacity
    if capacity is not None:
        if capacity.capacity is None:
            parts.append(
                Text.from_markup(
                    f"[bold red]capacity: no load met the SLO[/] ({escape(capacity.stopped)})"
                )
            )
        else:
            good = capacity.good_output_tokens_per_s
            parts.append(
                Text.from_markup(
                    f"[bold]capacity at {escape(document.slo_label)}: {capacity.label}[/], "
                    + (f"{good:,.1f} good output tokens/s " if good is not None else "")
                    + f"({len(capacity.points)} trials)"
                )
            )
    for trial in document.trials:
        parts.extend(_trial_lines(document, trial))
    config = document.server_config
    if config is not None:
        caching = {True: "on", False: "off", None: "not published"}[config.prefix_caching]
        capacity_tokens = config.kv_capacity_tokens
        parts.append(
            Text(
                f"server configuration ({config.source}): KV block "
                f"{config.block_size_tokens or 'n/m'} tokens, prefix caching {caching}, KV "
                f"capacity {f'{capacity_tokens:,} tokens' if capacity_tokens else 'n/m'}",
                style="dim",
            )
        )
    if document.floor_why:
        parts.append(Text(f"decode floor: {document.floor_why}", style="dim"))
    unmeasured = {
        t.summary.energy.reason
        for t in document.trials
        if t.summary.energy is not None and t.summary.energy.energy_j is None
    }
    for reason in sorted(unmeasured):
        parts.append(Text(f"energy per output token: not measured: {reason}", style="dim"))
    for note in document.notes:
        parts.append(Text(f"note: {note}", style="cyan"))
    for warning in document.warnings:
        parts.append(Text(f"warning: {warning}", style="yellow"))
    for key, name in _DEFINED.items():
        if key in document.definitions:
            parts.append(Text(f"{name}: {document.definitions[key]}", style="dim"))
    return Group(*parts)
