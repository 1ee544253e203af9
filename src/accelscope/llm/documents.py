"""The typed documents of ``accelscope llm``: what one request measured, each trial's figures
and the run's summary, as pydantic models that the view, the HTML report, ``runs show``,
``compare`` and ``tune`` read as attributes.

The field names are the keys the first, dict-based version stored (a ``p50_ci`` is still a
``p50_ci``), and every field added since is optional with a default, so a run stored before
these models existed still loads (``tests/data/store-llm-2026-11.sqlite``). Producers build the
models and store ``model_dump(mode="json")``; readers go through :meth:`Document.from_payload`,
whose error names the run and the field on one line. A figure that was not measured is
``None`` here and "not measured" on screen, decided once: in the model.
"""

from __future__ import annotations

import math
import re
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_serializer

from accelscope.documents import Document, LlmCapacity, Slo
from accelscope.errors import BadInputError
from accelscope.hardware.energy import EnergyFigure

__all__ = [
    "AgenticStep",
    "Arrivals",
    "CacheOptimum",
    "CapacityPoint",
    "CapacitySummary",
    "ClientLag",
    "DecodeFloor",
    "Distribution",
    "ErrorKind",
    "EvictionCliff",
    "GateReason",
    "Goodput",
    "Interval",
    "JobFigures",
    "JobGate",
    "JobTier",
    "LlmRun",
    "LlmTrial",
    "MeanMax",
    "Metrics",
    "PrefixCacheStats",
    "PrefixReuse",
    "RequestRecord",
    "ServerConfig",
    "ServerMetrics",
    "ServerSample",
    "Slo",
    "SloBreak",
    "SloState",
    "SloTerm",
    "SloVerdict",
    "TailClaim",
    "TargetDescription",
    "Throughput",
    "TokenSource",
    "TokenStats",
    "TrialSummary",
    "TtftContextBin",
    "TurnSummary",
    "Window",
    "WorkloadSummary",
]

TokenSource = Literal["usage", "tokenizer", "generated", "unknown"]
"""Where ``output_tokens`` came from: the server's ``usage``, the model's tokenizer run over the
streamed text (the fallback, labelled), the in-process generator's own token ids, or nowhere."""

SloState = Literal["met", "missed", "unclaimed"]


# -- one request ------------------------------------------------------------------------------


class RequestRecord(BaseModel):
    """What one request measured, in seconds on ``time.perf_counter``'s clock relative to the
    trial's start. ``scheduled_s`` is when the workload said the request arrives (open loop:
    fixed before the trial; closed loop and later turns of a session: when the client was
    ready to send it), ``sent_s`` when it was sent: latencies count from ``scheduled_s``.
    ``chunk_times_s`` are the arrivals of the chunks that carried output tokens on any channel
    (answer text, reasoning, tool-call deltas); ``first_token_s`` the first of them,
    ``last_token_s`` the last (``None`` in records of producers that do not tell channels apart
    and in runs stored before it: the last of ``chunk_times_s`` then), ``first_content_s`` the
    first chunk with answer text (``delta.content``, or a completion's ``text``); ``end_s`` is
    the end of the stream (``[DONE]`` or the connection's end). ``chunk_tokens`` are the tokens
    of each chunk of ``chunk_times_s`` when the server reported them (usage on every chunk,
    vLLM's ``continuous_usage_stats``), else empty; ``reasoning_tokens`` the output tokens
    spent reasoning (``usage.completion_tokens_details.reasoning_tokens``, else counted from
    the chunks when each chunk's tokens are known), ``None`` when not known. ``error`` is
    empty for a request that completed; ``cancelled`` marks one the run itself cut short
    (Ctrl-C), which no figure counts. ``session`` and ``turn`` (1-based) place a request in a
    multi-turn conversation; ``reusable_prefix_tokens`` is the prompt's prefix a cache could
    hold from earlier requests (the conversation so far, a shared prefix, a trace's repeated
    blocks), ``None`` when the workload does not say.

    Mutable: the client fills it in while the stream arrives. ``output_text`` (the answer the
    server gave, reasoning left out, for the next turn of a conversation) is never stored."""

    model_config = ConfigDict(extra="ignore", validate_assignment=False)

    index: int
    scheduled_s: float
    sent_s: float
    end_s: float
    first_token_s: float | None = None
    chunk_times_s: list[float] = Field(default_factory=list)
    first_content_s: float | None = None
    last_token_s: float | None = None
    chunk_tokens: list[int] = Field(default_factory=list)
    reasoning_tokens: int | None = None
    output_tokens: int | None = None
    prompt_tokens: int | None = None
    tokens_source: TokenSource = "unknown"
    output_chars: int = 0
    error: str = ""
    cancelled: bool = False
    session: int | None = None
    turn: int | None = None
    reusable_prefix_tokens: int | None = None
    cached_tokens: int | None = None
    """Prompt tokens the server served from its prefix cache
    (``usage.prompt_tokens_details.cached_tokens``), ``None`` when it does not say."""
    output_text: str = Field(default="", exclude=True, repr=False)

    @property
    def ok(self) -> bool:
        """Completed without error and not cancelled."""
        return not self.error and not self.cancelled

    @field_serializer(
        "scheduled_s", "sent_s", "end_s", "first_token_s", "first_content_s", "last_token_s"
    )
    def _round_time(self, value: float | None) -> float | None:
        return None if value is None else round(value, 6)

    @field_serializer("chunk_times_s")
    def _round_times(self, value: list[float]) -> list[float]:
        return [round(t, 6) for t in value]


# -- what a trial asks for --------------------------------------------------------------------


class Arrivals(Document):
    """How requests (or sessions) arrive: open loop at ``rate_per_s`` (gamma gaps with
    coefficient of variation ``cv``; 1 is Poisson), closed loop at ``concurrency`` clients, or
    a trace replayed on its own timestamps at ``speed`` times real time. Exactly one of the
    three. Built by the workflow (one-line :class:`BadInputError` on a bad value) and read
    back from stored trials."""

    rate_per_s: float | None = None
    concurrency: int | None = None
    cv: float = 1.0
    speed: float | None = None

    def model_post_init(self, context: Any, /) -> None:
        given = [x is not None for x in (self.rate_per_s, self.concurrency, self.speed)]
        if sum(given) != 1:
            raise BadInputError("give one of a rate, a concurrency or a trace speed")
        if self.rate_per_s is not None and not (
            math.isfinite(self.rate_per_s) and self.rate_per_s > 0
        ):
            raise BadInputError(f"--rate {self.rate_per_s:g}: give a positive rate (per second)")
        if self.concurrency is not None and self.concurrency < 1:
            raise BadInputError(f"--concurrency {self.concurrency}: give a count >= 1")
        if self.speed is not None and not (math.isfinite(self.speed) and self.speed > 0):
            raise BadInputError(f"--trace-speed {self.speed:g}: give a positive factor")
        if not math.isfinite(self.cv) or self.cv <= 0:
            raise BadInputError(f"--burstiness {self.cv:g}: give a positive CV (1 is Poisson)")

    @property
    def load_kind(self) -> Literal["rate", "concurrency", "speed"]:
        """Which of the three loads this is."""
        if self.rate_per_s is not None:
            return "rate"
        return "concurrency" if self.concurrency is not None else "speed"

    @property
    def load(self) -> float:
        """The offered load as one number (rate, concurrency or speed factor)."""
        value = self.rate_per_s or self.concurrency or self.speed
        return float(value or 0.0)

    @property
    def label(self) -> str:
        """``4 req/s`` (with the CV when not Poisson), ``concurrency 8`` or ``trace x2``."""
        if self.rate_per_s is not None:
            gaps = "" if self.cv == 1.0 else f", gamma CV {self.cv:g}"
            return f"{self.rate_per_s:g} req/s{gaps}"
        if self.concurrency is not None:
            return f"concurrency {self.concurrency}"
        return f"trace x{self.speed:g}"


# -- a trial's figures ------------------------------------------------------------------------


class TailClaim(Document):
    """Whether LoadGen's early-stopping rule lets the trial claim a tail percentile."""

    claimable: bool
    bound: float | None = None
    needs: int | None = None
    why: str = ""


PercentileKey = Literal["p50", "p90", "p99"]


class Distribution(Document):
    """One figure's distribution over a trial's steady window: percentiles with their
    distribution-free 95 % CIs (``[low, high]``, ``None`` where the sample cannot bound it)
    and, for p90 and p99, the tail claim. ``n == 0``: nothing was measured."""

    n: int = 0
    mean: float | None = None
    min: float | None = None
    max: float | None = None
    p50: float | None = None
    p90: float | None = None
    p99: float | None = None
    p50_ci: tuple[float | None, float | None] | None = None
    p90_ci: tuple[float | None, float | None] | None = None
    p99_ci: tuple[float | None, float | None] | None = None
    p90_claim: TailClaim | None = None
    p99_claim: TailClaim | None = None

    def value(self, key: str) -> float | None:
        """The percentile ``key`` (``p50``, ``p90``, ``p99``), ``None`` when not measured."""
        found = getattr(self, key, None)
        return float(found) if isinstance(found, int | float) and math.isfinite(found) else None

    def ci(self, key: str) -> tuple[float | None, float | None] | None:
        """The 95 % CI of percentile ``key``."""
        found: tuple[float | None, float | None] | None = getattr(self, f"{key}_ci", None)
        return found

    def unclaimed_why(self, key: str) -> str:
        """Why tail ``key`` cannot be claimed ('' when it can, or is not a tail)."""
        claim: TailClaim | None = getattr(self, f"{key}_claim", None)
        if claim is None or claim.claimable:
            return ""
        return claim.why or "not claimable"


class Metrics(Document):
    """The per-request figures of a trial (see ``llm.summary.DEFINITIONS``)."""

    ttft_s: Distribution = Field(default_factory=Distribution)
    ttft_sent_s: Distribution = Field(default_factory=Distribution)
    tpot_s: Distribution = Field(default_factory=Distribution)
    itl_s: Distribution = Field(default_factory=Distribution)
    e2e_s: Distribution = Field(default_factory=Distribution)
    stream_tail_s: Distribution = Field(default_factory=Distribution)
    ttfc_s: Distribution = Field(default_factory=Distribution)
    e2e_stream_s: Distribution = Field(default_factory=Distribution)

    def get(self, name: str) -> Distribution:
        """The distribution of ``name`` (``ttft_s`` ...)."""
        found: Distribution = getattr(self, name)
        return found


class SloTerm(Document):
    """One SLO term's verdict: requests over the bound (errors and missing values count as
    over) out of ``n``, and the state by LoadGen's server rule."""

    bound_s: float
    over: int
    n: int
    state: SloState
    why: str = ""


class SloVerdict(Document):
    """A trial's SLO verdict: the SLO and each term's state."""

    ttft_s: float | None = None
    tpot_s: float | None = None
    e2e_s: float | None = None
    percentile: float = 99.0
    terms: dict[str, SloTerm] = Field(default_factory=dict)
    met: bool = False

    @property
    def state(self) -> SloState:
        """``met``, ``missed`` (a term missed) or ``unclaimed``."""
        if self.met:
            return "met"
        return "missed" if any(t.state == "missed" for t in self.terms.values()) else "unclaimed"


class Goodput(Document):
    """Requests and their output tokens per second of the steady window that completed and
    met every SLO term; ``attainment`` is the good share."""

    requests_per_s: float
    output_tokens_per_s: float
    attainment: float


class Throughput(Document):
    """Output (and prompt + output) tokens streamed in the steady window, and requests
    completed in it, per second of it."""

    output_tokens_per_s: float
    total_tokens_per_s: float
    requests_per_s: float


class TokenStats(Document):
    """Mean prompt and output tokens of the completed requests, and their output total;
    of the output, the reasoning and the answer tokens (output - reasoning; means and the
    reasoning total over the requests whose reasoning tokens are known, ``reasoning_known`` of
    them; ``None``: none known) and the requests that
    streamed no answer text at all (``without_content``: capped inside reasoning, or only
    tool calls)."""

    prompt_mean: float | None = None
    output_mean: float | None = None
    output_total: int = 0
    reasoning_mean: float | None = None
    reasoning_total: int | None = None
    answer_mean: float | None = None
    reasoning_known: int = 0
    without_content: int = 0


class Window(Document):
    """The steady window: the arrivals after the ramp-up, to the last arrival."""

    start_s: float
    end_s: float
    length_s: float
    requests: int


class ClientLag(Document):
    """sent - scheduled, over every request of the trial."""

    p50: float
    p99: float
    max: float
    limit: float


class ErrorKind(Document):
    """One error message and how many requests ended with it."""

    error: str
    count: int


class TurnSummary(Document):
    """The requests of one turn of a multi-turn workload: how their TTFT changes as the
    conversation (and what a prefix cache could reuse of it) grows."""

    turn: int
    requests: int
    completed: int
    ttft_s: Distribution = Field(default_factory=Distribution)
    prompt_tokens_mean: float | None = None
    reusable_prefix_tokens_mean: float | None = None


class PrefixReuse(Document):
    """What the workload lets a prefix cache reuse, against what the server reported.
    ``expected_share``: reusable prompt tokens over all prompt tokens of the completed
    requests, counted in whole KV blocks when the server published its block size;
    ``measured_share``: the server's own hit rate over the trial (``None``: not exported)."""

    prompt_tokens: int = 0
    reusable_tokens: int = 0
    expected_share: float | None = None
    block_size_tokens: int | None = None
    measured_share: float | None = None
    basis: str = ""


class Interval(Document):
    """A figure and its confidence interval over sessions (``low``/``high`` ``None``: the
    interval is not measured, ``why`` says why); ``method`` names how it was computed."""

    value: float = Field(description="the figure itself")
    low: float | None = Field(default=None, description="lower bound of the interval")
    high: float | None = Field(default=None, description="upper bound of the interval")
    confidence: float = Field(default=0.95, description="confidence level of the interval")
    method: str = Field(default="", description="how the interval was computed")
    why: str = Field(default="", description="why there is no interval")


class GateReason(Document):
    """One reason the validity gate refused a run: its kind and the line that says it."""

    reason: str = Field(description="errors, context overflow or client behind schedule")
    text: str = Field(description="the counts and the bound, in one line")


class JobGate(Document):
    """The validity gate of one agentic step (``llm.jobs.check_validity``): a step whose failed
    turns, context overflows or client lag exceed their stated bounds is invalid and gets no
    job figure. ``overflowed`` ``None``: no context length known, overflow not checked
    (``context_why`` says why)."""

    valid: bool = Field(description="no bound exceeded")
    turns: int = Field(description="turns considered (cancelled ones left out)")
    errors: int = Field(description="turns that failed, or were not sent after a failure")
    overflowed: int | None = Field(
        default=None, description="prompts over the context (None: not checked)"
    )
    context_tokens: int | None = Field(default=None, description="the context length checked")
    context_why: str = Field(default="", description="why overflow was not checked")
    lag_p99_s: float = Field(description="p99 of sent - scheduled over the turns, seconds")
    max_error_share: float = Field(description="the bound on failed turns, a share")
    max_overflow_share: float = Field(description="the bound on overflowing prompts, a share")
    lag_limit_s: float = Field(description="the bound on the client's p99 lag, seconds")
    failures: list[GateReason] = Field(default_factory=list, description="each bound exceeded")


class TtftContextBin(Document):
    """The turns whose prompt held ``low_tokens`` <= tokens < ``high_tokens``: their median
    TTFT with an interval over the sessions that have turns in the bin."""

    low_tokens: int
    high_tokens: int
    turns: int
    sessions: int
    prompt_tokens_mean: float
    ttft_p50_s: Interval


class JobTier(Document):
    """One row of the SLO-tier table (AgentPerf's style): sessions whose every turn streamed
    at least ``min_output_tokens_per_s`` (1 / TPOT) with TTFT at most ``max_ttft_s``."""

    min_output_tokens_per_s: float
    max_ttft_s: float
    sessions_meeting: int
    share: float
    jobs_per_hour: Interval


class JobFigures(Document):
    """The job-level figures of a valid agentic step (``llm.jobs``): a session is a job.
    ``jobs_per_hour_at_slo`` ``None``: no SLO given; the $ figures ``None``: no price known
    (``usd_why``) or nothing to divide by (``notes``)."""

    jobs: int = Field(description="sessions considered")
    completed: int = Field(description="sessions whose every turn was answered")
    met_slo: int = Field(description="completed sessions whose every turn met the SLO")
    duration_s: float = Field(description="first scheduled arrival to last stream end")
    job_latency_p50_s: Interval | None = Field(
        default=None, description="median wall time of a completed session, tool waits included"
    )
    completed_jobs_per_hour: Interval
    jobs_per_hour_at_slo: Interval | None = None
    usd_per_hour: float | None = Field(default=None, description="the price used, $/hour")
    usd_source: str = Field(default="", description="where the price came from")
    usd_why: str = Field(default="", description="why there is no $ per job")
    usd_per_completed_job: Interval | None = None
    usd_per_job_at_slo: Interval | None = None
    ttft_by_context: list[TtftContextBin] = Field(default_factory=list)
    tiers: list[JobTier] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)


class CacheOptimum(Document):
    """The step's measured prefix-cache hit rate set against the best a cache could reach on
    the same sessions (``llm.prefix_optimum``): every prefix kept, and LRU under the server's
    KV capacity at the step's concurrency when the server publishes it. ``reference`` is the
    optimum the ratio divides by (``lru`` when modelled, else ``every prefix kept``);
    ``below_bound``: measured / optimum fell below ``bound``."""

    concurrency: int | None = Field(default=None, description="sessions in flight (None: a rate)")
    block_size_tokens: int = Field(description="KV block of the server, tokens")
    block_basis: str = Field(description="where the block size came from")
    tokens_per_model_token: float | None = Field(
        default=None,
        description="the server's prompt tokens per token of the workload's own token model, "
        "measured on the step's answered turns (scales the blocks the optimum counts)",
    )
    measured: float | None = Field(default=None, description="the server's hit rate")
    measured_source: str = Field(default="", description="the counters it came from")
    measured_why: str = Field(default="", description="why it was not measured")
    every_prefix_kept: float = Field(description="the hit rate with nothing evicted")
    lru: float | None = Field(default=None, description="the hit rate of LRU under the capacity")
    capacity_blocks: int | None = Field(default=None, description="the server's KV capacity")
    lru_why: str = Field(default="", description="why LRU under a capacity was not modelled")
    reference: Literal["lru", "every prefix kept"] = "every prefix kept"
    ratio: float | None = Field(default=None, description="measured / the reference optimum")
    kept_share: float | None = Field(
        default=None,
        description="measured / every prefix kept: the share of the reuse the workload allows "
        "that the server's cache kept (what eviction took, whatever the policy)",
    )
    ratio_why: str = Field(default="", description="why there is no ratio")
    bound: float = Field(description="the share of the optimum below which the cache fell off")
    below_bound: bool = False
    note: str = Field(default="", description="what a ratio above 1 says of the model")


class AgenticStep(Document):
    """An agentic workload's step (one trial): the validity gate first; the job figures only
    when it passed; the prefix cache against its optimum."""

    gate: JobGate
    jobs: JobFigures | None = None
    cache: CacheOptimum | None = None


class EvictionCliff(Document):
    """Where the prefix cache fell off, over a run's concurrency steps, each the first
    concurrency below ``bound`` (``None``: no step was, or none was comparable; ``text`` says
    which): ``concurrency``, measured / the step's optimum (LRU under the server's capacity
    when modelled); ``reuse_lost_at``, measured / every prefix kept (the reuse eviction took);
    ``optimum_cliff_at``, the LRU optimum / every prefix kept (the cliff the capacity alone
    predicts from the workload)."""

    bound: float
    concurrency: int | None = None
    reuse_lost_at: int | None = None
    optimum_cliff_at: int | None = None
    text: str = ""


class SloBreak(Document):
    """The first moment an SLO term started failing, set against what the server was doing.
    ``at_s`` (seconds from the trial's start) is the scheduled arrival of the first request
    over the bound in the first window of requests whose share over the bound exceeded what
    the percentile allows; ``server`` the server's state at the last scrape before it."""

    metric: str
    at_s: float
    window_requests: int
    share_over: float
    waiting_since_s: float | None = None
    server: ServerSample | None = None
    text: str = ""


class TrialSummary(Document):
    """The figures of one trial (see ``llm.summary`` for each definition)."""

    requests: int
    completed: int
    errors: int
    error_kinds: list[ErrorKind] = Field(default_factory=list)
    cancelled: int = 0
    duration_s: float = 0.0
    window: Window | None = None
    metrics: Metrics = Field(default_factory=Metrics)
    client_lag_s: ClientLag | None = None
    client_bound: bool = False
    token_sources: dict[str, int] = Field(default_factory=dict)
    tokens: TokenStats | None = None
    throughput: Throughput | None = None
    slo: SloVerdict | None = None
    goodput: Goodput | None = None
    notes: list[str] = Field(default_factory=list)
    client_cpu_cores: float | None = None
    client_cpu_s_per_request: float | None = None
    client_cpu_ms_per_request: float | None = None
    """The client's CPU per request sent (connect, send, read and parse the stream: the
    client threads' and the stream reader's, in every worker process), apart from the trial's
    fixed costs; ``client_cpu_s_per_request`` divides all of the trial's CPU by the requests.
    ``None`` in runs stored before it."""
    client_cpu_fixed_s: float | None = None
    """The rest of the trial's CPU: dispatch, threads and worker processes started, scrapes."""
    turns: list[TurnSummary] = Field(default_factory=list)
    prefix_reuse: PrefixReuse | None = None
    slo_breaks: list[SloBreak] = Field(default_factory=list)
    agentic: AgenticStep | None = None
    """An agent-trajectory workload's gate, jobs and prefix cache against its optimum."""
    energy: EnergyFigure | None = None
    """Joules over the whole trial (the first request sent to the last stream ended) from
    NVML's total-energy counter of the GPU(s) serving it (the board draws it for every process
    on it); ``items`` are the output tokens of the completed requests, so ``joules_per_item``
    is joules per output token. Not measured: ``energy_j`` is ``None`` and ``reason`` says
    why. Trials stored before this was an :class:`EnergyFigure` still load."""

    @property
    def slo_state(self) -> str:
        """``met``, ``missed``, ``unclaimed``, or ``no SLO``."""
        return "no SLO" if self.slo is None else self.slo.state


# -- what the server said ---------------------------------------------------------------------


class PrefixCacheStats(Document):
    """Prefix-cache hits over queries during the trial (tokens on vLLM), or the server's own
    hit-rate gauge averaged over the scrapes; ``source`` names the metrics used."""

    queries: float | None = None
    hits: float | None = None
    hit_rate: float | None = None
    source: str = ""


class MeanMax(Document):
    """A gauge's mean and maximum over the scrapes."""

    mean: float
    max: float


class ServerSample(Document):
    """One scrape of the server's ``/metrics`` during a trial: gauges as read, counters as
    their growth since the previous scrape. ``t_s`` is seconds from the trial's start on the
    client's clock (``None`` fields: the server does not export that quantity)."""

    t_s: float
    running: float | None = None
    waiting: float | None = None
    kv_cache_usage: float | None = None
    prefix_cache_queries: float | None = None
    prefix_cache_hits: float | None = None
    preemptions: float | None = None


class ServerConfig(Document):
    """What the server publishes of its own configuration (vLLM's ``vllm:cache_config_info``
    labels): KV block size, whether prefix caching is on, the KV cache's capacity. ``labels``
    keeps every label as published."""

    server: str
    source: str
    block_size_tokens: int | None = None
    prefix_caching: bool | None = None
    kv_capacity_tokens: int | None = None
    kv_memory_bytes: float | None = None
    cache_dtype: str | None = None
    max_concurrency: float | None = None
    labels: dict[str, str] = Field(default_factory=dict)


class ServerMetrics(Document):
    """What the server's ``/metrics`` said over a trial: counters as growth from the first to
    the last scrape, gauges as mean and max, the scrapes themselves as a timeline, and the
    configuration it publishes. ``available: False`` with ``why`` when there was nothing to
    read; a quantity the server does not export is ``None``, never 0."""

    available: bool
    why: str = ""
    server: str | None = None
    scrapes: int = 0
    failed_scrapes: int = 0
    prefix_cache: PrefixCacheStats | None = None
    kv_cache_usage: MeanMax | None = None
    preemptions: float | None = None
    waiting: MeanMax | None = None
    running: MeanMax | None = None
    config: ServerConfig | None = None
    timeline: list[ServerSample] = Field(default_factory=list)
    contradicted: list[str] = Field(default_factory=list)
    """Gauges the client's own records contradicted, not used (one line each, why)."""


class DecodeFloor(Document):
    """The decode roofline of one trial (``llm.floor``): the TPOT floor from the weights and
    KV bytes one step reads over the bandwidth, with every input and its source."""

    weights_read_bytes: float
    active_parameters: float
    kv_bytes_per_token: float
    decode_batch_mean: float
    context_mean_tokens: float
    bandwidth_bytes_per_s: float
    bandwidth_source: str
    tpot_floor_s: float | None = None
    estimated: bool = True
    tpot_measured_p50_s: float | None = None
    decode_efficiency: float | None = None
    bound: str = ""
    ttft_floor_s: float | None = None
    peak_flops_per_s: float | None = None
    peak_source: str = ""
    ttft_measured_p50_s: float | None = None
    prefill_efficiency: float | None = None
    notes: list[str] = Field(default_factory=list)


# -- the stored documents ---------------------------------------------------------------------


class ClientWorker(Document):
    """One client process (``--workers N``) or Ray actor (``--workers ray:N``) that sent a
    share of a trial: where it ran, and what it sent and brought back."""

    worker: int
    host: str
    pid: int | None = None
    node: str = ""
    """The Ray node id it was placed on (empty: a local process)."""
    requests: int
    """Requests its share of the schedule planned."""
    records: int
    """Records it brought back (the rest were never sent)."""
    died: str = ""

    @property
    def label(self) -> str:
        where = f"pid {self.pid} on {self.host}" if self.pid is not None else self.host
        node = f" (Ray node {self.node[:12]})" if self.node else ""
        end = f", {self.died}" if self.died else ""
        return f"worker {self.worker}: {where}{node}, {self.records} of {self.requests}{end}"


class LlmTrial(Document):
    """An ``llm-trial`` document: one trial at one load, committed as it ends. Stored with the
    steady window's per-request samples (``samples``, what ``compare`` bootstraps) and every
    raw ``records``; inside the run's summary document both are left out."""

    kind: ClassVar[str] = "llm-trial"

    index: int
    role: str = "fixed"
    label: str = ""
    arrivals: Arrivals
    requests_planned: int = 0
    summary: TrialSummary
    server_metrics: ServerMetrics = Field(
        default_factory=lambda: ServerMetrics(available=False, why="not recorded")
    )
    floor: DecodeFloor | None = None
    warnings: list[str] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    """What the target saw of this trial (an in-process model's static batches)."""
    interrupted: bool = False
    client_workers: list[ClientWorker] = Field(default_factory=list)
    """The client processes or Ray actors that sent the trial (``--workers``); empty: this
    process alone."""
    samples: dict[str, list[float]] = Field(default_factory=dict)
    records: list[RequestRecord] = Field(default_factory=list)

    def without_records(self) -> LlmTrial:
        """The trial as the run's summary holds it (no samples, no records)."""
        return self.model_copy(update={"samples": {}, "records": []})


class TargetDescription(BaseModel):
    """What was measured: an HTTP endpoint (``url``, ``path``, ``api``) or an in-process
    model (``model_dir``), and how token counts were obtained. Unknown keys are kept."""

    model_config = ConfigDict(frozen=True, extra="allow")

    kind: str = ""
    url: str | None = None
    path: str | None = None
    api: str | None = None
    model: str | None = None
    model_dir: str | None = None
    ignore_eos: bool | None = None
    token_counts: str | None = None
    batching: str | None = None
    max_batch: int | None = None
    dtype: str | None = None
    device: str | None = None
    model_type: str | None = None
    parameters: int | None = None

    @property
    def where(self) -> str:
        """The URL or the model directory."""
        return self.url or self.model_dir or ""


class WorkloadSummary(BaseModel):
    """The workload a run sent (not the prompts themselves): its kind, lengths, source file,
    prefix scenario, sessions and turns, and the seed. Unknown keys are kept."""

    model_config = ConfigDict(frozen=True, extra="allow")

    kind: str = "synthetic"
    input_tokens: str | None = None
    output_tokens: str | None = None
    prompts: str | None = None
    prompts_count: int | None = None
    prefix: str | None = None
    shared_prefix_tokens: int = 0
    prefix_hit_rate: float = 0.0
    seed: int = 0
    sessions: int | None = None
    turns: str | None = None
    think_time: str | None = None
    source: str | None = None
    entries: int | None = None
    skipped: int | None = None
    speed: float | None = None
    trace_block_tokens: int | None = None
    expected_prefix_reuse: float | None = None
    notes: list[str] = Field(default_factory=list)

    def rows(self) -> list[tuple[str, str]]:
        """(key, value) for every field that says something."""
        found = []
        for key, value in self.model_dump().items():
            if value is None or value == [] or value == "":
                continue
            found.append((key, ", ".join(value) if isinstance(value, list) else str(value)))
        return found


class CapacityPoint(Document):
    """One trial of a capacity search: its load and whether it passed (why not)."""

    load: float
    passed: bool
    why: str = ""


class CapacitySummary(Document):
    """The capacity search: the highest load measured to pass (``None``: none did), its
    unit, the goodput measured there, and every trial of the search."""

    capacity: float | None = None
    unit: str = "req/s"
    stopped: str = ""
    good_output_tokens_per_s: float | None = None
    good_requests_per_s: float | None = None
    output_tokens_mean: float | None = None
    prompt_tokens_mean: float | None = None
    points: list[CapacityPoint] = Field(default_factory=list)

    def document(
        self,
        *,
        model: str,
        target: dict[str, Any],
        slo: Slo | None,
        environment_fingerprint: str,
        local_server: bool,
        valid: bool | None = None,
    ) -> LlmCapacity:
        """The ``llm-capacity`` document ``plan api --from-run`` prices (``llm``'s capacity
        search, or ``tune``'s winner): built here only. ``valid`` defaults to whether a load
        passed."""
        return LlmCapacity(
            model=model,
            target=target,
            slo=slo,
            capacity=self.capacity,
            unit=self.unit,
            good_output_tokens_per_s=self.good_output_tokens_per_s,
            good_requests_per_s=self.good_requests_per_s,
            output_tokens_mean=self.output_tokens_mean,
            prompt_tokens_mean=self.prompt_tokens_mean,
            environment_fingerprint=environment_fingerprint,
            local_server=local_server,
            valid=self.capacity is not None if valid is None else valid,
        )

    @property
    def label(self) -> str:
        """``concurrency 4``, ``2.5 req/s`` or ``not measured``."""
        if self.capacity is None:
            return "not measured"
        if self.unit == "concurrency":
            return f"concurrency {self.capacity:g}"
        return f"{self.capacity:g} {self.unit}"


class LlmRun(Document):
    """The ``llm`` document: the run's summary (every trial without its records, the
    capacity, the warnings, every figure's definition)."""

    kind: ClassVar[str] = "llm"

    target: TargetDescription = Field(default_factory=TargetDescription)
    model: str
    workload: WorkloadSummary = Field(default_factory=WorkloadSummary)
    slo: Slo | None = None
    slo_label: str = "none"
    definitions: dict[str, str] = Field(default_factory=dict)
    trials: list[LlmTrial] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)
    environment_fingerprint: str = ""
    local_server: bool = False
    floor_why: str | None = None
    capacity: CapacitySummary | None = None
    server_config: ServerConfig | None = None
    notes: list[str] = Field(default_factory=list)
    eviction_cliff: EvictionCliff | None = None
    """Agentic runs: where the measured prefix-cache hit rate fell off its optimum."""
    saturation: list[str] = Field(default_factory=list)
    """Why a rate or concurrency sweep stopped before its last step, and the steps it left
    out (:mod:`accelscope.llm.saturation`); empty: every step asked for was measured."""

    @field_serializer("trials")
    def _trials_without_records(self, trials: list[LlmTrial]) -> list[dict[str, Any]]:
        """The summary's trials leave out the samples and records (the trial documents hold
        them)."""
        return [t.model_dump(mode="json", exclude={"samples", "records"}) for t in trials]


_SUFFIX = re.compile(r"_s$")


def metric_name(metric: str) -> str:
    """``ttft_s`` -> ``TTFT``."""
    return _SUFFIX.sub("", metric).upper()


SloBreak.model_rebuild()
