"""The options ``llm`` and ``tune`` share, declared once: the workload (lengths, prompts,
prefix, conversations, seed, tokenizer, EOS), the SLO and its percentile, the capacity search,
the per-request timeout; and the workload the flags describe (:func:`build_workload`). A flag
the two commands spell alike means the same thing in both."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from accelscope.cli._app import given
from accelscope.cli._flag_groups import FlagGroup, flag, stand_in
from accelscope.cli._types import choice, duration_option
from accelscope.errors import BadInputError

if TYPE_CHECKING:
    from accelscope.llm.documents import Slo
    from accelscope.llm.scaleout import Workers
    from accelscope.llm.workload import Lengths, PrefixScenario, ThinkTime, WorkloadSource
else:  # the llm package costs the CLI's start most of its time: see stand_in
    Slo, Workers, Lengths, PrefixScenario, ThinkTime = map(
        stand_in, ("Slo", "Workers", "Lengths", "PrefixScenario", "ThinkTime")
    )

API_KEY_ENV = "OPENAI_API_KEY"
"""The environment variable the API key is read from (never a flag: it would show in ps)."""


def lengths(flag: str) -> Any:
    """``128`` or a range ``64:256``, refused in one line naming ``flag``."""

    def parse(value: Any) -> Lengths:
        from accelscope.llm.workload import Lengths

        return value if isinstance(value, Lengths) else Lengths.parse(value, flag)

    return parse


def parse_slo(value: Any) -> Slo:
    from accelscope.llm.documents import Slo

    return value if isinstance(value, Slo) else Slo.parse(str(value))


def parse_think(value: Any) -> ThinkTime:
    from accelscope.llm.workload import ThinkTime

    return value if isinstance(value, ThinkTime) else ThinkTime.parse(str(value))


def parse_prefix(value: Any) -> PrefixScenario:
    from accelscope.llm.workload import PrefixScenario

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
    agentic: Path | None = None,
    agentic_answers: str | None = None,
    agentic_skip_bad: bool = False,
) -> WorkloadSource:
    """The workload the flags describe (one line when they contradict each other)."""
    from accelscope.llm.agentic import AgenticWorkload
    from accelscope.llm.conversations import ConversationWorkload
    from accelscope.llm.trace import MOONCAKE_BLOCK_TOKENS, TraceWorkload
    from accelscope.llm.workload import SessionWorkload, Workload, read_prompts

    sources = [
        flag
        for flag, value in (
            ("--prompts", prompts),
            ("--conversations", conversations),
            ("--trace", trace),
            ("--agentic", agentic),
        )
        if value is not None
    ]
    if len(sources) > 1:
        raise BadInputError(f"give one workload file, not {' and '.join(sources)}")
    if agentic is None and (agentic_answers is not None or agentic_skip_bad):
        used = "--agentic-answers" if agentic_answers is not None else "--agentic-skip-bad"
        raise BadInputError(f"{used} applies to --agentic FILE")
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
    if agentic is not None:
        extra = [f for f in (*multi_given, *filters) if f != "--sessions"]
        extra += ["--prefix"] if not prefix.cold else []
        if extra:
            raise BadInputError(f"{extra[0]} does not apply to --agentic (the file has its own)")
        return AgenticWorkload.from_file(
            agentic,
            lenient=agentic_skip_bad,
            answers=agentic_answers or "server",
            sessions_per_trial=sessions,
            seed=seed,
        )
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
"""Prompt tokens per request: ``llm`` and ``tune`` draw them, ``plan llm`` projects their mean."""
OutputTokensOption: Any = typer.Option(
    None, "--output-tokens", parser=lengths("--output-tokens"), help="64 or a range 16:256."
)
"""Output tokens per request, as :data:`InputTokensOption`."""


@dataclass(frozen=True)
class WorkloadFlags(FlagGroup):
    """The workload flags ``llm`` and ``tune`` share, and the workload they describe."""

    requests: int | None = flag(typer.Option(None, "--requests", help="Requests per trial (100)."))
    input_tokens: Lengths | None = flag(InputTokensOption)
    output_tokens: Lengths | None = flag(OutputTokensOption)
    prompts: Path | None = flag(
        typer.Option(
            None, "--prompts", help='JSONL prompts: {"prompt": ..., "max_tokens": ...} per line.'
        )
    )
    prefix: PrefixScenario | None = flag(
        typer.Option(None, "--prefix", parser=parse_prefix, help="cold, or shared=TOKENS.")
    )
    sessions: int | None = flag(
        typer.Option(None, "--sessions", help="Multi-turn: conversations per trial.")
    )
    turns: Lengths | None = flag(
        typer.Option(
            None, "--turns", parser=lengths("--turns"), help="Turns per conversation, 4 or 2:6."
        )
    )
    think_time: ThinkTime | None = flag(
        typer.Option(
            None,
            "--think-time",
            parser=parse_think,
            help="Pause before a next turn: 2s or exp:2s.",
        )
    )
    conversations: Path | None = flag(
        typer.Option(None, "--conversations", help="ShareGPT conversations (JSON or JSONL).")
    )
    agentic: Path | None = flag(
        typer.Option(
            None,
            "--agentic",
            help="Agent trajectories (JSONL of OpenAI chat messages with tool calls), replayed "
            "turn by turn with their recorded tool latencies.",
        )
    )
    agentic_answers: str | None = flag(
        typer.Option(
            None,
            "--agentic-answers",
            parser=choice("--agentic-answers", "server", "recorded"),
            help="Answers sent back in later turns: server (its own, default) or recorded.",
        )
    )
    agentic_skip_bad: bool | None = flag(
        typer.Option(
            None,
            "--agentic-skip-bad/--no-agentic-skip-bad",
            help="Skip malformed trajectories (counted per reason) instead of refusing the file.",
        )
    )
    seed: int | None = flag(
        typer.Option(None, "--seed", help="Prompt seed (default: random, stored).")
    )
    tokenizer: Path | None = flag(
        typer.Option(
            None, "--tokenizer", help="Local tokenizer dir: exact prompt lengths, fallback counts."
        )
    )
    ignore_eos: bool | None = flag(
        typer.Option(
            None,
            "--ignore-eos/--no-ignore-eos",
            help="Ask the server to ignore EOS, for exact output lengths (vLLM, SGLang; "
            "tune with vllm: on).",
        )
    )

    @property
    def requests_per_trial(self) -> int | None:
        """Requests (or, multi-turn, conversations) per trial; ``None``: the request's default."""
        if self.sessions is not None and self.requests is not None:
            raise BadInputError("give --sessions (conversations per trial) or --requests, not both")
        return self.sessions if self.sessions is not None else self.requests

    def build(
        self,
        *,
        prefix_hit_rate: float | None = None,
        input_filter: Lengths | None = None,
        output_filter: Lengths | None = None,
        trace: Path | None = None,
        trace_block_tokens: int | None = None,
    ) -> WorkloadSource:
        """The workload these flags describe, with ``llm``'s own flags where given (one line
        when they contradict each other)."""
        from accelscope.llm.workload import PrefixScenario

        if prefix_hit_rate is not None and self.prefix is None:
            raise BadInputError("--prefix-hit-rate needs --prefix shared=TOKENS")
        scenario = self.prefix or PrefixScenario()
        if prefix_hit_rate is not None:
            scenario = PrefixScenario.parse(f"shared={scenario.shared_tokens}", prefix_hit_rate)
        elif not scenario.cold:
            scenario = PrefixScenario(scenario.shared_tokens, 1.0)
        return build_workload(
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            prompts=self.prompts,
            prefix=scenario,
            sessions=self.sessions,
            turns=self.turns,
            think_time=self.think_time,
            conversations=self.conversations,
            input_filter=input_filter,
            output_filter=output_filter,
            trace=trace,
            trace_block_tokens=trace_block_tokens,
            seed=self.seed if self.seed is not None else random_seed(),
            agentic=self.agentic,
            agentic_answers=self.agentic_answers,
            agentic_skip_bad=bool(self.agentic_skip_bad),
        )


@dataclass(frozen=True)
class SloFlags(FlagGroup):
    """``--slo`` and the percentile it bounds."""

    slo: Slo | None = flag(
        typer.Option(
            None, "--slo", parser=parse_slo, help="e.g. ttft=500ms,tpot=50ms,e2e=10s (any subset)."
        )
    )
    slo_percentile: float | None = flag(
        typer.Option(
            None, "--slo-percentile", help="Percentile the SLO bounds (99; LoadGen tail claims)."
        )
    )

    @property
    def bound(self) -> Slo | None:
        """The SLO bounding the percentile asked (checked in one line)."""
        return with_percentile(self.slo, self.slo_percentile)


def parse_workers(value: Any) -> Workers:
    from accelscope.llm.scaleout import Workers

    return value if isinstance(value, Workers) else Workers.parse(str(value))


WorkersOption: Any = typer.Option(
    None,
    "--workers",
    parser=parse_workers,
    help="Client processes sending each trial's one schedule: N on this machine, or ray:N on "
    "a Ray cluster's nodes (RAY_ADDRESS, else auto). Percentiles over the merged samples.",
)


@dataclass(frozen=True)
class CapacitySearchFlags(FlagGroup):
    """Where the capacity search starts and how many trials it may take."""

    capacity_start: float | None = flag(
        typer.Option(None, "--capacity-start", help="First load of the capacity search.")
    )
    capacity_trials: int | None = flag(
        typer.Option(
            None, "--capacity-trials", help="Trials of each capacity search (llm 8, tune 6)."
        )
    )


TimeoutOption: Any = duration_option("--timeout", "Per-request timeout (300s).")
