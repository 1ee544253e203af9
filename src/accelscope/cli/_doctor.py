"""The ``doctor`` command: run a training or inference script under instrumentation, name
its bottleneck with evidence, and measure candidate fixes."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from accelscope.cli._app import JsonOption, StoreOption, _err, _out, app, command_line
from accelscope.cli._runs import register_show
from accelscope.cli._types import duration_option, duration_text
from accelscope.commands.doctor.trace_mode import TraceRequest, diagnose_trace
from accelscope.commands.doctor.trace_view import trace_view
from accelscope.commands.doctor.view import doctor_view
from accelscope.commands.doctor.workflow import DoctorRequest, doctor, result_for_run
from accelscope.errors import BadInputError
from accelscope.store.sqlite import DEFAULT_STORE_PATH, RunRecord


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
def doctor_command(
    script: Path = typer.Argument(None, help="Your training or inference script (.py)."),
    script_args: list[str] = typer.Argument(None, help="Arguments for the script (after --)."),
    steps: int = typer.Option(DoctorRequest.steps, "--steps", help="Measured steps."),
    warmup: int = typer.Option(
        DoctorRequest.warmup, "--warmup", help="Steps run before measuring."
    ),
    what_if: str = typer.Option(
        DoctorRequest.what_if,
        "--what-if",
        help="all, auto, none, or a list: workers,bf16,batch=4,cache,...",
    ),
    device: str = typer.Option(DoctorRequest.device, "--device", help="auto, cpu, cuda or cuda:N."),
    timeout: float = duration_option(
        "--timeout", "Wall-clock bound per run.", duration_text(DoctorRequest.timeout_s)
    ),
    stall: float = duration_option(
        "--stall-timeout", "Bound on the wait for a step.", duration_text(DoctorRequest.stall_s)
    ),
    report: Path = typer.Option(None, "--report", help="HTML report path."),
    store: Path = StoreOption,
    no_store: bool = typer.Option(False, "--no-store", help="Do not write results."),
    as_json: bool = JsonOption,
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Only the summary."),
    trace: Path = typer.Option(
        None,
        "--trace",
        help="Diagnose a torch.profiler trace instead (.json, .json.gz, or a directory of "
        "per-rank traces); no script is run.",
    ),
    sm_active: float = typer.Option(
        None, "--sm-active", help="With --trace: GPM SM activity over the traced steps (0-1)."
    ),
    gpu_util: float = typer.Option(
        None, "--gpu-util", help="With --trace: NVML utilisation over the traced steps (0-1)."
    ),
) -> None:
    """Run SCRIPT under instrumentation: where each step's time goes, the bottleneck named
    with its evidence, and candidate fixes measured (accelscope doctor train.py -- --lr 0.1).
    With --trace FILE, diagnose a torch.profiler trace you already have."""
    if trace is not None:
        if script is not None:
            raise BadInputError("give SCRIPT or --trace FILE, not both")
        _trace_mode(trace, sm_active=sm_active, gpu_util=gpu_util, as_json=as_json, report=report)
        return
    if script is None:
        raise BadInputError("missing SCRIPT (or --trace FILE): accelscope doctor train.py")
    for value, flag in ((sm_active, "--sm-active"), (gpu_util, "--gpu-util")):
        if value is not None:
            raise BadInputError(f"{flag} is for --trace; a script run measures it itself")
    request = DoctorRequest(
        script=script,
        args=tuple(script_args or ()),
        steps=steps,
        warmup=warmup,
        what_if=what_if,
        device=device,
        timeout_s=timeout,
        stall_s=stall,
        report_path=report,
        quiet_stdout=as_json,
    )
    store_path = None if no_store else (store or DEFAULT_STORE_PATH)
    outcome = doctor(
        request,
        store_path=store_path,
        events=_Events(quiet or as_json),
        command_line=command_line(),
    )
    result = outcome.result
    if as_json:
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
    if not quiet:
        _out.print(f"[dim]report: {outcome.report_path} · trace: {outcome.trace_path}[/]")
        if outcome.run_id:
            _out.print(f"stored run [bold]{outcome.run_id}[/] in {outcome.store_path}")


def _trace_mode(
    trace: Path,
    *,
    sm_active: float | None,
    gpu_util: float | None,
    as_json: bool,
    report: Path | None,
) -> None:
    """``doctor --trace``: the device-timeline diagnosis of a recorded trace; nothing stored,
    an HTML report only where ``--report`` asks for one."""
    diagnosis = diagnose_trace(
        TraceRequest(path=trace, sm_active=sm_active, nvml_utilisation=gpu_util, report_path=report)
    )
    if as_json:
        document = diagnosis.document() | {"report": str(report or "")}
        _out.print_json(json.dumps(document, allow_nan=False, default=str))
        return
    _out.print(trace_view(diagnosis))
    if report is not None:
        _out.print(f"[dim]report: {report}[/]")


def _show(run: RunRecord) -> None:
    result = result_for_run(run)
    _out.print(doctor_view(result, title=f"doctor: {Path(result.script).name}"))


register_show("doctor", _show)
