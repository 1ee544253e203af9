"""The ``ceilings`` and ``roofline`` commands."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import typer

from accelscope.cli._app import _err, _out, app, command_line, given
from accelscope.cli._flag_groups import (
    GROUP,
    BatchFlags,
    DeviceFlags,
    JsonFlags,
    MeasureBudgetFlags,
    ModelFlags,
    OutputFlags,
    QuietFlags,
    RuntimeFlags,
    SamplingBudgetFlags,
    StoringFlags,
    Tf32Flags,
    flag,
    with_flag_groups,
)
from accelscope.cli._runs import register_show
from accelscope.cli._types import duration_option

if TYPE_CHECKING:
    from accelscope.commands.roofline.workflow import CeilingsOutcome
    from accelscope.store.sqlite import RunRecord


def _say(quiet: bool) -> Callable[[str], None]:
    def say(message: str) -> None:
        if not quiet:
            _err.print(f"[dim]{message} ...[/]")

    return say


def _source(outcome: CeilingsOutcome) -> str:
    """Where the ceilings came from: ``cached``, ``measured`` or what extended the cache."""
    if outcome.cached:
        return "cached"
    if outcome.extended:
        return f"measured {', '.join(outcome.measured_dtypes)} and added to the cached ceilings"
    return "measured"


@app.command("ceilings")
@with_flag_groups
def ceilings_command(
    device: DeviceFlags = GROUP,
    refresh: bool = typer.Option(False, "--refresh", help="Re-measure; ignore the cache."),
    budget: SamplingBudgetFlags = GROUP,
    store: StoringFlags = GROUP,
    output: JsonFlags = GROUP,
    quiet: QuietFlags = GROUP,
) -> None:
    """Measure this machine's ceilings: peak matrix rate per dtype and memory bandwidth (on
    CUDA, IEEE fp32 and TF32 as separate rows)."""
    from accelscope.commands.roofline.view import ceilings_view
    from accelscope.commands.roofline.workflow import CeilingsRequest, ceilings

    request = CeilingsRequest(
        refresh=refresh, **device.device_fields(), **given(budget_s=budget.budget)
    )
    outcome = ceilings(
        request,
        store_path=store.target,
        events=_say(quiet.quiet or output.as_json),
        command_line=command_line(),
    )
    if output.as_json:
        _out.print_json(json.dumps(outcome.ceilings.model_dump(mode="json")))
        return
    _out.print(ceilings_view(outcome.ceilings))
    if quiet.quiet:
        return
    _out.print(f"[dim]{_source(outcome)}: {outcome.cache_path}[/]")
    if outcome.run_id:
        _out.print(f"stored run [bold]{outcome.run_id}[/] in {outcome.store_path}")


@dataclass(frozen=True)
class ProfiledFlags(Tf32Flags, DeviceFlags, BatchFlags, RuntimeFlags):
    """The configuration profiled: runtime, precision, threads, batch, device and TF32."""


@dataclass(frozen=True)
class RooflineBudgetFlags(MeasureBudgetFlags):
    """How long the model is timed, and the ceilings measured if none are cached."""

    ceilings_budget: float | None = flag(
        duration_option(
            "--ceilings-budget",
            "Budget if ceilings must be measured: fp32, the precision's and bandwidth only (3m).",
        )
    )
    refresh_ceilings: bool = flag(
        typer.Option(False, "--refresh-ceilings", help="Re-measure them.")
    )


@app.command("roofline")
@with_flag_groups
def roofline_command(
    model: str = typer.Argument(..., help="Zoo name, file.py:fn, module:fn or .pt2."),
    configuration: ProfiledFlags = GROUP,
    budgets: RooflineBudgetFlags = GROUP,
    source: ModelFlags = GROUP,
    output: OutputFlags = GROUP,
    quiet: QuietFlags = GROUP,
) -> None:
    """Per-operator roofline of a model: FLOPs, bytes, time, class, and the gap to the floor."""
    from accelscope.commands.roofline.view import roofline_view
    from accelscope.commands.roofline.workflow import RooflineRequest, roofline

    request = RooflineRequest(
        model=model,
        report_path=output.report,
        refresh_ceilings=budgets.refresh_ceilings,
        threads=configuration.threads,
        **configuration.device_fields(),
        **given(
            backend=configuration.backend.strip() if configuration.backend else None,
            precision=configuration.precision,
            batch_size=configuration.batch,
            tf32=configuration.tf32_value,
            measure_budget_s=budgets.measure_budget,
            ceilings_budget_s=budgets.ceilings_budget,
            inputs=source.input_specs,
            weights=source.weights,
            trust_model_code=source.trust_model_code,
        ),
    )
    outcome = roofline(
        request,
        store_path=output.target,
        events=_say(quiet.quiet or output.as_json),
        command_line=command_line(),
    )
    if output.as_json:
        document = outcome.profile.document().model_dump(mode="json")
        head = {"run_id": outcome.run_id, "report": str(outcome.report_path)}
        _out.print_json(json.dumps({**head, **document}))
        return
    _out.print(roofline_view(outcome.profile))
    if not quiet.quiet:
        found = outcome.ceilings
        _out.print(f"[dim]ceilings {_source(found)}: {found.cache_path}[/]")
        _out.print(f"[dim]report: {outcome.report_path}[/]")
        if outcome.run_id:
            _out.print(f"stored run [bold]{outcome.run_id}[/] in {outcome.store_path}")


def _show_ceilings(run: RunRecord) -> None:
    from accelscope.commands.roofline.view import ceilings_view
    from accelscope.roofline.ceilings import Ceilings

    for payload in run.documents_of("ceilings"):
        _out.print(ceilings_view(Ceilings.from_payload(payload)))


def _show_roofline(run: RunRecord) -> None:
    from accelscope.commands.roofline.view import roofline_view
    from accelscope.roofline.analysis import RooflineAnalysis

    for payload in run.documents_of("roofline"):
        _out.print(roofline_view(RooflineAnalysis.from_stored(payload)))


register_show("ceilings", _show_ceilings)
register_show("roofline", _show_roofline)
