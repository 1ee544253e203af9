"""``accelscope plan``: gather what was measured for a model, plan the fleet, store, report.

Evidence comes from the results store: the newest ``roofline`` document of the model, the
``capacity`` documents of its newest load run, and its newest bench run's results (or exactly
the run given with ``--run``). ``--profile FILE`` supplies a roofline payload (contracts.md)
from a JSON file instead. Everything the user gives is validated before anything is written.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from accelscope.audit.recover import FleetClass, fleet_classes, recover_document
from accelscope.commands._lifecycle import CommandRun, check_paths
from accelscope.commands.plan.html import render_plan_report
from accelscope.documents import LlmCapacity, LoadCapacity, RooflineProfile
from accelscope.errors import BadInputError
from accelscope.hardware.fingerprint import Environment, collect_environment
from accelscope.plan.api_cost import compare_api
from accelscope.plan.catalog import Catalog, load_catalog
from accelscope.plan.energy import EnergyPrice
from accelscope.plan.fleet import PlanSettings
from accelscope.plan.llm_memory import estimate_memory, load_model_config, shape_from_config
from accelscope.plan.service import BenchFigure, Evidence, build_plan
from accelscope.plan.traffic import load_traffic
from accelscope.result import Result, Status
from accelscope.serialise import dump
from accelscope.store.sqlite import DEFAULT_STORE_PATH, ResultStore, RunRecord

if TYPE_CHECKING:
    from accelscope.plan.projection.llm_serving import TpotPoint

__all__ = [
    "ApiRequest",
    "MemoryRequest",
    "PlanOutcome",
    "PlanRequest",
    "bench_figures",
    "parse_node_type_map",
    "plan_api",
    "plan_capacity",
    "plan_memory",
]

RUN_KIND = "plan"
DOCUMENT_KIND = "plan"
_SCAN_RUNS = 500


@dataclass(frozen=True, kw_only=True)
class PlanRequest:
    """Capacity mode: which model (or run), the traffic, the SLA and the fleet rules."""

    traffic: str
    sla_p99_s: float
    model: str | None = None
    run_id: str | None = None
    headroom: float = 0.2
    min_instances: int = 1
    catalog_files: tuple[Path, ...] = ()
    here: str | None = None
    capacity_qps: float | None = None
    profile_file: Path | None = None
    node_types: tuple[tuple[str, str], ...] = ()
    """(catalog instance type, Ray node type) pairs: the ``--run``'s results measured on that
    node type are that instance's measured capacity."""
    only: tuple[str, ...] = ()
    report_path: Path | None = None
    energy_price: EnergyPrice | None = None
    """$/kWh (and PUE) to price each option's measured energy at; ``None``: kWh only."""
    fleet_run: str | None = None
    """A stored ``audit`` run (id, prefix or ``latest``): buy or recover against its idle GPUs."""


@dataclass(frozen=True, kw_only=True)
class MemoryRequest:
    """Memory mode: a local config.json, the context, the batch and the precision."""

    config: Path
    context_tokens: int
    batch: int = 1
    precision: str = "bf16"
    kv_precision: str | None = None
    catalog_files: tuple[Path, ...] = ()


@dataclass(frozen=True, kw_only=True)
class ApiRequest:
    """API mode: monthly volume, the API's prices, and the own instance and its throughput."""

    tokens_per_month: float
    input_price: float
    output_price: float
    instance: str
    throughput_tokens_per_s: float | None = None
    from_run: str | None = None
    """An ``llm`` run with a capacity search: its goodput at the SLO replaces a typed
    throughput."""
    output_share: float = 0.25
    headroom: float = 0.2
    catalog_files: tuple[Path, ...] = ()


@dataclass(frozen=True, kw_only=True)
class PlanOutcome:
    """The plan document and where it was stored and reported."""

    document: dict[str, Any]
    run_id: str | None = None
    store_path: Path | None = None
    report_path: Path | None = None
    notes: list[str] = field(default_factory=list)


def _profile_from_file(path: Path) -> RooflineProfile:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BadInputError(f"profile {path}: no such file") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadInputError(f"profile {path}: not a readable JSON file: {exc}") from None
    if isinstance(data, dict) and isinstance(data.get("documents"), list):  # runs show --json
        found = [
            d.get("payload")
            for d in data["documents"]
            if isinstance(d, dict) and d.get("kind") == "roofline"
        ]
        if not found:
            raise BadInputError(f"profile {path}: the run export holds no roofline document")
        data = found[-1]
    return RooflineProfile.from_payload(data, f"profile {path}")


def parse_node_type_map(items: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """``g6.xlarge=l4-pool`` items (each may hold a comma list) as (instance, node type)."""
    pairs: list[tuple[str, str]] = []
    for item in items:
        for part in item.split(","):
            if not part.strip():
                continue
            instance, sep, node_type = part.partition("=")
            if not sep or not instance.strip() or not node_type.strip():
                raise BadInputError(
                    f"--node-type {part.strip()!r}: give CATALOG_TYPE=NODE_TYPE, "
                    "e.g. g6.xlarge=l4-pool"
                )
            pairs.append((instance.strip(), node_type.strip()))
    return tuple(pairs)


def bench_figures(results: Sequence[Result], node_type: str = "") -> tuple[BenchFigure, ...]:
    """The successful bench results measured on ``node_type`` (``""``: where the run ran) as
    plan evidence (throughput, p99, and the configuration that calibrates projections)."""
    figures = []
    for result in results:
        m = result.measurement
        if result.status is Status.OK and m is not None and result.spec.node_type == node_type:
            spec = result.spec
            figures.append(
                BenchFigure(
                    label=spec.label(),
                    items_per_s=m.throughput_items_per_s,
                    p99_s=m.summary.p99_s,
                    device=spec.device.value,
                    backend=spec.backend,
                    precision=spec.precision.value,
                    batch_size=spec.batch_size,
                    batch_time_s=m.summary.median_s,
                    energy=result.energy,
                )
            )
    return tuple(figures)


def _evidence_of_run(run: RunRecord) -> Evidence:
    profiles = run.documents_of("roofline")
    profile = (
        RooflineProfile.from_payload(profiles[-1], f"run {run.id} roofline document")
        if profiles
        else None
    )
    capacities = tuple(
        LoadCapacity.from_payload(p, f"run {run.id} capacity document")
        for p in run.documents_of("capacity")
    )
    bench = bench_figures(run.results) if run.kind == "bench" else ()
    llm_payloads = run.documents_of(LlmCapacity.kind)
    llm = (
        LlmCapacity.from_payload(llm_payloads[-1], f"run {run.id}'s llm capacity")
        if llm_payloads
        else None
    )
    usable = (
        llm is not None
        and llm.valid
        and (llm.unit == "req/s" or (llm.unit == "concurrency" and llm.good_requests_per_s))
    )
    if run.kind in ("llm", "tune") and not usable:
        raise BadInputError(
            f"run {run.id} has no LLM capacity in requests/s: run `accelscope llm ... "
            "--capacity rate --slo ...` (or `accelscope tune ...`) first"
        )
    return Evidence(
        profile=profile,
        capacities=capacities,
        bench=bench,
        llm=llm,
        sources=(f"{run.kind} run {run.id}",),
    )


def _model_matches(run: RunRecord, model: str) -> bool:
    return run.model == model or Path(run.model).name == model


def run_of_kind(
    store: ResultStore, run: str, kind: str, *, flag: str, what: str, first: str
) -> RunRecord:
    """``run`` (an id, a unique prefix, or ``latest``: the newest run of ``kind``) as a run of
    ``kind``; ``what`` names it in the refusal (``an audit run``), ``first`` says how to make
    one when the store holds none."""
    if run == "latest":
        found = [r for r in store.list_runs(limit=1_000_000) if r.kind == kind]
        if not found:
            raise BadInputError(
                f"{flag} latest: the store {store.path} holds no {kind} run ({first})"
            )
        run = found[0].id
    record = store.get_run(run)
    if record.kind != kind:
        raise BadInputError(
            f"{flag} {run}: run {record.id} is a {record.kind} run, not {what} "
            "(see: accelscope runs list)"
        )
    return record


def fleet_from_store(store: ResultStore, run: str) -> tuple[str, tuple[FleetClass, ...]]:
    """The audit run ``run`` names (id, prefix or ``latest``) and its fleet's GPU families."""
    record = run_of_kind(
        store, run, "audit", flag="--fleet", what="an audit run", first="run accelscope audit first"
    )
    return record.id, fleet_classes(record.documents_of("audit")[-1], record.id)


def _gather(store: ResultStore, request: PlanRequest) -> tuple[str, Evidence]:
    if request.run_id:
        run = store.get_run(request.run_id)
        return run.model, _evidence_of_run(run)
    model = request.model or ""
    profile: RooflineProfile | None = None
    capacities: tuple[LoadCapacity, ...] = ()
    bench: tuple[BenchFigure, ...] = ()
    sources: list[str] = []
    for head in store.list_runs(_SCAN_RUNS):  # newest first
        if head.status != "complete" or not _model_matches(head, model):
            continue
        wanted = (
            (head.kind == "roofline" and profile is None)
            or (head.kind == "load" and not capacities)
            or (head.kind == "bench" and not bench)
        )
        if not wanted:
            continue
        found = _evidence_of_run(store.get_run(head.id))
        if found.profile is not None and profile is None:
            profile, sources = found.profile, [*sources, f"roofline run {head.id}"]
        if found.capacities and not capacities:
            capacities, sources = found.capacities, [*sources, f"load run {head.id}"]
        if found.bench and not bench:
            bench, sources = found.bench, [*sources, f"bench run {head.id}"]
    return model, Evidence(
        profile=profile, capacities=capacities, bench=bench, sources=tuple(sources)
    )


def _with_node_types(store_path: Path | None, request: PlanRequest, evidence: Evidence) -> Evidence:
    """``evidence`` plus the ``--run``'s results of each mapped node type, as measured
    capacity of its catalog instance."""
    from accelscope.sweep.driver import latest_by_key  # imports the sweep's worker (torch)

    if not request.run_id or store_path is None or not store_path.exists():
        raise BadInputError(
            "--node-type needs --run ID: the bench run measured with --executor ray"
        )
    with ResultStore(store_path) as store:
        run = store.get_run(request.run_id)
    present = sorted({r.spec.node_type for r in run.results if r.spec.node_type})
    by_instance: dict[str, tuple[BenchFigure, ...]] = {}
    for instance, node_type in request.node_types:
        figures = bench_figures(latest_by_key(run.results), node_type)
        if not figures:
            raise BadInputError(
                f"run {run.id} has no successful result of node type {node_type} "
                f"(node types there: {', '.join(present) or 'none, it ran on one machine'})"
            )
        by_instance[instance] = figures
    return replace(
        evidence,
        by_instance=by_instance,
        sources=(
            *evidence.sources,
            *(f"run {run.id} on node type {n} as {i}" for i, n in request.node_types),
        ),
    )


def _validate(request: PlanRequest) -> None:
    if not request.model and not request.run_id:
        raise BadInputError("name the model (--model NAME) or a stored run (--run ID)")
    if request.model and request.run_id:
        raise BadInputError("give --model or --run, not both")
    if request.min_instances < 0:
        raise BadInputError(f"--min-instances must be 0 or more, got {request.min_instances}")
    if request.sla_p99_s <= 0:
        raise BadInputError("the p99 SLA must be positive")


def store_plan_document(
    store_path: Path | None,
    model: str,
    settings: dict[str, Any],
    document: dict[str, Any],
    environment: Environment | None,
    command_line: str | None,
) -> CommandRun:
    """Store one ``plan`` document as a run (nothing when ``store_path`` is None), for every
    plan mode: capacity, memory, api and llm."""
    # collected only if the run is stored: an estimate printed needs no GPU probe (torch)
    env = environment or collect_environment
    run = CommandRun(
        RUN_KIND, model, env, settings, store_path=store_path, command_line=command_line
    )
    with run:
        run.add_document(DOCUMENT_KIND, document)
    return run


def plan_capacity(
    request: PlanRequest,
    *,
    store_path: Path | None = DEFAULT_STORE_PATH,
    save: bool = True,
    environment: Environment | None = None,
    catalog: Catalog | None = None,
    command_line: str | None = None,
) -> PlanOutcome:
    """Plan the fleet for a model from what the store (or ``--profile``) knows about it."""
    _validate(request)
    traffic = load_traffic(request.traffic)
    catalog = catalog or load_catalog(request.catalog_files)
    for name in (*request.only, *((request.here,) if request.here else ())):
        catalog.get(name)
    check_paths(store_path, request.report_path)
    model, evidence = request.model or "", Evidence()
    fleet: tuple[str, tuple[FleetClass, ...]] | None = None
    if store_path is not None and store_path.exists():
        with ResultStore(store_path) as store:
            if request.fleet_run is not None:  # bad input is refused before any work
                fleet = fleet_from_store(store, request.fleet_run)
            model, evidence = _gather(store, request)
    elif request.run_id or request.fleet_run:
        wanted = request.run_id or request.fleet_run
        raise BadInputError(f"no results store at {store_path}: cannot read run {wanted}")
    if request.profile_file is not None:
        profile = _profile_from_file(request.profile_file)
        evidence = replace(
            evidence,
            profile=profile,
            sources=(*evidence.sources, f"profile file {request.profile_file}"),
        )
    if request.model and evidence.profile is None:  # count the zoo model's work (torch)
        from accelscope.roofline.static_work import count_static_work

        counted = count_static_work(request.model)
        evidence = replace(evidence, static=counted.work, static_missing=counted.missing)
    if request.node_types:
        evidence = _with_node_types(store_path, request, evidence)
    if request.capacity_qps is not None:
        evidence = replace(
            evidence, given_qps=request.capacity_qps, sources=(*evidence.sources, "--capacity")
        )
    settings = PlanSettings(request.sla_p99_s, request.headroom, request.min_instances)
    plan = build_plan(
        model,
        catalog,
        traffic,
        settings,
        evidence,
        request.here,
        request.only,
        energy_price=request.energy_price,
    )
    document = plan.to_dict()
    if fleet is not None:
        document["fleet"] = recover_document(plan.options, fleet[1], catalog, fleet[0])
    run = store_plan_document(
        store_path if save else None,
        model,
        dump(settings),
        document,
        environment,
        command_line,
    )
    html = render_plan_report(document, title=f"accelscope plan: {model}")
    report = run.write_report(html, request.report_path)
    return PlanOutcome(
        document=document, run_id=run.run_id, store_path=run.stored_path, report_path=report
    )


def plan_memory(
    request: MemoryRequest,
    *,
    store_path: Path | None = None,
    environment: Environment | None = None,
    command_line: str | None = None,
) -> PlanOutcome:
    """Memory to serve an LLM config at a context and batch; GPU fit and max concurrency."""
    if request.batch <= 0:
        raise BadInputError(f"--batch must be positive, got {request.batch}")
    config = load_model_config(request.config)
    shape = shape_from_config(config, str(request.config))
    catalog = load_catalog(request.catalog_files)
    check_paths(store_path)
    estimate = estimate_memory(
        shape,
        context=request.context_tokens,
        batch=request.batch,
        precision=request.precision,
        catalog=catalog,
        kv_precision=request.kv_precision,
        origin=str(request.config),
    )
    document = dump(estimate)
    name = str(config.get("_name_or_path") or request.config)
    settings = {"mode": "memory"}
    run = store_plan_document(store_path, name, settings, document, environment, command_line)
    return PlanOutcome(document=document, run_id=run.run_id, store_path=run.stored_path)


def plan_api(
    request: ApiRequest,
    *,
    store_path: Path | None = None,
    environment: Environment | None = None,
    command_line: str | None = None,
    runs_store: Path = DEFAULT_STORE_PATH,
) -> PlanOutcome:
    """API bill vs renting ``request.instance`` at the measured throughput (typed, or an
    ``llm`` run's goodput at its SLO read from ``runs_store``); break-even."""
    catalog = load_catalog(request.catalog_files)
    instance = catalog.get(request.instance)
    check_paths(store_path)
    if (request.throughput_tokens_per_s is None) == (request.from_run is None):
        raise BadInputError("give --throughput or --from-run (an llm run), not both")
    measured: LlmCapacity | None = None
    if request.from_run is not None:
        measured, basis = llm_capacity(request.from_run, runs_store)
        prompt_share = (measured.prompt_tokens_mean or 0.0) / (measured.output_tokens_mean or 1.0)
        throughput = (measured.good_output_tokens_per_s or 0.0) * (1.0 + prompt_share)
    else:
        assert request.throughput_tokens_per_s is not None
        throughput, basis = request.throughput_tokens_per_s, "given (--throughput), measured by you"
    comparison = compare_api(
        tokens_per_month=request.tokens_per_month,
        output_share=request.output_share,
        input_price=request.input_price,
        output_price=request.output_price,
        instance=instance.type,
        price_per_hour=instance.price_usd_per_hour,
        throughput_tokens_per_s=throughput,
        throughput_basis=basis,
        headroom=request.headroom,
    )
    document = dump(comparison)
    if measured is not None:
        good = measured.good_output_tokens_per_s or 0.0
        document["from_run"] = request.from_run
        document["good_output_tokens_per_s"] = good
        document["usd_per_million_good_output_tokens"] = (
            instance.price_usd_per_hour / (good * 3600.0) * 1e6
        )
        document["slo"] = measured.slo.model_dump(mode="json") if measured.slo else {}
    settings = {"mode": "api"}
    run = store_plan_document(
        store_path, instance.type, settings, document, environment, command_line
    )
    return PlanOutcome(document=document, run_id=run.run_id, store_path=run.stored_path)


def llm_tpot_points(run_id: str, store_path: Path) -> tuple[TpotPoint, ...]:
    """The median TPOT per concurrency of an ``llm`` run's trials at a fixed concurrency that
    completed requests with a positive TPOT (a rate trial has no concurrency; a TPOT of 0 is a
    server that sent its tokens in one chunk), the median over trials at one concurrency."""
    from accelscope.llm.documents import LlmTrial
    from accelscope.plan.projection.llm_serving import TpotPoint

    with ResultStore(store_path) as store:
        run = store.get_run(run_id)
    by_concurrency: dict[int, list[float]] = {}
    for payload in run.documents_of(LlmTrial.kind):
        trial = LlmTrial.from_payload(payload, f"run {run.id}'s llm trial")
        concurrency = trial.arrivals.concurrency
        tpot = trial.summary.metrics.tpot_s.p50
        if concurrency is None or not trial.summary.completed or not tpot or tpot <= 0:
            continue
        by_concurrency.setdefault(concurrency, []).append(tpot)
    return tuple(TpotPoint(c, statistics.median(v)) for c, v in sorted(by_concurrency.items()))


def llm_capacity(run_id: str, store_path: Path) -> tuple[LlmCapacity, str]:
    """The ``llm-capacity`` document of an ``llm`` run, and the throughput basis it gives."""
    if not store_path.exists():
        raise BadInputError(f"no results store at {store_path}: cannot read run {run_id}")
    with ResultStore(store_path) as store:
        run = store.get_run(run_id)
    payloads = run.documents_of(LlmCapacity.kind)
    if not payloads:
        raise BadInputError(
            f"run {run.id} ({run.kind}) has no LLM capacity: run `accelscope llm ... --capacity "
            "rate --slo ...` first"
        )
    found = LlmCapacity.from_payload(payloads[-1], f"run {run.id}'s llm capacity")
    if not found.valid or not found.good_output_tokens_per_s:
        raise BadInputError(f"run {run.id}: no load met the SLO, so there is no goodput to price")
    slo = found.slo.label if found.slo else "no SLO"
    basis = (
        f"measured by llm run {run.id}: {found.good_output_tokens_per_s:.4g} good output "
        f"tokens/s at {slo} (capacity {found.capacity:g} "
        f"{found.unit}), plus their prompt tokens; the run's server is taken as this instance"
    )
    return found, basis
