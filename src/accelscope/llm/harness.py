"""The measuring loop ``llm`` and ``tune`` share: one trial at one load, end to end, and the
capacity search built on it.

A trial builds its sessions from the workload (seeded per trial, so trials do not share
prompts), reads the server's ``/metrics`` around it, runs it (:func:`run_trial`), and turns the
records into one :class:`~accelscope.llm.documents.LlmTrial`: the figures, the server's
summary and timeline, the reuse the workload allowed against the hits the server reported, the
moment each missed SLO term broke, the decode floor, and the warnings. ``on_trial`` receives
each trial as it ends (the command commits it to the store), also one cut short by Ctrl-C,
which is then raised again as ``KeyboardInterrupt``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from accelscope.hardware.energy import EnergyFigure, EnergyMeter
from accelscope.llm.agentic import AgenticWorkload, cache_sessions
from accelscope.llm.capacity import CapacityResult, search_capacity
from accelscope.llm.documents import (
    AgenticStep,
    Arrivals,
    CapacityPoint,
    CapacitySummary,
    LlmTrial,
    RequestRecord,
    ServerMetrics,
    Slo,
    TrialSummary,
)
from accelscope.llm.explain import prefix_reuse
from accelscope.llm.floor import FloorInputs
from accelscope.llm.jobs import ValidityBounds, assess_jobs, stored_report
from accelscope.llm.metrics_scraper import ServerMetricsScraper
from accelscope.llm.prefix_optimum import against_optimum
from accelscope.llm.records import Target
from accelscope.llm.scaleout import Workers, run_scaled_trial
from accelscope.llm.scaleout_ray import run_ray_trial
from accelscope.llm.server_vocabulary import check_against_client
from accelscope.llm.summary import WARMUP_FRACTION, steady_samples, summarise_trial
from accelscope.llm.timeline import slo_breaks
from accelscope.llm.trial import TrialInterrupted, TrialRecords, run_trial
from accelscope.llm.workload import Session, TokenCounter, WorkloadSource
from accelscope.load.early_stopping import min_passing_queries

__all__ = ["COLD_HIT_RATE", "Harness", "LoadKind", "arrivals_at", "capacity_summary"]

COLD_HIT_RATE = 0.01
"""A cold run whose server reports more prefix-cache hits than this share of the prompt
tokens gets a warning (any hit is a shared block on vLLM; 1 % tolerates chance overlaps)."""

LoadKind = str
"""``rate`` (req/s or sessions/s), ``concurrency`` (clients) or ``speed`` (trace replay)."""

Events = Callable[[str], None]


def arrivals_at(kind: LoadKind, load: float, cv: float = 1.0) -> Arrivals:
    """The arrivals of a load of ``kind``."""
    if kind == "concurrency":
        return Arrivals(concurrency=int(load))
    if kind == "speed":
        return Arrivals(speed=load)
    return Arrivals(rate_per_s=load, cv=cv)


@dataclass(kw_only=True)
class Harness:
    """Measures ``target`` with ``workload``; ``metrics_url`` is the server whose
    ``/metrics`` to read (``None``: ``no_metrics_why`` says why not)."""

    target: Target
    workload: WorkloadSource
    slo: Slo | None = None
    tokenizer: TokenCounter | None = None
    metrics_url: str | None = None
    no_metrics_why: str = "disabled"
    floor: FloorInputs = field(default_factory=FloorInputs)
    count: int | None = None
    """Sessions (or single-turn requests) per trial; ``None``: the workload's default."""
    timeout_s: float = 300.0
    max_in_flight: int = 256
    burstiness: float = 1.0
    on_trial: Callable[[LlmTrial], None] | None = None
    events: Events | None = None
    energy: Sequence[EnergyMeter] = ()
    """The energy counters of the GPUs serving the target (one per GPU); none: not measured,
    ``no_energy_why`` says why."""
    no_energy_why: str = "no energy counter for this target"
    workers: Workers = field(default_factory=Workers)
    """Client processes that share each trial's schedule (``llm.scaleout``); 1: this one."""
    ray_address: str = "auto"
    """The Ray cluster of ``workers.ray``."""
    context_tokens: int | None = None
    """The server's context length, for the agentic validity gate; ``None``: ``context_why``."""
    context_why: str = "the server publishes no context length"
    usd_per_hour: float | None = None
    """The price of the serving hardware, for $ per job; ``None``: ``usd_why`` says why."""
    usd_source: str = ""
    usd_why: str = "no price: give --instance (a catalog instance's $/hour)"
    validity: ValidityBounds = field(default_factory=ValidityBounds)
    """The agentic validity gate's bounds (errors, overflows, the client's lag)."""
    trials: list[LlmTrial] = field(default_factory=list)

    def _say(self, line: str) -> None:
        if self.events is not None:
            self.events(line)

    def trial_count(self, role: str) -> int:
        """Sessions per trial: the count asked for, and for a capacity trial at least what
        the SLO percentile's tail claim needs (in requests, over the mean turns)."""
        count = self.count or self.workload.default_count()
        if role != "capacity" or self.slo is None:
            return count
        # enough for a claim with one request over the bound (with none over, a single outlier
        # would leave the tail unclaimable), and the steady window leaves out the ramp-up
        needs = min_passing_queries(1, self.slo.percentile / 100.0) + 1
        requests = math.ceil(needs / (1.0 - WARMUP_FRACTION)) + 1
        turns = max(1.0, self.workload.mean_turns())
        return max(count, math.ceil(requests / turns))

    def trial(self, arrivals: Arrivals, role: str = "fixed") -> LlmTrial:
        """Run one trial, hand it to ``on_trial`` and return it."""
        index = len(self.trials)
        count = self.trial_count(role)
        sessions = self.workload.sessions(
            arrivals, count, tokenizer=self.tokenizer, seed_offset=index * 1_000_003
        )
        requests = sum(len(s.turns) for s in sessions)
        unit = self.workload.unit
        size = f"{count} {unit}, {requests} requests" if unit == "sessions" else f"{count} {unit}"
        self._say(f"trial {index + 1}: {arrivals.label}, {size}")
        scraper = ServerMetricsScraper(self.metrics_url) if self.metrics_url else None
        if scraper is not None:
            scraper.start()
        cpu_before = time.process_time()
        for meter in self.energy:
            meter.begin()
        interrupted = False
        try:
            if self.workers.ray:
                outcome = run_ray_trial(
                    self.target,
                    sessions,
                    self.workers.count,
                    address=self.ray_address,
                    concurrency=arrivals.concurrency,
                    max_in_flight=self.max_in_flight,
                    timeout_s=self.timeout_s,
                    multi_turn=self.workload.multi_turn,
                )
            elif self.workers.count > 1:
                outcome = run_scaled_trial(
                    self.target,
                    sessions,
                    self.workers.count,
                    concurrency=arrivals.concurrency,
                    max_in_flight=self.max_in_flight,
                    timeout_s=self.timeout_s,
                    multi_turn=self.workload.multi_turn,
                )
            else:
                outcome = run_trial(
                    self.target,
                    sessions,
                    concurrency=arrivals.concurrency,
                    max_in_flight=self.max_in_flight,
                    timeout_s=self.timeout_s,
                    multi_turn=self.workload.multi_turn,
                )
        except TrialInterrupted as stop:
            outcome, interrupted = stop.partial, True
        cpu_s = time.process_time() - cpu_before + outcome.worker_cpu_s
        energy = [meter.end() for meter in self.energy]
        notes = [f"{arrivals.label}: {note}" for note in self.target.trial_notes()]
        notes += [f"{arrivals.label}: {note}" for note in outcome.notes]
        server = (
            check_against_client(scraper.stop(origin_s=outcome.origin_s), outcome.records)
            if scraper is not None
            else ServerMetrics(available=False, why=self.no_metrics_why)
        )
        notes += [f"{arrivals.label}: server /metrics {line}" for line in server.contradicted]
        found = self._trial(
            index, role, arrivals, requests, outcome, server, cpu_s, energy, sessions
        )
        found = found.model_copy(update={"interrupted": interrupted, "notes": notes})
        per_request_ms = found.summary.client_cpu_ms_per_request
        if per_request_ms is not None:
            self._say(
                f"trial {index + 1}: client CPU {per_request_ms:.2f} ms per request, "
                f"{found.summary.client_cpu_fixed_s or 0.0:.2f} s fixed"
            )
        self.trials.append(found.without_records())
        if self.on_trial is not None:
            self.on_trial(found)
        if interrupted:
            raise KeyboardInterrupt
        return found

    def _trial(
        self,
        index: int,
        role: str,
        arrivals: Arrivals,
        planned: int,
        outcome: TrialRecords,
        server: ServerMetrics,
        cpu_s: float,
        energy: Sequence[EnergyFigure],
        sessions: Sequence[Session] = (),
    ) -> LlmTrial:
        records = outcome.records
        summary = summarise_trial(records, slo=self.slo, duration_s=outcome.duration_s)
        measured = server.prefix_cache.hit_rate if server.prefix_cache else None
        updates: dict[str, object] = {
            "client_cpu_cores": cpu_s / outcome.duration_s if outcome.duration_s else None,
            "client_cpu_s_per_request": cpu_s / max(1, len(records)),
            "client_cpu_ms_per_request": (
                outcome.request_cpu_s / outcome.streamed * 1e3 if outcome.streamed else None
            ),
            "client_cpu_fixed_s": max(0.0, cpu_s - outcome.request_cpu_s),
            "prefix_reuse": prefix_reuse(records, config=server.config, measured_share=measured),
            "energy": _energy(energy, records, self.no_energy_why),
        }
        if isinstance(self.workload, AgenticWorkload):
            updates["agentic"] = self._agentic(self.workload, arrivals, sessions, records, server)
        if self.slo is not None:
            updates["slo_breaks"] = slo_breaks(
                records, self.slo, summary, server.timeline, server_why=server.why
            )
        summary = summary.model_copy(update=updates)
        return LlmTrial(
            index=index,
            role=role,
            label=arrivals.label,
            arrivals=arrivals,
            requests_planned=planned,
            summary=summary,
            server_metrics=server,
            floor=self.floor.floor(records, summary),
            warnings=[
                *self._warnings(arrivals, summary, server),
                *(f"{arrivals.label}: {line}" for line in outcome.warnings),
            ],
            client_workers=outcome.workers,
            samples=steady_samples(records, summary),
            records=records,
        )

    def _agentic(
        self,
        workload: AgenticWorkload,
        arrivals: Arrivals,
        sessions: Sequence[Session],
        records: Sequence[RequestRecord],
        server: ServerMetrics,
    ) -> AgenticStep | None:
        """The step's validity gate, job figures and prefix cache against its optimum
        (``None``: every session had a turn cancelled, nothing to judge)."""
        cut = {r.session for r in records if r.cancelled}
        if all(s.index in cut for s in sessions):
            return None
        prompts, asked = workload.recorded_sizes(sessions)
        report = assess_jobs(
            records,
            expected_turns={s.index: len(s.turns) for s in sessions},
            slo=self.slo,
            context_tokens=self.context_tokens,
            requested_tokens=asked,
            prompt_tokens=prompts,
            usd_per_hour=self.usd_per_hour,
            bounds=self.validity,
        )
        gate, figures = stored_report(
            report,
            context_tokens=self.context_tokens,
            context_why=self.context_why,
            usd_per_hour=self.usd_per_hour,
            usd_source=self.usd_source,
            usd_why=self.usd_why,
        )
        answered = [r for r in records if r.ok and r.prompt_tokens]
        cached = [r for r in answered if r.cached_tokens is not None]
        measured, source, why = (
            None,
            "",
            server.why or "the server exports no prefix-cache counters",
        )
        if cached:
            measured = sum(r.cached_tokens or 0 for r in cached) / sum(
                r.prompt_tokens or 0 for r in cached
            )
            source = f"usage.prompt_tokens_details.cached_tokens ({len(cached)} turns)"
        elif server.prefix_cache is not None and server.prefix_cache.hit_rate is not None:
            measured, source = server.prefix_cache.hit_rate, server.prefix_cache.source
        model_tokens = sum(prompts[r.index] for r in answered)
        scale = sum(r.prompt_tokens or 0 for r in answered) / model_tokens if model_tokens else None
        recorded = cache_sessions(workload.trajectories)
        cache = against_optimum(
            [recorded[s.index % len(recorded)] for s in sessions],
            concurrency=arrivals.concurrency,
            config=server.config,
            measured=measured,
            measured_source=source,
            measured_why=why,
            tokens_per_model_token=scale,
        )
        return AgenticStep(gate=gate, jobs=figures, cache=cache)

    def _warnings(
        self, arrivals: Arrivals, summary: TrialSummary, server: ServerMetrics
    ) -> list[str]:
        found = []
        hit_rate = server.prefix_cache.hit_rate if server.prefix_cache else None
        reuse = summary.prefix_reuse
        expects_none = reuse is None or not reuse.expected_share
        if expects_none and hit_rate and hit_rate > COLD_HIT_RATE:
            found.append(
                f"{arrivals.label}: the server reports a {hit_rate:.1%} prefix-cache hit rate "
                "where the workload shares no prefix: the cache was not cold (another client, "
                "an earlier run's prompts, or prompts shared by chance)"
            )
        if summary.client_bound and summary.client_lag_s is not None:
            found.append(
                f"{arrivals.label}: the client fell behind (p99 send lag "
                f"{summary.client_lag_s.p99 * 1000:.0f} ms): this load was not generated"
            )
        return found

    def capacity(
        self, kind: LoadKind, *, start: float | None = None, max_trials: int = 8
    ) -> CapacityResult:
        """The highest load of ``kind`` that meets the SLO (see :mod:`llm.capacity`)."""
        return search_capacity(
            lambda load: self.trial(arrivals_at(kind, load, self.burstiness), "capacity").summary,
            start=start or self.start_load(kind),
            integer=kind == "concurrency",
            unit={"concurrency": "concurrency", "speed": "x trace speed"}.get(kind, "req/s"),
            max_trials=max_trials,
        )

    def start_load(self, kind: LoadKind) -> float:
        """The search's first load: 1 for a concurrency or a trace speed; for a rate, what one
        sequential client sustains (1 / median E2E of a fixed trial, over the mean turns of a
        session) when one ran, else 1 per second."""
        if kind != "rate":
            return 1.0
        for trial in self.trials:
            e2e = trial.summary.metrics.e2e_s.value("p50")
            if e2e:
                return max(0.05, round(1.0 / (e2e * max(1.0, self.workload.mean_turns())), 3))
        return 1.0


def _energy(
    figures: Sequence[EnergyFigure], records: Sequence[RequestRecord], why: str
) -> EnergyFigure:
    """The trial's joules over its GPUs' counters, per output token of the completed requests;
    not measured when any counter was not read (its reason named)."""
    tokens = sum(r.output_tokens or 0 for r in records if r.ok)
    if not figures:
        return EnergyFigure.not_measured(why, items=tokens)
    missing = next((f for f in figures if not f.measured), None)
    if missing is not None:
        return EnergyFigure.not_measured(missing.reason, source=missing.source, items=tokens)
    joules = sum(f.energy_j or 0.0 for f in figures)
    spread = [f.uncertainty_j for f in figures]
    return EnergyFigure(
        energy_j=joules,
        window_s=max(f.window_s or 0.0 for f in figures),
        items=tokens,
        uncertainty_j=None if None in spread else sum(s or 0.0 for s in spread),
        source="; ".join(f.source for f in figures),
    )


def capacity_summary(result: CapacityResult) -> CapacitySummary:
    """The stored form of a capacity search: the goodput measured at the capacity."""
    best = next((p for p in result.points if p.passed and p.load == result.capacity), None)
    goodput = best.summary.goodput if best else None
    tokens = best.summary.tokens if best else None
    return CapacitySummary(
        capacity=result.capacity,
        unit=result.unit,
        stopped=result.stopped,
        good_output_tokens_per_s=goodput.output_tokens_per_s if goodput else None,
        good_requests_per_s=goodput.requests_per_s if goodput else None,
        output_tokens_mean=tokens.output_mean if tokens else None,
        prompt_tokens_mean=tokens.prompt_mean if tokens else None,
        points=[CapacityPoint(load=p.load, passed=p.passed, why=p.why) for p in result.points],
    )
