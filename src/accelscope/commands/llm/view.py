"""The terminal view of an ``llm`` document (rich renderables; the CLI prints them)."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from accelscope.llm.documents import (
    AgenticStep,
    CacheOptimum,
    Distribution,
    Interval,
    JobFigures,
    LlmRun,
    LlmTrial,
    TrialSummary,
)
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


def _interval(value: Interval | None, show: str = "{:,.1f}", scale: float = 1.0) -> str:
    """``12.3 [10.1, 14.0]`` (each times ``scale``), the figure alone with why its interval
    is missing, or n/m."""
    if value is None:
        return NOT_MEASURED
    figure = show.format(value.value * scale)
    if value.low is None or value.high is None:
        return f"{figure} (no interval: {value.why})"
    return f"{figure} [{show.format(value.low * scale)}, {show.format(value.high * scale)}]"


def _seconds(value: Interval | None) -> str:
    return _interval(value, "{:,.2f}") + (" s" if value is not None else "")


def _dollars(value: Interval | None) -> str:
    return _interval(value, "${:.3g}")


def _job_lines(label: str, jobs: JobFigures) -> list[RenderableType]:
    """Job latency, jobs/hour (completed, at the SLO), $ per job, TTFT by context, tiers."""
    confidence = f"{jobs.completed_jobs_per_hour.confidence:.0%}"
    lines: list[RenderableType] = [
        Text(
            f"jobs at {label}: {jobs.completed}/{jobs.jobs} sessions completed, "
            f"{jobs.met_slo} at the SLO; job latency p50 {_seconds(jobs.job_latency_p50_s)}; "
            f"jobs/hour {_interval(jobs.completed_jobs_per_hour)} completed, "
            f"{_interval(jobs.jobs_per_hour_at_slo)} at the SLO ({confidence} intervals over "
            "sessions)"
        )
    ]
    if jobs.usd_per_hour is not None:
        lines.append(
            Text(
                f"$ per job at {label}: {_dollars(jobs.usd_per_completed_job)} completed, "
                f"{_dollars(jobs.usd_per_job_at_slo)} at the SLO "
                f"(${jobs.usd_per_hour:g}/hour, {jobs.usd_source})"
            )
        )
    else:
        lines.append(Text(f"$ per job at {label}: not measured: {jobs.usd_why}", style="dim"))
    for note in jobs.notes:
        lines.append(Text(f"{label}: {note}", style="dim"))
    if jobs.ttft_by_context:
        table = Table(title=escape(f"TTFT by context at {label}"), title_justify="left")
        for column in ("prompt tokens", "turns", "sessions", "mean tokens", "TTFT p50 ms"):
            table.add_column(column, justify="right")
        for found in jobs.ttft_by_context:
            table.add_row(
                f"{found.low_tokens:,}-{found.high_tokens - 1:,}",
                str(found.turns),
                str(found.sessions),
                f"{found.prompt_tokens_mean:,.0f}",
                _interval(found.ttft_p50_s, scale=1000.0),
            )
        lines.append(table)
    if jobs.tiers:
        ceilings = sorted({t.max_ttft_s for t in jobs.tiers})
        table = Table(
            title=escape(f"sessions meeting each SLO tier at {label} (jobs/hour)"),
            title_justify="left",
        )
        table.add_column("output tok/s >=", justify="right")
        for ceiling in ceilings:
            table.add_column(f"TTFT <= {ceiling:g} s", justify="right")
        for floor in sorted({t.min_output_tokens_per_s for t in jobs.tiers}):
            cells = {t.max_ttft_s: t for t in jobs.tiers if t.min_output_tokens_per_s == floor}
            table.add_row(
                f"{floor:g}",
                *(
                    f"{cells[c].sessions_meeting}/{jobs.jobs} ({cells[c].jobs_per_hour.value:,.1f})"
                    for c in ceilings
                ),
            )
        lines.append(table)
    return lines


def _cache_line(label: str, cache: CacheOptimum) -> Text:
    """The measured prefix-cache hit rate against the optimum of the same sessions."""
    measured = (
        f"{cache.measured:.1%} ({cache.measured_source})"
        if cache.measured is not None
        else f"not measured ({cache.measured_why})"
    )
    lru = (
        f"LRU under {cache.capacity_blocks:,} blocks at concurrency {cache.concurrency} "
        f"{cache.lru:.1%}"
        if cache.lru is not None
        else f"LRU under the KV capacity not modelled ({cache.lru_why}): every prefix kept only"
    )
    ratio = (
        f"measured / optimal {cache.ratio:.3f}"
        + (f" < {cache.bound:g}: the cache fell off its optimum" if cache.below_bound else "")
        if cache.ratio is not None
        else f"no ratio ({cache.ratio_why})"
    )
    if cache.kept_share is not None and cache.reference == "lru":
        ratio += f"; measured / every prefix kept {cache.kept_share:.3f}"
    return Text(
        f"prefix cache at {label}: measured {measured}; optimal: every prefix kept "
        f"{cache.every_prefix_kept:.1%}, {lru} (blocks of {cache.block_size_tokens} tokens, "
        f"{cache.block_basis}); {ratio}" + (f" ({cache.note})" if cache.note else ""),
        style="red" if cache.below_bound else "",
    )


def _agentic_lines(trial: LlmTrial, step: AgenticStep) -> list[RenderableType]:
    """The validity gate first: an invalid step is named, with its reasons, and gets no job
    figure; then the jobs and the prefix cache against its optimum."""
    label = trial.label
    gate = step.gate
    lines: list[RenderableType] = []
    if not gate.valid:
        reasons = "; ".join(f"{f.reason}: {f.text}" for f in gate.failures)
        lines.append(Text(f"INVALID at {label}: {reasons}: no job figure", style="bold red"))
    else:
        checked = (
            f"{gate.overflowed} of {gate.turns} prompts over {gate.context_tokens:,} tokens"
            if gate.overflowed is not None and gate.context_tokens is not None
            else f"context overflow not checked: {gate.context_why}"
        )
        lines.append(
            Text(
                f"valid at {label}: {gate.errors} of {gate.turns} turns failed, {checked}, "
                f"lag p99 {ms(gate.lag_p99_s)} ms",
                style="dim",
            )
        )
    if step.jobs is not None:
        lines.extend(_job_lines(label, step.jobs))
    if step.cache is not None:
        lines.append(_cache_line(label, step.cache))
    return lines


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
    if trial.client_workers:
        sent = "; ".join(w.label for w in trial.client_workers)
        parts.append(Text(f"{trial.label} sent by {sent}", style="dim"))
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
    if trial.summary.agentic is not None:
        parts.extend(_agentic_lines(trial, trial.summary.agentic))
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
    for stop in document.saturation:
        parts.append(
            Text(
                f"sweep stopped: {stop} (--past-saturation measures every step)",
                style="bold yellow",
            )
        )
    if document.eviction_cliff is not None:
        cliff = document.eviction_cliff
        fell = cliff.concurrency is not None or cliff.reuse_lost_at is not None
        parts.append(Text(cliff.text, style="bold red" if fell else ""))
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
