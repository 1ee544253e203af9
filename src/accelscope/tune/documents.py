"""The typed documents of ``accelscope tune``: one per configuration (``tune-config``, committed
as it is measured, what ``--resume`` skips), one per confirmation measurement (``tune-round``),
the run's summary (``tune``): every configuration, the search, the confirmed verdict, the
winner's launch command; and the run's settings (:class:`TuneSettings`, what ``--resume``
checks against)."""

from __future__ import annotations

import dataclasses
import math
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BeforeValidator, Field, PlainSerializer

from accelscope.documents import Document
from accelscope.llm.documents import (
    Arrivals,
    CapacitySummary,
    LlmTrial,
    ServerConfig,
    Slo,
    WorkloadSummary,
)
from accelscope.measurement.stats import RatioEstimate
from accelscope.tune.failures import FailureKind
from accelscope.tune.outcome import (
    Attempt,
    Failed,
    Measured,
    Outcome,
    Phase,
    Role,
    Spent,
    Status,
)
from accelscope.tune.quality import QualityResult, ReferenceAnswers

__all__ = ["Ratio", "TuneConfig", "TuneRound", "TuneRun", "TuneSettings", "TuneVerdict"]

StrategyName = Literal["grid", "screen"]
SearchChoice = Literal["auto", "grid", "screen"]
CapacityKind = Literal["rate", "concurrency"]


def _read_ratio(stored: object) -> object:
    # JSON has no infinity: an unbounded side is stored as null (a ratio of positive figures
    # is bounded below by 0)
    if isinstance(stored, dict):
        low, high = stored.get("low"), stored.get("high")
        unbounded = {"low": 0.0 if low is None else low, "high": math.inf if high is None else high}
        return {**stored, **unbounded}
    return stored


def _write_ratio(ratio: RatioEstimate) -> dict[str, Any]:
    fields = dataclasses.asdict(ratio)
    return {k: None if isinstance(v, float) and math.isinf(v) else v for k, v in fields.items()}


Ratio = Annotated[
    RatioEstimate,
    BeforeValidator(_read_ratio),
    PlainSerializer(_write_ratio, when_used="json"),
]
"""``candidate / baseline`` with its interval and p-value: the estimate
:mod:`accelscope.measurement.stats` produces, stored as it is (an unbounded side as null)."""

StoredFailure = Annotated[FailureKind, BeforeValidator(FailureKind.read)]
"""A failure kind by name; a run stored before holds its sentence, read as the member."""


class TuneConfig(Document):
    """One configuration: how its server started, what it sustained at the SLO (the
    objective: good output tokens per second), its quality against the reference, and what the
    tuner itself spent on it."""

    kind: ClassVar[str] = "tune-config"

    key: str
    values: dict[str, bool | int | float | str] = Field(default_factory=dict)
    role: Role = "candidate"
    phase: Phase = "full"
    status: Status
    failure: StoredFailure | None = None
    why: str = ""
    log_tail: str = ""
    first_error: str = ""
    """A failed start's first error line in the server's log (the exception that stopped it)."""
    command: list[str] = Field(default_factory=list)
    launch: str = ""
    startup_s: float | None = None
    wall_s: float = 0.0
    tuner_cpu_s: float = 0.0
    tuner_peak_rss_bytes: int = 0
    load_label: str = ""
    load: float | None = None
    capacity: CapacitySummary | None = None
    goodput_tokens_per_s: float | None = None
    throughput_tokens_per_s: float | None = None
    point: LlmTrial | None = None
    """The trial the objective was read from (the capacity's, or the fixed load's)."""
    trials: list[LlmTrial] = Field(default_factory=list)
    server_config: ServerConfig | None = None
    quality: QualityResult | None = None
    reference_answers: ReferenceAnswers | None = None
    cost_per_million_good_tokens_usd: float | None = None

    @classmethod
    def compile(
        cls,
        attempt: Attempt,
        outcome: Outcome,
        *,
        startup_s: float | None,
        spent: Spent,
        price_usd_per_hour: float | None = None,
    ) -> TuneConfig:
        """The document of ``attempt``: what became of it, its server's start-up (``None``:
        it did not start), what the tuner spent, and the dollars per million good tokens at
        ``price_usd_per_hour``."""
        failed = outcome if isinstance(outcome, Failed) else None
        measured = outcome if isinstance(outcome, Measured) else None
        if measured is not None:
            failed = measured.died
        point = measured.point if measured else None
        good = measured.goodput_tokens_per_s if measured else None
        cost = None
        if price_usd_per_hour is not None and good:
            cost = price_usd_per_hour / (good * 3600.0) * 1e6
        return cls(
            key=attempt.config.key,
            values=attempt.config.as_dict(),
            role=attempt.role,
            phase=attempt.phase,
            status=outcome.status,
            failure=failed.kind if failed else None,
            why=outcome.why,
            log_tail=failed.log_tail if failed else "",
            first_error=failed.first_error if failed else "",
            command=list(attempt.command),
            launch=attempt.launch,
            startup_s=startup_s,
            wall_s=spent.wall_s,
            tuner_cpu_s=spent.tuner_cpu_s,
            tuner_peak_rss_bytes=spent.tuner_peak_rss_bytes,
            load_label=point.label if point else "",
            load=point.arrivals.load if point else None,
            capacity=measured.capacity if measured else None,
            goodput_tokens_per_s=good,
            throughput_tokens_per_s=measured.throughput_tokens_per_s if measured else None,
            point=point,
            trials=list(measured.trials) if measured else [],
            server_config=measured.server_config if measured else None,
            quality=outcome.quality if not isinstance(outcome, Failed) else None,
            reference_answers=measured.reference_answers if measured else None,
            cost_per_million_good_tokens_usd=cost,
        )

    @property
    def usable(self) -> bool:
        """Measured, with a goodput, and not rejected by the quality guard."""
        return self.status == "measured" and self.goodput_tokens_per_s is not None


class TuneRound(Document):
    """One configuration measured again in a confirmation round (its own server start)."""

    kind: ClassVar[str] = "tune-round"

    round: int
    key: str
    load_label: str
    goodput_tokens_per_s: float | None = None
    startup_s: float | None = None
    why: str = ""


class TuneVerdict(Document):
    """The best against the runner-up (and the reference), measured again alternately."""

    best: str
    runner_up: str | None = None
    rounds: int = 0
    ratio: Ratio | None = None
    ranked: bool = False
    gain: Ratio | None = None
    text: str
    gain_text: str = ""


class TuneSettings(Document):
    """The run's settings as stored (``runs.settings_json``): what ``--resume`` must match and
    what ``runs show`` names for a tune that did not finish."""

    engine: str
    model: str
    spaces: list[str] = Field(default_factory=list)
    configs: list[str] = Field(default_factory=list)
    reference: str | None = None
    server_command: str | None = None
    engine_args: list[str] = Field(default_factory=list)
    workload: WorkloadSummary = Field(default_factory=WorkloadSummary)
    fixed: Arrivals | None = None
    capacity: CapacityKind = "concurrency"
    slo: Slo | None = None
    search: SearchChoice = "auto"
    budget_s: float | None = None
    confirm_rounds: int = 2
    quality_threshold: float = 0.9
    kv_cache_gib: float | None = None
    """vLLM's CPU build: the KV-cache space every configuration got (whole GiB)."""
    kv_cache: str = ""
    """How that space was decided."""


class TuneRun(Document):
    """The ``tune`` document."""

    kind: ClassVar[str] = "tune"

    engine: str
    engine_found: str = ""
    model: str
    served_model: str = ""
    space: dict[str, list[str]] = Field(default_factory=dict)
    strategy: StrategyName = "grid"
    strategy_why: str = ""
    skipped: list[str] = Field(default_factory=list)
    budget_s: float | None = None
    slo: Slo | None = None
    slo_label: str = "none"
    workload: WorkloadSummary = Field(default_factory=WorkloadSummary)
    objective: str = ""
    configs: list[TuneConfig] = Field(default_factory=list)
    winner: str | None = None
    winner_launch: str = ""
    verdict: TuneVerdict | None = None
    instance: str | None = None
    price_usd_per_hour: float | None = None
    notes: list[str] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)

    def config(self, key: str) -> TuneConfig | None:
        """The configuration of ``key``."""
        return next((c for c in self.configs if c.key == key), None)
