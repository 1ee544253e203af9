"""The worker under another interpreter: why it could not start is its one-line failure."""

from __future__ import annotations

from pathlib import Path

from accelscope.hardware.fingerprint import Environment
from accelscope.measurement.timer import TimerConfig
from accelscope.spec import Precision, RunSpec
from accelscope.sweep.executor import InterpreterExecutor
from accelscope.sweep.worker import WorkerTask


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


def test_a_missing_interpreter_and_a_hanging_one_are_recorded_not_raised(
    tmp_path: Path, environment: Environment
) -> None:
    outcome = InterpreterExecutor(str(tmp_path / "nope"), timeout_s=30).run(_task(environment))
    assert outcome.failure.startswith(f"cannot start {tmp_path / 'nope'}")
    hang = tmp_path / "hang"
    hang.write_text("#!/bin/sh\nexec sleep 60\n")
    hang.chmod(0o755)
    outcome = InterpreterExecutor(str(hang), timeout_s=0.5).run(_task(environment))
    assert outcome.failure == "timeout: no result after 0.5 s"
