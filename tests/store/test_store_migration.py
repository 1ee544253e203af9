"""Store schema migrations: version-1 stores (tests/data, see make_v1_store.py) are upgraded in
place, in one transaction, and read back as written; newer or foreign files are refused with one
line through the CLI; RunSink stores the command line it is given, not ``sys.argv``.

Covers: accelscope.store.sqlite, accelscope.store.sink, accelscope.cli._runs."""

from __future__ import annotations

import json
import shutil
import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest

from accelscope.errors import StoreError
from accelscope.hardware.fingerprint import Environment
from accelscope.result import Result
from accelscope.store import sqlite as store_sqlite
from accelscope.store.sink import RunSink
from accelscope.store.sqlite import STORE_SCHEMA_VERSION, ResultStore
from accelscope.testing import CliRunner, assert_one_line_error

DATA = Path(__file__).resolve().parent.parent / "data"
FIRST = "store-v1.sqlite"  # runs without settings_json, no documents table
LAST = "store-v1-documents.sqlite"  # settings_json and documents, still version 1


def _copy(tmp_path: Path, name: str) -> Path:
    target = tmp_path / name
    shutil.copyfile(DATA / name, target)
    return target


def _raw(path: Path) -> dict[str, dict[str, Any]]:
    """Every run as stored, straight from SQLite: its row, result texts and documents."""
    db = sqlite3.connect(path)
    db.row_factory = sqlite3.Row
    try:
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master")}
        runs: dict[str, dict[str, Any]] = {}
        for row in db.execute("SELECT * FROM runs"):
            run = dict(row)
            run["results"] = [
                text
                for (text,) in db.execute(
                    "SELECT result_json FROM results WHERE run_id = ? ORDER BY id", (row["id"],)
                )
            ]
            run["documents"] = (
                [
                    (kind, json.loads(text))
                    for kind, text in db.execute(
                        "SELECT kind, payload_json FROM documents WHERE run_id = ? ORDER BY id",
                        (row["id"],),
                    )
                ]
                if "documents" in tables
                else []
            )
            runs[run["id"]] = run
        return runs
    finally:
        db.close()


def _layout(path: Path) -> dict[str, Any]:
    """Tables' columns (name, type, not null, default, pk) and index columns, by name."""
    db = sqlite3.connect(path)
    try:
        names = db.execute(
            "SELECT type, name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' ORDER BY name"
        ).fetchall()
        layout: dict[str, Any] = {}
        for kind, name in names:
            pragma = "table_info" if kind == "table" else "index_info"
            layout[name] = [tuple(row[1:]) for row in db.execute(f"PRAGMA {pragma}({name})")]
        return layout
    finally:
        db.close()


def _meta_version(path: Path) -> str:
    db = sqlite3.connect(path)
    try:
        return str(db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0])
    finally:
        db.close()


def test_the_store_version_is_the_migration_count_plus_one() -> None:
    assert STORE_SCHEMA_VERSION == len(store_sqlite._MIGRATIONS) + 1 == 2


@pytest.mark.parametrize("name", [FIRST, LAST])
def test_a_version_1_store_is_upgraded_to_the_current_layout(tmp_path: Path, name: str) -> None:
    path = _copy(tmp_path, name)
    assert _meta_version(path) == "1"
    ResultStore(path).close()
    assert _meta_version(path) == str(STORE_SCHEMA_VERSION)
    fresh = tmp_path / "fresh.sqlite"
    ResultStore(fresh).close()
    assert _layout(path) == _layout(fresh)  # migrated = created new, column for column
    with ResultStore(path) as store:  # reopening an upgraded store changes nothing
        assert store.schema_version == STORE_SCHEMA_VERSION


def test_the_first_layout_reads_back_as_written_with_empty_settings(tmp_path: Path) -> None:
    path = _copy(tmp_path, FIRST)
    before = _raw(path)
    assert "settings_json" not in next(iter(before.values()))
    with ResultStore(path) as store:
        listed = store.list_runs()
        runs = {run.id: store.get_run(run.id) for run in listed}
    after = _raw(path)
    assert {run_id: run["settings_json"] for run_id, run in after.items()} == dict.fromkeys(
        before, "{}"
    )
    assert set(runs) == set(before) == {"20261120-220000-a1b2", "20261120-221000-c3d4"}
    for run_id, run in runs.items():
        row = before[run_id]
        assert (run.kind, run.model, run.command, run.status) == (
            row["kind"],
            row["model"],
            row["command"],
            row["status"],
        )
        assert (run.created_at, run.finished_at) == (row["created_at"], row["finished_at"])
        assert run.results == tuple(Result.from_json(text) for text in row["results"])
        assert run.settings == {} and run.documents == ()
        assert run.result_count == len(row["results"])
    assert [r.spec.batch_size for r in runs["20261120-220000-a1b2"].results] == [1, 8]
    assert runs["20261120-221000-c3d4"].status == "interrupted"
    assert {r.id: r.result_count for r in listed} == {
        "20261120-220000-a1b2": 2,
        "20261120-221000-c3d4": 1,
    }


def test_the_last_layout_keeps_its_settings_and_documents(tmp_path: Path) -> None:
    path = _copy(tmp_path, LAST)
    before = _raw(path)
    with ResultStore(path) as store:
        runs = {run_id: store.get_run(run_id) for run_id in before}
    for run_id, run in runs.items():
        row = before[run_id]
        assert run.command == row["command"] and run.status == row["status"]
        assert run.settings == json.loads(row["settings_json"])
        assert run.results == tuple(Result.from_json(text) for text in row["results"])
        assert [(d.kind, d.payload) for d in run.documents] == row["documents"]
    bench, load = runs["20261120-223000-e5f6"], runs["20261120-224000-a7b8"]
    assert bench.kind == "bench" and len(bench.results) == 2
    assert [d.kind for d in bench.documents] == ["confirmation"]
    assert bench.settings["max_accuracy_drop"] == 0.01
    assert load.kind == "load" and load.results == ()
    assert [d.kind for d in load.documents] == [
        "load-summary",
        "load-trial",
        "load-trial",
        "capacity",
    ]
    assert load.settings["sla_p99_s"] == 0.05


def test_a_failed_upgrade_leaves_the_store_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _copy(tmp_path, FIRST)
    layout = _layout(path)

    def half_then_fail(db: sqlite3.Connection) -> None:
        store_sqlite._v1_to_v2(db)  # the column is added, then the step fails
        db.execute("SELECT * FROM no_such_table")

    monkeypatch.setattr(store_sqlite, "_MIGRATIONS", (half_then_fail,))
    with pytest.raises(StoreError, match="cannot write"):
        ResultStore(path)
    assert _layout(path) == layout and _meta_version(path) == "1"
    monkeypatch.undo()
    with ResultStore(path) as store:  # and the real upgrade then goes through
        assert store.get_run("20261120-220000-a1b2").settings == {}


@pytest.mark.parametrize("name", [FIRST, LAST])
def test_runs_list_and_show_render_an_old_store(tmp_path: Path, cli: CliRunner, name: str) -> None:
    path = str(_copy(tmp_path, name))
    before = {run_id: run.get("settings_json", "{}") for run_id, run in _raw(Path(path)).items()}
    run_ids = list(before)
    code, out, err = cli("runs", "list", "--store", path)
    assert code == 0, err
    code, out, err = cli("runs", "list", "--store", path, "--json")
    assert code == 0, err
    assert {run["id"] for run in json.loads(out)} == set(run_ids)
    for run_id in run_ids:
        code, out, err = cli("runs", "show", run_id, "--store", path)
        assert code == 0, err
        assert run_id in out and "Traceback" not in err
        code, out, err = cli("runs", "show", run_id, "--store", path, "--json")
        assert code == 0, err
        shown = json.loads(out)
        assert shown["id"] == run_id and shown["settings"] == json.loads(before[run_id])


def test_a_newer_store_is_refused_with_one_line(tmp_path: Path, cli: CliRunner) -> None:
    path = tmp_path / "r.db"
    ResultStore(path).close()
    db = sqlite3.connect(path)
    db.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(99),))
    db.commit()
    db.close()
    layout = _layout(path)
    for args in (["runs", "list"], ["runs", "show", "latest"]):
        code, _, err = cli(*args, "--store", str(path))
        assert_one_line_error(code, err, "newer than this accelscope")
    assert _layout(path) == layout and _meta_version(path) == "99"


@pytest.mark.parametrize("kind", ["garbage", "foreign-sqlite", "bad-version"])
def test_a_file_that_is_not_a_store_is_refused_with_one_line(
    tmp_path: Path, cli: CliRunner, kind: str
) -> None:
    path = tmp_path / "r.db"
    if kind == "garbage":
        path.write_bytes(bytes(range(256)) * 64)
        mention = "not an accelscope results store"
    elif kind == "foreign-sqlite":
        db = sqlite3.connect(path)
        db.execute("CREATE TABLE other (x)")
        db.commit()
        db.close()
        mention = "not an accelscope results store"
    else:
        db = sqlite3.connect(path)
        db.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        db.execute("INSERT INTO meta VALUES ('schema_version', 'soon')")
        db.commit()
        db.close()
        mention = "unreadable schema version"
    before = path.read_bytes()
    code, _, err = cli("runs", "list", "--store", str(path))
    assert_one_line_error(code, err, mention)
    assert path.read_bytes() == before


def test_run_sink_records_exactly_the_command_line_it_is_given(
    tmp_path: Path, environment: Environment, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "argv", ["host_script.py", "--host-flag"])
    given = "accelscope load m --sla-p99 '50 ms'"
    path = tmp_path / "r.db"
    sink = RunSink(path, "load", "m", environment, {}, command_line=given)
    sink.add_document("trial", {"rate": 1.0})
    sink.finish("complete")
    sink.close()
    with ResultStore(path) as store:
        assert store.get_run("latest").command == given
    with pytest.raises(TypeError):
        RunSink(path, "load", "m", environment, {}, given)  # type: ignore[call-arg]
