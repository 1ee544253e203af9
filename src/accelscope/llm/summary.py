"""The figures of one ``llm`` trial, each with the definition it uses ("TPOT" and "ITL" mean
different things across tools, so every document carries ``DEFINITIONS``).

- **Latencies count from the scheduled arrival** (no coordinated omission); the send-based TTFT
  is given beside it, and the client's lag (sent - scheduled) is measured. A trial whose p99
  lag exceeds ``LAG_LIMIT_S`` is marked client-bound: the rate was not generated.
- **Steady state.** Percentiles, throughput and goodput use the requests that *arrived* in the
  steady window: from the arrival of the first request after the ramp-up (the first
  ``WARMUP_FRACTION`` of the requests, by arrival) to the last arrival (the drain after the
  last arrival is not a window of its own).
  Throughput counts the tokens streamed inside the window, divided by its length.
- **Tails.** Each percentile has a distribution-free confidence interval (order statistics),
  and a tail is *claimed* only when MLPerf LoadGen's early-stopping rule says the trial has
  enough requests: otherwise it reads "not enough requests to claim p99 TTFT".
- **Goodput.** A request is good when it completed and met every SLO term; errors count as
  misses; requests the run cancelled are excluded. Request goodput is good requests per second
  of the window, token goodput their output tokens per second.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Sequence

import numpy as np

from accelscope.llm.documents import (
    ClientLag,
    Distribution,
    ErrorKind,
    Goodput,
    Metrics,
    RequestRecord,
    Slo,
    SloState,
    SloTerm,
    SloVerdict,
    TailClaim,
    Throughput,
    TokenStats,
    TrialSummary,
    TurnSummary,
    Window,
)
from accelscope.load.early_stopping import (
    DEFAULT_CONFIDENCE,
    min_passing_queries,
    percentile_estimate,
    server_early_stopping,
)
from accelscope.measurement.stats import quantile_ci

__all__ = [
    "DEFINITIONS",
    "LAG_LIMIT_S",
    "METRICS",
    "PERCENTILES",
    "WARMUP_FRACTION",
    "Slo",
    "first_chunk_tokens",
    "is_good",
    "last_token_s",
    "request_values",
    "steady_samples",
    "steady_window",
    "summarise_trial",
]

PERCENTILES = (50.0, 90.0, 99.0)
WARMUP_FRACTION = 0.1
LAG_LIMIT_S = 0.05
"""p99 of (sent - scheduled) above this: the client did not generate the offered rate."""

METRICS = (
    "ttft_s",
    "tpot_s",
    "itl_s",
    "e2e_s",
    "ttft_sent_s",
    "stream_tail_s",
    "ttfc_s",
    "e2e_stream_s",
)

DEFINITIONS: dict[str, str] = {
    "ttft_s": "time to first token: the first streamed chunk carrying output on any channel "
    "(answer text, reasoning, tool-call delta) - scheduled arrival; a chunk without output "
    "(a role chunk, empty content) is not a token",
    "ttfc_s": "time to first content: the first chunk with answer text (delta.content, a "
    "completion's text) - scheduled arrival; after the reasoning on a reasoning model, none "
    "for a request that streamed no answer",
    "ttft_sent_s": "TTFT from when the client sent the request (send-based, as most tools)",
    "tpot_s": "time per output token: (last token - first token) / (output tokens - k1), per "
    "request, k1 the first chunk's tokens: as the server reported them per chunk, else 1 "
    "(exact when there are as many chunks as tokens; assumed otherwise, and a note says so)",
    "itl_s": "inter-token latency: gaps between consecutive chunks carrying output (any "
    "channel), pooled over requests (vLLM's ITL; a chunk may carry several tokens)",
    "e2e_s": "end-to-end latency: the last chunk carrying output (any channel) - scheduled "
    "arrival, as AIPerf; the stream's end is e2e_stream_s",
    "e2e_stream_s": "end of the stream ([DONE] or the connection's end) - scheduled arrival",
    "stream_tail_s": "end of the stream - the last chunk carrying output: what the server "
    "spends after the last token (neither E2E nor TPOT holds it)",
    "client_lag_s": "sent - scheduled: the client's own delay in issuing a request",
    "output_tokens": "the server's usage.completion_tokens, reasoning and tool-call tokens "
    "included (else the model's tokenizer over the streamed text of every channel, labelled)",
    "reasoning_tokens": "usage.completion_tokens_details.reasoning_tokens, else counted over "
    "the reasoning chunks when each chunk's tokens are known, else not measured; answer "
    "tokens are output - reasoning",
    "steady_window": f"the arrivals after the first {WARMUP_FRACTION:.0%} of the requests "
    "(the ramp-up), to the last arrival",
    "goodput": "requests (or their output tokens) per second of the steady window that "
    "completed and met every SLO term; errors are misses, cancelled requests excluded",
    "tail_claim": "a percentile is claimed only when LoadGen's early-stopping rule allows it at "
    f"{DEFAULT_CONFIDENCE:.0%} confidence",
}


def last_token_s(record: RequestRecord) -> float | None:
    """The last chunk carrying output (the last of ``chunk_times_s`` in a record that does not
    say)."""
    if record.last_token_s is not None:
        return record.last_token_s
    return record.chunk_times_s[-1] if record.chunk_times_s else None


def first_chunk_tokens(record: RequestRecord) -> tuple[int, bool]:
    """(k1, known): the first output chunk's tokens as the server reported them per chunk;
    1 when the output has as many tokens as chunks (each chunk one token); else 1, assumed."""
    chunks = len(record.chunk_times_s)
    if record.chunk_tokens and len(record.chunk_tokens) == chunks:
        return record.chunk_tokens[0], True
    exact = record.tokens_source in ("usage", "generated") and record.output_tokens == chunks
    return 1, exact


def request_values(record: RequestRecord) -> dict[str, float | None]:
    """Every per-request figure of :data:`DEFINITIONS` (``None``: not measured)."""
    first = record.first_token_s
    last = last_token_s(record)
    ttft = None if first is None else first - record.scheduled_s
    content = record.first_content_s
    if content is None and record.last_token_s is None:
        content = first  # a producer that does not tell channels apart: all is answer
    tpot = None
    tokens = record.output_tokens
    if first is not None and last is not None and tokens is not None:
        k1, _ = first_chunk_tokens(record)
        if tokens - k1 >= 1:
            tpot = (last - first) / (tokens - k1)
    return {
        "ttft_s": ttft,
        "ttft_sent_s": None if first is None else first - record.sent_s,
        "ttfc_s": None if content is None else content - record.scheduled_s,
        "tpot_s": tpot,
        "e2e_s": (record.end_s if last is None else last) - record.scheduled_s,
        "e2e_stream_s": record.end_s - record.scheduled_s,
        "stream_tail_s": None if last is None else record.end_s - last,
    }


def _distribution(values: Sequence[float], name: str) -> Distribution:
    """Percentiles with their CIs and LoadGen claims; ``n == 0`` when there is nothing."""
    if not values:
        return Distribution()
    ordered = np.sort(np.asarray(values, dtype=float))
    as_list = ordered.tolist()
    found: dict[str, object] = {
        "n": len(as_list),
        "mean": float(ordered.mean()),
        "min": as_list[0],
        "max": as_list[-1],
    }
    for p in PERCENTILES:
        key = f"p{p:g}"
        found[key] = float(np.percentile(ordered, p, method="linear"))
        found[f"{key}_ci"] = quantile_ci(as_list, p / 100.0)
        if p >= 90.0:
            bound = percentile_estimate(as_list, p / 100.0)
            needs = min_passing_queries(1, p / 100.0) + 1
            found[f"{key}_claim"] = (
                TailClaim(claimable=True, bound=bound)
                if bound is not None
                else TailClaim(
                    claimable=False,
                    needs=needs,
                    why=f"not enough requests to claim {key} {name} ({len(as_list)} < {needs})",
                )
            )
    return Distribution.model_validate(found)


def steady_window(records: Sequence[RequestRecord]) -> tuple[float, float]:
    """The steady window: the arrivals after the ramp-up (:data:`WARMUP_FRACTION` of them),
    to the last arrival (``records`` not empty)."""
    arrivals = sorted(r.scheduled_s for r in records)
    return arrivals[math.floor(WARMUP_FRACTION * len(arrivals))], arrivals[-1]


def _tokens_in(record: RequestRecord, start: float, end: float) -> float:
    """Output tokens streamed in [start, end]: each chunk's tokens when reported, else each
    chunk carries tokens / chunks (exact when a chunk is one token)."""
    if not record.chunk_times_s or not record.output_tokens:
        return 0.0
    times = np.asarray(record.chunk_times_s)
    inside_mask = (times >= start) & (times <= end)
    if len(record.chunk_tokens) == len(times):  # each chunk's tokens, as reported
        return float(np.asarray(record.chunk_tokens)[inside_mask].sum())
    inside = int(np.count_nonzero(inside_mask))
    return inside * record.output_tokens / len(times)


def _over(record: RequestRecord, value: float | None, bound: float) -> bool:
    """Whether a request counts as over an SLO bound (errors and missing values do)."""
    return bool(record.error) or value is None or value > bound


def _slo_verdict(
    slo: Slo, considered: Sequence[RequestRecord], values: Sequence[dict[str, float | None]]
) -> SloVerdict:
    """Per SLO term: over-bound count (errors and missing values count as over), LoadGen's
    claim at the SLO percentile, and whether the term is met."""
    terms: dict[str, SloTerm] = {}
    p = slo.percentile / 100.0
    for metric, bound in slo.terms().items():
        over = unmeasured = 0
        for record, value in zip(considered, values, strict=True):
            got = value.get(metric)
            if _over(record, got, bound):
                over += 1
            if not record.error and got is None:
                unmeasured += 1  # e.g. a stream that carried no text: no first token
        n = len(considered)
        stopping = server_early_stopping(n, over, p) if n else None
        observed_ok = n > 0 and over <= (1.0 - p) * n
        state: SloState
        if stopping is not None and stopping.passes:
            state, why = "met", ""
        elif not observed_ok:
            state = "missed"
            failed = sum(1 for record in considered if record.error)
            errors = f", {failed} of them errors" if failed else ""
            if unmeasured:
                errors += f", {unmeasured} without a {metric.removesuffix('_s').upper()}"
            why = f"{over} of {n} over {bound * 1000:g} ms{errors} (more than {1 - p:.0%})"
        else:
            state = "unclaimed"
            needs = stopping.required_queries if stopping else 0
            why = f"not enough requests to claim p{slo.percentile:g} ({n} < {needs})"
        terms[metric] = SloTerm(bound_s=bound, over=over, n=n, state=state, why=why)
    return SloVerdict(
        ttft_s=slo.ttft_s,
        tpot_s=slo.tpot_s,
        e2e_s=slo.e2e_s,
        percentile=slo.percentile,
        terms=terms,
        met=all(t.state == "met" for t in terms.values()),
    )


def is_good(record: RequestRecord, slo: Slo) -> bool:
    """Completed and met every SLO term."""
    values = request_values(record)
    return not record.error and all(
        not _over(record, values.get(metric), bound) for metric, bound in slo.terms().items()
    )


def _turns(records: Sequence[RequestRecord]) -> list[TurnSummary]:
    """Per turn of a multi-turn workload (every request of the trial, not only the window:
    the later turns come late by construction): TTFT, prompt and reusable tokens."""
    by_turn: dict[int, list[RequestRecord]] = defaultdict(list)
    for record in records:
        if record.turn is not None and not record.cancelled:
            by_turn[record.turn].append(record)
    found = []
    for turn in sorted(by_turn):
        group = by_turn[turn]
        ok = [r for r in group if not r.error]
        ttfts = [v for r in ok if (v := request_values(r)["ttft_s"]) is not None]
        prompts = [r.prompt_tokens for r in ok if r.prompt_tokens is not None]
        reusable = [r.reusable_prefix_tokens for r in ok if r.reusable_prefix_tokens is not None]
        found.append(
            TurnSummary(
                turn=turn,
                requests=len(group),
                completed=len(ok),
                ttft_s=_distribution(ttfts, f"TTFT of turn {turn}"),
                prompt_tokens_mean=float(np.mean(prompts)) if prompts else None,
                reusable_prefix_tokens_mean=float(np.mean(reusable)) if reusable else None,
            )
        )
    return found


def summarise_trial(
    records: Sequence[RequestRecord],
    *,
    slo: Slo | None = None,
    duration_s: float = 0.0,
) -> TrialSummary:
    """The figures of one trial."""
    considered_all = [r for r in records if not r.cancelled]
    errors = Counter(r.error for r in considered_all if r.error)
    head = {
        "requests": len(records),
        "completed": sum(1 for r in considered_all if not r.error),
        "errors": sum(errors.values()),
        "error_kinds": [ErrorKind(error=e, count=c) for e, c in errors.most_common(5)],
        "cancelled": sum(1 for r in records if r.cancelled),
        "duration_s": duration_s,
    }
    if not considered_all:
        return TrialSummary.model_validate(head)
    start, end = steady_window(considered_all)
    considered = [r for r in considered_all if start <= r.scheduled_s <= end]
    length = end - start
    if length <= 0:  # one request, or all at once: the whole run is the window
        start = min(r.scheduled_s for r in considered_all)
        end = max(r.end_s for r in considered_all)
        length = max(end - start, 1e-9)
        considered = considered_all
    values = [request_values(r) for r in considered]
    ok = [(r, v) for r, v in zip(considered, values, strict=True) if not r.error]
    metrics: dict[str, Distribution] = {}
    for name in METRICS:
        if name == "itl_s":
            continue
        found = [float(x) for _, v in ok if (x := v[name]) is not None]
        metrics[name] = _distribution(found, name[:-2].upper())
    gaps = [float(g) for r, _ in ok for g in np.diff(r.chunk_times_s)]
    metrics["itl_s"] = _distribution(gaps, "ITL")
    lags = np.asarray([r.sent_s - r.scheduled_s for r in considered_all])
    lag_p99 = float(np.percentile(lags, 99))
    output_in = sum(_tokens_in(r, start, end) for r in considered_all if not r.error)
    prompt_tokens = [r.prompt_tokens for r, _ in ok if r.prompt_tokens is not None]
    output_tokens = [r.output_tokens for r, _ in ok if r.output_tokens is not None]
    prompt_rate = (
        sum(
            r.prompt_tokens or 0
            for r, _ in ok
            if r.first_token_s is not None and start <= r.first_token_s <= end
        )
        / length
    )
    reasoning = [
        (r.reasoning_tokens, r.output_tokens)
        for r, _ in ok
        if r.reasoning_tokens is not None and r.output_tokens is not None
    ]
    without_content = sum(1 for _, v in ok if v["ttft_s"] is not None and v["ttfc_s"] is None)
    notes = ["client lag has NaN values"] if any(math.isnan(x) for x in lags) else []
    assumed = sum(
        1
        for r, v in ok
        if v["tpot_s"] is not None
        and not first_chunk_tokens(r)[1]
        and (r.output_tokens or 0) > len(r.chunk_times_s)
    )
    if assumed:
        notes.append(
            f"TPOT: {assumed} of {len(ok)} requests streamed fewer chunks than tokens and the "
            "server did not report each chunk's tokens: their first chunk is assumed to hold "
            "one token (TPOT over N - 1)"
        )
    if without_content:
        notes.append(
            f"{without_content} of {len(ok)} requests streamed no answer text (capped while "
            "reasoning, or tool calls only): TTFT counts, time to first content does not"
        )
    verdict = goodput = None
    if slo is not None and slo.terms():
        verdict = _slo_verdict(slo, considered, values)
        good = [r for r in considered if is_good(r, slo)]
        goodput = Goodput(
            requests_per_s=len(good) / length,
            output_tokens_per_s=sum(r.output_tokens or 0 for r in good) / length,
            attainment=len(good) / len(considered) if considered else 0.0,
        )
    return TrialSummary(
        **head,  # type: ignore[arg-type]
        window=Window(start_s=start, end_s=end, length_s=length, requests=len(considered)),
        metrics=Metrics(**metrics),
        client_lag_s=ClientLag(
            p50=float(np.percentile(lags, 50)),
            p99=lag_p99,
            max=float(lags.max()),
            limit=LAG_LIMIT_S,
        ),
        client_bound=lag_p99 > LAG_LIMIT_S,
        token_sources=dict(Counter(r.tokens_source for r, _ in ok)),
        tokens=TokenStats(
            prompt_mean=float(np.mean(prompt_tokens)) if prompt_tokens else None,
            output_mean=float(np.mean(output_tokens)) if output_tokens else None,
            output_total=int(sum(output_tokens)),
            reasoning_mean=float(np.mean([n for n, _ in reasoning])) if reasoning else None,
            reasoning_total=int(sum(n for n, _ in reasoning)) if reasoning else None,
            answer_mean=float(np.mean([o - n for n, o in reasoning])) if reasoning else None,
            reasoning_known=len(reasoning),
            without_content=without_content,
        ),
        throughput=Throughput(
            output_tokens_per_s=output_in / length,
            total_tokens_per_s=output_in / length + prompt_rate,
            requests_per_s=sum(1 for r in considered_all if not r.error and start <= r.end_s <= end)
            / length,
        ),
        slo=verdict,
        goodput=goodput,
        notes=notes,
        turns=_turns(records),
    )


def steady_samples(
    records: Sequence[RequestRecord], summary: TrialSummary
) -> dict[str, list[float]]:
    """Per-request TTFT, TPOT and E2E of the completed requests that arrived in the summary's
    steady window: the samples ``compare`` bootstraps."""
    window = summary.window
    start = window.start_s if window else -math.inf
    end = window.end_s if window else math.inf
    found: dict[str, list[float]] = {"ttft_s": [], "tpot_s": [], "e2e_s": []}
    for record in records:
        if not record.ok or not start <= record.scheduled_s <= end:
            continue
        for name, value in request_values(record).items():
            if name in found and value is not None:
                found[name].append(round(value, 6))
    return found
