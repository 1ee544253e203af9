"""``accelscope tune``: the LLM server configuration with the most good tokens per second at
the SLO, measured, confirmed and quality-guarded.

Everything is checked before a server starts (the engine and its flags, every value of the
space, the workload, the SLO, a free port). A server an earlier, killed tune left running is
named and stopped. Then each configuration, reference first, is started as its own server
(:class:`~accelscope.llm.server_process.ServerProcess`: own process group, health wait,
always stopped, also on Ctrl-C and ``kill -9`` of accelscope), checked against the reference's
answers when it can change them, measured with ``llm``'s harness, and committed as one
``tune-config`` document: ``--resume`` measures again nothing stored. The best two (and the
reference) are then measured again, alternately, each in a fresh server, and the verdict is the
ratio of their goodput with its 95 % interval. Returns data; never prints.
"""

from __future__ import annotations

import dataclasses
import math
import resource
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from accelscope.commands._lifecycle import CommandRun, check_paths
from accelscope.commands.tune.html import render_tune_report
from accelscope.documents import LlmCapacity
from accelscope.errors import BadInputError, one_line
from accelscope.hardware.fingerprint import Environment, collect_environment
from accelscope.llm.client import OpenAIEndpoint
from accelscope.llm.documents import Arrivals, CapacitySummary, LlmTrial, Slo
from accelscope.llm.harness import Harness, arrivals_at, capacity_summary
from accelscope.llm.server_process import (
    ServerProcess,
    ServerStartError,
    leftover_servers,
    stop_leftover,
)
from accelscope.llm.workload import TokenCounter, Workload, WorkloadSource, load_tokenizer
from accelscope.plan.catalog import load_catalog
from accelscope.processes import free_port
from accelscope.store.sqlite import DEFAULT_STORE_PATH, ResultStore
from accelscope.tune.documents import TuneConfig, TuneRound, TuneRun
from accelscope.tune.engines import (
    ENGINES,
    Engine,
    FailureKind,
    TemplateEngine,
    TransformersEngine,
    VllmEngine,
    classify_failure,
)
from accelscope.tune.quality import DEFAULT_THRESHOLD, check_quality, reference_answers
from accelscope.tune.search import Budget, Strategy, choose_strategy
from accelscope.tune.space import Config, Space
from accelscope.tune.verdict import confirmation_order, verdict

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
    """None: on for vllm and template servers, off for transformers serve (which refuses it)."""
    fixed: Arrivals | None = None
    """A fixed load to measure every configuration at; None: a capacity search."""
    capacity: str = "concurrency"
    capacity_start: float | None = None
    capacity_trials: int = 6
    requests: int | None = None
    slo: Slo | None = None
    search: str = "auto"
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

    def settings(self) -> dict[str, Any]:
        """The stored run's settings (JSON-ready)."""
        return {
            "engine": self.engine,
            "model": str(self.model),
            "spaces": list(self.spaces),
            "configs": list(self.configs),
            "reference": self.reference,
            "server_command": self.server_command,
            "engine_args": list(self.engine_args),
            "workload": self.workload.summary().model_dump(mode="json"),
            "fixed": self.fixed.model_dump(mode="json") if self.fixed else None,
            "capacity": self.capacity,
            "slo": self.slo.model_dump(mode="json") if self.slo else None,
            "search": self.search,
            "budget_s": self.budget_s,
            "confirm_rounds": self.confirm_rounds,
            "quality_threshold": self.quality_threshold,
        }


@dataclass(frozen=True, kw_only=True)
class TuneOutcome:
    """The run's document and where it went."""

    document: TuneRun
    run_id: str | None
    store_path: Path | None
    report_path: Path | None


def _validate(request: TuneRequest) -> None:
    if request.engine not in ENGINES:
        raise BadInputError(f"--engine {request.engine!r}: give one of {', '.join(ENGINES)}")
    if request.engine == "template" and not request.server_command:
        raise BadInputError("--engine template needs --server-command 'CMD ... {port} ...'")
    if request.server_command and request.engine != "template":
        raise BadInputError("--server-command is the template engine's: add --engine template")
    local = request.engine in ("vllm", "transformers")
    if local and not (request.model.is_dir() and (request.model / "config.json").is_file()):
        raise BadInputError(
            f"--model {request.model}: not a model directory (no config.json); give the "
            "directory the server loads"
        )
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


def _engine(request: TuneRequest, cache: Path) -> Engine:
    if request.engine == "vllm":
        return VllmEngine(
            request.model,
            python=request.vllm_python,
            extra_args=request.engine_args,
            cache=cache,
            kv_cache_gib=request.kv_cache_gib,
        )
    if request.engine == "transformers":
        return TransformersEngine(request.model, extra_args=request.engine_args, cache=cache)
    assert request.server_command is not None
    return TemplateEngine(
        request.model,
        template=request.server_command,
        health_path=request.health_path,
        served_name=request.served_name,
        quality_flags=request.quality_flags,
    )


def _port(request: TuneRequest) -> Callable[[], int]:
    """A free port in ``--port-range`` (checked now: one line when none is free)."""
    if request.port_range is None:
        return free_port
    low, high = request.port_range
    if not 0 < low <= high < 65536:
        raise BadInputError(f"--port-range {low}-{high}: give LOW-HIGH within 1-65535")

    def pick() -> int:
        import socket

        for port in range(low, high + 1):
            with socket.socket() as probe:
                try:
                    probe.bind(("127.0.0.1", port))
                except OSError:
                    continue
                return port
        raise BadInputError(f"--port-range {low}-{high}: no free port in the range")

    pick()
    return pick


@dataclass
class _Tuner:
    """The state of one tune while it measures (see :func:`tune`)."""

    request: TuneRequest
    engine: Engine
    space: Space
    run: CommandRun
    registry: Path
    port: Callable[[], int]
    tokenizer: TokenCounter | None
    budget: Budget
    say: Events
    stored: dict[str, TuneConfig] = field(default_factory=dict)
    rounds: list[TuneRound] = field(default_factory=list)
    price_per_hour: float | None = None

    @property
    def reference(self) -> TuneConfig | None:
        return self.stored.get(self.space.reference.key)

    def server(self, config: Config) -> ServerProcess:
        return ServerProcess(
            self.engine.command(config),
            name=f"{self.engine.name} ({config.key})",
            port=self.port(),
            env=self.engine.environment(),
            health_path=self.engine.health_path,
            startup_timeout_s=self.request.startup_timeout_s,
            registry=self.registry,
        )

    def target(self, server: ServerProcess) -> OpenAIEndpoint:
        ignore = self.request.ignore_eos
        if ignore is None:
            ignore = self.engine.name != "transformers"
        return OpenAIEndpoint(
            server.url,
            self.engine.served_model,
            api_key=self.request.api_key,
            tokenizer=self.tokenizer,
            ignore_eos=ignore,
        )

    def harness(self, server: ServerProcess, count: int | None = None) -> Harness:
        return Harness(
            target=self.target(server),
            workload=self.request.workload,
            slo=self.request.slo,
            tokenizer=self.tokenizer,
            metrics_url=server.url,
            count=count or self.request.requests,
            timeout_s=self.request.timeout_s,
        )

    def keep(self, config: TuneConfig) -> TuneConfig:
        self.stored[config.key] = config
        self.run.add_document(TuneConfig.kind, config.model_dump(mode="json"))
        return config

    def measure(self, config: Config, *, phase: str, load: Arrivals | None) -> TuneConfig:
        """Start ``config``'s server, guard its quality, measure it, stop it: always."""
        role = "reference" if config.key == self.space.reference.key else "candidate"
        began, cpu = time.monotonic(), time.process_time()
        base: dict[str, Any] = {
            "key": config.key,
            "values": config.as_dict(),
            "role": role,
            "phase": phase,
            "command": self.engine.command(config),
            "launch": self.engine.launch_line(config),
        }
        self.say(f"{config.key}: starting {self.engine.name}")
        server = self.server(config)
        try:
            try:
                server.start()
            except ServerStartError as error:
                kind = classify_failure(
                    error.server_exit,
                    f"{error.first_error}\n{error.log_tail}",
                    timed_out=error.server_exit is None,
                )
                return self._done(base, began, cpu, status="failed", failure=kind,
                                  why=error.message, log_tail=error.log_tail,
                                  first_error=error.first_error)  # fmt: skip
            base["startup_s"] = server.startup_s
            self.say(f"{config.key}: ready in {server.startup_s or 0:.0f} s; measuring")
            found = self._measure_running(config, server, base, load)
        finally:
            server.stop()
        if "log_tail" in found:  # the server's last words, once it is gone
            found["log_tail"] = server.final_log_tail
        return self._done(base, began, cpu, **found)

    def _measure_running(
        self, config: Config, server: ServerProcess, base: dict[str, Any], load: Arrivals | None
    ) -> dict[str, Any]:
        target = self.target(server)
        try:
            target.check()
        except BadInputError as error:
            return {
                "status": "failed",
                "failure": FailureKind.NO_ANSWER,
                "why": error.message,
                "log_tail": server.log_tail(),
            }
        reference = self.reference
        quality = answers = None
        if base["role"] == "reference":
            try:
                answers = reference_answers(
                    server.url,
                    self.engine.served_model,
                    max_tokens=self.request.quality_tokens,
                    api_key=self.request.api_key,
                )
            except RuntimeError as error:
                self.say(f"{config.key}: {error} (the quality guard cannot run)")
        elif self.engine.touches_quality(config, self.space.reference):
            if reference is None or reference.reference_answers is None:
                return {"status": "rejected", "why": "the reference has no answers to compare"}
            quality = check_quality(
                server.url,
                self.engine.served_model,
                reference.reference_answers,
                threshold=self.request.quality_threshold,
                tokenizer=self.tokenizer,
                api_key=self.request.api_key,
            )
            self.say(f"{config.key}: agreement with the reference {quality.agreement:.1%}")
            if not quality.passed:
                return {"status": "rejected", "why": quality.why, "quality": quality}
        harness = self.harness(server)
        capacity = None
        point: LlmTrial | None
        if load is not None:
            point = harness.trial(load)
        else:
            search = harness.capacity(
                self.request.capacity,
                start=self.request.capacity_start,
                max_trials=self.request.capacity_trials,
            )
            capacity = capacity_summary(search)
            point = next(
                (t for t in reversed(harness.trials) if t.arrivals.load == capacity.capacity),
                None,
            )
        died = not server.running() or not server.healthy()
        found: dict[str, Any] = {
            "status": "failed" if died else "measured",
            "capacity": capacity,
            "trials": harness.trials,
            "point": point.without_records() if point else None,
            "quality": quality,
            "reference_answers": answers,
            "server_config": next(
                (t.server_metrics.config for t in harness.trials if t.server_metrics.config), None
            ),
        }
        if died:
            found |= {
                "failure": FailureKind.DIED,
                "why": f"the server exited (code {server.exit_status()}) while it was measured",
                "log_tail": server.log_tail(),
            }
        if point is not None:
            goodput = point.summary.goodput
            throughput = point.summary.throughput
            found |= {
                "load": point.arrivals.load,
                "load_label": point.label,
                "goodput_tokens_per_s": goodput.output_tokens_per_s
                if goodput and (load is not None or (capacity and capacity.capacity))
                else None,
                "throughput_tokens_per_s": throughput.output_tokens_per_s if throughput else None,
            }
        if capacity is not None and capacity.capacity is None:
            found["goodput_tokens_per_s"] = None
            found["why"] = f"no load met the SLO ({capacity.stopped})"
        return found

    def _done(self, base: dict[str, Any], began: float, cpu: float, **found: Any) -> TuneConfig:
        wall = time.monotonic() - began
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        good = found.get("goodput_tokens_per_s")
        cost = None
        if self.price_per_hour is not None and good:
            cost = self.price_per_hour / (good * 3600.0) * 1e6
        if isinstance(found.get("failure"), FailureKind):
            found["failure"] = found["failure"].value
        config = TuneConfig(
            **base,
            **found,
            wall_s=wall,
            tuner_cpu_s=time.process_time() - cpu,
            tuner_peak_rss_bytes=peak,
            cost_per_million_good_tokens_usd=cost,
        )
        self.budget.record(base["phase"], wall)
        word = config.status if config.status != "measured" else "measured"
        detail = f": {config.why}" if config.why else ""
        goodput = (
            f", {config.goodput_tokens_per_s:,.1f} good tokens/s at {config.load_label}"
            if config.goodput_tokens_per_s is not None
            else ""
        )
        self.say(f"{config.key}: {word}{goodput}{detail}")
        return self.keep(config)

    def confirm_round(self, number: int, config: Config, load: Arrivals) -> TuneRound:
        """``config`` again, in a fresh server, at ``load``."""
        server = self.server(config)
        try:
            try:
                server.start()
            except ServerStartError as error:
                found = TuneRound(round=number, key=config.key, load_label=load.label,
                                  why=one_line(error.message))  # fmt: skip
            else:
                harness = self.harness(server)
                trial = harness.trial(load)
                goodput = trial.summary.goodput
                found = TuneRound(
                    round=number,
                    key=config.key,
                    load_label=load.label,
                    goodput_tokens_per_s=goodput.output_tokens_per_s if goodput else None,
                    startup_s=server.startup_s,
                    why=""
                    if server.running() and server.healthy()
                    else "the server died while it was measured",
                )
        finally:
            server.stop()
        self.rounds.append(found)
        self.run.add_document(TuneRound.kind, found.model_dump(mode="json"))
        value = found.goodput_tokens_per_s
        self.say(
            f"round {number}: {config.key}: "
            + (f"{value:,.1f} good tokens/s" if value is not None else f"no figure ({found.why})")
        )
        return found


def _prior(store_path: Path | None, request: TuneRequest) -> tuple[str | None, Any]:
    if store_path is None or not store_path.exists():
        raise BadInputError("--resume needs the store of the interrupted tune (no store found)")
    with ResultStore(store_path) as store:
        run_id = store.latest_unfinished_run(RUN_KIND, str(request.model))
        if run_id is None:
            raise BadInputError(f"nothing to resume: no unfinished tune of {request.model}")
        run = store.get_run(run_id)
    if run.settings.get("engine") != request.engine or run.settings.get("spaces") != list(
        request.spaces
    ):
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
    _validate(request)
    check_paths(store_path, request.report_path)
    say = events or (lambda _: None)
    base_dir = (store_path or DEFAULT_STORE_PATH).parent
    engine = _engine(request, base_dir / "engines")
    space = Space.parse(request.spaces, request.configs, request.reference, engine.convert)
    if isinstance(engine, TemplateEngine) and engine.fields and not space.reference.values:
        # a template has no defaults of its own: the first configuration is the reference
        space = dataclasses.replace(space, reference=space.candidates()[0])
    for config in space.configurations():
        engine.command(config)  # a template placeholder without a value fails here
    strategy = choose_strategy(len(space.candidates()), request.search, request.grid_max,
                               request.finalists)  # fmt: skip
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
        {**request.settings(), **engine.settings()},
        store_path=store_path,
        command_line=command_line,
        resume_id=resume_id,
        kept="the configurations measured",
        resume_hint="--resume continues it, measuring nothing stored again",
    )
    tuner = _Tuner(
        request=request,
        engine=engine,
        space=space,
        run=run,
        registry=registry,
        port=port,
        tokenizer=tokenizer,
        budget=budget,
        say=say,
        price_per_hour=price,
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
    skipped: list[str] = []
    with run:
        _search(tuner, strategy, skipped)
        document = _finish(tuner, strategy, skipped, warnings)
        run.add_document(TuneRun.kind, document.model_dump(mode="json"))
        winner = document.config(document.winner) if document.winner else None
        if winner is not None:
            run.add_document(LlmCapacity.kind, _capacity(document, winner, env))
    html = render_tune_report(document, title=f"accelscope tune: {request.model}")
    report = run.write_report(html, request.report_path)
    return TuneOutcome(
        document=document, run_id=run.run_id, store_path=run.stored_path, report_path=report
    )


def _search(tuner: _Tuner, strategy: Strategy, skipped: list[str]) -> None:
    request, space = tuner.request, tuner.space

    def measure(config: Config, phase: str, load: Arrivals | None) -> None:
        done = tuner.stored.get(config.key)
        if done is not None and (done.phase == "full" or phase == "screen"):
            return  # measured before (--resume)
        if not tuner.budget.fits(phase):
            skipped.append(f"{config.key} ({phase}): the --budget would run out")
            return
        tuner.measure(config, phase=phase, load=load)

    measure(space.reference, "full", request.fixed)
    candidates = [c for c in space.configurations() if c.key != space.reference.key]
    if strategy.name == "grid":
        for config in candidates:
            measure(config, "full", request.fixed)
        return
    reference = tuner.reference
    screen_load = request.fixed
    if screen_load is None and reference is not None and reference.load is not None:
        screen_load = arrivals_at(request.capacity, reference.load)
    if screen_load is None:
        screen_load = arrivals_at(request.capacity, request.capacity_start or 1.0)
    for config in candidates:
        measure(config, "screen", screen_load)
    screened = sorted(
        (tuner.stored[c.key] for c in candidates if c.key in tuner.stored),
        key=lambda c: -(c.goodput_tokens_per_s or -1.0),
    )
    finalists = [c for c in screened if c.usable][: strategy.finalists]
    for found in finalists:
        config = next(c for c in candidates if c.key == found.key)
        measure(config, "full", request.fixed)
    for found in screened:
        if found not in finalists and found.usable:
            skipped.append(f"{found.key}: screened only (not among the best {strategy.finalists})")


def _finish(tuner: _Tuner, strategy: Strategy, skipped: list[str], warnings: list[str]) -> TuneRun:
    request, space, engine = tuner.request, tuner.space, tuner.engine
    configs = [tuner.stored[c.key] for c in space.configurations() if c.key in tuner.stored]
    ranked = sorted(
        (c for c in configs if c.usable and c.phase == "full"),
        key=lambda c: -(c.goodput_tokens_per_s or 0.0),
    )
    notes: list[str] = list(engine.notes)
    result = None
    if ranked:
        best = ranked[0]
        runner = ranked[1] if len(ranked) > 1 else None
        reference = tuner.reference
        load = (
            arrivals_at(request.capacity, best.load)
            if request.fixed is None and best.load
            else request.fixed
        )
        keys = [best.key] + ([runner.key] if runner else [])
        if reference is not None and reference.usable and reference.key not in keys:
            keys.append(reference.key)
        by_key = {c.key: c for c in space.configurations()}
        if request.confirm_rounds and runner is not None and load is not None:
            for number, key in confirmation_order(keys, request.confirm_rounds):
                if any(r.round == number and r.key == key for r in tuner.rounds):
                    continue  # measured before (--resume)
                tuner.confirm_round(number, by_key[key], load)
        result = verdict(
            best.key,
            runner.key if runner else None,
            reference.key if reference is not None and reference.usable else None,
            configs,
            tuner.rounds,
            request.confirm_rounds,
        )
    else:
        notes.append(_nothing_ranked(configs))
    winner = ranked[0] if ranked else None
    return TuneRun(
        engine=engine.name,
        engine_found=engine.describe(),
        model=str(request.model),
        served_model=engine.served_model,
        space=space.describe(),
        strategy=strategy.name,
        strategy_why=strategy.why,
        skipped=skipped,
        budget_s=request.budget_s,
        slo=request.slo,
        slo_label=request.slo.label if request.slo else "none",
        workload=request.workload.summary(),
        objective=(
            f"good output tokens/s at {request.fixed.label}"
            if request.fixed
            else f"good output tokens/s at the highest {request.capacity} that meets the SLO"
        ),
        configs=configs,
        winner=winner.key if winner else None,
        winner_launch=winner.launch if winner else "",
        verdict=result,
        instance=request.instance,
        price_usd_per_hour=tuner.price_per_hour,
        notes=notes,
        warnings=warnings,
    )


def _nothing_ranked(configs: list[TuneConfig]) -> str:
    """Why there is no winner: no server started (how each failed, the first error), or none
    of those that started met the SLO."""
    if not configs or any(c.startup_s is not None for c in configs):
        return "no configuration met the SLO: nothing to rank (see each one's why)"
    kinds = Counter(c.failure or c.status for c in configs)
    how = ", ".join(f"{kind}: {count}" for kind, count in kinds.items())
    first = next((c.first_error for c in configs if c.first_error), "") or configs[0].why
    return (
        f"no configuration started: none of the {len(configs)} servers was ready ({how}); "
        f"the first error: {first}"
    )


def _capacity(document: TuneRun, winner: TuneConfig, env: Environment) -> dict[str, Any]:
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
    ).model_dump(mode="json")
