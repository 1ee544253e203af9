"""Results store: SQLite (WAL, schema_version), run listing, CSV/JSON export.

Each name is imported from its module on first use (PEP 562), so the store's path
(``store.sqlite.DEFAULT_STORE_PATH``) costs no import of the result layer.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from accelscope.store.export import CSV_COLUMNS, result_row, run_to_csv, run_to_json
    from accelscope.store.sqlite import DEFAULT_STORE_PATH, Document, ResultStore, RunRecord

_MODULES: dict[str, str] = {
    "CSV_COLUMNS": "export",
    "result_row": "export",
    "run_to_csv": "export",
    "run_to_json": "export",
    "DEFAULT_STORE_PATH": "sqlite",
    "Document": "sqlite",
    "ResultStore": "sqlite",
    "RunRecord": "sqlite",
}

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


def __getattr__(name: str) -> Any:
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
