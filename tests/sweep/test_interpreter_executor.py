"""The worker under another interpreter: why it could not start is its one-line failure, and
each failure's cause is decided where it happened (a worker of an accelscope from before causes
sends none: its reason is read the old way).

Covers: accelscope.sweep.executor, accelscope.sweep.worker."""

from __future__ import annotations

from pathlib import Path

import pytest

from accelscope.errors import BadInputError, MeasurementError, OutOfMemoryError
from accelscope.hardware.fingerprint import Environment
from accelscope.measurement.timer import TimerConfig
from accelscope.result import Cause
from accelscope.spec import Precision, RunSpec
from accelscope.sweep import executor as executor_module
from accelscope.sweep.executor import InterpreterExecutor
from accelscope.sweep.worker import WorkerTask, _failure


def _task(environment: Environment) -> WorkerTask:
    spec = RunSpec(model="mlp", backend="eager", precision=Precision.FP32, batch_size=1, threads=1)
    return WorkerTask(
        spec=spec, model_ref="mlp", environment=environment, timer=TimerConfig(budget_s=0.05)
    )


def test_an_interpreter_without_accelscope_fails_with_its_own_last_line(
    tmp_path: Path, environment: Environment
) -> None:
    python = tmp_path / "python"
    python.write_text('#!/bin/sh\ncat > /dev/null\necho "No module named accelscope" >&2\nexit 1\n')
    python.chmod(0o755)
    outcome = InterpreterExecutor(str(python), timeout_s=30).run(_task(environment))
    assert outcome.result is None
    assert outcome.failure == (
        "crashed: worker exited with code 1 and no result (No module named accelscope)"
    )
    assert outcome.cause is Cause.CRASHED


def test_a_missing_interpreter_and_a_hanging_one_are_recorded_not_raised(
    tmp_path: Path, environment: Environment
) -> None:
    outcome = InterpreterExecutor(str(tmp_path / "nope"), timeout_s=30).run(_task(environment))
    assert outcome.failure.startswith(f"cannot start {tmp_path / 'nope'}")
    assert outcome.cause is Cause.ERROR
    hang = tmp_path / "hang"
    hang.write_text("#!/bin/sh\nexec sleep 60\n")
    hang.chmod(0o755)
    outcome = InterpreterExecutor(str(hang), timeout_s=0.5).run(_task(environment))
    assert outcome.failure == "timeout: no result after 0.5 s"
    assert outcome.cause is Cause.TIMEOUT


@pytest.mark.parametrize(
    ("error", "reason", "cause"),
    [
        (MemoryError(), "out of memory (MemoryError)", Cause.OUT_OF_MEMORY),
        (OutOfMemoryError("out of memory at batch 8 (x)"), None, Cause.OUT_OF_MEMORY),
        (
            RuntimeError("CUDA out of memory. Tried to allocate 2 GiB"),
            "RuntimeError: CUDA out of memory. Tried to allocate 2 GiB",
            Cause.OUT_OF_MEMORY,
        ),
        (MeasurementError("model m failed during measurement: boom"), None, Cause.ERROR),
        (BadInputError("no such model (says nothing of memory)"), None, Cause.ERROR),
        (ValueError("bad shape"), "ValueError: bad shape", Cause.ERROR),
    ],
)
def test_the_worker_decides_the_cause_of_what_it_raised(
    error: BaseException, reason: str | None, cause: Cause
) -> None:
    said, decided = _failure(error)
    assert decided is cause
    assert said == (reason or str(error))


@pytest.mark.parametrize(
    ("message", "cause"),
    [
        (("error", "CUBLAS_STATUS_ALLOC_FAILED", "out_of_memory"), Cause.OUT_OF_MEMORY),
        (("error", "out of memory (MemoryError)", "error"), Cause.ERROR),  # the name decides
        (("error", "x", "a-cause-from-a-newer-worker"), Cause.UNKNOWN),
        (("error", "out of memory (MemoryError)"), Cause.OUT_OF_MEMORY),  # an older worker
        (("error", "ValueError: bad"), Cause.UNKNOWN),
    ],
)
def test_a_worker_error_carries_its_cause_by_name(message: tuple[str, ...], cause: Cause) -> None:
    outcome = executor_module._error(message)
    assert (outcome.result, outcome.failure, outcome.cause) == (None, message[1], cause)
