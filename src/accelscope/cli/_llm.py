"""The ``llm`` command: token-level benchmark of an LLM server (TTFT, TPOT, ITL, goodput under
an SLO, capacity, decode floor), with single-turn, multi-turn, ShareGPT and trace workloads."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from accelscope.cli import _llm_options as shared
from accelscope.cli._app import _out, app, given, run_and_print
from accelscope.cli._flag_groups import GROUP, DeviceFlags, OutputFlags, with_flag_groups
from accelscope.cli._llm_conformance import CONFORMANCE_EPILOG, LlmCommand
from accelscope.cli._runs import register_show
from accelscope.cli._types import (
    Numbers,
    Sizes,
    choice,
    parse_numbers,
    parse_rate_unit,
    parse_sizes,
)
from accelscope.cli.config import config_option
from accelscope.errors import BadInputError

if TYPE_CHECKING:
    from accelscope.llm.scaleout import Workers
    from accelscope.llm.workload import Lengths
    from accelscope.store.sqlite import RunRecord
else:
    from accelscope.cli._llm_options import Lengths, Workers  # names for typer (see there)

MOONCAKE_BLOCK_TOKENS = 512
"""The tokens per ``hash_ids`` block of a Mooncake trace, as ``--trace-block-tokens`` help
states it (``accelscope.llm.trace.MOONCAKE_BLOCK_TOKENS``; a test holds the two equal)."""


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


@app.command("llm", cls=LlmCommand, epilog=CONFORMANCE_EPILOG)
@with_flag_groups
def llm_command(
    url: str | None = typer.Argument(
        None, help="The server's base URL, e.g. http://localhost:8000 (OpenAI-compatible)."
    ),
    model: str | None = typer.Option(None, "--model", help="Model name the server serves."),
    hf_model: Path | None = typer.Option(
        None,
        "--hf-model",
        help="Serve a local Hugging Face model directory in-process instead (on --device, cpu "
        "by default).",
    ),
    device: DeviceFlags = GROUP,
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
    workload: shared.WorkloadFlags = GROUP,
    prefix_hit_rate: float | None = typer.Option(
        None, "--prefix-hit-rate", help="Share of requests carrying the shared prefix (1)."
    ),
    input_filter: Lengths | None = typer.Option(
        None,
        "--input-filter",
        parser=shared.lengths("--input-filter"),
        help="Keep turns whose prompt is 4:1024 tokens.",
    ),
    output_filter: Lengths | None = typer.Option(
        None,
        "--output-filter",
        parser=shared.lengths("--output-filter"),
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
    slo: shared.SloFlags = GROUP,
    capacity: str | None = typer.Option(
        None,
        "--capacity",
        parser=choice("--capacity", "rate", "concurrency", "speed"),
        help="Search the highest load meeting the SLO: rate, concurrency or speed (trace).",
    ),
    search: shared.CapacitySearchFlags = GROUP,
    timeout: float | None = shared.TimeoutOption,
    batching: str | None = typer.Option(
        None,
        "--batching",
        parser=choice("--batching", "static", "continuous"),
        help="In-process: static or continuous.",
    ),
    max_batch: int | None = typer.Option(
        None, "--max-batch", help="In-process: largest batch (8)."
    ),
    cache: str | None = typer.Option(
        None,
        "--cache",
        parser=choice("--cache", "dynamic", "static"),
        help="In-process static batching: KV cache, dynamic or static (dynamic; static with "
        "--compile).",
    ),
    compile_model: bool = typer.Option(
        False,
        "--compile",
        help="In-process static batching: torch.compile the decoding step (reduce-overhead on "
        "a GPU, default on the CPU); compile time is reported apart, outside every trial.",
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
    workers: Workers | None = shared.WorkersOption,
    no_metrics: bool = typer.Option(False, "--no-server-metrics", help="Do not read /metrics."),
    past_saturation: bool = typer.Option(
        False,
        "--past-saturation",
        help="Measure every --rate/--concurrency step; by default a sweep stops at the first "
        "step that saturates the server and says why.",
    ),
    config: Path | None = config_option("llm"),
    output: OutputFlags = GROUP,
) -> None:
    """Benchmark an LLM server token by token: TTFT, TPOT, ITL, goodput under an SLO."""
    from accelscope.commands.llm.view import llm_view
    from accelscope.commands.llm.workflow import LlmRequestSettings, llm

    source = workload.build(
        prefix_hit_rate=prefix_hit_rate,
        input_filter=input_filter,
        output_filter=output_filter,
        trace=trace,
        trace_block_tokens=trace_block_tokens,
    )
    request = LlmRequestSettings(
        url=url,
        model=model,
        hf_model=hf_model,
        api_key=os.environ.get(shared.API_KEY_ENV),
        workload=source,
        slo=slo.bound,
        scrape_metrics=not no_metrics,
        stop_at_saturation=not past_saturation,
        report_path=output.report,
        **given(
            device=str(device.device) if device.device else None,
            dtype=dtype,
            api=api,
            batching=batching,
            max_batch=max_batch,
            cache=cache,
            compile=compile_model or None,
            rates=rate.values if rate else None,
            concurrencies=concurrency.values if concurrency else None,
            speeds=trace_speed.values if trace_speed else None,
            burstiness=burstiness,
            requests=workload.requests_per_trial,
            capacity=capacity,
            capacity_start=search.capacity_start,
            capacity_trials=search.capacity_trials,
            timeout_s=timeout,
            tokenizer=workload.tokenizer,
            ignore_eos=workload.ignore_eos,
            model_config=model_config,
            weights_dtype=weights_dtype,
            kv_dtype=kv_dtype,
            bandwidth_bytes_per_s=bandwidth,
            peak_flops_per_s=peak_flops,
            instance=instance,
            max_in_flight=max_in_flight,
            workers=workers,
        ),
    )
    run_and_print(llm, request, llm_view, output)


def _show(run: RunRecord) -> None:
    from accelscope.commands.llm.view import llm_view
    from accelscope.commands.llm.workflow import SUMMARY_DOCUMENT, TRIAL_DOCUMENT
    from accelscope.llm.documents import LlmRun, LlmTrial, Slo, TargetDescription

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
