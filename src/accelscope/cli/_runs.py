"""The ``runs list|show|export`` commands."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import typer

from accelscope.cli._app import JsonOption, StoreOption, _err, _out, runs_app
from accelscope.commands.bench.view import bench_view
from accelscope.commands.bench.workflow import selections_for_run
from accelscope.errors import (
    BadInputError,
    StoreError,
)
from accelscope.report.tables import results_view, runs_view
from accelscope.store.export import run_to_csv, run_to_json
from accelscope.store.sqlite import DEFAULT_STORE_PATH, ResultStore, RunRecord
from accelscope.sweep.driver import latest_by_key
from accelscope.sweep.guard import AccuracyRule

ShowRenderer = Callable[[RunRecord], None]
_SHOW_RENDERERS: dict[str, ShowRenderer] = {}


def register_show(kind: str, renderer: ShowRenderer) -> None:
    """Let a command print its own runs in ``accelscope runs show`` (by the run's kind)."""
    _SHOW_RENDERERS[kind] = renderer


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
        return
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
    title = f"run {run.id} ({run.kind}, {run.status})"
    if run.kind == "bench":
        final = latest_by_key(run.results)
        selections = selections_for_run(final, run.settings, run.documents_of("confirmation"))
        rule = AccuracyRule(float(run.settings.get("max_accuracy_drop", 0.01))).describe()
        _out.print(bench_view(final, selections, title=title, rule=rule))
    elif run.kind in _SHOW_RENDERERS:
        _out.print(f"[bold]{title}[/]")
        _SHOW_RENDERERS[run.kind](run)
    else:
        _out.print(results_view(run.results, title=title))
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
