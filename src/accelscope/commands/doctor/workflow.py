"""``accelscope doctor``: validate the request, run the diagnosis and the what-ifs, store the
run, write the HTML report and the Chrome trace beside it. Returns data; never prints."""

from __future__ import annotations

import json
import os
import re
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from accelscope.commands.bench.html import check_report_path, write_report
from accelscope.commands.doctor.html import render_doctor_report
from accelscope.doctor.diagnose import DoctorEvents, DoctorPlan, DoctorResult, run_doctor
from accelscope.doctor.launcher import Launcher
from accelscope.doctor.trace import chrome_trace
from accelscope.doctor.whatif import parse_what_ifs
from accelscope.engine.probe import measured_support, probe_table
from accelscope.errors import BadInputError, InterruptedRunError, NotAvailableError
from accelscope.hardware.fingerprint import Environment, collect_environment
from accelscope.measurement.threads import available_cores
from accelscope.spec import Precision
from accelscope.store.sink import command_line
from accelscope.store.sqlite import DEFAULT_STORE_PATH, ResultStore, check_store_path

__all__ = ["DoctorOutcome", "DoctorRequest", "doctor", "result_for_run"]

_DEVICE = re.compile(r"^(auto|cpu|cuda)(?::(\d+))?$")


@dataclass(frozen=True)
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


@dataclass(frozen=True)
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


def _write_json(payload: dict[str, Any], path: Path) -> None:
    tmp: str | None = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(payload, handle)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
        tmp = None
    except OSError as exc:
        raise BadInputError(f"cannot write {path}: {exc.strerror or exc}") from None
    finally:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)


def _store(path: Path, request: DoctorRequest, result: DoctorResult, env: Environment) -> str:
    command = command_line()
    documents = result.documents()
    with ResultStore(path) as store:
        run_id = store.start_run("doctor", request.script.name, command, env, request.settings())
        try:
            store.add_document(run_id, "diagnosis", documents["diagnosis"])
            if documents["telemetry"] is not None:
                store.add_document(run_id, "telemetry", documents["telemetry"])
            for whatif in documents["whatif"]:
                store.add_document(run_id, "whatif", whatif)
        except BaseException:
            store.finish_run(run_id, "failed")
            raise
        store.finish_run(run_id, "interrupted" if result.interrupted else "complete")
    return run_id


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
        raise BadInputError(f"run {run.id}: unreadable doctor documents ({exc})") from exc


def doctor(
    request: DoctorRequest,
    *,
    store_path: Path | None = DEFAULT_STORE_PATH,
    events: DoctorEvents | None = None,
    environment: Environment | None = None,
    launcher: Launcher | None = None,
) -> DoctorOutcome:
    """Diagnose ``request.script``, measure the what-ifs, store and report."""
    started = time.monotonic()
    env = environment or collect_environment()
    device_env = _validate(request, env)
    if store_path is not None:
        check_store_path(store_path)
    if request.report_path is not None:
        check_report_path(request.report_path)
    runner = launcher or Launcher(
        timeout_s=request.timeout_s,
        stall_s=request.stall_s,
        env={**request.env, **device_env},
        stdout=2 if request.quiet_stdout else None,
    )
    plan = DoctorPlan(
        request.script.resolve(), request.args, request.warmup, request.steps, request.what_if
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
    run_id = _store(store_path, request, result, env) if store_path is not None else None
    report_path = request.report_path
    if report_path is None:
        base = store_path.parent if store_path is not None else DEFAULT_STORE_PATH.parent
        report_path = base / "reports" / f"doctor-{run_id or 'unsaved'}.html"
        try:
            report_path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise BadInputError(f"cannot create {report_path.parent}: {exc.strerror}") from exc
    trace_path = report_path.with_name(report_path.stem + ".trace.json")
    _write_json(chrome_trace(result.profile, f"doctor: {request.script.name}"), trace_path)
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
        result,
        run_id,
        store_path if run_id else None,
        report_path,
        trace_path,
        time.monotonic() - started,
    )
