"""Reading a run against the server's own configuration: what the workload let a prefix cache
reuse, what the server reported, and why the two differ.

A prefix cache (vLLM's, SGLang's radix cache) stores the KV of whole blocks of prompt tokens
(vLLM: ``block_size`` tokens, 16 on GPUs, 128 on CPUs), so a shared prefix shorter than one
block can never hit, and a prefix is reused in whole blocks only; a server that recomputes at
least one token of a fully cached prompt (vLLM) reuses at most ``prompt - 1`` tokens. With the
block size the server publishes (``vllm:cache_config_info``), :func:`prefix_reuse` counts the
reusable prompt tokens the way the server does; :func:`explanations` turns the gap between
that expectation and the server's measured hit rate into sentences.
"""

from __future__ import annotations

from collections.abc import Sequence

from accelscope.llm.documents import (
    LlmTrial,
    PrefixReuse,
    RequestRecord,
    ServerConfig,
    WorkloadSummary,
)

__all__ = ["explanations", "prefix_reuse"]

_FAR_BELOW = 0.5
"""A measured hit rate under this share of the expected one gets an explanation."""


def prefix_reuse(
    records: Sequence[RequestRecord],
    *,
    config: ServerConfig | None,
    measured_share: float | None,
) -> PrefixReuse | None:
    """Reusable prompt tokens over all prompt tokens of the completed requests (in whole
    blocks when the server published its block size); ``None`` when the workload says
    nothing of reuse or no prompt was counted."""
    block = config.block_size_tokens if config is not None else None
    prompt = reusable = 0
    known = False
    for record in records:
        if not record.ok or record.prompt_tokens is None:
            continue
        prompt += record.prompt_tokens
        if record.reusable_prefix_tokens is None:
            continue
        known = True
        tokens = min(record.reusable_prefix_tokens, max(record.prompt_tokens - 1, 0))
        reusable += (tokens // block) * block if block else tokens
    if not known or prompt == 0:
        return None
    basis = (
        f"whole KV blocks of {block} tokens (the server's block size)"
        if block
        else "tokens (the server published no block size)"
    )
    return PrefixReuse(
        prompt_tokens=prompt,
        reusable_tokens=reusable,
        expected_share=reusable / prompt,
        block_size_tokens=block,
        measured_share=measured_share,
        basis=basis,
    )


def explanations(
    workload: WorkloadSummary, trials: Sequence[LlmTrial], config: ServerConfig | None
) -> list[str]:
    """Sentences that explain the prefix-cache figures by the server's configuration."""
    notes: list[str] = []
    block = config.block_size_tokens if config else None
    shared = workload.shared_prefix_tokens
    if block and 0 < shared < block:
        notes.append(
            f"the shared prefix ({shared} tokens) is shorter than one KV block of this server "
            f"({block} tokens, from {config.source if config else '?'}): a prefix cache "
            f"stores whole blocks, so this prefix cannot hit it (0 % hits is expected); use "
            f"--prefix shared={block} or longer to measure prefix caching"
        )
    reuse = [t.summary.prefix_reuse for t in trials if t.summary.prefix_reuse is not None]
    expects = any((r.expected_share or 0) > 0 for r in reuse)
    if config is not None and config.prefix_caching is False and expects:
        notes.append(
            "prefix caching is off on this server (enable_prefix_caching=False): the prompt "
            "tokens this workload could reuse are computed again"
        )
    for trial in trials:
        found = trial.summary.prefix_reuse
        if found is None or found.expected_share is None:
            continue
        if found.measured_share is None:
            continue
        if (
            found.expected_share > 0
            and found.measured_share < _FAR_BELOW * found.expected_share
            and (config is None or config.prefix_caching is not False)
        ):
            capacity = config.kv_capacity_tokens if config else None
            why = (
                f" (its KV cache holds {capacity:,} tokens: evicted blocks cannot hit)"
                if capacity
                else ""
            )
            notes.append(
                f"{trial.label}: the server reused {found.measured_share:.0%} of prompt tokens "
                f"where the workload allows {found.expected_share:.0%}{why}"
            )
    if config is None and any(t.server_metrics.available for t in trials) and shared:
        notes.append(
            "the server publishes no cache configuration (block size, prefix caching): the "
            "expected reuse is counted in tokens, not blocks"
        )
    return notes
