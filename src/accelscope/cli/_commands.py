"""The ``env``, ``models`` and ``measure`` commands."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from accelscope.backends.registry import all_backends
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
from accelscope.cli._types import Sizes, parse_input, parse_sizes
from accelscope.cli.config import config_option
from accelscope.commands.env.view import environment_view
from accelscope.commands.measure.workflow import MeasureRequest, measure
from accelscope.engine.probe import probe_pairs, probe_runtime_version, probe_table
from accelscope.hardware.fingerprint import collect_environment
from accelscope.measurement.threads import available_cores
from accelscope.measurement.timer import TimerConfig
from accelscope.models.zoo import DEFAULT_MODEL, ZOO
from accelscope.report.tables import results_view
from accelscope.spec import (
    Device,
    Precision,
    TensorSpec,
    parse_device,
    parse_options,
    parse_precision,
)
from accelscope.store.sqlite import DEFAULT_STORE_PATH
from accelscope.units import parse_duration_s, parse_fraction


@app.command()
def env(
    as_json: bool = JsonOption,
    probe: bool = typer.Option(
        False, "--probe", help="Also measure (or read cached) every runtime's precision probes."
    ),
    refresh_probes: bool = typer.Option(
        False, "--refresh-probes", help="With --probe: measure the probes again."
    ),
    store: Path = StoreOption,
) -> None:
    """Print this machine's fingerprint, the ISA fast paths and (--probe) the measured ones."""
    environment = collect_environment()
    table = None
    if probe:
        pairs = [
            (runtime, precision)
            for runtime in ("torch", "onnxruntime", "openvino")
            if probe_runtime_version(runtime)
            for precision in probe_pairs(runtime)
        ]
        if not as_json:
            _err.print("[dim]measuring the precision probes (cached per machine)...[/]")
        table = probe_table(
            pairs,
            fingerprint=environment.fingerprint(),
            threads=available_cores(),
            cache_dir=(store or DEFAULT_STORE_PATH).parent / "probes",
            refresh=refresh_probes,
        )
    if as_json:
        document = environment.to_dict()
        document["fingerprint"] = environment.fingerprint()
        document["precision_support"] = [
            {
                "device": s.device.value,
                "precision": s.precision.value,
                "fast": s.fast,
                "unit": s.unit,
                "reason": s.reason,
            }
            for s in environment.precision_support()
        ]
        document["probes"] = table.to_dict() if table is not None else None
        _out.print_json(json.dumps(document))
        return
    _out.print(environment_view(environment, table))


@app.command()
def models(as_json: bool = JsonOption) -> None:
    """List the built-in model zoo and the runtimes (available here or not, and why)."""
    environment = collect_environment()
    backends = [(b.name, b.available(environment)) for b in all_backends()]
    if as_json:
        document = {
            "models": [
                {
                    "name": e.name,
                    "task": e.task.value,
                    "description": e.description,
                    "inputs": [s.to_text() for s in e.inputs],
                    "has_eval_data": bool(e.eval_data),
                }
                for e in ZOO.values()
            ],
            "backends": [{"name": n, "available": a.ok, "reason": a.reason} for n, a in backends],
        }
        _out.print_json(json.dumps(document))
        return
    for entry in ZOO.values():
        default = " (default)" if entry.name == DEFAULT_MODEL else ""
        inputs = " ".join(s.to_text() for s in entry.inputs)
        metric = "; eval data + metric" if entry.eval_data else ""
        _out.print(f"[bold]{entry.name}[/]{default}: {entry.description} — {inputs}{metric}")
    for name, availability in backends:
        state = "[green]available[/]" if availability.ok else "[yellow]not available[/]"
        _out.print(f"backend [bold]{name}[/]: {state} — {availability.reason}")


@app.command("measure")
def measure_command(
    model: str | None = typer.Argument(
        None, help="Zoo name, file.py:fn, module:fn, .onnx or .pt2."
    ),
    backend: str | None = typer.Option(None, "--backend", help="Runtime: eager, onnxruntime."),
    precision: Precision | None = typer.Option(
        None, "--precision", parser=parse_precision, help="fp32, bf16, fp16."
    ),
    batch: Sizes | None = typer.Option(
        None, "--batch", parser=parse_sizes, metavar="LIST", help="Batch size(s), e.g. 8 or 1,8,32."
    ),
    threads: int | None = typer.Option(
        None, "--threads", help="Intra-op threads (default: all cores)."
    ),
    device: Device | None = typer.Option(
        None, "--device", parser=parse_device, help="cpu or cuda."
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
    budget: float | None = typer.Option(
        None,
        "--budget",
        parser=parse_duration_s,
        metavar="DURATION",
        help="Sampling time budget per config (10s).",
    ),
    target_ci: float | None = typer.Option(
        None,
        "--target-ci",
        parser=parse_fraction,
        metavar="FRACTION",
        help="Stop at median CI ± this (2%).",
    ),
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
            device=device,
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
            "results": [r.to_dict() for r in outcome.results],
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
