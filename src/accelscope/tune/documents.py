"""The typed documents of ``accelscope tune``: one per configuration (``tune-config``, committed
as it is measured, what ``--resume`` skips), one per confirmation measurement (``tune-round``),
and the run's summary (``tune``): every configuration, the search, the confirmed verdict, the
winner's launch command."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from accelscope.documents import Document
from accelscope.llm.documents import CapacitySummary, LlmTrial, ServerConfig, Slo, WorkloadSummary
from accelscope.tune.quality import QualityResult, ReferenceAnswers

__all__ = ["Ratio", "TuneConfig", "TuneRound", "TuneRun", "TuneVerdict"]

Status = Literal["measured", "failed", "rejected", "skipped"]


class Ratio(Document):
    """``candidate / baseline`` with its interval and p-value (``measurement.stats``)."""

    ratio: float
    low: float | None
    high: float | None
    p_value: float
    confidence: float
    method: str
    units: str

    @property
    def separated(self) -> bool:
        """The interval excludes 1."""
        low = self.low if self.low is not None else 0.0
        high = self.high if self.high is not None else float("inf")
        return low > 1.0 or high < 1.0


class TuneConfig(Document):
    """One configuration: how its server started, what it sustained at the SLO (the
    objective: good output tokens per second), its quality against the reference, and what the
    tuner itself spent on it."""

    kind: ClassVar[str] = "tune-config"

    key: str
    values: dict[str, bool | int | float | str] = Field(default_factory=dict)
    role: Literal["reference", "candidate"] = "candidate"
    phase: Literal["full", "screen"] = "full"
    status: Status
    failure: str | None = None
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


class TuneRun(Document):
    """The ``tune`` document."""

    kind: ClassVar[str] = "tune"

    engine: str
    engine_found: str = ""
    model: str
    served_model: str = ""
    space: dict[str, list[str]] = Field(default_factory=dict)
    strategy: str = "grid"
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
