"""The ``llm`` command: token-level benchmark of an LLM server (TTFT, TPOT, ITL, goodput under
an SLO, capacity, decode floor), with single-turn, multi-turn, ShareGPT and trace workloads."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import typer

from accelscope.cli._app import (
    JsonOption,
    StoreOption,
    _err,
    _out,
    app,
    command_line,
    given,
    print_outcome,
)
from accelscope.cli._runs import register_show
from accelscope.cli._types import (
    Numbers,
    Sizes,
    choice,
    duration_option,
    parse_numbers,
    parse_rate_unit,
    parse_sizes,
)
from accelscope.cli.config import config_option
from accelscope.commands.llm.view import llm_view
from accelscope.commands.llm.workflow import (
    SUMMARY_DOCUMENT,
    TRIAL_DOCUMENT,
    LlmRequestSettings,
    llm,
)
from accelscope.errors import BadInputError
from accelscope.llm.conversations import ConversationWorkload
from accelscope.llm.documents import LlmRun, LlmTrial, Slo, TargetDescription
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
from accelscope.store.sqlite import DEFAULT_STORE_PATH, RunRecord

API_KEY_ENV = "OPENAI_API_KEY"


def _numbers(flag: str) -> Any:
    """Comma-separated positive numbers, refused in one line naming ``flag``."""

    def parse(value: Any) -> Numbers:
        try:
            return parse_numbers(value)
        except BadInputError as exc:
            raise BadInputError(f"{flag} {exc}") from None

    return parse


def _counts(flag: str) -> Any:
    """Comma-separated positive integers, refused in one line naming ``flag``."""

    def parse(value: Any) -> Sizes:
        try:
            return parse_sizes(value)
        except BadInputError:
            raise BadInputError(f"{flag} {value!r}: give positive integers, e.g. 1,4,16") from None

    return parse


def _lengths(flag: str) -> Any:
    return lambda value: value if isinstance(value, Lengths) else Lengths.parse(value, flag)


def _slo(value: Any) -> Slo:
    return value if isinstance(value, Slo) else Slo.parse(str(value))


def _think(value: Any) -> ThinkTime:
    return value if isinstance(value, ThinkTime) else ThinkTime.parse(str(value))


def _prefix(value: Any) -> PrefixScenario:
    return value if isinstance(value, PrefixScenario) else PrefixScenario.parse(str(value))


def _seed() -> int:
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


@app.command("llm")
def llm_command(
    url: str | None = typer.Argument(
        None, help="The server's base URL, e.g. http://localhost:8000 (OpenAI-compatible)."
    ),
    model: str | None = typer.Option(None, "--model", help="Model name the server serves."),
    hf_model: Path | None = typer.Option(
        None, "--hf-model", help="Serve a local Hugging Face model directory in-process instead."
    ),
    device: str | None = typer.Option(
        None, "--device", help="In-process: cpu, cuda or cuda:N (default cpu)."
    ),
    dtype: str | None = typer.Option(
        None, "--dtype", help="In-process: auto, fp32, bf16 or fp16 (default: the checkpoint's)."
    ),
    api: str | None = typer.Option(
        None, "--api", parser=choice("--api", "completions", "chat"), help="completions or chat."
    ),
    rate: Numbers | None = typer.Option(
        None,
        "--rate",
        parser=_numbers("--rate"),
        help="Offered rates (req/s, or sessions/s), e.g. 1,2,4.",
    ),
    concurrency: Sizes | None = typer.Option(
        None,
        "--concurrency",
        parser=_counts("--concurrency"),
        help="Fixed concurrencies (closed loop), e.g. 1,4,16.",
    ),
    burstiness: float | None = typer.Option(
        None, "--burstiness", help="Gamma CV of the arrival gaps (1 = Poisson)."
    ),
    requests: int | None = typer.Option(None, "--requests", help="Requests per trial (100)."),
    input_tokens: Lengths | None = typer.Option(
        None, "--input-tokens", parser=_lengths("--input-tokens"), help="128 or a range 64:256."
    ),
    output_tokens: Lengths | None = typer.Option(
        None, "--output-tokens", parser=_lengths("--output-tokens"), help="64 or a range 16:256."
    ),
    prompts: Path | None = typer.Option(
        None, "--prompts", help='JSONL prompts: {"prompt": ..., "max_tokens": ...} per line.'
    ),
    prefix: PrefixScenario | None = typer.Option(
        None, "--prefix", parser=_prefix, help="cold, or shared=TOKENS."
    ),
    prefix_hit_rate: float | None = typer.Option(
        None, "--prefix-hit-rate", help="Share of requests carrying the shared prefix (1)."
    ),
    sessions: int | None = typer.Option(
        None, "--sessions", help="Multi-turn: conversations per trial."
    ),
    turns: Lengths | None = typer.Option(
        None, "--turns", parser=_lengths("--turns"), help="Turns per conversation, 4 or 2:6."
    ),
    think_time: ThinkTime | None = typer.Option(
        None, "--think-time", parser=_think, help="Pause before each next turn: 2s or exp:2s."
    ),
    conversations: Path | None = typer.Option(
        None, "--conversations", help="ShareGPT-format conversations (JSON or JSONL)."
    ),
    input_filter: Lengths | None = typer.Option(
        None,
        "--input-filter",
        parser=_lengths("--input-filter"),
        help="Keep turns whose prompt is 4:1024 tokens.",
    ),
    output_filter: Lengths | None = typer.Option(
        None,
        "--output-filter",
        parser=_lengths("--output-filter"),
        help="Keep turns whose answer is 4:1024 tokens.",
    ),
    trace: Path | None = typer.Option(
        None, "--trace", help="Mooncake-format trace (JSONL: timestamp, input_length, ...)."
    ),
    trace_speed: Numbers | None = typer.Option(
        None,
        "--trace-speed",
        parser=_numbers("--trace-speed"),
        help="Replay speeds, e.g. 1,2 (x recorded).",
    ),
    trace_block_tokens: int | None = typer.Option(
        None, "--trace-block-tokens", help=f"Tokens per hash_ids block ({MOONCAKE_BLOCK_TOKENS})."
    ),
    seed: int | None = typer.Option(None, "--seed", help="Prompt seed (default: random, stored)."),
    slo: Slo | None = typer.Option(
        None, "--slo", parser=_slo, help="e.g. ttft=500ms,tpot=50ms,e2e=10s (any subset)."
    ),
    slo_percentile: float | None = typer.Option(
        None, "--slo-percentile", help="Percentile the SLO bounds (99; LoadGen tail claims)."
    ),
    capacity: str | None = typer.Option(
        None,
        "--capacity",
        parser=choice("--capacity", "rate", "concurrency", "speed"),
        help="Search the highest load meeting the SLO: rate, concurrency or speed (trace).",
    ),
    capacity_start: float | None = typer.Option(
        None, "--capacity-start", help="First load of the search."
    ),
    capacity_trials: int | None = typer.Option(None, "--capacity-trials", help="Trial budget (8)."),
    timeout: float | None = duration_option("--timeout", "Per-request timeout (300s)."),
    tokenizer: Path | None = typer.Option(
        None, "--tokenizer", help="Local tokenizer dir: exact prompt lengths, fallback counts."
    ),
    ignore_eos: bool = typer.Option(
        False, "--ignore-eos", help="Ask the server to ignore EOS (vLLM, SGLang)."
    ),
    batching: str | None = typer.Option(
        None,
        "--batching",
        parser=choice("--batching", "static", "continuous"),
        help="In-process: static or continuous.",
    ),
    max_batch: int | None = typer.Option(
        None, "--max-batch", help="In-process: largest batch (8)."
    ),
    model_config: Path | None = typer.Option(
        None, "--model-config", help="The model's config.json (for the decode floor)."
    ),
    weights_dtype: str | None = typer.Option(None, "--weights-dtype", help="e.g. bf16, int8."),
    kv_dtype: str | None = typer.Option(None, "--kv-dtype", help="KV-cache dtype, e.g. fp8."),
    bandwidth: float | None = typer.Option(
        None,
        "--bandwidth",
        parser=parse_rate_unit,
        help="Memory bandwidth for the floor, e.g. 3.35TB/s.",
    ),
    peak_flops: float | None = typer.Option(
        None, "--peak-flops", parser=parse_rate_unit, help="e.g. 989TFLOPS."
    ),
    instance: str | None = typer.Option(
        None, "--instance", help="Catalog instance the server runs on (datasheet floor)."
    ),
    max_in_flight: int | None = typer.Option(None, "--max-in-flight", help="Client threads (256)."),
    no_metrics: bool = typer.Option(False, "--no-server-metrics", help="Do not read /metrics."),
    config: Path | None = config_option("llm"),
    report: Path | None = typer.Option(None, "--report", help="HTML report path."),
    store: Path | None = StoreOption,
    no_store: bool = typer.Option(False, "--no-store", help="Do not store the run."),
    as_json: bool = JsonOption,
) -> None:
    """Benchmark an LLM server token by token: TTFT, TPOT, ITL, goodput under an SLO."""
    if prefix_hit_rate is not None and prefix is None:
        raise BadInputError("--prefix-hit-rate needs --prefix shared=TOKENS")
    scenario = prefix or PrefixScenario()
    if prefix_hit_rate is not None:
        scenario = PrefixScenario.parse(f"shared={scenario.shared_tokens}", prefix_hit_rate)
    elif not scenario.cold:
        scenario = PrefixScenario(scenario.shared_tokens, 1.0)
    workload = build_workload(
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        prompts=prompts,
        prefix=scenario,
        sessions=sessions,
        turns=turns,
        think_time=think_time,
        conversations=conversations,
        input_filter=input_filter,
        output_filter=output_filter,
        trace=trace,
        trace_block_tokens=trace_block_tokens,
        seed=seed if seed is not None else _seed(),
    )
    if slo_percentile is not None and slo is None:
        raise BadInputError("--slo-percentile needs an --slo")
    if slo is not None and slo_percentile is not None:
        if not 0.0 < slo_percentile < 100.0:
            raise BadInputError(f"--slo-percentile {slo_percentile:g}: give a value in (0, 100)")
        slo = slo.model_copy(update={"percentile": slo_percentile})
    if sessions is not None and requests is not None:
        raise BadInputError("give --sessions (conversations per trial) or --requests, not both")
    request = LlmRequestSettings(
        url=url,
        model=model,
        hf_model=hf_model,
        api_key=os.environ.get(API_KEY_ENV),
        workload=workload,
        slo=slo,
        scrape_metrics=not no_metrics,
        report_path=report,
        **given(
            device=device,
            dtype=dtype,
            api=api,
            batching=batching,
            max_batch=max_batch,
            rates=rate.values if rate else None,
            concurrencies=concurrency.values if concurrency else None,
            speeds=trace_speed.values if trace_speed else None,
            burstiness=burstiness,
            requests=sessions if sessions is not None else requests,
            capacity=capacity,
            capacity_start=capacity_start,
            capacity_trials=capacity_trials,
            timeout_s=timeout,
            tokenizer=tokenizer,
            ignore_eos=ignore_eos or None,
            model_config=model_config,
            weights_dtype=weights_dtype,
            kv_dtype=kv_dtype,
            bandwidth_bytes_per_s=bandwidth,
            peak_flops_per_s=peak_flops,
            instance=instance,
            max_in_flight=max_in_flight,
        ),
    )
    events = None if as_json else (lambda line: _err.print(line, style="dim", markup=False))
    outcome = llm(
        request,
        store_path=None if no_store else (store or DEFAULT_STORE_PATH),
        command_line=command_line(),
        events=events,
    )
    print_outcome(outcome, llm_view, as_json)


def _show(run: RunRecord) -> None:
    summaries = run.documents_of(SUMMARY_DOCUMENT)
    if summaries:
        document = LlmRun.from_payload(summaries[-1], f"run {run.id}'s llm document")
        _out.print(llm_view(document, title=f"llm {run.id}"))
        return
    trials = [
        LlmTrial.from_payload(t, f"run {run.id}'s llm-trial document").without_records()
        for t in run.documents_of(TRIAL_DOCUMENT)
    ]
    if trials:  # an interrupted run: its finished trials
        settings = run.settings
        slo = Slo.model_validate(settings["slo"]) if settings.get("slo") else None
        document = LlmRun(
            target=TargetDescription(url=settings.get("url"), model_dir=settings.get("hf_model")),
            model=run.model,
            slo=slo,
            slo_label=slo.label if slo else "none",
            trials=trials,
        )
        _out.print(llm_view(document, title=f"llm {run.id} ({run.status})"))


register_show("llm", _show)
