"""The ``bench`` command: the accuracy-guarded acceleration sweep."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from accelscope.cli._app import JsonOption, StoreOption, _err, _out, app, command_line, given
from accelscope.cli._device import DEVICE_HELP, TF32_HELP, Tf32, parse_device, parse_tf32_list
from accelscope.cli._types import (
    Names,
    Precisions,
    Sizes,
    duration_option,
    fraction_option,
    parse_input,
    parse_names,
    parse_precisions,
    parse_sizes,
)
from accelscope.cli.config import config_option
from accelscope.commands.bench.view import bench_view, preview_view
from accelscope.commands.bench.workflow import BenchRequest, bench, preview
from accelscope.models.zoo import DEFAULT_MODEL
from accelscope.result import Result, Status
from accelscope.serialise import dump
from accelscope.spec import DeviceRef, RunSpec, TensorSpec, parse_options
from accelscope.store.sqlite import DEFAULT_STORE_PATH


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


@app.command("bench")
def bench_command(
    model: str | None = typer.Argument(
        None, help="Zoo name, file.py:fn, module:fn, .onnx or .pt2."
    ),
    backends: Names | None = typer.Option(
        None, "--backend", parser=parse_names, metavar="LIST", help="Runtimes, e.g. eager,compile."
    ),
    precisions: Precisions | None = typer.Option(
        None, "--precision", parser=parse_precisions, metavar="LIST", help="e.g. fp32,bf16,int8."
    ),
    batch: Sizes | None = typer.Option(
        None, "--batch", parser=parse_sizes, metavar="LIST", help="Batch sizes, e.g. 1,8,32."
    ),
    threads: Sizes | None = typer.Option(
        None, "--threads", parser=parse_sizes, metavar="LIST", help="Thread counts, e.g. 1,2."
    ),
    device: DeviceRef | None = typer.Option(
        None, "--device", parser=parse_device, metavar="DEVICE", help=DEVICE_HELP
    ),
    tf32: Tf32 | None = typer.Option(
        None,
        "--tf32",
        parser=parse_tf32_list,
        metavar="on|off|off,on",
        help=TF32_HELP + " off,on measures both as rows.",
    ),
    options: list[str] | None = typer.Option(None, "--option", help="Backend option key=value."),
    force_precision: bool | None = typer.Option(
        None, "--force-precision", help="Measure precisions without a fast path."
    ),
    sla_p99: float | None = duration_option("--sla-p99", "p99 latency SLA, e.g. 100ms."),
    max_accuracy_drop: float | None = fraction_option("--max-accuracy-drop", "Tolerance, e.g. 1%."),
    strategy: str | None = typer.Option(None, "--strategy", help="grid or fast."),
    budget: float | None = duration_option("--budget", "Whole-sweep time budget, e.g. 15m."),
    measure_budget: float | None = duration_option(
        "--measure-budget", "Sampling budget per configuration (10s)."
    ),
    timeout: float | None = duration_option("--timeout", "Per-configuration timeout (15m)."),
    resume: bool = typer.Option(False, "--resume", help="Continue the last unfinished sweep."),
    executor: str | None = typer.Option(
        None, "--executor", help="local (this machine) or ray (a Ray cluster's nodes)."
    ),
    ray_address: str | None = typer.Option(
        None, "--ray-address", help="Ray cluster: auto (default) or ray://HOST:PORT."
    ),
    node_types: Names | None = typer.Option(
        None,
        "--node-type",
        parser=parse_names,
        metavar="LIST",
        help="Ray node types (custom resources) to measure on, e.g. cpu-pool,l4-pool.",
    ),
    confirm_rounds: int | None = typer.Option(
        None,
        "--confirm-rounds",
        help="Interleaved re-measure rounds of baseline vs best (6; 0 = off).",
    ),
    refresh_probes: bool = typer.Option(
        False, "--refresh-probes", help="Measure the precision probes again (cached per machine)."
    ),
    accuracy_samples: int | None = typer.Option(
        None, "--accuracy-samples", help="Synthetic inputs for the fidelity check (256)."
    ),
    plugins: list[str] | None = typer.Option(None, "--plugin", help="Module registering backends."),
    inputs: list[TensorSpec] | None = typer.Option(
        None, "--input", parser=parse_input, metavar="SPEC", help="Input spec NAME:SHAPE:DTYPE."
    ),
    weights: Path | None = typer.Option(None, "--weights", help="State dict (.safetensors/.pt)."),
    trust_model_code: bool | None = typer.Option(
        None, "--trust-model-code", help="Allow unpickling model files."
    ),
    eval_data: Path | None = typer.Option(
        None, "--eval-data", help="Your labelled eval data (.npz: inputs + labels)."
    ),
    metric: str | None = typer.Option(None, "--metric", help="Task metric (top1_accuracy)."),
    seed: int | None = typer.Option(None, "--seed", help="Input seed (0)."),
    report: Path | None = typer.Option(None, "--report", help="HTML report path."),
    config: Path | None = config_option("bench"),
    store: Path | None = StoreOption,
    no_store: bool = typer.Option(False, "--no-store", help="Do not write results."),
    as_json: bool = JsonOption,
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Only the table and verdict."),
    dry_run: bool = typer.Option(
        False,
        "--dry-run",
        help="List the configurations the sweep would run or skip; measure none.",
    ),
) -> None:
    """Sweep runtime x precision x batch x threads; pick the fastest accurate config in SLA."""
    request = BenchRequest(
        model=model or DEFAULT_MODEL,
        options=parse_options(tuple(options or ())),
        resume=resume,
        refresh_probes=refresh_probes,
        **given(
            backends=backends.values if backends else None,
            precisions=precisions.values if precisions else None,
            batch_sizes=batch.values if batch else None,
            threads=threads.values if threads else None,
            device=device.kind if device else None,
            device_index=device.index if device else None,
            tf32=tf32.values if tf32 else None,
            force_precisions=force_precision,
            sla_p99_s=sla_p99,
            max_accuracy_drop=max_accuracy_drop,
            strategy=strategy,
            budget_s=budget,
            measure_budget_s=measure_budget,
            timeout_s=timeout,
            accuracy_samples=accuracy_samples,
            inputs=tuple(inputs) if inputs else None,
            weights=weights,
            trust_model_code=trust_model_code,
            plugins=tuple(plugins) if plugins else None,
            seed=seed,
            report_path=report,
            eval_data=eval_data,
            metric=metric,
            confirm_rounds=confirm_rounds,
            executor=executor,
            ray_address=ray_address,
            node_types=node_types.values if node_types else None,
        ),
    )
    if dry_run:
        plan = preview(request)
        if as_json:
            rows = [
                {
                    "label": c.spec.label(),
                    "key": c.spec.key,
                    "runs": c.runnable,
                    "skip_reason": c.skip_reason,
                    "needed_bytes": plan.memory.estimate.needed_bytes(c.spec)
                    if plan.memory is not None and c.spec.device.value == "cuda"
                    else None,
                }
                for c in plan.candidates
            ]
            free = plan.memory.device.free_bytes if plan.memory is not None else None
            planned = {
                "model": plan.model.ref,
                "device_free_bytes": free,
                "configurations": rows,
                "notes": list(plan.notes),
            }
            _out.print_json(json.dumps(planned))
        else:
            _out.print(preview_view(plan))
        return
    store_path = None if no_store else (store or DEFAULT_STORE_PATH)
    outcome = bench(
        request,
        store_path=store_path,
        events=_Events(quiet or as_json),
        command_line=command_line(),
    )
    if as_json:
        document = {
            "run_id": outcome.run_id,
            "store": str(outcome.store_path or ""),
            "report": str(outcome.report_path or ""),
            "verdict": outcome.selection.verdict,
            "node_types": {
                node_type: {"verdict": chosen.verdict, "best": chosen.best_key}
                for node_type, chosen in outcome.selections.items()
                if node_type
            },
            "best": outcome.selection.best_key,
            "lowest_latency": outcome.selection.lowest_latency_key,
            "baseline": outcome.selection.baseline_key,
            "confirmation": (
                dump(outcome.selection.confirmation) if outcome.selection.confirmation else None
            ),
            "probes": dump(outcome.probes) if outcome.probes else None,
            "measurement_time_s": outcome.measurement_time_s,
            "wall_time_s": outcome.wall_time_s,
            "standing": outcome.standing.summary() if outcome.standing else None,
            "results": [dump(r) for r in outcome.results],
        }
        _out.print_json(json.dumps(document))
        return
    _out.print(
        bench_view(
            outcome.results,
            outcome.selections or {"": outcome.selection},
            title=f"bench: {outcome.model.ref}",
            rule=outcome.rule.describe(),
            standing=outcome.standing,
        )
    )
    if not quiet:
        _out.print(
            f"[dim]measured {outcome.measurement_time_s:.0f} s of {outcome.wall_time_s:.0f} s "
            f"wall; report: {outcome.report_path}[/]"
        )
        if outcome.run_id:
            _out.print(f"stored run [bold]{outcome.run_id}[/] in {outcome.store_path}")
