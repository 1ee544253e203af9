"""The ``compare`` and ``gate`` commands."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from accelscope.cli._app import JsonOption, StoreOption, _err, _out, app, command_line
from accelscope.cli._runs import register_show
from accelscope.cli._types import duration_option, fraction_option, parse_input
from accelscope.commands._lifecycle import check_report_path, write_report
from accelscope.commands.compare.gate import (
    GATE_DOCUMENT,
    ROUND_DOCUMENT,
    GateOutcome,
    GateRequest,
    Variant,
    gate,
)
from accelscope.commands.compare.view import (
    comparison_markdown,
    comparison_view,
    gate_markdown,
    gate_rounds_view,
    gate_view,
)
from accelscope.commands.compare.workflow import CompareRequest, compare
from accelscope.compare.gate import GateDecision, GateThresholds
from accelscope.errors import BadInputError
from accelscope.spec import (
    Device,
    Precision,
    TensorSpec,
    parse_device,
    parse_options,
    parse_precision,
)
from accelscope.store.sqlite import DEFAULT_STORE_PATH, RunRecord

MarkdownOption = typer.Option(
    None, "--markdown", help="Also write the result as markdown (a pull-request comment) here."
)


@app.command("compare")
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
    markdown: Path | None = MarkdownOption,
    store: Path | None = StoreOption,
    as_json: bool = JsonOption,
) -> None:
    """Compare stored runs configuration by configuration: ratios with CIs, Holm-corrected; the
    run is the unit (3+ per side: A1,A2,A3 B1,B2,B3), and one run per side cannot tell."""
    request = CompareRequest(
        baseline=baseline,
        candidate=candidate,
        allow_env_change=allow_env_change,
        **({} if threshold is None else {"threshold": threshold}),
    )
    if markdown is not None:
        check_report_path(markdown)
    comparison = compare(request, store_path=store or DEFAULT_STORE_PATH)
    if markdown is not None:
        write_report(comparison_markdown(comparison), markdown)
    if as_json:
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
    options: list[str] | None,
    git_ref: str | None = None,
    python: str | None = None,
    base: Variant | None = None,
) -> Variant:
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
        "options": None if options is None else parse_options(tuple(options)),
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


@app.command("gate")
def gate_command(
    candidate: str = typer.Argument(..., help="The candidate model: file.py:fn, .onnx, zoo name."),
    baseline: str | None = typer.Option(
        None, "--baseline", help="The baseline model (default: the candidate's model)."
    ),
    baseline_ref: str | None = typer.Option(
        None, "--baseline-ref", help="Baseline = the model file at this git revision (main)."
    ),
    backend: str | None = typer.Option(None, "--backend", help="Runtime of both (eager)."),
    precision: Precision | None = typer.Option(
        None, "--precision", parser=parse_precision, help="Precision of both (fp32)."
    ),
    batch: int | None = typer.Option(None, "--batch", help="Batch size of both (8)."),
    threads: int | None = typer.Option(None, "--threads", help="Threads of both (all cores)."),
    device: Device | None = typer.Option(None, "--device", parser=parse_device, help="cpu, cuda."),
    options: list[str] | None = typer.Option(None, "--option", help="Backend option key=value."),
    baseline_backend: str | None = typer.Option(None, "--baseline-backend"),
    baseline_precision: Precision | None = typer.Option(
        None, "--baseline-precision", parser=parse_precision
    ),
    baseline_batch: int | None = typer.Option(None, "--baseline-batch"),
    baseline_threads: int | None = typer.Option(None, "--baseline-threads"),
    baseline_options: list[str] | None = typer.Option(
        None, "--baseline-option", help="Baseline's backend options (replace the candidate's)."
    ),
    baseline_python: str | None = typer.Option(
        None, "--baseline-python", help="Interpreter of another venv (with accelscope) for A."
    ),
    candidate_python: str | None = typer.Option(
        None, "--candidate-python", help="Interpreter of another venv (with accelscope) for B."
    ),
    inputs: list[TensorSpec] | None = typer.Option(
        None, "--input", parser=parse_input, metavar="SPEC", help="Input spec NAME:SHAPE:DTYPE."
    ),
    eval_data: Path | None = typer.Option(
        None, "--eval-data", help="Labelled .npz: gate the accuracy metric too."
    ),
    trust_model_code: bool = typer.Option(
        False, "--trust-model-code", help="Allow unpickling model files (runs code in them)."
    ),
    rounds: int | None = typer.Option(None, "--rounds", help="Rounds (A B or B A each) (6)."),
    max_rounds: int | None = typer.Option(
        None, "--max-rounds", help="Keep going while inconclusive, up to this many (20)."
    ),
    budget: float | None = duration_option("--budget", "Sampling time per process (1s)."),
    isolation: str | None = typer.Option(
        None,
        "--isolation",
        help="shared: both sides in one fresh worker per round, alternating blocks; process: "
        "each side its own worker (auto: shared unless two Pythons).",
    ),
    max_slowdown: float | None = fraction_option("--max-slowdown", "Allowed slowdown (5%)."),
    max_p99_slowdown: float | None = fraction_option(
        "--max-p99-slowdown", "Allowed p99 slowdown (default: p99 reported, not gated)."
    ),
    max_accuracy_drop: float | None = fraction_option(
        "--max-accuracy-drop", "Allowed drop of the accuracy metric (0.5%)."
    ),
    markdown: Path | None = MarkdownOption,
    store: Path | None = StoreOption,
    no_store: bool = typer.Option(False, "--no-store", help="Do not write the run."),
    as_json: bool = JsonOption,
) -> None:
    """Measure baseline and candidate alternately (A B B A ...); exit 0 pass, 1 regression,
    3 inconclusive."""
    if baseline is not None and baseline_ref is not None:
        raise BadInputError("give --baseline or --baseline-ref, not both")
    if markdown is not None:
        check_report_path(markdown)  # before the measuring: a bad path must not hide a verdict
    candidate_variant = _variant(
        candidate, backend, precision, batch, threads, device, options, python=candidate_python
    )
    baseline_variant = _variant(
        baseline or candidate,
        baseline_backend,
        baseline_precision,
        baseline_batch,
        baseline_threads,
        None,
        baseline_options,
        git_ref=baseline_ref,
        python=baseline_python,
        base=candidate_variant,
    )
    thresholds = {
        "max_slowdown": max_slowdown,
        "max_p99_slowdown": max_p99_slowdown,
        "max_accuracy_drop": max_accuracy_drop,
    }
    extra = {"rounds": rounds, "max_rounds": max_rounds, "budget_s": budget, "isolation": isolation}
    extra = {k: v for k, v in extra.items() if v is not None}
    if rounds is not None and max_rounds is None:
        extra["max_rounds"] = max(rounds, GateRequest.max_rounds)
    request = GateRequest(
        baseline=baseline_variant,
        candidate=candidate_variant,
        thresholds=GateThresholds(**{k: v for k, v in thresholds.items() if v is not None}),
        inputs=tuple(inputs) if inputs else None,
        eval_data=eval_data,
        trust_model_code=trust_model_code,
        **extra,  # type: ignore[arg-type]
    )
    outcome = gate(
        request,
        store_path=None if no_store else (store or DEFAULT_STORE_PATH),
        on_round=None if as_json else _round_line,
        command_line=command_line(),
    )
    _print_gate(outcome, markdown, as_json)
    raise typer.Exit(outcome.decision.exit_code)


def _print_gate(outcome: GateOutcome, markdown: Path | None, as_json: bool) -> None:
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
    decisions = run.documents_of(GATE_DOCUMENT)
    for document in decisions:
        _out.print(gate_view(document))
    if not decisions:
        _out.print(gate_rounds_view(run.documents_of(ROUND_DOCUMENT)))


register_show("gate", _show)
