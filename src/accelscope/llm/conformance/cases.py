"""The conformance cases: each a scripted stream shape that some benchmark client has got wrong,
the load a client sends it, the figures it is graded on, and the truth of those figures derived
from what the scripted server says it served (:class:`~.script.ServedRequest`).

Every client runs a case as one request at a time (a closed loop of one) unless the case says
otherwise, so a figure's truth is a plain median (latencies) or mean (token counts) over the
requests the server served while that client ran.

The agentic case (``agent``: :class:`~.script.AgentScript`) is sessions of turns sent one
session at a time: the served requests, in order of receipt, are its sessions' turns. Two of its
figures grade what a client **did**, not what it reported: the tool wait (the recorded wait is
the truth; the client's figure is the shortest gap the server saw between an answer's end and
the next turn) and the context kept (every later turn's prompt holds the turn before and its
answer: the truth is 1, the client's figure the share of its later turns that did)
(:func:`observed_of`).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

import numpy as np

from accelscope.llm.conformance.script import (
    CHAT_TEMPLATE_GENERATION_TOKENS,
    CHAT_TEMPLATE_MESSAGE_TOKENS,
    AgentScript,
    ServedRequest,
    StreamScript,
)
from accelscope.llm.summary import LAG_LIMIT_S

__all__ = ["CASES", "OBSERVED", "Case", "Figure", "case_named", "observed_of", "truth_of"]


class Figure(StrEnum):
    """A graded figure: latencies are medians over a case's requests (ITL pooled over their
    chunk gaps), token counts means per completed request."""

    TTFT_MS = "ttft_ms"
    TTFC_MS = "ttfc_ms"
    TPOT_MS = "tpot_ms"
    ITL_MS = "itl_ms"
    E2E_MS = "e2e_ms"
    OUTPUT_TOKENS = "output_tokens"
    REASONING_TOKENS = "reasoning_tokens"
    PROMPT_TOKENS = "prompt_tokens"
    FAILED_SHARE = "failed_share"
    LAG_P99_MS = "lag_p99_ms"
    CLIENT_BOUND = "client_bound"
    PROMPT_GROWTH_TOKENS = "prompt_growth_tokens"
    TOOL_WAIT_MS = "tool_wait_ms"
    CONTEXT_KEPT = "context_kept"
    JOB_LATENCY_MS = "job_latency_ms"


TRUE_DEFINITIONS: dict[Figure, str] = {
    Figure.TTFT_MS: "first chunk carrying output on any channel - receipt",
    Figure.TTFC_MS: "first chunk with answer text - receipt (none: no answer text)",
    Figure.TPOT_MS: "(last output chunk - first) / (output tokens - tokens of the first chunk)",
    Figure.ITL_MS: "gaps between consecutive output chunks, pooled",
    Figure.E2E_MS: "last output chunk - receipt (not the stream's end)",
    Figure.OUTPUT_TOKENS: "the tokens the server generated, reasoning included",
    Figure.REASONING_TOKENS: "the tokens spent reasoning",
    Figure.PROMPT_TOKENS: "the prompt as the server counted it, chat template included",
    Figure.FAILED_SHARE: "requests whose stream ended in an error event / requests",
    Figure.LAG_P99_MS: "p99 of receipt - scheduled arrival: how late the client sent",
    Figure.CLIENT_BOUND: "1 when the p99 lag exceeds the client's own limit (the offered load "
    "was not generated)",
    Figure.PROMPT_GROWTH_TOKENS: "a turn's prompt tokens less the turn's before it in its session "
    "(the server's count), mean over the later turns",
    Figure.TOOL_WAIT_MS: "the recorded tool wait; a client's figure is what it did: the shortest "
    "gap from an answer's end (the server's stamp) to the next turn's receipt",
    Figure.CONTEXT_KEPT: "1: every later turn sends the conversation so far; a client's figure is "
    "the share of its later turns whose prompt held the turn before and its answer",
    Figure.JOB_LATENCY_MS: "a session's wall time: its first turn's receipt to its last answer's "
    "end (the tool waits included), median over sessions",
}

LATENCIES = (Figure.TTFT_MS, Figure.TPOT_MS, Figure.ITL_MS, Figure.E2E_MS)
OBSERVED = (Figure.TOOL_WAIT_MS, Figure.CONTEXT_KEPT)
"""Figures of what a client did, read from the server's stamps (:func:`observed_of`)."""


@dataclass(frozen=True, kw_only=True)
class Case:
    """One scripted stream shape and the load a client sends it.

    ``turns`` above 1: conversations of that many turns (a peer that cannot send them sends
    single turns, graded on what it sent). ``rate_per_s``: an open-loop rate instead of one
    request at a time, with ``client_threads`` (accelscope's ``--max-in-flight``) to send it.
    ``agent``: an agentic case, ``requests`` sessions of ``turns`` turns (its trajectories)."""

    name: str
    about: str
    script: StreamScript
    figures: tuple[Figure, ...]
    api: Literal["chat", "completions"] = "chat"
    requests: int = 6
    input_tokens: int = 8
    max_tokens: int = 8
    turns: int = 1
    rate_per_s: float | None = None
    client_threads: int | None = None
    agent: AgentScript | None = None

    def __post_init__(self) -> None:
        if self.agent is not None and (self.requests, self.turns) != (
            self.agent.sessions,
            self.agent.turns,
        ):
            raise ValueError(f"case {self.name}: requests and turns are its agent's sessions")
        if self.agent is None and any(f in OBSERVED for f in self.figures):
            raise ValueError(f"case {self.name}: only an agentic case grades what a client did")


_AGENT = AgentScript()
CASES: tuple[Case, ...] = (
    Case(
        name="empty-opening-chunk",
        about="a role chunk with content '' at receipt (vLLM's): not a token",
        script=StreamScript(empty_opening_chunk=True),
        figures=(*LATENCIES, Figure.OUTPUT_TOKENS),
    ),
    Case(
        name="reasoning",
        about="4 reasoning tokens in delta.reasoning (vLLM's current field), then the answer",
        script=StreamScript(reasoning_tokens=4, reasoning_field="reasoning"),
        figures=(Figure.TTFT_MS, Figure.TTFC_MS, Figure.E2E_MS, Figure.OUTPUT_TOKENS),
        max_tokens=10,
    ),
    Case(
        name="reasoning-content",
        about="4 reasoning tokens in delta.reasoning_content (the older name), then the answer",
        script=StreamScript(reasoning_tokens=4, reasoning_field="reasoning_content"),
        figures=(Figure.TTFT_MS, Figure.TTFC_MS, Figure.REASONING_TOKENS, Figure.OUTPUT_TOKENS),
        max_tokens=10,
    ),
    Case(
        name="capped-in-reasoning",
        about="max_tokens reached inside the reasoning: no answer text at all",
        script=StreamScript(reasoning_tokens=64),
        figures=(Figure.TTFT_MS, Figure.TTFC_MS, Figure.E2E_MS, Figure.OUTPUT_TOKENS),
    ),
    Case(
        name="k-per-chunk",
        about="3 tokens in every chunk",
        script=StreamScript(tokens_per_chunk=3),
        figures=(Figure.TPOT_MS, Figure.ITL_MS, Figure.E2E_MS, Figure.OUTPUT_TOKENS),
        max_tokens=9,
    ),
    Case(
        name="k-in-first-chunk",
        about="4 tokens in the first chunk, then one a chunk: TPOT over N - 4",
        script=StreamScript(first_chunk_tokens=4),
        figures=(Figure.TTFT_MS, Figure.TPOT_MS, Figure.OUTPUT_TOKENS),
        max_tokens=10,
    ),
    Case(
        name="usage-final-chunk",
        about="usage in a final chunk with choices: [] (after the finish chunk)",
        script=StreamScript(),
        figures=(Figure.E2E_MS, Figure.OUTPUT_TOKENS, Figure.PROMPT_TOKENS),
    ),
    Case(
        name="no-usage",
        about="no usage at all, even when asked: tokens counted from the text",
        script=StreamScript(include_usage_supported=False),
        figures=(Figure.TPOT_MS, Figure.OUTPUT_TOKENS),
    ),
    Case(
        name="error-mid-stream",
        about="half the chunks, then an error event and [DONE]: every request failed",
        script=StreamScript(fault="error-mid-stream"),
        figures=(Figure.FAILED_SHARE,),
    ),
    Case(
        name="late-done",
        about="[DONE] 250 ms after the last token: E2E ends at the last token",
        script=StreamScript(tail_s=0.25),
        figures=(Figure.TPOT_MS, Figure.E2E_MS),
        requests=4,
    ),
    Case(
        name="client-too-slow",
        about="200 req/s offered to one client thread that needs ~80 ms a request",
        script=StreamScript(ttft_s=0.03, itl_s=0.006),
        figures=(Figure.LAG_P99_MS, Figure.CLIENT_BOUND),
        requests=12,
        rate_per_s=200.0,
        client_threads=1,
    ),
    Case(
        name="multi-turn-template",
        about=f"3-turn conversations, chat template counted ({CHAT_TEMPLATE_MESSAGE_TOKENS} a "
        f"message + {CHAT_TEMPLATE_GENERATION_TOKENS}): prompt tokens are the server's",
        script=StreamScript(chat_template=True),
        figures=(Figure.PROMPT_TOKENS, Figure.OUTPUT_TOKENS),
        requests=2,
        turns=3,
    ),
    Case(
        name="agentic",
        about=f"{_AGENT.sessions} agent sessions of {_AGENT.turns} turns, tool calls answered "
        f"{_AGENT.tool_wait_s * 1000:g} ms after each answer, the whole conversation resent",
        script=StreamScript(),
        figures=(
            Figure.TTFT_MS,
            Figure.E2E_MS,
            Figure.PROMPT_TOKENS,
            Figure.PROMPT_GROWTH_TOKENS,
            Figure.TOOL_WAIT_MS,
            Figure.CONTEXT_KEPT,
            Figure.JOB_LATENCY_MS,
        ),
        requests=_AGENT.sessions,
        turns=_AGENT.turns,
        max_tokens=_AGENT.answer_words,
        agent=_AGENT,
    ),
)


def case_named(name: str) -> Case:
    """The case called ``name`` (KeyError naming the known ones)."""
    for case in CASES:
        if case.name == name:
            return case
    raise KeyError(f"no conformance case {name!r}: {', '.join(c.name for c in CASES)}")


def _median_ms(values: Sequence[float]) -> float | None:
    return float(np.median(values)) * 1000.0 if values else None


def _mean(values: Sequence[float]) -> float | None:
    return float(np.mean(values)) if values else None


def sessions_of(
    served: Sequence[ServedRequest], agent: AgentScript | None
) -> list[list[ServedRequest]] | None:
    """The agentic case's sessions in ``served`` (in order of receipt: a session at a time);
    None: not an agentic case, or not whole sessions (a client that sent other turns)."""
    if agent is None or not served or len(served) % agent.turns:
        return None
    return [list(served[k : k + agent.turns]) for k in range(0, len(served), agent.turns)]


def observed_of(
    served: Sequence[ServedRequest], agent: AgentScript | None
) -> dict[Figure, float | None]:
    """What a client did on an agentic case, from the server's stamps of the requests it sent:
    the shortest gap (ms) from an answer's end to the next turn's receipt, and the share of
    later turns whose prompt held the turn before and its answer (None: no whole sessions)."""
    sessions = sessions_of(served, agent)
    if sessions is None:
        return {figure: None for figure in OBSERVED}
    gaps = [
        later.received_s - before.ended_s
        for turns in sessions
        for before, later in itertools.pairwise(turns)
        if before.ended_s is not None
    ]
    kept = [
        float(later.prompt_tokens >= before.prompt_tokens + before.output_tokens)
        for turns in sessions
        for before, later in itertools.pairwise(turns)
    ]
    return {
        Figure.TOOL_WAIT_MS: min(gaps) * 1000.0 if gaps else None,
        Figure.CONTEXT_KEPT: _mean(kept),
    }


def _session_truth(
    served: Sequence[ServedRequest], agent: AgentScript | None
) -> dict[Figure, float | None]:
    sessions = sessions_of(served, agent)
    if agent is None or sessions is None:
        return {f: None for f in (*OBSERVED, Figure.PROMPT_GROWTH_TOKENS, Figure.JOB_LATENCY_MS)}
    growth = [
        later.prompt_tokens - before.prompt_tokens
        for turns in sessions
        for before, later in itertools.pairwise(turns)
    ]
    walls = [
        turns[-1].ended_s - turns[0].received_s
        for turns in sessions
        if turns[-1].ended_s is not None and not any(r.errored for r in turns)
    ]
    return {
        Figure.PROMPT_GROWTH_TOKENS: _mean(growth),
        Figure.TOOL_WAIT_MS: agent.tool_wait_s * 1000.0,
        Figure.CONTEXT_KEPT: 1.0,
        Figure.JOB_LATENCY_MS: _median_ms(walls),
    }


def truth_of(
    served: Sequence[ServedRequest],
    lag_s: Sequence[float] | None = None,
    agent: AgentScript | None = None,
) -> dict[Figure, float | None]:
    """Every figure's truth over ``served`` (None: the figure does not exist here, e.g. no
    answer text, no time to first content). ``lag_s``: each request's receipt minus its
    scheduled arrival, where the client's schedule is known (else the lag figures are None).
    ``agent``: the agentic case's script (else its session figures are None)."""
    streamed = [r for r in served if r.sent_s]
    whole = [r for r in served if not r.errored]
    tpot = []
    for r in streamed:
        if r.errored:
            continue
        k1 = r.chunk_tokens[0] if r.chunk_tokens else 1
        if r.output_tokens - k1 >= 1:
            tpot.append((r.sent_s[-1] - r.sent_s[0]) / (r.output_tokens - k1))
    content = [
        r.sent_s[r.content_chunk] - r.received_s
        for r in streamed
        if r.content_chunk is not None and r.content_chunk < len(r.sent_s)
    ]
    lag_p99 = float(np.percentile(lag_s, 99)) * 1000.0 if lag_s else None
    return {
        Figure.TTFT_MS: _median_ms([r.sent_s[0] - r.received_s for r in streamed]),
        Figure.TTFC_MS: _median_ms(content),
        Figure.TPOT_MS: _median_ms(tpot),
        Figure.ITL_MS: _median_ms([float(g) for r in streamed for g in np.diff(r.sent_s)]),
        Figure.E2E_MS: _median_ms([r.sent_s[-1] - r.received_s for r in streamed]),
        Figure.OUTPUT_TOKENS: _mean([r.output_tokens for r in whole]),
        Figure.REASONING_TOKENS: _mean([r.reasoning_tokens for r in whole]),
        Figure.PROMPT_TOKENS: _mean([r.prompt_tokens for r in served]),
        Figure.FAILED_SHARE: sum(r.errored for r in served) / len(served) if served else None,
        Figure.LAG_P99_MS: lag_p99,
        Figure.CLIENT_BOUND: None if lag_p99 is None else float(lag_p99 / 1000.0 > LAG_LIMIT_S),
        **_session_truth(served, agent),
    }
