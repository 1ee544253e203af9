"""The ``compare`` and ``gate`` commands."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from accelscope.cli._app import _err, _out, app, command_line
from accelscope.cli._flag_groups import (
    GROUP,
    AccuracyFlags,
    BatchFlags,
    DeviceFlags,
    InputFlags,
    JsonFlags,
    MarkdownFlags,
    OptionFlags,
    RuntimeFlags,
    SamplingBudgetFlags,
    StoreFlags,
    StoringFlags,
    flag,
    with_flag_groups,
)
from accelscope.cli._runs import register_show
from accelscope.cli._types import fraction_option
from accelscope.errors import BadInputError
from accelscope.spec import Device, Precision, parse_precision

if TYPE_CHECKING:
    from accelscope.commands.compare.gate import GateOutcome, Variant
    from accelscope.compare.gate import GateDecision
    from accelscope.store.sqlite import RunRecord


@app.command("compare")
@with_flag_groups
def compare_command(
    baseline: str = typer.Argument(
        ..., help="Run id, prefix, latest, latest~N, STORE.sqlite[:RUN]; several: A1,A2,A3."
    ),
    candidate: str = typer.Argument(..., help="The same forms, for the candidate side."),
    threshold: float | None = fraction_option(
        "--threshold", "No-change band: within ±this is 'no change' (5%)."
    ),
    allow_env_change: bool = typer.Option(
        False, "--allow-env-change", help="Compare runs measured on different machines."
    ),
    markdown: MarkdownFlags = GROUP,
    store: StoreFlags = GROUP,
    output: JsonFlags = GROUP,
) -> None:
    """Compare stored runs configuration by configuration: ratios with CIs, Holm-corrected; the
    run is the unit (3+ per side: A1,A2,A3 B1,B2,B3), and one run per side cannot tell."""
    from accelscope.commands._lifecycle import check_report_path, write_report
    from accelscope.commands.compare.view import comparison_markdown, comparison_view
    from accelscope.commands.compare.workflow import CompareRequest, compare

    request = CompareRequest(
        baseline=baseline,
        candidate=candidate,
        allow_env_change=allow_env_change,
        **({} if threshold is None else {"threshold": threshold}),
    )
    if markdown.markdown is not None:
        check_report_path(markdown.markdown)
    comparison = compare(request, store_path=store.path)
    if markdown.markdown is not None:
        write_report(comparison_markdown(comparison), markdown.markdown)
    if output.as_json:
        _out.print_json(json.dumps(comparison.to_dict()))
        return
    _out.print(comparison_view(comparison))


def _variant(
    model: str,
    backend: str | None,
    precision: Precision | None,
    batch: int | None,
    threads: int | None,
    device: Device | None,
    options: tuple[tuple[str, str], ...] | None,
    git_ref: str | None = None,
    python: str | None = None,
    base: Variant | None = None,
) -> Variant:
    from accelscope.commands.compare.gate import Variant

    fields: dict[str, object] = {"model": model, "git_ref": git_ref, "python": python}
    if base is not None:  # the baseline inherits the candidate's settings it does not override
        fields.update(
            backend=base.backend,
            precision=base.precision,
            batch_size=base.batch_size,
            threads=base.threads,
            device=base.device,
            options=base.options,
        )
    given = {
        "backend": backend,
        "precision": precision,
        "batch_size": batch,
        "threads": threads,
        "device": device,
        "options": options,
    }
    fields.update({k: v for k, v in given.items() if v is not None})
    return Variant(**fields)  # type: ignore[arg-type]


def _round_line(round_number: int, decision: GateDecision) -> None:
    estimate = decision.time
    _err.print(
        f"[dim]round {round_number}: candidate/baseline {estimate.ratio:.3f} "
        f"({estimate.confidence:.0%} CI {estimate.low:.3f}..{estimate.high:.3f}) -> "
        f"{decision.status.value}[/]"
    )


@dataclass(frozen=True)
class BothSidesFlags(OptionFlags, DeviceFlags, BatchFlags, RuntimeFlags):
    """How both sides run (the ``--baseline-*`` flags override the baseline's)."""

    def device_kind(self) -> Device | None:
        """The device of both sides: gate measures on the first visible GPU."""
        if self.device is None:
            return None
        if self.device.index:
            raise BadInputError(
                f"--device {self.device}: gate measures on the first visible GPU; choose it "
                f"with CUDA_VISIBLE_DEVICES={self.device.index} and --device cuda"
            )
        return self.device.kind


@dataclass(frozen=True)
class GateRuleFlags(AccuracyFlags):
    """What the decision allows: the slowdowns and the accuracy drop."""

    max_slowdown: float | None = flag(fraction_option("--max-slowdown", "Allowed slowdown (5%)."))
    max_p99_slowdown: float | None = flag(
        fraction_option(
            "--max-p99-slowdown", "Allowed p99 slowdown (default: p99 reported, not gated)."
        )
    )


@app.command("gate")
@with_flag_groups
def gate_command(
    candidate: str = typer.Argument(..., help="The candidate model: file.py:fn, .onnx, zoo name."),
    baseline: str | None = typer.Option(
        None, "--baseline", help="The baseline model (default: the candidate's model)."
    ),
    baseline_ref: str | None = typer.Option(
        None, "--baseline-ref", help="Baseline = the model file at this git revision (main)."
    ),
    both: BothSidesFlags = GROUP,
    baseline_backend: str | None = typer.Option(
        None, "--baseline-backend", help="The baseline's runtime (default: --backend's)."
    ),
    baseline_precision: Precision | None = typer.Option(
        None,
        "--baseline-precision",
        parser=parse_precision,
        help="The baseline's precision (default: --precision's).",
    ),
    baseline_batch: int | None = typer.Option(
        None, "--baseline-batch", help="The baseline's batch size (default: --batch's)."
    ),
    baseline_threads: int | None = typer.Option(
        None, "--baseline-threads", help="The baseline's threads (default: --threads')."
    ),
    baseline_options: list[str] | None = typer.Option(
        None, "--baseline-option", help="Baseline's backend options (replace the candidate's)."
    ),
    baseline_python: str | None = typer.Option(
        None, "--baseline-python", help="Interpreter of another venv (with accelscope) for A."
    ),
    candidate_python: str | None = typer.Option(
        None, "--candidate-python", help="Interpreter of another venv (with accelscope) for B."
    ),
    source: InputFlags = GROUP,
    rounds: int | None = typer.Option(None, "--rounds", help="Rounds (A B or B A each) (6)."),
    max_rounds: int | None = typer.Option(
        None, "--max-rounds", help="Keep going while inconclusive, up to this many (20)."
    ),
    budget: SamplingBudgetFlags = GROUP,
    isolation: str | None = typer.Option(
        None,
        "--isolation",
        help="shared: both sides in one fresh worker per round, alternating blocks; process: "
        "each side its own worker (auto: shared unless two Pythons).",
    ),
    rule: GateRuleFlags = GROUP,
    markdown: MarkdownFlags = GROUP,
    store: StoringFlags = GROUP,
    output: JsonFlags = GROUP,
) -> None:
    """Measure baseline and candidate alternately (A B B A ...); exit 0 pass, 1 regression,
    3 inconclusive."""
    from accelscope.commands._lifecycle import check_report_path
    from accelscope.commands.compare.gate import GateRequest, gate
    from accelscope.compare.gate import GateThresholds
    from accelscope.spec import parse_options

    if baseline is not None and baseline_ref is not None:
        raise BadInputError("give --baseline or --baseline-ref, not both")
    if markdown.markdown is not None:  # before the measuring: a bad path must not hide a verdict
        check_report_path(markdown.markdown)
    candidate_variant = _variant(
        candidate,
        both.backend,
        both.precision,
        both.batch,
        both.threads,
        both.device_kind(),
        both.option_pairs,
        python=candidate_python,
    )
    baseline_variant = _variant(
        baseline or candidate,
        baseline_backend,
        baseline_precision,
        baseline_batch,
        baseline_threads,
        None,
        None if baseline_options is None else parse_options(tuple(baseline_options)),
        git_ref=baseline_ref,
        python=baseline_python,
        base=candidate_variant,
    )
    thresholds = {
        "max_slowdown": rule.max_slowdown,
        "max_p99_slowdown": rule.max_p99_slowdown,
        "max_accuracy_drop": rule.max_accuracy_drop,
    }
    extra = {
        "rounds": rounds,
        "max_rounds": max_rounds,
        "budget_s": budget.budget,
        "isolation": isolation,
    }
    extra = {k: v for k, v in extra.items() if v is not None}
    if rounds is not None and max_rounds is None:
        extra["max_rounds"] = max(rounds, GateRequest.max_rounds)
    request = GateRequest(
        baseline=baseline_variant,
        candidate=candidate_variant,
        thresholds=GateThresholds(**{k: v for k, v in thresholds.items() if v is not None}),
        inputs=source.input_specs,
        eval_data=rule.eval_data,
        trust_model_code=bool(source.trust_model_code),
        **extra,  # type: ignore[arg-type]
    )
    outcome = gate(
        request,
        store_path=store.target,
        on_round=None if output.as_json else _round_line,
        command_line=command_line(),
    )
    _print_gate(outcome, markdown.markdown, output.as_json)
    raise typer.Exit(outcome.decision.exit_code)


def _print_gate(outcome: GateOutcome, markdown: Path | None, as_json: bool) -> None:
    from accelscope.commands._lifecycle import write_report
    from accelscope.commands.compare.view import gate_markdown, gate_view

    if markdown is not None:
        write_report(gate_markdown(outcome.document), markdown)
    if as_json:
        document = {**outcome.document, "run_id": outcome.run_id, "wall_s": outcome.wall_s}
        _out.print_json(json.dumps(document))
        return
    _out.print(gate_view(outcome.document))
    _out.print(f"[dim]{outcome.wall_s:.0f} s[/]")
    if outcome.run_id:
        _out.print(f"stored run [bold]{outcome.run_id}[/] in {outcome.store_path}")


def _show(run: RunRecord) -> None:
    from accelscope.commands.compare.gate import GATE_DOCUMENT, ROUND_DOCUMENT
    from accelscope.commands.compare.view import gate_rounds_view, gate_view

    decisions = run.documents_of(GATE_DOCUMENT)
    for document in decisions:
        _out.print(gate_view(document))
    if not decisions:
        _out.print(gate_rounds_view(run.documents_of(ROUND_DOCUMENT)))


register_show("gate", _show)
