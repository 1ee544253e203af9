"""The ``load`` command: MLPerf-style scenarios and the highest load that meets a p99 SLA."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from accelscope.cli._app import JsonOption, StoreOption, _err, _out, app
from accelscope.cli._runs import register_show
from accelscope.cli.config import load_load_config
from accelscope.commands.load.html import harness_floor_text
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
from accelscope.spec import RunSpec, parse_device, parse_options, parse_precision, parse_tensor_spec
from accelscope.store.sqlite import DEFAULT_STORE_PATH, RunRecord
from accelscope.units import parse_duration_s


def _scenario(text: str) -> Scenario:
    try:
        return Scenario(str(text).strip().lower())
    except ValueError:
        choices = ", ".join(s.value for s in Scenario)
        raise BadInputError(f"unknown scenario {text!r}; choose one of: {choices}") from None


def _number(value: Any, what: str) -> float:
    if isinstance(value, bool):
        raise BadInputError(f"{what} must be a number, got {value!r}")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise BadInputError(f"{what} must be a number, got {value!r}") from None


def _integer(value: Any, what: str) -> int:
    if isinstance(value, bool) or not str(value).strip().lstrip("+-").isdigit():
        raise BadInputError(f"{what} must be an integer, got {value!r}")
    return int(value)


def _min_duration_s(value: Any) -> float:
    if value in (0, "0", "0s"):
        return 0.0
    return parse_duration_s(value)


class _Events(LoadEvents):
    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet

    def preparing(self, spec: RunSpec, buckets: tuple[int, ...]) -> None:
        if not self.quiet:
            sizes = ", ".join(str(b) for b in buckets)
            _err.print(f"[dim]preparing {spec.label()} (batch sizes {sizes}) ...[/]")

    def floor(self, floor: HarnessFloor) -> None:
        text = harness_floor_text(floor.to_dict())
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
    model: str = typer.Argument(None, help="Zoo name, file.py:fn, module:fn, .onnx or .pt2."),
    scenario: str = typer.Option(None, "--scenario", help="single-stream, offline or server."),
    sla_p99: str = typer.Option(None, "--sla-p99", help="p99 latency bound, e.g. 100ms."),
    backend: str = typer.Option(None, "--backend", help="Runtime (eager, compile, ...)."),
    precision: str = typer.Option(None, "--precision", help="fp32, bf16, int8, ..."),
    batch: str = typer.Option(None, "--batch", help="The dynamic batcher's max batch (8)."),
    threads: str = typer.Option(None, "--threads", help="Intra-op threads (all cores)."),
    device: str = typer.Option(None, "--device", help="cpu or cuda."),
    options: list[str] = typer.Option(None, "--option", help="Backend option key=value."),
    from_run: str = typer.Option(
        None, "--from-run", help="Serve the best config of a stored bench run (id or latest)."
    ),
    rate: str = typer.Option(None, "--rate", help="Server: one offered rate, queries/s."),
    search: bool = typer.Option(
        None, "--search", help="Server: search the highest rate meeting the SLA (default)."
    ),
    no_batching: bool = typer.Option(None, "--no-batching", help="One query per batch."),
    max_delay: str = typer.Option(None, "--max-delay", help="Batcher max queue delay."),
    min_duration: str = typer.Option(None, "--min-duration", help="Per trial (10s)."),
    min_queries: str = typer.Option(None, "--min-queries", help="Per trial (1000)."),
    seed: str = typer.Option(None, "--seed", help="Schedule and input seed (0)."),
    burstiness_cv: str = typer.Option(
        None, "--burstiness-cv", help="Gap coefficient of variation (1 = Poisson)."
    ),
    query_timeout: str = typer.Option(
        None, "--query-timeout", help="A query not done this long after its arrival times out."
    ),
    inputs: list[str] = typer.Option(None, "--input", help="Input spec NAME:SHAPE:DTYPE."),
    weights: Path = typer.Option(None, "--weights", help="State dict (.safetensors/.pt)."),
    trust_model_code: bool = typer.Option(
        None, "--trust-model-code", help="Allow unpickling model files."
    ),
    config: Path = typer.Option(None, "--config", help="TOML config; flags override it."),
    report: Path = typer.Option(None, "--report", help="HTML report path."),
    store: Path = StoreOption,
    no_store: bool = typer.Option(False, "--no-store", help="Do not write results."),
    as_json: bool = JsonOption,
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Only the table and verdict."),
) -> None:
    """Drive a configuration with MLPerf-style load; find the highest rate within a p99 SLA."""
    settings: dict[str, Any] = load_load_config(config) if config is not None else {}
    flags = {
        "model": model,
        "scenario": scenario,
        "sla_p99": sla_p99,
        "backend": backend,
        "precision": precision,
        "batch": batch,
        "threads": threads,
        "device": device,
        "from_run": from_run,
        "rate": rate,
        "search": search,
        "max_delay": max_delay,
        "min_duration": min_duration,
        "min_queries": min_queries,
        "seed": seed,
        "burstiness_cv": burstiness_cv,
        "query_timeout": query_timeout,
        "weights": weights,
        "trust_model_code": trust_model_code,
        "report": report,
        "store": store,
    }
    settings.update({k: v for k, v in flags.items() if v is not None})
    if no_batching:
        settings["batching"] = False
    if options:
        settings["options"] = tuple(options)
    if inputs:
        settings["inputs"] = tuple(parse_tensor_spec(text) for text in inputs)

    def get(key: str, default: Any = None) -> Any:
        return settings.get(key, default)

    request = LoadRequest(
        model=get("model"),
        scenario=_scenario(get("scenario", "server")),
        sla_p99_s=parse_duration_s(get("sla_p99")) if get("sla_p99") is not None else None,
        backend=get("backend"),
        precision=parse_precision(get("precision")) if get("precision") else None,
        max_batch=_integer(get("batch"), "--batch") if get("batch") is not None else None,
        threads=_integer(get("threads"), "--threads") if get("threads") is not None else None,
        device=parse_device(str(get("device", "cpu"))),
        options=parse_options(tuple(get("options"))) if get("options") is not None else None,
        from_run=get("from_run"),
        rate_per_s=_number(get("rate"), "--rate") if get("rate") is not None else None,
        search=get("search"),
        batching=bool(get("batching", True)),
        max_delay_s=_min_duration_s(get("max_delay")) if get("max_delay") is not None else None,
        min_duration_s=_min_duration_s(get("min_duration", "10s")),
        min_queries=_integer(get("min_queries", 1000), "--min-queries"),
        seed=_integer(get("seed", 0), "--seed"),
        burstiness_cv=_number(get("burstiness_cv", 1.0), "--burstiness-cv"),
        query_timeout_s=parse_duration_s(get("query_timeout"))
        if get("query_timeout") is not None
        else None,
        inputs=get("inputs"),
        weights=get("weights"),
        trust_model_code=bool(get("trust_model_code", False)),
        report_path=get("report"),
    )
    store_path = None if no_store else get("store", DEFAULT_STORE_PATH)
    outcome = load(request, store_path=store_path, events=_Events(quiet or as_json))
    trials = [t.to_dict() for t in outcome.trials]
    floor = outcome.harness_floor.to_dict() if outcome.harness_floor is not None else None
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
