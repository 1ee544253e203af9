"""``gate``: the baseline and the candidate measured alternately in one invocation, then judged.

The two sides are variants that can both be built here: two model files (``--baseline``), one
model file at a git revision and in the working tree (``--baseline-ref``), two option sets
(``--baseline-backend``/``-precision``/``-option``...) or two Python environments
(``--baseline-python``/``--candidate-python``, each with accelscope installed).

Every round is a fresh worker process (the statistical unit), and rounds alternate which side
goes first. Two isolations:

* ``shared`` (default when both sides run under this interpreter): one worker per round loads
  both sides and times them in alternating blocks (A B B A ..., every call timed), so what a
  process does to speed (memory placement, frequency, a neighbour's burst) hits both alike and
  cancels in that round's ratio;
* ``process`` (always for two interpreters): each side in its own worker, A B then B A.

Rounds continue past ``rounds`` up to ``max_rounds`` while the decision is inconclusive. The
decision is :func:`accelscope.compare.gate.decide`.
"""

from __future__ import annotations

import math
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from accelscope.backends.registry import get_backend
from accelscope.commands._lifecycle import CommandRun, check_paths
from accelscope.compare.gate import (
    GateDecision,
    GateThresholds,
    ProcessFigures,
    decide,
    round_order,
)
from accelscope.engine.accuracy_check import build_accuracy_check, save_accuracy_check
from accelscope.errors import AccelscopeError, BadInputError
from accelscope.hardware.fingerprint import Environment, collect_environment
from accelscope.measurement.threads import available_cores
from accelscope.measurement.timer import TimerConfig
from accelscope.models.base import LoadedModel
from accelscope.models.factory import is_factory_ref
from accelscope.models.loading import load_model
from accelscope.result import Result, Status
from accelscope.serialise import dump
from accelscope.spec import Device, Precision, RunSpec, TensorSpec
from accelscope.store.sqlite import DEFAULT_STORE_PATH
from accelscope.sweep.executor import Executor, InterpreterExecutor, LocalExecutor, WorkerOutcome
from accelscope.sweep.worker import InterleaveTask, WorkerTask

__all__ = [
    "GATE_DOCUMENT",
    "ISOLATIONS",
    "ROUND_DOCUMENT",
    "GateOutcome",
    "GateRequest",
    "Variant",
    "check_interpreter",
    "gate",
]

ISOLATIONS = ("auto", "shared", "process")

GATE_DOCUMENT = "gate"
"""The stored document of a gate run: settings, every process's figures and the decision."""
ROUND_DOCUMENT = "gate_round"
"""One round's processes, stored as the round ends (an interrupted gate keeps its rounds)."""


@dataclass(frozen=True, kw_only=True)
class Variant:
    """One side: a model and how to run it. ``git_ref``: the model file as it was at that git
    revision; ``python``: another interpreter (virtual environment) to measure it under."""

    model: str
    backend: str = "eager"
    precision: Precision = Precision.FP32
    batch_size: int = 8
    threads: int | None = None
    device: Device = Device.CPU
    options: tuple[tuple[str, str], ...] = ()
    git_ref: str | None = None
    python: str | None = None

    def describe(self) -> str:
        """``model.py:build @ main, eager/fp32/b8, python .venv-old/bin/python``."""
        text = self.model + (f" @ {self.git_ref}" if self.git_ref else "")
        options = "".join(f"/{k}={v}" for k, v in self.options)
        text += f", {self.backend}/{self.precision.value}/b{self.batch_size}{options}"
        return text + (f", python {self.python}" if self.python else "")


@dataclass(frozen=True, kw_only=True)
class GateRequest:
    """What ``accelscope gate`` should do."""

    baseline: Variant
    candidate: Variant
    rounds: int = 6
    max_rounds: int = 20
    budget_s: float = 1.0
    """Sampling seconds per process (after its warm-up)."""
    thresholds: GateThresholds = field(default_factory=GateThresholds)
    inputs: tuple[TensorSpec, ...] | None = None
    weights: Path | None = None
    eval_data: Path | None = None
    trust_model_code: bool = False
    seed: int = 0
    timeout_s: float = 600.0
    isolation: str = "auto"
    """``shared``, ``process`` or ``auto`` (shared unless a side runs under another Python)."""
    blocks: int = 3
    """Shared isolation: block pairs per side and process (A B B A = one pair per side)."""


@dataclass(frozen=True, kw_only=True)
class GateOutcome:
    """The decision, every process's figures, where it was stored and how long it took."""

    decision: GateDecision
    processes: tuple[ProcessFigures, ...]
    baseline: str
    candidate: str
    run_id: str | None
    store_path: Path | None
    wall_s: float
    document: dict[str, Any]
    """The stored ``gate`` document (settings, processes, decision): what views render."""


RoundDone = Callable[[int, GateDecision], None]


def _file_part(model: str) -> str:
    return model.rsplit(":", 1)[0] if is_factory_ref(model) else model


def materialize_git_ref(model: str, ref: str, workdir: Path) -> str:
    """The model reference with its file replaced by that file at git revision ``ref``
    (written into ``workdir``, same name). One-line errors for a file outside git or a bad
    revision."""
    file_text = _file_part(model)
    path = Path(file_text).resolve()
    if not path.is_file():
        raise BadInputError(f"--baseline-ref needs a model file; {file_text} is not a file")

    if ref.startswith("-") or not ref.strip():
        raise BadInputError(f"bad git revision {ref!r}")

    def git(*args: str) -> bytes:
        try:
            done = subprocess.run(
                ["git", "-C", str(path.parent), *args], capture_output=True, check=False
            )
        except OSError as exc:
            raise BadInputError(f"cannot run git: {exc.strerror or exc}") from None
        if done.returncode != 0:
            lines = done.stderr.decode("utf-8", "replace").strip().splitlines() or ["failed"]
            raise BadInputError(f"cannot read {file_text} at git revision {ref}: {lines[-1]}")
        return done.stdout

    top = Path(git("rev-parse", "--show-toplevel").decode().strip())
    try:
        relative = path.relative_to(top.resolve()).as_posix()
    except ValueError:
        raise BadInputError(f"{file_text} is not inside the git work tree {top}") from None
    content = git("show", f"{ref}:{relative}")
    target = workdir / ref.replace("/", "_") / path.name
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(content)
    return str(target) + model[len(file_text) :]


def _figures(result: Result, side: str, round_index: int) -> ProcessFigures:
    """A separate-process side's figures from its Result."""
    measurement = result.measurement
    assert measurement is not None
    per_item = np.asarray(measurement.samples_s) / measurement.items_per_call
    memory = result.memory
    accuracy = result.accuracy
    return ProcessFigures(
        side=side,
        round_index=round_index,
        median_s=float(np.median(per_item)),
        p99_s=float(np.percentile(per_item, 99)),
        samples=int(per_item.size),
        peak_memory_bytes=None if memory is None else float(memory.rss_peak_bytes),
        accuracy=None if accuracy is None else accuracy.metric_value,
    )


def _executor(variant: Variant, timeout_s: float) -> Executor:
    if variant.python:
        return InterpreterExecutor(variant.python, timeout_s)
    return LocalExecutor(timeout_s)


def gate(
    request: GateRequest,
    *,
    store_path: Path | None = DEFAULT_STORE_PATH,
    environment: Environment | None = None,
    executors: dict[str, Executor] | None = None,
    on_round: RoundDone | None = None,
    command_line: str | None = None,
) -> GateOutcome:
    """Validate both sides, then measure them alternately and decide. ``executors`` (by side)
    replaces the process executors (tests). A worker failure stops the gate with a one-line
    error (exit 1): a candidate that cannot run does not pass."""
    if request.rounds < 2:
        raise BadInputError(f"the gate needs at least 2 rounds, got {request.rounds}")
    if request.max_rounds < request.rounds:
        raise BadInputError(
            f"--max-rounds ({request.max_rounds}) is below --rounds ({request.rounds})"
        )
    if not math.isfinite(request.budget_s) or request.budget_s <= 0:
        raise BadInputError(f"the budget per process must be positive, got {request.budget_s}")
    shared = _shared(request)
    if request.eval_data is not None and request.baseline.python is not None:
        raise BadInputError(
            "--eval-data scores both sides on a set prepared under this interpreter; it cannot "
            "be combined with --baseline-python"
        )
    env = environment or collect_environment()
    check_paths(store_path)
    if executors is None:
        for variant in (request.baseline, request.candidate):
            if variant.python is not None:
                check_interpreter(variant.python)
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="accelscope-gate-") as tmp:
        workdir = Path(tmp)
        sides: dict[str, Variant] = {"baseline": request.baseline, "candidate": request.candidate}
        prepared = {name: _task(request, variant, env, workdir) for name, variant in sides.items()}
        tasks = {name: task for name, (task, _) in prepared.items()}
        accuracy_path = _accuracy_file(prepared["baseline"][1], request.seed, workdir)
        chosen = executors or {
            name: _executor(variant, request.timeout_s) for name, variant in sides.items()
        }
        settings = {
            "isolation": "shared" if shared else "process",
            "baseline": request.baseline.describe(),
            "candidate": request.candidate.describe(),
            "rounds": request.rounds,
            "max_rounds": request.max_rounds,
            "budget_s": request.budget_s,
            "max_slowdown": request.thresholds.max_slowdown,
            "max_accuracy_drop": request.thresholds.max_accuracy_drop,
            "max_p99_slowdown": request.thresholds.max_p99_slowdown,
        }
        run = CommandRun(
            "gate",
            tasks["candidate"].spec.model,
            env,
            settings,
            store_path=store_path,
            command_line=command_line,
        )
        processes: list[ProcessFigures] = []
        with run:
            accuracy = _accuracy_runs(tasks, accuracy_path, chosen, sides) if shared else {}
            decision = None
            for round_index in range(request.max_rounds):
                order = round_order(round_index)
                if shared:
                    figures = _shared_round(request, tasks, order, round_index, chosen, sides)
                    if round_index == 0:
                        figures = [replace(f, accuracy=accuracy.get(f.side)) for f in figures]
                else:
                    figures = []
                    for side in order:
                        task = tasks[side]
                        if round_index == 0 and accuracy_path is not None:
                            task = replace(task, accuracy_path=str(accuracy_path))
                        result = _result(chosen[side].run(task), side, sides, round_index)
                        run.add_result(result)
                        figures.append(_figures(result, side, round_index))
                processes.extend(figures)
                run.add_document(ROUND_DOCUMENT, {"processes": [dump(f) for f in figures]})
                decision = decide(processes, request.thresholds)
                if on_round is not None:
                    on_round(round_index + 1, decision)
                if round_index + 1 >= request.rounds and decision.status.value != "inconclusive":
                    break
            assert decision is not None
            document = {
                "settings": settings,
                "processes": [dump(p) for p in processes],
                "decision": decision.to_dict(),
            }
            run.add_document(GATE_DOCUMENT, document)
    return GateOutcome(
        decision=decision,
        processes=tuple(processes),
        baseline=request.baseline.describe(),
        candidate=request.candidate.describe(),
        run_id=run.run_id,
        store_path=run.stored_path,
        wall_s=time.monotonic() - began,
        document=document,
    )


def _task(
    request: GateRequest, variant: Variant, env: Environment, workdir: Path
) -> tuple[WorkerTask, LoadedModel | None]:
    """The side's worker task, and its model when it was loaded here (``None`` under another
    interpreter)."""
    model_ref = variant.model
    if variant.git_ref is not None:
        model_ref = materialize_git_ref(model_ref, variant.git_ref, workdir)
    backend = get_backend(variant.backend)
    threads = variant.threads if variant.threads is not None else available_cores()
    digest = ""
    model: LoadedModel | None = None
    if variant.python is None:  # loadable here: validate now, not in round 1
        model = load_model(
            model_ref,
            inputs=request.inputs,
            weights=request.weights,
            trust_model_code=request.trust_model_code,
            eval_data=request.eval_data,
        )
        model_ref, digest = model.ref, model.digest
    spec = RunSpec(
        model=model_ref,
        backend=backend.name,
        precision=variant.precision,
        batch_size=variant.batch_size,
        threads=threads,
        device=variant.device,
        model_digest=digest,
        options=variant.options,
    )
    if model is not None:
        backend.supports(model, spec, env).require(f"{spec.label()} for {model.ref}")
    task = WorkerTask(
        spec=spec,
        model_ref=model_ref,
        environment=env,
        timer=TimerConfig(budget_s=request.budget_s, target_rel_ci=0.001, warmup_min_s=0.2),
        inputs=request.inputs,
        weights=str(request.weights) if request.weights else None,
        trust_model_code=request.trust_model_code,
        seed=request.seed,
        eval_data=str(request.eval_data) if request.eval_data else None,
    )
    return task, model


def _accuracy_file(model: LoadedModel | None, seed: int, workdir: Path) -> Path | None:
    """The eval set both sides are scored on (``None``: no eval data, or the baseline runs
    under another interpreter and was not loaded here)."""
    if model is None or model.eval_data is None:
        return None
    check = build_accuracy_check(model, 1, seed)
    return save_accuracy_check(check, workdir / "accuracy.pt")


def check_interpreter(python: str, timeout_s: float = 120.0) -> None:
    """Refuse (exit 2, before any measuring) an interpreter that cannot run accelscope's
    worker: missing, not executable, or without accelscope installed."""
    try:
        done = subprocess.run(
            [python, "-c", "import accelscope.sweep.worker"],
            capture_output=True,
            timeout=timeout_s,
            check=False,
        )
    except OSError as exc:
        raise BadInputError(f"cannot run {python}: {exc.strerror or exc}") from None
    except subprocess.TimeoutExpired:
        raise BadInputError(f"{python} did not import accelscope in {timeout_s:g} s") from None
    if done.returncode != 0:
        lines = done.stderr.decode("utf-8", "replace").strip().splitlines() or ["failed"]
        raise BadInputError(f"{python} cannot run accelscope's worker: {lines[-1][:200]}")


def _shared(request: GateRequest) -> bool:
    if request.isolation not in ISOLATIONS:
        raise BadInputError(
            f"unknown isolation {request.isolation!r}; choose {', '.join(ISOLATIONS)}"
        )
    other_python = request.baseline.python is not None or request.candidate.python is not None
    if request.isolation == "shared" and other_python:
        raise BadInputError(
            "--isolation shared needs both sides under one interpreter; two Pythons are "
            "measured with --isolation process"
        )
    return request.isolation == "shared" or (request.isolation == "auto" and not other_python)


def _result(outcome: WorkerOutcome, side: str, sides: dict[str, Variant], index: int) -> Result:
    result = outcome.result
    if result is None or result.status is not Status.OK:
        reason = outcome.failure or (result.status_reason if result else "")
        raise AccelscopeError(
            f"gate stopped: the {side} ({sides[side].describe()}) failed in round {index + 1}: "
            f"{reason or 'no result'}"
        )
    return result


def _shared_round(
    request: GateRequest,
    tasks: dict[str, WorkerTask],
    order: tuple[str, str],
    round_index: int,
    executors: dict[str, Executor],
    sides: dict[str, Variant],
) -> list[ProcessFigures]:
    """One worker timing both sides in alternating blocks, every call timed; its first round
    of blocks (A B B A) is a warm-up: caches, allocator and frequency settle in it."""
    first = tasks[order[0]]
    task = InterleaveTask(
        task=first,
        specs=tuple(tasks[side].spec for side in order),
        models=tuple(tasks[side] for side in order),
        rounds=request.blocks + 1,  # the first in-process round warms up and is dropped
        block_s=request.budget_s / (2 * request.blocks),
        per_call=True,
    )
    outcome = executors[order[0]].run(task)
    timings = outcome.interleaved
    if timings is None or not timings.get("call_s_per_item"):
        both = f"{sides['baseline'].describe()} / {sides['candidate'].describe()}"
        raise AccelscopeError(
            f"gate stopped: round {round_index + 1} ({both}) failed: "
            f"{outcome.failure or 'no timings'}"
        )
    figures = []
    per_block = timings["calls_per_block"]
    for index, (side, calls) in enumerate(zip(order, timings["call_s_per_item"], strict=True)):
        values = np.asarray(calls[2 * int(per_block[index]) :], dtype=float)
        figures.append(
            ProcessFigures(
                side=side,
                round_index=round_index,
                median_s=float(np.median(values)),
                p99_s=float(np.percentile(values, 99)),
                samples=int(values.size),
            )
        )
    return sorted(figures, key=lambda f: f.side)


def _accuracy_runs(
    tasks: dict[str, WorkerTask],
    accuracy_path: Path | None,
    executors: dict[str, Executor],
    sides: dict[str, Variant],
) -> dict[str, float | None]:
    """Shared isolation times blocks only: the metric comes from one scored run per side."""
    if accuracy_path is None:
        return {}
    scores: dict[str, float | None] = {}
    for side, task in tasks.items():
        scored = replace(
            task,
            accuracy_path=str(accuracy_path),
            timer=TimerConfig(budget_s=0.05, min_samples=2, warmup_iters=1, warmup_min_s=0.0),
        )
        result = _result(executors[side].run(scored), side, sides, 0)
        scores[side] = None if result.accuracy is None else result.accuracy.metric_value
    return scores
