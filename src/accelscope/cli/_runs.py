"""The ``runs list|show|export`` commands."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from accelscope.cli._app import _err, _out, runs_app
from accelscope.cli._flag_groups import GROUP, JsonFlags, StoreFlags, with_flag_groups
from accelscope.errors import BadInputError, StoreError

if TYPE_CHECKING:
    from accelscope.store.sqlite import ResultStore, RunRecord

ShowRenderer = Callable[["RunRecord"], None]
_SHOW_RENDERERS: dict[str, ShowRenderer] = {}


def register_show(kind: str, renderer: ShowRenderer) -> None:
    """Let a command print its own runs in ``accelscope runs show`` (by the run's kind)."""
    _SHOW_RENDERERS[kind] = renderer


def _open_store(store: StoreFlags) -> ResultStore:
    from accelscope.store.sqlite import ResultStore

    path = store.path
    if not path.exists():
        raise StoreError(f"no results store at {path} (run `accelscope measure` first)")
    return ResultStore(path)


@runs_app.command("list")
@with_flag_groups
def runs_list(
    limit: int = typer.Option(20, "--limit", help="How many runs, newest first."),
    store: StoreFlags = GROUP,
    output: JsonFlags = GROUP,
) -> None:
    """List stored runs, newest first."""
    with _open_store(store) as opened:
        runs = opened.list_runs(limit)
    if output.as_json:
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
    from accelscope.report.tables import runs_view

    _out.print(runs_view(runs))


@runs_app.command("show")
@with_flag_groups
def runs_show(
    run_id: str = typer.Argument("latest", help="Run id, unique prefix, or 'latest'."),
    store: StoreFlags = GROUP,
    output: JsonFlags = GROUP,
) -> None:
    """Show one run's results table (or its full JSON)."""
    with _open_store(store) as opened:
        run = opened.get_run(run_id)
    if output.as_json:
        from accelscope.store.export import run_to_json

        sys.stdout.write(run_to_json(run) + "\n")
        return
    title = f"run {run.id} ({run.kind}, {run.status})"
    if run.kind == "bench":
        _show_bench(run, title)
    elif run.kind in _SHOW_RENDERERS:
        _out.print(f"[bold]{title}[/]")
        _SHOW_RENDERERS[run.kind](run)
    else:
        from accelscope.report.tables import results_view

        _out.print(results_view(run.results, title=title))
    _out.print(f"[dim]{run.command}[/]")


def _show_bench(run: RunRecord, title: str) -> None:
    """A bench run: its table, with the picks made again from its last results."""
    from accelscope.commands.bench.view import bench_view
    from accelscope.commands.bench.workflow import selections_for_run
    from accelscope.sweep.driver import latest_by_key
    from accelscope.sweep.guard import AccuracyRule

    final = latest_by_key(run.results)
    selections = selections_for_run(final, run.settings, run.documents_of("confirmation"))
    rule = AccuracyRule(float(run.settings.get("max_accuracy_drop", 0.01))).describe()
    _out.print(bench_view(final, selections, title=title, rule=rule))


@runs_app.command("export")
@with_flag_groups
def runs_export(
    run_id: str = typer.Argument("latest", help="Run id, unique prefix, or 'latest'."),
    fmt: str = typer.Option("csv", "--format", help="csv or json."),
    output: Path = typer.Option(None, "--output", "-o", help="File to write (default stdout)."),
    store: StoreFlags = GROUP,
) -> None:
    """Export a run as CSV (one row per result) or JSON (raw samples included)."""
    from accelscope.store.export import run_to_csv, run_to_json

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
