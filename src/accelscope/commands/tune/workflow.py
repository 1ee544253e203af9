"""``accelscope tune``: the LLM server configuration with the most good tokens per second at
the SLO, measured, confirmed and quality-guarded.

Everything is checked before a server starts (the engine and its flags, every value of the
space, the workload, the SLO, a free port). A server an earlier, killed tune left running is
named and stopped. Then the tuner (:class:`accelscope.tune.tuner.Tuner`) measures each
configuration, reference first, as its own server, and this workflow commits each
``tune-config`` and ``tune-round`` document as the tuner hands it on: ``--resume`` measures
again nothing stored. The run's ``tune`` document, the winner's ``llm-capacity`` and the report
close it. Returns data; never prints.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from accelscope.commands._lifecycle import CommandRun, check_paths
from accelscope.commands.tune.html import render_tune_report
from accelscope.documents import LlmCapacity
from accelscope.errors import BadInputError
from accelscope.hardware.fingerprint import Environment, collect_environment
from accelscope.llm.documents import Arrivals, CapacitySummary, Slo
from accelscope.llm.server_process import leftover_servers, stop_leftover
from accelscope.llm.workload import Workload, WorkloadSource, load_tokenizer
from accelscope.plan.catalog import load_catalog
from accelscope.processes import free_port
from accelscope.store.sqlite import DEFAULT_STORE_PATH, ResultStore, RunRecord
from accelscope.tune.documents import (
    CapacityKind,
    SearchChoice,
    TuneConfig,
    TuneRound,
    TuneRun,
    TuneSettings,
)
from accelscope.tune.engines import ENGINES, Engine, EngineSettings, EngineSpec
from accelscope.tune.quality import DEFAULT_THRESHOLD
from accelscope.tune.search import Budget, Load, Strategy, choose_strategy
from accelscope.tune.space import Space
from accelscope.tune.tuner import Tuned, Tuner, TunerSettings

__all__ = ["TuneOutcome", "TuneRequest", "tune"]

RUN_KIND = "tune"
Events = Callable[[str], None]


@dataclass(frozen=True, kw_only=True)
class TuneRequest:
    """Everything ``tune`` needs, checked before any server starts."""

    engine: str
    model: Path
    spaces: tuple[str, ...] = ()
    configs: tuple[str, ...] = ()
    reference: str | None = None
    server_command: str | None = None
    health_path: str = "/health"
    served_name: str | None = None
    quality_flags: tuple[str, ...] = ()
    vllm_python: Path | None = None
    engine_args: tuple[str, ...] = ()
    kv_cache_gib: float | None = None
    workload: WorkloadSource = field(default_factory=Workload)
    tokenizer: Path | None = None
    ignore_eos: bool | None = None
    """None: the engine's default (on, except for transformers serve, which refuses it)."""
    fixed: Arrivals | None = None
    """A fixed load to measure every configuration at; None: a capacity search."""
    capacity: CapacityKind = "concurrency"
    capacity_start: float | None = None
    capacity_trials: int = 6
    requests: int | None = None
    slo: Slo | None = None
    search: SearchChoice = "auto"
    grid_max: int = 8
    finalists: int = 3
    budget_s: float | None = None
    confirm_rounds: int = 2
    quality_threshold: float = DEFAULT_THRESHOLD
    quality_tokens: int = 32
    startup_timeout_s: float = 600.0
    timeout_s: float = 300.0
    instance: str | None = None
    catalog_files: tuple[Path, ...] = ()
    port_range: tuple[int, int] | None = None
    resume: bool = False
    api_key: str | None = None
    report_path: Path | None = None

    def settings(self, engine: EngineSettings) -> TuneSettings:
        """The stored run's settings, with what the engine decided before the first start."""
        return TuneSettings(
            engine=self.engine,
            model=str(self.model),
            spaces=list(self.spaces),
            configs=list(self.configs),
            reference=self.reference,
            server_command=self.server_command,
            engine_args=list(self.engine_args),
            workload=self.workload.summary(),
            fixed=self.fixed,
            capacity=self.capacity,
            slo=self.slo,
            search=self.search,
            budget_s=self.budget_s,
            confirm_rounds=self.confirm_rounds,
            quality_threshold=self.quality_threshold,
            kv_cache_gib=engine.kv_cache_gib,
            kv_cache=engine.kv_cache,
        )

    def engine_spec(self, cache: Path) -> EngineSpec:
        """What the engine is built from (``cache``: where it keeps its ``--help``)."""
        return EngineSpec(
            model=self.model,
            cache=cache,
            engine_args=self.engine_args,
            vllm_python=self.vllm_python,
            kv_cache_gib=self.kv_cache_gib,
            server_command=self.server_command,
            health_path=self.health_path,
            served_name=self.served_name,
            quality_flags=self.quality_flags,
        )


@dataclass(frozen=True, kw_only=True)
class TuneOutcome:
    """The run's document and where it went."""

    document: TuneRun
    run_id: str | None
    store_path: Path | None
    report_path: Path | None


def _validate(request: TuneRequest, spec: EngineSpec) -> type[Engine]:
    """The engine class of ``request`` once every setting is checked (one line otherwise)."""
    kind = ENGINES.get(request.engine)
    if kind is None:
        raise BadInputError(f"--engine {request.engine!r}: give one of {', '.join(ENGINES)}")
    kind.check(spec)
    if request.slo is None or not request.slo.terms():
        raise BadInputError(
            "tune maximises good tokens per second at an SLO: give --slo, e.g. "
            "--slo ttft=1s,tpot=100ms"
        )
    if request.capacity not in ("rate", "concurrency"):
        raise BadInputError(f"--capacity {request.capacity!r}: give rate or concurrency")
    if request.workload.kind == "trace":
        raise BadInputError("tune measures a rate or a concurrency; a --trace replay is llm's")
    if request.confirm_rounds < 0 or request.capacity_trials < 1:
        raise BadInputError("--confirm-rounds must be >= 0 and --capacity-trials >= 1")
    if not 0.0 < request.quality_threshold <= 1.0:
        raise BadInputError("--quality-threshold must be in (0, 1], e.g. 0.9")
    if not math.isfinite(request.startup_timeout_s) or request.startup_timeout_s <= 0:
        raise BadInputError("--startup-timeout must be positive")
    return kind


def _port(request: TuneRequest) -> Callable[[], int]:
    """Where each server listens: :func:`free_port`, or the first free port of ``--port-range``
    (the range checked now: one line when none of it is free)."""
    if request.port_range is None:
        return free_port
    low, high = request.port_range
    if not 0 < low <= high < 65536:
        raise BadInputError(f"--port-range {low}-{high}: give LOW-HIGH within 1-65535")

    def pick() -> int:
        try:
            return free_port(within=range(low, high + 1))
        except OSError:
            raise BadInputError(f"--port-range {low}-{high}: no free port in the range") from None

    pick()
    return pick


def _space(request: TuneRequest, engine: Engine) -> Space:
    """The space, checked against the engine (every configuration's command built once)."""
    space = Space.parse(request.spaces, request.configs, request.reference, engine.convert)
    if not engine.has_defaults and not space.reference.values:
        # an engine with no defaults of its own (a template): the first configuration is the
        # reference
        space = dataclasses.replace(space, reference=space.candidates()[0])
    for config in space.configurations():
        engine.command(config)  # a template placeholder without a value fails here
    return space


def _prior(store_path: Path | None, request: TuneRequest) -> tuple[str, RunRecord]:
    if store_path is None or not store_path.exists():
        raise BadInputError("--resume needs the store of the interrupted tune (no store found)")
    with ResultStore(store_path) as store:
        run_id = store.latest_unfinished_run(RUN_KIND, str(request.model))
        if run_id is None:
            raise BadInputError(f"nothing to resume: no unfinished tune of {request.model}")
        run = store.get_run(run_id)
    stored = TuneSettings.from_payload(run.settings, f"run {run_id}'s settings")
    if stored.engine != request.engine or stored.spaces != list(request.spaces):
        raise BadInputError(
            f"cannot resume run {run_id} with another engine or space: give the same --engine "
            "and --space flags"
        )
    return run_id, run


def tune(
    request: TuneRequest,
    *,
    store_path: Path | None = DEFAULT_STORE_PATH,
    environment: Environment | None = None,
    command_line: str | None = None,
    events: Events | None = None,
) -> TuneOutcome:
    """Measure every configuration of the space; store and return the run's document."""
    base_dir = (store_path or DEFAULT_STORE_PATH).parent
    spec = request.engine_spec(base_dir / "engines")
    kind = _validate(request, spec)
    check_paths(store_path, request.report_path)
    say = events or (lambda _: None)
    engine = kind.build(spec)
    space = _space(request, engine)
    strategy = choose_strategy(
        len(space.candidates()), request.search, request.grid_max, request.finalists
    )
    port = _port(request)
    budget = Budget(request.budget_s)
    price = None
    if request.instance is not None:
        price = load_catalog(request.catalog_files).get(request.instance).price_usd_per_hour

    tokenizer = load_tokenizer(request.tokenizer)
    resume_id, prior = _prior(store_path, request) if request.resume else (None, None)
    registry = base_dir / "servers"
    warnings: list[str] = []
    for leftover in leftover_servers(registry):
        stopped = stop_leftover(leftover, timeout_s=5.0)  # it outlived one SIGTERM already
        done = "stopped" if stopped else "could not stop"
        line = f"{done} a server an earlier tune left running: {leftover.describe()}"
        warnings.append(line)
        say(line)
    engine.prepare(space.flags())  # after the leftovers are gone: their memory is free again
    for line in engine.notes:
        say(line)
    env = environment or collect_environment()
    run = CommandRun(
        RUN_KIND,
        str(request.model),
        env,
        request.settings(engine.settings()).model_dump(mode="json"),
        store_path=store_path,
        command_line=command_line,
        resume_id=resume_id,
        kept="the configurations measured",
        resume_hint="--resume continues it, measuring nothing stored again",
    )
    assert request.slo is not None  # _validate refused a request without one
    tuner = Tuner(
        settings=TunerSettings(
            workload=request.workload,
            slo=request.slo,
            load=Load(
                fixed=request.fixed,
                capacity=request.capacity,
                capacity_start=request.capacity_start,
            ),
            capacity_trials=request.capacity_trials,
            requests=request.requests,
            timeout_s=request.timeout_s,
            startup_timeout_s=request.startup_timeout_s,
            ignore_eos=engine.ignores_eos if request.ignore_eos is None else request.ignore_eos,
            api_key=request.api_key,
            quality_threshold=request.quality_threshold,
            quality_tokens=request.quality_tokens,
            confirm_rounds=request.confirm_rounds,
            price_usd_per_hour=price,
        ),
        engine=engine,
        space=space,
        port=port,
        registry=registry,
        tokenizer=tokenizer,
        on_config=lambda found: run.add_document(TuneConfig.kind, found.model_dump(mode="json")),
        on_round=lambda found: run.add_document(TuneRound.kind, found.model_dump(mode="json")),
        events=say,
    )
    if prior is not None:
        for payload in prior.documents_of(TuneConfig.kind):
            found = TuneConfig.from_payload(payload, f"run {resume_id}'s tune-config")
            tuner.stored[found.key] = found
        tuner.rounds = [
            TuneRound.from_payload(p, f"run {resume_id}'s tune-round")
            for p in prior.documents_of(TuneRound.kind)
        ]
        say(f"resuming run {resume_id}: {len(tuner.stored)} configurations already measured")
    with run:
        tuned = tuner.run(strategy, budget)
        document = _document(request, engine, space, strategy, tuned, warnings, price)
        run.add_document(TuneRun.kind, document.model_dump(mode="json"))
        if tuned.ranking.winner is not None:
            capacity = _capacity(document, tuned.ranking.winner, env)
            run.add_document(LlmCapacity.kind, capacity.model_dump(mode="json"))
    html = render_tune_report(document, title=f"accelscope tune: {request.model}")
    report = run.write_report(html, request.report_path)
    return TuneOutcome(
        document=document, run_id=run.run_id, store_path=run.stored_path, report_path=report
    )


def _document(
    request: TuneRequest,
    engine: Engine,
    space: Space,
    strategy: Strategy,
    tuned: Tuned,
    warnings: list[str],
    price_usd_per_hour: float | None,
) -> TuneRun:
    """The run's ``tune`` document."""
    ranking = tuned.ranking
    winner = ranking.winner
    notes = [*engine.notes, *([ranking.nothing_ranked] if ranking.nothing_ranked else [])]
    warnings = list(warnings)
    for text, warn in _caches_against_optimum(ranking.configs, winner):
        (warnings if warn else notes).append(text)
    warnings.extend(_invalid_agentic_steps(ranking.configs))
    return TuneRun(
        engine=engine.name,
        engine_found=engine.describe(),
        model=str(request.model),
        served_model=engine.served_model,
        space=space.describe(),
        strategy=strategy.name,
        strategy_why=strategy.why,
        skipped=tuned.skipped,
        budget_s=request.budget_s,
        slo=request.slo,
        slo_label=request.slo.label if request.slo else "none",
        workload=request.workload.summary(),
        objective=(
            f"good output tokens/s at {request.fixed.label}"
            if request.fixed
            else f"good output tokens/s at the highest {request.capacity} that meets the SLO"
        ),
        configs=ranking.configs,
        winner=winner.key if winner else None,
        winner_launch=winner.launch if winner else "",
        verdict=ranking.verdict,
        instance=request.instance,
        price_usd_per_hour=price_usd_per_hour,
        notes=notes,
        warnings=warnings,
    )


def _caches_against_optimum(
    configs: Sequence[TuneConfig], winner: TuneConfig | None
) -> list[tuple[str, bool]]:
    """An agentic workload's prefix cache at each measured configuration's load, set against
    the best a cache could do on the same sessions (``llm.prefix_optimum``), the winner's
    first: ``(text, a warning)``, a warning when the winner is past the eviction cliff (a note
    otherwise, and for the others). A configuration is past the cliff when its hit
    rate falls under the bound of every prefix kept (the reuse eviction took, whatever the
    policy) or of the LRU optimum under its own capacity (the cache does worse than its size
    allows); the text says which. Beside the winner, since a winner past the cliff wins on a
    cache already evicting the sessions' shared prefixes; beside the others, since the cliff is
    often what separates them. Empty: not an agentic workload, or no hit rate measured."""
    ordered = sorted(configs, key=lambda c: c is not winner)
    found: list[tuple[str, bool]] = []
    for config in ordered:
        point = config.point
        step = point.summary.agentic if point is not None else None
        cache = step.cache if step is not None else None
        if point is None or cache is None or cache.measured is None:
            continue
        kept = cache.kept_share
        who = "the winner" if config is winner else config.key
        if config.role == "reference":
            who += " (the reference)"
        text = (
            f"{who}'s prefix cache at {point.label}: hit rate {cache.measured:.2f}; every "
            f"prefix kept {cache.every_prefix_kept:.2f}"
            + ("" if kept is None else f" (x{kept:.2f})")
        )
        if cache.reference == "lru" and cache.lru is not None and cache.ratio is not None:
            blocks = f" {cache.capacity_blocks} blocks" if cache.capacity_blocks else ""
            text += f", LRU under its{blocks} {cache.lru:.2f} (x{cache.ratio:.2f})"
        lost = kept is not None and kept < cache.bound
        if not (lost or cache.below_bound):
            found.append((text + f"; above the eviction cliff's bound (x{cache.bound:g})", False))
            continue
        capacity_short = cache.lru is not None and cache.lru < cache.bound * cache.every_prefix_kept
        why = (
            "its KV capacity cannot hold the sessions' shared prefixes at this concurrency: "
            "more KV capacity or fewer sessions in flight would keep more"
            if capacity_short or not cache.below_bound
            else "the cache keeps less than its capacity allows (its eviction order, or "
            "blocks held by requests in flight)"
        )
        text += f"; past the eviction cliff (under x{cache.bound:g}): {why}"
        found.append((text, config is winner))
    return found


def _invalid_agentic_steps(configs: Sequence[TuneConfig]) -> list[str]:
    """A warning per configuration whose agentic step the validity gate failed
    (``llm.jobs``): an ``llm`` run reports no job figures for it, and the ranking that used its
    good tokens/s says so rather than hide it."""
    found = []
    for config in configs:
        point = config.point
        step = point.summary.agentic if point is not None else None
        if point is None or step is None or step.gate.valid:
            continue
        why = "; ".join(f.text for f in step.gate.failures) or "invalid"
        found.append(
            f"{config.key} at {point.label}: the agentic validity gate failed ({why}); its "
            "good tokens/s ranks it, but an llm run would report no job figures there"
        )
    return found


def _capacity(document: TuneRun, winner: TuneConfig, env: Environment) -> LlmCapacity:
    """The winner's ``llm-capacity``: its capacity search, else the fixed load it was measured
    at with the goodput measured there (valid when that trial met the SLO)."""
    point = winner.point
    goodput = point.summary.goodput if point else None
    tokens = point.summary.tokens if point else None
    concurrency = bool(point and point.arrivals.concurrency)
    measured = winner.capacity or CapacitySummary(
        capacity=winner.load,
        unit="concurrency" if concurrency else "req/s",
        good_output_tokens_per_s=goodput.output_tokens_per_s if goodput else None,
        good_requests_per_s=goodput.requests_per_s if goodput else None,
        output_tokens_mean=tokens.output_mean if tokens else None,
        prompt_tokens_mean=tokens.prompt_mean if tokens else None,
    )
    return measured.document(
        model=document.model,
        target={"kind": "tune winner", "engine": document.engine, "config": winner.key},
        slo=document.slo,
        environment_fingerprint=env.fingerprint(),
        local_server=True,
        valid=goodput is not None and point is not None and point.summary.slo_state == "met",
    )
