"""The results store: one SQLite file (WAL), a run per command, each result committed at once.

Schema (``schema_version`` in ``meta``):
``runs(id, kind, model, command, created_at, finished_at, status, environment_json,
settings_json)``, ``results(id, run_id, spec_key, status, created_at, result_json)`` and
``documents(id, run_id, kind, created_at, payload_json)``. Every write is one transaction, so an
interrupted process leaves the store consistent: whole results or none.

The store's layout has its own version, :data:`STORE_SCHEMA_VERSION`, apart from the Result
JSON layout's (``accelscope.result.SCHEMA_VERSION``): the tables can change while the documents
in them do not, and the other way round (each stored result carries its own version). Opening
an older store upgrades it in place, all pending :data:`_MIGRATIONS` in one transaction; a newer
one is refused.
"""

from __future__ import annotations

import json
import os
import secrets
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from accelscope.errors import BadInputError, StoreError

if TYPE_CHECKING:  # imported where used: listing runs (and the CLI's start) needs neither
    from accelscope.hardware.fingerprint import Environment
    from accelscope.result import Result

__all__ = [
    "DEFAULT_STORE_PATH",
    "STORE_SCHEMA_VERSION",
    "ResultStore",
    "RunRecord",
    "check_store_path",
]

DEFAULT_STORE_PATH = Path(".accelscope") / "results.db"
"""Project-local default, relative to the current directory."""

_SCHEMA = """
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
"""The current layout, created whole in a new store."""


def _v1_to_v2(db: sqlite3.Connection) -> None:
    """``runs.settings_json`` and the ``documents`` table arrived while the version stayed 1, so
    a version-1 store may lack either (or both): add what is missing, keep every row."""
    columns = {row[1] for row in db.execute("PRAGMA table_info(runs)")}
    if "settings_json" not in columns:
        db.execute("ALTER TABLE runs ADD COLUMN settings_json TEXT NOT NULL DEFAULT '{}'")
    db.execute(
        "CREATE TABLE IF NOT EXISTS documents (id INTEGER PRIMARY KEY AUTOINCREMENT,"
        " run_id TEXT NOT NULL REFERENCES runs(id), kind TEXT NOT NULL,"
        " created_at TEXT NOT NULL, payload_json TEXT NOT NULL)"
    )
    db.execute("CREATE INDEX IF NOT EXISTS documents_by_run ON documents(run_id)")


_MIGRATIONS: tuple[Callable[[sqlite3.Connection], None], ...] = (_v1_to_v2,)
"""``_MIGRATIONS[n - 1]`` upgrades a version-``n`` store to ``n + 1``, in order. A migration is
self-contained (it never uses :data:`_SCHEMA`, which describes only the newest layout) and runs
inside the opening transaction. To change the layout: edit ``_SCHEMA`` and append one here."""

STORE_SCHEMA_VERSION = len(_MIGRATIONS) + 1
"""Version of the store's tables (``meta.schema_version``); 1 was the first, unversioned
growth included. Stores are upgraded to it on opening; a newer store is refused."""


@dataclass(frozen=True)
class RunRecord:
    """One command's run and (when loaded with them) its results, in insertion order."""

    id: str
    kind: str
    model: str
    command: str
    created_at: str
    finished_at: str | None
    status: str
    result_count: int
    results: tuple[Result, ...] = ()
    settings: dict[str, Any] = field(default_factory=dict)
    documents: tuple[Document, ...] = ()

    def documents_of(self, kind: str) -> list[dict[str, Any]]:
        """The payloads of this run's documents of ``kind``, in insertion order."""
        return [document.payload for document in self.documents if document.kind == kind]


@dataclass(frozen=True)
class Document:
    """An analysis result that is not one configuration's ``Result`` (a doctor diagnosis, a
    roofline profile, a load curve, a plan): a kind and a JSON-ready payload."""

    kind: str
    created_at: str
    payload: dict[str, Any]


def _new_run_id() -> str:
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    return f"{stamp}-{secrets.token_hex(2)}"


def check_store_path(path: Path | str) -> Path:
    """Validate a store path without creating or changing anything; return it as a Path.

    An existing file must be an accelscope store (checked read-only); a new path must lie under
    a writable directory (or under a directory that can be created there).
    """
    target = Path(path)
    if target.is_dir():
        raise StoreError(f"store path {target} is a directory; give a file path")
    if target.exists():
        try:
            uri = target.resolve().as_uri() + "?mode=ro"
            db = sqlite3.connect(uri, uri=True)
            try:
                rows = db.execute("SELECT name FROM sqlite_master WHERE type='table'").fetchall()
            finally:
                db.close()
        except sqlite3.Error as exc:
            raise StoreError(f"{target} is not an accelscope results store: {exc}") from exc
        if rows and "meta" not in {row[0] for row in rows}:
            raise StoreError(f"{target} is an SQLite file, but not an accelscope results store")
        if not os.access(target, os.W_OK):
            raise StoreError(f"results store {target} is not writable")
        return target
    ancestor = target.parent
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise StoreError(f"cannot create results store {target}: {ancestor} is not a directory")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise StoreError(f"cannot create results store {target}: {ancestor} is not writable")
    return target


class ResultStore:
    """An open results store. Use as a context manager or call :meth:`close`."""

    def __init__(self, path: Path | str = DEFAULT_STORE_PATH) -> None:
        self.path = Path(path)
        if self.path.is_dir():
            raise StoreError(f"store path {self.path} is a directory; give a file path")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, timeout=30.0, isolation_level=None)
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"cannot open results store {self.path}: {exc}") from exc
        try:
            self._check_is_ours()
            self._recorded_version()  # refuse a newer or garbled store before changing anything
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA foreign_keys=ON")
            self._init_schema()
        except StoreError:
            self._db.close()
            raise
        except sqlite3.DatabaseError as exc:
            self._db.close()
            raise StoreError(
                f"{self.path} is not an accelscope results store (or is not writable): {exc}"
            ) from exc

    def _tables(self) -> set[str]:
        rows = self._db.execute("SELECT name FROM sqlite_master WHERE type='table'")
        return {row[0] for row in rows}

    def _check_is_ours(self) -> None:
        """Refuse a foreign SQLite file before changing anything in it (even its journal mode)."""
        tables = self._tables()
        if tables and "meta" not in tables:
            self._db.close()
            raise StoreError(f"{self.path} is an SQLite file, but not an accelscope results store")

    def _recorded_version(self) -> int | None:
        """``meta.schema_version``, or ``None`` for a new (empty) store; a newer version than
        this accelscope knows, or one that is not a version at all, is refused."""
        if "meta" not in self._tables():
            return None
        row = self._db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        if row is None:
            return None
        try:
            version = int(row[0])
        except ValueError:
            version = 0
        if version < 1:
            raise StoreError(f"{self.path} has an unreadable schema version {row[0]!r}")
        if version > STORE_SCHEMA_VERSION:
            raise StoreError(
                f"{self.path} has schema version {version}, newer than this accelscope "
                f"({STORE_SCHEMA_VERSION}); upgrade accelscope"
            )
        return version

    def _init_schema(self) -> None:
        """Create a new store, or apply an older one's pending migrations in one transaction.
        A current store is only read here, so opening it writes nothing."""
        if self._recorded_version() == STORE_SCHEMA_VERSION:
            return
        with self._transaction():
            version = self._recorded_version()  # again, under the write lock: another process
            if version is None:  # may have created or upgraded the store meanwhile
                for statement in _SCHEMA.split(";"):
                    if statement.strip():
                        self._db.execute(statement)
                self._db.execute(
                    "INSERT INTO meta(key, value) VALUES ('schema_version', ?)",
                    (str(STORE_SCHEMA_VERSION),),
                )
                return
            for migrate in _MIGRATIONS[version - 1 :]:
                migrate(self._db)
            self._db.execute(
                "UPDATE meta SET value = ? WHERE key = 'schema_version'",
                (str(STORE_SCHEMA_VERSION),),
            )

    def _transaction(self) -> _Transaction:
        return _Transaction(self._db, self.path)

    @property
    def schema_version(self) -> int:
        """The store schema version recorded in the file (:data:`STORE_SCHEMA_VERSION` once
        opened)."""
        row = self._db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        return int(row[0])

    def start_run(
        self,
        kind: str,
        model: str,
        command: str,
        environment: Environment,
        settings: dict[str, Any] | None = None,
    ) -> str:
        """Record a new run (status ``running``) and return its id. ``settings`` (JSON-ready)
        holds what is needed to reproduce the run's verdict (SLA, accuracy rule, ...)."""
        from accelscope.result import utc_now
        from accelscope.serialise import dump

        run_id = _new_run_id()
        with self._transaction():
            self._db.execute(
                "INSERT INTO runs(id, kind, model, command, created_at, status, environment_json,"
                " settings_json) VALUES (?, ?, ?, ?, ?, 'running', ?, ?)",
                (
                    run_id,
                    kind,
                    model,
                    command,
                    utc_now(),
                    json.dumps(dump(environment)),
                    json.dumps(settings or {}),
                ),
            )
        return run_id

    def add_result(self, run_id: str, result: Result) -> int:
        """Commit one result to ``run_id`` now; returns its row id."""
        with self._transaction():
            cursor = self._db.execute(
                "INSERT INTO results(run_id, spec_key, status, created_at, result_json)"
                " VALUES (?, ?, ?, ?, ?)",
                (run_id, result.spec.key, result.status.value, result.created_at, result.to_json()),
            )
        return int(cursor.lastrowid or 0)

    def add_document(self, run_id: str, kind: str, payload: dict[str, Any]) -> int:
        """Commit one analysis document (JSON-ready ``payload``) to ``run_id`` now."""
        try:
            text = json.dumps(payload, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise StoreError(f"cannot store a {kind} document: {exc}") from exc
        from accelscope.result import utc_now

        with self._transaction():
            cursor = self._db.execute(
                "INSERT INTO documents(run_id, kind, created_at, payload_json) VALUES (?, ?, ?, ?)",
                (run_id, kind, utc_now(), text),
            )
        return int(cursor.lastrowid or 0)

    def finish_run(self, run_id: str, status: str) -> None:
        """Mark a run ``complete``, ``failed`` or ``interrupted``."""
        from accelscope.result import utc_now

        with self._transaction():
            self._db.execute(
                "UPDATE runs SET finished_at = ?, status = ? WHERE id = ?",
                (utc_now(), status, run_id),
            )

    def has_result(self, spec_key: str) -> bool:
        """True when a result for this RunSpec key exists (the ``--resume`` check)."""
        row = self._db.execute(
            "SELECT 1 FROM results WHERE spec_key = ? LIMIT 1", (spec_key,)
        ).fetchone()
        return row is not None

    def latest_unfinished_run(self, kind: str, model: str) -> str | None:
        """The newest run of ``kind`` for ``model`` that did not complete (for ``--resume``)."""
        row = self._db.execute(
            "SELECT id FROM runs WHERE kind = ? AND model = ? AND status != 'complete'"
            " ORDER BY created_at DESC LIMIT 1",
            (kind, model),
        ).fetchone()
        return None if row is None else str(row[0])

    def reopen_run(self, run_id: str) -> None:
        """Mark a run ``running`` again (it is being resumed)."""
        with self._transaction():
            self._db.execute(
                "UPDATE runs SET status = 'running', finished_at = NULL WHERE id = ?", (run_id,)
            )

    def list_runs(self, limit: int = 20) -> list[RunRecord]:
        """The most recent runs first, without their results."""
        if limit <= 0:
            raise BadInputError(f"limit must be positive, got {limit}")
        rows = self._db.execute(
            "SELECT r.id, r.kind, r.model, r.command, r.created_at, r.finished_at, r.status,"
            " (SELECT COUNT(*) FROM results s WHERE s.run_id = r.id)"
            " + (SELECT COUNT(*) FROM documents d WHERE d.run_id = r.id)"
            " FROM runs r ORDER BY r.created_at DESC LIMIT ?",
            (limit,),
        ).fetchall()
        return [RunRecord(*row) for row in rows]

    def get_run(self, run_id: str) -> RunRecord:
        """The run whose id is ``run_id`` or starts with it (unique prefix), with its results.

        ``latest`` names the most recent run.
        """
        if run_id == "latest":
            row = self._db.execute(
                "SELECT id FROM runs ORDER BY created_at DESC LIMIT 1"
            ).fetchone()
            if row is None:
                raise BadInputError(f"the store {self.path} holds no runs yet")
            run_id = row[0]
        matches = self._db.execute(
            "SELECT id FROM runs WHERE id LIKE ? ESCAPE '\\'",
            (run_id.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%",),
        ).fetchall()
        if not matches:
            raise BadInputError(f"no run {run_id!r} in {self.path} (see: accelscope runs list)")
        if len(matches) > 1:
            raise BadInputError(f"run id prefix {run_id!r} is ambiguous ({len(matches)} runs)")
        full_id = matches[0][0]
        head = self._db.execute(
            "SELECT id, kind, model, command, created_at, finished_at, status, settings_json"
            " FROM runs WHERE id = ?",
            (full_id,),
        ).fetchone()
        texts = self._db.execute(
            "SELECT result_json FROM results WHERE run_id = ? ORDER BY id", (full_id,)
        ).fetchall()
        from accelscope.result import Result

        results = tuple(Result.from_json(text) for (text,) in texts)
        document_rows = self._db.execute(
            "SELECT kind, created_at, payload_json FROM documents WHERE run_id = ? ORDER BY id",
            (full_id,),
        ).fetchall()
        documents = tuple(
            Document(kind=kind_, created_at=created, payload=json.loads(text))
            for kind_, created, text in document_rows
        )
        run_id_, kind, model, command, created_at, finished_at, status, settings = head
        return RunRecord(
            id=run_id_,
            kind=kind,
            model=model,
            command=command,
            created_at=created_at,
            finished_at=finished_at,
            status=status,
            result_count=len(results) + len(documents),
            results=results,
            settings=json.loads(settings),
            documents=documents,
        )

    def close(self) -> None:
        """Close the connection (the WAL is checkpointed by SQLite)."""
        self._db.close()

    def __enter__(self) -> ResultStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Transaction:
    """BEGIN IMMEDIATE ... COMMIT, ROLLBACK on any error; SQLite errors become StoreError."""

    def __init__(self, db: sqlite3.Connection, path: Path) -> None:
        self._db = db
        self._path = path

    def __enter__(self) -> None:
        try:
            self._db.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise StoreError(f"cannot write to results store {self._path}: {exc}") from exc

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            try:
                self._db.execute("COMMIT")
            except sqlite3.Error as error:
                self._db.execute("ROLLBACK")
                raise StoreError(f"cannot write to results store {self._path}: {error}") from error
            return
        self._db.execute("ROLLBACK")
        if isinstance(exc, sqlite3.Error):
            raise StoreError(f"cannot write to results store {self._path}: {exc}") from exc
