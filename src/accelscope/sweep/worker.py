"""One configuration in its own process: load the model, measure, send the Result back.

The worker ignores SIGINT (the parent decides what Ctrl-C means), dies with its parent
(``PR_SET_PDEATHSIG`` on Linux, so a ``kill -9`` of the sweep leaves no orphans), and turns
every failure into a one-line reason for the parent to record.
"""

from __future__ import annotations

import ctypes
import importlib
import json
import os
import signal
import time
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from accelscope.backends.registry import get_backend
from accelscope.engine.accuracy_check import calibration_batches, load_accuracy_check
from accelscope.engine.run import measure_config
from accelscope.errors import AccelscopeError
from accelscope.hardware.fingerprint import Environment
from accelscope.measure.timer import TimerConfig
from accelscope.models.loading import load_model
from accelscope.spec import RunSpec, TensorSpec

__all__ = ["WorkerTask", "worker_main"]

_PR_SET_PDEATHSIG = 1
_PROGRESS_INTERVAL_S = 0.25


@dataclass(frozen=True)
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
                "environment": self.environment.to_dict(),
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
            environment=Environment.from_dict(data["environment"]),
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


def _die_with_parent(parent_pid: int) -> None:
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:
        return
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(1)


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0][:300] if lines else type(exc).__name__


def _run(task: WorkerTask, conn: Any) -> None:
    for plugin in task.plugins:
        importlib.import_module(plugin)
    model = load_model(
        task.model_ref,
        inputs=task.inputs,
        weights=Path(task.weights) if task.weights else None,
        trust_model_code=task.trust_model_code,
        eval_data=Path(task.eval_data) if task.eval_data else None,
        metric=task.metric,
    )
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


def worker_main(task_json: str, conn: Any, parent_pid: int) -> None:
    """Process entry point: run one task, send ``("result", json)`` or ``("error", reason)``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with_parent(parent_pid)
    warnings.simplefilter("ignore")  # runtime deprecation chatter would drown the sweep output
    try:
        _run(WorkerTask.from_json(task_json), conn)
    except MemoryError:
        conn.send(("error", "out of memory (MemoryError)"))
    except AccelscopeError as exc:
        conn.send(("error", exc.message))
    except BaseException as exc:  # noqa: BLE001 - every failure becomes a recorded reason
        conn.send(("error", f"{type(exc).__name__}: {_first_line(exc)}"))
    finally:
        conn.close()
