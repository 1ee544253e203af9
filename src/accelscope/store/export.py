"""Flat exports of stored results: CSV rows and JSON documents."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from accelscope.result import Result
from accelscope.serialise import dump
from accelscope.store.sqlite import RunRecord

__all__ = ["CSV_COLUMNS", "result_row", "run_to_csv", "run_to_json"]

CSV_COLUMNS = (
    "run_id",
    "model",
    "backend",
    "precision",
    "batch_size",
    "threads",
    "device",
    "status",
    "status_reason",
    "items_per_s",
    "latency_mean_s",
    "latency_p50_s",
    "latency_p90_s",
    "latency_p99_s",
    "latency_min_s",
    "latency_max_s",
    "latency_iqr_s",
    "median_ci_low_s",
    "median_ci_high_s",
    "samples",
    "stop_reason",
    "first_call_s",
    "prepare_s",
    "peak_rss_bytes",
    "metric_name",
    "metric_value",
    "rel_l2",
    "cpu_model",
    "created_at",
)


def result_row(run_id: str, result: Result) -> dict[str, Any]:
    """One flat row (CSV columns) for a result; missing values are empty."""
    spec = result.spec
    row: dict[str, Any] = dict.fromkeys(CSV_COLUMNS, "")
    row.update(
        run_id=run_id,
        model=spec.model,
        backend=spec.backend,
        precision=spec.precision.value,
        batch_size=spec.batch_size,
        threads=spec.threads,
        device=spec.device.value,
        status=result.status.value,
        status_reason=result.status_reason,
        prepare_s=result.prepare_s if result.prepare_s is not None else "",
        cpu_model=result.environment.cpu.model_name,
        created_at=result.created_at,
    )
    measurement = result.measurement
    if measurement is not None:
        summary = measurement.summary
        row.update(
            items_per_s=measurement.throughput_items_per_s,
            latency_mean_s=summary.mean_s,
            latency_p50_s=summary.p50_s,
            latency_p90_s=summary.p90_s,
            latency_p99_s=summary.p99_s,
            latency_min_s=summary.min_s,
            latency_max_s=summary.max_s,
            latency_iqr_s=summary.iqr_s,
            median_ci_low_s=summary.median_ci_low_s,
            median_ci_high_s=summary.median_ci_high_s,
            samples=summary.count,
            stop_reason=measurement.stop_reason.value,
            first_call_s=measurement.first_call_s,
        )
    if result.memory is not None:
        row["peak_rss_bytes"] = result.memory.rss_peak_bytes
    accuracy = result.accuracy
    if accuracy is not None:
        row["metric_name"] = accuracy.metric_name or ""
        row["metric_value"] = "" if accuracy.metric_value is None else accuracy.metric_value
        if accuracy.fidelity is not None:
            row["rel_l2"] = accuracy.fidelity.rel_l2
    return row


def run_to_csv(run: RunRecord) -> str:
    """CSV text, one row per result of ``run``."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CSV_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for result in run.results:
        writer.writerow(result_row(run.id, result))
    return buffer.getvalue()


def run_to_json(run: RunRecord) -> str:
    """JSON text: the run's fields and its full results (raw samples included)."""
    document = {
        "id": run.id,
        "kind": run.kind,
        "model": run.model,
        "command": run.command,
        "created_at": run.created_at,
        "finished_at": run.finished_at,
        "status": run.status,
        "settings": run.settings,
        "results": [dump(result) for result in run.results],
        "documents": [
            {"kind": d.kind, "created_at": d.created_at, "payload": d.payload}
            for d in run.documents
        ],
    }
    return json.dumps(document, indent=2, sort_keys=True)
