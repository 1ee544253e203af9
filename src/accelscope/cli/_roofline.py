"""The ``ceilings`` and ``roofline`` commands."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import typer

from accelscope.cli._app import JsonOption, StoreOption, _err, _out, app, command_line
from accelscope.cli._device import DEVICE_HELP, TF32_HELP, Tf32, parse_device, parse_tf32
from accelscope.cli._runs import register_show
from accelscope.cli._types import duration_option, duration_text, parse_input, positive_int
from accelscope.commands.roofline.view import ceilings_view, roofline_view
from accelscope.commands.roofline.workflow import (
    CeilingsOutcome,
    CeilingsRequest,
    RooflineRequest,
    ceilings,
    roofline,
)
from accelscope.roofline.analysis import RooflineAnalysis
from accelscope.roofline.ceilings import Ceilings
from accelscope.spec import DeviceRef, Precision, TensorSpec, parse_precision
from accelscope.store.sqlite import DEFAULT_STORE_PATH, RunRecord


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
def ceilings_command(
    device: DeviceRef = typer.Option(
        str(DeviceRef(CeilingsRequest.device)),
        "--device",
        parser=parse_device,
        metavar="DEVICE",
        help=DEVICE_HELP,
    ),
    refresh: bool = typer.Option(
        CeilingsRequest.refresh, "--refresh", help="Re-measure; ignore the cache."
    ),
    budget: float = duration_option(
        "--budget",
        "Time budget of the measurement, e.g. 3m (overrun: one call).",
        duration_text(CeilingsRequest.budget_s),
    ),
    store: Path = StoreOption,
    no_store: bool = typer.Option(False, "--no-store", help="Do not record a run."),
    as_json: bool = JsonOption,
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Only the table."),
) -> None:
    """Measure this machine's ceilings: peak matrix rate per dtype and memory bandwidth (on
    CUDA, IEEE fp32 and TF32 as separate rows)."""
    request = CeilingsRequest(device.kind, refresh, budget, device_index=device.index)
    store_path = None if no_store else (store or DEFAULT_STORE_PATH)
    outcome = ceilings(
        request,
        store_path=store_path,
        events=_say(quiet or as_json),
        command_line=command_line(),
    )
    if as_json:
        _out.print_json(json.dumps(outcome.ceilings.model_dump(mode="json")))
        return
    _out.print(ceilings_view(outcome.ceilings))
    if quiet:
        return
    _out.print(f"[dim]{_source(outcome)}: {outcome.cache_path}[/]")
    if outcome.run_id:
        _out.print(f"stored run [bold]{outcome.run_id}[/] in {outcome.store_path}")


@app.command("roofline")
def roofline_command(
    model: str = typer.Argument(..., help="Zoo name, file.py:fn, module:fn or .pt2."),
    backend: str = typer.Option(RooflineRequest.backend, "--backend", help="Runtime (eager)."),
    precision: Precision = typer.Option(
        RooflineRequest.precision,
        "--precision",
        parser=parse_precision,
        help="fp32, bf16 (autocast) or fp16.",
    ),
    batch: int = typer.Option(
        RooflineRequest.batch_size,
        "--batch",
        parser=positive_int("batch size"),
        help="Batch size.",
    ),
    threads: int | None = typer.Option(
        None,
        "--threads",
        parser=positive_int("threads"),
        help="Threads (default: all usable cores).",
    ),
    device: DeviceRef = typer.Option(
        str(DeviceRef(RooflineRequest.device)),
        "--device",
        parser=parse_device,
        metavar="DEVICE",
        help=DEVICE_HELP,
    ),
    tf32: Tf32 = typer.Option(
        "on" if RooflineRequest.tf32 else "off",
        "--tf32",
        parser=parse_tf32,
        metavar="on|off",
        help=TF32_HELP,
    ),
    measure_budget: float = duration_option(
        "--measure-budget", "Model timing budget.", duration_text(RooflineRequest.measure_budget_s)
    ),
    ceilings_budget: float = duration_option(
        "--ceilings-budget",
        "Budget if ceilings must be measured (only fp32, the precision's and bandwidth).",
        duration_text(RooflineRequest.ceilings_budget_s),
    ),
    refresh_ceilings: bool = typer.Option(
        RooflineRequest.refresh_ceilings, "--refresh-ceilings", help="Re-measure them."
    ),
    inputs: list[TensorSpec] | None = typer.Option(
        None, "--input", parser=parse_input, metavar="SPEC", help="Input spec NAME:SHAPE:DTYPE."
    ),
    weights: Path = typer.Option(None, "--weights", help="State dict (.safetensors/.pt)."),
    trust_model_code: bool = typer.Option(
        RooflineRequest.trust_model_code, "--trust-model-code", help="Allow unpickling model files."
    ),
    report: Path = typer.Option(None, "--report", help="HTML report path."),
    store: Path = StoreOption,
    no_store: bool = typer.Option(False, "--no-store", help="Do not record a run."),
    as_json: bool = JsonOption,
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Only the table and summary."),
) -> None:
    """Per-operator roofline of a model: FLOPs, bytes, time, class, and the gap to the floor."""
    request = RooflineRequest(
        model=model,
        backend=backend.strip(),
        precision=precision,
        batch_size=batch,
        threads=threads,
        device=device.kind,
        device_index=device.index,
        tf32=tf32.values[0],
        report_path=report,
        measure_budget_s=measure_budget,
        ceilings_budget_s=ceilings_budget,
        refresh_ceilings=refresh_ceilings,
        inputs=tuple(inputs) if inputs else None,
        weights=weights,
        trust_model_code=trust_model_code,
    )
    store_path = None if no_store else (store or DEFAULT_STORE_PATH)
    outcome = roofline(
        request,
        store_path=store_path,
        events=_say(quiet or as_json),
        command_line=command_line(),
    )
    if as_json:
        _out.print_json(
            json.dumps(
                {
                    "run_id": outcome.run_id,
                    "report": str(outcome.report_path),
                    **outcome.profile.document().model_dump(mode="json"),
                }
            )
        )
        return
    _out.print(roofline_view(outcome.profile))
    if not quiet:
        found = outcome.ceilings
        _out.print(f"[dim]ceilings {_source(found)}: {found.cache_path}[/]")
        _out.print(f"[dim]report: {outcome.report_path}[/]")
        if outcome.run_id:
            _out.print(f"stored run [bold]{outcome.run_id}[/] in {outcome.store_path}")


def _show_ceilings(run: RunRecord) -> None:
    for payload in run.documents_of("ceilings"):
        _out.print(ceilings_view(Ceilings.from_payload(payload)))


def _show_roofline(run: RunRecord) -> None:
    for payload in run.documents_of("roofline"):
        _out.print(roofline_view(RooflineAnalysis.from_stored(payload)))


register_show("ceilings", _show_ceilings)
register_show("roofline", _show_roofline)
