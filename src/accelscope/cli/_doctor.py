"""The ``doctor`` command: run a training or inference script under instrumentation, name
its bottleneck with evidence, and measure candidate fixes."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from accelscope.cli._app import _err, _out, app, command_line, given
from accelscope.cli._flag_groups import (
    GROUP,
    OutputFlags,
    QuietFlags,
    RunTimeoutFlags,
    with_flag_groups,
)
from accelscope.cli._runs import register_show
from accelscope.cli._types import duration_option
from accelscope.errors import BadInputError

if TYPE_CHECKING:
    from accelscope.store.sqlite import RunRecord


class _Events:
    """One stderr line per child run and per finished run (unless quiet)."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet

    def run_started(self, label: str, total_steps: int) -> None:
        if not self.quiet:
            _err.print(f"[dim]doctor: {label}: running {total_steps} steps ...[/]", highlight=False)

    def step(self, label: str, count: int, total_steps: int) -> None:
        return None

    def run_finished(self, label: str, line: str) -> None:
        if not self.quiet:
            _err.print(f"  {label}: {line}", markup=False)


@app.command("doctor")
@with_flag_groups
def doctor_command(
    script: Path = typer.Argument(None, help="Your training or inference script (.py)."),
    script_args: list[str] = typer.Argument(None, help="Arguments for the script (after --)."),
    steps: int | None = typer.Option(None, "--steps", help="Measured steps (50)."),
    warmup: int | None = typer.Option(None, "--warmup", help="Steps run before measuring (10)."),
    what_if: str | None = typer.Option(
        None,
        "--what-if",
        help="all, auto (default), none, or a list: workers,bf16,batch=4,cache,...",
    ),
    device: str | None = typer.Option(
        None, "--device", help="The script's device: auto (default), cpu, cuda or cuda:N."
    ),
    timeout: RunTimeoutFlags = GROUP,
    stall: float | None = duration_option(
        "--stall-timeout", "Bound on the wait for a step (120s)."
    ),
    output: OutputFlags = GROUP,
    quiet: QuietFlags = GROUP,
    trace: Path | None = typer.Option(
        None,
        "--trace",
        help="Diagnose a torch.profiler trace instead (.json, .json.gz, or a directory of "
        "per-rank traces); no script is run.",
    ),
    sm_active: float | None = typer.Option(
        None, "--sm-active", help="With --trace: GPM SM activity over the traced steps (0-1)."
    ),
    gpu_util: float | None = typer.Option(
        None, "--gpu-util", help="With --trace: NVML utilisation over the traced steps (0-1)."
    ),
    output_format: str = typer.Option(
        "text",
        "--format",
        help="With --trace: text (default) or markdown, a digest of 40 lines or fewer per rank "
        "for an agent, a pull-request comment or a chat.",
    ),
) -> None:
    """Run SCRIPT under instrumentation: where each step's time goes, the bottleneck named
    with its evidence, and candidate fixes measured (accelscope doctor train.py -- --lr 0.1).
    With --trace FILE, diagnose a torch.profiler trace you already have."""
    if output_format not in ("text", "markdown"):
        raise BadInputError(f"unknown --format {output_format!r}; choose text or markdown")
    if trace is not None:
        if script is not None:
            raise BadInputError("give SCRIPT or --trace FILE, not both")
        if output.as_json and output_format == "markdown":
            raise BadInputError("give --json or --format markdown, not both")
        _trace_mode(
            trace,
            sm_active=sm_active,
            gpu_util=gpu_util,
            as_json=output.as_json,
            markdown=output_format == "markdown",
            report=output.report,
        )
        return
    if output_format == "markdown":
        raise BadInputError("--format markdown is for --trace")
    if script is None:
        raise BadInputError("missing SCRIPT (or --trace FILE): accelscope doctor train.py")
    for value, name in ((sm_active, "--sm-active"), (gpu_util, "--gpu-util")):
        if value is not None:
            raise BadInputError(f"{name} is for --trace; a script run measures it itself")
    from accelscope.commands.doctor.view import doctor_view
    from accelscope.commands.doctor.workflow import DoctorRequest, doctor

    request = DoctorRequest(
        script=script,
        args=tuple(script_args or ()),
        report_path=output.report,
        quiet_stdout=output.as_json,
        **given(
            steps=steps,
            warmup=warmup,
            what_if=what_if,
            device=device,
            timeout_s=timeout.timeout,
            stall_s=stall,
        ),
    )
    outcome = doctor(
        request,
        store_path=output.target,
        events=_Events(quiet.quiet or output.as_json),
        command_line=command_line(),
    )
    result = outcome.result
    if output.as_json:
        document = {
            "run_id": outcome.run_id,
            "store": str(outcome.store_path or ""),
            "report": str(outcome.report_path),
            "trace": str(outcome.trace_path),
            "bottleneck": result.diagnosis.bottleneck,
            "best": result.best,
            "recommendation": result.recommendation,
            **result.documents(),
        }
        _out.print_json(json.dumps(document))
        return
    _out.print(doctor_view(result, title=f"doctor: {script.name}"))
    if not quiet.quiet:
        _out.print(f"[dim]report: {outcome.report_path} · trace: {outcome.trace_path}[/]")
        if outcome.run_id:
            _out.print(f"stored run [bold]{outcome.run_id}[/] in {outcome.store_path}")


def _trace_mode(
    trace: Path,
    *,
    sm_active: float | None,
    gpu_util: float | None,
    as_json: bool,
    markdown: bool,
    report: Path | None,
) -> None:
    """``doctor --trace``: the device-timeline diagnosis of a recorded trace; nothing stored,
    an HTML report only where ``--report`` asks for one. ``markdown``: print the digest."""
    from accelscope.commands.doctor.digest import markdown_digest
    from accelscope.commands.doctor.trace_mode import TraceRequest, diagnose_trace, trace_title
    from accelscope.commands.doctor.trace_view import trace_view

    diagnosis = diagnose_trace(
        TraceRequest(path=trace, sm_active=sm_active, nvml_utilisation=gpu_util, report_path=report)
    )
    if as_json:
        document = diagnosis.document() | {"report": str(report or "")}
        _out.print_json(json.dumps(document, allow_nan=False, default=str))
        return
    if markdown:
        sys.stdout.write(markdown_digest(diagnosis, title=trace_title(trace)))
        sys.stdout.flush()
        if report is not None:  # stdout holds the digest alone
            _err.print(f"report: {report}", markup=False, highlight=False)
        return
    _out.print(trace_view(diagnosis))
    if report is not None:
        _out.print(f"[dim]report: {report}[/]")


def _show(run: RunRecord) -> None:
    from accelscope.commands.doctor.view import doctor_view
    from accelscope.commands.doctor.workflow import result_for_run

    result = result_for_run(run)
    _out.print(doctor_view(result, title=f"doctor: {Path(result.script).name}"))


register_show("doctor", _show)
