"""``accelscope audit``: read a fleet's telemetry (a Prometheus server over HTTP, or the JSON a
``query_range`` returned, exported to a file), compute busy vs useful GPU-hours, what the waste
costs and what to do, store the document. Returns data; never prints.

Both sources go through the same parser and analysis, so the same data gives the same numbers.
From Prometheus, one range query per 11,000-point chunk fetches every dcgm-exporter and
node-exporter series the audit reads (``step`` chosen so a 7-day window is one query at 60 s,
and stated in the output).
"""

from __future__ import annotations

import base64
import http.client
import json
import math
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from accelscope.audit.analysis import fleet_figures
from accelscope.audit.cost import GpuPrice, OnPremCost, actions, gpu_price
from accelscope.audit.document import audit_document
from accelscope.audit.fields import FIELDS
from accelscope.audit.local import sample_here
from accelscope.audit.telemetry import (
    Grid,
    Series,
    build_devices,
    cpu_nodes,
    gpu_requests,
    merge_series,
    parse_export_text,
    parse_query_range,
    query_range_answer,
)
from accelscope.commands._lifecycle import CommandRun, check_paths
from accelscope.commands.audit.html import render_audit_report
from accelscope.errors import BadInputError
from accelscope.hardware.fingerprint import Environment, collect_environment
from accelscope.plan.catalog import load_catalog
from accelscope.store.sqlite import DEFAULT_STORE_PATH

__all__ = [
    "MAX_POINTS",
    "STEPS_S",
    "AuditOutcome",
    "AuditRequest",
    "audit",
    "default_step",
    "query_selectors",
]

RUN_KIND = "audit"
DOCUMENT_KIND = "audit"
MAX_POINTS = 11_000
"""Prometheus refuses a range query of more than 11,000 points per series."""
MAX_EXPORT_BYTES = 4 * 1024**3
HTTP_TIMEOUT_S = 120.0


@dataclass(frozen=True, kw_only=True)
class AuditRequest:
    """Where the telemetry comes from, the window, and how to price it."""

    export: Path | None = None
    prometheus: str | None = None
    since_s: float | None = None
    """Window length, ending at ``until_s`` (Prometheus: now; an export: its last sample).
    ``None``: 7 days from Prometheus, the whole export."""
    until_s: float | None = None
    step_s: float | None = None
    prices: tuple[tuple[str, float], ...] = ()
    catalog_files: tuple[Path, ...] = ()
    user: str | None = None
    password: str | None = None
    token: str | None = None
    save_export: Path | None = None
    """Write what Prometheus answered here (``audit --from`` reads it back: same numbers)."""
    report_path: Path | None = None
    sample_s: float | None = None
    """Sample this host for this long instead (NVML GPUs, psutil CPUs)."""
    onprem: OnPremCost | None = None
    """Price GPUs you own (capex over life, ops, measured energy) instead of the catalog."""
    gpus: tuple[int, ...] | None = None
    """With ``sample_s``: the NVML indices (nvidia-smi's numbering) to sample; default all."""

    def settings(self) -> dict[str, Any]:
        """What the audit depends on, stored with the run (no credentials)."""
        return {
            "source": str(self.export) if self.export else self.prometheus,
            "since_s": self.since_s,
            "until_s": self.until_s,
            "step_s": self.step_s,
            "prices": dict(self.prices),
            "gpus": list(self.gpus) if self.gpus is not None else None,
        }


@dataclass(frozen=True)
class AuditOutcome:
    """The audit document and where it was stored."""

    document: dict[str, Any]
    run_id: str | None
    store_path: Path | None
    report_path: Path | None = None


def query_selectors() -> tuple[str, ...]:
    """The PromQL selectors of every series the audit reads, one per field, so no query holds
    more than one field's samples (Prometheus refuses a query over ``--query.max-samples``):
    node-exporter's idle CPU time only, and kube-state-metrics' GPU requests only."""
    selectors = []
    for f in FIELDS:
        names = "|".join(sorted(f.aliases))
        if f.name == "cpu_seconds":
            selectors.append(f'{{__name__=~"{names}",mode="idle"}}')
        elif f.name == "gpu_requests":
            selectors.append(f'{{__name__=~"{names}",resource=~"nvidia_com_.*"}}')
        else:
            selectors.append(f'{{__name__=~"{names}"}}')
    return tuple(selectors)


STEPS_S = (60, 120, 180, 240, 300, 360, 600, 720, 900, 1200, 1800, 3600)
"""Query steps that divide an hour (the report's hourly heat map stays exact)."""


def default_step(since_s: float) -> float:
    """The finest step of :data:`STEPS_S` that keeps a window in one 11,000-point query, or in
    as few as the coarsest step needs."""
    for step in STEPS_S:
        if since_s / step <= MAX_POINTS:
            return float(step)
    return float(STEPS_S[-1])


def _validate(request: AuditRequest) -> None:
    given = [x for x in (request.export, request.prometheus, request.sample_s) if x is not None]
    if len(given) != 1:
        raise BadInputError(
            "give one source of telemetry: --from EXPORT.json, --prometheus URL or --sample 10m"
        )
    if request.gpus is not None:
        if request.sample_s is None:
            raise BadInputError("--gpus needs --sample (it picks this host's GPUs to sample)")
        if not request.gpus or any(i < 0 for i in request.gpus):
            raise BadInputError("--gpus: give GPU indices as nvidia-smi numbers them, e.g. 0,2")
    if request.sample_s is not None and not (
        math.isfinite(request.sample_s) and request.sample_s > 0
    ):
        raise BadInputError("--sample must be a positive duration")
    for value, flag in ((request.since_s, "--since"), (request.step_s, "--step")):
        if value is not None and not (math.isfinite(value) and value > 0):
            raise BadInputError(f"{flag} must be a positive duration")
    for model, price in request.prices:
        if not (math.isfinite(price) and price > 0):
            raise BadInputError(f"--price {model}: the price must be a positive $ per GPU-hour")
    if request.save_export is not None:
        if request.prometheus is None:
            raise BadInputError(
                "--save-export needs --prometheus (it saves what Prometheus answered)"
            )
        if not request.save_export.parent.is_dir():
            raise BadInputError(
                f"--save-export: directory {request.save_export.parent} does not exist"
            )
    if request.prometheus is not None:
        try:
            parsed = urllib.parse.urlparse(request.prometheus)
            port_ok = parsed.port is None or parsed.port > 0
        except ValueError as exc:
            raise BadInputError(f"--prometheus {request.prometheus!r}: {exc}") from exc
        if not port_ok or parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise BadInputError(f"--prometheus {request.prometheus!r}: give http(s)://HOST:PORT")


def _read_export(path: Path) -> tuple[list[Series], dict[str, int]]:
    if not path.is_file():
        raise BadInputError(f"export file {path} does not exist")
    if path.stat().st_size > MAX_EXPORT_BYTES:
        raise BadInputError(f"export file {path} is over {MAX_EXPORT_BYTES / 1024**3:.0f} GiB")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise BadInputError(f"export file {path} is not JSON: {exc}") from exc
    return parse_export_text(text, f"export file {path}")


def _native_step(series: list[Series]) -> float:
    steps = [np.median(np.diff(np.sort(s.times_s))) for s in series if s.times_s.size > 1]
    return float(np.median(steps)) if steps else 60.0


def _window(series: list[Series], request: AuditRequest, step: float) -> Grid:
    times = [s.times_s for s in series if s.times_s.size]
    if not times:
        raise BadInputError("no samples of any series the audit reads (DCGM or node-exporter)")
    last = max(float(t.max()) for t in times) + step
    first = min(float(t.min()) for t in times)
    end = request.until_s if request.until_s is not None else last
    start = end - request.since_s if request.since_s is not None else first
    return Grid(start, end, step)


def _fetch(url: str, request: AuditRequest) -> Any:
    call = urllib.request.Request(url)
    if request.token:  # never forwarded to where a redirect points
        call.add_unredirected_header("Authorization", f"Bearer {request.token}")
    elif request.user:
        pair = f"{request.user}:{request.password or ''}".encode()
        call.add_unredirected_header("Authorization", "Basic " + base64.b64encode(pair).decode())
    base = request.prometheus
    try:
        with urllib.request.urlopen(call, timeout=HTTP_TIMEOUT_S) as answer:
            body = answer.read()
    except urllib.error.HTTPError as exc:
        if exc.code in (401, 403):
            raise BadInputError(
                f"Prometheus at {base} refused the credentials (HTTP {exc.code}): give "
                "--prometheus-token, or --prometheus-user with ACCELSCOPE_PROMETHEUS_PASSWORD"
            ) from exc
        detail = exc.read()[:2000].decode("utf-8", "replace")
        try:
            message = json.loads(detail).get("error", detail)
        except json.JSONDecodeError:
            message = detail.strip().splitlines()[0] if detail.strip() else exc.reason
        raise BadInputError(f"Prometheus at {base} answered HTTP {exc.code}: {message}") from exc
    except (urllib.error.URLError, OSError, http.client.HTTPException, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise BadInputError(f"cannot reach Prometheus at {base}: {reason}") from exc
    try:
        return json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadInputError(
            f"{base} did not answer with Prometheus API JSON (is it a Prometheus server?)"
        ) from exc


def _from_prometheus(
    request: AuditRequest,
) -> tuple[list[Series], dict[str, int], Grid, str, list[Any]]:
    assert request.prometheus is not None
    end = request.until_s if request.until_s is not None else time.time()
    since = request.since_s if request.since_s is not None else 7 * 86400.0
    step = request.step_s or default_step(since)
    end = math.floor(end / step) * step  # aligned: what Prometheus answers falls on the grid
    start = end - math.ceil(since / step) * step
    grid = Grid(start, end, step)
    series: list[Series] = []
    ignored: dict[str, int] = {}
    answers: list[Any] = []
    base = request.prometheus.rstrip("/") + "/api/v1/query_range"
    chunk_s = step * MAX_POINTS
    for selector in query_selectors():
        start = grid.start_s
        while start < grid.end_s:
            stop = min(grid.end_s - step, start + chunk_s - step)
            if stop < start:
                break
            query = urllib.parse.urlencode(
                {
                    "query": selector,
                    "start": f"{start:.3f}",
                    "end": f"{stop:.3f}",
                    "step": f"{step:g}",
                }
            )
            answer = _fetch(f"{base}?{query}", request)
            found, skipped = parse_query_range(answer, request.prometheus)
            answers.append(answer)
            series.extend(found)
            for name, count in skipped.items():
                ignored[name] = ignored.get(name, 0) + count
            start += chunk_s
    if not series:
        raise BadInputError(
            f"Prometheus at {request.prometheus} has no DCGM or node-exporter series in the "
            f"window (last {since / 86400:g} days): is dcgm-exporter scraped there?"
        )
    how = f"Prometheus {request.prometheus}, query_range step {step:g} s"
    return series, ignored, grid, how, answers


def audit(
    request: AuditRequest,
    *,
    store_path: Path | None = DEFAULT_STORE_PATH,
    environment: Environment | None = None,
    command_line: str | None = None,
    nvml: Any = None,
) -> AuditOutcome:
    """Audit the fleet's telemetry; store and return the document (``nvml``: a fake NVML
    module for ``--sample``, tests)."""
    _validate(request)
    check_paths(store_path, request.report_path)
    catalog = load_catalog(request.catalog_files)
    why_missing: dict[str, str] = {}
    if request.export is not None:
        series, ignored = _read_export(request.export)
        step = request.step_s or _native_step(series)
        grid = _window(series, request, step)
        source = f"export {request.export} (step {step:g} s)"
    elif request.sample_s is not None:
        step = request.step_s or min(60.0, max(0.5, request.sample_s / 60))
        local = sample_here(request.sample_s, step, nvml=nvml, gpus=request.gpus)
        series, ignored = parse_query_range(query_range_answer(local.series), "local sampling")
        grid = _window(series, request, step)
        why_missing = local.why_missing
        source = f"sampled this host for {request.sample_s:g} s every {step:g} s ({local.status})"
    else:
        series, ignored, grid, source, answers = _from_prometheus(request)
        if request.save_export is not None:
            request.save_export.write_text(json.dumps(answers), encoding="utf-8")
    series = merge_series(series)
    devices = build_devices(series, grid)
    cpu = cpu_nodes(series, grid)
    if not devices and not cpu:
        raise BadInputError("no GPU or CPU node data in the audit window")
    figures = fleet_figures(devices, grid, why_missing=why_missing)
    given = {m: p for m, p in request.prices if m.lower() != "cpu"}
    cpu_price = next((p for m, p in request.prices if m.lower() == "cpu"), None)
    if request.onprem is not None:
        prices = {}
        for model in {f.model for f in figures}:
            powers = [f.power_mean_w for f in figures if f.model == model and f.power_mean_w]
            mean = sum(powers) / len(powers) if powers else None
            prices[model] = (
                GpuPrice(given[model], f"--price {model}={given[model]:g}")
                if model in given
                else request.onprem.price(mean)
            )
    else:
        prices = {f.model: gpu_price(f.model, catalog, given) for f in figures}
    window_h = grid.slots * grid.slot_h
    document = audit_document(
        grid=grid,
        source=source,
        figures=figures,
        prices=prices,
        actions=actions(figures, prices, window_h, catalog=catalog),
        cpu_busy=cpu,
        ignored=ignored,
        cpu_usd_per_node_hour=cpu_price,
        requests=gpu_requests(series, grid),
    )
    env = environment or collect_environment()
    run = CommandRun(
        RUN_KIND,
        "fleet",
        env,
        request.settings(),
        store_path=store_path,
        command_line=command_line,
    )
    with run:
        run.add_document(DOCUMENT_KIND, document)
    html = render_audit_report(document, title="accelscope audit")
    report = run.write_report(html, request.report_path)
    return AuditOutcome(
        document=document, run_id=run.run_id, store_path=run.stored_path, report_path=report
    )
