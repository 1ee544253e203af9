"""The tuner: each configuration started as its own server
(:class:`~accelscope.llm.server_process.ServerProcess`: own process group, health wait, always
stopped, also on Ctrl-C and ``kill -9`` of accelscope), checked against the reference's answers
when it can change them, measured with ``llm``'s harness, and handed on as one ``tune-config``
document (``on_config``: the command commits it, so ``--resume`` measures again nothing stored);
then the best two (and the reference) measured again in confirmation rounds (``on_round``).

What to measure, in which phase, is the search's (:func:`accelscope.tune.search.search`); the
ranking and the verdict are the confirmation's (:func:`accelscope.tune.confirm.rank_and_confirm`).
The tuner takes its settings as fields (:class:`TunerSettings`) and knows nothing of the command
that runs it: it returns data and never prints (``events`` receives its progress lines).
"""

from __future__ import annotations

import dataclasses
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from accelscope.errors import BadInputError, one_line
from accelscope.llm.client import OpenAIEndpoint
from accelscope.llm.documents import Arrivals, LlmTrial, Slo
from accelscope.llm.harness import Harness, capacity_summary
from accelscope.llm.server_process import ServerProcess, ServerStartError
from accelscope.llm.workload import TokenCounter, WorkloadSource
from accelscope.tune.confirm import Ranking, rank_and_confirm
from accelscope.tune.documents import TuneConfig, TuneRound
from accelscope.tune.engines import Engine
from accelscope.tune.failures import FailureKind, classify_failure
from accelscope.tune.outcome import Attempt, Failed, Measured, Outcome, Phase, Rejected, Spent
from accelscope.tune.quality import DEFAULT_THRESHOLD, check_quality, reference_answers
from accelscope.tune.search import Budget, Load, Strategy, search
from accelscope.tune.space import Config, Space

__all__ = ["Tuned", "Tuner", "TunerSettings"]

Events = Callable[[str], None]


@dataclass(frozen=True, kw_only=True)
class TunerSettings:
    """How every configuration is measured and judged."""

    workload: WorkloadSource
    slo: Slo
    load: Load
    capacity_trials: int = 6
    requests: int | None = None
    """Sessions (or single-turn requests) per trial; ``None``: the workload's default."""
    timeout_s: float = 300.0
    """One request's limit."""
    startup_timeout_s: float = 600.0
    ignore_eos: bool = True
    """Ask for exact output lengths (an engine that refuses the field: off)."""
    api_key: str | None = None
    quality_threshold: float = DEFAULT_THRESHOLD
    quality_tokens: int = 32
    """Tokens of each reference answer the quality guard compares."""
    confirm_rounds: int = 2
    price_usd_per_hour: float | None = None
    """The instance's price: each configuration's dollars per million good tokens."""


@dataclass(frozen=True, kw_only=True)
class Tuned:
    """The search's skips and the ranking it led to."""

    skipped: list[str]
    ranking: Ranking


def _ignore(_: object) -> None:
    """A callback that keeps nothing."""


@dataclass(kw_only=True)
class Tuner:
    """One tune while it measures: ``stored`` holds every configuration measured (those of the
    run a ``--resume`` continues too), ``rounds`` the confirmation rounds that run measured;
    ``port`` gives each server a free port; ``registry`` is where running
    servers are listed, so a later tune can stop one this process could not."""

    settings: TunerSettings
    engine: Engine
    space: Space
    port: Callable[[], int]
    registry: Path
    tokenizer: TokenCounter | None = None
    on_config: Callable[[TuneConfig], None] = _ignore
    on_round: Callable[[TuneRound], None] = _ignore
    events: Events | None = None
    stored: dict[str, TuneConfig] = field(default_factory=dict)
    rounds: list[TuneRound] = field(default_factory=list)

    def run(self, strategy: Strategy, budget: Budget) -> Tuned:
        """Search the space (within ``budget``), then rank and confirm."""
        skipped = search(
            self.space,
            strategy,
            self.settings.load,
            budget=budget,
            stored=self.stored,
            measure=self.measure,
        )
        ranking = rank_and_confirm(
            self.space,
            self.stored,
            self.settings.load,
            confirm_rounds=self.settings.confirm_rounds,
            rounds=self.rounds,
            measure_again=self.confirm_round,
        )
        return Tuned(skipped=skipped, ranking=ranking)

    def _say(self, line: str) -> None:
        if self.events is not None:
            self.events(line)

    def _server(self, config: Config) -> ServerProcess:
        return ServerProcess(
            self.engine.command(config),
            name=f"{self.engine.name} ({config.key})",
            port=self.port(),
            env=self.engine.environment(),
            health_path=self.engine.health_path,
            startup_timeout_s=self.settings.startup_timeout_s,
            registry=self.registry,
        )

    def _target(self, server: ServerProcess) -> OpenAIEndpoint:
        return OpenAIEndpoint(
            server.url,
            self.engine.served_model,
            api_key=self.settings.api_key,
            tokenizer=self.tokenizer,
            ignore_eos=self.settings.ignore_eos,
        )

    def _harness(self, server: ServerProcess) -> Harness:
        return Harness(
            target=self._target(server),
            workload=self.settings.workload,
            slo=self.settings.slo,
            tokenizer=self.tokenizer,
            metrics_url=server.url,
            count=self.settings.requests,
            timeout_s=self.settings.timeout_s,
        )

    def measure(self, config: Config, phase: Phase, load: Arrivals | None) -> TuneConfig:
        """Start ``config``'s server, guard its quality, measure it at ``load`` (``None``: a
        capacity search), stop it (always), and keep and hand on its document."""
        attempt = Attempt(
            config=config,
            role="reference" if config.key == self.space.reference.key else "candidate",
            phase=phase,
            command=tuple(self.engine.command(config)),
            launch=self.engine.launch_line(config),
        )
        began, cpu = time.monotonic(), time.process_time()
        self._say(f"{config.key}: starting {self.engine.name}")
        server = self._server(config)
        try:
            try:
                server.start()
            except ServerStartError as error:
                kind = classify_failure(
                    error.server_exit,
                    f"{error.first_error}\n{error.log_tail}",
                    timed_out=error.server_exit is None,
                )
                failed = Failed(
                    kind=kind,
                    why=error.message,
                    log_tail=error.log_tail,
                    first_error=error.first_error,
                )
                return self._keep(attempt, failed, startup_s=None, began=began, cpu=cpu)
            self._say(f"{config.key}: ready in {server.startup_s or 0:.0f} s; measuring")
            outcome = self._measure_running(attempt, server, load)
        finally:
            server.stop()
        return self._keep(
            attempt,
            _with_last_words(outcome, server.final_log_tail),
            startup_s=server.startup_s,
            began=began,
            cpu=cpu,
        )

    def _measure_running(
        self, attempt: Attempt, server: ServerProcess, load: Arrivals | None
    ) -> Outcome:
        config = attempt.config
        try:
            self._target(server).check()
        except BadInputError as error:
            return Failed(kind=FailureKind.NO_ANSWER, why=error.message)
        answers = quality = None
        if attempt.role == "reference":
            try:
                answers = reference_answers(
                    server.url,
                    self.engine.served_model,
                    max_tokens=self.settings.quality_tokens,
                    api_key=self.settings.api_key,
                )
            except RuntimeError as error:
                self._say(f"{config.key}: {error} (the quality guard cannot run)")
        elif self.engine.touches_quality(config, self.space.reference):
            reference = self.stored.get(self.space.reference.key)
            if reference is None or reference.reference_answers is None:
                return Rejected(why="the reference has no answers to compare")
            quality = check_quality(
                server.url,
                self.engine.served_model,
                reference.reference_answers,
                threshold=self.settings.quality_threshold,
                tokenizer=self.tokenizer,
                api_key=self.settings.api_key,
            )
            self._say(f"{config.key}: agreement with the reference {quality.agreement:.1%}")
            if not quality.passed:
                return Rejected(why=quality.why, quality=quality)
        harness = self._harness(server)
        capacity = None
        point: LlmTrial | None
        if load is not None:
            point = harness.trial(load)
        else:
            found = harness.capacity(
                self.settings.load.capacity,
                start=self.settings.load.capacity_start,
                max_trials=self.settings.capacity_trials,
            )
            capacity = capacity_summary(found)
            point = next(
                (t for t in reversed(harness.trials) if t.arrivals.load == capacity.capacity),
                None,
            )
        died = None
        if not server.running() or not server.healthy():
            died = Failed(
                kind=FailureKind.DIED,
                why=f"the server exited (code {server.exit_status()}) while it was measured",
            )
        return Measured(
            trials=tuple(harness.trials),
            point=point.without_records() if point else None,
            capacity=capacity,
            quality=quality,
            reference_answers=answers,
            died=died,
        )

    def _keep(
        self,
        attempt: Attempt,
        outcome: Outcome,
        *,
        startup_s: float | None,
        began: float,
        cpu: float,
    ) -> TuneConfig:
        spent = Spent(
            wall_s=time.monotonic() - began,
            tuner_cpu_s=time.process_time() - cpu,
            tuner_peak_rss_bytes=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        )
        config = TuneConfig.compile(
            attempt,
            outcome,
            startup_s=startup_s,
            spent=spent,
            price_usd_per_hour=self.settings.price_usd_per_hour,
        )
        self.stored[config.key] = config
        self.on_config(config)
        detail = f": {config.why}" if config.why else ""
        goodput = (
            f", {config.goodput_tokens_per_s:,.1f} good tokens/s at {config.load_label}"
            if config.goodput_tokens_per_s is not None
            else ""
        )
        self._say(f"{config.key}: {config.status}{goodput}{detail}")
        return config

    def confirm_round(self, number: int, config: Config, load: Arrivals) -> TuneRound:
        """``config`` again, in a fresh server, at ``load``."""
        server = self._server(config)
        try:
            try:
                server.start()
            except ServerStartError as error:
                found = TuneRound(
                    round=number, key=config.key, load_label=load.label, why=one_line(error.message)
                )
            else:
                trial = self._harness(server).trial(load)
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
        self.on_round(found)
        value = found.goodput_tokens_per_s
        self._say(
            f"round {number}: {config.key}: "
            + (f"{value:,.1f} good tokens/s" if value is not None else f"no figure ({found.why})")
        )
        return found


def _with_last_words(outcome: Outcome, log_tail: str) -> Outcome:
    """A server that started and then failed gets its last log lines, read once it is gone."""
    if isinstance(outcome, Failed):
        return dataclasses.replace(outcome, log_tail=log_tail)
    if isinstance(outcome, Measured) and outcome.died is not None:
        return dataclasses.replace(
            outcome, died=dataclasses.replace(outcome.died, log_tail=log_tail)
        )
    return outcome
