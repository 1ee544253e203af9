"""``accelscope doctor``: validate the request, run the diagnosis and the what-ifs, store the
run, write the HTML report and the Chrome trace beside it. Returns data; never prints."""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from accelscope.commands._lifecycle import CommandRun, check_paths, write_report
from accelscope.commands.doctor.html import render_doctor_report
from accelscope.doctor.diagnose import DoctorEvents, DoctorPlan, DoctorResult, run_doctor
from accelscope.doctor.launcher import Launcher
from accelscope.doctor.trace import chrome_trace
from accelscope.doctor.whatif import parse_what_ifs
from accelscope.engine.probe import measured_support, probe_table
from accelscope.errors import BadInputError, InterruptedRunError, NotAvailableError, exception_line
from accelscope.hardware.fingerprint import Environment, collect_environment
from accelscope.measurement.threads import available_cores
from accelscope.spec import Precision
from accelscope.store.sqlite import DEFAULT_STORE_PATH

__all__ = ["DoctorOutcome", "DoctorRequest", "doctor", "result_for_run"]

_DEVICE = re.compile(r"^(auto|cpu|cuda)(?::(\d+))?$")


@dataclass(frozen=True, kw_only=True)
class DoctorRequest:
    """What ``accelscope doctor`` should run.

    ``device``: ``auto`` (the script decides), ``cpu`` (GPUs hidden from the script), ``cuda``
    or ``cuda:N`` (only that GPU visible). ``env`` adds environment variables for the script.
    ``quiet_stdout`` sends the script's stdout to stderr (for ``--json``).
    """

    script: Path
    args: tuple[str, ...] = ()
    steps: int = 50
    warmup: int = 10
    what_if: str = "auto"
    device: str = "auto"
    timeout_s: float = 300.0
    stall_s: float = 120.0
    report_path: Path | None = None
    env: dict[str, str] = field(default_factory=dict)
    quiet_stdout: bool = False

    def settings(self) -> dict[str, Any]:
        """Stored with the run."""
        return {
            "args": list(self.args),
            "steps": self.steps,
            "warmup": self.warmup,
            "what_if": self.what_if,
            "device": self.device,
        }


@dataclass(frozen=True, kw_only=True)
class DoctorOutcome:
    """The result and where things were written."""

    result: DoctorResult
    run_id: str | None
    store_path: Path | None
    report_path: Path
    trace_path: Path
    wall_time_s: float


def _validate(request: DoctorRequest, env: Environment) -> dict[str, str]:
    """Check every input; return the environment variables the device choice needs."""
    script = request.script
    if not script.exists():
        raise BadInputError(f"script {script} not found")
    if not script.is_file():
        raise BadInputError(f"script {script} is not a file")
    if script.suffix != ".py":
        raise BadInputError(f"script {script} is not a Python file (.py)")
    if request.steps < 1:
        raise BadInputError(f"--steps must be a positive integer, got {request.steps}")
    if request.warmup < 0:
        raise BadInputError(f"--warmup must be 0 or more, got {request.warmup}")
    for value, flag in ((request.timeout_s, "--timeout"), (request.stall_s, "--stall-timeout")):
        if value <= 0:
            raise BadInputError(f"{flag} must be positive")
    parse_what_ifs(request.what_if)
    match = _DEVICE.match(request.device.strip().lower())
    if match is None or (match.group(1) != "cuda" and match.group(2) is not None):
        raise BadInputError(f"unknown device {request.device!r}; use auto, cpu, cuda or cuda:N")
    kind, index = match.group(1), match.group(2)
    if kind == "cpu":
        return {"CUDA_VISIBLE_DEVICES": ""}
    if kind == "cuda":
        if not env.gpus:
            raise NotAvailableError("device 'cuda' not available: no CUDA device")
        if index is not None:
            if int(index) >= len(env.gpus):
                raise NotAvailableError(
                    f"device cuda:{index} not available: {len(env.gpus)} GPU(s) visible"
                )
            return {"CUDA_VISIBLE_DEVICES": index}
    return {}


def _store(run: CommandRun, result: DoctorResult) -> None:
    documents = result.documents()
    with run:
        run.add_document("diagnosis", documents["diagnosis"])
        if documents["telemetry"] is not None:
            run.add_document("telemetry", documents["telemetry"])
        for whatif in documents["whatif"]:
            run.add_document("whatif", whatif)
        if result.interrupted:
            run.status = "interrupted"


def result_for_run(run: Any) -> DoctorResult:
    """Rebuild a stored doctor run's result (``run`` is a store ``RunRecord``)."""
    diagnosis = run.documents_of("diagnosis")
    if not diagnosis:
        raise BadInputError(f"run {run.id} has no diagnosis document")
    telemetry = run.documents_of("telemetry")
    try:
        return DoctorResult.from_documents(
            diagnosis[0], telemetry[0] if telemetry else None, run.documents_of("whatif")
        )
    except (KeyError, ValueError, TypeError) as exc:
        raise BadInputError(
            f"run {run.id}: unreadable doctor documents ({exception_line(exc, named=True)})"
        ) from exc


def doctor(
    request: DoctorRequest,
    *,
    store_path: Path | None = DEFAULT_STORE_PATH,
    events: DoctorEvents | None = None,
    environment: Environment | None = None,
    launcher: Launcher | None = None,
    command_line: str | None = None,
) -> DoctorOutcome:
    """Diagnose ``request.script``, measure the what-ifs, store and report."""
    started = time.monotonic()
    env = environment or collect_environment()
    device_env = _validate(request, env)
    check_paths(store_path, request.report_path)
    runner = launcher or Launcher(
        timeout_s=request.timeout_s,
        stall_s=request.stall_s,
        env={**request.env, **device_env},
        stdout=2 if request.quiet_stdout else None,
    )
    plan = DoctorPlan(
        script=request.script.resolve(),
        args=request.args,
        warmup=request.warmup,
        steps=request.steps,
        what_if=request.what_if,
    )
    support = env.precision_support()
    if request.device.strip().lower() == "cpu" or not env.gpus:  # probes decide, ISA explains
        table = probe_table(
            [("torch", Precision.BF16), ("torch", Precision.FP16)],
            fingerprint=env.fingerprint(),
            threads=available_cores(),
            cache_dir=(store_path or DEFAULT_STORE_PATH).parent / "probes",
        )
        support = measured_support(support, table)
    result = run_doctor(
        plan,
        runner,
        support=support,
        cores=available_cores(),
        memory_bytes=env.memory_bytes,
        events=events,
    )
    run = CommandRun(
        "doctor",
        request.script.name,
        env,
        request.settings(),
        store_path=store_path,
        command_line=command_line,
    )
    _store(run, result)
    run_id = run.run_id
    report_path = run.report_path(request.report_path)
    trace_path = report_path.with_name(report_path.stem + ".trace.json")
    trace = chrome_trace(result.profile, f"doctor: {request.script.name}")
    write_report(json.dumps(trace), trace_path)
    html = render_doctor_report(result, env, trace_name=trace_path.name)
    write_report(html, report_path)
    if result.interrupted:
        kept = sum(1 for w in result.what_ifs if w.status == "ok" and w.name != "baseline")
        where = f"run {run_id} ({store_path})" if run_id else "the report"
        raise InterruptedRunError(
            f"interrupted: the diagnosis ({result.diagnosis.bottleneck}) and {kept} measured "
            f"what-if(s) are kept in {where}; report: {report_path}"
        )
    return DoctorOutcome(
        result=result,
        run_id=run_id,
        store_path=run.stored_path,
        report_path=report_path,
        trace_path=trace_path,
        wall_time_s=time.monotonic() - started,
    )
