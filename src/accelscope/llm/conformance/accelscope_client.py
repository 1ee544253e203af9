"""accelscope's own client, graded in-process through the harness the ``llm`` command uses:
the same endpoint, workload, trial and summary, so the figures graded are the ones ``llm``
prints (medians of the trial's summary, token means of its requests), with nothing asked of
the server beyond what ``llm`` asks (its per-chunk usage included, as ``llm`` does by
default).

The agentic case is run as ``accelscope llm --agentic FILE`` runs it: the case's trajectories
written to a file, read by :func:`~accelscope.llm.agentic.read_trajectories`, replayed a session
at a time with the server's own answers sent back; its job latency is
:func:`~accelscope.llm.jobs.jobs_of`'s, its prompt growth read off ``llm``'s per-turn table."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np

from accelscope.documents import Slo
from accelscope.llm.agentic import AgenticWorkload, read_trajectories
from accelscope.llm.client import OpenAIEndpoint
from accelscope.llm.conformance.cases import Case, Figure
from accelscope.llm.conformance.clients import ClientRun, Endpoint, register_client
from accelscope.llm.documents import Arrivals, LlmTrial
from accelscope.llm.harness import Harness
from accelscope.llm.jobs import jobs_of
from accelscope.llm.workload import (
    Lengths,
    SessionWorkload,
    Workload,
    WorkloadSource,
    load_tokenizer,
)

__all__ = ["AccelscopeClient"]

_TIMEOUT_S = 30.0


TRAJECTORY_FILE = "trajectories.jsonl"
"""The agentic case's trajectories, written to the client's working directory."""


def _workload(case: Case, workdir: Path) -> WorkloadSource:
    if case.agent is not None:
        path = workdir / TRAJECTORY_FILE
        path.write_text(case.agent.trajectories())
        return AgenticWorkload(trajectories=read_trajectories(path), answers="server")
    prompt = Lengths(case.input_tokens, case.input_tokens)
    answer = Lengths(case.max_tokens, case.max_tokens)
    if case.turns > 1:
        return SessionWorkload(
            sessions_per_trial=case.requests,
            turns=Lengths(case.turns, case.turns),
            input_tokens=prompt,
            output_tokens=answer,
        )
    return Workload(input_tokens=prompt, output_tokens=answer)


def _ms(value: float | None) -> float | None:
    return None if value is None else value * 1000.0


def figures_of(trial: LlmTrial) -> dict[Figure, float | None]:
    """The graded figures of one ``llm`` trial, as its summary reports them."""
    summary = trial.summary
    metrics = summary.metrics
    tokens = summary.tokens
    lag = summary.client_lag_s
    return {
        Figure.TTFT_MS: _ms(metrics.ttft_s.p50),
        Figure.TTFC_MS: _ms(metrics.ttfc_s.p50),
        Figure.TPOT_MS: _ms(metrics.tpot_s.p50),
        Figure.ITL_MS: _ms(metrics.itl_s.p50),
        Figure.E2E_MS: _ms(metrics.e2e_s.p50),
        Figure.OUTPUT_TOKENS: tokens.output_mean if tokens else None,
        Figure.REASONING_TOKENS: tokens.reasoning_mean if tokens else None,
        Figure.PROMPT_TOKENS: tokens.prompt_mean if tokens else None,
        Figure.FAILED_SHARE: summary.errors / summary.requests if summary.requests else None,
        Figure.LAG_P99_MS: _ms(lag.p99) if lag else None,
        Figure.CLIENT_BOUND: float(summary.client_bound),
    }


def session_figures(trial: LlmTrial, turns: int) -> dict[Figure, float | None]:
    """The agentic figures of a trial: the prompt's growth turn on turn as ``llm`` prints it
    (its per-turn table's mean prompt tokens, each turn's less the turn's before, averaged),
    and the median job latency of the completed sessions (:func:`~accelscope.llm.jobs.jobs_of`
    over the per-turn records, each session ``turns`` turns)."""
    means = [t.prompt_tokens_mean for t in sorted(trial.summary.turns, key=lambda t: t.turn)]
    growth = [
        later - before
        for before, later in itertools.pairwise(means)
        if later is not None and before is not None
    ]
    placed = [r for r in trial.records if r.session is not None]
    jobs = jobs_of(
        placed, dict.fromkeys({r.session for r in placed if r.session is not None}, turns), Slo()
    )
    walls = [job.wall_s for job in jobs if job.completed and job.wall_s is not None]
    return {
        Figure.PROMPT_GROWTH_TOKENS: float(np.mean(growth)) if growth else None,
        Figure.JOB_LATENCY_MS: float(np.median(walls)) * 1000.0 if walls else None,
    }


class AccelscopeClient:
    name = "accelscope"

    def unavailable(self) -> str | None:
        return None

    def run(self, case: Case, endpoint: Endpoint) -> ClientRun:
        target = OpenAIEndpoint(
            endpoint.url,
            endpoint.model,
            api=case.api,
            tokenizer=load_tokenizer(endpoint.tokenizer_dir),
        )
        harness = Harness(
            target=target,
            workload=_workload(case, endpoint.workdir),
            count=case.requests,
            timeout_s=_TIMEOUT_S,
        )
        if case.client_threads:
            harness.max_in_flight = case.client_threads
        arrivals = (
            Arrivals(rate_per_s=case.rate_per_s, cv=1.0)
            if case.rate_per_s
            else Arrivals(concurrency=1)
        )
        try:
            trial = harness.trial(arrivals)
        finally:
            target.close()
        records = sorted(trial.records, key=lambda r: r.sent_s)
        figures = figures_of(trial)
        if case.agent is not None:
            figures |= session_figures(trial, case.agent.turns)
        return ClientRun(
            figures=figures,
            schedule_s=tuple(r.scheduled_s for r in records),
            first_sent_s=records[0].sent_s if records else None,
        )


register_client(AccelscopeClient)
