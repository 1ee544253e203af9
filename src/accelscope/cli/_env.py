"""The ``env`` and ``models`` commands: what this machine is and can do fast, and the zoo."""

from __future__ import annotations

import json

import typer

from accelscope.cli._app import _err, _out, app
from accelscope.cli._flag_groups import (
    GROUP,
    JsonFlags,
    RefreshProbesFlags,
    StoreFlags,
    with_flag_groups,
)


@app.command()
@with_flag_groups
def env(
    output: JsonFlags = GROUP,
    probe: bool = typer.Option(
        False, "--probe", help="Also measure (or read cached) every runtime's precision probes."
    ),
    probes: RefreshProbesFlags = GROUP,
    store: StoreFlags = GROUP,
) -> None:
    """Print this machine's fingerprint, the ISA fast paths and (--probe) the measured ones."""
    from accelscope.commands.env.view import environment_view
    from accelscope.engine.probe import probe_pairs, probe_runtime_version, probe_table
    from accelscope.hardware.fingerprint import collect_environment
    from accelscope.measurement.threads import available_cores
    from accelscope.serialise import dump

    as_json = output.as_json
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
            cache_dir=store.path.parent / "probes",
            refresh=probes.refresh_probes,
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
@with_flag_groups
def models(output: JsonFlags = GROUP) -> None:
    """List the built-in model zoo and the runtimes (available here or not, and why)."""
    from accelscope.backends.registry import all_backends
    from accelscope.hardware.fingerprint import collect_environment
    from accelscope.models.zoo import DEFAULT_MODEL, ZOO

    as_json = output.as_json
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
