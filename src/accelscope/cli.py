"""The ``accelscope`` command: a thin typer shell over :mod:`accelscope.api`.

It parses flags, calls the API, prints, and maps errors to exit codes: an ``AccelscopeError``
is one line on stderr with its exit code (2 for bad input); ``--debug`` shows the traceback.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from accelscope import __version__
from accelscope.api import MeasureRequest, measure
from accelscope.backends.registry import all_backends
from accelscope.config import load_config
from accelscope.errors import (
    EXIT_BAD_INPUT,
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    AccelscopeError,
    BadInputError,
    StoreError,
)
from accelscope.hardware.fingerprint import collect_environment
from accelscope.measure.timer import TimerConfig
from accelscope.models.zoo import DEFAULT_MODEL, ZOO
from accelscope.report.terminal import environment_view, results_view, runs_view
from accelscope.spec import (
    RunSpec,
    parse_batch_sizes,
    parse_device,
    parse_precision,
    parse_tensor_spec,
)
from accelscope.store.export import run_to_csv, run_to_json
from accelscope.store.sqlite import DEFAULT_STORE_PATH, ResultStore
from accelscope.units import parse_duration_s, parse_fraction

__all__ = ["app", "main"]


def _click_modules() -> list[Any]:
    """The click package(s) whose exceptions the parser may raise: recent typer versions
    bundle their own copy (``typer._click``), older ones use ``click``."""
    import importlib

    found = []
    for name in ("typer._click", "click"):
        try:
            found.append(importlib.import_module(name))
        except ImportError:
            continue
    return found


_CLICK = _click_modules()


def _exception_classes(name: str, *extra: type[BaseException]) -> tuple[type[BaseException], ...]:
    found = [getattr(m.exceptions, name, None) for m in _CLICK]
    return tuple({c for c in (*found, *extra) if isinstance(c, type)})


_USAGE_ERRORS = _exception_classes("ClickException")
_EXITS = _exception_classes("Exit", typer.Exit)
_ABORTS = _exception_classes("Abort", typer.Abort)

app = typer.Typer(
    name="accelscope",
    help="Profile first, then accelerate, then right-size: measured ML performance.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
runs_app = typer.Typer(help="List, show and export stored runs.", no_args_is_help=True)
app.add_typer(runs_app, name="runs")

_out = Console(highlight=False)
_err = Console(stderr=True, highlight=False)
if not _out.is_terminal:  # piped or captured: do not squeeze tables into 80 columns
    _out = Console(highlight=False, width=180)

StoreOption = typer.Option(None, "--store", help=f"Results store (default {DEFAULT_STORE_PATH}).")
JsonOption = typer.Option(False, "--json", help="Print machine-readable JSON only.")


def _version(value: bool) -> None:
    if value:
        _out.print(f"accelscope {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks for errors."),
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True),
) -> None:
    """accelscope: where your model's time goes, what acceleration buys, what to run it on."""


@app.command()
def env(as_json: bool = JsonOption) -> None:
    """Print this machine's fingerprint and which precisions have a fast path here."""
    environment = collect_environment()
    if as_json:
        document = environment.to_dict()
        document["fingerprint"] = environment.fingerprint()
        document["precision_support"] = [
            {"device": s.device.value, "precision": s.precision.value, "fast": s.fast,
             "unit": s.unit, "reason": s.reason}
            for s in environment.precision_support()
        ]  # fmt: skip
        _out.print_json(json.dumps(document))
        return
    _out.print(environment_view(environment))


@app.command()
def models(as_json: bool = JsonOption) -> None:
    """List the built-in model zoo and the runtimes (available here or not, and why)."""
    environment = collect_environment()
    backends = [(b.name, b.available(environment)) for b in all_backends()]
    if as_json:
        document = {
            "models": [
                {"name": e.name, "task": e.task.value, "description": e.description,
                 "inputs": [s.to_text() for s in e.inputs], "has_eval_data": bool(e.eval_data)}
                for e in ZOO.values()
            ],
            "backends": [{"name": n, "available": a.ok, "reason": a.reason} for n, a in backends],
        }  # fmt: skip
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


@contextmanager
def _progress(enabled: bool) -> Iterator[tuple[Any, Any]]:
    if not enabled:
        yield None, None
        return
    columns = (TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[info]}"),
               TimeElapsedColumn())  # fmt: skip
    with Progress(*columns, console=_err, transient=True) as bar:
        task = bar.add_task("starting", total=1.0, info="")

        def on_config(spec: RunSpec) -> None:
            bar.update(task, description=f"measuring {spec.label()}", completed=0.0, info="")

        def on_progress(phase: str, count: int, elapsed_s: float, budget_s: float) -> None:
            info = f"{phase}: {count} samples"
            bar.update(task, completed=min(1.0, elapsed_s / budget_s), info=info)

        yield on_config, on_progress


@app.command("measure")
def measure_command(
    model: str = typer.Argument(None, help="Zoo name, file.py:fn, module:fn, .onnx or .pt2."),
    backend: str = typer.Option(None, "--backend", help="Runtime: eager, onnxruntime."),
    precision: str = typer.Option(None, "--precision", help="fp32, bf16, fp16."),
    batch: str = typer.Option(None, "--batch", help="Batch size(s), e.g. 8 or 1,8,32."),
    threads: int = typer.Option(None, "--threads", help="Intra-op threads (default: all cores)."),
    device: str = typer.Option(None, "--device", help="cpu or cuda."),
    inputs: list[str] = typer.Option(
        None, "--input", help="Input spec NAME:SHAPE:DTYPE, N = batch (repeatable)."
    ),
    weights: Path = typer.Option(None, "--weights", help="State dict (.safetensors/.pt)."),
    trust_model_code: bool = typer.Option(
        None, "--trust-model-code", help="Allow unpickling model files (runs code in them)."
    ),
    budget: str = typer.Option(None, "--budget", help="Sampling time budget per config (10s)."),
    target_ci: str = typer.Option(None, "--target-ci", help="Stop at median CI ± this (2%)."),
    config: Path = typer.Option(None, "--config", help="TOML config file; flags override it."),
    store: Path = StoreOption,
    no_store: bool = typer.Option(False, "--no-store", help="Do not write results."),
    as_json: bool = JsonOption,
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Only the results table."),
) -> None:
    """Measure a model's latency, throughput and peak memory (adaptive, noise-aware)."""
    settings: dict[str, Any] = load_config(config) if config is not None else {}
    flags = {"model": model, "backend": backend, "precision": precision, "threads": threads,
             "device": device, "weights": weights, "trust_model_code": trust_model_code,
             "budget": budget, "target_ci": target_ci, "store": store}  # fmt: skip
    settings.update({k: v for k, v in flags.items() if v is not None})
    if batch is not None:
        settings["batch"] = parse_batch_sizes(batch)
    if inputs:
        settings["inputs"] = tuple(parse_tensor_spec(text) for text in inputs)
    timer = TimerConfig(
        budget_s=parse_duration_s(settings.get("budget", 10.0)),
        target_rel_ci=parse_fraction(settings.get("target_ci", 0.02)),
    )
    request = MeasureRequest(
        model=settings.get("model") or DEFAULT_MODEL,
        backend=settings.get("backend", "eager"),
        precision=parse_precision(settings.get("precision", "fp32")),
        batch_sizes=settings.get("batch", ()),
        threads=settings.get("threads"),
        device=parse_device(settings.get("device", "cpu")),
        inputs=settings.get("inputs"),
        weights=settings.get("weights"),
        trust_model_code=bool(settings.get("trust_model_code", False)),
        timer=timer,
        seed=int(settings.get("seed", 0)),
    )
    store_path = None if no_store else settings.get("store", DEFAULT_STORE_PATH)
    show_progress = not (quiet or as_json) and _err.is_terminal
    with _progress(show_progress) as (on_config, on_progress):
        outcome = measure(request, store_path=store_path, on_config=on_config,
                          on_progress=on_progress)  # fmt: skip
    if as_json:
        document = {"run_id": outcome.run_id, "store": str(outcome.store_path or ""),
                    "results": [r.to_dict() for r in outcome.results]}  # fmt: skip
        _out.print_json(json.dumps(document))
        return
    title = f"{outcome.model.ref} — {outcome.model.description}"
    _out.print(results_view(outcome.results, title=title))
    if outcome.run_id and not quiet:
        _out.print(
            f"stored run [bold]{outcome.run_id}[/] in {outcome.store_path} "
            f"(accelscope runs show {outcome.run_id})"
        )


def _open_store(store: Path | None) -> ResultStore:
    path = store or DEFAULT_STORE_PATH
    if not path.exists():
        raise StoreError(f"no results store at {path} (run `accelscope measure` first)")
    return ResultStore(path)


@runs_app.command("list")
def runs_list(
    limit: int = typer.Option(20, "--limit", help="How many runs, newest first."),
    store: Path = StoreOption,
    as_json: bool = JsonOption,
) -> None:
    """List stored runs, newest first."""
    with _open_store(store) as opened:
        runs = opened.list_runs(limit)
    if as_json:
        _out.print_json(
            json.dumps(
                [
                    {
                        k: getattr(r, k)
                        for k in (
                            "id",
                            "kind",
                            "model",
                            "command",
                            "created_at",
                            "finished_at",
                            "status",
                            "result_count",
                        )
                    }
                    for r in runs
                ]
            )
        )
        return  # fmt: skip
    _out.print(runs_view(runs))


@runs_app.command("show")
def runs_show(
    run_id: str = typer.Argument("latest", help="Run id, unique prefix, or 'latest'."),
    store: Path = StoreOption,
    as_json: bool = JsonOption,
) -> None:
    """Show one run's results table (or its full JSON)."""
    with _open_store(store) as opened:
        run = opened.get_run(run_id)
    if as_json:
        sys.stdout.write(run_to_json(run) + "\n")
        return
    _out.print(results_view(run.results, title=f"run {run.id} ({run.kind}, {run.status})"))
    _out.print(f"[dim]{run.command}[/]")


@runs_app.command("export")
def runs_export(
    run_id: str = typer.Argument("latest", help="Run id, unique prefix, or 'latest'."),
    fmt: str = typer.Option("csv", "--format", help="csv or json."),
    output: Path = typer.Option(None, "--output", "-o", help="File to write (default stdout)."),
    store: Path = StoreOption,
) -> None:
    """Export a run as CSV (one row per result) or JSON (raw samples included)."""
    if fmt not in ("csv", "json"):
        raise BadInputError(f"unknown format {fmt!r}; choose csv or json")
    with _open_store(store) as opened:
        run = opened.get_run(run_id)
    text = run_to_csv(run) if fmt == "csv" else run_to_json(run) + "\n"
    if output is None:
        sys.stdout.write(text)
        return
    temporary = output.with_name(output.name + ".partial")
    try:
        temporary.write_text(text, encoding="utf-8")
        temporary.replace(output)
    except OSError as exc:
        temporary.unlink(missing_ok=True)
        raise BadInputError(f"cannot write {output}: {exc.strerror}") from exc
    _err.print(f"wrote {len(run.results)} result(s) to {output}")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code (used by the console script and by tests)."""
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    command = typer.main.get_command(app)
    try:
        returned = command.main(args=args, prog_name="accelscope", standalone_mode=False)
    except _EXITS as done:
        return int(getattr(done, "exit_code", 0))
    except _USAGE_ERRORS as exc:
        if debug:
            raise
        if type(exc).__name__ == "NoArgsIsHelpError":
            return EXIT_BAD_INPUT  # the help text has been printed
        formatter = getattr(exc, "format_message", None)
        text = formatter() if callable(formatter) else str(exc)
        message = str(text).replace("\n", " ")
        _err.print(f"error: {message}", markup=False, soft_wrap=True)
        return EXIT_BAD_INPUT
    except _ABORTS:
        _err.print("interrupted", markup=False)
        return EXIT_INTERRUPTED
    except AccelscopeError as exc:
        if debug:
            raise
        _err.print(f"error: {exc.message}", markup=False, soft_wrap=True)
        return exc.exit_code
    except KeyboardInterrupt:
        _err.print("interrupted", markup=False)
        return EXIT_INTERRUPTED
    except Exception as exc:
        if debug:
            raise
        _err.print(
            f"internal error: {type(exc).__name__}: {exc} (a bug in accelscope; rerun with "
            "--debug for the traceback and report it)",
            markup=False,
            soft_wrap=True,
        )
        return EXIT_FAILURE
    if isinstance(returned, int) and returned == EXIT_INTERRUPTED:
        _err.print("interrupted", markup=False)
    return returned if isinstance(returned, int) else 0


if __name__ == "__main__":
    raise SystemExit(main())
