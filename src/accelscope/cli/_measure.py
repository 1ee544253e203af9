"""The ``measure`` command: one configuration, measured in this process."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import typer

from accelscope.cli._app import _err, _out, _progress, app, command_line, given
from accelscope.cli._flag_groups import (
    GROUP,
    MODEL_HELP,
    BatchSizesFlags,
    DeviceFlags,
    JsonFlags,
    ModelFlags,
    OptionFlags,
    QuietFlags,
    RuntimeFlags,
    SamplingBudgetFlags,
    SeedFlags,
    StoringFlags,
    Tf32Flags,
    flag,
    with_flag_groups,
)
from accelscope.cli._types import fraction_option
from accelscope.cli.config import config_option


@dataclass(frozen=True)
class ConfigurationFlags(OptionFlags, Tf32Flags, DeviceFlags, BatchSizesFlags, RuntimeFlags):
    """The configuration measured: runtime, precision, batch sizes, threads, device, TF32 and
    backend options."""


@dataclass(frozen=True)
class TimerFlags(SamplingBudgetFlags):
    """When sampling stops: the budget, or the confidence interval reached."""

    target_ci: float | None = flag(fraction_option("--target-ci", "Stop at median CI ± this (2%)."))


@app.command("measure")
@with_flag_groups
def measure_command(
    model: str | None = typer.Argument(None, help=MODEL_HELP),
    configuration: ConfigurationFlags = GROUP,
    source: ModelFlags = GROUP,
    timer: TimerFlags = GROUP,
    seed: SeedFlags = GROUP,
    config: Path | None = config_option("run"),
    store: StoringFlags = GROUP,
    output: JsonFlags = GROUP,
    quiet: QuietFlags = GROUP,
) -> None:
    """Measure a model's latency, throughput and peak memory (adaptive, noise-aware)."""
    from accelscope.commands.measure.workflow import MeasureRequest, measure
    from accelscope.measurement.timer import TimerConfig
    from accelscope.models.zoo import DEFAULT_MODEL

    request = MeasureRequest(
        model=model or DEFAULT_MODEL,
        options=configuration.option_pairs or (),
        timer=TimerConfig(**given(budget_s=timer.budget, target_rel_ci=timer.target_ci)),
        **configuration.device_fields(),
        **given(
            backend=configuration.backend,
            precision=configuration.precision,
            batch_sizes=configuration.batch_sizes,
            threads=configuration.threads,
            tf32=configuration.tf32_value,
            inputs=source.input_specs,
            weights=source.weights,
            trust_model_code=source.trust_model_code,
            seed=seed.seed,
        ),
    )
    show_progress = not (quiet.quiet or output.as_json) and _err.is_terminal
    with _progress(show_progress) as (on_config, on_progress):
        outcome = measure(
            request,
            store_path=store.target,
            on_config=on_config,
            on_progress=on_progress,
            command_line=command_line(),
        )
    if output.as_json:
        from accelscope.serialise import dump

        document = {
            "run_id": outcome.run_id,
            "store": str(outcome.store_path or ""),
            "results": [dump(r) for r in outcome.results],
        }
        _out.print_json(json.dumps(document))
        return
    from accelscope.report.tables import results_view

    title = f"{outcome.model.ref} — {outcome.model.description}"
    _out.print(results_view(outcome.results, title=title))
    if outcome.run_id and not quiet.quiet:
        _out.print(
            f"stored run [bold]{outcome.run_id}[/] in {outcome.store_path} "
            f"(accelscope runs show {outcome.run_id})"
        )
