"""What became of one configuration, as typed values the tuner hands on (never a dict):
its server did not give a measurement (:class:`Failed`), its answers were too unlike the
reference's (:class:`Rejected`), or the harness measured it (:class:`Measured`, which says
itself when the server died meanwhile). :meth:`accelscope.tune.documents.TuneConfig.compile`
turns one into the stored document, with the :class:`Attempt` it answers and what the tuner
spent on it (:class:`Spent`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from accelscope.llm.documents import CapacitySummary, LlmTrial, ServerConfig
from accelscope.tune.failures import FailureKind
from accelscope.tune.quality import QualityResult, ReferenceAnswers
from accelscope.tune.space import Config

__all__ = [
    "Attempt",
    "Failed",
    "Measured",
    "Outcome",
    "Phase",
    "Rejected",
    "Role",
    "Spent",
    "Status",
]

Status = Literal["measured", "failed", "rejected", "skipped"]
Role = Literal["reference", "candidate"]
Phase = Literal["full", "screen"]
"""``full``: a capacity search at the SLO (or the fixed load); ``screen``: one short trial."""


@dataclass(frozen=True, kw_only=True)
class Attempt:
    """One configuration about to be measured: what it is and how its server is launched."""

    config: Config
    role: Role
    phase: Phase
    command: tuple[str, ...]
    """The server's command line (``{port}`` filled in at start)."""
    launch: str
    """The line to paste to serve it (port 8000, every interface)."""


@dataclass(frozen=True, kw_only=True)
class Spent:
    """What the tuner itself spent on one configuration (its wall time, its own CPU time and
    its process's peak resident memory so far)."""

    wall_s: float
    tuner_cpu_s: float
    tuner_peak_rss_bytes: int


@dataclass(frozen=True, kw_only=True)
class Failed:
    """No measurement: the server did not start, did not answer, or died while measured."""

    kind: FailureKind
    why: str
    log_tail: str = ""
    """The server's last log lines (once it is gone, for one that started)."""
    first_error: str = ""
    """A failed start's first error line in the server's log (the exception that stopped it)."""

    @property
    def status(self) -> Status:
        return "failed"


@dataclass(frozen=True, kw_only=True)
class Rejected:
    """The quality guard refused the configuration (or had no reference answers to use)."""

    why: str
    quality: QualityResult | None = None

    @property
    def status(self) -> Status:
        return "rejected"


@dataclass(frozen=True, kw_only=True)
class Measured:
    """What the harness measured on one running server."""

    trials: tuple[LlmTrial, ...]
    point: LlmTrial | None
    """The trial the objective is read from (the capacity's, or the fixed load's)."""
    capacity: CapacitySummary | None = None
    """The capacity search; ``None``: measured at a fixed load."""
    quality: QualityResult | None = None
    reference_answers: ReferenceAnswers | None = None
    died: Failed | None = None
    """The server was gone (or unhealthy) when the measurement ended: what it was measured
    doing is kept, and the configuration counts as failed."""

    @property
    def status(self) -> Status:
        """``failed`` when the server died meanwhile, else ``measured``."""
        return "failed" if self.died is not None else "measured"

    @property
    def met_slo(self) -> bool:
        """A fixed load's trial always counts; a capacity search only when a load passed."""
        return self.capacity is None or bool(self.capacity.capacity)

    @property
    def goodput_tokens_per_s(self) -> float | None:
        """The objective: good output tokens per second at :attr:`point` (``None``: no load
        met the SLO, or none was measured)."""
        goodput = self.point.summary.goodput if self.point else None
        return goodput.output_tokens_per_s if goodput and self.met_slo else None

    @property
    def throughput_tokens_per_s(self) -> float | None:
        """All output tokens per second at :attr:`point`, good or not."""
        throughput = self.point.summary.throughput if self.point else None
        return throughput.output_tokens_per_s if throughput else None

    @property
    def server_config(self) -> ServerConfig | None:
        """What the server published of its configuration (the first trial that read it)."""
        return next((t.server_metrics.config for t in self.trials if t.server_metrics.config), None)

    @property
    def why(self) -> str:
        """Why there is no objective: no load met the SLO (before a death: the search says
        more about the configuration than how its server ended), else how it died."""
        if self.capacity is not None and self.capacity.capacity is None:
            return f"no load met the SLO ({self.capacity.stopped})"
        return self.died.why if self.died is not None else ""


Outcome = Failed | Rejected | Measured
"""What became of one configuration."""
