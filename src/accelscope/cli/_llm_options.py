"""The options ``llm`` and ``tune`` share, declared once: the workload (lengths, prompts,
prefix, conversations, seed, tokenizer), the SLO and its percentile, the per-request timeout
and the run's report and store; and the workload the flags describe (:func:`build_workload`).
A flag the two commands spell alike means the same thing in both."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import typer

from accelscope.cli._app import given
from accelscope.cli._types import duration_option
from accelscope.errors import BadInputError
from accelscope.llm.conversations import ConversationWorkload
from accelscope.llm.documents import Slo
from accelscope.llm.scaleout import Workers
from accelscope.llm.trace import MOONCAKE_BLOCK_TOKENS, TraceWorkload
from accelscope.llm.workload import (
    Lengths,
    PrefixScenario,
    SessionWorkload,
    ThinkTime,
    Workload,
    WorkloadSource,
    read_prompts,
)

API_KEY_ENV = "OPENAI_API_KEY"
"""The environment variable the API key is read from (never a flag: it would show in ps)."""


def lengths(flag: str) -> Any:
    """``128`` or a range ``64:256``, refused in one line naming ``flag``."""
    return lambda value: value if isinstance(value, Lengths) else Lengths.parse(value, flag)


def parse_slo(value: Any) -> Slo:
    return value if isinstance(value, Slo) else Slo.parse(str(value))


def parse_think(value: Any) -> ThinkTime:
    return value if isinstance(value, ThinkTime) else ThinkTime.parse(str(value))


def parse_prefix(value: Any) -> PrefixScenario:
    return value if isinstance(value, PrefixScenario) else PrefixScenario.parse(str(value))


def random_seed() -> int:
    """A prompt seed when none is given (stored with the run, so it can be repeated)."""
    return int.from_bytes(os.urandom(4), "little")


def build_workload(
    *,
    input_tokens: Lengths | None,
    output_tokens: Lengths | None,
    prompts: Path | None,
    prefix: PrefixScenario,
    sessions: int | None,
    turns: Lengths | None,
    think_time: ThinkTime | None,
    conversations: Path | None,
    input_filter: Lengths | None,
    output_filter: Lengths | None,
    trace: Path | None,
    trace_block_tokens: int | None,
    seed: int,
) -> WorkloadSource:
    """The workload the flags describe (one line when they contradict each other)."""
    sources = [
        flag
        for flag, value in (
            ("--prompts", prompts),
            ("--conversations", conversations),
            ("--trace", trace),
        )
        if value is not None
    ]
    if len(sources) > 1:
        raise BadInputError(f"give one workload file, not {' and '.join(sources)}")
    multi = {"--sessions": sessions, "--turns": turns, "--think-time": think_time}
    multi_given = [flag for flag, value in multi.items() if value is not None]
    filters = [
        f for f, v in (("--input-filter", input_filter), ("--output-filter", output_filter)) if v
    ]
    if trace is not None:
        extra = [*multi_given, *filters] + (["--prefix"] if not prefix.cold else [])
        if extra:
            raise BadInputError(f"{extra[0]} does not apply to --trace (a trace has its own)")
        return TraceWorkload.from_file(
            trace, block_tokens=trace_block_tokens or MOONCAKE_BLOCK_TOKENS, seed=seed
        )
    if trace_block_tokens is not None:
        raise BadInputError("--trace-block-tokens applies to --trace")
    if conversations is not None:
        if not prefix.cold:
            raise BadInputError("--prefix does not apply to --conversations (use the file's)")
        return ConversationWorkload.from_file(
            conversations,
            max_turns=turns.high if turns else None,
            input_filter=input_filter,
            output_filter=output_filter,
            think=think_time,
            **given(sessions_per_trial=sessions),
            seed=seed,
        )
    if filters:
        raise BadInputError(f"{filters[0]} applies to --conversations FILE")
    if prompts is not None:
        if multi_given:
            raise BadInputError(f"{multi_given[0]} does not apply to --prompts (one turn each)")
        return Workload(
            prompts=read_prompts(prompts),
            prompts_source=str(prompts),
            **given(output_tokens=output_tokens),
            prefix=prefix,
            seed=seed,
        )
    if multi_given:
        if sessions is None:
            raise BadInputError(
                f"{multi_given[0]} describes conversations: give --sessions N (synthetic) or "
                "--conversations FILE (ShareGPT)"
            )
        return SessionWorkload(
            sessions_per_trial=sessions,
            think=think_time,
            prefix=prefix,
            seed=seed,
            **given(turns=turns, input_tokens=input_tokens, output_tokens=output_tokens),
        )
    return Workload(
        prefix=prefix,
        seed=seed,
        **given(input_tokens=input_tokens, output_tokens=output_tokens),
    )


def with_percentile(slo: Slo | None, percentile: float | None) -> Slo | None:
    """``slo`` bounding ``percentile`` (``--slo-percentile``), checked in one line."""
    if percentile is None:
        return slo
    if slo is None:
        raise BadInputError("--slo-percentile needs an --slo")
    if not 0.0 < percentile < 100.0:
        raise BadInputError(f"--slo-percentile {percentile:g}: give a value in (0, 100)")
    return slo.model_copy(update={"percentile": percentile})


InputTokensOption: Any = typer.Option(
    None, "--input-tokens", parser=lengths("--input-tokens"), help="128 or a range 64:256."
)
OutputTokensOption: Any = typer.Option(
    None, "--output-tokens", parser=lengths("--output-tokens"), help="64 or a range 16:256."
)
PromptsOption: Any = typer.Option(
    None, "--prompts", help='JSONL prompts: {"prompt": ..., "max_tokens": ...} per line.'
)
PrefixOption: Any = typer.Option(
    None, "--prefix", parser=parse_prefix, help="cold, or shared=TOKENS."
)
SessionsOption: Any = typer.Option(None, "--sessions", help="Multi-turn: conversations per trial.")
TurnsOption: Any = typer.Option(
    None, "--turns", parser=lengths("--turns"), help="Turns per conversation, 4 or 2:6."
)
ThinkTimeOption: Any = typer.Option(
    None, "--think-time", parser=parse_think, help="Pause before each next turn: 2s or exp:2s."
)
ConversationsOption: Any = typer.Option(
    None, "--conversations", help="ShareGPT-format conversations (JSON or JSONL)."
)
SeedOption: Any = typer.Option(None, "--seed", help="Prompt seed (default: random, stored).")
TokenizerOption: Any = typer.Option(
    None, "--tokenizer", help="Local tokenizer dir: exact prompt lengths, fallback counts."
)
SloOption: Any = typer.Option(
    None, "--slo", parser=parse_slo, help="e.g. ttft=500ms,tpot=50ms,e2e=10s (any subset)."
)
SloPercentileOption: Any = typer.Option(
    None, "--slo-percentile", help="Percentile the SLO bounds (99; LoadGen tail claims)."
)
RequestsOption: Any = typer.Option(None, "--requests", help="Requests per trial (100).")


def parse_workers(value: Any) -> Workers:
    return value if isinstance(value, Workers) else Workers.parse(str(value))


WorkersOption: Any = typer.Option(
    None,
    "--workers",
    parser=parse_workers,
    help="Client processes sending each trial's one schedule: N on this machine, or ray:N on "
    "a Ray cluster's nodes (RAY_ADDRESS, else auto). Percentiles over the merged samples.",
)
CapacityStartOption: Any = typer.Option(
    None, "--capacity-start", help="First load of the capacity search."
)
TimeoutOption: Any = duration_option("--timeout", "Per-request timeout (300s).")
ReportOption: Any = typer.Option(None, "--report", help="HTML report path.")
NoStoreOption: Any = typer.Option(False, "--no-store", help="Do not store the run.")
