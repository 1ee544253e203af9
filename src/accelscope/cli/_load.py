"""The ``load`` command: MLPerf-style scenarios and the highest load that meets a p99 SLA."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from accelscope.cli._app import JsonOption, StoreOption, _err, _out, app, command_line, given
from accelscope.cli._device import DEVICE_HELP, TF32_HELP, Tf32, parse_device, parse_tf32
from accelscope.cli._runs import register_show
from accelscope.cli._types import duration_option, parse_input, seconds_or_zero
from accelscope.cli.config import config_option
from accelscope.commands.load.verdict import harness_floor_text
from accelscope.commands.load.view import load_view
from accelscope.commands.load.workflow import (
    CAPACITY_DOCUMENT,
    SUMMARY_DOCUMENT,
    TRIAL_DOCUMENT,
    LoadEvents,
    LoadRequest,
    load,
)
from accelscope.errors import BadInputError
from accelscope.load.capacity_search import PolicyCapacity
from accelscope.load.floor import HarnessFloor
from accelscope.load.summary import Scenario, TrialSummary
from accelscope.serialise import dump
from accelscope.spec import (
    DeviceRef,
    Precision,
    RunSpec,
    TensorSpec,
    parse_options,
    parse_precision,
)
from accelscope.store.sqlite import DEFAULT_STORE_PATH, RunRecord


def _scenario(text: Any) -> Scenario:
    try:
        return Scenario(str(text).strip().lower())
    except ValueError:
        choices = ", ".join(s.value for s in Scenario)
        raise BadInputError(f"unknown scenario {text!r}; choose one of: {choices}") from None


class _Events(LoadEvents):
    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet

    def preparing(self, spec: RunSpec, buckets: tuple[int, ...]) -> None:
        if not self.quiet:
            sizes = ", ".join(str(b) for b in buckets)
            _err.print(f"[dim]preparing {spec.label()} (batch sizes {sizes}) ...[/]")

    def floor(self, floor: HarnessFloor) -> None:
        text = harness_floor_text(dump(floor))
        if not self.quiet and text is not None:
            _err.print(f"  {text}", style="dim", markup=False)

    def trial(self, summary: TrialSummary) -> None:
        if self.quiet:
            return
        rate = summary.offered_rate_per_s
        where = f"{rate:,.1f} q/s" if rate is not None else summary.scenario.value
        if summary.sla_p99_s is not None:
            verdict = (
                "meets SLA" if summary.meets_sla else "misses: " + "; ".join(summary.sla_failures)
            )
        else:
            verdict = "valid" if summary.valid else "invalid: " + "; ".join(summary.invalid_reasons)
        _err.print(
            f"  {summary.policy.label()} @ {where}: p99 {summary.latency.p99_s * 1e3:.1f} ms, "
            f"{summary.issued} queries, {verdict}",
            markup=False,
        )

    def policy(self, found: PolicyCapacity) -> None:
        if not self.quiet:
            _err.print(
                f"[bold]{found.policy.label()}[/]: capacity {found.capacity_qps:,.1f} q/s "
                f"(offline ceiling {found.ceiling_qps:,.1f} q/s)"
            )


def _show_load_run(run: RunRecord) -> None:
    capacities = run.documents_of(CAPACITY_DOCUMENT)
    summaries = run.documents_of(SUMMARY_DOCUMENT)  # none in runs stored before it existed
    scenario = str(run.settings.get("scenario", "server"))
    sla = run.settings.get("sla_p99_s")
    _out.print(
        load_view(
            title=f"load {run.id}: {run.model} ({run.status})",
            scenario=scenario,
            sla_p99_s=float(sla) if sla is not None else None,
            trials=run.documents_of(TRIAL_DOCUMENT),
            capacity=capacities[-1] if capacities else None,
            harness_floor=summaries[-1].get("harness_floor") if summaries else None,
        )
    )


register_show("load", _show_load_run)


@app.command("load")
def load_command(
    model: str | None = typer.Argument(
        None, help="Zoo name, file.py:fn, module:fn, .onnx or .pt2."
    ),
    scenario: Scenario | None = typer.Option(
        None, "--scenario", parser=_scenario, help="single-stream, offline or server."
    ),
    sla_p99: float | None = duration_option("--sla-p99", "p99 latency bound, e.g. 100ms."),
    backend: str | None = typer.Option(None, "--backend", help="Runtime (eager, compile, ...)."),
    precision: Precision | None = typer.Option(
        None, "--precision", parser=parse_precision, help="fp32, bf16, int8, ..."
    ),
    batch: int | None = typer.Option(None, "--batch", help="The dynamic batcher's max batch (8)."),
    threads: int | None = typer.Option(None, "--threads", help="Intra-op threads (all cores)."),
    device: DeviceRef | None = typer.Option(
        None, "--device", parser=parse_device, metavar="DEVICE", help=DEVICE_HELP
    ),
    tf32: Tf32 | None = typer.Option(
        None, "--tf32", parser=parse_tf32, metavar="on|off", help=TF32_HELP
    ),
    options: list[str] | None = typer.Option(None, "--option", help="Backend option key=value."),
    from_run: str | None = typer.Option(
        None, "--from-run", help="Serve the best config of a stored bench run (id or latest)."
    ),
    rate: float | None = typer.Option(None, "--rate", help="Server: one offered rate, queries/s."),
    search: bool | None = typer.Option(
        None, "--search", help="Server: search the highest rate meeting the SLA (default)."
    ),
    batching: bool | None = typer.Option(None, " /--no-batching", help="One query per batch."),
    max_delay: float | None = typer.Option(
        None,
        "--max-delay",
        parser=seconds_or_zero,
        metavar="DURATION",
        help="Batcher max queue delay.",
    ),
    min_duration: float | None = typer.Option(
        None, "--min-duration", parser=seconds_or_zero, metavar="DURATION", help="Per trial (10s)."
    ),
    min_queries: int | None = typer.Option(None, "--min-queries", help="Per trial (1000)."),
    seed: int | None = typer.Option(None, "--seed", help="Schedule and input seed (0)."),
    burstiness_cv: float | None = typer.Option(
        None, "--burstiness-cv", help="Gap coefficient of variation (1 = Poisson)."
    ),
    query_timeout: float | None = duration_option(
        "--query-timeout", "A query not done this long after its arrival times out."
    ),
    inputs: list[TensorSpec] | None = typer.Option(
        None, "--input", parser=parse_input, metavar="SPEC", help="Input spec NAME:SHAPE:DTYPE."
    ),
    weights: Path | None = typer.Option(None, "--weights", help="State dict (.safetensors/.pt)."),
    trust_model_code: bool | None = typer.Option(
        None, "--trust-model-code", help="Allow unpickling model files."
    ),
    config: Path | None = config_option("load"),
    report: Path | None = typer.Option(None, "--report", help="HTML report path."),
    store: Path | None = StoreOption,
    no_store: bool = typer.Option(False, "--no-store", help="Do not write results."),
    as_json: bool = JsonOption,
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Only the table and verdict."),
) -> None:
    """Drive a configuration with MLPerf-style load; find the highest rate within a p99 SLA."""
    request = LoadRequest(
        model=model,
        **given(
            scenario=scenario,
            sla_p99_s=sla_p99,
            backend=backend,
            precision=precision,
            max_batch=batch,
            threads=threads,
            device=device.kind if device else None,
            device_index=device.index if device else None,
            tf32=tf32.values[0] if tf32 else None,
            options=parse_options(tuple(options)) if options else None,
            from_run=from_run,
            rate_per_s=rate,
            search=search,
            batching=batching,
            max_delay_s=max_delay,
            min_duration_s=min_duration,
            min_queries=min_queries,
            seed=seed,
            burstiness_cv=burstiness_cv,
            query_timeout_s=query_timeout,
            inputs=tuple(inputs) if inputs else None,
            weights=weights,
            trust_model_code=trust_model_code,
            report_path=report,
        ),
    )
    store_path = None if no_store else (store or DEFAULT_STORE_PATH)
    outcome = load(
        request,
        store_path=store_path,
        events=_Events(quiet or as_json),
        command_line=command_line(),
    )
    trials = [t.to_dict() for t in outcome.trials]
    floor = dump(outcome.harness_floor) if outcome.harness_floor is not None else None
    if as_json:
        document = {
            "run_id": outcome.run_id,
            "store": str(outcome.store_path or ""),
            "report": str(outcome.report_path or ""),
            "model": outcome.model,
            "label": outcome.spec.label(),
            "scenario": outcome.scenario.value,
            "capacity": outcome.capacity,
            "trials": trials,
            "notes": outcome.notes,
            "harness_floor": floor,
        }
        _out.print_json(json.dumps(document))
        return
    _out.print(
        load_view(
            title=f"load: {outcome.model} {outcome.spec.label()}",
            scenario=outcome.scenario.value,
            sla_p99_s=request.sla_p99_s,
            trials=trials,
            capacity=outcome.capacity,
            notes=outcome.notes,
            harness_floor=floor,
        )
    )
    if not quiet:
        _out.print(f"[dim]prepared in {outcome.prepare_s:.1f} s; report: {outcome.report_path}[/]")
        if outcome.run_id:
            _out.print(f"stored run [bold]{outcome.run_id}[/] in {outcome.store_path}")
