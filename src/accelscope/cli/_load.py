"""The ``load`` command: MLPerf-style scenarios and the highest load that meets a p99 SLA."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import typer

from accelscope.cli._app import _err, _out, app, command_line, given
from accelscope.cli._flag_groups import (
    GROUP,
    MODEL_HELP,
    DeviceFlags,
    FlagGroup,
    ModelFlags,
    OptionFlags,
    OutputFlags,
    QuietFlags,
    RuntimeFlags,
    SeedFlags,
    SlaFlags,
    Tf32Flags,
    flag,
    stand_in,
    with_flag_groups,
)
from accelscope.cli._runs import register_show
from accelscope.cli._types import duration_option, seconds_or_zero
from accelscope.cli.config import config_option
from accelscope.errors import BadInputError

if TYPE_CHECKING:
    from accelscope.commands.load.workflow import LoadEvents, LoadOutcome, LoadRequest
    from accelscope.load.capacity_search import PolicyCapacity
    from accelscope.load.floor import HarnessFloor
    from accelscope.load.summary import Scenario, TrialSummary
    from accelscope.spec import RunSpec
    from accelscope.store.sqlite import RunRecord
else:  # the load package costs the CLI's start numpy: see stand_in
    Scenario = stand_in("Scenario")


def _scenario(text: Any) -> Scenario:
    from accelscope.load.summary import Scenario

    try:
        return Scenario(str(text).strip().lower())
    except ValueError:
        choices = ", ".join(s.value for s in Scenario)
        raise BadInputError(f"unknown scenario {text!r}; choose one of: {choices}") from None


class _Events:
    """The load workflow's progress lines (its ``LoadEvents``, each method), on stderr."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet

    def preparing(self, spec: RunSpec, buckets: tuple[int, ...]) -> None:
        if not self.quiet:
            sizes = ", ".join(str(b) for b in buckets)
            _err.print(f"[dim]preparing {spec.label()} (batch sizes {sizes}) ...[/]")

    def floor(self, floor: HarnessFloor) -> None:
        from accelscope.commands.load.verdict import harness_floor_text
        from accelscope.serialise import dump

        text = harness_floor_text(dump(floor))
        if not self.quiet and text is not None:
            _err.print(f"  {text}", style="dim", markup=False)

    def trial(self, summary: TrialSummary) -> None:
        if self.quiet:
            return
        rate = summary.offered_rate_per_s
        where = f"{rate:,.1f} q/s" if rate is not None else summary.scenario.value
        if summary.sla_p99_s is not None:
            verdict = (
                "meets SLA" if summary.meets_sla else "misses: " + "; ".join(summary.sla_failures)
            )
        else:
            verdict = "valid" if summary.valid else "invalid: " + "; ".join(summary.invalid_reasons)
        _err.print(
            f"  {summary.policy.label()} @ {where}: p99 {summary.latency.p99_s * 1e3:.1f} ms, "
            f"{summary.issued} queries, {verdict}",
            markup=False,
        )

    def policy(self, found: PolicyCapacity) -> None:
        if not self.quiet:
            _err.print(
                f"[bold]{found.policy.label()}[/]: capacity {found.capacity_qps:,.1f} q/s "
                f"(offline ceiling {found.ceiling_qps:,.1f} q/s)"
            )


def _show_load_run(run: RunRecord) -> None:
    from accelscope.commands.load.view import load_view
    from accelscope.commands.load.workflow import (
        CAPACITY_DOCUMENT,
        SUMMARY_DOCUMENT,
        TRIAL_DOCUMENT,
    )

    capacities = run.documents_of(CAPACITY_DOCUMENT)
    summaries = run.documents_of(SUMMARY_DOCUMENT)  # none in runs stored before it existed
    scenario = str(run.settings.get("scenario", "server"))
    sla = run.settings.get("sla_p99_s")
    _out.print(
        load_view(
            title=f"load {run.id}: {run.model} ({run.status})",
            scenario=scenario,
            sla_p99_s=float(sla) if sla is not None else None,
            trials=run.documents_of(TRIAL_DOCUMENT),
            capacity=capacities[-1] if capacities else None,
            harness_floor=summaries[-1].get("harness_floor") if summaries else None,
        )
    )


register_show("load", _show_load_run)


@dataclass(frozen=True)
class ServedFlags(OptionFlags, Tf32Flags, DeviceFlags, RuntimeFlags):
    """The configuration served: runtime, precision, threads, device, TF32, backend options
    (the batch is the batcher's: ``--batch``)."""


@dataclass(frozen=True)
class TrafficFlags(SlaFlags):
    """The scenario, its SLA, and the load offered."""

    scenario: Scenario | None = flag(
        typer.Option(None, "--scenario", parser=_scenario, help="single-stream, offline or server.")
    )
    rate: float | None = flag(
        typer.Option(None, "--rate", help="Server: one offered rate, queries/s.")
    )
    search: bool | None = flag(
        typer.Option(
            None, "--search", help="Server: search the highest rate meeting the SLA (default)."
        )
    )
    min_duration: float | None = flag(
        typer.Option(
            None,
            "--min-duration",
            parser=seconds_or_zero,
            metavar="DURATION",
            help="Per trial (10s).",
        )
    )
    min_queries: int | None = flag(typer.Option(None, "--min-queries", help="Per trial (1000)."))
    burstiness_cv: float | None = flag(
        typer.Option(None, "--burstiness-cv", help="Gap coefficient of variation (1 = Poisson).")
    )
    query_timeout: float | None = flag(
        duration_option(
            "--query-timeout", "A query not done this long after its arrival times out."
        )
    )


@dataclass(frozen=True)
class BatcherFlags(FlagGroup):
    """The dynamic batcher in front of the model."""

    batch: int | None = flag(
        typer.Option(None, "--batch", help="The dynamic batcher's max batch (8).")
    )
    batching: bool | None = flag(typer.Option(None, " /--no-batching", help="One query per batch."))
    max_delay: float | None = flag(
        typer.Option(
            None,
            "--max-delay",
            parser=seconds_or_zero,
            metavar="DURATION",
            help="Batcher max queue delay.",
        )
    )


@app.command("load")
@with_flag_groups
def load_command(
    model: str | None = typer.Argument(None, help=MODEL_HELP),
    traffic: TrafficFlags = GROUP,
    served: ServedFlags = GROUP,
    batcher: BatcherFlags = GROUP,
    from_run: str | None = typer.Option(
        None, "--from-run", help="Serve the best config of a stored bench run (id or latest)."
    ),
    seed: SeedFlags = GROUP,
    source: ModelFlags = GROUP,
    config: Path | None = config_option("load"),
    output: OutputFlags = GROUP,
    quiet: QuietFlags = GROUP,
) -> None:
    """Drive a configuration with MLPerf-style load; find the highest rate within a p99 SLA."""
    from accelscope.commands.load.workflow import LoadRequest, load

    request = LoadRequest(
        model=model,
        **served.device_fields(),
        **given(
            scenario=traffic.scenario,
            sla_p99_s=traffic.sla_p99,
            backend=served.backend,
            precision=served.precision,
            max_batch=batcher.batch,
            threads=served.threads,
            tf32=served.tf32_value,
            options=served.option_pairs,
            from_run=from_run,
            rate_per_s=traffic.rate,
            search=traffic.search,
            batching=batcher.batching,
            max_delay_s=batcher.max_delay,
            min_duration_s=traffic.min_duration,
            min_queries=traffic.min_queries,
            seed=seed.seed,
            burstiness_cv=traffic.burstiness_cv,
            query_timeout_s=traffic.query_timeout,
            inputs=source.input_specs,
            weights=source.weights,
            trust_model_code=source.trust_model_code,
            report_path=output.report,
        ),
    )
    outcome = load(
        request,
        store_path=output.target,
        events=cast("LoadEvents", _Events(quiet.quiet or output.as_json)),
        command_line=command_line(),
    )
    _print(outcome, request, as_json=output.as_json, quiet=quiet.quiet)


def _print(outcome: LoadOutcome, request: LoadRequest, *, as_json: bool, quiet: bool) -> None:
    from accelscope.commands.load.view import load_view
    from accelscope.serialise import dump

    trials = [t.to_dict() for t in outcome.trials]
    floor = dump(outcome.harness_floor) if outcome.harness_floor is not None else None
    if as_json:
        document = {
            "run_id": outcome.run_id,
            "store": str(outcome.store_path or ""),
            "report": str(outcome.report_path or ""),
            "model": outcome.model,
            "label": outcome.spec.label(),
            "scenario": outcome.scenario.value,
            "capacity": outcome.capacity,
            "trials": trials,
            "notes": outcome.notes,
            "harness_floor": floor,
        }
        _out.print_json(json.dumps(document))
        return
    _out.print(
        load_view(
            title=f"load: {outcome.model} {outcome.spec.label()}",
            scenario=outcome.scenario.value,
            sla_p99_s=request.sla_p99_s,
            trials=trials,
            capacity=outcome.capacity,
            notes=outcome.notes,
            harness_floor=floor,
        )
    )
    if not quiet:
        _out.print(f"[dim]prepared in {outcome.prepare_s:.1f} s; report: {outcome.report_path}[/]")
        if outcome.run_id:
            _out.print(f"stored run [bold]{outcome.run_id}[/] in {outcome.store_path}")
