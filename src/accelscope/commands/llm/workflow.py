"""``accelscope llm``: benchmark an LLM server token by token.

Validate every input, check the target with one small request, then run each trial (a rate or
a concurrency) and, with ``--capacity``, the capacity search; each trial is committed to the
store as it ends (its raw per-request records included), so Ctrl-C keeps what was measured.
The server's ``/metrics`` is read around each trial; the decode floor is computed when the
model's shape and a bandwidth are known. Returns data; never prints.
"""

from __future__ import annotations

import ipaddress
import math
import socket
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from accelscope.commands._lifecycle import CommandRun, check_paths
from accelscope.commands.llm.html import render_llm_report
from accelscope.documents import LlmCapacity
from accelscope.errors import BadInputError
from accelscope.hardware.fingerprint import Environment, collect_environment
from accelscope.llm.capacity import CapacityResult, search_capacity
from accelscope.llm.client import Api, OpenAIEndpoint
from accelscope.llm.floor import decode_floor
from accelscope.llm.records import Target
from accelscope.llm.server_metrics import ServerMetricsScraper
from accelscope.llm.summary import (
    DEFINITIONS,
    WARMUP_FRACTION,
    Slo,
    steady_samples,
    summarise_trial,
)
from accelscope.llm.trial import TrialInterrupted, TrialRecords, run_trial
from accelscope.llm.workload import Arrivals, TokenCounter, Workload, build_requests
from accelscope.load.early_stopping import min_passing_queries
from accelscope.measurement.threads import available_cores
from accelscope.plan.catalog import load_catalog
from accelscope.plan.llm_memory import ModelShape, load_model_config, shape_from_config
from accelscope.roofline.cache import cache_path, load_cached
from accelscope.store.sqlite import DEFAULT_STORE_PATH

__all__ = ["TRIAL_DOCUMENT", "LlmOutcome", "LlmRequestSettings", "llm", "trial_label"]

RUN_KIND = "llm"
TRIAL_DOCUMENT = "llm-trial"
SUMMARY_DOCUMENT = "llm"
CAPACITY_DOCUMENT = LlmCapacity.kind
COLD_HIT_RATE = 0.01
"""A cold run whose server reports more prefix-cache hits than this share of the prompt
tokens gets a warning (any hit is a shared block on vLLM; 1 % tolerates chance overlaps)."""
_DTYPE_BYTES = {
    "float32": 4.0,
    "float16": 2.0,
    "bfloat16": 2.0,
    "float8": 1.0,
    "int8": 1.0,
    "int4": 0.5,
}
Events = Callable[[str], None]


@dataclass(frozen=True, kw_only=True)
class LlmRequestSettings:
    """Everything ``llm`` needs, checked before anything is sent."""

    url: str | None = None
    model: str | None = None
    hf_model: Path | None = None
    api: Api = "completions"
    api_key: str | None = None
    batching: Literal["static", "continuous"] = "static"
    max_batch: int = 8
    rates: tuple[float, ...] = ()
    concurrencies: tuple[int, ...] = ()
    burstiness: float = 1.0
    requests: int = 100
    workload: Workload = field(default_factory=Workload)
    slo: Slo | None = None
    capacity: Literal["rate", "concurrency"] | None = None
    capacity_start: float | None = None
    capacity_trials: int = 8
    timeout_s: float = 300.0
    tokenizer: Path | None = None
    ignore_eos: bool = False
    model_config: Path | None = None
    weights_dtype: str | None = None
    kv_dtype: str | None = None
    bandwidth_bytes_per_s: float | None = None
    peak_flops_per_s: float | None = None
    instance: str | None = None
    catalog_files: tuple[Path, ...] = ()
    max_in_flight: int = 256
    scrape_metrics: bool = True
    report_path: Path | None = None

    def settings(self) -> dict[str, Any]:
        """The stored run's settings (JSON-ready)."""
        return {
            "url": self.url,
            "model": self.model,
            "hf_model": str(self.hf_model) if self.hf_model else None,
            "api": self.api,
            "rates": list(self.rates),
            "concurrencies": list(self.concurrencies),
            "burstiness": self.burstiness,
            "requests": self.requests,
            "workload": self.workload.to_dict(),
            "slo": self.slo.to_dict() if self.slo else None,
            "capacity": self.capacity,
            "timeout_s": self.timeout_s,
            "ignore_eos": self.ignore_eos,
        }


@dataclass(frozen=True, kw_only=True)
class LlmOutcome:
    """The run's summary document and where it went."""

    document: dict[str, Any]
    run_id: str | None
    store_path: Path | None
    report_path: Path | None


def trial_label(arrivals: Arrivals) -> str:
    """``2 req/s`` or ``concurrency 4``."""
    return arrivals.label


def _validate(request: LlmRequestSettings) -> None:
    if (request.url is None) == (request.hf_model is None):
        raise BadInputError("give a server URL, or --hf-model DIR for an in-process model")
    if request.hf_model is not None and not request.hf_model.is_dir():
        raise BadInputError(f"--hf-model {request.hf_model}: no such model directory")
    if request.url is not None and not request.model:
        raise BadInputError("--model: give the model name the server serves")
    if request.requests < 1:
        raise BadInputError(f"--requests {request.requests}: give at least 1")
    if not (request.rates or request.concurrencies or request.capacity):
        raise BadInputError("give --rate, --concurrency or --capacity")
    if request.capacity and request.slo is None:
        raise BadInputError("--capacity needs an --slo, e.g. --slo ttft=1s,tpot=100ms")
    if not math.isfinite(request.timeout_s) or request.timeout_s <= 0:
        raise BadInputError("--timeout must be positive")
    if request.max_batch < 1 or request.max_in_flight < 1:
        raise BadInputError("--max-batch and --max-in-flight must be >= 1")
    for rate in request.rates:
        Arrivals(rate_per_s=rate, cv=request.burstiness)
    for count in request.concurrencies:
        Arrivals(concurrency=count)
    if request.capacity_start is not None and (
        not math.isfinite(request.capacity_start) or request.capacity_start <= 0
    ):
        raise BadInputError("--capacity-start must be positive")
    if request.capacity_trials < 1:
        raise BadInputError("--capacity-trials must be >= 1")
    for value, flag in (
        (request.bandwidth_bytes_per_s, "--bandwidth"),
        (request.peak_flops_per_s, "--peak-flops"),
    ):
        if value is not None and (not math.isfinite(value) or value <= 0):
            raise BadInputError(f"{flag} must be positive")


def _tokenizer(path: Path | None) -> TokenCounter | None:
    if path is None:
        return None
    if not path.is_dir():
        raise BadInputError(f"--tokenizer {path}: not a directory (a local tokenizer is needed)")
    try:
        from transformers import AutoTokenizer
    except ImportError:
        raise BadInputError("--tokenizer needs transformers: pip install transformers") from None
    try:
        loaded: Any = AutoTokenizer.from_pretrained(
            str(path), local_files_only=True, trust_remote_code=False
        )
    except (OSError, ValueError, KeyError) as exc:
        message = " ".join(str(exc).split())[:200]
        raise BadInputError(f"--tokenizer {path}: cannot load a tokenizer: {message}") from None
    counter: TokenCounter = loaded
    return counter


def _target(request: LlmRequestSettings, tokenizer: TokenCounter | None) -> Target:
    if request.hf_model is not None:
        from accelscope.llm.inprocess import InProcessModel

        return InProcessModel(
            request.hf_model, max_batch=request.max_batch, batching=request.batching
        )
    assert request.url is not None and request.model is not None
    return OpenAIEndpoint(
        request.url,
        request.model,
        api=request.api,
        api_key=request.api_key,
        tokenizer=tokenizer,
        ignore_eos=request.ignore_eos,
    )


def _is_local(url: str | None) -> bool:
    """Does the server run on this machine (loopback or one of its addresses)?"""
    if url is None:
        return True
    host = urllib.parse.urlsplit(url).hostname or ""
    try:
        return ipaddress.ip_address(socket.gethostbyname(host)).is_loopback or host in (
            socket.gethostname(),
            socket.getfqdn(),
        )
    except (OSError, ValueError):
        return False


@dataclass
class _Floor:
    """What the decode floor needs, resolved once (``why`` when it cannot be computed)."""

    shape: ModelShape | None = None
    weight_bytes: float = 0.0
    kv_bytes: float = 0.0
    bandwidth: float | None = None
    bandwidth_source: str = ""
    peak: float | None = None
    peak_source: str = ""
    why: str = ""


def _dtype_bytes(name: str | None, flag: str) -> float | None:
    if name is None:
        return None
    key = name.strip().lower().removeprefix("torch.")
    key = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16", "fp8": "float8"}.get(key, key)
    if key not in _DTYPE_BYTES:
        known = ", ".join(sorted(_DTYPE_BYTES))
        raise BadInputError(f"{flag} {name!r}: give one of {known}")
    return _DTYPE_BYTES[key]


def _resolve_floor(
    request: LlmRequestSettings, env: Environment, store_path: Path | None, local: bool
) -> _Floor:
    found = _Floor()
    config_path = request.model_config or request.hf_model
    if config_path is None:
        found.why = "not measured: give --model-config (the model's config.json) for the floor"
        return found
    if config_path.is_dir():
        config_path = config_path / "config.json"
    config = load_model_config(config_path)
    found.shape = shape_from_config(config, str(config_path))
    dtype = request.weights_dtype or str(config.get("dtype") or config.get("torch_dtype") or "")
    found.weight_bytes = _dtype_bytes(dtype or "bfloat16", "--weights-dtype") or 2.0
    found.kv_bytes = _dtype_bytes(request.kv_dtype, "--kv-dtype") or min(found.weight_bytes, 2.0)
    if found.weight_bytes >= 4.0 and request.kv_dtype is None:
        found.kv_bytes = found.weight_bytes
    if request.bandwidth_bytes_per_s is not None:
        found.bandwidth = request.bandwidth_bytes_per_s
        found.bandwidth_source = "--bandwidth (given)"
        found.peak = request.peak_flops_per_s
        found.peak_source = "--peak-flops (given)" if request.peak_flops_per_s else ""
    elif request.instance is not None:
        instance = load_catalog(request.catalog_files).get(request.instance)
        found.bandwidth = instance.memory_bandwidth_bytes_per_s
        found.bandwidth_source = f"catalog {instance.type} ({instance.accelerator}) datasheet"
        key = "bf16" if found.weight_bytes <= 2 else "fp32"
        found.peak = request.peak_flops_per_s or instance.peak_ops_per_s.get(key)
        found.peak_source = f"catalog {instance.type} {key} datasheet" if found.peak else ""
    elif local:
        directory = (store_path or DEFAULT_STORE_PATH).parent / "ceilings"
        path = cache_path(directory, env.fingerprint(), "cpu", available_cores())
        ceilings = load_cached(path)
        if ceilings is None:
            found.why = (
                "not measured: run `accelscope ceilings` once on this machine (or give "
                "--bandwidth) for the decode floor"
            )
            return found
        found.bandwidth = ceilings.bandwidth_bytes_per_s
        found.bandwidth_source = f"measured by ceilings on this machine ({path.name})"
        key = "bf16" if found.weight_bytes <= 2 else "fp32"
        found.peak = ceilings.peak(key) or ceilings.peak("fp32")
        found.peak_source = f"measured by ceilings ({key} matmul peak)" if found.peak else ""
    else:
        found.why = (
            "not measured: the server is not on this machine; give --instance (catalog "
            "datasheet) or --bandwidth for the decode floor"
        )
    return found


def _arrivals(kind: str, load: float, cv: float) -> Arrivals:
    if kind == "concurrency":
        return Arrivals(concurrency=int(load))
    return Arrivals(rate_per_s=load, cv=cv)


def _trial_requests(request: LlmRequestSettings) -> int:
    """Requests per trial: at least what the SLO percentile's tail claim needs."""
    if request.slo is None:
        return request.requests
    # enough for a claim with one request over the bound (with none over, a single outlier
    # would leave the tail unclaimable), and the steady window leaves out the ramp-up
    needs = min_passing_queries(1, request.slo.percentile / 100.0) + 1
    return max(request.requests, math.ceil(needs / (1.0 - WARMUP_FRACTION)) + 1)


def llm(
    request: LlmRequestSettings,
    *,
    store_path: Path | None = DEFAULT_STORE_PATH,
    environment: Environment | None = None,
    command_line: str | None = None,
    events: Events | None = None,
) -> LlmOutcome:
    """Benchmark the target; store and return the summary document."""
    _validate(request)
    check_paths(store_path, request.report_path)
    say = events or (lambda _: None)
    env = environment or collect_environment()
    local = _is_local(request.url)
    floor_inputs = _resolve_floor(request, env, store_path, local)
    tokenizer = _tokenizer(request.tokenizer or request.hf_model)
    target = _target(request, tokenizer)
    try:
        target.check()  # one small request; before any output, so bad input stays one line
    except BaseException:
        target.close()
        raise
    description = target.describe()
    say(f"target answered: {description.get('url') or description.get('model_dir', '')}")
    model_name = request.model or str(request.hf_model)
    run = CommandRun(
        RUN_KIND,
        model_name,
        env,
        request.settings(),
        store_path=store_path,
        command_line=command_line,
        kept="the finished trials",
    )
    trials: list[dict[str, Any]] = []
    records: dict[int, list[dict[str, Any]]] = {}
    warnings: list[str] = []
    capacity: CapacityResult | None = None
    base_url = request.url

    def one_trial(arrivals: Arrivals, role: str) -> dict[str, Any]:
        index = len(trials)
        count = _trial_requests(request) if role == "capacity" else request.requests
        requests = build_requests(
            request.workload, arrivals, count, tokenizer=tokenizer, seed_offset=index * 1_000_003
        )
        say(f"trial {index + 1}: {arrivals.label}, {count} requests")
        scraper = (
            ServerMetricsScraper(base_url)
            if base_url is not None and request.scrape_metrics
            else None
        )
        if scraper is not None:
            scraper.start()
        cpu_before = time.process_time()
        interrupted: TrialRecords | None = None
        try:
            outcome = run_trial(
                target,
                requests,
                concurrency=arrivals.concurrency,
                max_in_flight=request.max_in_flight,
                timeout_s=request.timeout_s,
            )
        except TrialInterrupted as stop:
            interrupted = stop.partial
            outcome = stop.partial
        cpu_s = time.process_time() - cpu_before
        server: dict[str, Any] = (
            scraper.stop()
            if scraper is not None
            else {
                "available": False,
                "why": "in-process target" if base_url is None else "disabled",
            }
        )
        summary = summarise_trial(outcome.records, slo=request.slo, duration_s=outcome.duration_s)
        summary["client_cpu_cores"] = cpu_s / outcome.duration_s if outcome.duration_s else None
        summary["client_cpu_s_per_request"] = cpu_s / max(1, len(outcome.records))
        trial_warnings = []
        hit_rate = (server.get("prefix_cache") or {}).get("hit_rate")
        if request.workload.prefix.cold and hit_rate and hit_rate > COLD_HIT_RATE:
            trial_warnings.append(
                f"a cold run saw a {hit_rate:.1%} prefix-cache hit rate on the server: the "
                "cache was not cold (another client, or prompts shared by chance)"
            )
        if summary.get("client_bound"):
            trial_warnings.append(
                f"{arrivals.label}: the client fell behind (p99 send lag "
                f"{summary['client_lag_s']['p99'] * 1000:.0f} ms): this rate was not generated"
            )
        floor = None
        if floor_inputs.shape is not None and floor_inputs.bandwidth:
            floor = decode_floor(
                floor_inputs.shape,
                weight_bytes=floor_inputs.weight_bytes,
                kv_bytes=floor_inputs.kv_bytes,
                bandwidth_bytes_per_s=floor_inputs.bandwidth,
                bandwidth_source=floor_inputs.bandwidth_source,
                records=outcome.records,
                summary=summary,
                peak_flops_per_s=floor_inputs.peak,
                peak_source=floor_inputs.peak_source,
            )
        trial = {
            "index": index,
            "role": role,
            "label": arrivals.label,
            "arrivals": arrivals.to_dict(),
            "requests_planned": count,
            "summary": summary,
            "server_metrics": server,
            "floor": floor,
            "warnings": trial_warnings,
            "interrupted": interrupted is not None,
        }
        run.add_document(
            TRIAL_DOCUMENT,
            {
                **trial,
                "samples": steady_samples(outcome.records, summary),
                "records": records.setdefault(index, [r.to_dict() for r in outcome.records]),
            },
        )
        trials.append(trial)
        warnings.extend(trial_warnings)
        if interrupted is not None:
            raise KeyboardInterrupt
        return summary

    try:
        with run:
            for rate in request.rates:
                one_trial(Arrivals(rate_per_s=rate, cv=request.burstiness), "fixed")
            for count in request.concurrencies:
                one_trial(Arrivals(concurrency=count), "fixed")
            if request.capacity is not None:
                kind = request.capacity
                start = request.capacity_start or _start_load(kind, trials)
                capacity = search_capacity(
                    lambda load: one_trial(_arrivals(kind, load, request.burstiness), "capacity"),
                    start=start,
                    integer=kind == "concurrency",
                    unit="concurrency" if kind == "concurrency" else "req/s",
                    max_trials=request.capacity_trials,
                )
            document = _document(
                request, description, trials, capacity, warnings, floor_inputs, env, local
            )
            run.add_document(SUMMARY_DOCUMENT, document)
            if capacity is not None:
                run.add_document(CAPACITY_DOCUMENT, _capacity_document(document, model_name))
    finally:
        target.close()
    html = render_llm_report(document, title=f"accelscope llm: {model_name}", records=records)
    report = run.write_report(html, request.report_path)
    return LlmOutcome(
        document=document, run_id=run.run_id, store_path=run.stored_path, report_path=report
    )


def _start_load(kind: str, trials: list[dict[str, Any]]) -> float:
    """The search's first load: 1 for concurrency; for a rate, what one sequential client
    sustains (1 / median E2E of a fixed trial) when one ran, else 1 req/s."""
    if kind == "concurrency":
        return 1.0
    for trial in trials:
        e2e = trial["summary"]["metrics"].get("e2e_s", {}).get("p50")
        if e2e:
            return max(0.05, round(1.0 / float(e2e), 3))
    return 1.0


def _document(
    request: LlmRequestSettings,
    target: dict[str, Any],
    trials: list[dict[str, Any]],
    capacity: CapacityResult | None,
    warnings: list[str],
    floor_inputs: _Floor,
    env: Environment,
    local: bool,
) -> dict[str, Any]:
    found: dict[str, Any] = {
        "target": target,
        "model": request.model or str(request.hf_model),
        "workload": request.workload.to_dict(),
        "slo": request.slo.to_dict() if request.slo else None,
        "slo_label": request.slo.label if request.slo else "none",
        "definitions": DEFINITIONS,
        "trials": trials,
        "warnings": warnings,
        "environment_fingerprint": env.fingerprint(),
        "local_server": local,
        # why no trial has a decode floor (None when each trial carries its own)
        "floor_why": None if floor_inputs.shape and floor_inputs.bandwidth else floor_inputs.why,
    }
    if capacity is not None:
        best = next((p for p in capacity.points if p.passed and p.load == capacity.capacity), None)
        goodput = (best.summary.get("goodput") or {}) if best else {}
        found["capacity"] = {
            "capacity": capacity.capacity,
            "unit": capacity.unit,
            "stopped": capacity.stopped,
            "good_output_tokens_per_s": goodput.get("output_tokens_per_s"),
            "good_requests_per_s": goodput.get("requests_per_s"),
            "output_tokens_mean": (best.summary.get("tokens") or {}).get("output_mean")
            if best
            else None,
            "prompt_tokens_mean": (best.summary.get("tokens") or {}).get("prompt_mean")
            if best
            else None,
            "points": [{"load": p.load, "passed": p.passed, "why": p.why} for p in capacity.points],
        }
    return found


def _capacity_document(document: dict[str, Any], model: str) -> dict[str, Any]:
    found = document["capacity"]
    payload = LlmCapacity(
        model=model,
        target=document["target"],
        slo=document["slo"] or {},
        capacity=found["capacity"],
        unit=found["unit"],
        good_output_tokens_per_s=found["good_output_tokens_per_s"],
        good_requests_per_s=found["good_requests_per_s"],
        output_tokens_mean=found["output_tokens_mean"],
        prompt_tokens_mean=found["prompt_tokens_mean"],
        environment_fingerprint=document["environment_fingerprint"],
        local_server=document["local_server"],
        valid=found["capacity"] is not None,
    )
    return payload.model_dump(mode="json")
