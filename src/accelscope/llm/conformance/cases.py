"""The conformance cases: each a scripted stream shape that some benchmark client has got wrong,
the load a client sends it, the figures it is graded on, and the truth of those figures derived
from what the scripted server says it served (:class:`~.script.ServedRequest`).

Every client runs a case as one request at a time (a closed loop of one) unless the case says
otherwise, so a figure's truth is a plain median (latencies) or mean (token counts) over the
requests the server served while that client ran.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

import numpy as np

from accelscope.llm.conformance.script import (
    CHAT_TEMPLATE_GENERATION_TOKENS,
    CHAT_TEMPLATE_MESSAGE_TOKENS,
    ServedRequest,
    StreamScript,
)
from accelscope.llm.summary import LAG_LIMIT_S

__all__ = ["CASES", "Case", "Figure", "case_named", "truth_of"]


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
}

LATENCIES = (Figure.TTFT_MS, Figure.TPOT_MS, Figure.ITL_MS, Figure.E2E_MS)


@dataclass(frozen=True, kw_only=True)
class Case:
    """One scripted stream shape and the load a client sends it.

    ``turns`` above 1: conversations of that many turns (a peer that cannot send them sends
    single turns, graded on what it sent). ``rate_per_s``: an open-loop rate instead of one
    request at a time, with ``client_threads`` (accelscope's ``--max-in-flight``) to send it."""

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


def truth_of(
    served: Sequence[ServedRequest], lag_s: Sequence[float] | None = None
) -> dict[Figure, float | None]:
    """Every figure's truth over ``served`` (None: the figure does not exist here, e.g. no
    answer text, no time to first content). ``lag_s``: each request's receipt minus its
    scheduled arrival, where the client's schedule is known (else the lag figures are None)."""
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
    }
