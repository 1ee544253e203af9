"""The vocabulary of the verdict: what a rule sees (:class:`RuleContext`) and what it says
(:class:`Finding`). Rules live one per module in :mod:`accelscope.doctor.rules`."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Protocol

from accelscope.doctor.breakdown import Breakdown
from accelscope.doctor.device_timeline import TimelineVerdict
from accelscope.doctor.gpu import GpuActivity, gpu_activity, steps_window
from accelscope.doctor.profile import Profile
from accelscope.doctor.trace_quality import gated_verdict
from accelscope.hardware.fastpaths import PrecisionSupport
from accelscope.hardware.telemetry import Telemetry
from accelscope.spec import Device, Precision

__all__ = ["CLEAR", "FIRED", "NOT_APPLICABLE", "Finding", "Rule", "RuleContext", "severity"]

FIRED, CLEAR, NOT_APPLICABLE = "fired", "clear", "n/a"


@dataclass(frozen=True, kw_only=True)
class RuleContext:
    """Everything a rule may look at: the run, its summary, telemetry and the machine.

    ``telemetry_steps_at_s``: where the first recorded step started on the telemetry clock
    (seconds since sampling began), so GPU telemetry is averaged over the measured steps only;
    ``None`` when unknown (every sample is used, and the evidence says so).
    """

    profile: Profile
    breakdown: Breakdown
    telemetry: Telemetry | None
    support: tuple[PrecisionSupport, ...]
    cores: int
    memory_bytes: int
    telemetry_steps_at_s: float | None = None

    @cached_property
    def gpu_activity(self) -> GpuActivity | None:
        """NVML/GPM activity during the measured steps; ``None`` when no GPU was sampled."""
        window = steps_window(self.profile, self.telemetry_steps_at_s)
        return gpu_activity(self.telemetry, window)

    @cached_property
    def timeline(self) -> TimelineVerdict | None:
        """The verdict of the GPU's own timeline over the steps profiled after the warm-up
        (torch.profiler), drawn by the same code as ``doctor --trace``
        (:func:`~accelscope.doctor.trace_quality.gated_verdict`: the quality gate first, then
        the steady steps), with GPM SM activity and NVML utilisation of the measured steps
        beside it. ``None`` without a readable device trace (CPU runs, a profiler that did not
        start, older profiles)."""
        record = self.profile.device_trace
        if record is None or not record.usable:
            return None
        activity = self.gpu_activity
        sm = activity.sm_active_percent if activity is not None else None
        util = activity.utilisation_percent if activity is not None else None
        return gated_verdict(
            record.timeline,
            record.quality_gate,
            sm_active=None if sm is None else sm / 100.0,
            nvml_utilisation=None if util is None else util / 100.0,
        )

    def timeline_share(self, *causes: str) -> float | None:
        """The mean share of the profiled steps the device timeline gives ``causes``
        (``None`` without a timeline)."""
        timeline = self.timeline
        if timeline is None:
            return None
        shares = dict(timeline.ranked)  # a partition: its verdict checks that when built
        return math.fsum(shares.get(c, 0.0) for c in causes)

    @property
    def device(self) -> str:
        """``cuda`` when the loop used CUDA, else ``cpu`` (:attr:`Profile.device`)."""
        return self.profile.device

    @property
    def autocast(self) -> str | None:
        """The autocast dtype the loop ran under (``None``: autocast off)."""
        facts, probe = self.profile.facts, self.profile.probe
        if facts is not None and facts.autocast:
            return facts.autocast
        if probe is None:
            return None
        return next((v for v in probe.autocast.values() if v != "off"), None)

    def fast_low_precisions(self) -> tuple[PrecisionSupport, ...]:
        """bf16/fp16 with a native fast path on the loop's device."""
        device = Device.CUDA if self.device == "cuda" else Device.CPU
        return tuple(
            s
            for s in self.support
            if s.device is device and s.fast and s.precision in (Precision.BF16, Precision.FP16)
        )

    def cheaper_math_what_ifs(self) -> tuple[str, ...]:
        """What-ifs that make the same work cheaper: bf16/fp16 (autocast off, fast path
        present) and ``compile`` (the model not compiled yet)."""
        out = [] if self.autocast else [s.precision.value for s in self.fast_low_precisions()]
        facts = self.profile.facts
        if facts is not None and facts.main_model and not facts.main_model.get("compiled"):
            out.append("compile")
        return tuple(out)

    def threads_to_try(self, external_cores: float = 0.0) -> tuple[int, str]:
        """Intra-op threads for the cores the loop's DataLoader workers leave free, from their
        measured load (cores minus the workers' busy cores over the measured steps, rounded,
        at least 1), else from their count; with how it was sized."""
        facts = self.profile.facts
        workers = sum(x.num_workers for x in facts.loaders) if facts is not None else 0
        busy = facts.worker_busy_cores if facts is not None else None
        if busy is not None:
            threads = max(1, round(self.cores - busy - external_cores))
            return threads, (
                f"{self.cores} cores minus the {busy:.2f} cores the DataLoader workers kept "
                "busy over the measured steps"
            )
        threads = max(1, self.cores - workers - round(external_cores))
        return threads, (
            f"{self.cores} cores minus {workers} DataLoader workers (their load not measured)"
        )

    @property
    def compute_share(self) -> float:
        """Share of step time in forward + backward + optimizer on the host (on CUDA, the
        host's launch time: :attr:`timeline` says what the GPU did)."""
        shares = self.breakdown.shares
        return shares["forward"] + shares["backward"] + shares["optimizer"]


@dataclass(frozen=True, kw_only=True)
class Finding:
    """One rule's conclusion about the run.

    Attributes:
        rule: Rule id (``input-bound``).
        title: Human name of the bottleneck.
        status: ``fired``, ``clear`` or ``n/a`` (with ``summary`` saying why).
        share: Fraction of step time at stake (what ranks fired findings); ``None`` if the rule
            cannot attribute time.
        severity: ``high``, ``medium`` or ``low`` when fired.
        summary: One line with the numbers.
        threshold: The rule's threshold, in words.
        evidence: The numbers behind it (names carry their unit; ``estimated`` says so).
        advice: What to change.
        what_ifs: What-ifs that would test the advice (names from :mod:`.whatif`).
    """

    rule: str
    title: str
    status: str
    summary: str
    threshold: str
    share: float | None = None
    severity: str = ""
    evidence: dict[str, Any] = field(default_factory=dict)
    advice: str = ""
    what_ifs: tuple[str, ...] = ()

    @property
    def fired(self) -> bool:
        """True when the rule's threshold was crossed."""
        return self.status == FIRED


class Rule(Protocol):
    """A rule: a name and a check over a :class:`RuleContext`."""

    name: str

    def check(self, ctx: RuleContext) -> Finding:
        """Conclude fired / clear / n/a with the evidence."""
        ...


def severity(share: float, high: float) -> str:
    """``high`` at or above ``high``, else ``medium``."""
    return "high" if share >= high else "medium"
