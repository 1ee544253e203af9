"""``compare``: find the runs the user named, hand them to :mod:`accelscope.compare.analysis`.

A side is one reference or several separated by commas. A reference is a run id (or a unique
prefix), ``latest``, ``latest~N`` (the run N before the newest), a store file (its newest run)
or ``STORE:RUN``. Several runs per side make each run the statistical unit.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from accelscope.compare.analysis import Comparison, RunData, compare_runs
from accelscope.compare.metrics import comparable_kinds, observations
from accelscope.errors import BadInputError, StoreError
from accelscope.store.sqlite import DEFAULT_STORE_PATH, ResultStore, RunRecord

__all__ = ["CompareRequest", "compare", "resolve_side"]


@dataclass(frozen=True, kw_only=True)
class CompareRequest:
    """What ``accelscope compare`` should do (``threshold``: the ±band of "no change")."""

    baseline: str
    candidate: str
    threshold: float = 0.05
    confidence: float = 0.95
    allow_env_change: bool = False


def _split_reference(text: str, default_store: Path) -> tuple[Path, str]:
    head, sep, tail = text.rpartition(":")
    if sep and head and Path(head).is_file():
        return Path(head), tail or "latest"
    if Path(text).is_file():
        return Path(text), "latest"
    return default_store, text


def _get(store: ResultStore, run_id: str) -> RunRecord:
    if run_id.startswith("latest~"):
        back_text = run_id.removeprefix("latest~")
        if not re.fullmatch(r"[0-9]+", back_text):
            raise BadInputError(f"bad run reference {run_id!r}: use latest~N with N a number")
        back = int(back_text)
        runs = store.list_runs(back + 1)
        if len(runs) <= back:
            raise BadInputError(f"{run_id}: the store {store.path} holds only {len(runs)} run(s)")
        run_id = runs[back].id
    return store.get_run(run_id)


def resolve_side(
    text: str, default_store: Path = DEFAULT_STORE_PATH
) -> list[tuple[Path, RunRecord]]:
    """The runs one side names (comma-separated references), each with its results and the
    store it came from."""
    references = [part.strip() for part in text.split(",")]
    if not all(references):
        raise BadInputError(f"empty run reference in {text!r}")
    records: list[tuple[Path, RunRecord]] = []
    for reference in references:
        path, run_id = _split_reference(reference, default_store)
        if not path.exists():
            raise StoreError(f"no results store at {path}")
        with ResultStore(path) as store:
            records.append((path.resolve(), _get(store, run_id)))
    return records


def _run_data(record: RunRecord) -> RunData:
    configs = (
        tuple(observations(record.kind, record.results, record.documents))
        if record.kind in comparable_kinds()
        else ()
    )
    return RunData(run_id=record.id, kind=record.kind, model=record.model, configs=configs)


def compare(request: CompareRequest, *, store_path: Path = DEFAULT_STORE_PATH) -> Comparison:
    """Resolve both sides and compare them (nothing is measured or stored)."""
    baseline = resolve_side(request.baseline, store_path)
    candidate = resolve_side(request.candidate, store_path)
    ids = [(path, record.id) for path, record in baseline + candidate]
    if len(set(ids)) < len(ids):
        raise BadInputError("a run appears more than once; compare two different runs")
    return compare_runs(
        [_run_data(record) for _, record in baseline],
        [_run_data(record) for _, record in candidate],
        threshold=request.threshold,
        confidence=request.confidence,
        allow_env_change=request.allow_env_change,
    )
