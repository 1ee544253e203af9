"""The ``bench`` command: the accuracy-guarded acceleration sweep.

The command parses its flags into a :class:`BenchRequest` (:func:`_request`), then either
prints the sweep it would run (``--dry-run``: :func:`_print_preview`) or runs it and prints the
outcome (:func:`_print_json`, :func:`_print_table`). The workflow and its views are imported when
the command runs: they load the model machinery (torch), which ``accelscope --help`` must not.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from accelscope.cli._app import _err, _out, app, command_line, given
from accelscope.cli._device import TF32_HELP, Tf32, parse_tf32_list
from accelscope.cli._flag_groups import (
    GROUP,
    MODEL_HELP,
    AccuracyFlags,
    BatchSizesFlags,
    ConfirmFlags,
    DeviceFlags,
    FlagGroup,
    MeasureBudgetFlags,
    ModelFlags,
    OptionFlags,
    OutputFlags,
    QuietFlags,
    RefreshProbesFlags,
    ResumeFlags,
    RunBudgetFlags,
    RunTimeoutFlags,
    SeedFlags,
    SlaFlags,
    flag,
    with_flag_groups,
)
from accelscope.cli._types import (
    Names,
    Precisions,
    Sizes,
    parse_names,
    parse_precisions,
    parse_sizes,
)
from accelscope.cli.config import config_option

if TYPE_CHECKING:
    from accelscope.commands.bench.workflow import BenchOutcome, BenchPreview, BenchRequest
    from accelscope.result import Result
    from accelscope.spec import RunSpec


class _Events:
    """Prints one line per finished configuration (stderr), unless quiet."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet

    def started(self, spec: RunSpec, stage: str) -> None:
        if not self.quiet:
            _err.print(f"[dim]{stage} {spec.label()} ...[/]")

    def progress(self, phase: str, count: int, elapsed_s: float, budget_s: float) -> None:
        return None

    def note(self, text: str) -> None:
        if not self.quiet:
            _err.print(f"[dim]{text}[/]", markup=True, highlight=False)

    def finished(self, result: Result) -> None:
        from accelscope.result import Status

        if self.quiet or result.status is Status.SKIPPED:  # the table lists skips, grouped
            return
        m = result.measurement
        rate = f"{m.throughput_items_per_s:,.1f} items/s" if m is not None else ""
        reason = f": {result.status_reason}" if result.status_reason else ""
        _err.print(f"  {result.spec.label()} {result.status.value}{reason} {rate}", markup=False)


@dataclass(frozen=True)
class _ListAxes(FlagGroup):
    """The axes only bench takes as comma-separated lists (the commands that measure one
    configuration take one value of each)."""

    backends: Names | None = flag(
        typer.Option(
            None,
            "--backend",
            parser=parse_names,
            metavar="LIST",
            help="Runtimes, e.g. eager,compile.",
        )
    )
    precisions: Precisions | None = flag(
        typer.Option(
            None,
            "--precision",
            parser=parse_precisions,
            metavar="LIST",
            help="Precisions, e.g. fp32,bf16,int8.",
        )
    )
    threads: Sizes | None = flag(
        typer.Option(
            None, "--threads", parser=parse_sizes, metavar="LIST", help="Thread counts, e.g. 1,2."
        )
    )
    tf32: Tf32 | None = flag(
        typer.Option(
            None,
            "--tf32",
            parser=parse_tf32_list,
            metavar="on|off|off,on",
            help=TF32_HELP + " off,on measures both as rows.",
        )
    )


@dataclass(frozen=True)
class SweepAxes(OptionFlags, DeviceFlags, BatchSizesFlags, _ListAxes):
    """The configurations bench sweeps: runtimes, precisions, threads, TF32 and batch sizes,
    on one device, with the backend options."""


@dataclass(frozen=True)
class SweepFlags(
    RunTimeoutFlags,
    RefreshProbesFlags,
    ResumeFlags,
    ConfirmFlags,
    MeasureBudgetFlags,
    RunBudgetFlags,
    AccuracyFlags,
    SlaFlags,
):
    """How bench searches, what bounds it and where its configurations run."""

    force_precision: bool | None = flag(
        typer.Option(None, "--force-precision", help="Measure precisions without a fast path.")
    )
    strategy: str | None = flag(typer.Option(None, "--strategy", help="grid or fast."))
    accuracy_samples: int | None = flag(
        typer.Option(
            None, "--accuracy-samples", help="Synthetic inputs for the fidelity check (256)."
        )
    )
    metric: str | None = flag(typer.Option(None, "--metric", help="Task metric (top1_accuracy)."))
    plugins: list[str] | None = flag(
        typer.Option(None, "--plugin", help="Module registering backends.")
    )
    executor: str | None = flag(
        typer.Option(
            None, "--executor", help="local (this machine) or ray (a Ray cluster's nodes)."
        )
    )
    ray_address: str | None = flag(
        typer.Option(None, "--ray-address", help="Ray cluster: auto (default) or ray://HOST:PORT.")
    )
    node_types: Names | None = flag(
        typer.Option(
            None,
            "--node-type",
            parser=parse_names,
            metavar="LIST",
            help="Ray node types (custom resources) to measure on, e.g. cpu-pool,l4-pool.",
        )
    )


@app.command("bench")
@with_flag_groups
def bench_command(
    model: str | None = typer.Argument(None, help=MODEL_HELP),
    axes: SweepAxes = GROUP,
    sweep: SweepFlags = GROUP,
    source: ModelFlags = GROUP,
    seed: SeedFlags = GROUP,
    config: Path | None = config_option("bench"),
    output: OutputFlags = GROUP,
    quiet: QuietFlags = GROUP,
    dry_run: bool = typer.Option(
        False,
        "--dry-run",
        help="List the configurations the sweep would run or skip; measure none.",
    ),
) -> None:
    """Sweep runtime x precision x batch x threads; pick the fastest accurate config in SLA."""
    from accelscope.commands.bench.workflow import bench, preview

    request = _request(model, axes, sweep, source, seed.seed, output.report)
    if dry_run:
        _print_preview(preview(request), output.as_json)
        return
    outcome = bench(
        request,
        store_path=output.target,
        events=_Events(quiet.quiet or output.as_json),
        command_line=command_line(),
    )
    if output.as_json:
        _print_json(outcome)
    else:
        _print_table(outcome, quiet=quiet.quiet)


def _request(
    model: str | None,
    axes: SweepAxes,
    sweep: SweepFlags,
    source: ModelFlags,
    seed: int | None,
    report: Path | None,
) -> BenchRequest:
    """The sweep the flags describe; a flag not given leaves the request's default."""
    from accelscope.commands.bench.workflow import BenchRequest
    from accelscope.models.zoo import DEFAULT_MODEL

    return BenchRequest(
        model=model or DEFAULT_MODEL,
        options=axes.option_pairs or (),
        resume=sweep.resume,
        refresh_probes=sweep.refresh_probes,
        **axes.device_fields(),
        **given(
            backends=axes.backends.values if axes.backends else None,
            precisions=axes.precisions.values if axes.precisions else None,
            batch_sizes=axes.batch_sizes,
            threads=axes.threads.values if axes.threads else None,
            tf32=axes.tf32.values if axes.tf32 else None,
            force_precisions=sweep.force_precision,
            sla_p99_s=sweep.sla_p99,
            max_accuracy_drop=sweep.max_accuracy_drop,
            strategy=sweep.strategy,
            budget_s=sweep.budget,
            measure_budget_s=sweep.measure_budget,
            timeout_s=sweep.timeout,
            accuracy_samples=sweep.accuracy_samples,
            inputs=source.input_specs,
            weights=source.weights,
            trust_model_code=source.trust_model_code,
            plugins=tuple(sweep.plugins) if sweep.plugins else None,
            seed=seed,
            report_path=report,
            eval_data=sweep.eval_data,
            metric=sweep.metric,
            confirm_rounds=sweep.confirm_rounds,
            executor=sweep.executor,
            ray_address=sweep.ray_address,
            node_types=sweep.node_types.values if sweep.node_types else None,
        ),
    )


def _print_preview(plan: BenchPreview, as_json: bool) -> None:
    """``--dry-run``: the configurations the sweep would run or skip (and why)."""
    if not as_json:
        from accelscope.commands.bench.view import preview_view

        _out.print(preview_view(plan))
        return
    memory = plan.memory
    rows = [
        {
            "label": c.spec.label(),
            "key": c.spec.key,
            "runs": c.runnable,
            "skip_reason": c.skip_reason,
            "needed_bytes": memory.estimate.needed_bytes(c.spec)
            if memory is not None and c.spec.device.value == "cuda"
            else None,
        }
        for c in plan.candidates
    ]
    planned = {
        "model": plan.model.ref,
        "device_free_bytes": memory.device.free_bytes if memory is not None else None,
        "configurations": rows,
        "notes": list(plan.notes),
    }
    _out.print_json(json.dumps(planned))


def _print_json(outcome: BenchOutcome) -> None:
    """The sweep's verdict, picks and every result as one JSON document."""
    from accelscope.serialise import dump

    selection = outcome.selection
    document: dict[str, Any] = {
        "run_id": outcome.run_id,
        "store": str(outcome.store_path or ""),
        "report": str(outcome.report_path or ""),
        "verdict": selection.verdict,
        "node_types": {
            node_type: {"verdict": chosen.verdict, "best": chosen.best_key}
            for node_type, chosen in outcome.selections.items()
            if node_type
        },
        "best": selection.best_key,
        "lowest_latency": selection.lowest_latency_key,
        "baseline": selection.baseline_key,
        "confirmation": dump(selection.confirmation) if selection.confirmation else None,
        "probes": dump(outcome.probes) if outcome.probes else None,
        "measurement_time_s": outcome.measurement_time_s,
        "wall_time_s": outcome.wall_time_s,
        "standing": outcome.standing.summary() if outcome.standing else None,
        "results": [dump(r) for r in outcome.results],
    }
    _out.print_json(json.dumps(document))


def _print_table(outcome: BenchOutcome, *, quiet: bool) -> None:
    """The sweep's table and verdict; then (unless quiet) the time spent, the report and the
    stored run."""
    from accelscope.commands.bench.view import bench_view

    _out.print(
        bench_view(
            outcome.results,
            outcome.selections or {"": outcome.selection},
            title=f"bench: {outcome.model.ref}",
            rule=outcome.rule.describe(),
            standing=outcome.standing,
        )
    )
    if quiet:
        return
    _out.print(
        f"[dim]measured {outcome.measurement_time_s:.0f} s of {outcome.wall_time_s:.0f} s "
        f"wall; report: {outcome.report_path}[/]"
    )
    if outcome.run_id:
        _out.print(f"stored run [bold]{outcome.run_id}[/] in {outcome.store_path}")
