"""The ``bench`` command: the accuracy-guarded acceleration sweep."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from accelscope.cli._app import JsonOption, StoreOption, _err, _out, app
from accelscope.cli.config import load_bench_config
from accelscope.commands.bench.view import bench_view
from accelscope.commands.bench.workflow import BenchRequest, bench
from accelscope.models.zoo import DEFAULT_MODEL
from accelscope.result import Result, Status
from accelscope.spec import (
    RunSpec,
    parse_batch_sizes,
    parse_device,
    parse_options,
    parse_precision,
    parse_tensor_spec,
)
from accelscope.store.sqlite import DEFAULT_STORE_PATH
from accelscope.units import parse_duration_s, parse_fraction


def _names(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in str(text).split(",") if part.strip())


class _Events:
    """Prints one line per finished configuration (stderr), unless quiet."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet

    def started(self, spec: RunSpec, stage: str) -> None:
        if not self.quiet:
            _err.print(f"[dim]{stage} {spec.label()} ...[/]")

    def progress(self, phase: str, count: int, elapsed_s: float, budget_s: float) -> None:
        return None

    def note(self, text: str) -> None:
        if not self.quiet:
            _err.print(f"[dim]{text}[/]", markup=True, highlight=False)

    def finished(self, result: Result) -> None:
        if self.quiet or result.status is Status.SKIPPED:  # the table lists skips, grouped
            return
        m = result.measurement
        rate = f"{m.throughput_items_per_s:,.1f} items/s" if m is not None else ""
        reason = f": {result.status_reason}" if result.status_reason else ""
        _err.print(f"  {result.spec.label()} {result.status.value}{reason} {rate}", markup=False)


def _get(settings: dict[str, Any], key: str, default: Any = None) -> Any:
    value = settings.get(key)
    return default if value is None else value


@app.command("bench")
def bench_command(
    model: str = typer.Argument(None, help="Zoo name, file.py:fn, module:fn, .onnx or .pt2."),
    backends: str = typer.Option(None, "--backend", help="Runtimes, e.g. eager,compile."),
    precisions: str = typer.Option(None, "--precision", help="e.g. fp32,bf16,int8."),
    batch: str = typer.Option(None, "--batch", help="Batch sizes, e.g. 1,8,32."),
    threads: str = typer.Option(None, "--threads", help="Thread counts, e.g. 1,2."),
    device: str = typer.Option(None, "--device", help="cpu or cuda."),
    options: list[str] = typer.Option(None, "--option", help="Backend option key=value."),
    force_precision: bool = typer.Option(
        None, "--force-precision", help="Measure precisions without a fast path."
    ),
    sla_p99: str = typer.Option(None, "--sla-p99", help="p99 latency SLA, e.g. 100ms."),
    max_drop: str = typer.Option(None, "--max-accuracy-drop", help="Tolerance, e.g. 1%."),
    strategy: str = typer.Option(None, "--strategy", help="grid or fast."),
    budget: str = typer.Option(None, "--budget", help="Whole-sweep time budget, e.g. 15m."),
    measure_budget: str = typer.Option(
        None, "--measure-budget", help="Sampling budget per configuration (10s)."
    ),
    timeout: str = typer.Option(None, "--timeout", help="Per-configuration timeout (15m)."),
    resume: bool = typer.Option(False, "--resume", help="Continue the last unfinished sweep."),
    confirm_rounds: int = typer.Option(
        None,
        "--confirm-rounds",
        help="Interleaved re-measure rounds of baseline vs best (6; 0 = off).",
    ),
    refresh_probes: bool = typer.Option(
        False, "--refresh-probes", help="Measure the precision probes again (cached per machine)."
    ),
    accuracy_samples: int = typer.Option(
        None, "--accuracy-samples", help="Synthetic inputs for the fidelity check (256)."
    ),
    plugins: list[str] = typer.Option(None, "--plugin", help="Module registering backends."),
    inputs: list[str] = typer.Option(None, "--input", help="Input spec NAME:SHAPE:DTYPE."),
    weights: Path = typer.Option(None, "--weights", help="State dict (.safetensors/.pt)."),
    trust_model_code: bool = typer.Option(
        None, "--trust-model-code", help="Allow unpickling model files."
    ),
    eval_data: Path = typer.Option(
        None, "--eval-data", help="Your labelled eval data (.npz: inputs + labels)."
    ),
    metric: str = typer.Option(None, "--metric", help="Task metric (top1_accuracy)."),
    report: Path = typer.Option(None, "--report", help="HTML report path."),
    config: Path = typer.Option(None, "--config", help="TOML config; flags override it."),
    store: Path = StoreOption,
    no_store: bool = typer.Option(False, "--no-store", help="Do not write results."),
    as_json: bool = JsonOption,
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Only the table and verdict."),
) -> None:
    """Sweep runtime x precision x batch x threads; pick the fastest accurate config in SLA."""
    settings: dict[str, Any] = load_bench_config(config) if config is not None else {}
    flags = {
        "model": model,
        "backends": backends,
        "precisions": precisions,
        "batch": batch,
        "threads": threads,
        "device": device,
        "force_precision": force_precision,
        "sla_p99": sla_p99,
        "max_accuracy_drop": max_drop,
        "strategy": strategy,
        "budget": budget,
        "measure_budget": measure_budget,
        "timeout": timeout,
        "accuracy_samples": accuracy_samples,
        "weights": weights,
        "trust_model_code": trust_model_code,
        "report": report,
        "store": store,
        "eval_data": eval_data,
        "metric": metric,
        "confirm_rounds": confirm_rounds,
    }
    settings.update({k: v for k, v in flags.items() if v is not None})
    if options:
        settings["options"] = tuple(options)
    if plugins:
        settings["plugins"] = tuple(plugins)
    if inputs:
        settings["inputs"] = tuple(parse_tensor_spec(text) for text in inputs)
    sla = settings.get("sla_p99")
    request = BenchRequest(
        model=_get(settings, "model", DEFAULT_MODEL),
        backends=_names(_get(settings, "backends", "")),
        precisions=tuple(parse_precision(p) for p in _names(_get(settings, "precisions", ""))),
        batch_sizes=parse_batch_sizes(str(settings["batch"])) if "batch" in settings else (),
        threads=parse_batch_sizes(str(settings["threads"])) if "threads" in settings else (),
        device=parse_device(_get(settings, "device", "cpu")),
        options=parse_options(tuple(_get(settings, "options", ()))),
        force_precisions=bool(_get(settings, "force_precision", False)),
        sla_p99_s=parse_duration_s(sla) if sla is not None else None,
        max_accuracy_drop=parse_fraction(_get(settings, "max_accuracy_drop", 0.01)),
        strategy=str(_get(settings, "strategy", "grid")),
        budget_s=parse_duration_s(_get(settings, "budget", "15m")),
        measure_budget_s=parse_duration_s(_get(settings, "measure_budget", "10s")),
        timeout_s=parse_duration_s(_get(settings, "timeout", "15m")),
        resume=resume,
        accuracy_samples=int(_get(settings, "accuracy_samples", 256)),
        inputs=settings.get("inputs"),
        weights=settings.get("weights"),
        trust_model_code=bool(_get(settings, "trust_model_code", False)),
        plugins=tuple(_get(settings, "plugins", ())),
        seed=int(_get(settings, "seed", 0)),
        report_path=settings.get("report"),
        eval_data=settings.get("eval_data"),
        metric=str(_get(settings, "metric", "top1_accuracy")),
        confirm_rounds=int(_get(settings, "confirm_rounds", 6)),
        refresh_probes=refresh_probes,
    )
    store_path = None if no_store else settings.get("store", DEFAULT_STORE_PATH)
    outcome = bench(request, store_path=store_path, events=_Events(quiet or as_json))
    if as_json:
        document = {
            "run_id": outcome.run_id,
            "store": str(outcome.store_path or ""),
            "report": str(outcome.report_path or ""),
            "verdict": outcome.selection.verdict,
            "best": outcome.selection.best_key,
            "lowest_latency": outcome.selection.lowest_latency_key,
            "baseline": outcome.selection.baseline_key,
            "confirmation": (
                outcome.selection.confirmation.to_dict() if outcome.selection.confirmation else None
            ),
            "probes": outcome.probes.to_dict() if outcome.probes else None,
            "measurement_time_s": outcome.measurement_time_s,
            "wall_time_s": outcome.wall_time_s,
            "results": [r.to_dict() for r in outcome.results],
        }
        _out.print_json(json.dumps(document))
        return
    _out.print(
        bench_view(
            outcome.results,
            outcome.selection,
            title=f"bench: {outcome.model.ref}",
            rule=outcome.rule.describe(),
        )
    )
    if not quiet:
        _out.print(
            f"[dim]measured {outcome.measurement_time_s:.0f} s of {outcome.wall_time_s:.0f} s "
            f"wall; report: {outcome.report_path}[/]"
        )
        if outcome.run_id:
            _out.print(f"stored run [bold]{outcome.run_id}[/] in {outcome.store_path}")
