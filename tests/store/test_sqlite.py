"""Results store: lossless round trip, schema_version, WAL, per-result commits, bad paths."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest

from accelscope.errors import BadInputError, StoreError
from accelscope.hardware.fingerprint import Environment
from accelscope.result import Cause, Result, Status
from accelscope.store.export import CSV_COLUMNS, run_to_csv, run_to_json
from accelscope.store.sqlite import STORE_SCHEMA_VERSION, ResultStore
from accelscope.testing import fake_result


def test_result_round_trips_through_json(environment: Environment) -> None:
    result = fake_result(environment)
    again = Result.from_json(result.to_json())
    assert again == result
    assert again.measurement is not None and result.measurement is not None
    assert again.measurement.samples_s == result.measurement.samples_s  # bit-exact floats
    assert again.accuracy is not None and again.accuracy.metric_drop == pytest.approx(0.005)


def test_result_round_trips_through_the_store(tmp_path: Path, environment: Environment) -> None:
    result = fake_result(environment)
    with ResultStore(tmp_path / "r.db") as store:
        run_id = store.start_run("measure", "resnet50", "accelscope measure", environment)
        store.add_result(run_id, result)
        store.finish_run(run_id, "complete")
    with ResultStore(tmp_path / "r.db") as store:
        run = store.get_run(run_id)
        assert store.schema_version == STORE_SCHEMA_VERSION
    assert run.results == (result,)
    assert run.status == "complete" and run.result_count == 1


def test_a_cause_is_stored_by_its_name(environment: Environment) -> None:
    failed = replace(
        fake_result(environment),
        measurement=None,
        status=Status.FAILED,
        status_reason="out of memory at batch 8 (eager/bf16/b8/t2)",
        cause=Cause.OUT_OF_MEMORY,
    )
    stored = json.loads(failed.to_json())
    assert stored["cause"] == "out_of_memory"
    assert Result.from_json(failed.to_json()) == failed
    assert Result.from_dict({**stored, "cause": "melted"}).cause is Cause.UNKNOWN  # a newer one's
    assert json.loads(fake_result(environment).to_json())["cause"] is None


# (status, status_reason) as accelscope stored them before results carried their cause, and
# the cause each reads as.
OLD_REASONS = [
    ("failed", "out of memory (MemoryError)", Cause.OUT_OF_MEMORY),
    ("failed", "out of memory at batch 8 (eager/bf16/b8/t2)", Cause.OUT_OF_MEMORY),
    ("failed", "model m failed: RuntimeError: CUDA out of memory. Tried", Cause.OUT_OF_MEMORY),
    ("failed", "out of memory: Ray's memory monitor killed the task (X)", Cause.OUT_OF_MEMORY),
    ("failed", "timeout: no result after 900 s", Cause.TIMEOUT),
    ("failed", "crashed: killed by SIGSEGV", Cause.CRASHED),
    ("failed", "crashed: worker exited with code 1 and no result", Cause.CRASHED),
    ("failed", "node lost: its node died (NodeDiedError); no other node", Cause.NODE_LOST),
    ("failed", "node lost: timeout: no answer from its node after 1200 s", Cause.NODE_LOST),
    ("failed", "model m failed during measurement: ValueError: bad", Cause.UNKNOWN),
    ("skipped", "sweep budget ended before this configuration ran", Cause.BUDGET),
    ("skipped", "no node of its type is alive to measure it", Cause.NO_NODE),
    ("skipped", "skipped: batch 4 already ran out of memory", Cause.OUT_OF_MEMORY),
    ("skipped", "not available: onnxruntime is not installed", Cause.PRESCREEN),
    ("rejected", "top-1 agreement 90.00% below 99.00%", None),
    ("ok", "", None),
]


def _old_text(environment: Environment, status: str, reason: str) -> str:
    """A result as the code before causes wrote it: the same keys, without ``cause``."""
    data = json.loads(fake_result(environment).to_json())
    del data["cause"]
    data.update(status=status, status_reason=reason)
    return json.dumps(data, sort_keys=True)


@pytest.mark.parametrize(("status", "reason", "cause"), OLD_REASONS)
def test_a_result_stored_before_causes_reads_with_the_cause_its_reason_names(
    environment: Environment, status: str, reason: str, cause: Cause | None
) -> None:
    result = Result.from_json(_old_text(environment, status, reason))
    assert (result.status.value, result.status_reason, result.cause) == (status, reason, cause)


def test_old_rows_in_a_store_read_with_their_causes(
    tmp_path: Path, environment: Environment
) -> None:
    path = tmp_path / "r.db"
    with ResultStore(path) as store:
        run_id = store.start_run("bench", "resnet50", "accelscope bench", environment)
    db = sqlite3.connect(path)  # rows as an accelscope before causes inserted them
    for status, reason, _ in OLD_REASONS:
        db.execute(
            "INSERT INTO results(run_id, spec_key, status, created_at, result_json)"
            " VALUES (?, 'k', ?, '2026-01-01', ?)",
            (run_id, status, _old_text(environment, status, reason)),
        )
    db.commit()
    db.close()
    with ResultStore(path) as store:
        results = store.get_run(run_id).results
    assert [r.cause for r in results] == [cause for _, _, cause in OLD_REASONS]


def test_store_uses_wal_and_records_schema_version(tmp_path: Path) -> None:
    ResultStore(tmp_path / "r.db").close()
    db = sqlite3.connect(tmp_path / "r.db")
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    version = db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0]
    assert int(version) == STORE_SCHEMA_VERSION


def test_each_result_is_visible_to_another_reader_at_once(
    tmp_path: Path, environment: Environment
) -> None:
    path = tmp_path / "r.db"
    writer = ResultStore(path)
    run_id = writer.start_run("measure", "m", "cmd", environment)
    writer.add_result(run_id, fake_result(environment, batch=1))
    # a second connection (another process would see the same) sees the committed result
    reader = ResultStore(path)
    assert reader.get_run(run_id).result_count == 1
    writer.add_result(run_id, fake_result(environment, batch=2))
    assert reader.get_run(run_id).result_count == 2
    assert reader.has_result(fake_result(environment, batch=2).spec.key)
    assert not reader.has_result("0" * 16)
    writer.close()
    reader.close()


def test_runs_are_listed_newest_first_and_found_by_prefix(
    tmp_path: Path, environment: Environment
) -> None:
    with ResultStore(tmp_path / "r.db") as store:
        first = store.start_run("measure", "a", "cmd", environment)
        second = store.start_run("measure", "b", "cmd", environment)
        listed = [run.id for run in store.list_runs()]
        assert set(listed) == {first, second}
        assert store.get_run(second[:-1] if first[:-1] != second[:-1] else second).id == second
        assert store.get_run("latest").id == listed[0]
        with pytest.raises(BadInputError, match="no run"):
            store.get_run("19990101")


def test_failed_write_rolls_back(tmp_path: Path, environment: Environment) -> None:
    with ResultStore(tmp_path / "r.db") as store:
        with pytest.raises(StoreError):
            store.add_result("no-such-run", fake_result(environment))  # foreign key violation
        assert store.list_runs() == []


@pytest.mark.parametrize("kind", ["directory", "text", "foreign-sqlite", "under-a-file"])
def test_bad_store_paths_are_store_errors(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "store"
    if kind == "directory":
        path.mkdir()
    elif kind == "text":
        path.write_text("not a database at all, just text " * 100)
    elif kind == "foreign-sqlite":
        sqlite3.connect(path).execute("CREATE TABLE other (x)").connection.commit()
    else:
        (tmp_path / "afile").write_text("x")
        path = tmp_path / "afile" / "r.db"
    before = path.read_bytes() if path.is_file() else None
    with pytest.raises(StoreError):
        ResultStore(path)
    if before is not None:
        assert path.read_bytes() == before  # a foreign file is left exactly as it was


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    ResultStore(tmp_path / "r.db").close()
    db = sqlite3.connect(tmp_path / "r.db")
    db.execute("UPDATE meta SET value = '999' WHERE key = 'schema_version'")
    db.commit()
    with pytest.raises(StoreError, match="newer"):
        ResultStore(tmp_path / "r.db")


def test_csv_and_json_exports(tmp_path: Path, environment: Environment) -> None:
    with ResultStore(tmp_path / "r.db") as store:
        run_id = store.start_run("measure", "resnet50", "cmd", environment)
        store.add_result(run_id, fake_result(environment, batch=1))
        store.add_result(run_id, fake_result(environment, batch=8))
        run = store.get_run(run_id)
    lines = run_to_csv(run).splitlines()
    assert lines[0].split(",") == list(CSV_COLUMNS)
    assert len(lines) == 3
    assert ",bf16,8,2," in lines[2]
    document = json.loads(run_to_json(run))
    assert [Result.from_dict(r) for r in document["results"]] == list(run.results)


def test_documents_round_trip_with_their_run(tmp_path: Path, environment: Environment) -> None:
    with ResultStore(tmp_path / "r.db") as store:
        run_id = store.start_run("doctor", "train.py", "accelscope doctor train.py", environment)
        store.add_document(run_id, "diagnosis", {"bottleneck": "input", "share": 0.7})
        store.add_document(run_id, "trace", {"events": []})
        store.finish_run(run_id, "complete")
        run = store.get_run(run_id)
        listed = store.list_runs()
    assert run.documents_of("diagnosis") == [{"bottleneck": "input", "share": 0.7}]
    assert [d.kind for d in run.documents] == ["diagnosis", "trace"]
    assert listed[0].result_count == 2
    exported = json.loads(run_to_json(run))
    assert exported["documents"][0]["payload"]["bottleneck"] == "input"


def test_a_document_that_is_not_json_is_refused_and_nothing_is_written(
    tmp_path: Path, environment: Environment
) -> None:
    with ResultStore(tmp_path / "r.db") as store:
        run_id = store.start_run("load", "m", "accelscope load m", environment)
        with pytest.raises(StoreError):
            store.add_document(run_id, "curve", {"p99": float("nan")})
        assert store.get_run(run_id).documents == ()


def test_run_sink_creates_nothing_until_the_first_row(
    tmp_path: Path, environment: Environment
) -> None:
    from accelscope.store.sink import RunSink

    path = tmp_path / "r.db"
    sink = RunSink(
        path, "load", "m", environment, {"sla_p99_s": 0.1}, command_line="accelscope load m"
    )
    sink.finish("failed")  # nothing measured: no file, no empty run
    sink.close()
    assert not path.exists() and sink.run_id is None
    sink.add_document("trial", {"rate": 10.0})
    sink.add_document("capacity", {"capacity_qps": 9.0})
    sink.finish("complete")
    sink.close()
    with ResultStore(path) as store:
        run = store.get_run("latest")
    assert run.id == sink.run_id and run.status == "complete" and run.kind == "load"
    assert run.settings == {"sla_p99_s": 0.1} and run.command.startswith("accelscope")
    assert [d.kind for d in run.documents] == ["trial", "capacity"]
    nowhere = RunSink(None, "load", "m", environment, {}, command_line="accelscope load m")
    nowhere.add_document("trial", {"rate": 1.0})
    assert nowhere.run_id is None
