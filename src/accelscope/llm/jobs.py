"""Job-level figures of a multi-turn (agentic) run: a session is a **job**, and what a user of
an agent pays for is jobs done, not tokens streamed (a later turn resends the whole
conversation, so prompt tokens/s counts the same tokens again and again).

From the per-turn records of a run (:class:`~accelscope.llm.documents.RequestRecord`, each with
its ``session`` and 1-based ``turn``) and how many turns each session has:

- **Job latency**: a session's wall time, from its first turn's scheduled arrival to the end of
  its last turn's stream (the tool waits between turns included), over completed sessions.
- **Jobs/hour at the SLO**: sessions that completed (every turn answered without error) and
  whose every turn met each SLO term (TTFT, TPOT, E2E as the SLO bounds them; a turn whose
  answer came in one chunk has no decode step, and its TPOT bounds nothing), per hour of the
  run (first scheduled arrival to last stream end).
- **TTFT against context**: the turns grouped by prompt tokens (bins doubling from 1 token),
  the median TTFT of each bin.
- **$ per job**: ``usd_per_hour`` * the run's hours / the jobs completed (and / those at the
  SLO).
- **SLO tiers** (AgentPerf's table): per output-speed floor (tokens/s of one stream, 1 / TPOT)
  and TTFT ceiling, the sessions whose every turn met both.

Every figure has a percentile-bootstrap confidence interval over **sessions** (a session is
resampled whole, its turns with it: ``scipy.stats.bootstrap`` over session indices, seeded);
a count of sessions where every session is alike (all or none at the SLO), which resampling
cannot spread, takes the exact binomial interval of its share instead; each
:class:`Estimate` names its method. With fewer than two sessions the interval is not measured.

**Validity gate.** A run is *invalid*, and no figure is given, when the share of failed turns
exceeds ``max_error_share``, when prompts overflow the context on more than
``max_overflow_share`` of the turns (a prompt overflows when its tokens plus the tokens it asks
for, at least 1, exceed the context length), or when the client fell behind its schedule (p99
of sent - scheduled above :data:`~accelscope.llm.summary.LAG_LIMIT_S`, the trial summary's own
client-bound rule). :class:`Validity` names each failure. Turns the run cancelled (Ctrl-C), and
their sessions, are left out of every count.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from accelscope.documents import Slo
from accelscope.llm.documents import (
    GateReason,
    Interval,
    JobFigures,
    JobGate,
    JobTier,
    RequestRecord,
    TtftContextBin,
)
from accelscope.llm.summary import LAG_LIMIT_S, first_chunk_tokens, is_good, request_values

__all__ = [
    "DEFAULT_TPS_FLOORS",
    "DEFAULT_TTFT_CEILINGS_S",
    "Estimate",
    "GateFailure",
    "InvalidReason",
    "Job",
    "JobMetrics",
    "JobReport",
    "SloTier",
    "TtftAtContext",
    "Validity",
    "ValidityBounds",
    "assess_jobs",
    "check_validity",
    "jobs_of",
    "stored_report",
]

DEFAULT_TPS_FLOORS = (10.0, 20.0, 50.0)
"""Output-speed floors of the SLO-tier table, tokens/s of one stream."""
DEFAULT_TTFT_CEILINGS_S = (0.5, 1.0, 2.0, 5.0)
"""TTFT ceilings of the SLO-tier table, seconds."""


class InvalidReason(StrEnum):
    """Why a run is not a figure."""

    ERRORS = "errors"
    CONTEXT_OVERFLOW = "context overflow"
    CLIENT_BEHIND = "client behind schedule"


@dataclass(frozen=True, kw_only=True)
class ValidityBounds:
    """The stated bounds of the validity gate: shares of turns, and the client's p99 lag."""

    max_error_share: float = 0.01
    max_overflow_share: float = 0.01
    lag_limit_s: float = LAG_LIMIT_S

    def __post_init__(self) -> None:
        for name in ("max_error_share", "max_overflow_share"):
            value = getattr(self, name)
            if not 0.0 <= value < 1.0:
                raise ValueError(f"{name} {value} outside [0, 1)")
        if not self.lag_limit_s > 0.0:
            raise ValueError(f"lag_limit_s {self.lag_limit_s} must be > 0")


@dataclass(frozen=True)
class GateFailure:
    """One reason a run is invalid, and the line that says it."""

    reason: InvalidReason
    text: str


@dataclass(frozen=True, kw_only=True)
class Validity:
    """The gate's verdict: what it counted and each failure (none: valid). ``overflowed`` is
    ``None`` when no context length was given (not checked); ``unsized_turns`` are turns whose
    prompt tokens are unknown, so their overflow could not be checked."""

    bounds: ValidityBounds
    turns: int
    errors: int
    overflowed: int | None
    unsized_turns: int
    lag_p99_s: float
    failures: tuple[GateFailure, ...]

    def __post_init__(self) -> None:
        if self.turns < 1:
            raise ValueError("the gate needs at least one turn")
        if not 0 <= self.errors <= self.turns:
            raise ValueError(f"errors {self.errors} outside [0, {self.turns}]")
        if self.overflowed is not None and not 0 <= self.overflowed <= self.turns:
            raise ValueError(f"overflowed {self.overflowed} outside [0, {self.turns}]")

    @property
    def valid(self) -> bool:
        return not self.failures

    @property
    def reasons(self) -> tuple[InvalidReason, ...]:
        return tuple(f.reason for f in self.failures)


@dataclass(frozen=True, kw_only=True)
class Estimate:
    """A figure and its confidence interval (``low``/``high`` ``None``: not measured, with
    ``why``)."""

    value: float
    low: float | None
    high: float | None
    confidence: float
    method: str = ""
    why: str = ""

    def __post_init__(self) -> None:
        if not math.isfinite(self.value):
            raise ValueError(f"estimate {self.value} is not finite")
        if (self.low is None) != (self.high is None):
            raise ValueError("an interval has both bounds or neither")
        if self.low is not None and self.high is not None and not self.low <= self.high:
            raise ValueError(f"interval [{self.low}, {self.high}] is reversed")
        if self.low is None and not self.why:
            raise ValueError("an interval that is not measured says why")


@dataclass(frozen=True, kw_only=True)
class Job:
    """One session of the run: its turns expected and answered, whether it completed and met
    the SLO, and its wall time (``None`` when no turn of it was sent)."""

    session: int
    turns_expected: int
    turns_ok: int
    completed: bool
    met_slo: bool
    wall_s: float | None

    def __post_init__(self) -> None:
        if not 0 <= self.turns_ok <= self.turns_expected:
            raise ValueError(
                f"session {self.session}: {self.turns_ok} turns answered of {self.turns_expected}"
            )
        if self.completed != (self.turns_ok == self.turns_expected):
            raise ValueError(f"session {self.session}: completed means every turn answered")
        if self.met_slo and not self.completed:
            raise ValueError(f"session {self.session}: only a completed job meets the SLO")
        if self.wall_s is not None and not self.wall_s >= 0.0:
            raise ValueError(f"session {self.session}: wall time {self.wall_s} < 0")
        if self.completed and self.wall_s is None:
            raise ValueError(f"session {self.session}: a completed job has a wall time")


@dataclass(frozen=True, kw_only=True)
class TtftAtContext:
    """The turns whose prompt held ``low_tokens`` ≤ tokens < ``high_tokens``: how many, from
    how many sessions, their mean prompt tokens and median TTFT."""

    low_tokens: int
    high_tokens: int
    turns: int
    sessions: int
    prompt_tokens_mean: float
    ttft_p50_s: Estimate


@dataclass(frozen=True, kw_only=True)
class SloTier:
    """Sessions whose every turn streamed at least ``min_output_tokens_per_s`` (1 / TPOT)
    with a TTFT of at most ``max_ttft_s``, and completed: their count, share, and rate."""

    min_output_tokens_per_s: float
    max_ttft_s: float
    sessions_meeting: int
    share: float
    jobs_per_hour: Estimate


@dataclass(frozen=True, kw_only=True)
class JobMetrics:
    """The job-level figures of a valid run (see the module)."""

    slo: Slo | None
    jobs: int
    completed: int
    met_slo: int
    duration_s: float
    job_latency_p50_s: Estimate | None
    jobs_per_hour_at_slo: Estimate | None
    completed_jobs_per_hour: Estimate
    usd_per_completed_job: Estimate | None
    usd_per_job_at_slo: Estimate | None
    ttft_by_context: tuple[TtftAtContext, ...]
    tiers: tuple[SloTier, ...]
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not 0 <= self.met_slo <= self.completed <= self.jobs:
            raise ValueError("jobs at the SLO <= completed <= jobs")
        if (self.slo is None) != (self.jobs_per_hour_at_slo is None):
            raise ValueError("jobs/hour at the SLO is given exactly when there is an SLO")
        if self.slo is None and self.met_slo:
            raise ValueError("no job meets an SLO that was not given")
        if not self.duration_s > 0.0:
            raise ValueError(f"run duration {self.duration_s} must be > 0")
        for tier in self.tiers:
            if tier.sessions_meeting > self.completed:
                raise ValueError("a tier counts only completed sessions")


@dataclass(frozen=True, kw_only=True)
class JobReport:
    """The gate's verdict, and the figures when the run is valid (``None`` otherwise)."""

    validity: Validity
    metrics: JobMetrics | None

    def __post_init__(self) -> None:
        if (self.metrics is None) == self.validity.valid:
            raise ValueError("a valid run has figures, an invalid one has none")


# -- the gate ----------------------------------------------------------------------------------


def check_validity(
    records: Sequence[RequestRecord],
    *,
    context_tokens: int | None = None,
    requested_tokens: Mapping[int, int] | None = None,
    prompt_tokens: Mapping[int, int] | None = None,
    bounds: ValidityBounds = ValidityBounds(),
) -> Validity:
    """The validity gate over a run's turns (cancelled ones left out; the turns a failure
    left unsent count as failed, as the trial summary counts them). ``requested_tokens``:
    each request's ``max_tokens`` by request index (1 where not given); ``prompt_tokens``: the
    workload's own count of each prompt, by request index, for the turns whose record has
    none (a server that refuses an overflowing prompt reports no usage)."""
    considered = [r for r in records if not r.cancelled]
    if not considered:
        raise ValueError("the validity gate needs at least one turn that was not cancelled")
    turns = len(considered)
    errors = sum(1 for r in considered if r.error)
    failures: list[GateFailure] = []
    if errors > bounds.max_error_share * turns:
        failures.append(
            GateFailure(
                InvalidReason.ERRORS,
                f"{errors} of {turns} turns failed ({errors / turns:.1%} > "
                f"{bounds.max_error_share:.1%})",
            )
        )
    overflowed: int | None = None
    counted = prompt_tokens or {}
    sizes = [
        r.prompt_tokens if r.prompt_tokens is not None else counted.get(r.index) for r in considered
    ]
    unsized = sum(1 for size in sizes if size is None)
    if context_tokens is not None:
        asked = requested_tokens or {}
        overflowed = sum(
            1
            for r, size in zip(considered, sizes, strict=True)
            if size is not None and size + max(1, asked.get(r.index, 1)) > context_tokens
        )
        if overflowed > bounds.max_overflow_share * turns:
            failures.append(
                GateFailure(
                    InvalidReason.CONTEXT_OVERFLOW,
                    f"{overflowed} of {turns} prompts overflow the context of {context_tokens} "
                    f"tokens ({overflowed / turns:.1%} > {bounds.max_overflow_share:.1%})",
                )
            )
    lags = np.asarray([r.sent_s - r.scheduled_s for r in considered], dtype=float)
    lag_p99 = float(np.percentile(lags, 99))
    if not lag_p99 <= bounds.lag_limit_s:  # NaN fails too
        failures.append(
            GateFailure(
                InvalidReason.CLIENT_BEHIND,
                f"the client fell behind its schedule: p99 lag {lag_p99 * 1000:.0f} ms > "
                f"{bounds.lag_limit_s * 1000:g} ms",
            )
        )
    return Validity(
        bounds=bounds,
        turns=turns,
        errors=errors,
        overflowed=overflowed,
        unsized_turns=unsized,
        lag_p99_s=lag_p99,
        failures=tuple(failures),
    )


# -- jobs --------------------------------------------------------------------------------------


def _single_step(record: RequestRecord) -> bool:
    """The answer came in its first chunk: no decode step for a TPOT to bound."""
    if record.output_tokens is None:
        return False
    k1, _ = first_chunk_tokens(record)
    return record.output_tokens - k1 < 1


def _turn_meets(record: RequestRecord, slo: Slo) -> bool:
    if _single_step(record) and slo.tpot_s is not None:
        slo = slo.model_copy(update={"tpot_s": None})
    return bool(slo.terms()) and is_good(record, slo)


def _by_session(
    records: Sequence[RequestRecord], expected_turns: Mapping[int, int]
) -> dict[int, list[RequestRecord]]:
    grouped: dict[int, list[RequestRecord]] = defaultdict(list)
    for record in records:
        if record.session is None or record.turn is None:
            raise ValueError(f"request {record.index}: a job's turn names its session and turn")
        if record.session not in expected_turns:
            raise ValueError(f"request {record.index}: session {record.session} is not expected")
        grouped[record.session].append(record)
    return grouped


def jobs_of(
    records: Sequence[RequestRecord], expected_turns: Mapping[int, int], slo: Slo | None
) -> list[Job]:
    """One :class:`Job` per expected session (``expected_turns``: session → its turns),
    sessions with a cancelled turn left out; with no ``slo`` no job meets one."""
    grouped = _by_session(records, expected_turns)
    jobs = []
    for session, expected in sorted(expected_turns.items()):
        turns = sorted(grouped.get(session, []), key=lambda r: r.turn or 0)
        if any(r.cancelled for r in turns):
            continue
        numbers = [r.turn for r in turns]
        if len(set(numbers)) != len(numbers) or any(n is None or n > expected for n in numbers):
            raise ValueError(f"session {session}: turns {numbers} do not fit {expected} turns")
        ok = sum(1 for r in turns if r.ok)
        completed = ok == expected
        wall = max(r.end_s for r in turns) - turns[0].scheduled_s if turns else None
        jobs.append(
            Job(
                session=session,
                turns_expected=expected,
                turns_ok=ok,
                completed=completed,
                met_slo=completed and slo is not None and all(_turn_meets(r, slo) for r in turns),
                wall_s=wall,
            )
        )
    return jobs


# -- intervals over sessions -------------------------------------------------------------------


def _over_sessions(
    count: int,
    statistic: Callable[[np.ndarray], float],
    *,
    confidence: float,
    resamples: int,
    seed: int,
) -> Estimate:
    """``statistic`` of the sessions ``0..count-1`` (it receives their indices) with a
    percentile-bootstrap interval, sessions resampled whole."""
    value = float(statistic(np.arange(count)))
    if count < 2:
        return Estimate(
            value=value, low=None, high=None, confidence=confidence, why="fewer than 2 sessions"
        )
    from scipy import stats

    result = stats.bootstrap(
        (np.arange(count),),
        statistic,
        vectorized=False,
        n_resamples=resamples,
        confidence_level=confidence,
        method="percentile",
        rng=np.random.default_rng(seed),
    )
    low, high = float(result.confidence_interval.low), float(result.confidence_interval.high)
    method = f"percentile bootstrap over {count} sessions ({resamples} resamples)"
    return Estimate(value=value, low=low, high=high, confidence=confidence, method=method)


def _per_hour(
    flags: np.ndarray,
    per_hour: float,
    boot: Callable[[int, Callable[[np.ndarray], float]], Estimate],
    confidence: float,
) -> Estimate:
    """Sessions flagged (completed, at the SLO, in a tier) per hour: bootstrapped over
    sessions, except when every session is alike (none or all flagged), where resampling has
    no spread to show: then the exact binomial (Clopper-Pearson) interval of the share."""
    count, flagged = flags.size, int(flags.sum())
    if count < 2 or 0 < flagged < count:
        return boot(count, lambda i: float(flags[i].sum()) * per_hour)
    from scipy import stats

    share = stats.binomtest(flagged, count).proportion_ci(confidence, method="exact")
    return Estimate(
        value=flagged * per_hour,
        low=float(share.low) * count * per_hour,
        high=float(share.high) * count * per_hour,
        confidence=confidence,
        method=f"exact binomial (Clopper-Pearson) of {flagged} of {count} sessions: every "
        "session alike, a bootstrap has no spread",
    )


def _dollars(usd_per_hour: float | None, per_hour: Estimate, what: str) -> Estimate | None:
    """$ per job from jobs/hour: the interval's bounds swap (more jobs, fewer dollars each)."""
    if usd_per_hour is None:
        return None
    if per_hour.value == 0.0:
        return None
    value = usd_per_hour / per_hour.value
    if per_hour.low is None or per_hour.high is None or per_hour.low == 0.0:
        why = per_hour.why or f"the interval of {what} reaches 0 jobs/hour"
        return Estimate(value=value, low=None, high=None, confidence=per_hour.confidence, why=why)
    return Estimate(
        value=value,
        low=usd_per_hour / per_hour.high,
        high=usd_per_hour / per_hour.low,
        confidence=per_hour.confidence,
        method=f"{usd_per_hour:g} $/hour over the jobs/hour interval ({per_hour.method})",
    )


def _ttft_by_context(
    by_session: Sequence[Sequence[RequestRecord]],
    boot: Callable[[int, Callable[[np.ndarray], float]], Estimate],
) -> tuple[TtftAtContext, ...]:
    """The completed turns' TTFT grouped by prompt tokens (bins doubling from 1 token); each
    bin's median with an interval over the sessions that have turns in it."""
    bins: dict[int, dict[int, list[tuple[int, float]]]] = defaultdict(lambda: defaultdict(list))
    for session, turns in enumerate(by_session):
        for record in turns:
            ttft = request_values(record)["ttft_s"]
            if record.ok and ttft is not None and record.prompt_tokens:
                low = 1 << (record.prompt_tokens.bit_length() - 1)
                bins[low][session].append((record.prompt_tokens, ttft))
    found = []
    for low, sessions in sorted(bins.items()):
        groups = [np.asarray([ttft for _, ttft in turns]) for turns in sessions.values()]
        tokens = [t for turns in sessions.values() for t, _ in turns]

        def pooled_median(i: np.ndarray, values: list[np.ndarray] = groups) -> float:
            return float(np.median(np.concatenate([values[k] for k in i])))

        found.append(
            TtftAtContext(
                low_tokens=low,
                high_tokens=2 * low,
                turns=len(tokens),
                sessions=len(groups),
                prompt_tokens_mean=float(np.mean(tokens)),
                ttft_p50_s=boot(len(groups), pooled_median),
            )
        )
    return tuple(found)


def assess_jobs(
    records: Sequence[RequestRecord],
    *,
    expected_turns: Mapping[int, int],
    slo: Slo | None,
    context_tokens: int | None = None,
    requested_tokens: Mapping[int, int] | None = None,
    prompt_tokens: Mapping[int, int] | None = None,
    bounds: ValidityBounds = ValidityBounds(),
    usd_per_hour: float | None = None,
    tps_floors: Sequence[float] = DEFAULT_TPS_FLOORS,
    ttft_ceilings_s: Sequence[float] = DEFAULT_TTFT_CEILINGS_S,
    confidence: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
) -> JobReport:
    """The gate, then (for a valid run) the job-level figures of the module. ``slo``
    ``None``: no jobs/hour at an SLO (the rest, the tiers included, need none)."""
    if usd_per_hour is not None and not (math.isfinite(usd_per_hour) and usd_per_hour > 0):
        raise ValueError(f"usd_per_hour {usd_per_hour} must be > 0")
    if slo is not None and not slo.terms():
        raise ValueError("jobs at an SLO need at least one SLO term")
    if any(not f > 0 for f in tps_floors) or any(not c > 0 for c in ttft_ceilings_s):
        raise ValueError("tier floors and ceilings must be > 0")
    validity = check_validity(
        records,
        context_tokens=context_tokens,
        requested_tokens=requested_tokens,
        prompt_tokens=prompt_tokens,
        bounds=bounds,
    )
    if not validity.valid:
        return JobReport(validity=validity, metrics=None)
    jobs = jobs_of(records, expected_turns, slo)
    if not jobs:
        raise ValueError("no session left once cancelled ones are left out")
    kept = {job.session for job in jobs}
    considered = [r for r in records if r.session in kept]
    duration = max(r.end_s for r in considered) - min(r.scheduled_s for r in considered)
    per_hour = 3600.0 / duration

    def boot(count: int, statistic: Callable[[np.ndarray], float]) -> Estimate:
        return _over_sessions(
            count, statistic, confidence=confidence, resamples=resamples, seed=seed
        )

    completed = np.asarray([job.completed for job in jobs], dtype=float)
    good = np.asarray([job.met_slo for job in jobs], dtype=float)
    at_slo = _per_hour(good, per_hour, boot, confidence) if slo is not None else None
    done = _per_hour(completed, per_hour, boot, confidence)
    walls = np.asarray([job.wall_s for job in jobs if job.completed], dtype=float)
    latency = boot(walls.size, lambda i: float(np.median(walls[i]))) if walls.size else None

    index = {job.session: n for n, job in enumerate(jobs)}
    by_session: list[list[RequestRecord]] = [[] for _ in jobs]
    for record in considered:
        by_session[index[record.session or 0]].append(record)
    by_context = _ttft_by_context(by_session, boot)
    tiers = []
    for floor in tps_floors:
        for ceiling in ttft_ceilings_s:
            tier_slo = Slo(ttft_s=ceiling, tpot_s=1.0 / floor)
            meets = np.asarray(
                [
                    job.completed and all(_turn_meets(r, tier_slo) for r in by_session[n])
                    for n, job in enumerate(jobs)
                ],
                dtype=float,
            )

            tiers.append(
                SloTier(
                    min_output_tokens_per_s=floor,
                    max_ttft_s=ceiling,
                    sessions_meeting=int(meets.sum()),
                    share=float(meets.mean()),
                    jobs_per_hour=_per_hour(meets, per_hour, boot, confidence),
                )
            )

    notes = []
    if not walls.size:
        notes.append("job latency not measured: no session completed")
    if usd_per_hour is not None and not completed.any():
        notes.append("$ per completed job not measured: no job completed")
    if slo is None:
        notes.append("jobs/hour at the SLO not measured: no SLO given (--slo)")
    elif usd_per_hour is not None and not good.any():
        notes.append("$ per job at the SLO not measured: no job met the SLO")
    return JobReport(
        validity=validity,
        metrics=JobMetrics(
            slo=slo,
            jobs=len(jobs),
            completed=int(completed.sum()),
            met_slo=int(good.sum()),
            duration_s=duration,
            job_latency_p50_s=latency,
            jobs_per_hour_at_slo=at_slo,
            completed_jobs_per_hour=done,
            usd_per_completed_job=_dollars(usd_per_hour, done, "completed jobs"),
            usd_per_job_at_slo=(
                _dollars(usd_per_hour, at_slo, "jobs at the SLO") if at_slo is not None else None
            ),
            ttft_by_context=tuple(by_context),
            tiers=tuple(tiers),
            notes=tuple(notes),
        ),
    )


# -- the stored form ---------------------------------------------------------------------------


def _interval(estimate: Estimate) -> Interval:
    return Interval(
        value=estimate.value,
        low=estimate.low,
        high=estimate.high,
        confidence=estimate.confidence,
        method=estimate.method,
        why=estimate.why,
    )


def _maybe(estimate: Estimate | None) -> Interval | None:
    return None if estimate is None else _interval(estimate)


def stored_report(
    report: JobReport,
    *,
    context_tokens: int | None,
    context_why: str = "",
    usd_per_hour: float | None = None,
    usd_source: str = "",
    usd_why: str = "",
) -> tuple[JobGate, JobFigures | None]:
    """The gate and the figures of ``report`` as the stored documents hold them
    (:class:`~accelscope.llm.documents.JobGate`, :class:`~accelscope.llm.documents.JobFigures`),
    with the context length the gate checked and the price the $ came from."""
    validity = report.validity
    gate = JobGate(
        valid=validity.valid,
        turns=validity.turns,
        errors=validity.errors,
        overflowed=validity.overflowed,
        context_tokens=context_tokens,
        context_why="" if validity.overflowed is not None else context_why,
        lag_p99_s=validity.lag_p99_s,
        max_error_share=validity.bounds.max_error_share,
        max_overflow_share=validity.bounds.max_overflow_share,
        lag_limit_s=validity.bounds.lag_limit_s,
        failures=[GateReason(reason=f.reason.value, text=f.text) for f in validity.failures],
    )
    metrics = report.metrics
    if metrics is None:
        return gate, None
    figures = JobFigures(
        jobs=metrics.jobs,
        completed=metrics.completed,
        met_slo=metrics.met_slo,
        duration_s=metrics.duration_s,
        job_latency_p50_s=_maybe(metrics.job_latency_p50_s),
        completed_jobs_per_hour=_interval(metrics.completed_jobs_per_hour),
        jobs_per_hour_at_slo=_maybe(metrics.jobs_per_hour_at_slo),
        usd_per_hour=usd_per_hour,
        usd_source=usd_source if usd_per_hour is not None else "",
        usd_why="" if usd_per_hour is not None else usd_why,
        usd_per_completed_job=_maybe(metrics.usd_per_completed_job),
        usd_per_job_at_slo=_maybe(metrics.usd_per_job_at_slo),
        ttft_by_context=[
            TtftContextBin(
                low_tokens=b.low_tokens,
                high_tokens=b.high_tokens,
                turns=b.turns,
                sessions=b.sessions,
                prompt_tokens_mean=b.prompt_tokens_mean,
                ttft_p50_s=_interval(b.ttft_p50_s),
            )
            for b in metrics.ttft_by_context
        ],
        tiers=[
            JobTier(
                min_output_tokens_per_s=t.min_output_tokens_per_s,
                max_ttft_s=t.max_ttft_s,
                sessions_meeting=t.sessions_meeting,
                share=t.share,
                jobs_per_hour=_interval(t.jobs_per_hour),
            )
            for t in metrics.tiers
        ],
        notes=list(metrics.notes),
    )
    return gate, figures
