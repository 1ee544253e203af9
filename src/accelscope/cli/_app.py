"""The typer application objects, consoles and options shared by the commands."""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import typer
from rich.console import Console, RenderableType

from accelscope import __version__
from accelscope.cli._flag_groups import OutputFlags

if TYPE_CHECKING:
    from pydantic import BaseModel

    from accelscope.spec import RunSpec

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
if not _err.is_terminal:
    _err = Console(stderr=True, highlight=False, width=180)


def command_line() -> str:
    """The command as typed, stored with the run: ``accelscope`` and the shell-quoted args."""
    return shlex.join(["accelscope", *sys.argv[1:]])


class DocumentOutcome(Protocol):
    """What a command that stores one typed document returns (``llm``, ``tune``)."""

    @property
    def document(self) -> BaseModel: ...

    @property
    def run_id(self) -> str | None: ...

    @property
    def store_path(self) -> Path | None: ...

    @property
    def report_path(self) -> Path | None: ...


def print_outcome(
    outcome: DocumentOutcome, view: Callable[[Any], RenderableType], as_json: bool
) -> None:
    """The run's document as one JSON line (with its run id and report), or its view, the
    report path and the stored run."""
    if as_json:
        head = {"run_id": outcome.run_id, "report": str(outcome.report_path or "")}
        sys.stdout.write(json.dumps({**head, **outcome.document.model_dump(mode="json")}) + "\n")
        return
    _out.print(view(outcome.document))
    if outcome.report_path:
        _out.print(f"[dim]report: {outcome.report_path}[/]")
    if outcome.run_id:
        _out.print(f"stored run [bold]{outcome.run_id}[/] in {outcome.store_path}")


def run_and_print(
    workflow: Callable[..., DocumentOutcome],
    request: Any,
    view: Callable[[Any], RenderableType],
    output: OutputFlags,
) -> None:
    """Run a command's workflow with its progress lines on stderr (none under ``--json``), in
    the store it was given (none with ``--no-store``), and print its outcome."""
    events = None if output.as_json else (lambda line: _err.print(line, style="dim", markup=False))
    outcome = workflow(
        request,
        store_path=output.target,
        command_line=command_line(),
        events=events,
    )
    print_outcome(outcome, view, output.as_json)


def given(**values: Any) -> dict[str, Any]:
    """The keyword arguments whose flag (or config key) was given; the others are left out, so
    the request's own defaults apply (each default lives in one place: the request)."""
    return {key: value for key, value in values.items() if value is not None}


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


@contextmanager
def _progress(enabled: bool) -> Iterator[tuple[Any, Any]]:
    if not enabled:
        yield None, None
        return
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.fields[info]}"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=_err, transient=True) as bar:
        task = bar.add_task("starting", total=1.0, info="")

        def on_config(spec: RunSpec) -> None:
            bar.update(task, description=f"measuring {spec.label()}", completed=0.0, info="")

        def on_progress(phase: str, count: int, elapsed_s: float, budget_s: float) -> None:
            info = f"{phase}: {count} samples"
            bar.update(task, completed=min(1.0, elapsed_s / budget_s), info=info)

        yield on_config, on_progress
