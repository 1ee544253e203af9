"""The ``env`` and ``models`` commands: what this machine is and can do fast, and the zoo."""

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
    app,
)
from accelscope.commands.env.view import environment_view
from accelscope.engine.probe import probe_pairs, probe_runtime_version, probe_table
from accelscope.hardware.fingerprint import collect_environment
from accelscope.measurement.threads import available_cores
from accelscope.models.zoo import DEFAULT_MODEL, ZOO
from accelscope.serialise import dump
from accelscope.store.sqlite import DEFAULT_STORE_PATH


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
        document = dump(environment)
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
        document["probes"] = dump(table) if table is not None else None
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
