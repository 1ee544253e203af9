"""``accelscope llm``: benchmark an LLM server token by token.

Validate every input, check the target with one small request, then run each trial (a rate,
a concurrency, or a trace speed) and, with ``--capacity``, the capacity search; each trial is
committed to the store as it ends (its raw per-request records included), so Ctrl-C keeps what
was measured. The measuring itself is :class:`accelscope.llm.harness.Harness` (``tune`` uses
it too). Returns data; never prints.
"""

from __future__ import annotations

import ipaddress
import json
import math
import socket
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from accelscope.commands._lifecycle import CommandRun, check_paths
from accelscope.commands.llm.html import render_llm_report
from accelscope.documents import Ceilings, LlmCapacity
from accelscope.errors import BadInputError
from accelscope.hardware.energy import CPU_REASON, EnergyMeter, nvml_energy_meter
from accelscope.hardware.fingerprint import Environment, collect_environment
from accelscope.llm.client import Api, OpenAIEndpoint
from accelscope.llm.documents import (
    Arrivals,
    CapacitySummary,
    LlmRun,
    LlmTrial,
    RequestRecord,
    Slo,
    TargetDescription,
)
from accelscope.llm.explain import explanations
from accelscope.llm.floor import FloorInputs, resolve_floor_inputs
from accelscope.llm.harness import Harness, LoadKind, capacity_summary
from accelscope.llm.jobs import ValidityBounds
from accelscope.llm.prefix_optimum import cliff_of
from accelscope.llm.records import Target
from accelscope.llm.saturation import concurrency_saturated, rate_saturated
from accelscope.llm.scaleout import Workers
from accelscope.llm.summary import DEFINITIONS
from accelscope.llm.workload import TokenCounter, Workload, WorkloadSource, load_tokenizer
from accelscope.measurement.threads import available_cores
from accelscope.plan.catalog import load_catalog
from accelscope.roofline.cache import cache_path, load_cached
from accelscope.store.sqlite import DEFAULT_STORE_PATH

__all__ = [
    "CAPACITY_DOCUMENT",
    "SUMMARY_DOCUMENT",
    "TARGETS",
    "TRIAL_DOCUMENT",
    "LlmOutcome",
    "LlmRequestSettings",
    "llm",
]

RUN_KIND = "llm"
TRIAL_DOCUMENT = LlmTrial.kind
SUMMARY_DOCUMENT = LlmRun.kind
CAPACITY_DOCUMENT = LlmCapacity.kind
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
    cache: Literal["dynamic", "static"] | None = None
    """In-process KV cache; ``None``: static with ``compile``, else dynamic."""
    compile: bool = False
    device: str = "cpu"
    dtype: str | None = None
    rates: tuple[float, ...] = ()
    concurrencies: tuple[int, ...] = ()
    speeds: tuple[float, ...] = ()
    burstiness: float = 1.0
    requests: int | None = None
    """Sessions (single-turn requests) per trial; None: the workload's own default."""
    workload: WorkloadSource = field(default_factory=Workload)
    slo: Slo | None = None
    capacity: LoadKind | None = None
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
    workers: Workers = field(default_factory=Workers)
    """Client processes that share each trial's schedule (``--workers``)."""
    ray_address: str = "auto"
    """The Ray cluster of ``--workers ray:N``."""
    scrape_metrics: bool = True
    stop_at_saturation: bool = True
    """A ``rates``/``concurrencies`` sweep stops at its first saturated step
    (:mod:`accelscope.llm.saturation`); ``False``: every step is measured."""
    context_tokens: int | None = None
    """The server's context length for the agentic validity gate; ``None``: read from the
    server's ``/v1/models`` (vLLM's ``max_model_len``) when it publishes it."""
    validity: ValidityBounds = field(default_factory=ValidityBounds)
    """The agentic validity gate's stated bounds (the defaults: 1 % errors, 1 % overflows, the
    client's p99 lag within the trial summary's limit)."""
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
            "speeds": list(self.speeds),
            "burstiness": self.burstiness,
            "requests": self.requests,
            "workload": self.workload.summary().model_dump(mode="json"),
            "slo": self.slo.model_dump(mode="json") if self.slo else None,
            "capacity": self.capacity,
            "timeout_s": self.timeout_s,
            "ignore_eos": self.ignore_eos,
            "workers": self.workers.label,
            "context_tokens": self.context_tokens,
            "stop_at_saturation": self.stop_at_saturation,
        }


@dataclass(frozen=True, kw_only=True)
class LlmOutcome:
    """The run's summary document and where it went."""

    document: LlmRun
    run_id: str | None
    store_path: Path | None
    report_path: Path | None


def _validate(request: LlmRequestSettings) -> None:
    if (request.url is None) == (request.hf_model is None):
        raise BadInputError("give a server URL, or --hf-model DIR for an in-process model")
    if request.hf_model is not None and not request.hf_model.is_dir():
        raise BadInputError(f"--hf-model {request.hf_model}: no such model directory")
    if request.url is not None and not request.model:
        raise BadInputError("--model: give the model name the server serves")
    if request.requests is not None and request.requests < 1:
        raise BadInputError(f"--requests {request.requests}: give at least 1")
    if not (request.rates or request.concurrencies or request.speeds or request.capacity):
        raise BadInputError("give --rate, --concurrency, --trace-speed or --capacity")
    if request.capacity not in (None, "rate", "concurrency", "speed"):
        raise BadInputError(f"--capacity {request.capacity!r}: give rate, concurrency or speed")
    if request.capacity and request.slo is None:
        raise BadInputError("--capacity needs an --slo, e.g. --slo ttft=1s,tpot=100ms")
    trace = request.workload.kind == "trace"
    if trace and (
        request.rates or request.concurrencies or request.capacity in ("rate", "concurrency")
    ):
        raise BadInputError(
            "a trace is replayed on its own timestamps: give --trace-speed (1 = as recorded) "
            "or --capacity speed, not a rate or a concurrency"
        )
    if not trace and (request.speeds or request.capacity == "speed"):
        raise BadInputError("--trace-speed and --capacity speed replay a trace: give --trace FILE")
    if not math.isfinite(request.timeout_s) or request.timeout_s <= 0:
        raise BadInputError("--timeout must be positive")
    if request.max_batch < 1 or request.max_in_flight < 1:
        raise BadInputError("--max-batch and --max-in-flight must be >= 1")
    if (request.cache is not None or request.compile) and request.hf_model is None:
        raise BadInputError("--cache and --compile set up the in-process engine: give --hf-model")
    if (request.workers.count > 1 or request.workers.ray) and request.url is None:
        raise BadInputError("--workers sends to a server URL; an in-process model has one client")
    for rate in request.rates:
        Arrivals(rate_per_s=rate, cv=request.burstiness)
    for count in request.concurrencies:
        Arrivals(concurrency=count)
    for speed in request.speeds:
        Arrivals(speed=speed)
    if request.capacity_start is not None and (
        not math.isfinite(request.capacity_start) or request.capacity_start <= 0
    ):
        raise BadInputError("--capacity-start must be positive")
    if request.capacity_trials < 1:
        raise BadInputError("--capacity-trials must be >= 1")
    if request.context_tokens is not None and request.context_tokens < 2:
        raise BadInputError(f"context length {request.context_tokens}: give at least 2 tokens")
    for value, flag in (
        (request.bandwidth_bytes_per_s, "--bandwidth"),
        (request.peak_flops_per_s, "--peak-flops"),
    ):
        if value is not None and (not math.isfinite(value) or value <= 0):
            raise BadInputError(f"{flag} must be positive")


def _endpoint(request: LlmRequestSettings, tokenizer: TokenCounter | None) -> Target:
    assert request.url is not None and request.model is not None
    return OpenAIEndpoint(
        request.url,
        request.model,
        api=request.api,
        api_key=request.api_key,
        tokenizer=tokenizer,
        ignore_eos=request.ignore_eos,
    )


def _in_process(request: LlmRequestSettings, tokenizer: TokenCounter | None) -> Target:
    from accelscope.llm.inprocess import in_process_model

    assert request.hf_model is not None
    return in_process_model(
        request.hf_model,
        max_batch=request.max_batch,
        batching=request.batching,
        device=request.device,
        dtype=request.dtype,
        cache=request.cache or ("static" if request.compile else "dynamic"),
        compile=request.compile,
    )


TARGETS: dict[str, Callable[[LlmRequestSettings, TokenCounter | None], Target]] = {
    "openai-http": _endpoint,
    "in-process": _in_process,
}
"""The systems under test, by kind: a server's URL, or a local model directory in process."""


def _target_kind(request: LlmRequestSettings) -> str:
    return "in-process" if request.hf_model is not None else "openai-http"


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


def _local_ceilings(
    env: Environment, store_path: Path | None, device: str
) -> tuple[Ceilings | None, str]:
    """This machine's cached ``ceilings`` of ``device`` (``cpu`` or ``cuda[:N]``: the
    in-process model's device; a server on this machine is taken as on the CPU) beside the
    store, and the file's name."""
    directory = (store_path or DEFAULT_STORE_PATH).parent / "ceilings"
    kind, _, index = device.partition(":")
    path = cache_path(directory, env.fingerprint(), kind, available_cores(), int(index or 0))
    return load_cached(path), path.name


def _floor_inputs(
    request: LlmRequestSettings, env: Environment, store_path: Path | None, local: bool
) -> FloorInputs:
    device = request.device if request.hf_model is not None else "cpu"
    ceilings, source = _local_ceilings(env, store_path, device) if local else (None, "")
    return resolve_floor_inputs(
        model_config=request.model_config or request.hf_model,
        weights_dtype=request.weights_dtype or request.dtype,
        kv_dtype=request.kv_dtype,
        bandwidth_bytes_per_s=request.bandwidth_bytes_per_s,
        peak_flops_per_s=request.peak_flops_per_s,
        instance=request.instance,
        catalog_files=request.catalog_files,
        ceilings=ceilings,
        ceilings_source=source,
        local=local,
    )


def _energy_meters(
    request: LlmRequestSettings, env: Environment, local: bool
) -> tuple[list[EnergyMeter], str]:
    """The energy counters of the GPUs serving the target: the in-process model's GPU, or
    every GPU of this machine for a server on it; none, and why, otherwise."""
    if not local:
        return [], "the server is not on this machine: its GPU's energy counter is not read"
    if request.hf_model is not None:
        if request.device == "cpu":
            return [], CPU_REASON
        index = int(request.device.partition(":")[2] or 0)
        gpu = next((g for g in env.gpus if g.index == index), None)
        if gpu is None or not gpu.uuid:
            return [], f"{request.device} has no known UUID to find its NVML energy counter"
        return [nvml_energy_meter(uuid=gpu.uuid)], ""
    gpus = [g for g in env.gpus if g.uuid]
    if not gpus:
        return [], "no NVIDIA GPU on this machine (a server on the CPU: RAPL is not read)"
    return [nvml_energy_meter(uuid=g.uuid) for g in gpus], ""


MODELS_TIMEOUT_S = 10.0
"""How long the one ``/v1/models`` read (the served context length) may take."""


def _served_context(request: LlmRequestSettings) -> tuple[int | None, str]:
    """The context length the gate checks: the one given, else the server's ``/v1/models``
    ``max_model_len`` (vLLM publishes it), else ``None`` and why."""
    if request.context_tokens is not None:
        return request.context_tokens, ""
    if request.url is None:
        return None, "an in-process model: no served context length"
    parsed = urllib.parse.urlsplit(request.url.strip())
    base = parsed.path.rstrip("/")
    path = base if base.endswith("/v1") else f"{base}/v1"
    url = urllib.parse.urlunsplit((parsed.scheme, parsed.netloc, f"{path}/models", "", ""))
    headers = {"Authorization": f"Bearer {request.api_key}"} if request.api_key else {}
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(
            urllib.request.Request(url, headers=headers), timeout=MODELS_TIMEOUT_S
        ) as got:
            listed = json.loads(got.read())
    except (OSError, ValueError, urllib.error.URLError) as exc:
        return None, f"{url} did not answer with a model list ({type(exc).__name__})"
    models = listed.get("data") if isinstance(listed, dict) else None
    for entry in models if isinstance(models, list) else []:
        length = entry.get("max_model_len") if isinstance(entry, dict) else None
        if entry.get("id") == request.model and isinstance(length, int) and length > 1:
            return length, ""
    return None, f"{url} publishes no max_model_len for {request.model}"


def _price(request: LlmRequestSettings) -> tuple[float | None, str, str]:
    """$/hour of ``--instance`` from the catalog ``plan`` prices from, its source, or why
    there is none."""
    if request.instance is None:
        return None, "", "no price: give --instance (a catalog instance's $/hour)"
    entry = load_catalog(tuple(request.catalog_files)).get(request.instance)
    source = entry.sources.get("price_usd_per_hour")
    cited = f" ({source.source}, {source.date})" if source else ""
    return entry.price_usd_per_hour, f"catalog {entry.type} on-demand price{cited}", ""


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
    floor = _floor_inputs(request, env, store_path, local)
    agentic = request.workload.kind == "agentic"
    usd, usd_source, usd_why = _price(request) if agentic else (None, "", "")
    tokenizer = load_tokenizer(request.tokenizer or request.hf_model)
    target = TARGETS[_target_kind(request)](request, tokenizer)
    try:
        target.check()  # one small request; before any output, so bad input stays one line
    except BaseException:
        target.close()
        raise
    description = target.describe()
    say(f"target answered: {description.where}")
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
    records: dict[int, list[RequestRecord]] = {}
    meters, no_energy = _energy_meters(request, env, local)
    context, context_why = _served_context(request) if agentic else (None, "")

    def keep(trial: LlmTrial) -> None:
        records[trial.index] = trial.records
        run.add_document(TRIAL_DOCUMENT, trial.model_dump(mode="json"))

    harness = Harness(
        target=target,
        workload=request.workload,
        slo=request.slo,
        tokenizer=tokenizer,
        metrics_url=request.url if request.scrape_metrics else None,
        no_metrics_why="in-process target" if request.url is None else "disabled",
        floor=floor,
        count=request.requests,
        timeout_s=request.timeout_s,
        max_in_flight=request.max_in_flight,
        workers=request.workers,
        ray_address=request.ray_address,
        burstiness=request.burstiness,
        on_trial=keep,
        events=say,
        energy=meters,
        no_energy_why=no_energy,
        context_tokens=context,
        context_why=context_why,
        usd_per_hour=usd,
        usd_source=usd_source,
        usd_why=usd_why,
        validity=request.validity,
    )
    capacity: CapacitySummary | None = None
    stops: list[str] = []
    try:
        with run:
            stops.extend(_sweep(request, harness, say))
            for speed in request.speeds:
                harness.trial(Arrivals(speed=speed))
            if request.capacity is not None:
                capacity = capacity_summary(
                    harness.capacity(
                        request.capacity,
                        start=request.capacity_start,
                        max_trials=request.capacity_trials,
                    )
                )
            document = _document(request, description, harness, capacity, floor, env, local, stops)
            run.add_document(SUMMARY_DOCUMENT, document.model_dump(mode="json"))
            if capacity is not None:
                run.add_document(CAPACITY_DOCUMENT, _capacity_document(document, capacity))
    finally:
        target.close()
        for meter in meters:
            meter.close()
    html = render_llm_report(document, title=f"accelscope llm: {model_name}", records=records)
    report = run.write_report(html, request.report_path)
    return LlmOutcome(
        document=document, run_id=run.run_id, store_path=run.stored_path, report_path=report
    )


def _sweep(request: LlmRequestSettings, harness: Harness, say: Events) -> list[str]:
    """The ``rates`` then the ``concurrencies`` trials, each sweep stopped at its first
    saturated step (unless asked not to): why each stopped, and what it left out."""
    stops: list[str] = []
    for rate in request.rates:
        trial = harness.trial(Arrivals(rate_per_s=rate, cv=request.burstiness))
        why = rate_saturated(trial.records, trial.label)
        left = [r for r in request.rates if r > rate]
        if why and request.stop_at_saturation and left:
            stops.append(f"{why}; not measured: {', '.join(f'{r:g} req/s' for r in left)}")
            say(stops[-1])
            break
    previous: LlmTrial | None = None
    for count in request.concurrencies:
        trial = harness.trial(Arrivals(concurrency=count))
        lower = previous is not None and (previous.arrivals.concurrency or 0) < count
        why = (
            concurrency_saturated(
                trial.summary,
                trial.label,
                previous.summary,
                previous.label,
                streams_ratio=count / (previous.arrivals.concurrency or 1),
            )
            if previous is not None and lower
            else None
        )
        left = [c for c in request.concurrencies if c > count]
        if why and request.stop_at_saturation and left:
            stops.append(f"{why}; not measured: concurrency {', '.join(map(str, left))}")
            say(stops[-1])
            break
        previous = trial
    return stops


def _document(
    request: LlmRequestSettings,
    target: Any,
    harness: Harness,
    capacity: CapacitySummary | None,
    floor: FloorInputs,
    env: Environment,
    local: bool,
    saturation: Sequence[str] = (),
) -> LlmRun:
    trials = harness.trials
    config = next(
        (t.server_metrics.config for t in reversed(trials) if t.server_metrics.config), None
    )
    workload = request.workload.summary()
    steps = [t.summary.agentic.cache for t in trials if t.summary.agentic is not None]
    return LlmRun(
        target=target,
        model=request.model or str(request.hf_model),
        workload=workload,
        slo=request.slo,
        slo_label=request.slo.label if request.slo else "none",
        definitions=DEFINITIONS,
        trials=trials,
        warnings=[w for t in trials for w in t.warnings],
        environment_fingerprint=env.fingerprint(),
        local_server=local,
        floor_why=None if floor.ready else floor.why,
        capacity=capacity,
        server_config=config,
        eviction_cliff=cliff_of([s for s in steps if s is not None]) if steps else None,
        saturation=list(saturation),
        notes=[
            *explanations(workload, trials, config),
            *(n for t in trials for n in t.notes),
            *_in_process_notes(request, target, trials),
        ],
    )


def _in_process_notes(
    request: LlmRequestSettings, target: TargetDescription, trials: Sequence[LlmTrial]
) -> list[str]:
    """The in-process engine's compile time (outside every trial) and, on a GPU, where its
    decoding is host-bound and what would move it."""
    if request.hf_model is None:
        return []
    from accelscope.llm.inprocess import host_bound_notes

    extra = target.model_extra or {}
    notes = []
    if extra.get("compile"):
        notes.append(
            f"torch.compile (mode {extra.get('compile_mode')}) of the decoding step with a "
            f"static KV cache: {float(extra.get('compile_s') or 0.0):.1f} s of compilation in the "
            "warm-up, before and outside every trial's TTFT and TPOT"
        )
    return notes + host_bound_notes(
        trials,
        device=request.device,
        cache=str(extra.get("cache", "dynamic")),
        compile=bool(extra.get("compile")),
        max_batch=request.max_batch,
    )


def _capacity_document(document: LlmRun, capacity: CapacitySummary) -> dict[str, Any]:
    return capacity.document(
        model=document.model,
        target=document.target.model_dump(mode="json"),
        slo=document.slo,
        environment_fingerprint=document.environment_fingerprint,
        local_server=document.local_server,
    ).model_dump(mode="json")
