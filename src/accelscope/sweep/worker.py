"""One configuration in its own process: load the model, measure, send the Result back.

The worker ignores SIGINT (the parent decides what Ctrl-C means), dies with its parent
(``PR_SET_PDEATHSIG`` on Linux, so a ``kill -9`` of the sweep leaves no orphans), and turns
every failure into a one-line reason and its cause for the parent to record.
"""

from __future__ import annotations

import ctypes
import importlib
import json
import os
import signal
import sys
import time
import warnings
from dataclasses import asdict, dataclass, replace
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from accelscope.backends.base import Runner
from accelscope.backends.registry import get_backend
from accelscope.engine.accuracy_check import (
    calibration_batches,
    load_accuracy_check,
    save_accuracy_check,
    with_reference,
)
from accelscope.engine.configuration import measure_config
from accelscope.errors import AccelscopeError, OutOfMemoryError, exception_line
from accelscope.hardware.fingerprint import Environment, collect_environment
from accelscope.measurement.threads import pinned_threads
from accelscope.measurement.timer import TimerConfig
from accelscope.models.base import LoadedModel
from accelscope.models.inputs import make_batch
from accelscope.models.loading import load_model
from accelscope.result import Cause
from accelscope.serialise import dump, load
from accelscope.spec import RunSpec, TensorSpec

__all__ = ["InterleaveTask", "ReferenceTask", "WorkerTask", "main", "worker_main"]

_PR_SET_PDEATHSIG = 1
_PROGRESS_INTERVAL_S = 0.25


@dataclass(frozen=True, kw_only=True)
class WorkerTask:
    """Everything a worker needs, as plain data (it crosses a process boundary as JSON)."""

    spec: RunSpec
    model_ref: str
    environment: Environment
    timer: TimerConfig
    inputs: tuple[TensorSpec, ...] | None = None
    weights: str | None = None
    trust_model_code: bool = False
    accuracy_path: str | None = None
    plugins: tuple[str, ...] = ()
    seed: int = 0
    eval_data: str | None = None
    metric: str = "top1_accuracy"

    def to_json(self) -> str:
        """Serialise for the worker process."""
        return json.dumps(
            {
                "spec": self.spec.to_dict(),
                "model_ref": self.model_ref,
                "environment": dump(self.environment),
                "timer": asdict(self.timer),
                "inputs": None if self.inputs is None else [asdict(s) for s in self.inputs],
                "weights": self.weights,
                "trust_model_code": self.trust_model_code,
                "accuracy_path": self.accuracy_path,
                "plugins": list(self.plugins),
                "seed": self.seed,
                "eval_data": self.eval_data,
                "metric": self.metric,
            }
        )

    @classmethod
    def from_json(cls, text: str) -> WorkerTask:
        """Inverse of :meth:`to_json`."""
        data = json.loads(text)
        inputs = data["inputs"]
        return cls(
            spec=RunSpec.from_dict(data["spec"]),
            model_ref=data["model_ref"],
            environment=load(Environment, data["environment"]),
            timer=TimerConfig(**data["timer"]),
            inputs=None
            if inputs is None
            else tuple(TensorSpec(**{**s, "shape": tuple(s["shape"])}) for s in inputs),
            weights=data["weights"],
            trust_model_code=data["trust_model_code"],
            accuracy_path=data["accuracy_path"],
            plugins=tuple(data["plugins"]),
            seed=data["seed"],
            eval_data=data.get("eval_data"),
            metric=data.get("metric", "top1_accuracy"),
        )


@dataclass(frozen=True, kw_only=True)
class InterleaveTask:
    """Measure several configurations alternately in one process (A B C C B A per round), so
    that machine drift hits each one alike; ``task`` carries the model and its settings."""

    task: WorkerTask
    specs: tuple[RunSpec, ...]
    rounds: int = 6
    block_s: float = 0.25
    """Target seconds per block (a block is a fixed number of back-to-back calls)."""
    models: tuple[WorkerTask, ...] = ()
    """One task per spec when the specs come from different models (the gate's baseline and
    candidate files); empty: every spec runs ``task``'s model."""
    per_call: bool = False
    """Also time every call on its own (synchronised), for percentiles per configuration."""

    @property
    def spec(self) -> RunSpec:
        """The first configuration (names the worker process)."""
        return self.specs[0]

    def to_json(self) -> str:
        """Serialise for the worker process."""
        return json.dumps(
            {
                "kind": "interleave",
                "task": self.task.to_json(),
                "specs": [s.to_dict() for s in self.specs],
                "rounds": self.rounds,
                "block_s": self.block_s,
                "models": [m.to_json() for m in self.models],
                "per_call": self.per_call,
            }
        )

    @classmethod
    def from_json(cls, text: str) -> InterleaveTask:
        """Inverse of :meth:`to_json`."""
        data = json.loads(text)
        return cls(
            task=WorkerTask.from_json(data["task"]),
            specs=tuple(RunSpec.from_dict(s) for s in data["specs"]),
            rounds=int(data["rounds"]),
            block_s=float(data["block_s"]),
            models=tuple(WorkerTask.from_json(m) for m in data.get("models", [])),
            per_call=bool(data.get("per_call", False)),
        )


@dataclass(frozen=True, kw_only=True)
class ReferenceTask:
    """Compute the accuracy set's reference outputs in a worker: ``task.spec`` is the reference
    configuration (IEEE fp32 on the model's runtime and device), ``task.accuracy_path`` the set
    without them; the set with them is written to ``output_path``. On a GPU this keeps the
    sweep's parent off the device (no CUDA context, no model or allocator cache held there
    while the workers measure)."""

    task: WorkerTask
    output_path: str

    @property
    def spec(self) -> RunSpec:
        """The reference configuration (names the worker process)."""
        return self.task.spec

    def to_json(self) -> str:
        """Serialise for the worker process."""
        return json.dumps(
            {"kind": "reference", "task": self.task.to_json(), "output_path": self.output_path}
        )

    @classmethod
    def from_json(cls, text: str) -> ReferenceTask:
        """Inverse of :meth:`to_json`."""
        data = json.loads(text)
        return cls(task=WorkerTask.from_json(data["task"]), output_path=str(data["output_path"]))


def _die_with_parent(parent_pid: int) -> None:
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:
        return
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(1)


def _load(task: WorkerTask) -> LoadedModel:
    for plugin in task.plugins:
        importlib.import_module(plugin)
    return load_model(
        task.model_ref,
        inputs=task.inputs,
        weights=Path(task.weights) if task.weights else None,
        trust_model_code=task.trust_model_code,
        eval_data=Path(task.eval_data) if task.eval_data else None,
        metric=task.metric,
    )


def _run(task: WorkerTask, conn: Any) -> None:
    model = _load(task)
    backend = get_backend(task.spec.backend)
    check = load_accuracy_check(Path(task.accuracy_path)) if task.accuracy_path else None
    last_sent = [0.0]

    def progress(phase: str, count: int, elapsed_s: float, budget_s: float) -> None:
        now = time.monotonic()
        if now - last_sent[0] >= _PROGRESS_INTERVAL_S:
            last_sent[0] = now
            conn.send(("progress", phase, count, elapsed_s, budget_s))

    conn.send(("progress", "prepare", 0, 0.0, task.timer.budget_s))
    result = measure_config(
        model,
        task.spec,
        backend,
        task.environment,
        timer_config=task.timer,
        accuracy=check,
        calibration=calibration_batches(model, task.spec.batch_size),
        seed=task.seed,
        on_progress=progress,
    )
    conn.send(("result", result.to_json()))


_WARM_CALLS = 3
_SETTLE_WINDOW_S = 0.01
_SETTLE_MAX_S = 0.5
_IDLE_CPU_SHARE = 0.2


def _settle() -> None:
    """Wait until this process is idle: runtimes keep their worker threads spinning for a while
    after a call (ONNX Runtime, OpenMP), which would slow the next configuration's block. Waits
    in 10 ms windows until the process uses under 20 % of a core, at most 0.5 s."""
    began = time.perf_counter()
    while time.perf_counter() - began < _SETTLE_MAX_S:
        wall, cpu = time.perf_counter(), time.process_time()
        time.sleep(_SETTLE_WINDOW_S)
        if time.process_time() - cpu < _IDLE_CPU_SHARE * (time.perf_counter() - wall):
            return


def _timed_calls(runner: Runner, feed: Any, count: int, spec: RunSpec) -> list[float]:
    """``count`` calls, each synchronised and timed on its own: seconds per item."""
    times: list[float] = []
    for _ in range(count):
        began = time.perf_counter()
        runner.run(feed)
        runner.synchronize()
        times.append((time.perf_counter() - began) / spec.batch_size)
    return times


def _run_interleaved(task: InterleaveTask, conn: Any) -> None:
    """Prepare every configuration, size one block per configuration to ~``block_s``, then
    time blocks in the order A B C C B A each round; sends seconds per item of every block (and
    of every call with ``per_call``)."""
    sources = task.models or (task.task,) * len(task.specs)
    if len(sources) != len(task.specs):
        raise ValueError("an interleave task needs one model task per configuration")
    loaded: dict[str, LoadedModel] = {}
    for source in sources:
        if source.model_ref not in loaded:
            loaded[source.model_ref] = _load(source)
    runners: list[tuple[RunSpec, Runner, Any]] = []
    try:
        for spec, source in zip(task.specs, sources, strict=True):
            model = loaded[source.model_ref]
            conn.send(("progress", f"prepare {spec.label()}", 0, 0.0, task.block_s))
            with pinned_threads(spec.threads):
                runner = get_backend(spec.backend).prepare(
                    model, spec, calibration_batches(model, spec.batch_size)
                )
                runners.append((spec, runner, None))
                feed = runner.feed(make_batch(model.inputs, spec.batch_size, task.task.seed))
                runners[-1] = (spec, runner, feed)
        calls: list[int] = []
        for spec, runner, feed in runners:
            runner.activate()  # its fp32 math and device: the last prepared set theirs
            with pinned_threads(spec.threads):
                began = time.perf_counter()
                for _ in range(_WARM_CALLS):
                    runner.run(feed)
                    runner.synchronize()
                per_call_s = (time.perf_counter() - began) / _WARM_CALLS
            calls.append(max(1, round(task.block_s / max(per_call_s, 1e-9))))
        blocks: list[list[float]] = [[] for _ in runners]
        per_call: list[list[float]] = [[] for _ in runners]
        order = list(range(len(runners)))
        for round_index in range(task.rounds):
            for index in order + order[::-1]:
                spec, runner, feed = runners[index]
                runner.activate()
                _settle()
                with pinned_threads(spec.threads):
                    began = time.perf_counter()
                    if task.per_call:
                        per_call[index].extend(_timed_calls(runner, feed, calls[index], spec))
                    else:
                        for _ in range(calls[index]):
                            runner.run(feed)
                    runner.synchronize()
                    elapsed = time.perf_counter() - began
                blocks[index].append(elapsed / (calls[index] * spec.batch_size))
            conn.send(("progress", "interleave", round_index + 1, 0.0, float(task.rounds)))
    finally:
        for _, runner, _ in runners:
            runner.close()
    payload = {
        "keys": [spec.key for spec in task.specs],
        "calls_per_block": calls,
        "block_s_per_item": blocks,
        "call_s_per_item": per_call if task.per_call else None,
    }
    conn.send(("interleaved", json.dumps(payload)))


def _run_reference(task: ReferenceTask, conn: Any) -> None:
    """Load the model and the accuracy set, run the reference configuration on it, write the
    set with its reference outputs, and send the path."""
    if task.task.accuracy_path is None:
        raise ValueError("a reference task needs the accuracy set's path")
    model = _load(task.task)
    conn.send(("progress", f"reference {task.spec.label()}", 0, 0.0, 0.0))
    check = load_accuracy_check(Path(task.task.accuracy_path))
    check = with_reference(check, model, task.spec, task.task.environment)
    save_accuracy_check(check, Path(task.output_path))
    conn.send(("reference", task.output_path))


def _failure(exc: BaseException) -> tuple[str, Cause]:
    """The reason and the cause of the exception a task raised: out of memory for accelscope's
    :class:`~accelscope.errors.OutOfMemoryError`, Python's ``MemoryError``, torch's
    ``OutOfMemoryError`` and a runtime's error that says "out of memory" (one escaping the
    measurement, from loading or preparing); an error otherwise."""
    if isinstance(exc, MemoryError):
        return "out of memory (MemoryError)", Cause.OUT_OF_MEMORY
    if isinstance(exc, AccelscopeError):
        oom = isinstance(exc, OutOfMemoryError)
        return exc.message, Cause.OUT_OF_MEMORY if oom else Cause.ERROR
    reason = f"{type(exc).__name__}: {exception_line(exc)}"
    torch_oom = getattr(sys.modules.get("torch"), "OutOfMemoryError", None)
    oom = (torch_oom is not None and isinstance(exc, torch_oom)) or (
        "out of memory" in reason.lower()
    )
    return reason, Cause.OUT_OF_MEMORY if oom else Cause.ERROR


def worker_main(task_json: str, conn: Any, parent_pid: int) -> None:
    """Process entry point: run one task, send ``("result", json)`` (``("interleaved", json)``
    for an :class:`InterleaveTask`, ``("reference", path)`` for a :class:`ReferenceTask`) or
    ``("error", reason, cause)`` (a :class:`~accelscope.result.Cause` name: out of memory, or
    error)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with_parent(parent_pid)
    warnings.simplefilter("ignore")  # runtime deprecation chatter would drown the sweep output
    try:
        kind = json.loads(task_json).get("kind")
        if kind == "interleave":
            _run_interleaved(InterleaveTask.from_json(task_json), conn)
        elif kind == "reference":
            _run_reference(ReferenceTask.from_json(task_json), conn)
        else:
            _run(WorkerTask.from_json(task_json), conn)
    except BaseException as exc:  # noqa: BLE001 - every failure becomes a recorded reason
        reason, cause = _failure(exc)
        conn.send(("error", reason, cause.value))
    finally:
        conn.close()


def main(argv: list[str] | None = None) -> None:
    """``python -c "from accelscope.sweep.worker import main; main()" FD PARENT_PID``: the
    entry point under another
    interpreter (:class:`accelscope.sweep.executor.InterpreterExecutor`). The task arrives on
    stdin; messages go to the inherited pipe ``FD``. A plain task's environment is collected
    here, since this interpreter's libraries are the ones measured."""
    fd_text, parent_text = argv if argv is not None else sys.argv[1:3]
    conn = Connection(int(fd_text), readable=False)
    task_json = sys.stdin.read()
    if json.loads(task_json).get("kind") not in ("interleave", "reference"):
        task = WorkerTask.from_json(task_json)
        task_json = replace(task, environment=collect_environment()).to_json()
    worker_main(task_json, conn, int(parent_text))


if __name__ == "__main__":
    main()
