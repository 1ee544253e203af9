"""The ``llm`` command: token-level benchmark of an LLM server (TTFT, TPOT, ITL, goodput under
an SLO, capacity, decode floor)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import typer

from accelscope.cli._app import JsonOption, StoreOption, _err, _out, app, command_line
from accelscope.cli._runs import register_show
from accelscope.cli._types import duration_option
from accelscope.commands.llm.view import llm_view
from accelscope.commands.llm.workflow import LlmRequestSettings, llm
from accelscope.errors import BadInputError
from accelscope.llm.summary import Slo
from accelscope.llm.workload import Lengths, PrefixScenario, Workload, read_prompts
from accelscope.store.sqlite import DEFAULT_STORE_PATH, RunRecord

API_KEY_ENV = "OPENAI_API_KEY"


def _numbers(text: str | None, flag: str, integer: bool = False) -> tuple[Any, ...]:
    if not text:
        return ()
    values: list[Any] = []
    for part in text.split(","):
        try:
            value = int(part) if integer else float(part)
        except ValueError:
            kind = "integers" if integer else "numbers"
            raise BadInputError(f"{flag} {text!r}: give comma-separated {kind}") from None
        values.append(value)
    return tuple(values)


def _rate(text: str) -> float:
    """``2e9``, ``800GB/s``, ``3.35TB/s`` -> bytes/s; ``150TFLOPS`` -> FLOP/s."""
    scales = {"k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12, "p": 1e15}
    cleaned = text.strip().lower().removesuffix("/s").removesuffix("flops").removesuffix("b")
    try:
        if cleaned and cleaned[-1] in scales:
            return float(cleaned[:-1]) * scales[cleaned[-1]]
        return float(cleaned)
    except ValueError:
        raise BadInputError(
            f"{text!r}: give a number with a unit, e.g. 800GB/s or 150TFLOPS"
        ) from None


@app.command("llm")
def llm_command(
    url: str | None = typer.Argument(
        None, help="The server's base URL, e.g. http://localhost:8000 (OpenAI-compatible)."
    ),
    model: str | None = typer.Option(None, "--model", help="Model name the server serves."),
    hf_model: Path | None = typer.Option(
        None, "--hf-model", help="Serve a local Hugging Face model directory in-process instead."
    ),
    api: str = typer.Option("completions", "--api", help="completions or chat."),
    rate: str | None = typer.Option(None, "--rate", help="Offered rates (req/s), e.g. 1,2,4."),
    concurrency: str | None = typer.Option(
        None, "--concurrency", help="Fixed concurrencies (closed loop), e.g. 1,4,16."
    ),
    burstiness: float = typer.Option(
        1.0, "--burstiness", help="Gamma CV of the arrival gaps (1 = Poisson)."
    ),
    requests: int = typer.Option(100, "--requests", help="Requests per trial."),
    input_tokens: str = typer.Option("128", "--input-tokens", help="128 or a range 64:256."),
    output_tokens: str = typer.Option("64", "--output-tokens", help="128 or a range 16:256."),
    prompts: Path | None = typer.Option(
        None, "--prompts", help='JSONL prompts: {"prompt": ..., "max_tokens": ...} per line.'
    ),
    prefix: str = typer.Option("cold", "--prefix", help="cold, or shared=TOKENS."),
    prefix_hit_rate: float = typer.Option(
        1.0, "--prefix-hit-rate", help="Share of requests carrying the shared prefix."
    ),
    seed: int | None = typer.Option(None, "--seed", help="Prompt seed (default: random, stored)."),
    slo: str | None = typer.Option(
        None, "--slo", help="e.g. ttft=500ms,tpot=50ms,e2e=10s (any subset)."
    ),
    slo_percentile: float = typer.Option(
        99.0, "--slo-percentile", help="Percentile the SLO bounds (LoadGen tail claims)."
    ),
    capacity: str | None = typer.Option(
        None, "--capacity", help="Search the highest load meeting the SLO: rate or concurrency."
    ),
    capacity_start: float | None = typer.Option(
        None, "--capacity-start", help="First load of the search."
    ),
    capacity_trials: int = typer.Option(8, "--capacity-trials", help="Trial budget."),
    timeout: float = duration_option("--timeout", "Per-request timeout.", "300s"),
    tokenizer: Path | None = typer.Option(
        None, "--tokenizer", help="Local tokenizer dir: exact prompt lengths, fallback counts."
    ),
    ignore_eos: bool = typer.Option(
        False, "--ignore-eos", help="Ask the server to ignore EOS (vLLM, SGLang)."
    ),
    batching: str = typer.Option("static", "--batching", help="In-process: static/continuous."),
    max_batch: int = typer.Option(8, "--max-batch", help="In-process: largest batch."),
    model_config: Path | None = typer.Option(
        None, "--model-config", help="The model's config.json (for the decode floor)."
    ),
    weights_dtype: str | None = typer.Option(None, "--weights-dtype", help="e.g. bf16, int8."),
    kv_dtype: str | None = typer.Option(None, "--kv-dtype", help="KV-cache dtype, e.g. fp8."),
    bandwidth: str | None = typer.Option(
        None, "--bandwidth", help="Memory bandwidth for the floor, e.g. 3.35TB/s."
    ),
    peak_flops: str | None = typer.Option(None, "--peak-flops", help="e.g. 989TFLOPS."),
    instance: str | None = typer.Option(
        None, "--instance", help="Catalog instance the server runs on (datasheet floor)."
    ),
    max_in_flight: int = typer.Option(256, "--max-in-flight", help="Client threads."),
    no_metrics: bool = typer.Option(False, "--no-server-metrics", help="Do not read /metrics."),
    report: Path | None = typer.Option(None, "--report", help="HTML report path."),
    store: Path | None = StoreOption,
    no_store: bool = typer.Option(False, "--no-store", help="Do not store the run."),
    as_json: bool = JsonOption,
) -> None:
    """Benchmark an LLM server token by token: TTFT, TPOT, ITL, goodput under an SLO."""
    if api not in ("completions", "chat"):
        raise BadInputError(f"--api {api!r}: give completions or chat")
    if batching not in ("static", "continuous"):
        raise BadInputError(f"--batching {batching!r}: give static or continuous")
    if capacity not in (None, "rate", "concurrency"):
        raise BadInputError(f"--capacity {capacity!r}: give rate or concurrency")
    workload = Workload(
        input_tokens=Lengths.parse(input_tokens, "--input-tokens"),
        output_tokens=Lengths.parse(output_tokens, "--output-tokens"),
        prompts=read_prompts(prompts) if prompts else (),
        prompts_source=str(prompts) if prompts else "",
        prefix=PrefixScenario.parse(prefix, prefix_hit_rate),
        seed=seed if seed is not None else int.from_bytes(os.urandom(4), "little"),
    )
    request = LlmRequestSettings(
        url=url,
        model=model,
        hf_model=hf_model,
        api=api,  # type: ignore[arg-type]
        api_key=os.environ.get(API_KEY_ENV),
        batching=batching,  # type: ignore[arg-type]
        max_batch=max_batch,
        rates=_numbers(rate, "--rate"),
        concurrencies=_numbers(concurrency, "--concurrency", integer=True),
        burstiness=burstiness,
        requests=requests,
        workload=workload,
        slo=Slo.parse(slo, slo_percentile) if slo else None,
        capacity=capacity,  # type: ignore[arg-type]
        capacity_start=capacity_start,
        capacity_trials=capacity_trials,
        timeout_s=timeout,
        tokenizer=tokenizer,
        ignore_eos=ignore_eos,
        model_config=model_config,
        weights_dtype=weights_dtype,
        kv_dtype=kv_dtype,
        bandwidth_bytes_per_s=_rate(bandwidth) if bandwidth else None,
        peak_flops_per_s=_rate(peak_flops) if peak_flops else None,
        instance=instance,
        max_in_flight=max_in_flight,
        scrape_metrics=not no_metrics,
        report_path=report,
    )
    events = None if as_json else (lambda line: _err.print(f"[dim]{line}[/]"))
    outcome = llm(
        request,
        store_path=None if no_store else (store or DEFAULT_STORE_PATH),
        command_line=command_line(),
        events=events,
    )
    if as_json:
        head = {"run_id": outcome.run_id, "report": str(outcome.report_path or "")}
        sys.stdout.write(json.dumps({**head, **outcome.document}) + "\n")
        return
    _out.print(llm_view(outcome.document))
    if outcome.report_path:
        _out.print(f"[dim]report: {outcome.report_path}[/]")
    if outcome.run_id:
        _out.print(f"stored run [bold]{outcome.run_id}[/] in {outcome.store_path}")


def _show(run: RunRecord) -> None:
    summaries = run.documents_of("llm")
    if summaries:
        _out.print(llm_view(summaries[-1], title=f"llm {run.id}"))
        return
    trials = [{k: v for k, v in t.items() if k != "records"} for t in run.documents_of("llm-trial")]
    if trials:  # an interrupted run: its finished trials
        slo = run.settings.get("slo") or {}
        label = Slo(
            ttft_s=slo.get("ttft_s"),
            tpot_s=slo.get("tpot_s"),
            e2e_s=slo.get("e2e_s"),
            percentile=slo.get("percentile", 99.0),
        ).label
        target = {"url": run.settings.get("url") or run.settings.get("hf_model") or ""}
        document = {"target": target, "model": run.model, "slo_label": label, "trials": trials}
        _out.print(llm_view(document, title=f"llm {run.id} ({run.status})"))


register_show("llm", _show)
