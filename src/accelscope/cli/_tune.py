"""The ``tune`` command: the LLM server configuration with the most good tokens per second at
an SLO, each configuration a real server process, confirmed and quality-guarded."""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from accelscope.cli import _llm_options as shared
from accelscope.cli._app import _out, app, given, run_and_print
from accelscope.cli._flag_groups import (
    GROUP,
    ConfirmFlags,
    OutputFlags,
    ResumeFlags,
    RunBudgetFlags,
    with_flag_groups,
)
from accelscope.cli._runs import register_show
from accelscope.cli._types import choice, duration_option
from accelscope.cli.config import config_option
from accelscope.errors import BadInputError

if TYPE_CHECKING:
    from accelscope.store.sqlite import RunRecord


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
@with_flag_groups
def tune_command(
    engine: str = typer.Option(..., "--engine", help="vllm, transformers or template."),
    model_dir: Path | None = typer.Option(
        None, "--model-dir", help="The model directory the server loads (template: {model})."
    ),
    old_model: str | None = typer.Option(None, "--model", hidden=True),
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
        None, "--served-name", help="Template: the model name to send (default --model-dir)."
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
    capacity_search: shared.CapacitySearchFlags = GROUP,
    workload: shared.WorkloadFlags = GROUP,
    slo: shared.SloFlags = GROUP,
    search: str | None = typer.Option(
        None,
        "--search",
        parser=choice("--search", "auto", "grid", "screen"),
        help="auto (grid up to --grid-max configurations), grid or screen.",
    ),
    grid_max: int | None = typer.Option(None, "--grid-max", help="Largest full grid (8)."),
    finalists: int | None = typer.Option(None, "--finalists", help="Screening: kept (3)."),
    budget: RunBudgetFlags = GROUP,
    confirm: ConfirmFlags = GROUP,
    quality_threshold: float | None = typer.Option(
        None, "--quality-threshold", help="Lowest agreement with the reference (0.9)."
    ),
    startup_timeout: float | None = duration_option(
        "--startup-timeout", "How long a server may take to start (600s)."
    ),
    timeout: float | None = shared.TimeoutOption,
    instance: str | None = typer.Option(
        None, "--instance", help="Catalog instance: $ per million good tokens."
    ),
    port_range: PortRange | None = typer.Option(
        None, "--port-range", parser=_port_range, help="Ports the servers may use, LOW-HIGH."
    ),
    resume: ResumeFlags = GROUP,
    config: Path | None = config_option("tune"),
    output: OutputFlags = GROUP,
) -> None:
    """Find the LLM server configuration with the most good tokens/s at your SLO."""
    from accelscope.commands.tune.view import tune_view
    from accelscope.commands.tune.workflow import TuneRequest, tune
    from accelscope.llm.documents import Arrivals

    if old_model is not None:  # one meaning per flag: llm's --model is the name a server serves
        raise BadInputError(
            f"--model {old_model}: tune calls the directory its servers load --model-dir "
            "(--model is the served name in llm; --served-name sets it for a template)"
        )
    if model_dir is None:
        raise BadInputError("give --model-dir DIR: the model directory the servers load")
    model = model_dir
    if rate is not None and concurrency is not None:
        raise BadInputError("give --rate or --concurrency (a fixed load), not both")
    fixed = None
    if rate is not None:
        fixed = Arrivals(rate_per_s=rate)
    elif concurrency is not None:
        fixed = Arrivals(concurrency=concurrency)
    if fixed is not None and capacity is not None:
        raise BadInputError("--capacity searches the load: give it or a fixed load, not both")
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
        workload=workload.build(),
        tokenizer=workload.tokenizer,
        fixed=fixed,
        slo=slo.bound,
        resume=resume.resume,
        api_key=os.environ.get(shared.API_KEY_ENV),
        report_path=output.report,
        **given(
            health_path=health_path,
            served_name=served_name,
            kv_cache_gib=kv_cache_gib,
            ignore_eos=workload.ignore_eos,
            capacity=capacity,
            capacity_start=capacity_search.capacity_start,
            capacity_trials=capacity_search.capacity_trials,
            requests=workload.requests_per_trial,
            search=search,
            grid_max=grid_max,
            finalists=finalists,
            budget_s=budget.budget,
            confirm_rounds=confirm.confirm_rounds,
            quality_threshold=quality_threshold,
            startup_timeout_s=startup_timeout,
            timeout_s=timeout,
            instance=instance,
            port_range=(port_range.low, port_range.high) if port_range else None,
        ),
    )
    run_and_print(tune, request, tune_view, output)


def _show(run: RunRecord) -> None:
    from accelscope.commands.tune.view import tune_view
    from accelscope.tune.documents import TuneConfig, TuneRun, TuneSettings

    summaries = run.documents_of(TuneRun.kind)
    if summaries:
        document = TuneRun.from_payload(summaries[-1], f"run {run.id}'s tune document")
        _out.print(tune_view(document, title=f"tune {run.id}"))
        return
    configs = [
        TuneConfig.from_payload(p, f"run {run.id}'s tune-config")
        for p in run.documents_of(TuneConfig.kind)
    ]
    settings = TuneSettings.from_payload(run.settings, f"run {run.id}'s settings")
    slo = settings.slo
    document = TuneRun(
        engine=settings.engine,
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
