"""The plumbing every command shares: path checks, run lifecycle, default report path."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from accelscope.commands._lifecycle import (
    API_COMMAND_LINE,
    CommandRun,
    check_paths,
    default_report_path,
)
from accelscope.errors import BadInputError, InterruptedRunError
from accelscope.hardware.fingerprint import Environment
from accelscope.store.sqlite import ResultStore
from accelscope.testing import fake_result


def _run(store: Path | None, environment: Environment, **kwargs: object) -> CommandRun:
    return CommandRun(
        "bench",
        "m",
        environment,
        {"sla_p99_s": None},
        store_path=store,
        command_line=kwargs.pop("command_line", "accelscope bench m"),  # type: ignore[arg-type]
        **kwargs,  # type: ignore[arg-type]
    )


def test_a_run_that_stores_nothing_leaves_no_store(
    tmp_path: Path, environment: Environment
) -> None:
    store = tmp_path / "r.db"
    with _run(store, environment) as run:
        pass
    assert run.run_id is None and run.stored_path is None and not store.exists()


def test_complete_failed_and_interrupted_runs(tmp_path: Path, environment: Environment) -> None:
    store = tmp_path / "r.db"
    with _run(store, environment) as done:
        done.add_result(fake_result(environment))
    with pytest.raises(RuntimeError), _run(store, environment) as failed:
        failed.add_result(fake_result(environment, batch=2))
        raise RuntimeError("boom")
    with (
        pytest.raises(InterruptedRunError) as caught,
        _run(store, environment, resume_hint="--resume continues it") as cut,
    ):
        cut.add_result(fake_result(environment, batch=4))
        cut.add_result(fake_result(environment, batch=8))
        raise KeyboardInterrupt
    assert str(caught.value) == (
        f"interrupted; 2 result(s) kept in run {cut.run_id} (--resume continues it)"
    )
    with ResultStore(store) as opened:
        status = {run.id: run.status for run in opened.list_runs()}
    assert status == {done.run_id: "complete", failed.run_id: "failed", cut.run_id: "interrupted"}


def test_an_interrupt_before_anything_was_stored_names_no_run(
    tmp_path: Path, environment: Environment
) -> None:
    with (
        pytest.raises(InterruptedRunError, match=r"^interrupted$"),
        _run(tmp_path / "r.db", environment),
    ):
        raise KeyboardInterrupt


def test_the_status_can_be_set_inside_the_block(tmp_path: Path, environment: Environment) -> None:
    store = tmp_path / "r.db"
    with _run(store, environment) as run:
        run.add_document("diagnosis", {"bottleneck": "input-bound"})
        run.status = "interrupted"
    with ResultStore(store) as opened:
        assert opened.get_run(str(run.run_id)).status == "interrupted"


def test_a_python_caller_records_no_host_argv(tmp_path: Path, environment: Environment) -> None:
    store = tmp_path / "r.db"
    with _run(store, environment, command_line=None) as run:
        run.add_document("x", {})
    with ResultStore(store) as opened:
        assert opened.get_run(str(run.run_id)).command == API_COMMAND_LINE


def test_default_report_path_is_beside_the_store(tmp_path: Path, environment: Environment) -> None:
    store = tmp_path / "deep" / "r.db"
    assert default_report_path("load", store, "abc") == tmp_path / "deep/reports/load-abc.html"
    assert default_report_path("plan", None, None).name == "plan-unsaved.html"
    with _run(store, environment) as run:
        pass
    path = run.write_report("<p>x</p>", None)
    assert path == tmp_path / "deep/reports/bench-unsaved.html" and path.read_text() == "<p>x</p>"
    given = tmp_path / "mine.html"
    assert run.write_report("<p>y</p>", given) == given


def test_paths_are_checked_before_any_work(tmp_path: Path) -> None:
    check_paths(tmp_path / "r.db", tmp_path / "report.html")
    with pytest.raises(BadInputError, match="is a directory"):
        check_paths(None, tmp_path)
    with pytest.raises(BadInputError, match="does not exist"):
        check_paths(None, tmp_path / "missing" / "report.html")
    if os.geteuid() != 0:  # root writes anywhere
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        with pytest.raises(BadInputError, match="not writable"):
            check_paths(None, locked / "report.html")
