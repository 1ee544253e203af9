"""accelscope on a real GPU in one call: steps in priority order, a digest printed last.

On the lent GPU machine (benchmarks/gpu/README.md gives the exact device tool calls)::

    bash benchmarks/gpu/run.sh                      # every step, about 7.5 minutes
    bash benchmarks/gpu/run.sh --only bench,llm     # a subset, on the warm machine

Here, without a GPU, the same orchestration with ``--device cpu``, a small model and tiny
budgets (proves the plumbing, the subprocess handling and the digest)::

    PYTHONPATH=src .venv/bin/python benchmarks/gpu/validate.py --cpu

Each step runs accelscope's real CLI (``python -m accelscope.cli ...``) in subprocesses, each
with a timeout (its whole process group is killed past it); a failure is recorded and the run
goes on. A step runs only while its minimum time still fits the budget, else it is listed as
skipped, with why. The digest (device, driver, torch, the command, the figures, and each
prediction of shared/GPU-NOTES.md confirmed or refuted) is printed last and written to $OUT as
``digest.md`` (ready to paste into docs/BENCHMARKS.md) and ``digest.json``, beside
``validate.log`` (every command with its output) and ``raw.tar.gz`` (each command's JSON, the
results store). Step outcomes are also kept in the work directory, so a later ``--only`` call
on the same warm machine merges its steps into the digest with the earlier ones (marked so).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import functools
import io
import json
import math
import os
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tarfile
import threading
import time
import tomllib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, ConfigDict, PlainValidator, TypeAdapter, ValidationError

from accelscope.doctor.device_timeline import TimelineVerdict
from accelscope.doctor.profile import Profile
from accelscope.doctor.verdict import Diagnosis
from accelscope.doctor.whatif import WhatIfResult
from accelscope.documents import Ceilings, RooflineProfile
from accelscope.hardware.fingerprint import Environment
from accelscope.hardware.telemetry import Telemetry
from accelscope.llm.documents import LlmRun
from accelscope.load.summary import Scenario, TrialSummary
from accelscope.measurement.stats import process_ratio
from accelscope.result import Result, Status
from accelscope.serialise import dump

DocumentT = TypeVar("DocumentT")
"""A pydantic document, or one of accelscope's frozen dataclasses (:mod:`accelscope.serialise`)."""

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_sweep import SWEEPS, bench_sweep_step  # noqa: E402  (the default GPU sweep steps)

ROOT = HERE.parents[1]
DEFAULT_WORKDIR = Path("/tmp/accelscope-gpu-validation")
GPU_BUDGET_S = 450.0
"""Under 8 minutes with the wheels' install and the digest; the device call gets 540 s."""
CPU_BUDGET_S = 300.0
NOTES_COMMIT = "26fb54c"
"""The commit shared/GPU-NOTES.md reviewed: its predictions describe the code as it was there."""

CONFIRMED, REFUTED, NOT_CHECKED = "confirmed", "refuted", "not checked"
OK, FAILED, TIMEOUT, SKIPPED = "ok", "failed", "timeout", "skipped"


# --------------------------------------------------------------------------- records


@dataclass
class Check:
    """One prediction (GPU-NOTES.md) or documented claim, and what the run saw.

    ``verdict`` is about the *prediction as written*: a GPU-NOTES prediction of a problem that
    did not appear is ``refuted``."""

    id: str
    prediction: str
    observed: str
    verdict: str = NOT_CHECKED


@dataclass
class Table:
    title: str
    columns: list[str]
    rows: list[list[str]]


@dataclass
class Outcome:
    """What one step did: its status, its figures (one line and as data), tables, checks."""

    step: str
    status: str
    seconds: float = 0.0
    summary: str = ""
    figures: dict[str, Any] = field(default_factory=dict)
    tables: list[Table] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    commands: list[str] = field(default_factory=list)
    note: str = ""
    earlier: str = ""
    """Empty for this call's steps; the time of the call that ran it otherwise."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Outcome:
        data = dict(data)
        data["tables"] = [Table(**t) for t in data.get("tables", [])]
        data["checks"] = [Check(**c) for c in data.get("checks", [])]
        return cls(**data)


@dataclass(frozen=True)
class Step:
    """One step: it runs only when ``min_s`` still fits; its commands die past ``max_s``."""

    name: str
    title: str
    expect_s: float
    min_s: float
    max_s: float
    body: Callable[[Runner, float], Outcome]


# --------------------------------------------------------------------------- scheduler


def run_steps(
    steps: Sequence[Step],
    *,
    budget_s: float,
    execute: Callable[[Step, float], Outcome],
    selected: Iterable[str] | None = None,
    clock: Callable[[], float] = time.monotonic,
    began: float | None = None,
    on_done: Callable[[Outcome], None] | None = None,
) -> list[Outcome]:
    """Run ``steps`` in order within ``budget_s`` (counted from ``began``, default now).

    A step not in ``selected`` is left out; one whose ``min_s`` no longer fits is ``skipped``
    (said why); the others get ``min(max_s, time left)``. An exception in a step is a
    ``failed`` outcome: the run goes on."""
    start = clock() if began is None else began
    wanted = None if selected is None else set(selected)
    outcomes: list[Outcome] = []
    for step in steps:
        if wanted is not None and step.name not in wanted:
            continue
        left = budget_s - (clock() - start)
        if left < step.min_s:
            outcome = Outcome(
                step.name,
                SKIPPED,
                note=f"needs {step.min_s:.0f} s, {max(left, 0):.0f} s of the "
                f"{budget_s:.0f} s budget left",
            )
        else:
            allowed = min(step.max_s, left)
            t0 = clock()
            try:
                outcome = execute(step, allowed)
            except Exception as exc:  # noqa: BLE001 - a broken step is recorded, never fatal
                outcome = Outcome(step.name, FAILED, note=f"{type(exc).__name__}: {exc}")
            outcome.seconds = round(clock() - t0, 1)
        outcomes.append(outcome)
        if on_done is not None:
            on_done(outcome)
    return outcomes


# --------------------------------------------------------------------------- digest


def build_digest(outcomes: Sequence[Outcome], meta: dict[str, Any]) -> dict[str, Any]:
    """The digest as data: the meta, each step, and every check in step order."""
    checks = [asdict(c) | {"step": o.step} for o in outcomes for c in o.checks]
    counts: dict[str, int] = {}
    for c in checks:
        counts[c["verdict"]] = counts.get(c["verdict"], 0) + 1
    statuses: dict[str, int] = {}
    for o in outcomes:
        statuses[o.status] = statuses.get(o.status, 0) + 1
    return {
        "meta": meta,
        "steps": [o.to_dict() for o in outcomes],
        "checks": checks,
        "verdicts": counts,
        "statuses": statuses,
    }


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _md_table(columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(_cell(c) for c in columns) + " |"]
    lines.append("|" + "---|" * len(columns))
    lines += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in rows]
    return lines


def render_markdown(digest: dict[str, Any], tables: bool = True) -> str:
    """The digest as markdown, ready for docs/BENCHMARKS.md's GPU section (``tables=False``:
    without the steps' detail tables, short enough for the device reply's output tail)."""
    meta = digest["meta"]
    lines = [f"## GPU validation: {meta.get('device', 'unknown device')} ({meta.get('date', '?')})"]
    lines.append("")
    machine = ", ".join(
        str(meta[k])
        for k in ("device", "device_detail", "driver", "cuda", "torch", "python")
        if meta.get(k)
    )
    lines.append(f"Machine: {machine}.")
    lines.append(
        f"Command: `{meta.get('command', '?')}` (accelscope {meta.get('commit', '?')}; budget "
        f"{meta.get('budget_s', '?')} s, wall {meta.get('wall_s', '?')} s)."
    )
    statuses = ", ".join(f"{n} {s}" for s, n in sorted(digest.get("statuses", {}).items()))
    verdicts = ", ".join(f"{n} {v}" for v, n in sorted(digest.get("verdicts", {}).items()))
    lines.append(f"Steps: {statuses or 'none'}. Checks: {verdicts or 'none'}.")
    lines.append("")
    rows = []
    for step in digest["steps"]:
        status = step["status"] + (f" (earlier call, {step['earlier']})" if step["earlier"] else "")
        what = step["summary"] or step["note"]
        if step["summary"] and step["note"]:
            what += f" ({step['note']})"
        rows.append([step["step"], status, f"{step['seconds']:.0f} s", what])
    lines += _md_table(["step", "status", "time", "figures"], rows)
    for step in digest["steps"] if tables else []:
        for table in step.get("tables", []):
            lines += ["", f"**{table['title']}**", ""]
            lines += _md_table(table["columns"], table["rows"])
    if digest["checks"]:
        lines += [
            "",
            f"**Predictions and claims** (GPU-NOTES.md's reviewed the code at {NOTES_COMMIT}: "
            "*refuted* means the predicted problem did not appear; §3 rows are its expected "
            "figures; *doc* rows are what the docs claim now)",
            "",
        ]
        lines += _md_table(
            ["id", "step", "prediction", "observed", "verdict"],
            (
                [c["id"], c["step"], c["prediction"], c["observed"], f"**{c['verdict']}**"]
                for c in digest["checks"]
            ),
        )
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- helpers


def dig(data: Any, *path: Any, default: Any = None) -> Any:
    """``data[path[0]][path[1]]...``, or ``default`` where a key or index is missing."""
    for key in path:
        found = isinstance(data, dict) and key in data
        found = found or (isinstance(data, list) and isinstance(key, int))
        if not found or (isinstance(data, list) and not -len(data) <= key < len(data)):
            return default
        data = data[key]
    return data


def number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def si(value: Any, unit: str, digits: int = 3) -> str:
    """``7.9e14, "FLOP/s"`` -> ``790 TFLOP/s``; "n/a" for a missing value."""
    x = number(value)
    if x is None:
        return "n/a"
    for factor, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= factor:
            return f"{x / factor:.{digits}g} {prefix}{unit}"
    return f"{x:.{digits}g} {unit}"


def share(value: Any) -> str:
    x = number(value)
    return "n/a" if x is None else f"{x:.0%}"


def ratio_text(value: Any) -> str:
    x = number(value)
    return "n/a" if x is None else f"{x:.2f}x"


def verdict(held: bool | None) -> str:
    return NOT_CHECKED if held is None else (CONFIRMED if held else REFUTED)


def in_range(value: Any, low: float, high: float) -> bool | None:
    x = number(value)
    return None if x is None else low <= x <= high


def parse_json(text: str) -> Any:
    """The JSON document a ``--json`` command printed (leading noise tolerated)."""
    text = text.strip()
    if not text:
        return None
    with contextlib.suppress(ValueError):
        return json.loads(text)
    for line in reversed(text.splitlines()):  # facts.py: one object on the last line
        with contextlib.suppress(ValueError):
            return json.loads(line)
    start = text.find("{")
    if start >= 0:
        with contextlib.suppress(ValueError):
            return json.loads(text[start:])
    return None


class ResultsJson(BaseModel):
    """What ``bench --json`` and ``measure --json`` print: the CLI wraps its results (each a
    stored :class:`~accelscope.result.Result`, read back with ``Result.from_dict``) in a plain
    object, so only the wrapper is declared here."""

    model_config = ConfigDict(extra="ignore")

    verdict: str | None = None
    wall_time_s: float | None = None
    results: list[dict[str, Any]]

    def typed(self) -> list[Result]:
        return [Result.from_dict(data) for data in self.results]


def _read_back(read: Callable[[dict[str, Any]], Any]) -> PlainValidator:
    """Validate a field with accelscope's own reader of that stored document (a hand-written
    ``from_dict``): what is wrong with it becomes the field's error, so :meth:`Command.document`
    names the field and why."""

    def validate(data: Any) -> Any:
        if not isinstance(data, dict):
            raise ValueError(f"an object was expected, not {type(data).__name__}")
        try:
            return read(data)
        except ValidationError as error:
            problems = error.errors()
            where = ".".join(str(part) for part in problems[0]["loc"]) if problems else ""
            message = problems[0]["msg"] if problems else str(error)
            raise ValueError(f"{where}: {message}" if where else message) from None
        except KeyError as missing:
            key = missing.args[0] if missing.args else "?"
            raise ValueError(f"{key}: Field required") from None
        except (TypeError, AttributeError, IndexError) as error:
            raise ValueError(str(error)) from None

    return PlainValidator(validate)


ProfileJson = Annotated[Profile, _read_back(Profile.from_dict)]
"""The doctor's :class:`~accelscope.doctor.profile.Profile`, as ``Profile.from_dict`` reads it."""
TelemetryJson = Annotated[Telemetry, _read_back(Telemetry.from_dict)]
"""A run's :class:`~accelscope.hardware.telemetry.Telemetry` (stored columnar by ``to_dict``)."""
TrialJson = Annotated[TrialSummary, _read_back(TrialSummary.from_dict)]
"""A ``load`` trial's :class:`~accelscope.load.summary.TrialSummary` (stored by ``to_dict``)."""


class DoctorDiagnosisJson(BaseModel):
    """The ``diagnosis`` store document inside ``doctor --json`` (``DoctorResult.documents``):
    the :class:`~accelscope.doctor.verdict.Diagnosis` and the baseline's profile."""

    model_config = ConfigDict(extra="ignore")

    script: str
    args: list[str]
    diagnosis: Diagnosis
    profile: ProfileJson
    best: str | None = None
    recommendation: str = ""
    telemetry_steps_at_s: float | None = None


class DoctorJson(BaseModel):
    """What ``doctor SCRIPT --json`` prints: the CLI wraps ``DoctorResult.documents()`` (the
    ``diagnosis``, ``telemetry`` and ``whatif`` store documents) with the run's bottleneck,
    best what-if and recommendation in a plain object, so only the wrapper is declared here."""

    model_config = ConfigDict(extra="ignore")

    bottleneck: str
    best: str | None = None
    recommendation: str = ""
    diagnosis: DoctorDiagnosisJson
    telemetry: TelemetryJson | None
    whatif: list[WhatIfResult]


class TraceRankJson(BaseModel):
    """One rank of ``doctor --trace --json`` (``TraceDiagnosis.document``): its
    :class:`~accelscope.doctor.device_timeline.TimelineVerdict`."""

    model_config = ConfigDict(extra="ignore")

    rank: str
    verdict: TimelineVerdict


class TraceJson(BaseModel):
    """What ``doctor --trace FILE --json`` prints: a plain object around each rank's verdict."""

    model_config = ConfigDict(extra="ignore")

    mode: str
    slowest: str
    ranks: list[TraceRankJson]


class AuditDeviceJson(BaseModel):
    """One device of ``audit --json``: ``DeviceFigures.to_dict`` (no reader of its own), the
    figures read here with the types :class:`~accelscope.audit.analysis.DeviceFigures` gives
    them."""

    model_config = ConfigDict(extra="ignore")

    model: str
    hours: dict[str, float]
    not_measured: dict[str, str]
    power_mean_w: float | None
    sm_p95: float | None
    tensor_median: float | None
    dram_median: float | None
    notes: list[str]


class AuditJson(BaseModel):
    """What ``audit --json`` prints: the plain ``audit_document`` (with the run id and report
    path); only its source and devices are read here."""

    model_config = ConfigDict(extra="ignore")

    source: str
    devices: list[AuditDeviceJson]


class LoadJson(BaseModel):
    """What ``load --json`` prints: a plain object around the trials (each a stored
    :class:`~accelscope.load.summary.TrialSummary`, read back with ``TrialSummary.from_dict``)."""

    model_config = ConfigDict(extra="ignore")

    model: str
    label: str
    scenario: Scenario
    trials: list[TrialJson]


def items_per_s(result: Result) -> float | None:
    """A result's throughput: items per call over the median sample."""
    measurement = result.measurement
    if measurement is None or not measurement.samples_s:
        return None
    median = statistics.median(measurement.samples_s)
    return measurement.items_per_call / median if median > 0 else None


def numerics(result: Result | None) -> dict[str, str]:
    """What fp32 meant where ``result`` ran (``cudnn_conv_fp32``: ``ieee`` or ``tf32`` ...)."""
    return dict(result.environment.numerics) if result is not None else {}


def first_result(command: Command) -> Result | None:
    """The first result a ``measure --json`` printed (``None``: none printed, or the command
    failed)."""
    doc = command.document(ResultsJson)
    results = doc.typed() if doc is not None else []
    return results[0] if results else None


def opts(**flags: Any) -> list[str]:
    """CLI flags from keywords: ``opts(measure_budget="3s", json=True)`` is
    ``["--measure-budget", "3s", "--json"]``; None and False leave a flag out."""
    out: list[str] = []
    for key, value in flags.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            out.append(flag)
        elif value is not None and value is not False:
            out += [flag, str(value)]
    return out


def last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1].strip()[:300] if lines else ""


# --------------------------------------------------------------------------- runner


@dataclass
class Command:
    argv: list[str]
    rc: int | None
    seconds: float
    stdout: str
    stderr: str
    timed_out: bool = False
    gpu_memory_mib: float | None = None
    invalid: str = ""
    """Why stdout is not the document :meth:`document` was asked for ("" when it is)."""

    @property
    def ok(self) -> bool:
        return self.rc == 0 and not self.timed_out

    def json(self) -> Any:
        return parse_json(self.stdout)

    def document(self, model: type[DocumentT], *, failed_too: bool = False) -> DocumentT | None:
        """The ``--json`` document on stdout as accelscope's own ``model`` (validated once,
        here); ``None`` when the command failed (unless ``failed_too``: bench prints what it
        measured before a failure) or printed none that validates, and :meth:`why` says
        which (a failed command's exit where it printed no such document)."""
        self.invalid = ""
        if not self.ok and not failed_too:
            return None
        text = self.stdout.strip()
        adapter = TypeAdapter(model)
        try:
            return adapter.validate_json(text)
        except ValidationError as first:
            error = first
        found = parse_json(text)  # leading noise before the document
        if isinstance(found, dict):
            try:
                return adapter.validate_python(found)
            except ValidationError as again:
                error = again
        if not self.ok:  # failed without a document: its exit says why
            return None
        problems = error.errors()
        where = ".".join(str(part) for part in problems[0]["loc"]) if problems else ""
        message = problems[0]["msg"] if problems else str(error)
        self.invalid = f"not {model.__name__} JSON: {where or 'the document'}: {message}"
        return None

    def why(self) -> str:
        if self.invalid:
            return self.invalid
        if self.timed_out:
            return f"killed at its {self.seconds:.0f} s limit"
        return f"exit {self.rc}: {last_line(self.stderr) or last_line(self.stdout) or 'no output'}"


@dataclass(frozen=True)
class Profile:
    """Sizes for a device: the real GPU run, or the CPU dry run (small and short)."""

    device: str
    model: str
    batches: tuple[int, ...]
    precisions: tuple[str, ...]
    ceilings_budget: str
    doctor_steps: tuple[int, int]
    starved_args: tuple[str, ...]
    starved_whatif: str
    healthy_args: tuple[str, ...]
    bench_budget: str
    accuracy_samples: int
    roofline_batch: int
    roofline_ceilings_budget: str
    measure_budget: str
    audit_s: int
    llm_shape: dict[str, int]
    llm_args: tuple[str, ...]
    load_args: tuple[str, ...]


GPU = Profile(
    device="cuda",
    model="resnet50",
    batches=(8, 64),
    precisions=("fp32", "bf16", "fp16"),
    ceilings_budget="60s",
    doctor_steps=(20, 5),
    starved_args=(),
    starved_whatif="workers,cache",
    healthy_args=(),
    bench_budget="3s",
    accuracy_samples=128,
    roofline_batch=64,
    roofline_ceilings_budget="45s",
    measure_budget="4s",
    audit_s=20,
    # about 100 M parameters: 8 layers of hidden 1024, GQA 16/4 heads, MLP 2816
    llm_shape={"hidden": 1024, "layers": 8, "heads": 16, "kv_heads": 4, "intermediate": 2816},
    llm_args=("--requests", "16", "--input-tokens", "128", "--output-tokens", "64"),
    load_args=("--min-duration", "5s", "--min-queries", "2000"),
)
CPU = Profile(
    device="cpu",
    model="digits-cnn",
    batches=(8,),
    precisions=("fp32", "bf16"),
    ceilings_budget="4s",
    doctor_steps=(4, 1),
    starved_args=("--side", "16", "--batch", "8"),
    starved_whatif="workers",
    healthy_args=("--width", "64", "--depth", "3", "--dim", "32", "--batch", "32"),
    bench_budget="1s",
    accuracy_samples=32,
    roofline_batch=8,
    roofline_ceilings_budget="4s",
    measure_budget="1s",
    audit_s=3,
    llm_shape={},
    llm_args=("--requests", "4", "--input-tokens", "32", "--output-tokens", "8"),
    load_args=("--min-duration", "1s", "--min-queries", "100"),
)


class Runner:
    """Runs commands for the steps: process groups, timeouts, the log, raw outputs."""

    def __init__(
        self,
        profile: Profile,
        workdir: Path,
        log: io.TextIOBase,
        outcomes: dict[str, Outcome] | None = None,
    ) -> None:
        self.profile = profile
        self.workdir = workdir
        self.store = workdir / "results.db"
        self.raw = workdir / "raw" / datetime.now(UTC).strftime("call-%H%M%S")
        self.raw.mkdir(parents=True, exist_ok=True)
        self.log = log
        self.outcomes = outcomes if outcomes is not None else {}
        self.deadline = float("inf")
        self._commands = 0
        self.env = dict(os.environ)
        paths = [str(ROOT / "src"), *filter(None, self.env.get("PYTHONPATH", "").split(":"))]
        self.env["PYTHONPATH"] = ":".join(dict.fromkeys(paths))
        self.env["PYTHONUNBUFFERED"] = "1"
        self.env.setdefault("COLUMNS", "160")

    @property
    def gpu(self) -> bool:
        return self.profile.device != "cpu"

    def figure(self, step: str, key: str) -> Any:
        """A figure of an earlier step (this call's, or a merged earlier call's)."""
        outcome = self.outcomes.get(step)
        return None if outcome is None else outcome.figures.get(key)

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def cli(self, *args: str, timeout_s: float | None = None, **kw: Any) -> Command:
        return self.command([sys.executable, "-m", "accelscope.cli", *args], timeout_s, **kw)

    def python(self, *args: str, timeout_s: float | None = None, **kw: Any) -> Command:
        return self.command([sys.executable, *args], timeout_s, **kw)

    def command(
        self,
        argv: list[str],
        timeout_s: float | None = None,
        *,
        watch_gpu: bool = False,
        label: str = "",
    ) -> Command:
        """Run ``argv`` in its own process group, killed (the whole group) past
        ``timeout_s`` or the step's deadline, whichever is first."""
        limit = min(timeout_s if timeout_s is not None else float("inf"), self.left())
        self._commands += 1
        name = f"{self._commands:02d}-{label or Path(argv[3] if len(argv) > 3 else argv[-1]).name}"
        shown = shlex.join(argv).replace(sys.executable, "python3")
        if limit <= 1:
            result = Command(argv, None, 0.0, "", "not run: the step's time was spent", True)
            self._record(name, shown, result)
            return result
        began = time.monotonic()
        process = subprocess.Popen(
            argv,
            cwd=ROOT,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            errors="replace",
            start_new_session=True,
        )
        watcher = GpuMemoryWatch(process.pid) if watch_gpu and self.gpu else None
        timed_out = False
        try:
            stdout, stderr = process.communicate(timeout=limit)
        except subprocess.TimeoutExpired:
            timed_out = True
            kill_group(process)
            stdout, stderr = process.communicate()
        finally:
            if watcher is not None:
                watcher.stop()
        result = Command(
            argv,
            None if timed_out else process.returncode,
            round(time.monotonic() - began, 1),
            stdout,
            stderr,
            timed_out,
            watcher.peak_mib if watcher is not None else None,
        )
        self._record(name, shown, result)
        return result

    def _record(self, name: str, shown: str, result: Command) -> None:
        status = "killed at its limit" if result.timed_out else f"exit {result.rc}"
        self.log.write(f"\n$ {shown}\n# {status}, {result.seconds} s\n")
        if result.stdout.strip():
            text = result.stdout
            self.log.write("## stdout" + (" (first 3000 chars)" if len(text) > 3000 else ""))
            self.log.write("\n" + text[:3000].rstrip() + "\n")
        if result.stderr.strip():
            text = result.stderr
            self.log.write("## stderr" + (" (last 4000 chars)" if len(text) > 4000 else ""))
            self.log.write("\n" + text[-4000:].rstrip() + "\n")
        self.log.flush()
        (self.raw / f"{name}.out").write_text(result.stdout, encoding="utf-8")
        if result.stderr.strip():
            (self.raw / f"{name}.err").write_text(result.stderr[-20000:], encoding="utf-8")

    def record_command(self, outcome: Outcome, result: Command) -> None:
        outcome.commands.append(shlex.join(result.argv).replace(sys.executable, "python3"))


def kill_group(process: subprocess.Popen[str]) -> None:
    """SIGTERM the process group, then SIGKILL what is left after 5 s."""
    for sig, wait_s in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, sig)
        try:
            process.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


class GpuMemoryWatch:
    """Polls ``nvidia-smi`` once a second while a command runs: the peak GPU memory (MiB) of
    the processes of its process group, and the peak rise of the device's used memory over
    what was used when the watch began (the fallback where the pids nvidia-smi shows are not
    this machine's, as in some containers). Nothing when nvidia-smi is missing."""

    def __init__(self, pgid: int) -> None:
        self.pgid = pgid
        self.group_peak_mib: float | None = None
        self.device_rise_mib: float | None = None
        self._base: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        if shutil.which("nvidia-smi"):
            self._base = self._device_used()
            self._thread.start()

    @property
    def peak_mib(self) -> float | None:
        return self.group_peak_mib or self.device_rise_mib

    @staticmethod
    def _query(*args: str) -> str:
        try:
            return subprocess.run(
                ["nvidia-smi", *args, "--format=csv,noheader,nounits"],
                capture_output=True,
                text=True,
                timeout=10,
                check=False,
            ).stdout
        except (OSError, subprocess.SubprocessError):
            return ""

    def _device_used(self) -> float | None:
        with contextlib.suppress(ValueError, IndexError):
            return float(self._query("--query-gpu=memory.used").split()[0])
        return None

    def _loop(self) -> None:
        while not self._stop.wait(1.0):
            total = 0.0
            for line in self._query("--query-compute-apps=pid,used_memory").splitlines():
                pid_text, _, used = line.partition(",")
                with contextlib.suppress(ValueError, ProcessLookupError, PermissionError):
                    if os.getpgid(int(pid_text.strip())) == self.pgid:
                        total += float(used.strip())
            if total:
                self.group_peak_mib = max(self.group_peak_mib or 0.0, total)
            used_now = self._device_used()
            if used_now is not None and self._base is not None and used_now > self._base:
                self.device_rise_mib = max(self.device_rise_mib or 0.0, used_now - self._base)

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=15)


# --------------------------------------------------------------------------- steps


def _datasheet(device_name: str) -> dict[str, Any]:
    """GPU-NOTES §3's expected ranges for this GPU (H100 SXM, else H200's where different)."""
    h200 = "H200" in device_name
    return {
        "h200": h200,
        "copy_tb_s": (3.8, 4.4) if h200 else (2.6, 3.1),
        "hbm_datasheet_tb_s": 4.8 if h200 else 3.35,
    }


def step_facts(run: Runner, allowed: float) -> Outcome:
    out = Outcome("facts", OK)
    args = [str(HERE / "facts.py"), "--discovery"]
    result = run.python(*args, timeout_s=allowed, label="facts")
    run.record_command(out, result)
    facts = result.json()
    if not isinstance(facts, dict):
        out.status, out.note = FAILED, result.why()
        return out
    if not result.ok:
        out.note = result.why()
    return summarise_facts(out, facts)


def summarise_facts(out: Outcome, facts: dict[str, Any]) -> Outcome:
    """Figures and checks from facts.py's JSON (pure: unit-tested)."""
    device = dig(facts, "device", "name") or dig(facts, "nvml", "name") or "no CUDA device"
    tf32 = facts.get("tf32") if isinstance(facts.get("tf32"), dict) else {}
    default_err = tf32.get("rel_err_default", {})
    ceilings = facts.get("ceilings") if isinstance(facts.get("ceilings"), dict) else {}
    nvml = facts.get("nvml") if isinstance(facts.get("nvml"), dict) else {}
    gpm = nvml.get("gpm") if isinstance(nvml.get("gpm"), dict) else {}
    metrics = gpm.get("metrics_under_bf16_load") or {}
    refused = {k: v["return_code"] for k, v in metrics.items() if v.get("return_code")}
    source = nvml.get("accelscope_nvml_source") or {}
    sample = source.get("sample_under_bf16_load") or {}
    clocks = {
        k: dig(facts, "device", f"{k}_present")
        for k in ("clock_rate", "memory_clock_rate", "memory_bus_width")
    }
    out.figures = {
        "device": device,
        "capability": dig(facts, "device", "capability"),
        "device_count": dig(facts, "device", "device_count"),
        "sms": dig(facts, "device", "sms"),
        "memory_bytes": dig(facts, "device", "total_memory_bytes"),
        "l2_cache_bytes": dig(facts, "device", "l2_cache_bytes"),
        "driver": nvml.get("driver"),
        "cuda_driver": nvml.get("cuda_driver"),
        "torch": facts.get("torch"),
        "torch_cuda": facts.get("torch_cuda"),
        "python": facts.get("python"),
        "clock_fields_present": clocks,
        "tf32_default_flags": tf32.get("default_flags"),
        "rel_err_default": default_err,
        "rel_err_tf32_off": tf32.get("rel_err_tf32_off"),
        "rel_err_tf32_on": tf32.get("rel_err_tf32_on"),
        "copy_bytes_per_s": ceilings.get("copy_bytes_per_s"),
        "bf16_matmul_flops_per_s": ceilings.get("bf16_matmul_flops_per_s"),
        "gpm_supported": gpm.get("supported"),
        "gpm_metrics": metrics,
        "gpm_error": gpm.get("error"),
        "nvml_error": nvml.get("error"),
        "accelscope_sm_status": source.get("sm_status"),
        "accelscope_notes": source.get("notes"),
        "accelscope_sample": sample,
        "energy": nvml.get("energy"),
        "discovery": facts.get("discovery"),
    }
    conv, mm = number(default_err.get("conv")), number(default_err.get("matmul"))
    energy = nvml.get("energy") or {}
    out.summary = "; ".join(
        [
            f"{device}, driver {nvml.get('driver', 'n/a')}, CUDA {nvml.get('cuda_driver', 'n/a')}"
            f" (torch {facts.get('torch')} / cu {facts.get('torch_cuda')})",
            f"default fp32 rel. error: conv {_sci(conv)}, matmul {_sci(mm)}",
            f"copy {si(ceilings.get('copy_bytes_per_s'), 'B/s')}, bf16 8192^3 "
            f"{si(ceilings.get('bf16_matmul_flops_per_s'), 'FLOP/s')}",
            f"GPM {'supported' if gpm.get('supported') else 'not supported'}"
            + (f", refused {refused}" if refused else ""),
            f"energy counter period {_ms(energy.get('update_period_s'))}",
        ]
    )
    if facts.get("cuda_available") is not True:
        out.summary = f"no CUDA device (torch {facts.get('torch')}); NVML: " + str(
            nvml.get("error", "n/a")
        )
    out.checks.append(
        Check(
            "premise TF32",
            "cuDNN runs fp32 convolutions on TF32 by default (rel. error ~3e-4..1e-3) while "
            "matmuls stay IEEE (~1e-6)",
            f"default conv {_sci(conv)}, matmul {_sci(mm)}; flags "
            f"{json.dumps(tf32.get('default_flags'))}",
            verdict(None if conv is None or mm is None else conv > 1e-4 and mm < 1e-5),
        )
    )
    supported = gpm.get("supported")
    core = ("SM_UTIL", "ANY_TENSOR_UTIL", "DRAM_BW_UTIL", "GRAPHICS_UTIL")
    core_refused = [m for m in core if m in refused]
    out.checks.append(
        Check(
            "premise GPM / M2",
            "GPM is absent or refuses metrics under the machine's VM (unverified)",
            (
                "GPM supported; "
                + (f"refused: {refused}" if refused else "every metric answered (return 0)")
                + f"; accelscope: {source.get('sm_status', 'n/a')}"
                + (f", SM {sample.get('sm_active_percent')} %" if sample else "")
                + (f", tensor {sample.get('tensor_active_percent')} %" if sample else "")
                if supported
                else f"not supported ({gpm.get('error') or nvml.get('error') or 'no GPM'})"
            ),
            verdict(None if supported is None else (not supported) or bool(core_refused)),
        )
    )
    present = [k for k, v in clocks.items() if v]
    out.checks.append(
        Check(
            "M5 (fields)",
            "torch 2.11+cu130 lacks clock_rate / memory_clock_rate (removed in CUDA 13)",
            f"present: {present or 'none'}",
            verdict(None if clocks["clock_rate"] is None else not clocks["clock_rate"]),
        )
    )
    found = facts.get("discovery")
    if isinstance(found, dict) and "child_holds_a_context" in found:
        out.checks.append(
            Check(
                "doc discovery",
                "accelscope's GPU discovery holds no CUDA context (nvidia-smi lists no process)",
                f"child listed: {found['child_holds_a_context']}; "
                f"saw {found.get('gpus_seen')} GPU(s)",
                verdict(not found["child_holds_a_context"]),
            )
        )
    return out


def _sci(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1e}"


def _ms(x: Any) -> str:
    v = number(x)
    return "n/a" if v is None else f"{v * 1e3:.0f} ms"


def step_env(run: Runner, allowed: float) -> Outcome:
    out = Outcome("env", OK)
    deadline = time.monotonic() + allowed
    result = run.cli("env", "--json", "--store", str(run.store), timeout_s=allowed)
    run.record_command(out, result)
    env = result.document(Environment)
    text = run.cli("env", "--store", str(run.store), timeout_s=deadline - time.monotonic())
    run.record_command(out, text)
    if env is None:
        out.status, out.note = FAILED, result.why()
        return out
    fingerprint = env.fingerprint()  # what env --json prints beside the fields, recomputed
    out.figures = {
        "fingerprint": fingerprint,
        "gpus": [dump(gpu) for gpu in env.gpus],
        "numerics": dict(env.numerics),
        "cpu": env.cpu.model_name,
        "cores": env.cpu.logical_cores,
    }
    gpu = env.gpus[0] if env.gpus else None
    out.summary = (
        f"{gpu.name}, driver {gpu.driver_version}, CUDA {gpu.cuda_runtime}, cc "
        f"{gpu.compute_capability}; fingerprint {fingerprint}; {env.cpu.logical_cores} CPUs"
        if gpu is not None
        else f"no GPU seen; fingerprint {fingerprint}"
    )
    if gpu is not None and text.ok:
        shown = re.search(r"sm_[0-9.]+", text.stdout)
        out.checks.append(
            Check(
                "L1",
                "env prints sm_9.0 (it should print sm_90)",
                f"prints {shown.group(0) if shown else 'no sm_ field'}",
                verdict(None if shown is None else "." in shown.group(0)),
            )
        )
    return out


def step_ceilings(run: Runner, allowed: float) -> Outcome:
    out = Outcome("ceilings", OK)
    p = run.profile
    result = run.cli(
        "ceilings",
        *opts(device=p.device, budget=p.ceilings_budget, refresh=True, json=True, store=run.store),
        timeout_s=allowed,
    )
    run.record_command(out, result)
    doc = result.document(Ceilings)
    if doc is None:
        out.status, out.note = FAILED, result.why()
        return out
    return summarise_ceilings(out, doc, device_name=str(run.figure("facts", "device") or ""))


def _family(doc: Ceilings, dtype: str) -> str:
    """The kernel family of ``dtype``'s peak ("" when none was searched)."""
    peak = doc.peaks.get(dtype)
    return peak.family if peak is not None else ""


def summarise_ceilings(out: Outcome, doc: Ceilings, device_name: str = "") -> Outcome:
    name = device_name or doc.device_name
    sheet = _datasheet(name)
    measured: dict[str, float] = dict(doc.matmul_flops_per_s)
    theoretical: dict[str, float] = dict(doc.theoretical.flops_per_s)

    def rate(table: dict[str, float], dtype: str) -> float | None:
        return table.get(dtype)

    rows = []
    for dtype in ("bf16", "fp16", "tf32", "fp32", "int8", "fp8"):
        if dtype not in measured and dtype not in theoretical:
            continue
        value, peak = rate(measured, dtype), rate(theoretical, dtype)
        unit = "OP/s" if dtype == "int8" else "FLOP/s"
        rows.append(
            [
                dtype,
                si(value, unit),
                si(peak, unit),
                share(None if value is None or not peak else value / peak),
                _family(doc, dtype),
            ]
        )
    bandwidth = doc.bandwidth_bytes_per_s
    bw_peak = doc.theoretical.bandwidth_bytes_per_s
    detail = dict(doc.bandwidth_detail_bytes_per_s)
    rows.append(
        [
            "memory",
            si(bandwidth, "B/s")
            + (
                " (" + ", ".join(f"{k} {si(v, 'B/s')}" for k, v in detail.items()) + ")"
                if detail
                else ""
            ),
            si(bw_peak, "B/s"),
            share(None if bandwidth is None or not bw_peak else bandwidth / bw_peak),
            "",
        ]
    )
    out.tables.append(
        Table(
            f"ceilings --device {doc.device} ({doc.device_name})",
            ["row", "measured", "datasheet", "share", "kernel"],
            rows,
        )
    )
    out.figures = {
        "device_name": doc.device_name,
        "environment_fingerprint": doc.environment_fingerprint,
        "measured_at": doc.measured_at,
        "matmul_flops_per_s": measured,
        "theoretical_flops_per_s": theoretical,
        "bandwidth_bytes_per_s": bandwidth,
        "bandwidth_detail": detail,
        "theoretical_bandwidth": bw_peak,
        "fp32_family": _family(doc, "fp32") or None,
        "derivation": doc.theoretical.derivation,
        "search_s": doc.search_s,
        "notes": list(doc.notes),
    }
    out.summary = (
        ", ".join(
            f"{d} {si(measured[d], 'FLOP/s')}"
            for d in ("bf16", "fp16", "tf32", "fp32")
            if d in measured
        )
        + f"; memory {si(bandwidth, 'B/s')}"
    )
    if doc.device == "cpu":
        return out
    fp32 = rate(measured, "fp32")
    out.checks.append(
        Check(
            "H2",
            "the fp32 ceiling is a TF32 convolution rate (150-400 TFLOP/s), above the 67 "
            "TFLOP/s datasheet",
            f"fp32 {si(fp32, 'FLOP/s')} ({_family(doc, 'fp32') or None}); tf32 row "
            f"{si(rate(measured, 'tf32'), 'FLOP/s')}",
            verdict(None if fp32 is None else fp32 > 80e12),
        )
    )
    bf16 = rate(measured, "bf16")
    out.checks.append(
        Check(
            "L4 / §3",
            "bf16 (and fp16) ceiling 600-790 TFLOP/s",
            f"bf16 {si(bf16, 'FLOP/s')}, fp16 {si(rate(measured, 'fp16'), 'FLOP/s')}",
            verdict(in_range(None if bf16 is None else bf16 / 1e12, 600, 800)),
        )
    )
    peak = rate(theoretical, "bf16")
    out.checks.append(
        Check(
            "M5 (peak)",
            "theoretical bf16 is 'unknown' (no clocks) or 1.07 PFLOP/s from the boost clock, "
            "not the 989 TFLOP/s datasheet",
            f"theoretical bf16 {si(peak, 'FLOP/s')}",
            verdict(peak is None or peak > 1.02e15),
        )
    )
    low, high = sheet["copy_tb_s"]
    out.checks.append(
        Check(
            "§3 bandwidth",
            f"copy/triad {low}-{high} TB/s vs {sheet['hbm_datasheet_tb_s']} datasheet",
            f"{si(bandwidth, 'B/s')} ("
            f"{share(None if not bw_peak or bandwidth is None else bandwidth / bw_peak)}"
            " of the datasheet)",
            verdict(in_range(None if bandwidth is None else bandwidth / 1e12, low, high)),
        )
    )
    int8 = rate(measured, "int8")
    if int8 is not None:
        out.checks.append(
            Check(
                "§3 int8",
                "int8 0.9-1.6 POP/s",
                si(int8, "OP/s"),
                verdict(in_range(int8 / 1e15, 0.9, 1.6)),
            )
        )
    return out


def _doctor(run: Runner, allowed: float, name: str, script: str, whatif: str) -> Outcome:
    out = Outcome(name, OK)
    p = run.profile
    steps, warmup = p.doctor_steps
    args = p.starved_args if "starved" in script else p.healthy_args
    result = run.cli(
        "doctor",
        str(HERE / script),
        *opts(device=p.device, steps=steps, warmup=warmup, what_if=whatif, timeout="120s"),
        *opts(stall_timeout="60s", json=True, store=run.store),
        *(("--", *args) if args else ()),
        timeout_s=allowed,
        label=name,
    )
    run.record_command(out, result)
    doc = result.document(DoctorJson, failed_too=True)
    if doc is None:
        out.status, out.note = FAILED, result.why()
        return out
    if not result.ok:
        out.note = result.why()
    return summarise_doctor(out, doc, gpu=run.gpu)


def summarise_doctor(out: Outcome, doc: DoctorJson, gpu: bool = True) -> Outcome:
    diagnosis = doc.diagnosis.diagnosis
    profile = doc.diagnosis.profile
    findings = {f.rule: f for f in diagnosis.findings}
    fired = [r for r, f in findings.items() if f.status == "fired"]
    whatifs = {w.name: w for w in doc.whatif if w.name != "baseline"}
    idle = findings.get("device-idle")
    bound = findings.get("device-bound")
    evidence = (bound.evidence if bound else {}) or (idle.evidence if idle else {}) or {}
    shares = dict(diagnosis.breakdown.shares)
    out.figures = {
        "bottleneck": doc.bottleneck,
        "headline": diagnosis.headline,
        "fired": fired,
        "findings": {
            r: {"status": f.status, "summary": f.summary, "share": f.share}
            for r, f in findings.items()
        },
        "shares": shares,
        "step_median_s": diagnosis.breakdown.step_median_s,
        "items_per_s": dump(diagnosis.breakdown.items_per_s),
        "gpu_idle_share": idle.share if idle is not None and idle.status != "n/a" else None,
        "gpu_evidence": evidence,
        "device_trace": (
            profile.device_trace.status if profile.device_trace is not None else "not recorded"
        ),
        "gpu_memory": dump(profile.gpu_memory) if profile.gpu_memory is not None else None,
        "telemetry": doc.telemetry.sm_activity_status if doc.telemetry is not None else None,
        "whatif": {
            n: {
                "status": w.status,
                "speedup": w.speedup,
                "low": w.speedup_low,
                "high": w.speedup_high,
                "reason": w.reason,
            }
            for n, w in whatifs.items()
        },
        "recommendation": doc.recommendation,
    }
    whatif_text = ", ".join(
        f"{n} {ratio_text(w.speedup)}"
        + (
            f" [{ratio_text(w.speedup_low)}-{ratio_text(w.speedup_high)}]"
            if w.speedup_low is not None
            else ""
        )
        if w.status == "ok"
        else f"{n} {w.status}"
        for n, w in whatifs.items()
    )
    out.summary = (
        f"{doc.bottleneck}; fired: {', '.join(fired) or 'none'}; GPU idle "
        f"{share(out.figures['gpu_idle_share'])}; what-if {whatif_text or 'none'}; "
        "shares " + ", ".join(f"{k} {share(v)}" for k, v in shares.items() if v >= 0.05)
    )
    if not gpu:
        return out

    def speedup_of(name: str) -> float | None:
        found = whatifs.get(name)
        return found.speedup if found is not None else None

    def status_of(rule: str) -> str | None:
        found = findings.get(rule)
        return found.status if found is not None else None

    if out.step == "doctor_starved":
        workers = speedup_of("workers")
        held = doc.bottleneck == "input-bound" and "device-idle" in fired
        out.checks.append(
            Check(
                "§3 doctor starved",
                "input-bound and device-idle (~90 % idle on the GPU's own timeline)",
                f"{doc.bottleneck}; device-idle {status_of('device-idle')} "
                f"({share(idle.share if idle else None)} idle)",
                verdict(held),
            )
        )
        out.checks.append(
            Check(
                "§3 workers",
                "what-if more DataLoader workers measures 6-14x",
                ratio_text(workers),
                verdict(in_range(workers, 6, 14)),
            )
        )
    else:
        bf16 = speedup_of("bf16")
        out.checks.append(
            Check(
                "H1",
                "a GPU-bound loop with one loss.item() per step is called sync-bound",
                f"bottleneck {doc.bottleneck}; sync-bound {status_of('sync-bound')}; "
                f"device-bound {status_of('device-bound')}",
                verdict(None if not doc.bottleneck else doc.bottleneck == "sync-bound"),
            )
        )
        mixed = findings.get("missing-mixed-precision")
        out.checks.append(
            Check(
                "H1 (mixed precision)",
                "missing-mixed-precision reads 'clear: operators are small' (a false negative)",
                f"{mixed.status}: {mixed.summary[:120]}" if mixed else "None: None",
                verdict(
                    None if not mixed else mixed.status == "clear" and "small" in mixed.summary
                ),
            )
        )
        out.checks.append(
            Check(
                "doc device-bound",
                "healthy loop: compute-bound on the device (the GPU sets the pace)",
                f"bottleneck {doc.bottleneck}",
                verdict(doc.bottleneck == "device-bound"),
            )
        )
        out.checks.append(
            Check(
                "§3 bf16",
                "what-if bf16 autocast measures 2.5-4x",
                ratio_text(bf16),
                verdict(in_range(bf16, 2.5, 4.0)),
            )
        )
    return out


ARCHETYPES = ROOT / "examples" / "doctor" / "gpu"
"""The GPU doctor archetypes and their expected verdicts (``expected.toml``)."""


def find_number(data: Any, key: str) -> float | None:
    """The first number under a key containing ``key``, anywhere in a JSON document."""
    if isinstance(data, dict):
        for name, value in data.items():
            if key in str(name).lower() and number(value) is not None:
                return number(value)
        for value in data.values():
            found = find_number(value, key)
            if found is not None:
                return found
    elif isinstance(data, list):
        for value in data:
            found = find_number(value, key)
            if found is not None:
                return found
    return None


def advice_holds(advice: str, want: dict[str, Any]) -> bool:
    """The advice holds every ``advice`` word and none of the ``not`` words."""
    text = advice.lower()
    return all(w.lower() in text for w in want.get("advice", [])) and not any(
        w.lower() in text for w in want.get("not", [])
    )


def step_archetypes(run: Runner, allowed: float) -> Outcome:
    """Each GPU archetype: doctor live, a short trace recorded (kept for tests/data), and the
    trace replayed through ``doctor --trace`` (with the live run's SM activity, if measured)."""
    out = Outcome("archetypes", OK)
    p = run.profile
    expected: dict[str, dict[str, Any]] = tomllib.loads(
        (ARCHETYPES / "expected.toml").read_text(encoding="utf-8")
    )
    if not run.gpu:  # the dry run proves the plumbing on three, leaving time for the others
        expected = dict(list(expected.items())[:3])
    traces = run.workdir / "traces"
    traces.mkdir(parents=True, exist_ok=True)
    small = () if run.gpu else ("--small",)
    steps, warmup = p.doctor_steps
    rows: list[list[str]] = []
    found: dict[str, dict[str, Any]] = {}
    for index, (name, want) in enumerate(expected.items()):
        share_s = max(10.0, run.left() / (len(expected) - index))
        script = ARCHETYPES / f"{name}.py"
        live = run.cli(
            "doctor",
            str(script),
            *opts(device=p.device, steps=steps, warmup=warmup, what_if="none", timeout="90s"),
            *opts(stall_timeout="45s", json=True, store=run.store),
            "--",
            *small,
            timeout_s=share_s * 0.6,
            label=f"archetype {name}: live",
        )
        run.record_command(out, live)
        live_doc = live.document(DoctorJson, failed_too=True)
        live_name = live_doc.bottleneck if live_doc is not None else None
        # SM activity wherever the printed document holds it (a finding's evidence, a GPM
        # sample): a search of the whole text, not a read of one field
        # (the document names it ``gpu_sm_active_percent``: a percentage, given as a fraction)
        sm_percent = find_number(live.json(), "sm_active_percent")
        sm = None if sm_percent is None else sm_percent / 100.0
        trace = traces / f"{name}.json.gz"
        recorded = run.python(
            str(HERE / "record_trace.py"),
            str(trace),
            str(script),
            "--device",
            p.device,
            *small,
            timeout_s=share_s * 0.3,
            label=f"archetype {name}: trace",
        )
        run.record_command(out, recorded)
        replay_doc: TraceJson | None = None
        why_not = recorded.why()
        if recorded.ok and trace.exists():
            replay = run.cli(
                "doctor",
                "--trace",
                str(trace),
                "--json",
                *(opts(sm_active=f"{sm:.3f}") if sm is not None else []),
                timeout_s=max(5.0, share_s * 0.1),
                label=f"archetype {name}: replay",
            )
            run.record_command(out, replay)
            replay_doc = replay.document(TraceJson, failed_too=True)
            why_not = replay.why()
        trace_verdict = replay_doc.ranks[0].verdict if replay_doc and replay_doc.ranks else None
        trace_name = trace_verdict.bottleneck if trace_verdict is not None else None
        busy = trace_verdict.busy_share if trace_verdict is not None else None
        found[name] = {
            "live": live_name,
            "trace": trace_name,
            "busy_share": busy,
            "sm_active": sm,
            "advice": trace_verdict.advice if trace_verdict is not None else None,
            "trace_file": trace.name if trace.exists() else None,
            "trace_bytes": trace.stat().st_size if trace.exists() else None,
        }
        live_ok = live_name == want["live"] if live_name else None
        trace_ok = (
            trace_name == want["trace"] and advice_holds(trace_verdict.advice, want)
            if trace_verdict is not None and trace_name
            else None
        )
        rows.append(
            [
                name,
                share(busy),
                share(sm),
                str(live_name or live.why()),
                str(trace_name or f"not replayed: {why_not}"[:90]),
                f"{want['live']} / {want['trace']}",
                verdict(live_ok),
                verdict(trace_ok),
            ]
        )
        if run.gpu:
            out.checks.append(
                Check(f"archetype {name}", f"live {want['live']}, trace {want['trace']}",
                      f"live {live_name}, trace {trace_name}",
                      verdict(None if live_ok is None or trace_ok is None
                              else live_ok and trace_ok))
            )  # fmt: skip
    out.tables.append(
        Table(
            "doctor archetypes: live and replayed from their recorded traces",
            [
                "archetype",
                "busy (trace)",
                "SM active",
                "live",
                "trace",
                "expected",
                "live ok",
                "trace ok",
            ],
            rows,
        )
    )
    right_live = sum(1 for r in rows if r[6] == CONFIRMED)
    right_trace = sum(1 for r in rows if r[7] == CONFIRMED)
    out.figures = {"archetypes": found, "right_live": right_live, "right_trace": right_trace}
    out.summary = f"right live {right_live}/{len(rows)}, by trace {right_trace}/{len(rows)}"
    return out


def step_doctor_starved(run: Runner, allowed: float) -> Outcome:
    return _doctor(run, allowed, "doctor_starved", "train_starved.py", run.profile.starved_whatif)


def step_doctor_healthy(run: Runner, allowed: float) -> Outcome:
    return _doctor(run, allowed, "doctor_healthy", "train_healthy.py", "bf16")


def step_bench(run: Runner, allowed: float) -> Outcome:
    out = Outcome("bench", OK)
    p = run.profile
    result = run.cli(
        "bench",
        p.model,
        *opts(device=p.device, backend="eager", precision=",".join(p.precisions)),
        *opts(batch=",".join(str(b) for b in p.batches), strategy="grid"),
        *opts(measure_budget=p.bench_budget, confirm_rounds=0),
        *opts(accuracy_samples=p.accuracy_samples, timeout="120s", json=True, store=run.store),
        timeout_s=allowed,
        label="bench",
    )
    run.record_command(out, result)
    doc = result.document(ResultsJson, failed_too=True)
    if doc is None:
        out.status, out.note = FAILED, result.why()
        return out
    if not result.ok:
        out.note = result.why()
    return summarise_bench(out, doc, gpu=run.gpu)


def summarise_bench(out: Outcome, doc: ResultsJson, gpu: bool = True) -> Outcome:
    rows, figures = [], {}
    results = doc.typed()
    for r in results:
        spec = r.spec
        key = f"{spec.precision.value}/b{spec.batch_size}"
        ok = r.status is Status.OK
        rate = items_per_s(r) if ok else None
        energy = r.energy
        joules = energy.joules_per_item if energy else None
        power = energy.mean_power_w if energy else None
        fidelity = r.accuracy.fidelity if r.accuracy else None
        agreement = fidelity.top1_agreement if fidelity else None
        figures[key] = {
            "status": r.status.value,
            "reason": r.status_reason,
            "items_per_s": rate,
            "joules_per_item": joules,
            "mean_power_w": power,
            "energy_reason": energy.reason if energy else None,
            "top1_agreement": agreement,
            "rel_l2": fidelity.rel_l2 if fidelity else None,
            "numerics": numerics(r),
        }
        rows.append(
            [
                spec.precision.value,
                spec.batch_size,
                f"{rate:,.0f}" if rate else (r.status_reason or r.status.value)[:60],
                f"{joules:.4f}" if joules is not None else "n/a",
                f"{power:.0f}" if power is not None else "n/a",
                share(agreement),
                numerics(r).get("cudnn_conv_fp32", "") if ok else "",
            ]
        )
    model = results[0].spec.model if results else "?"
    device = results[0].spec.device.value if results else "?"
    out.tables.append(
        Table(
            f"bench {model} --device {device} (eager)",
            ["precision", "batch", "items/s", "J/item", "W", "top-1 agreement", "fp32 conv math"],
            rows,
        )
    )
    out.figures = {
        "configs": figures,
        "verdict": doc.verdict,
        "wall_s": doc.wall_time_s,
    }
    energy = figures.get("bf16/b64") or {}
    out.summary = ", ".join(
        f"{k} {v['items_per_s']:,.0f}/s" for k, v in figures.items() if v["items_per_s"]
    ) + (
        f"; bf16 b64 {energy['joules_per_item']:.4f} J/image"
        if number(energy.get("joules_per_item"))
        else ("; energy: " + str(energy.get("energy_reason")) if energy else "")
    )
    if not gpu:
        return out

    def rate(key: str) -> float | None:
        return number((figures.get(key) or {}).get("items_per_s"))

    b8 = [rate(f"{p}/b8") for p in ("fp32", "bf16", "fp16")]
    out.checks.append(
        Check(
            "§3 bench b8",
            "batch 8: 2-4k img/s for every precision (launch-bound)",
            ", ".join(
                f"{p} {si(v, '/s')}" for p, v in zip(("fp32", "bf16", "fp16"), b8, strict=True)
            ),
            verdict(None if not any(b8) else all(2000 <= r <= 4000 for r in b8 if r is not None)),
        )
    )
    out.checks.append(
        Check(
            "§3 bench b64",
            "batch 64: fp32 5-10k img/s (that range assumed TF32), bf16/fp16 10-25k",
            f"fp32 {si(rate('fp32/b64'), '/s')}, bf16 {si(rate('bf16/b64'), '/s')}, fp16 "
            f"{si(rate('fp16/b64'), '/s')}",
            verdict(in_range(rate("bf16/b64"), 10_000, 25_000)),
        )
    )
    agreements = [number(v.get("top1_agreement")) for v in figures.values()]
    agreements = [a for a in agreements if a is not None]
    out.checks.append(
        Check(
            "§3 accuracy",
            "top-1 agreement with the fp32 reference >= 99 %",
            f"min {share(min(agreements)) if agreements else 'n/a'}",
            verdict(None if not agreements else min(agreements) >= 0.99),
        )
    )
    conv = (figures.get("fp32/b64") or figures.get("fp32/b8") or {}).get("numerics", {})
    out.checks.append(
        Check(
            "M1",
            "eager 'fp32' runs convolutions on TF32 (not IEEE), unrecorded",
            f"recorded cudnn_conv_fp32={conv.get('cudnn_conv_fp32', 'n/a')}, "
            f"cuda_matmul_fp32={conv.get('cuda_matmul_fp32', 'n/a')}",
            verdict(None if not conv else conv.get("cudnn_conv_fp32") == "tf32"),
        )
    )
    joules = number(energy.get("joules_per_item"))
    out.checks.append(
        Check(
            "doc energy",
            "bench gives joules per image on NVML's energy counter",
            f"bf16 b64: {joules:.4f} J/image at {energy.get('mean_power_w')} W"
            if joules is not None
            else f"not measured: {energy.get('energy_reason')}",
            verdict(None if not energy else joules is not None),
        )
    )
    return out


def step_roofline(run: Runner, allowed: float) -> Outcome:
    out = Outcome("roofline", OK)
    p = run.profile
    result = run.cli(
        "roofline",
        p.model,
        *opts(device=p.device, precision="bf16", batch=p.roofline_batch),
        *opts(measure_budget=p.measure_budget, ceilings_budget=p.roofline_ceilings_budget),
        *opts(json=True, store=run.store),
        timeout_s=allowed,
        label="roofline",
    )
    run.record_command(out, result)
    doc = result.document(RooflineProfile)
    if doc is None:
        out.status, out.note = FAILED, result.why()
        return out
    out = summarise_roofline(out, doc, gpu=run.gpu)
    prints = {
        "env": run.figure("env", "fingerprint"),
        "ceilings": run.figure("ceilings", "environment_fingerprint"),
        "roofline": doc.environment_fingerprint,
    }
    known = {k: v for k, v in prints.items() if v}
    out.figures["fingerprints"] = known
    if run.gpu and len(known) > 1:
        out.checks.append(
            Check(
                "L8",
                "host memory in the fingerprint changes it between commands (caches missed)",
                ", ".join(f"{k} {v}" for k, v in known.items())
                + f"; ceilings reused: {out.figures.get('ceilings_measured_at')}",
                verdict(len(set(known.values())) > 1),
            )
        )
    return out


def summarise_roofline(out: Outcome, doc: RooflineProfile, gpu: bool = True) -> Outcome:
    operators = doc.operators
    bounds: collections.Counter[str] = collections.Counter()
    for op in operators:
        bounds[str(op.bound)] += op.calls or 1
    measured, floor = doc.measured_time_s, doc.floor_time_s
    profiled = doc.profiled_time_s
    out.figures = {
        "measured_time_s": measured,
        "floor_time_s": floor,
        "profiled_time_s": profiled,
        "mfu": doc.mfu,
        "gap": doc.gap,
        "bounds_by_calls": dict(bounds),
        "ceilings_measured_at": doc.ceilings.measured_at,
        "above_ceiling": list(doc.above_ceiling),
        "notes": list(doc.notes),
    }
    total = sum(bounds.values()) or 1
    out.summary = (
        f"{doc.model} {doc.precision} b{doc.batch_size}: measured "
        f"{_ms3(measured)}, profiled {_ms3(profiled)}, floor {_ms3(floor)}, MFU "
        f"{share(doc.mfu)}; ops by calls: "
        + ", ".join(f"{k} {v}" for k, v in sorted(bounds.items(), key=lambda kv: -kv[1]))
    )
    if not gpu:
        return out
    out.checks.append(
        Check(
            "§3 roofline",
            "ResNet-50 bf16 b64: measured 2.5-6 ms, floor 0.7-1.0 ms, MFU 10-30 %",
            f"measured {_ms3(measured)}, floor {_ms3(floor)}, MFU {share(doc.mfu)}",
            verdict(
                None
                if measured is None or floor is None
                else 2.5e-3 <= measured <= 6e-3 and 0.7e-3 <= floor <= 1.0e-3
            ),
        )
    )
    overhead = bounds["overhead-bound"]
    out.checks.append(
        Check(
            "M4",
            "at batch <= 64 most ResNet ops are labelled overhead-bound",
            f"{overhead} of {total} calls overhead-bound; measured - profiled = "
            f"{_ms3(None if measured is None or profiled is None else measured - profiled)}",
            verdict(None if not operators else overhead > total / 2),
        )
    )
    return out


def _count(x: Any) -> str:
    return si(x, "").strip()


def _ms3(x: Any) -> str:
    v = number(x)
    return "n/a" if v is None else f"{v * 1e3:.3g} ms"


_LOAD = """
import sys, time, torch
seconds = float(sys.argv[1])
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
a @ b; torch.cuda.synchronize(); print("ready", flush=True)
end = time.monotonic() + seconds
while time.monotonic() < end:
    for _ in range(10):
        a @ b
    torch.cuda.synchronize()
"""


def step_audit(run: Runner, allowed: float) -> Outcome:
    out = Outcome("audit", OK)
    p = run.profile
    load: subprocess.Popen[str] | None = None
    if run.gpu:
        load = subprocess.Popen(
            [sys.executable, "-c", _LOAD, str(p.audit_s + 30)],
            cwd=ROOT,
            env=run.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
        )
        out.commands.append(f"python3 -c <bf16 8192^3 matmul loop for {p.audit_s + 30} s>")
        ready = _read_line(load, 60.0)
        if ready != "ready":
            kill_group(load)
            out.status, out.note = FAILED, f"the bf16 load did not start ({ready or 'no output'})"
            return out
    try:
        result = run.cli(
            "audit",
            *opts(sample=f"{p.audit_s}s", step="1s", gpus="0" if run.gpu else None),
            *opts(report=run.workdir / "audit.html", json=True, no_store=True),
            timeout_s=min(allowed, p.audit_s + 40),
            label="audit",
        )
    finally:
        if load is not None:
            kill_group(load)
    run.record_command(out, result)
    doc = result.document(AuditJson)
    if doc is None:
        out.status, out.note = FAILED, result.why()
        return out
    return summarise_audit(out, doc, gpu=run.gpu)


def _read_line(process: subprocess.Popen[str], timeout_s: float) -> str:
    got: list[str] = []

    def read() -> None:
        assert process.stdout is not None
        got.append(process.stdout.readline().strip())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout_s)
    return got[0] if got else ""


def summarise_audit(out: Outcome, doc: AuditJson, gpu: bool = True) -> Outcome:
    device = doc.devices[0] if doc.devices else None
    hours = device.hours if device is not None else {}
    observed = hours.get("observed")

    def frac(name: str) -> float | None:
        value = hours.get(name)
        return None if value is None or not observed else value / observed

    out.figures = {
        "source": doc.source,
        "device": device.model if device else None,
        "busy_share": frac("busy"),
        "useful_share": frac("useful"),
        "sm_p95": device.sm_p95 if device else None,
        "tensor_median": device.tensor_median if device else None,
        "dram_median": device.dram_median if device else None,
        "power_mean_w": device.power_mean_w if device else None,
        "not_measured": device.not_measured if device else None,
        "notes": device.notes if device else None,
    }
    out.summary = (
        f"{device.model}: busy {share(frac('busy'))}, useful "
        f"{share(frac('useful'))}, SM p95 {device.sm_p95}, tensor median "
        f"{device.tensor_median}, power {device.power_mean_w} W"
        if device
        else f"no GPU sampled ({doc.source})"
    )
    if not gpu:
        return out
    power = device.power_mean_w if device else None
    sm = device.sm_p95 if device else None
    out.checks.append(
        Check(
            "§3 audit",
            "during a bf16 matmul load: util ~100 %, SM active p95 ~0.95, 400-700 W",
            f"busy {share(frac('busy'))}, SM p95 {sm}, {power} W",
            verdict(
                None
                if power is None or sm is None
                else (frac("busy") or 0) >= 0.9 and sm >= 0.8 and 400 <= power <= 700
            ),
        )
    )
    missing = device.not_measured if device else {}
    out.checks.append(
        Check(
            "M2 (audit)",
            "without GPM, useful hours are not measured and busy = useful",
            f"useful {share(frac('useful'))}; not measured: {sorted(missing) or 'none'}",
            verdict("useful" in missing if device else None),
        )
    )
    return out


def _llama_dir(run: Runner) -> Path:
    shape = run.profile.llm_shape
    tag = "-".join(f"{k}{v}" for k, v in sorted(shape.items())) or "tiny"
    return run.workdir / f"llama-{tag}"


def _llama(run: Runner, out: Outcome) -> Path | None:
    """The random Llama the llm steps load (built once per work directory), or None: the
    outcome says why."""
    directory = _llama_dir(run)
    if (directory / "config.json").exists():
        return directory
    code = (
        "import sys, json; from pathlib import Path; "
        "from accelscope.testing.llm_model import build_tiny_llama; "
        "build_tiny_llama(Path(sys.argv[1]), **json.loads(sys.argv[2]))"
    )
    built = run.python(
        "-c", code, str(directory), json.dumps(run.profile.llm_shape), timeout_s=120, label="llama"
    )
    run.record_command(out, built)
    if not built.ok:
        out.status, out.note = FAILED, f"building the model: {built.why()}"
        return None
    return directory


def step_llm(run: Runner, allowed: float) -> Outcome:
    out = Outcome("llm", OK)
    deadline = time.monotonic() + allowed
    directory = _llama(run, out)
    if directory is None:
        return out
    p = run.profile
    floor: list[str] = []
    bandwidth = run.figure("ceilings", "bandwidth_bytes_per_s") or run.figure(
        "facts", "copy_bytes_per_s"
    )
    peak = (run.figure("ceilings", "matmul_flops_per_s") or {}).get("bf16") or run.figure(
        "facts", "bf16_matmul_flops_per_s"
    )
    if number(bandwidth):
        floor += ["--bandwidth", f"{bandwidth:.4g}"]  # bytes/s
    if number(peak):
        floor += ["--peak-flops", f"{peak:.4g}"]  # FLOP/s
    common = (
        "llm",
        *opts(hf_model=directory, device=p.device, dtype="bf16"),
        *p.llm_args,
        *floor,
        *opts(no_server_metrics=True, json=True, store=run.store),
    )
    result = run.cli(
        *common,
        *opts(concurrency="1,4" if run.gpu else "1"),
        timeout_s=deadline - time.monotonic(),
        watch_gpu=True,
        label="llm-static",
    )
    run.record_command(out, result)
    doc = result.document(LlmRun)
    if doc is None:
        out.status, out.note = FAILED, result.why()
        return out
    out = summarise_llm(out, doc, gpu=run.gpu, gpu_memory_mib=result.gpu_memory_mib)
    out.figures["floor_inputs"] = "from the ceilings step" if floor else "accelscope's own"
    if run.gpu and deadline - time.monotonic() > 45:
        more = run.cli(
            *common,
            *opts(concurrency=4, batching="continuous"),
            timeout_s=deadline - time.monotonic(),
            label="llm-continuous",
        )
        run.record_command(out, more)
        extra = more.document(LlmRun)
        tpot = extra.trials[0].summary.metrics.tpot_s.p50 if extra and extra.trials else None
        out.figures["continuous"] = {
            "ok": extra is not None,
            "why": None if extra is not None else more.why(),
            "tpot_p50_s": tpot,
            "warnings": extra.warnings if extra is not None else None,
        }
        out.summary += "; continuous batching c4: " + (
            f"TPOT p50 {_ms3(tpot)}" if extra is not None else more.why()
        )
    return out


def summarise_llm(
    out: Outcome, doc: LlmRun, gpu: bool = True, gpu_memory_mib: float | None = None
) -> Outcome:
    target = doc.target
    trials = []
    for trial in doc.trials:
        metrics = trial.summary.metrics
        fl = trial.floor
        throughput = trial.summary.throughput
        trials.append(
            {
                "label": trial.label,
                "concurrency": trial.arrivals.concurrency,
                "ttft_p50_s": metrics.ttft_s.p50,
                "tpot_p50_s": metrics.tpot_s.p50,
                "output_tokens_per_s": throughput.output_tokens_per_s if throughput else None,
                "tpot_floor_s": fl.tpot_floor_s if fl else None,
                "decode_efficiency": fl.decode_efficiency if fl else None,
                "bandwidth_source": fl.bandwidth_source if fl else None,
                "bound": fl.bound if fl else None,
                "errors": trial.summary.errors,
            }
        )
    out.figures = {
        "device": target.device,
        "dtype": target.dtype,
        "parameters": target.parameters,
        "batching": target.batching,
        "trials": trials,
        "gpu_memory_mib": gpu_memory_mib,
        "warnings": doc.warnings,
        "floor_why": doc.floor_why,
    }
    out.tables.append(
        Table(
            f"llm --hf-model (random Llama, {_count(target.parameters)} parameters, "
            f"{target.dtype} on {target.device}, {target.batching} batching)",
            ["concurrency", "TTFT p50", "TPOT p50", "TPOT floor", "decode efficiency", "tokens/s"],
            [
                [
                    t["concurrency"],
                    _ms3(t["ttft_p50_s"]),
                    _ms3(t["tpot_p50_s"]),
                    _ms3(t["tpot_floor_s"]),
                    share(t["decode_efficiency"]),
                    f"{t['output_tokens_per_s']:.0f}"
                    if number(t["output_tokens_per_s"])
                    else "n/a",
                ]
                for t in trials
            ],
        )
    )
    first: dict[str, Any] = (
        trials[0]
        if trials
        else dict.fromkeys(("tpot_p50_s", "tpot_floor_s", "decode_efficiency", "ttft_p50_s"))
    )
    out.summary = (
        f"{_count(target.parameters)} params {target.dtype} on "
        f"{target.device}: TPOT p50 {_ms3(first['tpot_p50_s'])} vs floor "
        f"{_ms3(first['tpot_floor_s'])} ({share(first['decode_efficiency'])}), TTFT p50 "
        f"{_ms3(first['ttft_p50_s'])}; GPU memory seen "
        + (f"{gpu_memory_mib:.0f} MiB" if gpu_memory_mib else "none")
    )
    if not gpu:
        return out
    out.checks.append(
        Check(
            "H3",
            "llm --hf-model always runs on the CPU on a GPU machine (no device passed)",
            f"target device {target.device}; the process held "
            + (f"{gpu_memory_mib:.0f} MiB of GPU memory" if gpu_memory_mib else "no GPU memory"),
            verdict(
                None if gpu_memory_mib is None and target.device is None else not gpu_memory_mib
            ),
        )
    )
    return out


LLM_COMPILE_ROUNDS = 3
"""Interleaved rounds of ``step_llm_compile`` at most (each: one run without, one with)."""


def step_llm_compile(run: Runner, allowed: float) -> Outcome:
    """``llm --hf-model`` at concurrency 1 without and with ``--compile`` (a static KV cache
    and the decoding step compiled: ``reduce-overhead``, CUDA graphs, on a GPU), each run a
    fresh process, in interleaved rounds (eager first, then compiled first, ...): TPOT p50's
    ratio with its 95 % interval over the rounds; the compile time apart, never in a trial. A
    round starts only while the last one's time still fits."""
    out = Outcome("llm_compile", OK)
    deadline = time.monotonic() + allowed
    directory = _llama(run, out)
    if directory is None:
        return out
    p = run.profile
    common = (
        "llm",
        *opts(hf_model=directory, device=p.device, dtype="bf16", concurrency=1),
        *p.llm_args,
        *opts(no_server_metrics=True, json=True, store=run.store),
    )
    sides: dict[str, tuple[str, ...]] = {"eager": (), "compiled": ("--compile",)}
    runs: dict[str, list[LlmRun]] = {"eager": [], "compiled": []}
    round_s = 0.0
    for number_ in range(LLM_COMPILE_ROUNDS):
        if number_ and deadline - time.monotonic() < round_s:
            out.note = f"{number_} rounds: a round took {round_s:.0f} s, the step's time was spent"
            break
        started = time.monotonic()
        for side in ("eager", "compiled") if number_ % 2 == 0 else ("compiled", "eager"):
            result = run.cli(
                *common,
                *sides[side],
                timeout_s=deadline - time.monotonic(),
                label=f"llm-{side}-{number_ + 1}",
            )
            run.record_command(out, result)
            doc = result.document(LlmRun)
            if doc is None or not doc.trials:
                out.status = FAILED
                out.note = f"round {number_ + 1}, {side}: " + (
                    result.why() if doc is None else "no trial"
                )
                return summarise_llm_compile(out, runs["eager"], runs["compiled"])
            runs[side].append(doc)
        round_s = time.monotonic() - started
    return summarise_llm_compile(out, runs["eager"], runs["compiled"])


def summarise_llm_compile(out: Outcome, eager: list[LlmRun], compiled: list[LlmRun]) -> Outcome:
    """The rounds' TPOT p50 on each side and their ratio (compiled / eager, paired by round:
    below 1 is faster), with its interval when two or more whole rounds were run."""

    def tpot(doc: LlmRun) -> float | None:
        return doc.trials[0].summary.metrics.tpot_s.p50 if doc.trials else None

    rounds = min(len(eager), len(compiled))
    before = [tpot(d) for d in eager[:rounds]]
    after = [tpot(d) for d in compiled[:rounds]]
    pairs = [(b, a) for b, a in zip(before, after, strict=True) if b and a]
    extra = [(d.target.model_extra or {}) for d in compiled[:rounds]]
    compile_s = [number(e.get("compile_s")) for e in extra]
    out.figures = {
        "rounds": rounds,
        "tpot_p50_s": {"eager": before, "compiled": after},
        "compile_s": compile_s,
        "compile_mode": extra[0].get("compile_mode") if extra else None,
        "cache": extra[0].get("cache") if extra else None,
    }
    if not pairs:
        out.status = FAILED
        out.summary = "no round with a TPOT on both sides"
        return out
    found = process_ratio([b for b, _ in pairs], [a for _, a in pairs], paired=True)
    estimate = found.estimate
    out.figures |= {
        "ratio": found.ratio,
        "low": estimate.low if estimate else None,
        "high": estimate.high if estimate else None,
        "why_no_interval": found.why or None,
    }
    interval = (
        f" ({_ratio_bound(estimate.low)}-{_ratio_bound(estimate.high)}, 95 %, {len(pairs)} rounds)"
        if estimate
        else f" (no interval: {found.why})"
    )
    mode = out.figures["compile_mode"] or "?"
    out.summary = (
        f"TPOT p50 with --compile ({mode}) / without: {found.ratio:.3g}x{interval}; "
        f"compile {', '.join(f'{c:.0f} s' for c in compile_s if c is not None) or 'n/a'}"
    )
    out.tables.append(
        Table(
            "llm --hf-model --compile against eager (concurrency 1, interleaved rounds)",
            ["round", "TPOT p50 eager", "TPOT p50 compiled", "compiled / eager", "compile time"],
            [
                [
                    i + 1,
                    _ms3(b),
                    _ms3(a),
                    f"{a / b:.3g}x" if b and a else "n/a",
                    f"{compile_s[i]:.0f} s" if i < len(compile_s) and compile_s[i] else "n/a",
                ]
                for i, (b, a) in enumerate(zip(before, after, strict=True))
            ],
        )
    )
    return out


def _ratio_bound(value: float | None) -> str:
    return "n/a" if value is None or not math.isfinite(value) else f"{value:.3g}x"


def _measure(run: Runner, allowed: float, *extra: str, label: str) -> Command:
    p = run.profile
    return run.cli(
        "measure",
        p.model,
        *opts(device=p.device, batch=p.roofline_batch, budget=p.measure_budget),
        *opts(json=True, store=run.store),
        *extra,
        timeout_s=allowed,
        label=label,
    )


def step_tf32(run: Runner, allowed: float) -> Outcome:
    out = Outcome("tf32", OK)
    deadline = time.monotonic() + allowed
    rows, figures = [], {}
    for mode in ("off", "on"):
        result = _measure(run, deadline - time.monotonic(), "--tf32", mode, label=f"tf32-{mode}")
        run.record_command(out, result)
        first = first_result(result)
        ok = first is not None and first.status is Status.OK
        figures[mode] = {
            "ok": result.ok,
            "why": None if result.ok else result.why(),
            "items_per_s": items_per_s(first) if first is not None and ok else None,
            "numerics": numerics(first),
            "precision": first.spec.precision.value if first is not None else None,
            "joules_per_item": first.energy.joules_per_item if first and first.energy else None,
        }
        rate = figures[mode]["items_per_s"]
        rows.append(
            [
                mode,
                f"{rate:,.0f}" if rate else (result.why() if not result.ok else "n/a"),
                numerics(first).get("cudnn_conv_fp32", ""),
                numerics(first).get("cuda_matmul_fp32", ""),
            ]
        )
    out.figures = figures
    out.tables.append(
        Table(
            f"measure {run.profile.model} b{run.profile.roofline_batch} fp32 --tf32 off/on",
            ["--tf32", "items/s", "conv math", "matmul math"],
            rows,
        )
    )
    off, on = figures["off"]["items_per_s"], figures["on"]["items_per_s"]
    out.summary = f"IEEE {si(off, '/s')}, TF32 {si(on, '/s')}" + (
        f" ({on / off:.2f}x)" if off and on else ""
    )
    if not figures["off"]["ok"] and not figures["on"]["ok"]:
        out.status, out.note = FAILED, figures["off"]["why"]
    if run.gpu:
        recorded = (
            figures["off"]["numerics"].get("cudnn_conv_fp32"),
            figures["on"]["numerics"].get("cudnn_conv_fp32"),
        )
        out.checks.append(
            Check(
                "doc --tf32",
                "measure --tf32 off records IEEE fp32, on records tf32 and is faster",
                f"recorded {recorded[0]} / {recorded[1]}; " + out.summary,
                verdict(None if not (off and on) else recorded == ("ieee", "tf32") and on > off),
            )
        )
    return out


def step_ordinal(run: Runner, allowed: float) -> Outcome:
    out = Outcome("ordinal", OK)
    gpus = int(number(run.figure("facts", "device_count")) or 0)
    result = run.cli(
        "measure", run.profile.model, "--device", f"cuda:{gpus}", "--no-store", timeout_s=allowed
    )
    run.record_command(out, result)
    lines = [line for line in (result.stderr + result.stdout).strip().splitlines() if line.strip()]
    out.figures = {"rc": result.rc, "lines": lines[-3:]}
    out.summary = (
        f"--device cuda:{gpus}: exit {result.rc}, {len(lines)} line(s): "
        f"{last_line(result.stderr + result.stdout)}"
    )
    out.checks.append(
        Check(
            "doc cuda:N",
            "a CUDA ordinal the machine lacks is one line, exit 2",
            f"exit {result.rc}, {len(lines)} line(s)",
            verdict(result.rc == 2 and len(lines) <= 2),
        )
    )
    return out


def step_compile(run: Runner, allowed: float) -> Outcome:
    out = Outcome("compile", OK)
    result = _measure(run, allowed, "--backend", "compile", "--precision", "bf16", label="compile")
    run.record_command(out, result)
    first = first_result(result)
    if first is None or first.status is not Status.OK:
        out.status = FAILED
        out.note = first.status_reason if first is not None else result.why()
        return out
    rate = items_per_s(first)
    first_call_s = first.measurement.first_call_s if first.measurement else None
    out.figures = {
        "items_per_s": rate,
        "first_call_s": first_call_s,
        "prepare_s": first.prepare_s,
        "wall_s": result.seconds,
        "joules_per_item": first.energy.joules_per_item if first.energy else None,
    }
    out.summary = (
        f"compile bf16 b{run.profile.roofline_batch}: {si(rate, '/s')}, prepare "
        f"{first.prepare_s or 0:.0f} s, first call {first_call_s or 0:.1f} s, "
        f"command {result.seconds:.0f} s"
    )
    if run.gpu:
        out.checks.append(
            Check(
                "§3 / M7 compile",
                "cold compile 40-150 s; 15-40k img/s",
                out.summary,
                verdict(in_range(rate, 15_000, 40_000)),
            )
        )
    return out


def step_load(run: Runner, allowed: float) -> Outcome:
    out = Outcome("load", OK)
    p = run.profile
    result = run.cli(
        "load",
        p.model,
        *opts(device=p.device, scenario="offline", batch=32),
        *p.load_args,
        *opts(json=True, store=run.store),
        timeout_s=allowed,
        label="load",
    )
    run.record_command(out, result)
    doc = result.document(LoadJson)
    if doc is None or not doc.trials:
        out.status, out.note = FAILED, result.why()
        return out
    return summarise_load(out, doc, bench_configs=run.figure("bench", "configs"), gpu=run.gpu)


def summarise_load(
    out: Outcome, doc: LoadJson, bench_configs: Any = None, gpu: bool = True
) -> Outcome:
    trial = doc.trials[0]
    rate = trial.throughput_per_s
    bench = number(dig(bench_configs or {}, "fp32/b64", "items_per_s"))
    out.figures = {
        "throughput_per_s": rate,
        "mean_batch": trial.mean_batch,
        "p99_s": trial.latency.p99_s,
        "joules_per_item": trial.energy.joules_per_item if trial.energy else None,
        "bench_fp32_b64": bench,
    }
    out.summary = f"offline b32: {si(rate, '/s')}, mean batch {trial.mean_batch}" + (
        f"; bench fp32 b64 / load = {bench / rate:.2f}x" if bench and rate else ""
    )
    if gpu:
        out.checks.append(
            Check(
                "§3 / M8 load",
                "offline b32 4-12k img/s, 1.5-3x under bench (pageable H2D included)",
                out.summary,
                verdict(in_range(rate, 4000, 12000)),
            )
        )
    return out


def build_steps(gpu: bool) -> list[Step]:
    """The steps in priority order; times are an H100's (the CPU dry run has its own)."""
    table = [
        ("facts", "GPU facts: TF32 error, GPM, clocks, driver", 20, 10, 60, step_facts),
        ("env", "accelscope env", 10, 8, 40, step_env),
        ("ceilings", "accelscope ceilings --device cuda", 70, 45, 120, step_ceilings),
        (
            "archetypes",
            "doctor: ten GPU loop archetypes, live and traced",
            300,
            120,
            420,
            step_archetypes,
        ),
        ("doctor_starved", "doctor: input-starved loop", 40, 30, 120, step_doctor_starved),
        ("doctor_healthy", "doctor: healthy GPU-bound loop", 45, 30, 120, step_doctor_healthy),
        ("bench", "bench resnet50 eager fp32/bf16/fp16 b8,b64", 100, 60, 180, step_bench),
        ("roofline", "roofline resnet50 bf16 b64", 25, 20, 110, step_roofline),
        ("audit", "audit --sample during a bf16 matmul load", 35, 30, 70, step_audit),
        ("llm", "llm --hf-model random Llama (bf16, cuda)", 45, 30, 120, step_llm),
        ("tf32", "measure resnet50 --tf32 off/on", 35, 25, 80, step_tf32),
        ("ordinal", "--device cuda:N missing", 8, 5, 30, step_ordinal),
        ("compile", "measure --backend compile bf16 b64", 120, 90, 240, step_compile),
        ("load", "load resnet50 offline b32", 30, 25, 60, step_load),
        (
            "llm_compile",
            "llm --hf-model --compile vs eager, interleaved rounds",
            150,
            60,
            300,
            step_llm_compile,
        ),
    ] + [
        # each default-sweep case is its own device call (`--only STEP --budget 520`): last here
        (
            c.step,
            f"default GPU sweep: {c.model} b{c.batches}",
            c.budget_s + 60,
            120,
            540,
            functools.partial(bench_sweep_step, case=c, outcome=Outcome, table=Table),
        )
        for c in SWEEPS
    ]
    steps = [Step(n, t, e, lo, hi, body) for n, t, e, lo, hi, body in table]
    if gpu:
        return steps
    # the dry run: shorter minimums, so every step but the last two fits its smaller budget
    cpu_min = {"ceilings": 15, "doctor_starved": 20, "doctor_healthy": 20, "bench": 20}
    cpu_min |= {"compile": 600, "load": 600}  # never fit: proves the skip path
    return [
        Step(s.name, s.title, s.expect_s, cpu_min.get(s.name, min(s.min_s, 10)), s.max_s, s.body)
        for s in steps
    ]


# --------------------------------------------------------------------------- main


def meta_from(
    outcomes: dict[str, Outcome], args: argparse.Namespace, wall_s: float
) -> dict[str, Any]:
    facts = outcomes.get("facts")
    figures = facts.figures if facts else {}
    env = outcomes.get("env")
    gpus = (env.figures.get("gpus") if env else None) or [{}]
    device = figures.get("device") or gpus[0].get("name") or _device_name()
    detail = []
    if figures.get("sms"):
        detail.append(f"{figures['sms']} SMs")
    if number(figures.get("memory_bytes")):
        detail.append(f"{figures['memory_bytes'] / 2**30:.0f} GiB")
    if number(figures.get("l2_cache_bytes")):
        detail.append(f"{figures['l2_cache_bytes'] / 2**20:.0f} MiB L2")
    cores = env.figures.get("cores") if env else None
    if cores:
        detail.append(f"{cores} CPUs")
    return {
        "device": device,
        "device_detail": " ".join(detail) if detail else "",
        "driver": f"driver {figures.get('driver') or gpus[0].get('driver_version') or 'n/a'}",
        "cuda": f"CUDA {figures.get('cuda_driver') or 'n/a'} (driver)",
        "torch": f"torch {figures.get('torch') or 'n/a'} "
        f"(CUDA {figures.get('torch_cuda') or 'none'})",
        "python": f"Python {figures.get('python') or sys.version.split()[0]}",
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "command": os.environ.get("VALIDATE_COMMAND")
        or shlex.join(["python3", "benchmarks/gpu/validate.py", *sys.argv[1:]]),
        "commit": _commit(),
        "budget_s": args.budget,
        "wall_s": round(wall_s),
        "mode": "cpu dry run" if args.cpu else "gpu",
    }


def _device_name() -> str:
    """The GPU's name when neither ``facts`` nor ``env`` ran in this call (a second call)."""
    with contextlib.suppress(Exception):
        import torch

        if torch.cuda.is_available():
            return str(torch.cuda.get_device_name(0)) + " (facts and env not run in this call)"
    return "no CUDA device"


def _commit() -> str:
    # The command's word first: the copy on the device machine may hold a stale .git (seen:
    # a digest named the session's first commit, not the one that ran).
    if os.environ.get("VALIDATE_COMMIT"):
        return os.environ["VALIDATE_COMMIT"]
    head = ROOT / ".git" / "HEAD"
    with contextlib.suppress(OSError):
        text = head.read_text().strip()
        if text.startswith("ref: "):
            return (ROOT / ".git" / text[5:]).read_text().strip()[:10]
        return text[:10]
    return "not known (no .git here)"


def load_earlier(directory: Path) -> dict[str, Outcome]:
    found: dict[str, Outcome] = {}
    for path in sorted(directory.glob("*.json")):
        with contextlib.suppress(ValueError, TypeError, KeyError, OSError):
            outcome = Outcome.from_dict(json.loads(path.read_text()))
            found[outcome.step] = outcome
    return found


def write_outputs(out_dir: Path, workdir: Path, digest: dict[str, Any], markdown: str) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "digest.json").write_text(json.dumps(digest, indent=1, default=str) + "\n")
    (out_dir / "digest.md").write_text(markdown)
    bundle = out_dir / "raw.tar.gz"
    with tarfile.open(bundle, "w:gz") as tar:
        for name in ("raw", "outcomes", "results.db", "traces"):
            if (workdir / name).exists():
                tar.add(workdir / name, arcname=name)
    recorded = sorted((workdir / "traces").glob("*.json.gz"))
    if recorded:  # one file: the device tool brings back 8 files at most
        with tarfile.open(out_dir / "traces.tar", "w") as tar:
            for trace in recorded:
                tar.add(trace, arcname=f"traces/{trace.name}")
    if bundle.stat().st_size > 15 * 2**20:  # the device tool brings back 16 MiB a file
        bundle.unlink()
        with tarfile.open(bundle, "w:gz") as tar:
            tar.add(workdir / "outcomes", arcname="outcomes")


def main(argv: Sequence[str] | None = None) -> int:
    began = time.monotonic()
    steps_all = build_steps(gpu=True)
    names = [s.name for s in steps_all]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", help=f"comma-separated steps, of: {','.join(names)}")
    parser.add_argument("--skip", default="", help="comma-separated steps to leave out")
    parser.add_argument("--budget", type=float, help="seconds for all steps (gpu 450, cpu 300)")
    parser.add_argument("--cpu", "--dry-run", action="store_true", help="CPU dry run here")
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=None, help="default $OUT, else WORKDIR/out")
    parser.add_argument("--fresh", action="store_true", help="forget earlier calls' steps")
    parser.add_argument("--list", action="store_true", help="print the steps and exit")
    args = parser.parse_args(argv)
    if args.list:
        for s in steps_all:
            print(
                f"{s.name:15} ~{s.expect_s:>4.0f} s "
                f"(min {s.min_s:.0f}, max {s.max_s:.0f})  {s.title}"
            )
        return 0
    args.budget = args.budget or (CPU_BUDGET_S if args.cpu else GPU_BUDGET_S)
    selected = [n.strip() for n in args.only.split(",") if n.strip()] if args.only else None
    skip = {n.strip() for n in args.skip.split(",") if n.strip()}
    unknown = [n for n in [*(selected or []), *skip] if n not in names]
    if unknown:
        parser.error(f"unknown step(s) {', '.join(unknown)}: give {', '.join(names)}")
    wanted = [n for n in (selected or names) if n not in skip]
    workdir = args.workdir or (
        DEFAULT_WORKDIR.with_name(DEFAULT_WORKDIR.name + "-cpu") if args.cpu else DEFAULT_WORKDIR
    )
    out_dir = args.out or Path(os.environ.get("OUT") or workdir / "out")
    kept = workdir / "outcomes"
    if (selected is None and not skip) or args.fresh:
        shutil.rmtree(workdir / "outcomes", ignore_errors=True)
        shutil.rmtree(workdir / "raw", ignore_errors=True)
    kept.mkdir(parents=True, exist_ok=True)
    earlier = load_earlier(kept)
    out_dir.mkdir(parents=True, exist_ok=True)
    profile = CPU if args.cpu else GPU
    steps = build_steps(gpu=not args.cpu)
    with open(out_dir / "validate.log", "w", encoding="utf-8") as log:
        log.write(
            f"# accelscope GPU validation, {datetime.now(UTC).isoformat()}, argv {sys.argv}\n"
        )
        runner = Runner(profile, workdir, log, dict(earlier))
        if profile.device == "cuda":
            import importlib.util

            if importlib.util.find_spec("pydantic") is None:
                print(
                    "pydantic is missing: carry the wheels (benchmarks/gpu/README.md)", flush=True
                )

        def execute(step: Step, allowed: float) -> Outcome:
            print(
                f"[{time.monotonic() - began:5.0f} s] {step.name}: up to {allowed:.0f} s",
                flush=True,
            )
            runner.deadline = time.monotonic() + allowed
            log.write(f"\n\n######## {step.name}: {step.title} (up to {allowed:.0f} s)\n")
            return step.body(runner, allowed)

        def done(outcome: Outcome) -> None:
            runner.outcomes[outcome.step] = outcome
            (kept / f"{outcome.step}.json").write_text(json.dumps(outcome.to_dict(), default=str))
            print(
                f"        {outcome.step}: {outcome.status} in {outcome.seconds:.0f} s  "
                f"{(outcome.summary or outcome.note)[:160]}",
                flush=True,
            )

        outcomes = run_steps(
            steps,
            budget_s=args.budget,
            execute=execute,
            selected=wanted,
            began=began,
            on_done=done,
        )
    this_call = {o.step for o in outcomes}
    stamp = datetime.now(UTC).strftime("%H:%M UTC")
    for name, outcome in earlier.items():
        if name not in this_call:
            outcome.earlier = outcome.earlier or stamp_of(kept / f"{name}.json", stamp)
    merged = {
        **{n: o for n, o in earlier.items() if n not in this_call},
        **{o.step: o for o in outcomes},
    }
    ordered = [merged[n] for n in names if n in merged]
    digest = build_digest(ordered, meta_from(merged, args, time.monotonic() - began))
    markdown = render_markdown(digest)
    write_outputs(out_dir, workdir, digest, markdown)
    print("\n" + render_markdown(digest, tables=False), flush=True)
    print(
        f"(the tables too: {out_dir}/digest.md; and digest.json, validate.log, raw.tar.gz)",
        flush=True,
    )
    return 0


def stamp_of(path: Path, default: str) -> str:
    with contextlib.suppress(OSError):
        return datetime.fromtimestamp(path.stat().st_mtime, UTC).strftime("%H:%M UTC")
    return default


if __name__ == "__main__":
    sys.exit(main())
