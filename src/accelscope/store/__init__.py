"""Results store: SQLite (WAL, schema_version), run listing, CSV/JSON export."""

from accelscope.store.export import CSV_COLUMNS, result_row, run_to_csv, run_to_json
from accelscope.store.sqlite import DEFAULT_STORE_PATH, Document, ResultStore, RunRecord

__all__ = [
    "CSV_COLUMNS",
    "DEFAULT_STORE_PATH",
    "Document",
    "ResultStore",
    "RunRecord",
    "result_row",
    "run_to_csv",
    "run_to_json",
]
