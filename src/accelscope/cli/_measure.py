"""The ``measure`` command: one configuration, measured in this process."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from accelscope.cli._app import (
    JsonOption,
    StoreOption,
    _err,
    _out,
    _progress,
    app,
    command_line,
    given,
)
from accelscope.cli._device import DEVICE_HELP, TF32_HELP, Tf32, parse_device, parse_tf32
from accelscope.cli._types import Sizes, duration_option, fraction_option, parse_input, parse_sizes
from accelscope.cli.config import config_option
from accelscope.commands.measure.workflow import MeasureRequest, measure
from accelscope.measurement.timer import TimerConfig
from accelscope.models.zoo import DEFAULT_MODEL
from accelscope.report.tables import results_view
from accelscope.serialise import dump
from accelscope.spec import DeviceRef, Precision, TensorSpec, parse_options, parse_precision
from accelscope.store.sqlite import DEFAULT_STORE_PATH


@app.command("measure")
def measure_command(
    model: str | None = typer.Argument(
        None, help="Zoo name, file.py:fn, module:fn, .onnx or .pt2."
    ),
    backend: str | None = typer.Option(
        None, "--backend", help="Runtime: eager, compile, onnxruntime, openvino, ..."
    ),
    precision: Precision | None = typer.Option(
        None, "--precision", parser=parse_precision, help="fp32, bf16, fp16."
    ),
    batch: Sizes | None = typer.Option(
        None, "--batch", parser=parse_sizes, metavar="LIST", help="Batch size(s), e.g. 8 or 1,8,32."
    ),
    threads: int | None = typer.Option(
        None, "--threads", help="Intra-op threads (default: all cores)."
    ),
    device: DeviceRef | None = typer.Option(
        None, "--device", parser=parse_device, metavar="DEVICE", help=DEVICE_HELP
    ),
    tf32: Tf32 | None = typer.Option(
        None, "--tf32", parser=parse_tf32, metavar="on|off", help=TF32_HELP
    ),
    options: list[str] | None = typer.Option(None, "--option", help="Backend option key=value."),
    inputs: list[TensorSpec] | None = typer.Option(
        None,
        "--input",
        parser=parse_input,
        metavar="SPEC",
        help="Input spec NAME:SHAPE:DTYPE, N = batch (repeatable).",
    ),
    weights: Path | None = typer.Option(None, "--weights", help="State dict (.safetensors/.pt)."),
    trust_model_code: bool | None = typer.Option(
        None, "--trust-model-code", help="Allow unpickling model files (runs code in them)."
    ),
    budget: float | None = duration_option("--budget", "Sampling time budget per config (10s)."),
    target_ci: float | None = fraction_option("--target-ci", "Stop at median CI ± this (2%)."),
    seed: int | None = typer.Option(None, "--seed", help="Input seed (0)."),
    config: Path | None = config_option("run", help="TOML config file; flags override it."),
    store: Path | None = StoreOption,
    no_store: bool = typer.Option(False, "--no-store", help="Do not write results."),
    as_json: bool = JsonOption,
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Only the results table."),
) -> None:
    """Measure a model's latency, throughput and peak memory (adaptive, noise-aware)."""
    request = MeasureRequest(
        model=model or DEFAULT_MODEL,
        options=parse_options(tuple(options or ())),
        timer=TimerConfig(**given(budget_s=budget, target_rel_ci=target_ci)),
        **given(
            backend=backend,
            precision=precision,
            batch_sizes=batch.values if batch else None,
            threads=threads,
            device=device.kind if device else None,
            device_index=device.index if device else None,
            tf32=tf32.values[0] if tf32 else None,
            inputs=tuple(inputs) if inputs else None,
            weights=weights,
            trust_model_code=trust_model_code,
            seed=seed,
        ),
    )
    store_path = None if no_store else (store or DEFAULT_STORE_PATH)
    show_progress = not (quiet or as_json) and _err.is_terminal
    with _progress(show_progress) as (on_config, on_progress):
        outcome = measure(
            request,
            store_path=store_path,
            on_config=on_config,
            on_progress=on_progress,
            command_line=command_line(),
        )
    if as_json:
        document = {
            "run_id": outcome.run_id,
            "store": str(outcome.store_path or ""),
            "results": [dump(r) for r in outcome.results],
        }
        _out.print_json(json.dumps(document))
        return
    title = f"{outcome.model.ref} — {outcome.model.description}"
    _out.print(results_view(outcome.results, title=title))
    if outcome.run_id and not quiet:
        _out.print(
            f"stored run [bold]{outcome.run_id}[/] in {outcome.store_path} "
            f"(accelscope runs show {outcome.run_id})"
        )
