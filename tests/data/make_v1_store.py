"""How the version-1 store fixtures in this folder were made (rerun only to remake them).

Store schema version 1 grew twice without a version bump, so a store that says version 1 comes
in one of these layouts. Each fixture is written here with the CREATE statements of the code
that wrote that layout (copied verbatim from ``src/accelscope/store/sqlite.py`` at the commit
named), never with today's ``ResultStore``, and rows built from real objects (``Result``,
``Confirmation``, simulated load trials) serialized as that code stored them:

``store-v1.sqlite``
    The first layout (commit 8f35dca^): ``runs`` without ``settings_json``, no ``documents``
    table. That code only had ``measure``, so: one complete measure run with 2 results and an
    interrupted one with 1 result.
``store-v1-documents.sqlite``
    The last version-1 layout (commit 81883af, ``settings_json`` and ``documents`` present):
    a bench run with 2 results, its settings and a ``confirmation`` document, and a load run
    with its settings and ``load-summary``, ``load-trial`` and ``capacity`` documents.

Run from the repository root: ``.venv/bin/python tests/data/make_v1_store.py``. Timestamps and
run ids are fixed, so only library versions can change the bytes.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import replace
from pathlib import Path

from accelscope.commands.load.workflow import capacity_document, summary_document
from accelscope.hardware.fingerprint import Environment
from accelscope.load.batcher import BatchPolicy
from accelscope.load.capacity_search import CapacitySearch, PolicyCapacity
from accelscope.load.clock import SimClock
from accelscope.load.executor import SimulatedExecutor
from accelscope.load.fakes import BatchLinearService
from accelscope.load.scenarios import run_server
from accelscope.load.summary import Scenario, TrialSettings
from accelscope.result import Result
from accelscope.serialise import dump
from accelscope.spec import Precision, RunSpec
from accelscope.sweep.confirm import Comparison, Confirmation
from accelscope.testing import fake_result, fixed_environment

HERE = Path(__file__).resolve().parent

# src/accelscope/store/sqlite.py at 8f35dca^ (the first layout)
SCHEMA_FIRST = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    model TEXT NOT NULL,
    command TEXT NOT NULL,
    created_at TEXT NOT NULL,
    finished_at TEXT,
    status TEXT NOT NULL,
    environment_json TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS results (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL REFERENCES runs(id),
    spec_key TEXT NOT NULL,
    status TEXT NOT NULL,
    created_at TEXT NOT NULL,
    result_json TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS results_by_run ON results(run_id);
CREATE INDEX IF NOT EXISTS results_by_spec ON results(spec_key);
"""

# src/accelscope/store/sqlite.py at 81883af (the last version-1 layout)
SCHEMA_LAST = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    model TEXT NOT NULL,
    command TEXT NOT NULL,
    created_at TEXT NOT NULL,
    finished_at TEXT,
    status TEXT NOT NULL,
    environment_json TEXT NOT NULL,
    settings_json TEXT NOT NULL DEFAULT '{}'
);
CREATE TABLE IF NOT EXISTS results (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL REFERENCES runs(id),
    spec_key TEXT NOT NULL,
    status TEXT NOT NULL,
    created_at TEXT NOT NULL,
    result_json TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS results_by_run ON results(run_id);
CREATE INDEX IF NOT EXISTS results_by_spec ON results(spec_key);
CREATE TABLE IF NOT EXISTS documents (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL REFERENCES runs(id),
    kind TEXT NOT NULL,
    created_at TEXT NOT NULL,
    payload_json TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS documents_by_run ON documents(run_id);
"""

DAY = "2026-11-20T22:"


def _result(env: Environment, batch: int, minute: int) -> Result:
    result: Result = fake_result(env, batch=batch)
    return replace(result, created_at=f"{DAY}{minute:02d}:00+00:00")


def _create(path: Path, schema: str) -> sqlite3.Connection:
    path.unlink(missing_ok=True)
    db = sqlite3.connect(path)
    db.execute("PRAGMA page_size = 1024")  # a smaller file; the layout is the same
    db.executescript(schema)
    db.execute("INSERT INTO meta(key, value) VALUES ('schema_version', '1')")
    return db


def _run(db: sqlite3.Connection, row: dict[str, object]) -> None:
    columns = ", ".join(row)
    marks = ", ".join("?" for _ in row)
    db.execute(f"INSERT INTO runs({columns}) VALUES ({marks})", tuple(row.values()))


def _add_result(db: sqlite3.Connection, run_id: str, result: Result) -> None:
    db.execute(
        "INSERT INTO results(run_id, spec_key, status, created_at, result_json)"
        " VALUES (?, ?, ?, ?, ?)",
        (run_id, result.spec.key, result.status.value, result.created_at, result.to_json()),
    )


def _add_document(
    db: sqlite3.Connection, run_id: str, kind: str, minute: int, payload: object
) -> None:
    db.execute(
        "INSERT INTO documents(run_id, kind, created_at, payload_json) VALUES (?, ?, ?, ?)",
        (run_id, kind, f"{DAY}{minute:02d}:30+00:00", json.dumps(payload, allow_nan=False)),
    )


def _finish(db: sqlite3.Connection, path: Path) -> None:
    db.commit()
    db.execute("VACUUM")
    db.close()
    print(f"wrote {path} ({path.stat().st_size} bytes)")


def make_first(path: Path, env: Environment) -> None:
    db = _create(path, SCHEMA_FIRST)
    environment_json = json.dumps(dump(env))
    runs = (
        ("20261120-220000-a1b2", "complete", "accelscope measure resnet50 --batch 1,8", (1, 8)),
        ("20261120-221000-c3d4", "interrupted", "accelscope measure resnet50 --batch 4", (4,)),
    )
    for number, (run_id, status, command, batches) in enumerate(runs):
        start = number * 10
        _run(
            db,
            {
                "id": run_id,
                "kind": "measure",
                "model": "resnet50",
                "command": command,
                "created_at": f"{DAY}{start:02d}:00+00:00",
                "finished_at": f"{DAY}{start + 5:02d}:00+00:00",
                "status": status,
                "environment_json": environment_json,
            },
        )
        for offset, batch in enumerate(batches):
            _add_result(db, run_id, _result(env, batch, start + 1 + offset))
    _finish(db, path)


def make_last(path: Path, env: Environment) -> None:
    db = _create(path, SCHEMA_LAST)
    environment_json = json.dumps(dump(env))
    bench_id, load_id = "20261120-223000-e5f6", "20261120-224000-a7b8"
    _run(
        db,
        {
            "id": bench_id,
            "kind": "bench",
            "model": "resnet50",
            "command": "accelscope bench resnet50 --batch 1,8",
            "created_at": f"{DAY}30:00+00:00",
            "finished_at": f"{DAY}35:00+00:00",
            "status": "complete",
            "environment_json": environment_json,
            "settings_json": json.dumps(
                {"sla_p99_s": None, "max_accuracy_drop": 0.01, "strategy": "grid"}
            ),
        },
    )
    small, large = _result(env, 1, 31), _result(env, 8, 32)
    _add_result(db, bench_id, small)
    _add_result(db, bench_id, large)
    lead = Comparison(
        candidate_key=large.spec.key,
        reference_key=small.spec.key,
        ratio=1.25,
        low=1.1,
        high=1.4,
        rounds=6,
    )
    confirmation = Confirmation(
        best_key=large.spec.key,
        baseline_key=None,
        runner_up_key=small.spec.key,
        lead=lead,
        block_s_per_item={large.spec.key: [0.01, 0.011], small.spec.key: [0.0125, 0.0135]},
    )
    _add_document(db, bench_id, "confirmation", 33, dump(confirmation))

    spec = RunSpec(
        model="resnet50", backend="eager", precision=Precision.FP32, batch_size=8, threads=1
    )
    settings = TrialSettings(min_queries=64, min_duration_s=0.2, seed=1, query_timeout_s=1.0)
    executor = SimulatedExecutor(BatchLinearService(0.004, 0.001), SimClock())
    policy = BatchPolicy(8, 0.005)
    trials = [run_server(executor, rate, policy, settings, 0.05) for rate in (80.0, 300.0)]
    search = CapacitySearch(
        (PolicyCapacity(policy=policy, capacity_qps=80.0, ceiling_qps=400.0, trials=tuple(trials)),)
    )
    _run(
        db,
        {
            "id": load_id,
            "kind": "load",
            "model": "resnet50",
            "command": "accelscope load resnet50 --sla-p99 50ms",
            "created_at": f"{DAY}40:00+00:00",
            "finished_at": f"{DAY}45:00+00:00",
            "status": "complete",
            "environment_json": environment_json,
            "settings_json": json.dumps(
                {
                    "scenario": "server",
                    "sla_p99_s": 0.05,
                    "rate_per_s": None,
                    "batching": True,
                    "min_duration_s": 0.2,
                    "min_queries": 64,
                    "seed": 1,
                    "burstiness_cv": 1.0,
                    "from_run": None,
                    "spec": spec.to_dict(),
                }
            ),
        },
    )
    _add_document(db, load_id, "load-summary", 41, summary_document(Scenario.SERVER, spec, None))
    for number, trial in enumerate(trials):
        _add_document(db, load_id, "load-trial", 42 + number, trial.to_dict())
    capacity = capacity_document("resnet50", spec, 0.05, env, trials, search)
    _add_document(db, load_id, "capacity", 44, capacity)
    _finish(db, path)


def main() -> None:
    env = fixed_environment()  # the tests' fixed environment (their `environment` fixture)
    make_first(HERE / "store-v1.sqlite", env)
    make_last(HERE / "store-v1-documents.sqlite", env)


if __name__ == "__main__":
    main()
