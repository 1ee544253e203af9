"""The ``tune`` command: the LLM server configuration with the most good tokens per second at
an SLO, each configuration a real server process, confirmed and quality-guarded."""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass
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
from accelscope.cli._llm import (
    API_KEY_ENV,
    _lengths,
    _prefix,
    _seed,
    _slo,
    _think,
    build_workload,
)
from accelscope.cli._runs import register_show
from accelscope.cli._types import choice, duration_option
from accelscope.cli.config import config_option
from accelscope.commands.tune.view import tune_view
from accelscope.commands.tune.workflow import TuneRequest, tune
from accelscope.errors import BadInputError
from accelscope.llm.documents import Arrivals, Slo
from accelscope.llm.workload import Lengths, PrefixScenario, ThinkTime
from accelscope.store.sqlite import DEFAULT_STORE_PATH, RunRecord
from accelscope.tune.documents import TuneConfig, TuneRun


@dataclass(frozen=True)
class PortRange:
    """``LOW-HIGH``: the ports the servers may use."""

    low: int
    high: int


def _port_range(value: Any) -> PortRange:
    if isinstance(value, PortRange):
        return value
    match = re.fullmatch(r"\s*(\d+)\s*-\s*(\d+)\s*", str(value))
    if not match:
        raise BadInputError(f"--port-range {value!r}: give LOW-HIGH, e.g. 8100-8199")
    low, high = int(match.group(1)), int(match.group(2))
    if not 0 < low <= high < 65536:
        raise BadInputError(f"--port-range {value!r}: give LOW-HIGH within 1-65535")
    return PortRange(low, high)


@app.command("tune")
def tune_command(
    engine: str = typer.Option(..., "--engine", help="vllm, transformers or template."),
    model: Path = typer.Option(..., "--model", help="The model directory the server loads."),
    space: list[str] | None = typer.Option(
        None, "--space", help="FLAG=V1,V2,... (repeat: the grid of all of them)."
    ),
    candidate: list[str] | None = typer.Option(
        None, "--candidate", help="One more configuration, FLAG=V,FLAG=V (repeatable)."
    ),
    reference: str | None = typer.Option(
        None, "--reference", help="FLAG=V,... to compare with (default: the engine's defaults)."
    ),
    server_command: str | None = typer.Option(
        None, "--server-command", help="Template engine: a command with {port}, {model}, {flag}."
    ),
    health_path: str | None = typer.Option(None, "--health-path", help="Template: /health."),
    served_name: str | None = typer.Option(
        None, "--served-name", help="Template: the model name to send (default --model)."
    ),
    quality_flag: list[str] | None = typer.Option(
        None, "--quality-flag", help="Template: a flag that can change the answers (repeatable)."
    ),
    vllm_python: Path | None = typer.Option(
        None, "--vllm-python", help="The Python of an environment with vLLM."
    ),
    engine_args: str | None = typer.Option(
        None, "--engine-args", help="Flags every configuration gets, e.g. '--max-model-len 4096'."
    ),
    kv_cache_gib: float | None = typer.Option(
        None,
        "--kv-cache-gib",
        help="vLLM CPU build: KV-cache space, whole GiB (default: sized from the memory free).",
    ),
    rate: float | None = typer.Option(None, "--rate", help="Measure each at this rate (req/s)."),
    concurrency: int | None = typer.Option(
        None, "--concurrency", help="Measure each at this concurrency (clients)."
    ),
    capacity: str | None = typer.Option(
        None,
        "--capacity",
        parser=choice("--capacity", "rate", "concurrency"),
        help="Otherwise: search each one's capacity by rate or concurrency (concurrency).",
    ),
    capacity_start: float | None = typer.Option(None, "--capacity-start", help="First load."),
    capacity_trials: int | None = typer.Option(
        None, "--capacity-trials", help="Trials per capacity search (6)."
    ),
    requests: int | None = typer.Option(None, "--requests", help="Requests per trial."),
    input_tokens: Lengths | None = typer.Option(
        None, "--input-tokens", parser=_lengths("--input-tokens"), help="128 or 64:256."
    ),
    output_tokens: Lengths | None = typer.Option(
        None, "--output-tokens", parser=_lengths("--output-tokens"), help="64 or 16:256."
    ),
    prompts: Path | None = typer.Option(None, "--prompts", help="JSONL prompts."),
    prefix: PrefixScenario | None = typer.Option(
        None, "--prefix", parser=_prefix, help="cold, or shared=TOKENS."
    ),
    sessions: int | None = typer.Option(None, "--sessions", help="Multi-turn: conversations."),
    turns: Lengths | None = typer.Option(
        None, "--turns", parser=_lengths("--turns"), help="Turns per conversation."
    ),
    think_time: ThinkTime | None = typer.Option(
        None, "--think-time", parser=_think, help="2s or exp:2s."
    ),
    conversations: Path | None = typer.Option(
        None, "--conversations", help="ShareGPT conversations file."
    ),
    seed: int | None = typer.Option(None, "--seed", help="Prompt seed (default: random)."),
    tokenizer: Path | None = typer.Option(None, "--tokenizer", help="Local tokenizer dir."),
    slo: Slo | None = typer.Option(None, "--slo", parser=_slo, help="e.g. ttft=1s,tpot=100ms."),
    slo_percentile: float | None = typer.Option(
        None, "--slo-percentile", help="Percentile the SLO bounds (99)."
    ),
    search: str | None = typer.Option(
        None,
        "--search",
        parser=choice("--search", "auto", "grid", "screen"),
        help="auto (grid up to --grid-max configurations), grid or screen.",
    ),
    grid_max: int | None = typer.Option(None, "--grid-max", help="Largest full grid (8)."),
    finalists: int | None = typer.Option(None, "--finalists", help="Screening: kept (3)."),
    budget: float | None = duration_option("--budget", "Stop starting configurations after."),
    confirm_rounds: int | None = typer.Option(
        None, "--confirm-rounds", help="Alternated re-measures of the best two (2; 0: none)."
    ),
    quality_threshold: float | None = typer.Option(
        None, "--quality-threshold", help="Lowest agreement with the reference (0.9)."
    ),
    startup_timeout: float | None = duration_option(
        "--startup-timeout", "How long a server may take to start (600s)."
    ),
    timeout: float | None = duration_option("--timeout", "Per-request timeout (300s)."),
    instance: str | None = typer.Option(
        None, "--instance", help="Catalog instance: $ per million good tokens."
    ),
    port_range: PortRange | None = typer.Option(
        None, "--port-range", parser=_port_range, help="Ports the servers may use, LOW-HIGH."
    ),
    ignore_eos: bool | None = typer.Option(
        None, "--ignore-eos/--no-ignore-eos", help="Ask for exact output lengths (vllm: on)."
    ),
    resume: bool = typer.Option(False, "--resume", help="Continue the last unfinished tune."),
    config: Path | None = config_option("tune"),
    report: Path | None = typer.Option(None, "--report", help="HTML report path."),
    store: Path | None = StoreOption,
    no_store: bool = typer.Option(False, "--no-store", help="Do not store the run."),
    as_json: bool = JsonOption,
) -> None:
    """Find the LLM server configuration with the most good tokens/s at your SLO."""
    if rate is not None and concurrency is not None:
        raise BadInputError("give --rate or --concurrency (a fixed load), not both")
    fixed = None
    if rate is not None:
        fixed = Arrivals(rate_per_s=rate)
    elif concurrency is not None:
        fixed = Arrivals(concurrency=concurrency)
    if fixed is not None and capacity is not None:
        raise BadInputError("--capacity searches the load: give it or a fixed load, not both")
    scenario = prefix or PrefixScenario()
    workload = build_workload(
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        prompts=prompts,
        prefix=scenario if scenario.cold else PrefixScenario(scenario.shared_tokens, 1.0),
        sessions=sessions,
        turns=turns,
        think_time=think_time,
        conversations=conversations,
        input_filter=None,
        output_filter=None,
        trace=None,
        trace_block_tokens=None,
        seed=seed if seed is not None else _seed(),
    )
    if slo is not None and slo_percentile is not None:
        if not 0.0 < slo_percentile < 100.0:
            raise BadInputError(f"--slo-percentile {slo_percentile:g}: give a value in (0, 100)")
        slo = slo.model_copy(update={"percentile": slo_percentile})
    try:
        extra = tuple(shlex.split(engine_args)) if engine_args else ()
    except ValueError as exc:
        raise BadInputError(f"--engine-args: cannot split it ({exc})") from None
    request = TuneRequest(
        engine=engine,
        model=model,
        spaces=tuple(space or ()),
        configs=tuple(candidate or ()),
        reference=reference,
        server_command=server_command,
        quality_flags=tuple(quality_flag or ()),
        vllm_python=vllm_python,
        engine_args=extra,
        workload=workload,
        tokenizer=tokenizer,
        fixed=fixed,
        slo=slo,
        resume=resume,
        api_key=os.environ.get(API_KEY_ENV),
        report_path=report,
        **given(
            health_path=health_path,
            served_name=served_name,
            kv_cache_gib=kv_cache_gib,
            ignore_eos=ignore_eos,
            capacity=capacity,
            capacity_start=capacity_start,
            capacity_trials=capacity_trials,
            requests=sessions if sessions is not None else requests,
            search=search,
            grid_max=grid_max,
            finalists=finalists,
            budget_s=budget,
            confirm_rounds=confirm_rounds,
            quality_threshold=quality_threshold,
            startup_timeout_s=startup_timeout,
            timeout_s=timeout,
            instance=instance,
            port_range=(port_range.low, port_range.high) if port_range else None,
        ),
    )
    events = None if as_json else (lambda line: _err.print(line, style="dim", markup=False))
    outcome = tune(
        request,
        store_path=None if no_store else (store or DEFAULT_STORE_PATH),
        command_line=command_line(),
        events=events,
    )
    print_outcome(outcome, tune_view, as_json)


def _show(run: RunRecord) -> None:
    summaries = run.documents_of(TuneRun.kind)
    if summaries:
        document = TuneRun.from_payload(summaries[-1], f"run {run.id}'s tune document")
        _out.print(tune_view(document, title=f"tune {run.id}"))
        return
    configs = [
        TuneConfig.from_payload(p, f"run {run.id}'s tune-config")
        for p in run.documents_of(TuneConfig.kind)
    ]
    settings = run.settings
    slo = Slo.model_validate(settings["slo"]) if settings.get("slo") else None
    document = TuneRun(
        engine=str(settings.get("engine", "?")),
        model=run.model,
        slo=slo,
        slo_label=slo.label if slo else "none",
        configs=configs,
        notes=[
            f"the tune was not finished ({run.status}): `accelscope tune ... --resume` continues it"
        ],
    )
    _out.print(tune_view(document, title=f"tune {run.id} ({run.status})"))


register_show("tune", _show)
